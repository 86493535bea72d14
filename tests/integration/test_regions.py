"""Integration: registered shared-memory regions, through the Python gRPC client and qdpctl.

The daemon runs with max_regions = 3, sweeping every second with a 1 s grace
(tests/integration/meson.build). A region is registered once, then read by several encodes at
different offsets; each state is compared with the NumPy reference of the slice it was given.
"""

import json
import os
import subprocess
import sys
import threading
import time
import unittest

import grpc
import numpy as np

import qdpc
import qdpref

SC = grpc.StatusCode
MAX_REGIONS = 3


class Regions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = qdpc.Client()
        cls.pb = cls.c.pb
        cls.rng = np.random.default_rng(7)
        cls.values = cls.rng.standard_normal(1 << 16)  # 512 KiB of float64
        cls.name = "/qdp-it-regions-%d" % os.getpid()
        with open("/dev/shm" + cls.name, "wb") as f:
            f.write(cls.values.tobytes())

    @classmethod
    def tearDownClass(cls):
        os.unlink("/dev/shm" + cls.name)
        cls.c.close()

    def register(self, name=None, pid=0, fd=0, hand_over=True):
        """RegisterRegion as a client on the node makes it: the object opened here, its
        descriptor handed over."""
        r = self.pb.RegisterRegionRequest()
        if name is not None:
            r.name = name
        else:
            r.pid, r.fd = pid, fd
        if hand_over:
            r.fd_ticket = self.c.hand_file("/dev/shm" + name if name else f"/proc/{pid}/fd/{fd}")
        return self.c.call("RegisterRegion", r)

    def unregister(self, info, token=None):
        r = self.pb.RegionRef()
        r.handle = info.handle
        r.token = info.token if token is None else token
        return self.c.call("UnregisterRegion", r)

    def shm(self, info, offset, length, token=None):
        m = self.pb.SharedMemory()
        m.region = info.handle
        m.region_token = info.token if token is None else token
        m.offset = offset
        m.length = length
        return m

    def encode_from(self, info, qubits, first, count, token=None):
        """Amplitude encode of values[first : first + count] read from the region."""
        r = self.c.request("amplitude", qubits, None, input_dtype="float64",
                           shm=self.shm(info, first * 8, count * 8, token))
        return self.c.call("Encode", r).state

    def refused(self, fn, code):
        with self.assertRaises(grpc.RpcError) as cm:
            fn()
        self.assertEqual(cm.exception.code(), code, cm.exception.details())
        return cm.exception

    def test_encodes_at_several_offsets_read_the_registered_slice(self):
        info = self.register(self.name)
        try:
            self.assertEqual(info.bytes, self.values.nbytes)
            self.assertEqual(len(info.token), 32)
            st = self.c.status()
            self.assertEqual(st.regions, 1)
            self.assertEqual(st.region_bytes, self.values.nbytes)
            for first, count, n in ((0, 16, 4), (3, 7, 3), (1000, 1024, 10), (65536 - 5, 5, 3)):
                s = self.encode_from(info, n, first, count)
                got = self.c.fetch(s)
                want = qdpref.amplitude(self.values[first:first + count], n)
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-12,
                                           err_msg=f"slice [{first}, +{count})")
                self.c.release(s)
        finally:
            self.unregister(info)
        self.assertEqual(self.c.status().regions, 0)

    def test_region_by_pid_and_fd_of_a_memfd(self):
        fd = os.memfd_create("qdp-it-region")
        try:
            x = np.arange(1, 9, dtype=np.float64)
            os.write(fd, x.tobytes())
            info = self.register(pid=os.getpid(), fd=fd)
            self.assertEqual(info.bytes, 64)
            s = self.encode_from(info, 3, 0, 8)
            np.testing.assert_allclose(self.c.fetch(s), x / np.sqrt(np.sum(x * x)), atol=1e-12)
            self.c.release(s)
            self.unregister(info)
        finally:
            os.close(fd)

    def test_bounds_are_checked_against_the_region(self):
        info = self.register(self.name)
        try:
            size = self.values.nbytes
            # One value past the end, an offset past the end, and an offset near 2^64.
            for off, length in ((size - 8, 16), (size + 8, 8), ((1 << 64) - 8, 16)):
                r = self.c.request("amplitude", 2, None, input_dtype="float64",
                                   shm=self.shm(info, off, length))
                e = self.refused(lambda: self.c.call("Encode", r), SC.OUT_OF_RANGE)
                self.assertIn(str(size), e.details())
            self.assertEqual(self.c.status().regions, 1)
        finally:
            self.unregister(info)

    def test_fetch_into_a_writable_memfd_and_shm_matches_fetch(self):
        s = self.c.encode("amplitude", 10, self.values[:1000])
        want = self.c.fetch(s)
        fd = os.memfd_create("qdp-it-out")
        name = "/qdp-it-out-%d" % os.getpid()
        try:
            os.ftruncate(fd, 64 + want.nbytes)
            with open("/dev/shm" + name, "wb") as f:
                f.truncate(want.nbytes)
            mem = self.c.register_region(f"/proc/{os.getpid()}/fd/{fd}", writable=True)
            shm = self.c.register_region("/dev/shm" + name, writable=True, name=name)
            r = self.c.fetch_into(s, mem, region_offset=64)
            self.assertEqual((r.count, r.bytes, r.dtype), (want.size, want.nbytes, 4))
            got = np.frombuffer(os.pread(fd, want.nbytes, 64), np.complex128)
            self.assertEqual(got.tobytes(), want.tobytes())
            # A window: amplitudes [100, 300) at the region's start.
            r = self.c.fetch_into(s, shm, offset=100, count=200)
            self.assertEqual(r.count, 200)
            with open("/dev/shm" + name, "rb") as f:
                got = np.frombuffer(f.read(r.bytes), np.complex128)
            self.assertEqual(got.tobytes(), self.c.fetch(s, 100, 200).tobytes())
            e = self.refused(lambda: self.c.fetch_into(s, shm, region_offset=64), SC.OUT_OF_RANGE)
            self.assertIn(str(want.nbytes), e.details())
            self.unregister(shm)
            # Registered read-only: refused, and told how to register it.
            ro = self.c.register_region("/dev/shm" + name, name=name)
            e = self.refused(lambda: self.c.fetch_into(s, ro), SC.FAILED_PRECONDITION)
            self.assertIn("writable", e.details())
            self.unregister(ro)
            # Cut under the writes: DATA_LOSS, the daemon still serving.
            os.ftruncate(fd, 0)
            self.refused(lambda: self.c.fetch_into(s, mem), SC.DATA_LOSS)
            self.unregister(mem)
            self.assertEqual(self.c.status().regions, 0)
        finally:
            os.close(fd)
            os.unlink("/dev/shm" + name)
            self.c.release(s)

    def test_wrong_token_is_not_found_and_unregister_then_encode_is_not_found(self):
        info = self.register(self.name)
        bad = ("0" if info.token[0] != "0" else "1") + info.token[1:]
        self.refused(lambda: self.encode_from(info, 2, 0, 4, token=bad), SC.NOT_FOUND)
        self.refused(lambda: self.unregister(info, token=bad), SC.NOT_FOUND)
        # Its owner may name it by handle alone (a lost token strands nothing).
        self.assertEqual(self.unregister(info, token="").bytes, self.values.nbytes)
        self.refused(lambda: self.encode_from(info, 2, 0, 4), SC.NOT_FOUND)
        self.refused(lambda: self.unregister(info), SC.NOT_FOUND)

    def test_unregister_while_encodes_read_is_safe(self):
        big = np.random.default_rng(3).standard_normal(1 << 20)  # 8 MiB
        name = self.name + "-big"
        with open("/dev/shm" + name, "wb") as f:
            f.write(big.tobytes())
        try:
            info = self.register(name)
            results, errors = [], []

            def worker():
                c = qdpc.Client(proto=self.pb)
                try:
                    r = c.request("amplitude", 20, None, input_dtype="float64",
                                  shm=self.shm(info, 0, big.nbytes))
                    s = c.call("Encode", r).state
                    results.append(c.fetch(s, offset=0, count=64))
                    c.release(s)
                except grpc.RpcError as e:
                    errors.append(e.code())
                finally:
                    c.close()

            threads = [threading.Thread(target=worker) for _ in range(6)]
            for t in threads:
                t.start()
            self.unregister(info)
            for t in threads:
                t.join()
            # Every encode either read the whole region (correct values) or came after the
            # unregister (NOT_FOUND); none read unmapped memory (the daemon is still here).
            self.assertEqual(len(results) + len(errors), 6)
            self.assertTrue(all(code == SC.NOT_FOUND for code in errors), errors)
            want = (big / np.sqrt(np.sum(big * big)))[:64]
            for got in results:
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
            self.assertEqual(self.c.status().regions, 0)
        finally:
            os.unlink("/dev/shm" + name)

    def test_max_regions_is_resource_exhausted(self):
        infos = [self.register(self.name) for _ in range(MAX_REGIONS)]
        try:
            self.assertEqual(len({i.handle for i in infos}), MAX_REGIONS)
            e = self.refused(lambda: self.register(self.name), SC.RESOURCE_EXHAUSTED)
            self.assertIn("max_regions %d" % MAX_REGIONS, e.details())
            self.unregister(infos.pop())
            infos.append(self.register(self.name))  # a freed slot can be taken again
        finally:
            for i in infos:
                self.unregister(i)
        self.assertEqual(self.c.status().regions, 0)

    def test_a_refused_region_takes_no_slot(self):
        # Named but not handed over: the daemon opens nothing for a caller.
        for _ in range(MAX_REGIONS + 1):
            self.refused(lambda: self.register(self.name, hand_over=False), SC.PERMISSION_DENIED)
        # A ticket that names nothing handed over.
        r = self.pb.RegisterRegionRequest(name=self.name, fd_ticket="t" + "0" * 32)
        for _ in range(MAX_REGIONS + 1):
            self.refused(lambda: self.c.call("RegisterRegion", r), SC.NOT_FOUND)
        infos = [self.register(self.name) for _ in range(MAX_REGIONS)]
        for i in infos:
            self.unregister(i)

    def test_qdpctl_region_add_encode_rm(self):
        exe = os.environ["QDPCTL"]

        def ctl(*args):
            return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)

        p = ctl("--json", "region", "add", self.name)
        self.assertEqual(p.returncode, 0, p.stderr)
        added = json.loads(p.stdout)
        self.assertEqual(added["bytes"], self.values.nbytes)
        ref = added["ref"]
        time.sleep(2.5)  # qdpctl has exited, and sweeps past the grace pass: the region stays
        self.assertEqual(self.c.status().regions, 1)
        for first in (0, 100):
            p = ctl("--json", "encode", "--encoding", "amplitude", "--qubits", "3", "--region",
                    ref, "--offset", str(first * 8), "--length", "64", "--input-dtype", "float64")
            self.assertEqual(p.returncode, 0, p.stderr)
            sref = json.loads(p.stdout)["ref"]
            handle, token = sref.split(":")
            st = self.pb.StateInfo(handle=handle, token=token)
            x = self.values[first:first + 8]
            np.testing.assert_allclose(self.c.fetch(st), x / np.sqrt(np.sum(x * x)), atol=1e-12)
            self.c.release(st)
        p = ctl("--json", "encode", "--encoding", "amplitude", "--qubits", "3", "--region", ref,
                "--offset", str(self.values.nbytes), "--length", "64")
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(json.loads(p.stdout)["error"]["code"], "QDP_ERR_OUT_OF_RANGE")
        p = ctl("region", "rm", ref)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = ctl("--json", "region", "rm", ref)
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(json.loads(p.stdout)["error"]["code"], "QDP_ERR_NOT_FOUND")
        p = ctl("region", "--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("region add", p.stdout)
        p = ctl("region", "add")
        self.assertEqual(p.returncode, 2, p.stderr)


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1)
