"""A rank of a qdpd world that dies (2 ranks: SIGKILL of rank 1) or hangs (3 ranks: SIGSTOP of
rank 2): the jobs and reads that need it fail with UNAVAILABLE naming it within a bounded time,
Status keeps answering and shows it lost, and what lives on the other ranks keeps working.

Run by with_world.sh with --rank-timeout 2 (QDP_TARGET, QDP_REF_TARGET, QDP_WORLD_LOG,
QDP_WORLD_RANKS), QDP_DESC in the environment.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest

import grpc
import numpy as np

import qdpc

TIMEOUT_S = 2  # the daemon's --rank-timeout
# A job waits at most for the job's send, one exchange and the replies, each bounded by the rank
# timeout; one second more for scheduling on a loaded CI machine.
BOUND_S = 3 * TIMEOUT_S + 1


def rank_pid(log, rank):
    with open(log, errors="replace") as f:
        for line in f:
            m = re.search(rf"rank {rank} of \d+ ready: .* pid (\d+)", line)
            if m:
                return int(m.group(1))
    raise AssertionError(f"rank {rank} logged no pid")


class Faults(unittest.TestCase):
    def test_a_lost_rank_fails_its_jobs_and_nothing_else(self):
        c = qdpc.Client()
        ref = qdpc.Client(target=os.environ["QDP_REF_TARGET"], proto=c.pb)
        ranks = int(os.environ["QDP_WORLD_RANKS"])
        victim = ranks - 1
        everywhere = [f"r{r}/cpu:{d}" for r in range(ranks) for d in (0, 1)][:4]
        if ranks == 3:
            everywhere = ["r0/cpu:0", "r1/cpu:0", "r2/cpu:0", "r2/cpu:1"]
        survivors = [f"r{r}/cpu:{d}" for r in range(victim) for d in (0, 1)]
        survivors = survivors[:4] if len(survivors) >= 4 else survivors[:2]
        x = np.linspace(-1, 1, 6)

        spread = c.encode("angle", 6, x, policy="even", devices=everywhere)
        kept = c.encode("angle", 6, x, policy="even", devices=survivors)
        self.assertNotIn(victim, {s.rank for s in kept.shards})

        # The standard health check: SERVING (08 01) while whole, NOT_SERVING (08 02) once a
        # rank is lost.
        check = "/grpc.health.v1.Health/Check"
        self.assertEqual(c.raw(check, b""), b"\x08\x01")
        watch = c.channel.unary_stream("/grpc.health.v1.Health/Watch", request_serializer=None,
                                       response_deserializer=None)(b"", timeout=60)
        self.assertEqual(next(watch), b"\x08\x01")
        pid = rank_pid(os.environ["QDP_WORLD_LOG"], victim)
        hang = ranks == 3
        os.kill(pid, signal.SIGSTOP if hang else signal.SIGKILL)
        try:
            t0 = time.monotonic()
            with self.assertRaises(grpc.RpcError) as cm:
                c.encode("amplitude", 6, np.arange(1, 65.0), policy="even", devices=everywhere)
            took = time.monotonic() - t0
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertIn(f"rank {victim}", cm.exception.details())
            self.assertEqual(c.error_detail(cm.exception).rank, victim)
            self.assertLess(took, BOUND_S, "the failure came within the bound")

            # Status answers at once and says which rank and why.
            t0 = time.monotonic()
            s = c.status()
            self.assertLess(time.monotonic() - t0, 1.0)
            self.assertEqual(s.ranks, ranks)
            lost = [r.rank for r in s.rank_info if r.lost]
            self.assertEqual(lost, [victim])
            self.assertEqual(c.raw(check, b""), b"\x08\x02")
            self.assertEqual(next(watch), b"\x08\x02")  # a Watch hears it within a sweep
            watch.cancel()
            self.assertIn("did not", s.rank_info[victim].reason)
            out = subprocess.run([os.environ["QDPCTL"], "status", "--json"], check=True,
                                 capture_output=True, text=True).stdout
            shown = json.loads(out)["rank_info"]
            self.assertEqual([r["lost"] for r in shown], [r == victim for r in range(ranks)])

            # Later jobs and reads that need it fail at once, naming it.
            for call in (lambda: c.encode("angle", 6, x, policy="even", devices=everywhere),
                         lambda: c.fetch(spread)):
                t0 = time.monotonic()
                with self.assertRaises(grpc.RpcError) as cm:
                    call()
                self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
                self.assertEqual(c.error_detail(cm.exception).rank, victim)
                self.assertLess(time.monotonic() - t0, 1.0)

            # What lives elsewhere survives: states, new jobs, releases.
            one = ref.encode("angle", 6, x)
            want = ref.fetch(one)
            self.assertEqual(c.fetch(kept).tobytes(), want.tobytes())
            again = c.encode("angle", 6, x, policy="even", devices=survivors)
            self.assertEqual(c.fetch(again).tobytes(), want.tobytes())
            # A request that names no devices is planned over the live ranks only.
            auto = c.encode("amplitude", 7, np.arange(1, 129.0), policy="capacity")
            self.assertNotIn(victim, {s.rank for s in auto.shards})
            self.assertGreater(len(auto.shards), 1)
            one_amp = ref.encode("amplitude", 7, np.arange(1, 129.0))
            self.assertEqual(c.fetch(auto).tobytes(), ref.fetch(one_amp).tobytes())
            ref.release(one_amp)
            ref.release(one)
            for st in (auto, again, kept, spread):
                c.release(st)
            self.assertEqual(c.status().states, 0)
        finally:
            if hang:
                os.kill(pid, signal.SIGCONT)
            c.close()
            ref.close()


if __name__ == "__main__":
    r = unittest.main(verbosity=2, exit=False)
    sys.exit(0 if r.result.wasSuccessful() else 1)
