"""Integration: every bad request gets a precise status and qdpd keeps serving.

The daemon runs with small budgets (with_qdpd.sh ... --device-budget 16777216 --client-budget
8388608) so that infeasible requests are cheap to make. After every refused call, Status must
still answer.
"""

import os
import socket
import sys
import unittest

import grpc
import numpy as np

import qdpc
import qdpref

SC = grpc.StatusCode
DEVICE_BUDGET = 16 << 20  # per device, as with_qdpd.sh is told in tests/integration/meson.build
CLIENT_BUDGET = 8 << 20


class Robustness(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = qdpc.Client()
        cls.pb = cls.c.pb
        cls.max_qubits = cls.c.status().max_qubits

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def still_serving(self, what):
        st = self.c.status()
        self.assertGreater(len(st.devices), 0, f"Status after {what}")

    def refused(self, what, fn, code, fields=None, words=()):
        """fn() must fail with `code` (or one of a tuple of codes); the ErrorDetail's field must
        start with one of `fields` and the message must contain every string of `words`.
        Returns the RpcError."""
        with self.assertRaises(grpc.RpcError, msg=what) as cm:
            fn()
        e = cm.exception
        codes = code if isinstance(code, tuple) else (code,)
        self.assertIn(e.code(), codes, f"{what}: {e.code()} {e.details()}")
        msg = e.details() or ""
        self.assertTrue(msg, f"{what}: empty status message")
        if fields is not None:
            d = self.c.error_detail(e)
            self.assertIsNotNone(d, f"{what}: no qdp-error-bin trailing metadata")
            self.assertTrue(any(d.field.startswith(f) for f in fields),
                            f"{what}: field '{d.field}' is not one of {fields} ({msg})")
            self.assertTrue(d.code_name.startswith("QDP_ERR_"), f"{what}: {d.code_name}")
        for w in words:
            self.assertIn(w, msg, f"{what}: message lacks '{w}': {msg}")
        self.still_serving(what)
        return e

    def encode_req(self, r):
        return lambda: self.c.call("Encode", r)

    # ---- the matrix ----

    def test_every_validation_failure_is_invalid_argument_naming_the_field(self):
        c = self.c
        INPUT = ("input",)
        f64 = lambda *v: np.array(v, np.float64)  # noqa: E731
        nan, inf = float("nan"), float("inf")
        cases = [
            ("qubits 0", c.request("amplitude", 0, f64(1.0)), ("qubits",), ["0"]),
            ("qubits 61", c.request("phase", 61, np.zeros(61)), ("qubits",), ["61"]),
            ("encoding unspecified", c.request(0, 2, f64(1, 2, 3, 4)), ("encoding",), []),
            ("encoding 42", c.request(42, 2, f64(1, 2, 3, 4)), ("encoding",), ["42"]),
            ("output float32", c.request("amplitude", 2, f64(1, 2), dtype="float32"),
             ("output_dtype",), []),
            ("empty input", c.request("amplitude", 2, None, input_dtype="float64"), INPUT, []),
            ("amplitude 5 values for 2 qubits", c.request("amplitude", 2, f64(1, 2, 3, 4, 5)),
             INPUT, ["5"]),
            ("angle 2 values for 3 qubits", c.request("angle", 3, f64(0.1, 0.2)), INPUT, ["2"]),
            ("iqp 3 values for 3 qubits", c.request("iqp", 3, f64(0.1, 0.2, 0.3)), INPUT, ["3"]),
            ("iqp-z 4 values for 3 qubits", c.request("iqp-z", 3, f64(1, 2, 3, 4)), INPUT, []),
            ("amplitude zero norm", c.request("amplitude", 2, f64(0, 0, 0, 0)), INPUT, []),
            ("amplitude NaN", c.request("amplitude", 2, f64(1, nan, 0, 0)), INPUT, []),
            ("amplitude Inf", c.request("amplitude", 2, f64(1, inf, 0, 0)), INPUT, []),
            ("angle Inf", c.request("angle", 2, f64(inf, 0.1)), INPUT, []),
            ("phase NaN", c.request("phase", 2, f64(0.1, nan)), INPUT, []),
            ("iqp -Inf", c.request("iqp", 2, f64(0.1, 0.2, -inf)), INPUT, []),
            ("basis 1.5", c.request("basis", 3, f64(1.5)), INPUT, ["1.5"]),
            ("basis -1", c.request("basis", 3, f64(-1)), INPUT, ["-1"]),
            ("basis 8 for 3 qubits", c.request("basis", 3, f64(8)), INPUT, ["8"]),
            ("basis NaN", c.request("basis", 3, f64(nan)), INPUT, []),
            ("basis int64 -3", c.request("basis", 3, np.array([-3], np.int64)), INPUT, ["-3"]),
            ("batch with a zero-norm row",
             c.request("amplitude", 2, np.array([[1, 2, 3, 4], [0, 0, 0, 0], [1, 0, 0, 0]],
                                                np.float64)), INPUT, ["1"]),
            ("input dtype complex64", c.request("amplitude", 2, f64(1, 2), input_dtype="complex64"),
             ("input.dtype",), []),
            ("rows 3 of 4 values", c.request("amplitude", 2, f64(1, 2, 3, 4), rows=3), INPUT, []),
            ("cols 3 of 4 values", c.request("amplitude", 2, f64(1, 2, 3, 4), cols=3), INPUT, []),
            ("unknown device", c.request("phase", 2, f64(0.1, 0.2), devices=["cpu:9"]),
             ("placement.devices",), ["cpu:9"]),
            ("malformed device", c.request("phase", 2, f64(0.1, 0.2), devices=["gpu-zero"]),
             ("placement.devices",), ["gpu-zero"]),
            ("policy 99", c.request("phase", 2, f64(0.1, 0.2), policy=99),
             ("placement.policy",), ["99"]),
            ("even over 3 devices",
             c.request("phase", 4, f64(0.1, 0.2, 0.3, 0.4), policy="even",
                       devices=["cpu:0", "cpu:1", "cpu:2"]), ("placement",), ["3"]),
        ]
        if self.max_qubits and self.max_qubits < 60:
            q = self.max_qubits + 1
            cases.append((f"qubits {q} > max {self.max_qubits}",
                          c.request("phase", q, np.zeros(q)), ("qubits",), [str(q)]))
        # 12 bytes are not a whole number of float64 values.
        r = c.request("amplitude", 2, f64(1, 2))
        r.input.data = r.input.data[:12]
        cases.append(("12 bytes of float64", r, INPUT, ["12"]))
        # A dry run reads the request's shape, not its values: it must refuse what is wrong
        # with the shape, and plan what is wrong only in the values (which Encode refuses).
        by_value = {"amplitude zero norm", "amplitude NaN", "amplitude Inf", "angle Inf",
                    "phase NaN", "iqp -Inf", "basis 1.5", "basis -1", "basis 8 for 3 qubits",
                    "basis NaN", "basis int64 -3", "batch with a zero-norm row"}
        for what, req, fields, words in cases:
            with self.subTest(what):
                self.refused(what, self.encode_req(req), SC.INVALID_ARGUMENT, fields, words)
                if what not in by_value:
                    self.refused("plan: " + what, lambda: self.c.call("Plan", req),
                                 SC.INVALID_ARGUMENT, fields)

    def test_bad_server_file_and_shared_memory_are_refused(self):
        c = self.c
        # Named but not handed over: the daemon opens nothing for a caller, whatever the path.
        missing = os.path.join(os.environ["QDP_TEST_DIR"], "missing.npy")
        r = c.request("amplitude", 2, None, path=missing, hand_over=False)
        e = self.refused("server file not handed over", self.encode_req(r),
                         SC.PERMISSION_DENIED, ("input.fd_ticket",), ("open it yourself",))
        self.assertIn("missing.npy", e.details())
        m = self.pb.SharedMemory()
        m.name = "/qdp-it-no-such-region"
        m.length = 32
        r = c.request("amplitude", 2, None, input_dtype="float64", shm=m, hand_over=False)
        e = self.refused("shm not handed over", self.encode_req(r), SC.PERMISSION_DENIED)
        self.assertIn("qdp-it-no-such-region", e.details())
        # A ticket that names nothing handed over, and one used twice.
        r = c.request("amplitude", 2, None, path=missing, hand_over=False)
        r.input.fd_ticket = "t" + "0" * 32
        self.refused("unknown ticket", self.encode_req(r), SC.NOT_FOUND, ("input.fd_ticket",))
        good = os.path.join(os.environ["QDP_TEST_DIR"], "good.npy")
        np.save(good, np.array([3.0, 4.0]))
        r = c.request("amplitude", 1, None, path=good)
        st = c.call("Encode", r).state
        self.assertEqual(st.qubits, 1)
        c.release(st)
        self.refused("ticket used twice", self.encode_req(r), SC.NOT_FOUND)
        # Not a .npy file: garbage bytes.
        bad = os.path.join(os.environ["QDP_TEST_DIR"], "garbage.npy")
        with open(bad, "wb") as f:
            f.write(b"this is not numpy" * 10)
        r = c.request("amplitude", 2, None, path=bad)
        self.refused("garbage .npy", self.encode_req(r), SC.INVALID_ARGUMENT)

    def code_of(self, fn):
        try:
            fn()
        except grpc.RpcError as e:
            return e.code()
        self.fail("the call succeeded")

    def test_cuda_ipc_input_is_refused_on_the_cpu_backend_naming_what_it_owns(self):
        def req(uuid, handle=bytes(64)):
            r = self.pb.EncodeRequest(encoding=qdpc.ENCODINGS["amplitude"], qubits=2)
            r.input.dtype, r.input.rows, r.input.cols = qdpc.DTYPES["float64"], 1, 4
            r.input.cuda_ipc.ipc_handle = handle
            r.input.cuda_ipc.device_uuid = uuid
            return r
        uuid = "GPU-00000000-1111-2222-3333-444444444444"
        self.refused("unknown GPU", self.encode_req(req(uuid)), grpc.StatusCode.FAILED_PRECONDITION,
                     fields=["input.cuda_ipc.device_uuid"],
                     words=[uuid, "is not one this daemon owns", "cpu:0", "GPUs"])
        self.refused("short handle", self.encode_req(req(uuid, bytes(8))),
                     grpc.StatusCode.INVALID_ARGUMENT, fields=["input.cuda_ipc.ipc_handle"],
                     words=["8 bytes"])
        self.refused("plan too", lambda: self.c.call("Plan", req(uuid)),
                     grpc.StatusCode.FAILED_PRECONDITION, words=["is not one this daemon owns"])

    def test_out_is_refused_on_the_cpu_backend_after_the_requests_own_faults(self):
        """EncodeRequest.out on host memory: the request's own faults first, naming their
        fields (so that they are found without a GPU), then the backend with what to do; the
        dry run as the encode, and nothing kept."""
        def req(handle=bytes(64), nbytes=4 * 16, offset=0, views=False):
            r = self.c.request("angle", 2, np.array([0.1, 0.2]))  # 4 complex128 amplitudes
            r.out.ipc_handle, r.out.bytes, r.out.offset = handle, nbytes, offset
            r.out.device_uuid = "GPU-00000000-1111-2222-3333-444444444444"
            r.views = views
            return r
        self.refused("cpu backend", self.encode_req(req()), SC.FAILED_PRECONDITION,
                     fields=["out"], words=["mesh is cpu:", "(host memory)", "leave out unset"])
        self.refused("plan too", lambda: self.c.call("Plan", req()), SC.FAILED_PRECONDITION,
                     fields=["out"], words=["host memory"])
        self.refused("short handle", self.encode_req(req(handle=bytes(8))), SC.INVALID_ARGUMENT,
                     fields=["out.ipc_handle"], words=["8 bytes"])
        self.refused("with views", self.encode_req(req(views=True)), SC.INVALID_ARGUMENT,
                     fields=["views"], words=["exclude each other"])
        self.refused("misaligned", self.encode_req(req(offset=8)), SC.INVALID_ARGUMENT,
                     fields=["out.offset"], words=["not a multiple of 16 B"])
        e = self.refused("too small", self.encode_req(req(nbytes=63)), SC.INVALID_ARGUMENT,
                         fields=["out.bytes"], words=["needs 64 B but out offers 63 B"])
        d = self.c.error_detail(e)
        self.assertEqual((d.need_bytes, d.free_bytes), (64, 63))
        self.assertEqual(list(self.c.call("List", self.pb.ListRequest()).states), [])

    def test_infeasible_request_is_resource_exhausted_with_the_numbers(self):
        # 2^23 complex128 amplitudes are 128 MiB; four devices of 16 MiB cannot hold them.
        n = 23
        x = np.full(n, 0.25)
        req = self.c.request("phase", n, x)
        e = self.refused("128 MiB over 4 x 16 MiB", self.encode_req(req), SC.RESOURCE_EXHAUSTED)
        d = self.c.error_detail(e)
        self.assertIsNotNone(d)
        self.assertGreater(d.need_bytes, d.free_bytes)
        self.assertGreater(d.need_bytes, 0)
        # The message in sizes a person reads; the exact bytes in the detail.
        self.assertEqual((d.need_bytes, d.free_bytes), (32 << 20, DEVICE_BUDGET))
        self.assertIn("23-qubit complex128 state (128 MiB) does not fit", e.details())
        self.assertIn("needs 32 MiB (shard 32 MiB + staging 0 B + workspace 0 B) but its budget "
                      "is 16 MiB", e.details())
        # The dry run explains instead of refusing.
        p = self.c.call("Plan", req)
        self.assertFalse(p.feasible)
        self.assertTrue(p.message)
        self.assertTrue(any(not n.fits for n in p.needs))
        for nd in p.needs:
            self.assertEqual(nd.need_bytes, nd.shard_bytes + nd.staging_bytes + nd.workspace_bytes)
            self.assertEqual(nd.fits, nd.need_bytes <= nd.budget_bytes)
        # Single device, explicitly: 2^21 complex128 = 32 MiB on one 16 MiB device.
        req = self.c.request("phase", 21, np.full(21, 0.25), policy="single", devices=["cpu:1"])
        e = self.refused("32 MiB on one 16 MiB device", self.encode_req(req),
                         SC.RESOURCE_EXHAUSTED, words=["cpu:1"])
        self.assertEqual(self.c.error_detail(e).need_bytes > (32 << 20) - 1, True)

    def test_client_budget_counts_per_identity_not_per_name(self):
        # Two names, one uid: the daemon knows both as the same caller, so they share one budget
        # (a client cannot spend another's quota, nor widen its own, by naming itself).
        alice = qdpc.Client(proto=self.pb, name="alice@it:1")
        bob = qdpc.Client(proto=self.pb, name="bob@it:2")
        try:
            # 2^18 complex128 = 4 MiB: two fit in the 8 MiB budget, a third does not.
            x = np.full(18, 0.5)
            a1 = alice.encode("phase", 18, x)
            b1 = bob.encode("phase", 18, x)
            me = "uid:%d" % os.getuid()
            self.assertEqual(a1.owner, me)
            self.assertEqual(b1.owner, me)
            e = self.refused("a third under another name", lambda: bob.encode("phase", 18, x),
                             SC.RESOURCE_EXHAUSTED)
            # The message reads as a person would; the detail has the exact bytes.
            self.assertIn("state of 4 MiB refused", e.details())
            self.assertIn("holds 8 MiB of its 8 MiB budget", e.details())
            d = bob.error_detail(e)
            self.assertEqual((d.need_bytes, d.free_bytes), (1 << 22, 0))
            self.assertIn(me, e.details())
            # Either name lists and releases the identity's states, without tokens.
            listed = {st.handle for st in bob.call("List", self.pb.ListRequest()).states}
            self.assertEqual(listed, {a1.handle, b1.handle})
            bob.call("Release", self.pb.StateRef(handle=a1.handle))
            a3 = alice.encode("phase", 18, x)  # released bytes are available again
            for cl, st in ((alice, a3), (bob, b1)):
                cl.release(st)
        finally:
            alice.close()
            bob.close()

    def test_unknown_handle_and_wrong_token_are_not_found(self):
        st = self.c.encode("phase", 3, np.array([0.1, 0.2, 0.3]))
        good = self.c.ref(st)
        fake = self.pb.StateRef(handle="0" * len(st.handle), token=st.token)
        wrong = self.pb.StateRef(handle=st.handle, token="x" + st.token[1:])
        empty = self.pb.StateRef(handle=st.handle, token="")
        nobody = self.pb.StateRef(handle="0" * len(st.handle), token="")
        for what, ref in (("unknown handle", fake), ("wrong token", wrong), ("no token", empty)):
            methods = ("Describe", "Release") if ref is not empty else ("Describe",)
            for method in methods:
                self.refused(f"{method} {what}", lambda: self.c.call(method, ref), SC.NOT_FOUND)
            fr = self.pb.FetchRequest()
            fr.state.CopyFrom(ref)
            self.refused(f"Fetch {what}", lambda: list(self.c._Fetch(fr, timeout=10)),
                         SC.NOT_FOUND)
            self.refused(f"Export {what}", lambda: self.c.export(
                ref, os.path.join(os.environ["QDP_TEST_DIR"], "x.npy")), SC.NOT_FOUND)
        # Without a token only an owner's own handle releases (another's reads as unknown).
        self.refused("Release unknown handle by owner", lambda: self.c.call("Release", nobody),
                     SC.NOT_FOUND)
        # A wrong token and an unknown handle read the same: no oracle for guessing handles.
        m1 = self.code_of(lambda: self.c.call("Describe", fake))
        m2 = self.code_of(lambda: self.c.call("Describe", wrong))
        self.assertEqual(m1, m2)
        # The real owner is unaffected.
        self.assertEqual(self.c.call("Describe", good).handle, st.handle)
        self.c.release(st)
        self.refused("Describe after release", lambda: self.c.call("Describe", good),
                     SC.NOT_FOUND)

    def test_fetch_and_export_arguments_are_checked(self):
        st = self.c.encode("phase", 4, np.full(4, 0.3))
        try:
            self.refused("fetch past the end", lambda: self.c.fetch(st, offset=16, count=1),
                         (SC.INVALID_ARGUMENT, SC.OUT_OF_RANGE))
            self.refused("fetch count past the end", lambda: self.c.fetch(st, offset=10, count=7),
                         (SC.INVALID_ARGUMENT, SC.OUT_OF_RANGE))
            er = self.pb.ExportRequest(path="relative/out.npy")
            er.state.CopyFrom(self.c.ref(st))
            self.refused("export to a relative path", lambda: self.c.call("Export", er),
                         SC.INVALID_ARGUMENT, ("path",))
            path = os.path.join(os.environ["QDP_TEST_DIR"], "exists.npy")
            with open(path, "wb") as f:
                f.write(b"keep me")
            # Not handed over: refused, the file as it was.
            er = self.pb.ExportRequest(path=path, overwrite=True)
            er.state.CopyFrom(self.c.ref(st))
            self.refused("export not handed over", lambda: self.c.call("Export", er),
                         SC.PERMISSION_DENIED, ("fd_ticket",))
            # Handed over for reading only: the daemon cannot write it.
            er.fd_ticket = self.c.hand_file(path)
            self.refused("export into a read-only descriptor", lambda: self.c.call("Export", er),
                         SC.PERMISSION_DENIED)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), b"keep me")
            self.assertGreater(self.c.export(st, path, overwrite=True).bytes, 16 * 16)
            self.assertEqual(np.load(path).shape, (16,))
        finally:
            self.c.release(st)

    def test_bad_uploads_are_refused(self):
        c = self.c
        req = c.request("amplitude", 3, None, input_dtype="float64", rows=1, cols=8)

        def send(msgs):
            return c._EncodeUpload(iter(msgs), timeout=30)

        first = self.pb.UploadChunk()
        first.request.CopyFrom(req)
        data = lambda b: self.pb.UploadChunk(data=b)  # noqa: E731
        vals = np.arange(1, 9, dtype=np.float64).tobytes()
        self.refused("upload without the request first", lambda: send([data(vals)]),
                     SC.INVALID_ARGUMENT)
        self.refused("upload longer than declared", lambda: send([first, data(vals + vals)]),
                     SC.INVALID_ARGUMENT, INPUT_FIELDS)
        self.refused("upload with a second request",
                     lambda: send([first, data(vals[:32]), first, data(vals[32:])]),
                     SC.INVALID_ARGUMENT)
        # The good upload still works afterwards.
        st = send([first, data(vals[:24]), data(vals[24:])]).state
        qdpref.assert_close(c.fetch(st), qdpref.amplitude(np.arange(1, 9), 3), "complex128",
                            "upload in two chunks")
        c.release(st)
        # A stream that ends early is a client that stopped or died: never encoded.
        self.refused("upload shorter than declared", lambda: send([first, data(vals[:40])]),
                     SC.DATA_LOSS, ("data",), ("40 of the 64 bytes",))
        # Without a declared size only the marked last chunk says the stream is whole.
        free = c.request("amplitude", 3, None, input_dtype="float64")
        ffirst = self.pb.UploadChunk()
        ffirst.request.CopyFrom(free)
        self.refused("undeclared upload without its last chunk",
                     lambda: send([ffirst, data(vals[:24]), data(vals[24:])]),
                     SC.DATA_LOSS, ("last",))
        last = self.pb.UploadChunk(data=vals[24:], last=True)
        st = send([ffirst, data(vals[:24]), last]).state
        qdpref.assert_close(c.fetch(st), qdpref.amplitude(np.arange(1, 9), 3), "complex128",
                            "undeclared upload, last marked")
        c.release(st)
        self.refused("a chunk after the last", lambda: send([ffirst, last, data(vals[:8])]),
                     SC.INVALID_ARGUMENT, ("last",))
        # Nothing is held afterwards: every refused upload gave its memory back.
        self.assertEqual(c.status().states, 0)

    def test_handoffs_are_checked_and_bounded(self):
        sock = self.c.socket_path
        path = os.path.join(os.environ["QDP_TEST_DIR"], "handed.bin")
        with open(path, "wb") as f:
            f.write(b"x" * 64)
        fd = os.open(path, os.O_RDONLY)
        wfd = os.open(path, os.O_WRONLY)
        pfd = os.open(path, os.O_PATH)
        r, w = os.pipe()
        try:
            bad = (
                ("a wrong header", dict(raw_header=b"QDPFD/9\n" + bytes(8)), "INVALID_ARGUMENT"),
                ("a short header", dict(raw_header=b"QDPFD/1\n"), "INVALID_ARGUMENT"),
                ("no descriptor", dict(fds=[]), "INVALID_ARGUMENT"),
                ("two descriptors", dict(fds=[fd, fd]), "INVALID_ARGUMENT"),
                ("a pipe", dict(fds=[r]), "INVALID_ARGUMENT"),
                ("an O_PATH descriptor", dict(fds=[pfd]), "PERMISSION_DENIED"),
                ("write-only, for reading", dict(fds=[wfd]), "PERMISSION_DENIED"),
                ("read-only, for writing", dict(access=qdpc.WRITE), "PERMISSION_DENIED"),
            )
            for what, kw, status in bad:
                with self.subTest(what):
                    with self.assertRaises(qdpc.HandoffError) as cm:
                        qdpc.handoff(sock, fd, **kw)
                    self.assertEqual(cm.exception.status, status, cm.exception.message)
            # A connection that says nothing holds up no one.
            idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            idle.connect(sock)
            self.assertEqual(self.c.status().states, 0)
            # One caller may have 64 descriptors waiting, not more.
            tickets = [qdpc.handoff(sock, fd) for _ in range(64)]
            self.assertEqual(len(set(tickets)), 64)
            with self.assertRaises(qdpc.HandoffError) as cm:
                qdpc.handoff(sock, fd)
            self.assertEqual(cm.exception.status, "RESOURCE_EXHAUSTED")
            # Using one makes room again.
            r1 = self.c.request("amplitude", 3, None, path=path, hand_over=False)
            r1.input.fd_ticket = tickets.pop()
            self.refused("not a .npy", self.encode_req(r1), SC.INVALID_ARGUMENT)
            tickets.append(qdpc.handoff(sock, fd))
            idle.close()
            # Naming each takes it (and closes its descriptor), used or refused.
            for t in tickets:
                r1.input.fd_ticket = t
                self.refused("not a .npy", self.encode_req(r1), SC.INVALID_ARGUMENT)
        finally:
            for x in (fd, wfd, pfd, r, w):
                os.close(x)

    def test_malformed_protobuf_is_invalid_argument(self):
        garbage = [
            b"\x0a\xff\xff\xff\xff\x0f",   # field 1, a length far past the end
            b"\xff\xff\xff\xff",            # a truncated varint key
            b"\x08",                         # a key with no value
            b"\x0f\x01",                     # wire type 7 does not exist
        ]
        for method in ("/qdp.Qdp/Encode", "/qdp.Qdp/Plan", "/qdp.Qdp/Describe",
                       "/qdp.Qdp/Release", "/qdp.Qdp/Export"):
            for g in garbage:
                self.refused(f"{method} {g!r}", lambda: self.c.raw(method, g),
                             SC.INVALID_ARGUMENT)
        stream = self.c.channel.unary_stream("/qdp.Qdp/Fetch")
        for g in garbage:
            self.refused(f"Fetch {g!r}", lambda: list(stream(g, timeout=10)),
                         SC.INVALID_ARGUMENT)
        up = self.c.channel.stream_unary("/qdp.Qdp/EncodeUpload")
        for g in garbage:
            self.refused(f"EncodeUpload {g!r}", lambda: up(iter([g]), timeout=10),
                         SC.INVALID_ARGUMENT)

    def test_unknown_method_is_unimplemented(self):
        for method in ("/qdp.Qdp/Nope", "/qdp.Qdp/encode", "/other.Service/Encode", "/x"):
            self.refused(method, lambda: self.c.raw(method, b""), SC.UNIMPLEMENTED)


# The upload's bytes travel in UploadChunk.data against request.input's declared shape.
INPUT_FIELDS = ("data", "request.input", "input")

if __name__ == "__main__":
    r = unittest.main(verbosity=2, exit=False)
    sys.exit(0 if r.result.wasSuccessful() else 1)
