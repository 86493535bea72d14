#!/usr/bin/env python3
"""Views handed out as descriptors against legacy CUDA IPC views, side by side on one GPU: what a
view costs to open and close, and whether state memory made exportable (CUDA virtual memory
management) changes the encode.

Usage: bench/view_bench.py BUILD_DIR [--qubits 20,24,30] [--runs 15] [--json PATH]

Starts BUILD_DIR/daemon/qdpd twice on the GPUs (--devices auto, one after the other): as it
runs by default (views as file descriptors) and with --legacy-ipc-views (cudaMalloc'd states,
CUDA IPC handles). For each qubit count n, one angle state of n qubits (complex128, policy
"single"), and each figure the median of --runs after a warm-up:

  view     State.shards() and the views' close: Describe with views, the descriptor's take on
           the socket and its mapping (or cudaIpcOpenMemHandle), the unmapping and CloseView
  encode   the same encode again and again, released each time: the daemon's encode_ms
           (device time) and the call's wall time, which includes the allocation and its reuse

Each figure is a line ``bench op=views mode=fd|ipc what=... qubits=n ms=...``, and for each pair
one ``bench op=views-ratio`` with fd over ipc (the baseline gate: encode ratios near 1.0).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Dict, List

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from python_bench import Daemon, median, say  # noqa: E402

import numpy as np  # noqa: E402

import qdp  # noqa: E402


def measure(c: qdp.Client, n: int, runs: int) -> Dict[str, float]:
    x = np.random.default_rng(n).uniform(-1, 1, size=n)
    out: Dict[str, float] = {}
    with c.encode(x, "angle", n, policy="single") as s:
        def view() -> None:
            vs = s.shards()
            vs[0].close()
        view()
        xs: List[float] = []
        for _ in range(runs):
            t0 = time.perf_counter()
            view()
            xs.append((time.perf_counter() - t0) * 1e3)
        out["view"] = median(xs)
    walls, devs = [], []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        s = c.encode(x, "angle", n, policy="single")
        wall = (time.perf_counter() - t0) * 1e3
        dev = s.info.encode_ms
        s.release()
        if i:
            walls.append(wall)
            devs.append(dev)
    out["encode_wall"] = median(walls)
    out["encode_device"] = median(devs)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--qubits", default="20,24,30")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", type=pathlib.Path)
    a = ap.parse_args()
    qubits = [int(q) for q in a.qubits.split(",")]
    figures: Dict[str, Dict[int, Dict[str, float]]] = {}
    for mode, extra in (("fd", []), ("ipc", ["--legacy-ipc-views"])):
        d = Daemon(a.build, "auto", extra)
        try:
            with qdp.Client(d.target, name="view-bench") as c:
                if c.status().backend != "cuda":
                    say("views", skipped="no GPU: the daemon chose the CPU backend")
                    return 0
                figures[mode] = {}
                for n in qubits:
                    f = measure(c, n, a.runs)
                    figures[mode][n] = f
                    for what, ms in f.items():
                        say("views", mode=mode, what=what, qubits=n, ms=ms)
        finally:
            d.stop()
    for n in qubits:
        for what in figures["fd"][n]:
            fd, ipc = figures["fd"][n][what], figures["ipc"][n][what]
            say("views-ratio", what=what, qubits=n, fd_ms=fd, ipc_ms=ipc,
                fd_over_ipc=fd / ipc if ipc else float("nan"))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
