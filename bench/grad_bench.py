#!/usr/bin/env python3
"""Gradients through the encodings: qdp.torch.encode beside torch autograd through Mahout's
differentiable reference (qumat_qdp.torch_ref), on the same GPU in the same run.

Usage: bench/grad_bench.py BUILD_DIR [--qubits 16] [--batch 64] [--runs 10]

Starts BUILD_DIR/daemon/qdpd (python_bench's Daemon, --devices auto). For angle (n values a
sample) and amplitude (2^n values), float64 samples on the GPU that require grad, the step timed
is: encode, a loss of the state (sum of |psi|^2 weighted by fixed random weights), backward.
Prints "bench op=grad ..." lines (ms) with qdp's speedup (the target: >= 5x) and the largest
|difference| between the two gradients (they use the same conventions), then "bench op=grad-split"
lines: each forward alone, the rest of its step, and the loss with its backward alone on a state
(the part of a step no encoding saves, which bounds any speedup). Needs a GPU daemon,
torch and qumat_qdp importable.
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
    ap.add_argument("--qubits", type=int, default=16)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    import os

    import torch  # type: ignore[import-not-found]
    from qumat_qdp import torch_ref  # type: ignore[import-not-found]

    import qdp.torch as qt

    n, B = a.qubits, a.batch
    d = Daemon(a.build, "auto", [])
    try:
        os.environ["QDP_TARGET"] = d.target
        if qdp.status().backend != "cuda":
            say("grad", skipped="the daemon has no GPU")
            return 0
        gen = torch.Generator(device="cuda").manual_seed(3)
        w = torch.rand(1 << n, device="cuda", dtype=torch.float64, generator=gen)
        sync = torch.cuda.synchronize
        for encoding, m, ref in (("angle", n, torch_ref.angle_encode),
                                 ("amplitude", 1 << n, torch_ref.amplitude_encode)):
            x = torch.rand(B, m, device="cuda", dtype=torch.float64, generator=gen)

            def step(enc):  # type: ignore[no-untyped-def]
                xx = x.clone().requires_grad_(True)
                ((enc(xx).abs() ** 2) * w).sum().backward()
                return xx.grad

            ours = lambda t: qt.encode(t, encoding, n)  # noqa: E731
            theirs = lambda t: ref(t, n)  # noqa: E731
            diff = float((step(ours) - step(theirs)).abs().max())
            q = median_ms(lambda: step(ours), a.runs, sync)
            r = median_ms(lambda: step(theirs), a.runs, sync)
            say("grad", encoding=encoding, qubits=n, batch=B, qdp_ms=q, torch_ref_ms=r,
                speedup=r / q, target=5, max_abs_diff=diff)
            # Where the step goes: the forward alone (no graph), the rest is the loss and the
            # backward.
            with torch.no_grad():
                qf = median_ms(lambda: ours(x), a.runs, sync)
                rf = median_ms(lambda: theirs(x), a.runs, sync)
            # The loss and its backward alone, on a state that needs no encoding: what every
            # step pays whatever encodes, so no step is faster than r over this.
            psi = theirs(x).detach().requires_grad_(True)
            lo = median_ms(lambda: ((psi.abs() ** 2) * w).sum().backward(), a.runs, sync)
            say("grad-split", encoding=encoding, qubits=n, batch=B, qdp_forward_ms=qf,
                qdp_rest_ms=q - qf, torch_ref_forward_ms=rf, torch_ref_rest_ms=r - rf,
                loss_alone_ms=lo, most_speedup_possible=r / lo)
    finally:
        d.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
