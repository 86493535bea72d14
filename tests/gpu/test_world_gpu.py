"""A world of 2 qdpd ranks on GPUs (each rank's mesh: QDP_WORLD_DEVICES, one GPU) against a
single-rank qdpd: the amplitude norm gathered across ranks, and iqp split over the ranks with no
exchange (each transforms the state's top bits alone), must give the single rank's bits. With a GPU per rank the ranks join one NCCL group at start
and the amplitude norm goes over it ("nccl"); ranks sharing one GPU cannot (a GPU is one member of
a group), so theirs goes over MPI. Run by tests/gpu/world_gpu.sh through tests/mpi/with_world.sh.
"""

import os
import sys
import unittest

import numpy as np

import qdpc

RNG = np.random.default_rng(4242)


class WorldGpu(unittest.TestCase):
    def test_two_ranks_on_gpus_give_the_single_rank_bits(self):
        c = qdpc.Client()
        ref = qdpc.Client(target=os.environ["QDP_REF_TARGET"], proto=c.pb)
        status = c.status()
        self.assertEqual(status.ranks, 2)
        self.assertEqual(status.backend, "cuda")
        devices = [f"r{d.rank}/{d.name}" for d in status.devices][:2]
        print("world devices:", devices, [r.host for r in status.rank_info], flush=True)
        print("device collectives across ranks:", status.device_collectives, flush=True)
        own_gpus = os.environ.get("QDP_WORLD_DEVICES") == "local-rank"
        if own_gpus:
            self.assertTrue(status.device_collectives.startswith("nccl ("),
                            status.device_collectives)
        else:
            self.assertTrue(status.device_collectives.startswith("mpi ("),
                            status.device_collectives)
        cases = [
            ("amplitude", 20, RNG.normal(size=(1 << 20) - 5), "complex128"),
            ("amplitude", 20, RNG.normal(size=(1 << 20) - 5).astype(np.float32), "complex64"),
            ("amplitude", 18, np.linspace(0, 1, 1000), "complex128"),  # r1: padding only
            ("iqp", 14, RNG.uniform(-3, 3, size=14 + 91), "complex128"),
            ("iqp-z", 16, RNG.uniform(-3, 3, size=16).astype(np.float32), "complex64"),
            ("angle", 16, RNG.uniform(-3, 3, size=16), "complex128"),
        ]
        for encoding, n, x, dtype in cases:
            st = c.encode(encoding, n, x, dtype=dtype, policy="even", devices=devices)
            self.assertEqual(sorted({s.rank for s in st.shards}), [0, 1])
            one = ref.encode(encoding, n, x, dtype=dtype)
            got, want = c.fetch(st), ref.fetch(one)
            same = got.tobytes() == want.tobytes()
            print(f"{encoding} {dtype} n={n} values={np.asarray(x).size} "
                  f"collective={st.collective}: 2 ranks vs 1 rank "
                  f"{'bit-identical' if same else 'DIFFER'}", flush=True)
            self.assertTrue(same, f"{encoding} {dtype}")
            if encoding == "amplitude":
                self.assertEqual(st.collective, "nccl" if own_gpus else "mpi")
            elif encoding in ("iqp", "iqp-z"):  # each rank transforms the top bits alone
                self.assertEqual(st.collective, "none")
            c.release(st)
            ref.release(one)
        c.close()
        ref.close()


if __name__ == "__main__":
    r = unittest.main(verbosity=2, exit=False)
    sys.exit(0 if r.result.wasSuccessful() else 1)
