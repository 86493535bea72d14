#!/usr/bin/env python3
"""Two processes of a DDP job (gloo, on the CPU) read disjoint shares of every epoch.

Each rank streams its batches of the same shuffled epoch from qdpd with qdp.torch.QuantumDataset
(rank and world size from torch.distributed) and records which rows it got; rank 0 gathers the
records and checks that together the ranks read every row exactly once, in equal numbers of steps,
and in the very order one process reads the same epoch.

Usage: python3 examples/ddp_shards.py [--target unix:/run/qdp/qdpd.sock] [--world 2]
"""

import argparse
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import qdp.torch as qt

ROWS, QUBITS = 1000, 4


def rank_main(rank: int, world: int, target: str, port: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ids = np.arange(ROWS)
    x = np.random.default_rng(0).uniform(0, 1, size=(ROWS, QUBITS))
    ds = qt.QuantumDataset(x, "angle", QUBITS, batch_size=32, shuffle=True, seed=7, labels=ids,
                           target=target)  # rank, world size: torch.distributed's
    ds.set_epoch(3)
    mine = [rows.tolist() for _, rows in ds]  # this rank's batches, in its order
    got = [None] * world
    dist.all_gather_object(got, mine)
    if rank == 0:
        # Global batch k is rank k % world's (k // world)-th: merged back, the epoch's sequence.
        merged = [got[k % world][k // world] for k in range(sum(len(g) for g in got))]
        rows = [r for b in merged for r in b]
        assert len(set(rows)) == len(rows), "a row was read twice"
        assert len({len(g) for g in got}) == 1, "ranks took different numbers of steps"
        alone = qt.QuantumDataset(x, "angle", QUBITS, batch_size=32, shuffle=True, seed=7,
                                  labels=ids, target=target, rank=0, world_size=1)
        alone.set_epoch(3)
        single = [r for _, b in alone for r in b.tolist()]
        assert rows == single[:len(rows)], "the global order depends on the world size"
        print(f"world {world}: {len(rows)} rows of {ROWS} read once each, in the order of a "
              f"single process (even batches drop {ROWS - len(rows)}), {len(got[0])} steps per "
              "rank")
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=os.environ.get("QDP_TARGET"), help="the daemon")
    ap.add_argument("--world", type=int, default=2, help="processes")
    ap.add_argument("--port", type=int, default=29517, help="gloo's rendezvous port")
    args = ap.parse_args()
    mp.spawn(rank_main, args=(args.world, args.target, args.port), nprocs=args.world)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
