"""A multi-rank qdpd world against a single-rank qdpd: every encoding sharded across ranks has the
single rank's bits, each rank gets only its own slice of the input, Fetch and Export stream from
the owning ranks, Release frees on every rank, and Status shows the world.

Run by with_world.sh (QDP_TARGET, QDP_REF_TARGET, QDP_WORLD_LOG, QDP_WORLD_RANKS, QDP_TEST_DIR),
with QDP_DESC in the environment. QDP_WORLD_MODE=two-hosts: the ranks must be on distinct hosts.
"""

import os
import re
import subprocess
import sys
import threading
import time
import unittest

import grpc
import numpy as np

import qdpc
import qdpref

RNG = np.random.default_rng(20261129)
ENCODINGS = ("amplitude", "angle", "basis", "iqp", "iqp-z", "phase")


def values(encoding, n, rows=1):
    k = qdpref.values_per_sample(encoding, n)
    if encoding == "basis":
        return RNG.integers(0, 1 << n, size=(rows, 1)).astype(np.float64)
    if encoding == "amplitude":
        return RNG.normal(size=(rows, k - 3))  # L < 2^n: the padding lands on the last rank
    return RNG.uniform(-np.pi, np.pi, size=(rows, k))


def rank_lines(log, pattern):
    """Every line of each rank matching pattern, in order: {rank: [the pattern's groups]}."""
    found = {}
    with open(log, errors="replace") as f:
        for line in f:
            m = re.search(r" qdpd r(\d+) " + pattern, line)
            if m:
                found.setdefault(int(m.group(1)), []).append(
                    tuple(int(g) if g.isdigit() else g for g in m.groups()[1:]))
    return found


def settle(log, quiet=0.3, timeout=10):
    """Waits until the log has not grown for `quiet` seconds: lines of earlier jobs reach it
    through Open MPI's output forwarding, which across hosts may lag, and must be in before a test
    counts the lines that are already there."""
    deadline = time.monotonic() + timeout
    size, since = os.path.getsize(log), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = os.path.getsize(log)
        if now != size:
            size, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return


def new_rank_lines(log, pattern, before, ranks, timeout=60):
    """The first line of each of `ranks` matching pattern after the counts in `before` (an earlier
    rank_lines): the ranks' lines reach the log through Open MPI's output forwarding, which across
    hosts may lag, so this waits for them."""
    deadline = time.monotonic() + timeout
    while True:
        now = rank_lines(log, pattern)
        got = {r: now[r][len(before.get(r, []))] for r in ranks
               if len(now.get(r, [])) > len(before.get(r, []))}
        if len(got) == len(ranks) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def job_lines(log, pattern, jobs, timeout=60):
    """Each rank's line matching pattern whose first group is that rank's job in `jobs`
    ({rank: job}), waiting for it: lines of earlier jobs may still be on their way through Open
    MPI's output forwarding, so the next new line is not necessarily this job's."""
    deadline = time.monotonic() + timeout
    while True:
        now = rank_lines(log, pattern)
        got = {r: next((g for g in now.get(r, []) if g[0] == j), None) for r, j in jobs.items()}
        if all(got.values()) or time.monotonic() > deadline:
            return {r: g for r, g in got.items() if g}
        time.sleep(0.05)


class World(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = qdpc.Client()
        cls.ref = qdpc.Client(target=os.environ["QDP_REF_TARGET"], proto=cls.c.pb)
        cls.ranks = int(os.environ["QDP_WORLD_RANKS"])
        cls.log = os.environ["QDP_WORLD_LOG"]
        cls.dir = os.environ["QDP_TEST_DIR"]
        # A power-of-two set of devices with some on every rank (even plans need 2^g devices).
        devs = [f"r{r}/cpu:0" for r in range(cls.ranks)]
        extra = [f"r{r}/cpu:1" for r in range(cls.ranks)]
        while len(devs) & (len(devs) - 1):
            devs.append(extra.pop())
        cls.spread = devs
        cls.all = [f"r{r}/cpu:{d}" for r in range(cls.ranks) for d in (0, 1)]

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.ref.close()

    def ranks_of(self, st):
        return sorted({s.rank for s in st.shards})

    def assert_same_bits(self, encoding, n, x, dtype="complex128", policy="even", devices=None):
        """Encodes x on the world and on the reference; both fetches must be equal bit for bit,
        and close to the NumPy formula. Returns the world's state (still held)."""
        devices = self.spread if devices is None else devices
        st = self.c.encode(encoding, n, x, dtype=dtype, policy=policy, devices=devices)
        self.assertEqual(self.ranks_of(st), list(range(self.ranks)), "shards on every rank")
        if encoding == "amplitude" and policy != "batch":
            self.assertEqual(st.collective, "mpi")
        elif encoding in ("iqp", "iqp-z"):  # at most 8 shards: the top 3 bits, no exchange
            self.assertEqual(st.collective, "none")
        one = self.ref.encode(encoding, n, x, dtype=dtype)
        got, want = self.c.fetch(st), self.ref.fetch(one)
        self.ref.release(one)
        self.assertEqual(got.dtype, want.dtype)
        self.assertEqual(got.tobytes(), want.tobytes(),
                         f"{encoding} {dtype} {policy}: world and single rank differ")
        rows = np.asarray(x).reshape(-1, np.asarray(x).shape[-1])
        for r, row in enumerate(rows):
            qdpref.assert_close(got[r << n:(r + 1) << n], qdpref.state(encoding, row, n), dtype,
                                f"{encoding} {dtype} row {r}")
        return st

    def test_status_shows_every_rank_and_its_devices(self):
        s = self.c.status()
        self.assertEqual(s.ranks, self.ranks)
        self.assertEqual(s.transport, "mpi")
        self.assertIn(s.mpi_threads, ("serialized", "multiple"))
        self.assertEqual([r.rank for r in s.rank_info], list(range(self.ranks)))
        for r in s.rank_info:
            self.assertEqual(r.devices, 2)
            self.assertFalse(r.lost, r.reason)
            self.assertTrue(r.host)
            mine = [d for d in s.devices if d.rank == r.rank]
            self.assertEqual(sorted(d.name for d in mine), ["cpu:0", "cpu:1"])
            self.assertTrue(all(d.host == r.host for d in mine))
        text = subprocess.run([os.environ["QDPCTL"], "status"], check=True, capture_output=True,
                              text=True).stdout
        self.assertIn(f"world: {self.ranks} ranks over mpi", text)
        # Host-memory devices cannot join an NCCL group: the choice and its reason are shown.
        self.assertEqual(s.device_collectives, "mpi (not every device of the world is a GPU)")
        self.assertIn(f"device collectives across ranks: {s.device_collectives}", text)
        for r in s.rank_info:
            self.assertRegex(text, rf"\n +{r.rank}  {re.escape(r.host)} +2  live\n")
        if os.environ.get("QDP_WORLD_MODE") == "two-hosts":
            self.assertEqual(len({r.host for r in s.rank_info}), self.ranks, "distinct hosts")

    def test_every_encoding_across_ranks_has_the_single_rank_bits(self):
        n = 6
        for encoding in ENCODINGS:
            for dtype in ("complex64", "complex128"):
                st = self.assert_same_bits(encoding, n, values(encoding, n)[0], dtype)
                self.assertEqual(len(st.shards), len(self.spread))
                self.c.release(st)

    def test_uneven_and_batch_plans_across_ranks(self):
        for encoding in ("amplitude", "angle", "phase", "basis"):
            st = self.assert_same_bits(encoding, 5, values(encoding, 5)[0], policy="uneven",
                                       devices=self.all)
            self.c.release(st)
            x = values(encoding, 4, rows=2 * len(self.all) + 1)
            st = self.assert_same_bits(encoding, 4, x, policy="batch", devices=self.all)
            self.assertEqual(len(st.shards), len(self.all))
            self.c.release(st)

    def test_amplitude_fallback_across_ranks_has_the_single_rank_bits(self):
        # Squares that underflow or overflow: every rank sees the same gathered sums, takes the
        # fallback for the same samples, scales by the largest value of every rank's slice and
        # gathers the scaled sums along the same tree.
        n = 8
        cases = ((1e-170, "complex128", "even", self.spread),
                 (1e160, "complex128", "uneven", self.all),
                 (1e-30, "complex64", "even", self.spread),
                 (1e30, "complex64", "uneven", self.all))
        for scale, dtype, policy, devices in cases:
            x = RNG.normal(size=(1 << n) - 5)
            st = self.c.encode("amplitude", n, x * scale, dtype=dtype, policy=policy,
                               devices=devices)
            self.assertEqual(self.ranks_of(st), list(range(self.ranks)))
            one = self.ref.encode("amplitude", n, x * scale, dtype=dtype)
            got, want = self.c.fetch(st), self.ref.fetch(one)
            self.assertEqual(got.tobytes(), want.tobytes(), f"{scale} {dtype} {policy}")
            qdpref.assert_close(got, qdpref.amplitude(x, n), dtype, f"{scale} {dtype}")
            self.ref.release(one)
            self.c.release(st)
        # A batch split by sample between ranks, one sample of tiny values.
        x = RNG.normal(size=(2 * len(self.all) + 1, 20))
        x[3] *= 1e-200
        st = self.c.encode("amplitude", 5, x, policy="batch", devices=self.all)
        one = self.ref.encode("amplitude", 5, x)
        self.assertEqual(self.c.fetch(st).tobytes(), self.ref.fetch(one).tobytes())
        self.ref.release(one)
        self.c.release(st)

    def test_values_beyond_float32_are_refused_across_ranks(self):
        x = values("angle", 6)[0]
        x[4] = 1e39
        with self.assertRaises(grpc.RpcError) as cm:
            self.c.encode("angle", 6, x, dtype="complex64", policy="even", devices=self.spread)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("input sample 0 value 4 is 1e+39, which does not fit float32",
                      cm.exception.details())

    def test_a_state_held_wholly_by_another_rank(self):
        # The coordinator holds none of it and takes no part in the work, for every encoding;
        # amplitude's norm is then wholly the other rank's.
        for encoding in ENCODINGS:
            x = values(encoding, 6)[0]
            st = self.c.encode(encoding, 6, x, policy="even", devices=["r1/cpu:0", "r1/cpu:1"])
            self.assertEqual({s.rank for s in st.shards}, {1})
            one = self.ref.encode(encoding, 6, x)
            self.assertEqual(self.c.fetch(st).tobytes(), self.ref.fetch(one).tobytes(), encoding)
            self.ref.release(one)
            self.c.release(st)

    def test_views_of_a_state_across_ranks_are_refused_on_host_memory(self):
        # A GPU world hands out every shard's view on the coordinator's node, asking the rank
        # that holds it (tests/gpu/world_gpu.sh); host memory has none, and nothing is left.
        st = self.c.encode("angle", 6, values("angle", 6)[0], policy="even", devices=self.spread)
        r = self.c.pb.DescribeRequest(handle=st.handle, token=st.token, views=True,
                                      client_pid=os.getpid())
        with self.assertRaises(grpc.RpcError) as cm:
            self.c._DescribeViews(r, timeout=30, metadata=self.c.metadata)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("zero-copy views need GPUs", cm.exception.details())
        plain = self.c.pb.DescribeRequest(handle=st.handle, token=st.token)
        self.assertEqual(self.c._DescribeViews(plain, timeout=30, metadata=self.c.metadata).leases,
                         0, "no lease left behind")
        self.c.release(st)

    JOB_LINE = (r"world: job (\d+): (\d+) B in (\d+) shards here; "
                r"input slice \[(\d+), (\d+)\) of (\d+) values")

    def test_each_rank_gets_only_its_slice_of_the_input(self):
        n = 8
        x = RNG.normal(size=1 << n)
        settle(self.log)
        before = rank_lines(self.log, self.JOB_LINE)
        st = self.assert_same_bits("amplitude", n, x)
        lines = new_rank_lines(self.log, self.JOB_LINE, before, range(1, self.ranks))
        for r in range(1, self.ranks):
            mine = [s for s in st.shards if s.rank == r]
            first = min(s.first for s in mine)
            end = max(s.first + s.count for s in mine)
            job = lines.get(r)
            self.assertIsNotNone(job, f"rank {r} logged no job")
            self.assertEqual(job[3:], (first, end, 1 << n), f"rank {r}'s slice")
            self.assertLess(end - first, 1 << n, "no rank but the coordinator sees all")
            self.assertEqual(job[1:3], (sum(s.bytes for s in mine), len(mine)))
        self.c.release(st)

    def test_a_file_input_is_read_by_each_rank_at_its_offsets(self):
        n, rows = 8, 1
        x = RNG.normal(size=1 << n)
        path = os.path.join(self.dir, "shared-input.npy")
        np.save(path, x)
        pattern = self.JOB_LINE + r" read here from '(.*)'$"
        settle(self.log)
        before = rank_lines(self.log, pattern)
        st = self.c.encode("amplitude", n, None, policy="even", devices=self.spread, path=path)
        one = self.ref.encode("amplitude", n, None, path=path)
        self.assertEqual(self.c.fetch(st).tobytes(), self.ref.fetch(one).tobytes())
        qdpref.assert_close(self.c.fetch(st), qdpref.amplitude(x, n), "complex128", "file")
        lines = new_rank_lines(self.log, pattern, before, range(1, self.ranks))
        for r in range(1, self.ranks):
            mine = [s for s in st.shards if s.rank == r]
            self.assertIn(r, lines, f"rank {r} did not read the file itself")
            self.assertEqual(lines[r][3:5], (min(s.first for s in mine),
                                             max(s.first + s.count for s in mine)))
            self.assertEqual(lines[r][6], path)
        self.ref.release(one)
        self.c.release(st)

    def test_every_rank_reads_only_the_file_the_caller_handed_over(self):
        # The caller hands over a file it may read but names another path: the ranks that open
        # the path themselves find another file there and refuse, instead of reading it with the
        # daemon's rights.
        n = 8
        mine = os.path.join(self.dir, "mine.npy")
        other = os.path.join(self.dir, "not-mine.npy")
        np.save(mine, np.ones(1 << n))
        np.save(other, np.full(1 << n, 7.0))
        req = self.c.request("amplitude", n, None, policy="even", devices=self.spread,
                             path=other, hand_over=False)
        req.input.fd_ticket = self.c.hand_file(mine)
        with self.assertRaises(grpc.RpcError) as cm:
            self.c.call("Encode", req)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED,
                         cm.exception.details())
        self.assertIn("another file", cm.exception.details())
        # The same file under its own name is read by every rank.
        st = self.c.encode("amplitude", n, None, policy="even", devices=self.spread, path=mine)
        qdpref.assert_close(self.c.fetch(st), qdpref.amplitude(np.ones(1 << n), n),
                            "complex128", "handed over")
        self.c.release(st)

    def test_a_file_cut_under_the_ranks_fails_the_job_and_no_rank(self):
        # Each rank maps its window of the file and reads it; cut short while they read, the job
        # is DATA_LOSS (or, cut before a rank opened it, that rank finds another file; cut before
        # the coordinator parsed it, the .npy is short: INVALID_ARGUMENT), and every rank lives
        # on: a page fault in a rank's read is caught like the coordinator's.
        n = 22
        x = RNG.normal(size=1 << n)
        path = os.path.join(self.dir, "cut.npy")
        outcomes = []
        for i in range(24):
            np.save(path, x)
            req = self.c.request("amplitude", n, None, policy="even", devices=self.spread,
                                 path=path)
            cut = threading.Timer(0.001 * (i % 12), os.truncate, (path, 4096))
            cut.start()
            try:
                st = self.c.call("Encode", req).state
                outcomes.append("OK")
                got = self.c.fetch(st)
                self.c.release(st)
                # A job that ended before the cut read the whole file: it must be right.
                qdpref.assert_close(got, qdpref.amplitude(x, n), "complex128", "before the cut")
            except grpc.RpcError as e:
                outcomes.append(e.code().name)
            finally:
                cut.join()
        self.assertTrue(set(outcomes) <= {"OK", "DATA_LOSS", "PERMISSION_DENIED",
                                          "INVALID_ARGUMENT"}, outcomes)
        self.assertIn("DATA_LOSS", outcomes)
        self.assertFalse([r.rank for r in self.c.status().rank_info if r.lost], outcomes)

    def test_fetch_and_export_stream_from_the_owning_ranks(self):
        n = 9
        st = self.assert_same_bits("phase", n, values("phase", n)[0])
        whole = self.c.fetch(st)
        bounds = sorted({s.first for s in st.shards})
        for lo, count in ((0, 1 << n), (bounds[1] - 3, 7), (bounds[-1] - 1, 2), (5, 400)):
            part = self.c.fetch(st, offset=lo, count=count, chunk_bytes=4096 + 16)
            self.assertEqual(part.tobytes(), whole[lo:lo + count].tobytes(), (lo, count))
        path = os.path.join(self.dir, "world.npy")
        rep = self.c.export(st, path)
        self.assertEqual(rep.bytes, os.path.getsize(path))
        self.assertEqual(np.load(path).tobytes(), whole.tobytes())
        self.c.release(st)

    def measure(self, client, st, kind, qubits=(), paulis=(), shots=0, seed=0):
        req = client.pb.MeasureRequest(measurement=kind, qubits=list(qubits), paulis=list(paulis),
                                       shots=shots, seed=seed)
        req.state.CopyFrom(client.ref(st))
        return client.call("Measure", req)

    def test_kernels_measurements_and_samples_across_ranks_have_the_single_rank_bits(self):
        """Shards on other ranks come to rank 0 through the world's reads, into the layout one
        rank would use: the kernel matrix (complex and real states; amplitudes split, and a
        batch split by sample), probabilities, Pauli expectations and samples have the bits of
        the same states on a single-rank qdpd."""
        probabilities, expectations, samples = 1, 2, 3  # proto Measurement
        cases = (("iqp", 7, values("iqp", 7, rows=1), "even", self.spread),
                 ("amplitude", 6, values("amplitude", 6, rows=1), "uneven", self.all),
                 ("angle", 5, values("angle", 5, rows=2 * len(self.all) + 1), "batch", self.all),
                 ("phase", 4, values("phase", 4, rows=2 * len(self.all) + 1), "batch", self.all))
        for encoding, n, x, policy, devices in cases:
            st = self.c.encode(encoding, n, x, policy=policy, devices=devices)
            self.addCleanup(self.c.release, st)
            self.assertEqual(self.ranks_of(st), list(range(self.ranks)), encoding)
            one = self.ref.encode(encoding, n, x)
            self.addCleanup(self.ref.release, one)
            pairs = ((self.c, st), (self.ref, one))
            for overlaps in (False, True):
                got, want = (c.kernel(s, overlaps=overlaps).values for c, s in pairs)
                self.assertEqual(got, want, f"{encoding} kernel overlaps={overlaps}")
                got, want = (c.kernel(s, one_b, overlaps=overlaps).values
                             for (c, s), one_b in zip(pairs, (st, one)))
                self.assertEqual(got, want, f"{encoding} kernel with b, overlaps={overlaps}")
            z = "Z" + "I" * (n - 2) + "X"
            for kw in ({"kind": probabilities}, {"kind": probabilities, "qubits": (n - 1, 0)},
                       {"kind": expectations, "paulis": ("Z" * n, z)},
                       {"kind": samples, "shots": 300, "seed": 9}):
                got, want = (self.measure(c, s, **kw).values for c, s in pairs)
                self.assertEqual(got, want, f"{encoding} {kw}")
            rows = np.asarray(x).reshape(-1, np.asarray(x).shape[-1])
            P = np.stack([qdpref.state(encoding, r, n) for r in rows])
            K = np.frombuffer(self.c.kernel(st).values, np.float64).reshape(len(rows), len(rows))
            np.testing.assert_allclose(K, np.abs(P.conj() @ P.T) ** 2, rtol=0, atol=1e-12)

    def test_describe_names_each_shards_rank_and_host(self):
        st = self.c.encode("angle", 6, values("angle", 6)[0], policy="even", devices=self.spread)
        hosts = {r.rank: r.host for r in self.c.status().rank_info}
        info = self.c.call("Describe", self.c.ref(st))
        self.assertEqual([s.rank for s in info.shards], [int(d[1]) for d in
                                                         (x.split("/")[0] for x in self.spread)])
        for s in info.shards:
            self.assertEqual(s.host, hosts[s.rank])
        self.c.release(st)

    def test_release_frees_the_shards_on_every_rank(self):
        st = self.c.encode("iqp", 7, values("iqp", 7)[0], policy="even", devices=self.spread)
        others = range(1, self.ranks)
        held = {r: sum(s.bytes for s in st.shards if s.rank == r) for r in others}
        # The job each rank logged for this state: the latest with its bytes (lines of earlier jobs
        # may still be arriving through Open MPI's output forwarding).
        deadline = time.monotonic() + 60
        while True:
            lines = rank_lines(self.log, self.JOB_LINE)
            jobs = {r: [g[0] for g in lines.get(r, []) if g[1] == held[r]] for r in others}
            if all(jobs.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        jobs = {r: max(j) for r, j in jobs.items() if j}
        self.c.release(st)
        freed = job_lines(self.log, r"world: job (\d+) released: (\d+) B freed", jobs)
        want = {r: (jobs.get(r), held[r]) for r in others}
        self.assertEqual(freed, want)
        used = {(d.rank, d.name): d.used_bytes for d in self.c.status().devices}
        self.assertEqual([u for (r, _), u in used.items() if r > 0], [0] * (2 * self.ranks - 2))


if __name__ == "__main__":
    r = unittest.main(verbosity=2, exit=False)
    sys.exit(0 if r.result.wasSuccessful() else 1)
