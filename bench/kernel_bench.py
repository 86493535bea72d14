#!/usr/bin/env python3
"""The kernel matrix of resident states, beside what a user would otherwise run on the same states.

Usage: bench/kernel_bench.py BUILD_DIR [--samples N] [--qubits N] [--quick]

Starts BUILD_DIR/daemon/qdpd (python_bench's Daemon: its own socket, --devices auto), encodes
N samples of n qubits (phase: complex states; amplitude: real ones) and times, each the median of
a few runs after one warm-up:

  qdp         Client.kernel(s): the symmetric |<a_i|a_j>|^2, N x N float64 into this process
  zgemm       cuBLAS ZGEMM alone (torch.matmul) on the state's .torch() view: psi @ psi^H, all of
              it; its rate counts every entry, qdp's only the half it computes (the target:
              qdp's rate >= 0.7 of ZGEMM's)
  torch       abs(psi @ psi.conj().T) ** 2 on the same view, to the host (the target: >= 1.8x)
  qdp-out     Client.kernel(s, out=t): the matrix into a CUDA tensor t instead of this process

and checks qdp's matrix against torch's (max |difference|); for phase (by blocks) and iqp (by
rows), Client.kernel_of from the inputs under caps of 1/8 and 1/4 of the states' bytes and none
(encode included) against the resident time (the target: within 1.2x at 1/8); then amplitude's
(real states: real products) time against phase's (the target: >= 3x). Prints "bench op=kernel
..." lines (ms, tflops, ratios). Without a GPU (a CPU daemon) it times qdp alone on small sizes
(--quick).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from python_bench import Daemon, median_ms, say  # noqa: E402

import qdp  # noqa: E402


def one(c: qdp.Client, encoding: str, N: int, n: int, runs: int, torch: Any) -> float:
    rng = np.random.default_rng(1)
    values = {"phase": n, "iqp": n + n * (n - 1) // 2}.get(encoding, 1 << n)
    X = rng.uniform(-1, 1, size=(N, values))
    s = c.encode(X, encoding, n, policy="single")
    sync = torch.cuda.synchronize if torch is not None else (lambda: None)
    half = 4.0 * N * (N + 1) * (1 << n)  # real flops of the N(N+1)/2 complex dot products
    full = 8.0 * N * N * (1 << n)
    K = c.kernel(s)
    q = median_ms(lambda: c.kernel(s), runs, sync)
    say("kernel", impl="qdp", encoding=encoding, samples=N, qubits=n, ms=q,
        tflops=half / q / 1e9)
    if torch is not None:
        t = s.torch().reshape(N, 1 << n)
        Kt = (torch.abs(t @ t.conj().T) ** 2).cpu().numpy()
        diff = float(np.abs(K - Kt).max())
        g = median_ms(lambda: t @ t.conj().T, runs, sync)
        te = median_ms(lambda: (torch.abs(t @ t.conj().T) ** 2).cpu(), runs, sync)
        say("kernel", impl="zgemm", encoding=encoding, samples=N, qubits=n, ms=g,
            tflops=full / g / 1e9)
        say("kernel", impl="torch", encoding=encoding, samples=N, qubits=n, ms=te)
        # The matrix into a CUDA tensor: no copy through this process.
        out = torch.empty(N, N, dtype=torch.float64, device="cuda")
        qo = median_ms(lambda: c.kernel(s, out=out), runs, sync)
        say("kernel", impl="qdp-out", encoding=encoding, samples=N, qubits=n, ms=qo,
            over_numpy=q / qo, max_abs_diff=float(np.abs(out.cpu().numpy() - K).max()))
        del out
        say("kernel-ratio", encoding=encoding, samples=N, qubits=n,
            qdp_rate_over_zgemm=(half / q) / (full / g), target_zgemm=0.7,
            qdp_over_torch=te / q, target_torch=1.8, max_abs_diff=diff)
        del t
    s.release()
    if encoding in ("phase", "iqp"):
        # From the inputs (phase by blocks, iqp by rows) under a cap of 1/8 of the states'
        # bytes: pieces encoded as they are paired, no state whole (the target: within 1.2x of
        # the resident time above).
        # Larger caps (1/4, and room for one tile of every row) show what the tiles cost.
        states = N * (1 << n) * 16
        for part, cap in ((8, states // 8), (4, states // 4), (1, 0)):
            Ki = c.kernel_of(X, encoding, n, max_bytes=cap)
            qi = median_ms(lambda: c.kernel_of(X, encoding, n, max_bytes=cap), runs, sync)
            say("kernel", impl="qdp-from-inputs", encoding=encoding, samples=N, qubits=n,
                ms=qi, max_bytes=cap or "-", states_over=part)
            say("kernel-ratio", encoding=encoding, samples=N, qubits=n, states_over=part,
                from_inputs_over_resident=qi / q,
                target_from_inputs=1.2 if part == 8 else "-",
                max_abs_diff=float(np.abs(Ki - K).max()))
    return q


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--qubits", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="256 samples x 8 qubits")
    a = ap.parse_args()
    try:
        import torch  # type: ignore[import-not-found]
        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None
    d = Daemon(a.build, "auto", [])
    try:
        with qdp.Client(d.target) as c:
            gpu = c.status().backend == "cuda"
            N, n = (256, 8) if a.quick or not gpu else (a.samples, a.qubits)
            ms = {e: one(c, e, N, n, a.runs, torch if gpu else None)
                  for e in ("phase", "amplitude", "iqp")}
            say("kernel-ratio", samples=N, qubits=n,
                real_over_complex=ms["phase"] / ms["amplitude"], target_real=3)
    finally:
        d.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
