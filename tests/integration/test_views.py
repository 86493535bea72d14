"""Integration: shard layout, gather and views against a real qdpd on cpu:4 with 4 MiB per device.

Describe shows every shard's layout; Gather assembles a sharded state on one device with the bits
a Fetch of the sharded state gives, and refuses with the numbers when the device cannot hold it;
views (zero-copy CUDA IPC) are refused on host memory with the reason, through the independent
gRPC client and qdpctl alike. Run by with_qdpd.sh with QDPCTL and QDP_DESC in the environment.
"""

import json
import os
import subprocess
import sys
import unittest

import grpc
import numpy as np

import qdpc

BUDGET = 4 << 20  # per device, as meson.build starts the daemon


class Views(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = qdpc.Client(name="views-test")
        cls.pb = cls.c.pb

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def setUp(self):
        self.addCleanup(self.nothing_left)  # runs last, after the releases below

    def nothing_left(self):
        for s in self.c.call("List", self.pb.ListRequest()).states:
            self.assertEqual(s.leases, 0, s.handle)
        self.assertEqual(sum(d.used_bytes for d in self.c.status().devices), 0,
                         "a state or a gather was left on a device")

    def encode4(self, qubits, dtype="complex128"):
        """An angle state of `qubits` qubits split evenly over the 4 devices, released when the
        test ends (whether or not the test released it)."""
        x = np.linspace(0.1, 2.9, qubits)
        st = self.c.encode("angle", qubits, x, dtype=dtype, policy="even")
        self.addCleanup(self.release_quietly, st)
        return st

    def release_quietly(self, st):
        try:
            self.c.release(st)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.NOT_FOUND:
                raise

    def describe(self, st, views=False, pid=0):
        r = self.pb.DescribeRequest(handle=st.handle, token=st.token, views=views,
                                    client_pid=pid)
        return self.c._DescribeViews(r, timeout=30, metadata=self.c.metadata)

    def gather(self, st, device, token=None):
        r = self.pb.GatherRequest(device=device)
        r.state.CopyFrom(self.c.ref(st, token))
        return self.c.call("Gather", r).state

    def refused(self, code, fn, *words):
        with self.assertRaises(grpc.RpcError) as cm:
            fn()
        e = cm.exception
        self.assertEqual(e.code(), code, e.details())
        for w in words:
            self.assertIn(w, e.details())
        return e

    def test_describe_shows_the_layout_of_four_shards(self):
        st = self.encode4(12)  # 4096 amplitudes, 1024 x 16 B per shard
        for info in (self.describe(st), self.c.call("Describe", self.c.ref(st))):
            self.assertEqual(len(info.shards), 4)
            self.assertEqual(info.leases, 0)
            for i, sh in enumerate(info.shards):
                self.assertEqual(sh.device, f"cpu:{i}")
                self.assertEqual(sh.ordinal, i)
                self.assertEqual(sh.rank, 0)
                self.assertEqual((sh.first, sh.count), (1024 * i, 1024))
                self.assertEqual((sh.row_first, sh.rows), (0, 1))
                self.assertEqual(sh.bytes, 1024 * 16)
                self.assertEqual(sh.uuid, "")
                self.assertEqual(sh.ipc_handle, b"")  # no views asked
                self.assertEqual(sh.lease_id, 0)
        self.c.release(st)

    def used(self, name):
        return {d.name: d.used_bytes for d in self.c.status().devices}[name]

    def check_gather(self, st, device, index):
        want = self.c.fetch(st)
        before = self.used(f"cpu:{index}")
        g = self.gather(st, device)
        self.addCleanup(self.release_quietly, g)
        self.assertEqual(self.used(f"cpu:{index}") - before, st.bytes)
        self.assertNotEqual(g.handle, st.handle)
        self.assertTrue(g.token)
        self.assertEqual(len(g.shards), 1)
        sh = g.shards[0]
        self.assertEqual(sh.device, f"cpu:{index}")
        self.assertEqual((sh.first, sh.row_first), (0, 0))
        self.assertEqual(sh.count, 1 << st.qubits)
        self.assertEqual(sh.rows, st.batch)
        self.assertEqual(sh.bytes, st.bytes)
        self.assertEqual(self.c.call("Describe", self.c.ref(g)).shards[0].device, f"cpu:{index}")
        got = self.c.fetch(g)
        self.assertEqual(got.dtype, want.dtype)
        self.assertEqual(got.tobytes(), want.tobytes(), f"gather onto {device} differs")
        # The source is untouched and independent of the copy.
        self.c.release(g)
        self.assertEqual(self.used(f"cpu:{index}"), before)
        self.assertEqual(self.c.fetch(st).tobytes(), want.tobytes())

    def test_gather_is_bit_identical_to_the_sharded_fetch(self):
        st = self.encode4(14)  # 256 KiB in 4 shards
        self.check_gather(st, "cpu:2", 2)
        self.check_gather(st, "0", 0)  # by index
        self.c.release(st)
        st = self.encode4(13, dtype="complex64")
        self.check_gather(st, "cpu:3", 3)
        self.c.release(st)
        # A batch sharded by sample: 6 samples over the 4 devices.
        x = np.random.default_rng(3).uniform(-1, 1, (6, 200))
        b = self.c.encode("amplitude", 8, x, policy="batch")
        self.addCleanup(self.release_quietly, b)
        self.assertEqual(len(b.shards), 4)
        self.check_gather(b, "cpu:1", 1)

    def test_gather_that_does_not_fit_is_refused_with_numbers(self):
        st = self.encode4(19)  # 8 MiB: 2 MiB per device, a 4 MiB budget each
        e = self.refused(grpc.StatusCode.RESOURCE_EXHAUSTED, lambda: self.gather(st, "cpu:1"),
                         "gather of a state of 8 MiB (4 shards) onto cpu:1",
                         "needs 8 MiB", "only 2 MiB of its 4 MiB budget")
        d = self.c.error_detail(e)
        self.assertEqual((d.need_bytes, d.free_bytes), (8 << 20, BUDGET - (2 << 20)))
        self.assertEqual(d.device, 1)
        self.assertEqual(len(self.c.call("List", self.pb.ListRequest()).states), 1)
        self.c.release(st)

    def test_gather_refusals(self):
        st = self.encode4(10)
        self.refused(grpc.StatusCode.INVALID_ARGUMENT, lambda: self.gather(st, "cuda:0"),
                     "'cuda:0' is not a device", "cpu:0 to cpu:3")
        self.refused(grpc.StatusCode.INVALID_ARGUMENT, lambda: self.gather(st, "4"), "'4'")
        self.refused(grpc.StatusCode.NOT_FOUND, lambda: self.gather(st, "cpu:0", token="0" * 32))
        self.c.release(st)
        self.refused(grpc.StatusCode.NOT_FOUND, lambda: self.gather(st, "cpu:0"))

    def test_views_are_refused_on_host_memory(self):
        st = self.encode4(10)
        self.refused(grpc.StatusCode.FAILED_PRECONDITION,
                     lambda: self.describe(st, views=True, pid=os.getpid()),
                     "zero-copy views need GPUs", "cpu:4 (host memory)")
        self.assertEqual(self.describe(st).leases, 0)  # nothing leased
        # Encode refuses before it encodes: no state is left behind.
        r = self.c.request("angle", 10, np.linspace(0.1, 2.9, 10), policy="even")
        r.views = True
        r.client_pid = os.getpid()
        e = self.refused(grpc.StatusCode.FAILED_PRECONDITION, lambda: self.c.call("Encode", r),
                         "zero-copy views need GPUs")
        self.assertEqual(self.c.error_detail(e).field, "views")
        self.assertEqual(len(self.c.call("List", self.pb.ListRequest()).states), 1)
        # CloseView of a lease that does not exist.
        cv = self.pb.CloseViewRequest(handle=st.handle, token=st.token, lease_id=1)
        self.refused(grpc.StatusCode.NOT_FOUND, lambda: self.c.call("CloseView", cv), "lease 1")
        self.c.release(st)

    # ---- qdpctl ----

    def ctl(self, *args):
        return subprocess.run([os.environ["QDPCTL"], *args], capture_output=True, text=True,
                              timeout=60)

    def test_qdpctl_gather_describe_views_and_view_close(self):
        st = self.encode4(12)
        ref = f"{st.handle}:{st.token}"
        p = self.ctl("--json", "gather", ref, "--device", "cpu:3")
        self.assertEqual(p.returncode, 0, p.stderr)
        g = json.loads(p.stdout)
        self.assertEqual([s["device"] for s in g["shards"]], ["cpu:3"])
        self.assertEqual(g["bytes"], st.bytes)
        p = self.ctl("describe", g["ref"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("cpu:3", p.stdout)
        self.assertEqual(self.ctl("rm", g["ref"]).returncode, 0)
        # Refused by the daemon (4), or by a libqdp built without CUDA before it asks (1).
        p = self.ctl("describe", "--views", ref)
        self.assertIn((p.returncode, "zero-copy views need GPUs" in p.stderr or
                       "built without CUDA" in p.stderr), ((4, True), (1, True)),
                      p.stdout + p.stderr)
        p = self.ctl("gather", ref)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--device is required", p.stderr)
        p = self.ctl("--json", "gather", ref, "--device", "9")
        self.assertEqual(p.returncode, 6)  # INVALID_ARGUMENT: the device field
        self.assertIn("is not a device", p.stderr)
        p = self.ctl("view-close", ref, "77")
        self.assertEqual(p.returncode, 5)  # NOT_FOUND: no such lease
        self.assertIn("lease 77", p.stderr)
        p = self.ctl("view-close", ref, "x")
        self.assertEqual(p.returncode, 2)
        for cmd in ("gather", "view-close", "describe"):
            self.assertEqual(self.ctl(cmd, "--help").returncode, 0)
        self.assertIn("--views", self.ctl("describe", "--help").stdout)
        self.c.release(st)


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1)
