#!/usr/bin/env python3
"""What metrics cost qdpd: a small job's round trip beside one without them, and a scrape.

Usage: python3 bench/metrics_bench.py BUILD [BEFORE_BUILD] [--devices cpu:2] [--rounds 8]

Starts BUILD's qdpd twice, metrics_listen off ("off") and on with a scraper fetching /metrics
every 0.2 s ("on"), and, given BEFORE_BUILD (a build from before the metrics, which counts
nothing), that one too ("before"). Each round times N Encode + Release pairs of a 4-qubit angle
state on each daemon in turn (so drift hits all alike); the p50 of every daemon over all rounds,
and the ratios, are printed as ``bench op=metrics-... key=value`` lines. Then the "on" daemon is
given 4096 states and /metrics is fetched 50 times: the p50 and the worst.
Target: on within 3% of off (and of before) at p50; a scrape of 4096 states < 5 ms.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import statistics
import sys
import threading
import time
import urllib.request
from typing import Dict, List, Optional

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import qdp  # noqa: E402

from python_bench import Daemon, say  # noqa: E402


def metrics_url(d: Daemon) -> str:
    m = re.search(r"serving metrics on (http://\S+)", pathlib.Path(d.log).read_text())
    if not m:
        raise SystemExit(f"qdpd serves no metrics:\n{d.tail()}")
    return m.group(1)


def scrape(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as r:
        r.read()
    return time.perf_counter() - t0


def round_trips(c: qdp.Client, x: np.ndarray, n: int) -> List[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.encode(x, "angle", 4, policy="single").release()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("before", nargs="?", help="a build from before the metrics (counts nothing)")
    ap.add_argument("--devices", default="cpu:2")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--per-round", type=int, default=500)
    args = ap.parse_args()
    build = pathlib.Path(args.build).resolve()
    daemons: Dict[str, Daemon] = {}
    stop = threading.Event()
    try:
        daemons["off"] = Daemon(build, args.devices, [])
        daemons["on"] = Daemon(build, args.devices, ["--metrics-listen", "127.0.0.1:0",
                                                     "--max-client-states", "4096"])
        if args.before:
            daemons["before"] = Daemon(pathlib.Path(args.before).resolve(), args.devices, [])
        url = metrics_url(daemons["on"])

        def scraper() -> None:
            while not stop.wait(0.2):
                scrape(url)

        threading.Thread(target=scraper, daemon=True).start()
        clients = {k: qdp.Client(d.target) for k, d in daemons.items()}
        x = np.full(4, 0.3)
        times: Dict[str, List[float]] = {k: [] for k in daemons}
        for c in clients.values():
            round_trips(c, x, 200)  # warm-up
        for _ in range(args.rounds):
            for k, c in clients.items():
                times[k] += round_trips(c, x, args.per_round)
        p50 = {k: statistics.median(v) for k, v in times.items()}
        for k, v in p50.items():
            say("metrics-round-trip", daemon=k, pairs=len(times[k]), p50_us=v * 1e6)
        say("metrics-round-trip-ratio", on_over_off=p50["on"] / p50["off"], target=1.03)
        if "before" in p50:
            say("metrics-round-trip-ratio", on_over_before=p50["on"] / p50["before"],
                off_over_before=p50["off"] / p50["before"], target=1.03)
        stop.set()
        c = clients["on"]
        states: List[qdp.State] = []
        # One request per state: 4096 states of 2 qubits.
        for _ in range(4096):
            states.append(c.encode(np.full(2, 0.1), "angle", 2, policy="single"))
        ts = [scrape(url) for _ in range(50)]
        say("metrics-scrape", states=c.status().states, scrapes=len(ts),
            p50_ms=statistics.median(ts) * 1e3, max_ms=max(ts) * 1e3, target_ms=5)
        for s in states:
            s.release()
        for cl in clients.values():
            cl.close()
    finally:
        stop.set()
        for d in daemons.values():
            d.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
