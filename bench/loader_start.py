#!/usr/bin/env python3
"""How long qdp.torch.loader's DataLoader workers take to start and hand over their first batch,
through this user's private daemon (qdp.LocalDaemon), as a training script meets them.

Usage: python3 bench/loader_start.py [--runs 3] [--workers 2] [--qubits 16] [--batch 64]
       [--methods auto,spawn] [--device cpu] [--timeout 60]

This process joins the private daemon (starting it when none runs: ``op=private-daemon-start``)
and holds it, so that every measurement finds it running. Each measurement is a fresh process
of this script (``--one``), which starts, as a training script does, with no gRPC and no CUDA: it
imports torch and qdp.torch, makes a QuantumDataset of random angle rows with no target (the
private daemon) and ``qdp.torch.loader(ds, num_workers=W)``, whose workers start by the method
the loader picks ("auto": fork where that is safe) or by the one named, and times from the
making of the iterator:

  started_ms      the last worker's worker_init_fn (every worker process is up)
  ms              the first batch in this process
  all_ms          a batch from every worker
  next_epoch_ms   the first batch of the next epoch (persistent workers: nothing starts)

On a GPU daemon the batches are CUDA tensors (the data set's default device; --device names
another), so ``ms`` also holds this process's own CUDA start, which receiving the first one
makes. Every batch taken is
checked against tests/reference/qdpref.py (on PYTHONPATH, or beside this checkout). Prints one
``bench op=loader-start method=... workers=... ms=... ...`` line per measurement and a median
per method (``bench op=loader-start-median``); a failed measurement prints ``error=`` and ends
the script with status 1. Imports qdp from PYTHONPATH as it is (an installed wheel, or
client/python of a checkout).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List

import numpy as np

import qdp

ROOT = pathlib.Path(__file__).resolve().parents[1]


def say(op: str, **kv: Any) -> None:
    """One ``bench op=... key=value`` line, as bench/regress.py reads them."""
    parts = [f"bench op={op}"]
    for k, v in kv.items():
        if isinstance(v, float):
            v = f"{v:.4g}"
        elif isinstance(v, str) and (" " in v or "=" in v or not v):
            v = '"' + v.replace('"', "'") + '"'
        parts.append(f"{k}={v}")
    print(" ".join(parts), flush=True)


def _started(stamps: Any, worker_id: int) -> None:
    """worker_init_fn: the moment this worker's process is up (CLOCK_MONOTONIC is the host's)."""
    stamps[worker_id] = time.monotonic()


def one(args: argparse.Namespace) -> Dict[str, Any]:
    """A measurement in this fresh process; returns its figures."""
    t0 = time.monotonic()
    import torch

    import qdp.torch as qt
    try:
        import qdpref as ref
    except ImportError:
        sys.path.insert(0, str(ROOT / "tests" / "reference"))
        import qdpref as ref
    import_ms = (time.monotonic() - t0) * 1e3
    w, q, b = args.workers, args.qubits, args.batch
    X = np.random.default_rng(0).uniform(-1, 1, size=(b * w * 4, q))
    ds = qt.QuantumDataset(X, "angle", q, batch_size=b, labels=np.arange(len(X)),
                           device=args.device)
    stamps = torch.zeros(w, dtype=torch.float64).share_memory_()
    kw = {} if args.one == "auto" else {"multiprocessing_context": args.one}
    dl = qt.loader(ds, num_workers=w, worker_init_fn=functools.partial(_started, stamps), **kw)
    got = []
    t0 = time.monotonic()
    it = iter(dl)
    got.append(next(it))
    t1 = time.monotonic()
    while len(got) < w:
        got.append(next(it))
    t2 = time.monotonic()
    del it
    ctx = dl.multiprocessing_context
    method = ctx if isinstance(ctx, str) else ctx.get_start_method()
    ds.set_epoch(1)
    t3 = time.monotonic()
    it = iter(dl)
    got.append(next(it))
    t4 = time.monotonic()
    del it
    err = 0.0
    for states, rows in got:
        want = ref.batch("angle", X[rows.cpu().numpy()], q)
        err = max(err, float(np.abs(states.cpu().numpy() - want).max()))
    out = {"method": method, "pick": args.one, "device": str(got[0][0].device),
           "import_ms": import_ms, "started_ms": (float(stamps.max()) - t0) * 1e3,
           "ms": (t1 - t0) * 1e3, "all_ms": (t2 - t0) * 1e3, "next_epoch_ms": (t4 - t3) * 1e3,
           "max_err": err}
    del got, dl
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="fresh processes per method")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--qubits", type=int, default=16)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--methods", default="auto,spawn",
                   help="start methods, comma-separated: auto (the loader's pick), fork, spawn, "
                        "forkserver")
    p.add_argument("--device", help="the data set's device (default: its own choice)")
    p.add_argument("--timeout", type=float, default=60,
                   help="seconds a measurement process may take")
    p.add_argument("--one", help=argparse.SUPPRESS)  # a measurement process: its method
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args)), flush=True)
        return 0
    for name in ("QDP_TARGET", "QDP_SOCKET"):
        if os.environ.get(name):
            p.error(f"{name} is set: the workers would use that daemon, not the private one; "
                    "unset it")
    if qdp._local.answers(qdp.default_target()):
        p.error(f"a daemon answers at {qdp.default_target()}: the workers would use it, not the "
                "private one; stop it, or run as another user")
    t0 = time.monotonic()
    with qdp.LocalDaemon() as d:
        say("private-daemon-start", ms=(time.monotonic() - t0) * 1e3)
        say("private-daemon", qdpd=os.readlink(f"/proc/{d.pid}/exe"), pid=d.pid)
        rc = 0
        for method in args.methods.split(","):
            runs: List[Dict[str, Any]] = []
            for _ in range(args.runs):
                cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--one", method,
                       "--workers", str(args.workers), "--qubits", str(args.qubits),
                       "--batch", str(args.batch)]
                if args.device:
                    cmd += ["--device", args.device]
                try:
                    done = subprocess.run(cmd, capture_output=True, text=True,
                                          timeout=args.timeout)
                    last = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
                    said = " | ".join(done.stderr.strip().splitlines()[-6:])
                    why = f"exit {done.returncode}: {said}"
                except subprocess.TimeoutExpired:
                    last, why = [], f"no answer within {args.timeout:g} s (--timeout)"
                if not last:
                    say("loader-start", pick=method, workers=args.workers, error=why)
                    rc = 1
                    continue
                r = json.loads(last[0])
                if r["max_err"] > 1e-12:
                    r["error"] = "batches differ from qdpref's states"
                    rc = 1
                runs.append(r)
                say("loader-start", method=r["method"], pick=method, workers=args.workers,
                    qubits=args.qubits, batch=args.batch, device=r["device"],
                    ms=r["ms"], started_ms=r["started_ms"], all_ms=r["all_ms"],
                    next_epoch_ms=r["next_epoch_ms"], import_ms=r["import_ms"],
                    max_err=r["max_err"], **({"error": r["error"]} if "error" in r else {}))
            if runs:
                say("loader-start-median", method=runs[0]["method"], pick=method,
                    workers=args.workers, runs=len(runs),
                    **{k + "_median": statistics.median(r[k] for r in runs)
                       for k in ("started_ms", "ms", "all_ms", "next_epoch_ms")})
    return rc


if __name__ == "__main__":
    sys.exit(main())
