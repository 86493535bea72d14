#!/usr/bin/env python3
"""iqp over two CPU devices against one, through qdpd, in one run.

Usage: python3 bench/iqp_cpu_bench.py BUILD [OLD_BUILD] [--qubits 22] [--repeat 9]

Starts BUILD's qdpd on cpu:2 (and OLD_BUILD's, given one, one after the other) with its metrics
on, and encodes one iqp state of --qubits (complex128, pair terms) on one device (policy single)
and over both (policy even), alternately, --repeat times each. Per job: the daemon's encode phase
(qdp_job_phase_seconds{phase="encode"}, read around the job), its collective phase (the time
spent between shards) and the call's wall time. Prints ``bench op=iqp-cpu ...`` per build and
device count (medians), whether the two states have the same bits, what the shards exchanged
(the state's collective: "none" is nothing), and the ratio one device over two.
Target: >= 1.5x on a 2-core machine, with nothing exchanged.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time
from typing import Dict, List

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import qdp  # noqa: E402

from python_bench import Daemon, free_port, phase_sums, say  # noqa: E402


def run(build: pathlib.Path, name: str, args: argparse.Namespace) -> None:
    addr = free_port()
    d = Daemon(build, "cpu:2", ["--metrics_listen", addr])
    n = args.qubits
    x = np.random.default_rng(3).uniform(-1, 1, size=n + n * (n - 1) // 2)
    got: Dict[str, Dict[str, List[float]]] = {p: {"encode": [], "collective": [], "wall": []}
                                              for p in ("single", "even")}
    bits: Dict[str, bytes] = {}
    how: Dict[str, str] = {}
    try:
        with qdp.Client(d.target) as c:
            for k in range(args.repeat + 1):  # the first round warms up
                for policy in ("single", "even"):
                    before = phase_sums(addr)
                    t0 = time.perf_counter()
                    s = c.encode(x, "iqp", n, policy=policy)
                    wall = time.perf_counter() - t0
                    after = phase_sums(addr)
                    how[policy] = s.info.collective
                    if k == 0:
                        bits[policy] = s.numpy().tobytes()
                    s.release()
                    if k == 0:
                        continue
                    for phase in ("encode", "collective"):
                        was, now = before.get(phase, (0, 0)), after.get(phase, (0, 0))
                        got[policy][phase].append(now[0] - was[0])
                    got[policy]["wall"].append(wall)
    finally:
        d.stop()
    med = {p: {k: statistics.median(v) for k, v in got[p].items()} for p in got}
    for policy, devices in (("single", 1), ("even", 2)):
        say("iqp-cpu", build=name, qubits=n, devices=devices, encode_ms=med[policy]["encode"] * 1e3,
            collective_ms=med[policy]["collective"] * 1e3, wall_ms=med[policy]["wall"] * 1e3,
            exchanged=how[policy])
    say("iqp-cpu-ratio", build=name, qubits=n, same_bits=bits["single"] == bits["even"],
        one_over_two_encode=med["single"]["encode"] / med["even"]["encode"],
        one_over_two_wall=med["single"]["wall"] / med["even"]["wall"], target=1.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", help="the build folder (its daemon/qdpd is started)")
    ap.add_argument("old", nargs="?", help="a build to run beside it, after it")
    ap.add_argument("--qubits", type=int, default=22)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    run(pathlib.Path(args.build).resolve(), "new", args)
    if args.old:
        run(pathlib.Path(args.old).resolve(), "old", args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
