#!/usr/bin/env python3
"""A small hybrid model trained for a few steps on batches qdp encodes from a file.

Two classes of 8-feature rows are written to a Parquet file (a .npy file where pyarrow is not
installed); qdp.torch.QuantumDataset streams them, shuffled, as 8-qubit angle states; a linear
layer over the states' measurement probabilities learns the class.

Usage: python3 examples/train_hybrid.py [--target unix:/run/qdp/qdpd.sock] [--steps 30]
"""

import argparse
import os
import tempfile

import numpy as np
import torch

import qdp.torch as qt

QUBITS = 8


def write_data(folder: str, rows: int) -> str:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=rows)
    # Class 1 turns the first half of the qubits towards |1>: visible in the probabilities.
    x = rng.uniform(0, 0.6, size=(rows, QUBITS))
    x[y == 1, : QUBITS // 2] += 0.9
    np.save(os.path.join(folder, "labels.npy"), y)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        path = os.path.join(folder, "features.npy")
        np.save(path, x)
        return path
    path = os.path.join(folder, "features.parquet")
    table = pa.table({f"x{k}": x[:, k] for k in range(QUBITS)})
    pq.write_table(table, path, row_group_size=256)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=None, help="the daemon (default: $QDP_TARGET, else "
                    "the default socket)")
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps")
    ap.add_argument("--rows", type=int, default=2048, help="rows written to the file")
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        path = write_data(d, args.rows)
        labels = np.load(os.path.join(d, "labels.npy"))
        ds = qt.QuantumDataset(path, "angle", QUBITS, batch_size=64, shuffle=True, seed=1,
                               labels=labels, target=args.target, dtype="complex64")
        model = torch.nn.Linear(1 << QUBITS, 2)
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        step, first, last = 0, None, None
        for epoch in range(1 + args.steps // max(1, len(ds))):
            ds.set_epoch(epoch)
            for psi, y in qt.loader(ds):
                probs = (psi.abs() ** 2).float().to("cpu")
                loss = torch.nn.functional.cross_entropy(model(probs), y.long().cpu())
                opt.zero_grad()
                loss.backward()
                opt.step()
                first = loss.item() if first is None else first
                last = loss.item()
                step += 1
                if step >= args.steps:
                    break
            if step >= args.steps:
                break
    print(f"source {os.path.basename(path)}: {step} steps, loss {first:.3f} -> {last:.3f}")
    return 0 if last < first else 1


if __name__ == "__main__":
    raise SystemExit(main())
