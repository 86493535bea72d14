#!/usr/bin/env python3
"""qdp.torch's loader beside qumat-qdp's QuantumDataLoader, in one run on one GPU.

Usage: python3 bench/loader_bench.py BUILD_DIR [--quick] [--devices 0] [--only a,b,c,d,e]
       [--big-gib 10] [--no-qumat]

Starts BUILD_DIR/daemon/qdpd (as bench/python_bench.py does: its own socket, LD_LIBRARY_PATH at
ROOT/.gpu/lib for qdpd only) and, for each figure, prints ``bench op=loader-... key=value`` lines:

  a  rate      batches of 64 into torch tensors on the GPU, vectors/s, for amplitude and angle
               16 qubits from a NumPy array in memory, an .npy file and a Parquet file (both in the
               page cache; row groups of 128 MiB): qdp with prefetch 0 and 4, in the dtype of
               QuantumDataLoader's batches and in complex128; qumat's QuantumDataLoader on the
               same file (source_file) and, beside the array in memory, on its own synthetic
               data (source_synthetic); the ratio per pair, in the same dtype.
  b  read      the amplitude Parquet file read whole by pyarrow alone (read_table, and row
               group after row group, to NumPy), by qdp.readers, and by the loader into states
               on the GPU: seconds, and the reader's and the loader's time over pyarrow's best.
  c  idle      a model step of 2 ms per batch (a GPU sleep: one kernel, or 20 of 0.1 ms) with
               prefetch 0, 2 and 4: the wall time against the steps' own and the loader's own;
               from CUDA events around each step on the consumer's stream, the wait for the
               first batch, the waits between steps after it (the GPU waiting on the loader),
               and the steps' own stretch (the GPU shared with the daemon's kernels).
  d  big       a Parquet file of --big-gib GiB (16-qubit amplitude rows, a fixed-size list
               column, row groups of 256 MiB) streamed through the loader: rows/s, and the
               growth of the process's resident memory (its peak since the start, against its
               size then) beside the loader's bound (the reader's decoded row groups, cached and
               ahead, each three times while read and converted, and the prefetch slots:
               nothing that grows with the file).

  e  where     (not by default) where angle batches' time goes: the device's write rate
               (a fill), one encode into a kept tensor by rows per request beside the daemon's
               phases (its /metrics), the loader by group and prefetch with the share of the
               pass its consumer waits.

--quick shrinks every size so that the script runs in seconds against a CPU daemon
(--devices cpu:1); the GPU-only parts then skip.
"""

from __future__ import annotations

import argparse
import gc
import os
import pathlib
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import qdp  # noqa: E402
import qdp.readers  # noqa: E402
import qdp.torch as qt  # noqa: E402
import torch  # noqa: E402

from python_bench import Daemon, brief, free_port, phase_sums, say  # noqa: E402


def status_gib(key: str) -> float:
    """A size from /proc/self/status (VmRSS, VmHWM), GiB."""
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024 / (1 << 30)
    raise KeyError(key)


def reset_peak_rss() -> float:
    """Resets the process's peak resident size to its current one (clear_refs 5), which it
    returns, so that a later VmHWM is the peak of what ran since."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status_gib("VmRSS")


def rate(batches: Callable[[], Any], rows: int, sync: Callable[[], None],
         seconds: float) -> float:
    """Vectors/s of iterating ``batches()`` (each yields batches of ``rows``): whole passes,
    repeated for at least ``seconds`` after one warm-up pass, the device synchronized at the
    end of each pass; the best pass."""
    best = 0.0
    t_end = None
    for k in range(1000):
        t0 = time.perf_counter()
        n = 0
        for b in batches():
            n += b.shape[0] if hasattr(b, "shape") else rows
        sync()
        dt = time.perf_counter() - t0
        if k > 0:
            best = max(best, n / dt)
            t_end = t_end or time.perf_counter() + seconds
            if time.perf_counter() >= t_end:
                break
    return best


class Bench:
    def __init__(self, args: argparse.Namespace, target: str, gpu: bool) -> None:
        self.args, self.target, self.gpu = args, target, gpu
        self.q = 8 if args.quick else 16
        self.rows = 64 * (8 if args.quick else 64)
        self.secs = 0.3 if args.quick else 2.0
        self.dir = tempfile.TemporaryDirectory(prefix="qdp-loader-bench-")
        self._files: Dict[str, Dict[str, str]] = {}  # by encoding: written once, read by a and b
        self.qumat: Any = None
        if not args.no_qumat and gpu:
            try:
                import qumat_qdp
                self.qumat = qumat_qdp
            except ImportError as e:
                say("loader-setup", impl="qumat", skipped=brief(e))

    def sync(self) -> None:
        if self.gpu:
            torch.cuda.synchronize()

    def data(self, encoding: str) -> np.ndarray:
        """The rows of a pass: 64 batches of amplitude (2 GiB at 16 qubits), 1024 of angle (its
        rows are small: a pass of 64 would time little more than starting one)."""
        rng = np.random.default_rng(1)
        cols = 1 << self.q if encoding == "amplitude" else self.q
        rows = self.rows if encoding == "amplitude" else self.rows * 16
        return rng.uniform(0.01, 1, size=(rows, cols))

    def files(self, encoding: str, X: np.ndarray) -> Dict[str, str]:
        if encoding in self._files:
            return self._files[encoding]
        import pyarrow as pa
        import pyarrow.parquet as pq

        base = os.path.join(self.dir.name, encoding)
        np.save(base + ".npy", X)
        arr = pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), X.shape[1])
        # Row groups of 128 MiB for amplitude at 16 qubits (256 rows), as data pipelines write.
        pq.write_table(pa.table({"x": arr}), base + ".parquet",
                       row_group_size=max(1, (128 << 20) // X[0].nbytes))
        self._files[encoding] = {"npy": base + ".npy", "parquet": base + ".parquet"}
        return self._files[encoding]

    # ---- (a) ----

    def rate_all(self) -> None:
        for encoding in ("amplitude", "angle"):
            X = self.data(encoding)
            srcs: Dict[str, Any] = {"memory": X}
            try:
                srcs.update(self.files(encoding, X))
            except ImportError as e:
                say("loader-rate", skipped=f"no pyarrow here ({brief(e)}): memory and npy only")
            # QuantumDataLoader reads files or makes its own data: its synthetic source stands
            # beside an array in memory.
            theirs: Dict[str, float] = {}
            same = "complex64"
            for name, src in srcs.items():
                if self.qumat is None:
                    break
                try:
                    r, dt = self.qumat_rate(encoding, None if name == "memory" else src, len(X))
                except Exception as e:
                    say("loader-rate", impl="qumat", encoding=encoding, source=name,
                        error=brief(e))
                    continue
                theirs[name], same = r, dt
                say("loader-rate", impl="qumat", encoding=encoding, qubits=self.q, batch=64,
                    source="synthetic" if name == "memory" else name, dtype=dt, vectors_per_s=r)
            for name, src in srcs.items():
                best = 0.0
                for dtype in (same, "complex128") if same != "complex128" else (same,):
                    for prefetch in (0, 4):
                        try:
                            r = self.qdp_rate(src, encoding, prefetch, dtype)
                        except Exception as e:
                            say("loader-rate", impl="qdp", encoding=encoding, source=name,
                                prefetch=prefetch, dtype=dtype, error=brief(e))
                            continue
                        if dtype == same:
                            best = max(best, r)
                        say("loader-rate", impl="qdp", encoding=encoding, qubits=self.q,
                            batch=64, source=name, prefetch=prefetch, dtype=dtype,
                            vectors_per_s=r, device="cuda" if self.gpu else "cpu")
                if name in theirs and best:
                    say("loader-rate-ratio", encoding=encoding, source=name,
                        against="synthetic" if name == "memory" else name, dtype=same,
                        qdp_over_qumat=best / theirs[name], target=4)

    def qdp_rate(self, src: Any, encoding: str, prefetch: int, dtype: str) -> float:
        ds = qt.QuantumDataset(src, encoding, self.q, batch_size=64, prefetch=prefetch,
                               dtype=dtype, target=self.target)
        try:
            return rate(lambda: iter(ds), 64, self.sync, self.secs)
        finally:
            ds.close()

    def qumat_rate(self, encoding: str, src: Optional[str], rows: int) -> Tuple[float, str]:
        """QuantumDataLoader's vectors/s on the file ``src``, or on its own synthetic data, and
        the dtype of its batches."""
        dtypes = set()

        def run() -> Any:
            ld = self.qumat.QuantumDataLoader(device_id=0, num_qubits=self.q, batch_size=64,
                                              total_batches=rows // 64,
                                              encoding_method=encoding)
            ld = ld.source_synthetic() if src is None else ld.source_file(src)
            for t in ld:
                t = torch.from_dlpack(t)
                dtypes.add(str(t.dtype).replace("torch.", ""))
                yield t
        r = rate(run, 64, self.sync, self.secs)
        return r, ",".join(sorted(dtypes))

    # ---- (b) ----

    def read(self) -> None:
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            say("loader-read", skipped=brief(e))
            return
        X = self.data("amplitude")
        path = self.files("amplitude", X)["parquet"]

        def table() -> None:  # pyarrow's own read: its threads over row groups and columns
            col = pq.read_table(path).column(0).combine_chunks()
            col.values.to_numpy().reshape(len(col), -1)

        def groups() -> None:  # row group after row group, as a streaming reader goes
            f = pq.ParquetFile(path)
            for k in range(f.num_row_groups):
                col = f.read_row_group(k).column(0).combine_chunks()
                col.values.to_numpy().reshape(len(col), -1)

        def ours() -> None:
            with qdp.readers.open_source(path) as src:
                for _ in src.iter_blocks():
                    pass

        def loader() -> None:  # into states on the GPU (the CPU's memory on a CPU daemon)
            ds = qt.QuantumDataset(path, "amplitude", self.q, batch_size=64, prefetch=4,
                                   dtype="complex64", target=self.target)
            for _ in ds:
                pass
            self.sync()
            ds.close()

        t = {}
        for name, fn in (("pyarrow.read_table", table), ("pyarrow-row-groups", groups),
                         ("qdp.readers", ours), ("qdp.torch", loader)):
            fn()
            xs = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                xs.append(time.perf_counter() - t0)
            t[name] = min(xs)
            say("loader-read", impl=name, bytes=X.nbytes, s=t[name], GBps=X.nbytes / t[name] / 1e9)
        arrow = min(t["pyarrow.read_table"], t["pyarrow-row-groups"])
        say("loader-read-ratio", readers_over_pyarrow=t["qdp.readers"] / arrow,
            loader_over_pyarrow=t["qdp.torch"] / arrow, target=1.2)

    # ---- (c) ----

    def idle(self) -> None:
        if not self.gpu:
            say("loader-idle", skipped="the GPU's idle fraction needs a GPU")
            return
        X = self.data("amplitude")
        step_ms = 2.0
        # torch.cuda._sleep spins for a number of cycles: calibrated over about 50 ms, where the
        # launch and the wait are lost.
        cycles = 100_000_000
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            torch.cuda._sleep(cycles)
            torch.cuda.synchronize()
            per_cycle = (time.perf_counter() - t0) / cycles
        step_cycles = int(step_ms / 1e3 / per_cycle)
        steps = len(X) // 64
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            torch.cuda._sleep(step_cycles)
        torch.cuda.synchronize()
        alone = time.perf_counter() - t0
        # The model's step as one kernel of 2 ms, or as 20 of 0.1 ms as a model's layers are.
        # Without MPS the daemon's kernels time-share the GPU with the model's, so the wall
        # time is the steps' plus the encodings' own GPU time at best: printed beside it.
        # Each step is timed on the consumer's stream with CUDA events: a gap between one
        # step's end and the next one's start is the GPU's stream waiting for the loader; a
        # step longer than its own time is the GPU shared with the daemon's kernels.
        for kernels in (1, 20):
            for prefetch in (0, 2, 4):
                ds = qt.QuantumDataset(X, "amplitude", self.q, batch_size=64,
                                       prefetch=prefetch, dtype="complex64",
                                       target=self.target)
                for _ in ds:  # warm-up pass; then the loader alone
                    pass
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in ds:
                    pass
                torch.cuda.synchronize()
                loader = time.perf_counter() - t0
                begin = torch.cuda.Event(enable_timing=True)
                marks = [(torch.cuda.Event(enable_timing=True),
                          torch.cuda.Event(enable_timing=True)) for _ in range(steps)]
                t0 = time.perf_counter()
                begin.record()
                n = 0
                for psi in ds:
                    marks[n][0].record()
                    for _ in range(kernels):  # the model's step, on the consumer's stream
                        torch.cuda._sleep(step_cycles // kernels)
                    marks[n][1].record()
                    n += 1
                torch.cuda.synchronize()
                wall = time.perf_counter() - t0
                ds.close()
                first = begin.elapsed_time(marks[0][0]) / 1e3
                gaps = [marks[i - 1][1].elapsed_time(marks[i][0]) / 1e3 for i in range(1, n)]
                ran = [a.elapsed_time(b) / 1e3 for a, b in marks[:n]]
                say("loader-idle", prefetch=prefetch, kernels_per_step=kernels, steps=n,
                    step_ms=step_ms, steps_alone_s=alone, loader_alone_s=loader, wall_s=wall,
                    first_batch_s=first, waits_after_first_s=sum(gaps),
                    longest_wait_ms=max(gaps, default=0.0) * 1e3,
                    waiting_fraction=sum(gaps) / (first + sum(gaps) + sum(ran)),
                    steps_on_gpu_s=sum(ran), stretch_s=sum(ran) - alone,
                    gpu_idle_fraction=max(0.0, 1 - alone / wall))

    # ---- (e) ----

    def where(self) -> None:
        """Where the time of angle batches from memory goes (complex64, 16 qubits): the
        device's own write rate; one request of R rows into a kept tensor, end to end, beside
        the daemon's phases for it (its /metrics); the loader by group and prefetch, and the
        share of its pass the consumer waits for a batch."""
        if not self.gpu:
            say("loader-where", skipped="needs a GPU")
            return
        q, dim = self.q, 1 << self.q
        X = self.data("angle")
        big = torch.empty((4096, dim), dtype=torch.complex64, device="cuda")
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for rows in (1024, 4096):
            for _ in range(3):
                a.record()
                big[:rows].fill_(1)
                b.record()
                b.synchronize()
            s = a.elapsed_time(b) / 1e3
            say("loader-where", what="torch-fill", rows=rows, bytes=rows * dim * 8, s=s,
                GBps=rows * dim * 8 / s / 1e9, vectors_per_s=rows / s)
        with qdp.Client(self.target) as c:
            for rows in (64, 256, 1024, 4096):
                x = c.empty((rows, q), np.float64)
                x[:] = X[:rows]
                out = big[:rows]
                before = self.phases()
                times = []
                for k in range(40):
                    t0 = time.perf_counter()
                    c.encode(x, "angle", q, dtype="complex64", policy="single", out=out)
                    times.append(time.perf_counter() - t0)
                after = self.phases()
                p50 = sorted(times[5:])[len(times[5:]) // 2]
                per = {f"daemon_{k}_ms": (after[k][0] - before[k][0])
                       / max(1, after[k][1] - before[k][1]) * 1e3 for k in after}
                say("loader-where", what="encode-out", rows=rows, p50_ms=p50 * 1e3,
                    vectors_per_s=rows / p50, **per)
                del x
        del big
        for group in (4, 16, 64):
            for prefetch in (0, 2, 4, 8):
                ds = qt.QuantumDataset(X, "angle", q, batch_size=64, prefetch=prefetch,
                                       dtype="complex64", group=group, target=self.target)
                try:
                    for _ in ds:
                        pass
                    best, share = 0.0, 0.0
                    for _ in range(3):
                        t0 = time.perf_counter()
                        waited = 0.0
                        it = iter(ds)
                        n = 0
                        while True:
                            w0 = time.perf_counter()
                            try:
                                psi = next(it)
                            except StopIteration:
                                break
                            waited += time.perf_counter() - w0
                            n += psi.shape[0]
                        torch.cuda.synchronize()
                        dt = time.perf_counter() - t0
                        if n / dt > best:
                            best, share = n / dt, waited / dt
                finally:
                    ds.close()
                say("loader-where", what="loader", group=group, prefetch=prefetch,
                    vectors_per_s=best, consumer_waiting_fraction=share)

    def phases(self) -> Dict[str, Tuple[float, float]]:
        return phase_sums(self.args.metrics) if self.args.metrics else {}

    # ---- (d) ----

    def big(self) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as e:
            say("loader-big", skipped=brief(e))
            return
        gib = 0.05 if self.args.quick else self.args.big_gib
        dim = 1 << self.q
        group = max(1, (256 << 20) // (dim * 8))  # 256 MiB row groups
        groups = max(1, int(gib * (1 << 30) // (group * dim * 8)))
        path = os.path.join(self.dir.name, "big.parquet")
        rng = np.random.default_rng(2)
        block = rng.uniform(0.01, 1, size=(group, dim))
        schema = pa.schema([("x", pa.list_(pa.float64(), dim))])
        t0 = time.perf_counter()
        with pq.ParquetWriter(path, schema) as w:
            arr = pa.FixedSizeListArray.from_arrays(pa.array(block.reshape(-1)), dim)
            for _ in range(groups):
                w.write_table(pa.table({"x": arr}), row_group_size=group)
        del block, arr
        gc.collect()
        size = os.path.getsize(path)
        say("loader-big", file_GiB=size / (1 << 30), row_groups=groups, rows_per_group=group,
            write_s=time.perf_counter() - t0)
        ds = qt.QuantumDataset(path, "amplitude", self.q, batch_size=64, prefetch=4,
                               target=self.target)
        rss0 = reset_peak_rss()
        t0 = time.perf_counter()
        n = 0
        for psi in ds:
            n += psi.shape[0]
        self.sync()
        dt = time.perf_counter() - t0
        peak = status_gib("VmHWM")
        # What the loader may hold, none of it growing with the file: the reader's decoded row
        # groups (2 cached, readahead ahead, one per prefetch thread being read; each counted
        # three times: the file's bytes as read, the Arrow array, the NumPy rows), and the
        # prefetch slots of a request each.
        held = 2 + ds.source.readahead + ds.prefetch
        bound = (3 * held * group * dim * 8 + ds.prefetch * ds.group * 64 * dim * 8) / (1 << 30)
        say("loader-big", rows=n, s=dt, rows_per_s=n / dt, input_GBps=size / dt / 1e9,
            rss_before_GiB=rss0, peak_rss_GiB=peak, growth_GiB=peak - rss0,
            bound_GiB=bound, within=peak - rss0 <= bound)
        ds.close()
        os.unlink(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", help="the build folder (its daemon/qdpd is started)")
    ap.add_argument("--quick", action="store_true", help="small sizes: seconds, on a CPU daemon")
    ap.add_argument("--devices", default="0", help="qdpd --devices (default GPU 0)")
    ap.add_argument("--only", default="a,b,c,d", help="parts to run (default all)")
    ap.add_argument("--big-gib", type=float, default=10.0, help="part d's file size")
    ap.add_argument("--no-qumat", action="store_true", help="qdp figures only")
    args = ap.parse_args()
    extra: List[str] = []
    args.metrics = ""
    if "e" in args.only:  # part e reads the daemon's phases from its metrics
        args.metrics = free_port()
        extra = ["--metrics_listen", args.metrics]
    daemon = Daemon(pathlib.Path(args.build).resolve(), args.devices, extra)
    rc = 0
    try:
        with qdp.Client(daemon.target) as c:
            gpu = c.status().backend == "cuda" and torch.cuda.is_available()
        b = Bench(args, daemon.target, gpu)
        parts = {"a": b.rate_all, "b": b.read, "c": b.idle, "d": b.big, "e": b.where}
        for p in [x.strip() for x in args.only.split(",") if x.strip()]:
            t0 = time.perf_counter()
            try:
                parts[p]()
            except Exception as e:
                say("loader-" + p, error=brief(e))
                rc = 1
            say("loader-time", part=p, s=time.perf_counter() - t0)
    finally:
        daemon.stop()
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
