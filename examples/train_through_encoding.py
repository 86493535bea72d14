#!/usr/bin/env python3
"""A classical layer that feeds an encoding, trained through it: qdp.torch.encode carries the
gradient from the quantum state back to the layer.

Two classes of 6-feature rows; a linear layer maps each row to 4 angles, qdp encodes them as a
4-qubit angle state, and the loss asks class 0 for <Z_0> = +1 and class 1 for <Z_0> = -1
(computed from the state's probabilities in torch). Only the linear layer has parameters: it
learns because the gradient goes through the encoding.

Usage: python3 examples/train_through_encoding.py [--target unix:/run/qdp/qdpd.sock] [--steps 60]
"""

import argparse
import os

import numpy as np
import torch

import qdp.torch as qt

QUBITS = 4


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=None, help="the daemon (default: $QDP_TARGET, else "
                    "the default socket)")
    ap.add_argument("--steps", type=int, default=60, help="optimizer steps")
    args = ap.parse_args()
    if args.target:
        os.environ["QDP_TARGET"] = args.target
    rng = np.random.default_rng(0)
    y = torch.tensor(rng.integers(0, 2, size=128))
    x = torch.tensor(rng.normal(size=(128, 6)) + 1.5 * y.numpy()[:, None], dtype=torch.float64)
    layer = torch.nn.Linear(6, QUBITS, dtype=torch.float64)
    opt = torch.optim.Adam(layer.parameters(), lr=0.1)
    # <Z_0> of each basis state: +1 where qubit 0 (bit 0 of the index) is 0, else -1.
    z0 = torch.tensor([1.0 - 2.0 * (b & 1) for b in range(1 << QUBITS)], dtype=torch.float64)
    target = 1.0 - 2.0 * y.to(torch.float64)
    first = last = None
    for step in range(args.steps):
        psi = qt.encode(layer(x), "angle", QUBITS)   # (128, 16) complex128, differentiable
        z = (psi.abs() ** 2) @ z0                      # <Z_0> per sample
        loss = ((z - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()                               # through qdp's encoding into the layer
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
    acc = ((z.detach() < 0).long() == y).double().mean().item()
    print(f"{args.steps} steps, loss {first:.4f} -> {last:.4f}, accuracy {acc:.3f}")
    return 0 if last < first else 1


if __name__ == "__main__":
    raise SystemExit(main())
