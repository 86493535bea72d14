#!/usr/bin/env python3
"""qdp from Python on the GPUs of one node: a state's shards, its gather, and loading under DDP.

Usage: python3 bench/two_gpu_bench.py BUILD_DIR [--qubits 30] [--samples 16384] [--epochs 4]
       [--quick] [--only shards,gather,ddp]

Starts BUILD_DIR/daemon/qdpd --devices auto (as bench/python_bench.py does) and prints
``bench op=py2-... key=value`` lines:

  shards  an angle state of --qubits qubits (complex128) encoded with policy "even": .shards()
          must give one view per shard, each read in place on its own GPU (a torch tensor over
          the view's own address, no copy) and holding the reference's amplitudes
          (tests/reference/qdpref.py) at the first, middle and last index of the shard.
  gather  .torch(device="cuda:0") of that state, beside a bare copy in the same run of as many
          bytes from GPU 1 to GPU 0 into memory already allocated (torch): the gather's
          link rate (the bytes that cross from the other GPUs over its time) against the bare
          copy's, target 0.8. The gathered tensor is checked against the reference at both
          ends and across the middle.
  ddp     qdp.torch's QuantumDataset under torch.distributed, one process per GPU (NCCL): 16-qubit
          amplitude batches of 64 delivered to each rank's own GPU, with each sample's index as
          its label, from an array in each rank's memory (--samples rows of 2^16 float64:
          8 GiB at the default). --epochs epochs are timed after a warm-up one; in the warm-up the
          samples of all ranks must be disjoint and together all of them (all_gather_object),
          and each state its own sample's (its largest amplitude at the sample's index). The
          ranks' rate (all samples over the slowest rank's time) against one rank alone in the
          same run, target 1.8x.

With one GPU the two-GPU figures are not taken: shards and gather say so, and ddp runs its two
ranks on GPU 0 over gloo, a check of the script and of the loader's sharing, not a figure.
--quick shrinks the sizes for a CPU daemon (--devices cpu:2, ranks on the CPU over gloo).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
from typing import Any, Dict, List, Tuple

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "reference"))

import qdp  # noqa: E402
import qdpref  # noqa: E402
import torch  # noqa: E402

from python_bench import Daemon, brief, free_port, median, repeat, say  # noqa: E402


def gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def part_shards(c: qdp.Client, args: argparse.Namespace) -> Tuple[bool, Any]:
    """The sharded state (kept for part gather) and whether its views checked out."""
    x = np.random.default_rng(3).uniform(0.2, 1.2, size=args.qubits)
    s = c.encode(x, "angle", args.qubits, policy="even")
    shards = s.info.shards
    if len(shards) < 2 or not all(sh.device.startswith("cuda") for sh in shards):
        say("py2-shards", qubits=args.qubits, shards=len(shards),
            skipped="the state is on one device: two GPUs are needed")
        return True, (s, x)
    ok = True
    views = s.shards()
    try:
        for v in views:
            t = torch.as_tensor(v, device=f"cuda:{v.ordinal}")
            in_place = t.data_ptr() == v.ptr and t.device.index == v.ordinal
            sh = v.shard
            picks = [0, sh.count // 2, sh.count - 1]
            got = t[0, picks].cpu().numpy()
            want = qdpref.angle(x, args.qubits, [sh.first + i for i in picks]).real
            close = bool(np.allclose(got.real, want, rtol=1e-12, atol=1e-300) and
                         np.all(got.imag == 0))
            ok = ok and in_place and close
            say("py2-shards", qubits=args.qubits, device=sh.device, first=sh.first,
                count=sh.count, in_place="yes" if in_place else "NO",
                values="ok" if close else "WRONG")
    finally:
        views[0].close()
    return ok, (s, x)


def part_gather(state: Any, args: argparse.Namespace) -> bool:
    s, x = state
    shards = s.info.shards
    if len(shards) < 2 or gpus() < 2:
        say("py2-gather", qubits=args.qubits, skipped="two GPUs are needed")
        return True
    esize = 16
    remote = sum(sh.count for sh in shards if sh.device != "cuda:0") * esize
    reps = args.reps

    def sync() -> None:
        for d in range(gpus()):
            torch.cuda.synchronize(d)

    def gather() -> Any:
        t = s.torch(device="cuda:0")
        sync()
        return t

    # A bare copy of as many bytes from GPU 1 into memory already allocated on GPU 0, freed
    # before the check below gathers the state once more.
    bufs = {"src": torch.empty(remote, dtype=torch.uint8, device="cuda:1"),
            "dst": torch.empty(remote, dtype=torch.uint8, device="cuda:0")}

    def peer() -> None:
        bufs["dst"].copy_(bufs["src"])
        sync()

    t_peer = median(repeat(peer, reps))
    t_gather = median(repeat(gather, reps))
    t_peer2 = median(repeat(peer, reps))
    bufs.clear()
    peer_gbps = remote / min(t_peer, t_peer2) / 1e9
    link_gbps = remote / t_gather / 1e9
    t = s.torch(device="cuda:0")
    mid = (1 << args.qubits) // 2
    picks = [0, mid - 1, mid, (1 << args.qubits) - 1]
    got = t.flatten()[picks].cpu().numpy()
    same = bool(np.allclose(got.real, qdpref.angle(x, args.qubits, picks).real, rtol=1e-12,
                            atol=1e-300))
    del t
    say("py2-gather", qubits=args.qubits, state_bytes=(1 << args.qubits) * esize,
        remote_bytes=remote, ms=t_gather * 1e3, link_GBps=link_gbps, peer_GBps=peer_gbps,
        of_peer=link_gbps / peer_gbps, target=0.8, values="ok" if same else "WRONG")
    return same


def ddp_rank(rank: int, world: int, target: str, args: Dict[str, Any], port: str,
             out: Any) -> None:
    """One rank of part ddp: its epoch's seconds, its labels and whether its states matched."""
    import torch.distributed as dist

    backend, on_gpu = args["backend"], args["on_gpu"]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        dev = torch.device(f"cuda:{rank % max(gpus(), 1)}") if on_gpu else torch.device("cpu")
        if on_gpu:
            torch.cuda.set_device(dev)
        import qdp.torch as qt

        n, q = args["samples"], args["qubits"]
        # Sample i: 1 at index i mod 2^q over a floor of 0.01, so its state's largest amplitude
        # names it.
        X = np.full((n, 1 << q), 0.01)
        X[np.arange(n), np.arange(n) % (1 << q)] = 1.0
        ds = qt.QuantumDataset(X, "amplitude", q, batch_size=64, device=dev, prefetch=4,
                               labels=np.arange(n), target=target, rank=rank, world_size=world)

        def epoch(check: bool) -> Tuple[float, List[int], bool]:
            ds.set_epoch(ds.epoch + 1)
            seen: List[int] = []
            good = True
            t0 = time.perf_counter()
            for states, labels in ds:
                if check:
                    peak = states.abs().argmax(dim=1).cpu()
                    good = good and bool(torch.equal(peak, labels.cpu() % (1 << q)))
                    seen.extend(labels.tolist())
            if on_gpu:
                torch.cuda.synchronize(dev)
            return time.perf_counter() - t0, seen, good

        _, seen, good = epoch(True)  # the warm-up checks every state
        dist.barrier()
        seconds = sum(epoch(False)[0] for _ in range(args["epochs"]))
        ds.close()
        got: List[Any] = [None] * world
        dist.all_gather_object(got, (seconds, seen, good))
        if rank == 0:
            out.put(got)
    finally:
        dist.destroy_process_group()


def run_ddp(world: int, target: str, args: Dict[str, Any]) -> List[Tuple[float, List[int], bool]]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port().rsplit(":", 1)[1]
    procs = [ctx.Process(target=ddp_rank, args=(r, world, target, args, port, q))
             for r in range(world)]
    for p in procs:
        p.start()
    import queue

    deadline = time.monotonic() + 900
    while True:
        try:
            got = q.get(timeout=1)
            break
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"{world} rank(s): exit codes {[p.exitcode for p in procs]}"
                                   " (a rank failed or the run passed 900 s)")
    for p in procs:
        p.join(120)
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a rank exited with {[p.exitcode for p in procs]}")
    return got


def part_ddp(target: str, args: argparse.Namespace, gpu_daemon: bool) -> bool:
    two = gpus() >= 2 and gpu_daemon
    on_gpu = gpu_daemon and gpus() >= 1
    backend = "nccl" if two else "gloo"
    opts = {"samples": args.samples, "qubits": args.ddp_qubits, "backend": backend,
            "on_gpu": on_gpu, "epochs": args.epochs}
    one = run_ddp(1, target, opts)
    both = run_ddp(2, target, opts)
    n = args.samples
    labels = [sorted(r[1]) for r in both]
    union = sorted(labels[0] + labels[1])
    disjoint = not set(labels[0]) & set(labels[1])
    whole = union == list(range(n))
    states_ok = all(r[2] for r in both + one)
    one_rate = n * args.epochs / one[0][0]
    rate = n * args.epochs / max(r[0] for r in both)
    say("py2-ddp", ranks=2, backend=backend, gpus=min(gpus(), 2) if on_gpu else 0,
        qubits=args.ddp_qubits, batch=64, samples=n, vectors_per_s=rate,
        one_rank_vectors_per_s=one_rate, speedup=rate / one_rate,
        target=1.8 if two else ("none: one GPU" if on_gpu else "none: a CPU daemon"),
        disjoint="yes" if disjoint else "NO",
        all_samples="yes" if whole else "NO", states="ok" if states_ok else "WRONG",
        per_rank=",".join(str(len(x)) for x in labels))
    return disjoint and whole and states_ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", help="the build folder (its daemon/qdpd is started)")
    ap.add_argument("--qubits", type=int, default=30, help="the sharded state (default 30)")
    ap.add_argument("--samples", type=int, default=16384, help="part ddp's samples (16384)")
    ap.add_argument("--epochs", type=int, default=4, help="part ddp's timed epochs (4)")
    ap.add_argument("--ddp-qubits", type=int, default=16, help="part ddp's qubits (default 16)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions (default 5)")
    ap.add_argument("--devices", default="auto", help="qdpd --devices (default auto)")
    ap.add_argument("--only", default="shards,gather,ddp", help="parts to run (default all)")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes, for a CPU daemon: --devices cpu:2, seconds")
    args = ap.parse_args()
    if args.quick:
        args.qubits, args.samples, args.ddp_qubits, args.reps, args.epochs = 12, 4096, 6, 2, 1
        if args.devices == "auto":
            args.devices = "cpu:2"
    for name, low, high in (("qubits", 2, 40), ("ddp_qubits", 1, 24), ("samples", 128, 1 << 24),
                            ("reps", 1, 100), ("epochs", 1, 100)):
        v = getattr(args, name)
        if not low <= v <= high:
            ap.error(f"--{name.replace('_', '-')} must be in {low}..{high}, not {v}")
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = sorted(set(parts) - {"shards", "gather", "ddp"})
    if unknown:
        ap.error(f"--only: unknown part(s) {', '.join(unknown)}; choose from shards, gather, ddp")
    daemon = Daemon(pathlib.Path(args.build).resolve(), args.devices, [])
    ok = True
    try:
        with qdp.Client(daemon.target) as c:
            gpu_daemon = c.status().backend == "cuda"
            state = None
            for p in parts:
                try:
                    if p in ("shards", "gather") and not gpu_daemon:
                        say("py2-" + p, skipped="a CPU daemon: shards are GPU views")
                        continue
                    if p == "shards" or (p == "gather" and state is None):
                        good, state = part_shards(c, args)
                        ok = ok and (good or p != "shards")
                    if p == "gather":
                        ok = part_gather(state, args) and ok
                    if p == "ddp":
                        ok = part_ddp(daemon.target, args, gpu_daemon) and ok
                except Exception as e:  # the other parts still run
                    say("py2-" + p, error=brief(e))
                    ok = False
            if state is not None:
                state[0].release()
    finally:
        daemon.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
