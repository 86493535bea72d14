#!/usr/bin/env python3
"""qdp.torch's loader beside qumat-qdp's QuantumDataLoader, in one run on one GPU.

Usage: python3 bench/loader_bench.py BUILD_DIR [--quick] [--devices 0] [--only a,b,c,d]
       [--big-gib 10] [--no-qumat]

Starts BUILD_DIR/daemon/qdpd (as bench/python_bench.py does: its own socket, LD_LIBRARY_PATH at
ROOT/.gpu/lib for qdpd only) and, for each figure, prints ``bench op=loader-... key=value`` lines:

  a  rate      batches of 64 into torch tensors on the GPU, vectors/s, for amplitude and angle
               16 qubits from a NumPy array in memory, an .npy file and a Parquet file (both in the
               page cache): qdp with prefetch 0 and 4; qumat's QuantumDataLoader on the same file
               (source_file) and on its own synthetic data (source_synthetic); the ratio per pair.
  b  read      the Parquet file read whole by pyarrow alone (row groups to NumPy) and by
               qdp.readers (the loader's reader), seconds and the reader's overhead.
  c  idle      a model step of 2 ms (a GPU sleep) per batch with prefetch 0, 2 and 4: the wall
               time against the steps' own, i.e. the fraction the GPU waited on the loader.
  d  big       a Parquet file of --big-gib GiB (16-qubit amplitude rows, a fixed-size list
               column) streamed through the loader: rows/s and the process's peak RSS against
               the reader's bound (two kept row groups and one being decoded, its Arrow table and
               NumPy copy, plus the prefetch slots: nothing that grows with the file).

--quick shrinks every size so that the script runs in seconds against a CPU daemon
(--devices cpu:1); the GPU-only parts then skip.
"""

from __future__ import annotations

import argparse
import gc
import os
import pathlib
import resource
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Optional

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import qdp  # noqa: E402
import qdp.readers  # noqa: E402
import qdp.torch as qt  # noqa: E402
import torch  # noqa: E402

from python_bench import Daemon, brief, say  # noqa: E402


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / (1 << 30)


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
        rng = np.random.default_rng(1)
        cols = 1 << self.q if encoding == "amplitude" else self.q
        return rng.uniform(0.01, 1, size=(self.rows, cols))

    def files(self, encoding: str, X: np.ndarray) -> Dict[str, str]:
        if encoding in self._files:
            return self._files[encoding]
        import pyarrow as pa
        import pyarrow.parquet as pq

        base = os.path.join(self.dir.name, encoding)
        np.save(base + ".npy", X)
        arr = pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), X.shape[1])
        pq.write_table(pa.table({"x": arr}), base + ".parquet", row_group_size=1024)
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
            ours: Dict[str, float] = {}
            for name, src in srcs.items():
                for prefetch in (0, 4):
                    try:
                        r = self.qdp_rate(src, encoding, prefetch)
                        ours[name] = max(ours.get(name, 0.0), r)
                        say("loader-rate", impl="qdp", encoding=encoding, qubits=self.q,
                            batch=64, source=name, prefetch=prefetch, vectors_per_s=r,
                            device="cuda" if self.gpu else "cpu")
                    except Exception as e:
                        say("loader-rate", impl="qdp", encoding=encoding, source=name,
                            prefetch=prefetch, error=brief(e))
            if self.qumat is None:
                continue
            total = self.rows // 64
            for name, src in list(srcs.items()) + [("synthetic", None)]:
                if name == "memory":
                    continue  # QuantumDataLoader reads files or makes its own data
                try:
                    r = self.qumat_rate(encoding, src, total)
                except Exception as e:
                    say("loader-rate", impl="qumat", encoding=encoding, source=name,
                        error=brief(e))
                    if name != "parquet":
                        continue
                    # QuantumDataLoader may want a variable-length list column: the same rows
                    # in that layout, read by both loaders, so that the pair still compares.
                    try:
                        src = self.list_parquet(encoding, X)
                        r = self.qumat_rate(encoding, src, total)
                        name = "parquet-list"
                        ours[name] = self.qdp_rate(src, encoding, 4)
                        say("loader-rate", impl="qdp", encoding=encoding, qubits=self.q,
                            batch=64, source=name, prefetch=4, vectors_per_s=ours[name])
                    except Exception as e2:
                        say("loader-rate", impl="qumat", encoding=encoding,
                            source="parquet-list", error=brief(e2))
                        continue
                say("loader-rate", impl="qumat", encoding=encoding, qubits=self.q, batch=64,
                    source=name, vectors_per_s=r)
                if name in ours:
                    say("loader-rate-ratio", encoding=encoding, source=name,
                        qdp_over_qumat=ours[name] / r, target=4)

    def qdp_rate(self, src: Any, encoding: str, prefetch: int) -> float:
        ds = qt.QuantumDataset(src, encoding, self.q, batch_size=64, prefetch=prefetch,
                               target=self.target)
        return rate(lambda: iter(ds), 64, self.sync, self.secs)

    def qumat_rate(self, encoding: str, src: Optional[str], total: int) -> float:
        """QuantumDataLoader's vectors/s on the file ``src``, or on its own synthetic data."""
        def run() -> Any:
            ld = self.qumat.QuantumDataLoader(device_id=0, num_qubits=self.q, batch_size=64,
                                              total_batches=total, encoding_method=encoding)
            ld = ld.source_synthetic() if src is None else ld.source_file(src)
            return (torch.from_dlpack(t) for t in ld)
        return rate(run, 64, self.sync, self.secs)

    def list_parquet(self, encoding: str, X: np.ndarray) -> str:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = os.path.join(self.dir.name, encoding + "-list.parquet")
        offsets = pa.array(np.arange(0, X.size + 1, X.shape[1], dtype=np.int32))
        arr = pa.ListArray.from_arrays(offsets, pa.array(X.reshape(-1)))
        pq.write_table(pa.table({"x": arr}), path, row_group_size=1024)
        return path

    # ---- (b) ----

    def read(self) -> None:
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            say("loader-read", skipped=brief(e))
            return
        X = self.data("amplitude")
        path = self.files("amplitude", X)["parquet"]

        def arrow() -> None:
            f = pq.ParquetFile(path)
            for k in range(f.num_row_groups):
                col = f.read_row_group(k).column(0).combine_chunks()
                col.values.to_numpy().reshape(len(col), -1)

        def ours() -> None:
            with qdp.readers.open_source(path) as src:
                for _ in src.iter_blocks():
                    pass

        t = {}
        for name, fn in (("pyarrow", arrow), ("qdp.readers", ours)):
            fn()
            xs = []
            for _ in range(3 if self.args.quick else 5):
                t0 = time.perf_counter()
                fn()
                xs.append(time.perf_counter() - t0)
            t[name] = min(xs)
            say("loader-read", impl=name, bytes=X.nbytes, s=t[name], GBps=X.nbytes / t[name] / 1e9)
        say("loader-read-ratio", readers_over_pyarrow=t["qdp.readers"] / t["pyarrow"], target=1.2)

    # ---- (c) ----

    def idle(self) -> None:
        if not self.gpu:
            say("loader-idle", skipped="the GPU's idle fraction needs a GPU")
            return
        X = self.data("amplitude")
        step_ms = 2.0
        # torch.cuda._sleep spins for a number of cycles: calibrate it to 2 ms once.
        torch.cuda.synchronize()
        cycles = 1_000_000
        t0 = time.perf_counter()
        torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
        per_cycle = (time.perf_counter() - t0) / cycles
        step_cycles = int(step_ms / 1e3 / per_cycle)
        for prefetch in (0, 2, 4):
            ds = qt.QuantumDataset(X, "amplitude", self.q, batch_size=64, prefetch=prefetch,
                                   target=self.target)
            for _ in ds:  # warm-up pass
                pass
            t0 = time.perf_counter()
            steps = 0
            for psi in ds:
                torch.cuda._sleep(step_cycles)  # the model's step, on the batch's stream
                steps += 1
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
            busy = steps * step_ms / 1e3
            say("loader-idle", prefetch=prefetch, steps=steps, step_ms=step_ms, wall_s=wall,
                gpu_idle_fraction=max(0.0, 1 - busy / wall))

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
        rss0 = peak_rss_gib()
        ds = qt.QuantumDataset(path, "amplitude", self.q, batch_size=64, prefetch=4,
                               target=self.target)
        t0 = time.perf_counter()
        n = 0
        for psi in ds:
            n += psi.shape[0]
        self.sync()
        dt = time.perf_counter() - t0
        # The reader keeps 2 decoded row groups; decoding one holds its Arrow table and the
        # NumPy copy at once; the loader has 4 slots of a batch. None of it grows with the file.
        bound = (4 * group + 4 * 64) * dim * 8 / (1 << 30)
        say("loader-big", rows=n, s=dt, rows_per_s=n / dt, input_GBps=size / dt / 1e9,
            peak_rss_GiB=peak_rss_gib(), rss_before_GiB=rss0, reader_bound_GiB=bound)
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
    daemon = Daemon(pathlib.Path(args.build).resolve(), args.devices, [])
    rc = 0
    try:
        with qdp.Client(daemon.target) as c:
            gpu = c.status().backend == "cuda" and torch.cuda.is_available()
        b = Bench(args, daemon.target, gpu)
        parts = {"a": b.rate_all, "b": b.read, "c": b.idle, "d": b.big}
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
