"""Integration: every encoding, input path and layout of a real qdpd, compared with NumPy.

Run by with_qdpd.sh (QDP_TARGET, QDP_TEST_DIR set) with QDP_DESC and QDPCTL in the environment.
"""

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time
import unittest
from multiprocessing import shared_memory

import grpc
import numpy as np

import qdpc
import qdpref

DTYPES = ("complex64", "complex128")
RNG = np.random.default_rng(20240611)


def sample_values(encoding, n, rows=1, input_dtype="float64"):
    """Random valid inputs, [rows, params] (basis: one index per row)."""
    k = qdpref.values_per_sample(encoding, n)
    if encoding == "basis":
        x = RNG.integers(0, 1 << n, size=(rows, 1)).astype(np.float64)
    elif encoding == "amplitude":
        k = k - 3 if k > 4 else k  # L < 2^n: exercises the zero padding
        x = RNG.normal(size=(rows, k))
    else:
        x = RNG.uniform(-np.pi, np.pi, size=(rows, k))
    return x.astype(np.float32 if input_dtype == "float32" else np.float64)


class Encodings(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = qdpc.Client()
        cls.dir = os.environ["QDP_TEST_DIR"]
        cls.qdpctl = os.environ["QDPCTL"]

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def check_state(self, st, encoding, x, n, dtype, rows=1):
        got = self.c.fetch(st)
        self.assertEqual(got.dtype, np.complex64 if dtype == "complex64" else np.complex128)
        self.assertEqual(got.size, rows << n)
        x = np.asarray(x, np.float64).reshape(rows, -1)
        for r in range(rows):
            want = qdpref.state(encoding, x[r], n)
            qdpref.assert_close(got[r << n:(r + 1) << n], want, dtype,
                                f"{encoding} {dtype} n={n} row {r}")

    @unittest.skipUnless(os.environ.get("QDPD_LOG"), "the daemon's log is not known (QDPD_LOG)")
    def test_job_line_names_the_state_it_made(self):
        # The reply goes out before the job's line is written: the line still names the state
        # (its handle, not "the caller's allocation") and says OK.
        st = self.c.encode("angle", 3, [0.1, 0.2, 0.3])
        want = f"-> {st.handle} ("
        lines = []
        for _ in range(100):
            with open(os.environ["QDPD_LOG"]) as f:
                lines = [ln for ln in f.read().splitlines() if want in ln]
            if lines:
                break
            time.sleep(0.05)
        self.c.release(st)
        self.assertTrue(lines, f"no job line names {st.handle}")
        self.assertIn(": OK in ", lines[0])

    def test_every_encoding_single_sample_matches_numpy(self):
        for encoding in qdpc.ENCODINGS:
            for dtype in DTYPES:
                for n, input_dtype in ((3, "float64"), (5, "float32")):
                    x = sample_values(encoding, n, 1, input_dtype)[0]
                    st = self.c.encode(encoding, n, x, dtype=dtype, input_dtype=input_dtype)
                    self.assertEqual(st.qubits, n)
                    self.assertEqual(st.batch, 1)
                    self.assertEqual(st.dtype, qdpc.DTYPES[dtype])
                    self.assertEqual(st.bytes, (1 << n) * (8 if dtype == "complex64" else 16))
                    self.assertTrue(st.token)
                    self.check_state(st, encoding, x, n, dtype)
                    self.c.release(st)

    def test_every_encoding_batch_matches_numpy_row_by_row(self):
        for encoding in qdpc.ENCODINGS:
            for dtype in DTYPES:
                n, rows = 4, 5
                x = sample_values(encoding, n, rows)
                st = self.c.encode(encoding, n, x, dtype=dtype)
                self.assertEqual(st.batch, rows)
                self.assertEqual(st.bytes, rows * (1 << n) * (8 if dtype == "complex64" else 16))
                self.check_state(st, encoding, x, n, dtype, rows)
                self.c.release(st)

    def test_basis_takes_int64_indices(self):
        idx = np.array([[0], [5], [7]], np.int64)
        st = self.c.encode("basis", 3, idx, input_dtype="int64")
        got = self.c.fetch(st).reshape(3, 8)
        want = np.zeros((3, 8))
        want[[0, 1, 2], [0, 5, 7]] = 1
        np.testing.assert_array_equal(got, want)
        self.c.release(st)

    def devices(self, count):
        """The names of the daemon's first `count` devices (cpu:N or cuda:N), or a skip."""
        names = [d.name for d in self.c.status().devices]
        if len(names) < count:
            self.skipTest(f"needs {count} devices, the daemon has {len(names)}")
        return names[:count]

    def test_policies_shard_the_state_and_keep_its_values(self):
        n = 10
        # Fewest devices first: a daemon with fewer devices checks what it can, then skips.
        cases = [
            ("single", 1, 0, "phase"),
            ("even", 2, 1, "amplitude"),
            ("uneven", 3, 0, "angle"),
            ("even", 4, 2, "iqp"),
        ]
        for policy, nshards, gbits, encoding in cases:
            devices = self.devices(nshards)
            for dtype in DTYPES:
                x = sample_values(encoding, n)[0]
                st = self.c.encode(encoding, n, x, dtype=dtype, policy=policy, devices=devices)
                what = f"{policy} over {devices} ({encoding}, {dtype})"
                self.assertEqual(len(st.shards), nshards, what)
                self.assertEqual(st.global_bits, gbits, what)
                self.assertEqual([s.device for s in st.shards], devices, what)
                # The shards tile [0, 2^n) in order, with their bytes.
                first = 0
                for s in st.shards:
                    self.assertEqual(s.first, first, what)
                    self.assertEqual(s.bytes, s.count * s.rows * (8 if dtype == "complex64"
                                                                  else 16), what)
                    first += s.count
                self.assertEqual(first, 1 << n, what)
                self.check_state(st, encoding, x, n, dtype)
                self.c.release(st)

    def test_batch_policy_puts_whole_samples_on_each_device(self):
        n, rows = 6, 8
        x = sample_values("amplitude", n, rows)
        st = self.c.encode("amplitude", n, x, policy="batch", devices=self.devices(4))
        self.assertEqual(len(st.shards), 4)
        self.assertEqual(sorted(s.rows for s in st.shards), [2, 2, 2, 2])
        for s in st.shards:
            self.assertEqual((s.first, s.count), (0, 1 << n))
        self.check_state(st, "amplitude", x, n, "complex128", rows)
        self.c.release(st)

    def expect_invalid(self, fragments, *args, **kw):
        """The encode is refused with INVALID_ARGUMENT and a message holding every fragment."""
        with self.assertRaises(grpc.RpcError) as cm:
            self.c.encode(*args, **kw)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                         cm.exception.details())
        for f in fragments:
            self.assertIn(f, cm.exception.details())

    def encode_fetch(self, *args, **kw):
        """Encodes, fetches and releases: the state's amplitudes."""
        st = self.c.encode(*args, **kw)
        got = self.c.fetch(st)
        self.c.release(st)
        return got

    def assert_unit_states(self, st, n, rows=1):
        got = self.c.fetch(st).reshape(rows, 1 << n).astype(np.complex128)
        self.assertTrue(np.all(np.isfinite(got)), got)
        np.testing.assert_allclose(np.sum(np.abs(got) ** 2, axis=1), 1.0, rtol=1e-5)
        return got

    def test_closed_forms_refuse_float64_beyond_float32_for_complex64(self):
        # complex64 is computed in float32, where these values are Inf and the state NaN; the
        # refusal names the position and asks for complex128, which computes them.
        cases = (("angle", 1, [1e39], "input sample 0 value 0 is 1e+39"),
                 ("phase", 2, [0.5, -1e39], "input sample 0 value 1 is -1e+39"),
                 ("iqp-z", 2, [1e39, 0.5], "input sample 0 value 0 is 1e+39"),
                 ("iqp", 2, [0.1, 0.2, 5e38], "input sample 0 value 2 is 5e+38"))
        for encoding, n, x, where in cases:
            x = np.array(x, np.float64)
            self.expect_invalid([where, "does not fit float32", "ask for complex128 output"],
                                encoding, n, x, dtype="complex64")
            st = self.c.encode(encoding, n, x, dtype="complex128")
            self.assert_unit_states(st, n)
            self.c.release(st)
        got = self.encode_fetch("angle", 1, np.array([1e39]), dtype="complex128")
        qdpref.assert_close(got, qdpref.angle(np.array([1e39]), 1), "complex128", "angle 1e39")
        # In one row of a batch, and in a state sharded over two devices.
        rows = np.array([[0.1, 0.2], [0.3, 1e39]])
        self.expect_invalid(["input sample 1 value 1 is 1e+39"], "angle", 2, rows,
                            dtype="complex64")
        self.expect_invalid(["input sample 0 value 1 is 1e+39"], "phase", 2,
                            np.array([0.1, 1e39]), dtype="complex64", policy="even",
                            devices=self.devices(2))

    def test_sums_past_the_output_precision_are_refused_or_computed(self):
        # iqp's theta sums the coefficients: 3e38 + 3e38 overflows float32.
        x = np.array([3e38, 3e38], np.float32)
        self.expect_invalid(["input sample 0 has coefficients whose magnitudes sum to 6e+38",
                             "float32", "ask for complex128 output"], "iqp-z", 2, x,
                            dtype="complex64")
        st = self.c.encode("iqp-z", 2, x, dtype="complex128")
        self.assert_unit_states(st, 2)
        self.c.release(st)
        # phase multiplies e^{i x_k}: no sum is formed, and complex64 agrees with complex128.
        a = self.encode_fetch("phase", 2, x, dtype="complex64")
        b = self.encode_fetch("phase", 2, x, dtype="complex128")
        qdpref.assert_close(a, b, "complex64", "phase [3e38, 3e38]")

    def test_amplitude_states_the_math_defines_are_computed(self):
        # Sums of squares that are subnormal, zero or infinite although the state is defined:
        # once answered [0.674837, 0.674837], refused as zero norm and refused as overflow.
        half = np.array([2 ** -0.5, 2 ** -0.5])
        for v, dtype in ((3e-162, "complex128"), (1e-200, "complex128"), (1e154, "complex128"),
                         (1e-200, "complex64"), (1e39, "complex64")):
            got = self.encode_fetch("amplitude", 1, np.array([v, v]), dtype=dtype)
            qdpref.assert_close(got, half, dtype, f"amplitude [{v}, {v}] {dtype}")
        # Only the row that needs it is scaled; every row is its own state.
        n = 4
        rows = RNG.normal(size=(3, 13))
        rows[1] *= 1e-170
        got = self.encode_fetch("amplitude", n, rows).reshape(3, -1)
        for r in range(3):
            want = qdpref.amplitude(rows[r], n)
            qdpref.assert_close(got[r], want, "complex128", f"row {r}")
            alone = self.encode_fetch("amplitude", n, rows[r])
            self.assertEqual(alone.tobytes(), got[r].tobytes(), f"row {r} alone")
        # Sharded over devices (even, uneven, capacity): the bits of one device.
        x = RNG.normal(size=50) * 1e160
        one = self.encode_fetch("amplitude", 6, x, policy="single")
        qdpref.assert_close(one, qdpref.amplitude(x, 6), "complex128", "sharded ref")
        for policy, count in (("even", 2), ("uneven", 3), ("capacity", 3)):
            got = self.encode_fetch("amplitude", 6, x, policy=policy, devices=self.devices(count))
            self.assertEqual(got.tobytes(), one.tobytes(), f"{policy} over {count}")
        # Zero norm only when every value is zero.
        self.expect_invalid(["input sample 0 has zero norm: every value is zero"], "amplitude",
                            1, np.array([0.0, 0.0]))

    def test_iqp_over_uneven_devices_is_the_one_device_state(self):
        # uneven over 2 devices makes two equal halves; over 3, the CPU devices (which transform
        # iqp's top 3 bits alone) take whole blocks of 8 amplitudes: ends at 22, 43 and 64 move to
        # 24, 40 and 64. Neither exchanges anything; both have the one-device bits.
        devices = self.devices(3)
        x = sample_values("iqp", 6)[0]
        one = self.encode_fetch("iqp", 6, x, policy="single")
        st = self.c.encode("iqp", 6, x, policy="uneven", devices=devices[:2])
        self.assertEqual(st.global_bits, 1)
        self.assertEqual(self.c.fetch(st).tobytes(), one.tobytes())
        self.check_state(st, "iqp", x, 6, "complex128")
        self.c.release(st)
        st = self.c.encode("iqp", 6, x, policy="uneven", devices=devices)
        self.assertEqual([(s.first, s.count) for s in st.shards], [(0, 24), (24, 16), (40, 24)])
        self.assertEqual((st.global_bits, st.collective), (0, "none"))
        self.assertEqual(self.c.fetch(st).tobytes(), one.tobytes())
        self.c.release(st)

    def test_2_pow_22_state_is_fetched_in_chunks_and_checked(self):
        n = 22
        x = RNG.uniform(-np.pi, np.pi, size=n)
        st = self.c.encode("phase", n, x)
        want = qdpref.phase(x, n)
        got = self.c.fetch(st, chunk_bytes=1 << 20)
        self.assertEqual(got.size, 1 << n)
        self.assertGreaterEqual(self.c.last_fetch_chunks, 64)  # 64 MiB in 1 MiB chunks
        qdpref.assert_close(got, want, "complex128", "phase 2^22")
        # A range that starts and ends off any chunk boundary.
        off, cnt = 1_000_003, 777_777
        part = self.c.fetch(st, offset=off, count=cnt, chunk_bytes=100_000)
        qdpref.assert_close(part, want[off:off + cnt], "complex128", "phase 2^22 range")
        self.c.release(st)

    def test_2_pow_22_amplitude_uploaded_in_chunks(self):
        n = 22
        x = RNG.normal(size=1 << n)
        req = self.c.request("amplitude", n, None, dtype="complex64", input_dtype="float64",
                             rows=1, cols=1 << n)
        st = self.c.upload(req, x.astype(np.float64).tobytes(), chunk=1 << 20)
        self.assertEqual(st.dtype, qdpc.DTYPES["complex64"])
        got = self.c.fetch(st)
        qdpref.assert_close(got, qdpref.amplitude(x, n), "complex64", "uploaded amplitude 2^22")
        self.c.release(st)

    def qdpctl_json(self, *args):
        p = subprocess.run([self.qdpctl, "--json", *args], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, f"qdpctl {' '.join(args)}: {p.stderr}")
        return json.loads(p.stdout)

    def test_npy_round_trip_server_file_export_and_fetch(self):
        n, rows = 5, 3
        x = RNG.normal(size=(rows, 1 << n)).astype(np.float32)
        src = os.path.join(self.dir, "input.npy")
        np.save(src, x)
        for dtype in DTYPES:
            out = self.qdpctl_json("encode", "--encoding", "amplitude", "--qubits", str(n),
                                   "--dtype", dtype, "--server-file", src)
            self.assertEqual(out["batch"], rows)
            ref = out["ref"]
            want = qdpref.batch("amplitude", x, n)
            exported = os.path.join(self.dir, f"export-{dtype}.npy")
            e = self.qdpctl_json("export", ref, exported)
            self.assertEqual(e["bytes"], os.path.getsize(exported))
            a = np.load(exported)
            self.assertEqual(a.dtype, np.complex64 if dtype == "complex64" else np.complex128)
            self.assertEqual(a.shape, (rows, 1 << n))
            qdpref.assert_close(a, want, dtype, "exported .npy")
            local = os.path.join(self.dir, f"fetched-{dtype}.npy")
            self.qdpctl_json("fetch", ref, "-o", local)
            b = np.load(local)
            self.assertEqual(b.shape, (rows, 1 << n))
            np.testing.assert_array_equal(a, b)
            # A sub-range fetch is 1-D.
            self.qdpctl_json("fetch", ref, "-o", local, "--offset", "7", "--count", "40",
                             "--force")
            np.testing.assert_array_equal(np.load(local), a.reshape(-1)[7:47])
            self.qdpctl_json("rm", ref)

    def test_shared_memory_input_by_name_and_by_fd(self):
        n, rows = 6, 2
        x = RNG.normal(size=(rows, 1 << n))
        pad = 64  # the data sits at an offset inside the region
        shm = shared_memory.SharedMemory(create=True, size=pad + x.nbytes + 32)
        try:
            shm.buf[pad:pad + x.nbytes] = x.tobytes()
            want = qdpref.batch("amplitude", x, n)
            m = self.c.pb.SharedMemory()
            m.name = "/" + shm.name
            m.offset = pad
            m.length = x.nbytes
            st = self.c.encode("amplitude", n, None, input_dtype="float64", rows=rows,
                               cols=1 << n, shm=m)
            qdpref.assert_close(self.c.fetch(st).reshape(rows, -1), want, "complex128", "shm name")
            self.c.release(st)
            fd = os.open("/dev/shm/" + shm.name, os.O_RDONLY)
            try:
                m = self.c.pb.SharedMemory()
                m.pid = os.getpid()
                m.fd = fd
                m.offset = pad
                m.length = x.nbytes
                st = self.c.encode("amplitude", n, None, input_dtype="float64", rows=rows,
                                   cols=1 << n, shm=m)
                qdpref.assert_close(self.c.fetch(st).reshape(rows, -1), want, "complex128",
                                    "shm fd")
                self.c.release(st)
            finally:
                os.close(fd)
        finally:
            shm.close()
            shm.unlink()

    def test_32_concurrent_clients_each_get_their_own_state(self):
        proto = self.c.pb
        before = self.c.status().states
        start = threading.Barrier(32)

        def one(i):
            c = qdpc.Client(proto=proto, name=f"client-{i}")
            try:
                n = 8
                x = np.linspace(0.1, 1.0, n) * (i + 1) / 7.0
                start.wait(timeout=30)
                st = c.encode("angle", n, x, label=f"c{i}")
                got = c.fetch(st, chunk_bytes=1024)
                qdpref.assert_close(got, qdpref.angle(x, n), "complex128", f"client {i}")
                d = c.call("Describe", c.ref(st))
                assert d.label == f"c{i}", d.label
                c.release(st)
                return i
            finally:
                c.close()

        with concurrent.futures.ThreadPoolExecutor(32) as ex:
            done = sorted(ex.map(one, range(32)))
        self.assertEqual(done, list(range(32)))
        self.assertEqual(self.c.status().states, before)


if __name__ == "__main__":
    r = unittest.main(verbosity=2, exit=False)
    sys.exit(0 if r.result.wasSuccessful() else 1)
