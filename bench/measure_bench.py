#!/usr/bin/env python3
"""Measurements of a resident state beside a bare read of the same state.

Usage: bench/measure_bench.py BUILD_DIR [--qubits 30] [--runs 5]

Starts BUILD_DIR/daemon/qdpd (python_bench's Daemon, --devices auto), encodes one phase state of
n qubits (complex128; 16 GiB at 30), and times, each the median of --runs after a warm-up:

  read         torch.view_as_real(s.torch()).sum(): one read of every byte of the state, in place
  z            s.expectations("Z" + "I" * (n - 1)): a Pauli-Z expectation
  z4           four Z strings at once
  zx           a string with X on the top qubit (its partner window is another half of the state)
  p1, p4       s.probabilities of 1 and 4 qubits
  shots1e4/1e6 s.sample(10_000 and 1_000_000, seed=5): basis states drawn (a search costs a
               device call for each range that shots reach, a range of 2^20 that 16 shots reach
               is read to the host once)

Prints "bench op=measure ..." lines (ms, GB/s of the state's bytes) and each one's rate over the
read's (the target for z and p1: >= 0.8). Needs a GPU daemon and torch.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from python_bench import Daemon, median_ms, say  # noqa: E402

import qdp  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--qubits", type=int, default=30)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    import numpy as np
    import torch  # type: ignore[import-not-found]

    n = a.qubits
    d = Daemon(a.build, "auto", [])
    try:
        with qdp.Client(d.target) as c:
            if c.status().backend != "cuda":
                say("measure", skipped="the daemon has no GPU")
                return 0
            x = np.random.default_rng(2).uniform(-1, 1, size=n)
            with c.encode(x, "phase", n, policy="single") as s:
                nbytes = 16 << n
                t = s.torch()
                sync = torch.cuda.synchronize
                read = median_ms(lambda: torch.view_as_real(t).sum(), a.runs, sync)
                say("measure", impl="read", qubits=n, ms=read, GBps=nbytes / read / 1e6)
                z1 = "Z" + "I" * (n - 1)
                cases = {
                    "z": lambda: s.expectations(z1),
                    "z4": lambda: s.expectations(["Z" * k + "I" * (n - k) for k in (1, 2, 3, 4)]),
                    "zx": lambda: s.expectations("Z" + "I" * (n - 2) + "X"),
                    "p1": lambda: s.probabilities([0]),
                    "p4": lambda: s.probabilities([0, 1, 2, n - 1]),
                    "shots1e4": lambda: s.sample(10_000, seed=5),
                    "shots1e6": lambda: s.sample(1_000_000, seed=5),
                }
                # Phase states: <Z_0> = 0 and each qubit's probabilities 1/2, exactly in theory.
                got = s.expectations(z1)
                for name, fn in cases.items():
                    ms = median_ms(fn, a.runs, lambda: None)
                    say("measure", impl="qdp", what=name, qubits=n, ms=ms,
                        GBps=nbytes / ms / 1e6, over_read=read / ms,
                        target=0.8 if name in ("z", "p1") else "-")
                # A phase state's samples are uniform: each bit of a shot is 1 half the time.
                shots = s.sample(1_000_000, seed=5).reshape(-1)
                bits = [float(((shots >> k) & 1).mean()) for k in (0, n // 2, n - 1)]
                say("measure-check", z=float(got), p1=str(s.probabilities([0]).tolist()),
                    shot_bit_means=str(bits))
    finally:
        d.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
