#!/usr/bin/env python3
"""qdp from Python beside Apache Mahout's qumat-qdp, in one run on one GPU.

Usage: python3 bench/python_bench.py BUILD_DIR [--quick] [--devices 0] [--only a,b,...]

Starts BUILD_DIR/daemon/qdpd on a socket of its own (with LD_LIBRARY_PATH=ROOT/.gpu/lib when that
folder exists, for qdpd only: this process runs without it) on --devices (default GPU 0), imports
qdp from client/python of this tree and qumat_qdp when it is importable (``pip install --no-deps
--target /tmp/site qumat_qdp-*.whl`` and PYTHONPATH=/tmp/site), and runs each workload:

  a  batch     16-qubit amplitude, batches of 64 from NumPy to complex128 torch tensors on the
               GPU: vectors/s. qdp: a client.empty() batch encoded in place, either into torch
               tensors allocated up front (encode(..., out=t): one call a batch; one at a time,
               and with 2 and 4 batches in flight from as many threads) or into a resident
               state viewed with .torch(); for reference also after copying the batch in from
               another array; and the code a user writes first on a plain NumPy batch:
               qdp.encode(X, ...) ("plain") and c.encode(X, ...).torch() ("obvious").
               qumat: QdpEngine.encode of the NumPy batch and torch.from_dlpack,
               float64 and float32 input.
  b  cuda-in   amplitude of a 2^30 float64 CUDA tensor into a complex128 state on the GPU, ms
               from the call to a torch tensor of the state (qdp: Input.cuda_ipc, then .torch()
               of the state, or out= a tensor allocated up front; qumat: its CUDA tensor input
               and torch.from_dlpack). The first call (which opens the tensor's allocation in
               the daemon and allocates the state) is reported apart (first_ms).
  c  numpy     .numpy() of a 1 GiB state (2^26 complex128), GB/s. The first call (which
               registers the region that the client keeps for the later ones) is reported apart
               (first_ms).
  d  torch     .torch() of a 16 GiB state (2^30 complex128) on one GPU, ms.
  e  small     8-qubit amplitude, inline input: the Encode round trip from Python, p50 us.
  f  largest   the largest amplitude state from a NumPy array on one GPU (qdp: 33 qubits
               complex128, from a 64 GiB client.empty() input, when host and device hold it);
               qumat's answer above 30 qubits.

Every figure is one ``bench op=py-... impl=qdp|qumat key=value ...`` line (bench/regress.py reads
them: ms, p50_us, vectors_per_s, best_GBps); a workload that fails prints ``bench op=...
error="..."`` and the others still run; one without what it needs prints ``skipped="..."``.
Every timing is after a warm-up, the median of repeats. --quick shrinks every size so that the
script runs in seconds against a CPU daemon (--devices cpu:1): the GPU-only workloads skip.
"""

from __future__ import annotations

import argparse
import gc
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client" / "python"))

import qdp  # noqa: E402

GiB = 1 << 30


def say(op: str, **kv: Any) -> None:
    parts = [f"bench op={op}"]
    for k, v in kv.items():
        if isinstance(v, float):
            v = f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
        elif isinstance(v, str) and (" " in v or "=" in v or not v):
            v = '"' + v.replace('"', "'") + '"'
        parts.append(f"{k}={v}")
    print(" ".join(parts), flush=True)


def brief(e: BaseException) -> str:
    msg = f"{type(e).__name__}: {e}".replace("\n", " ").replace('"', "'")
    return msg[:400]


def median(xs: List[float]) -> float:
    return statistics.median(xs)


def median_ms(fn: Callable[[], Any], runs: int, sync: Callable[[], None] = lambda: None) -> float:
    """Milliseconds of fn then sync, the median of `runs` after one untimed call."""
    fn()
    sync()
    xs: List[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        xs.append((time.perf_counter() - t0) * 1e3)
    return median(xs)


def repeat(fn: Callable[[], Any], n: int, warm: int = 1,
           between: Optional[Callable[[Any], None]] = None) -> List[float]:
    """Seconds of each of n calls of fn after warm untimed ones; between(result) runs untimed."""
    out = []
    for i in range(warm + n):
        t0 = time.perf_counter()
        r = fn()
        dt = time.perf_counter() - t0
        if between is not None:
            between(r)
        del r
        if i >= warm:
            out.append(dt)
    return out


def free_port() -> str:
    """127.0.0.1:PORT with a port free now, for a daemon's metrics_listen."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def phase_sums(addr: str) -> Dict[str, Tuple[float, float]]:
    """A daemon's qdp_job_phase_seconds sum and count by phase, from its /metrics at addr."""
    import urllib.request

    got: Dict[str, List[float]] = {}
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read()
    for line in text.decode().splitlines():
        for end, at in (("_sum{", 0), ("_count{", 1)):
            if line.startswith("qdp_job_phase_seconds" + end):
                phase = line.split('phase="', 1)[1].split('"', 1)[0]
                got.setdefault(phase, [0.0, 0.0])[at] += float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in got.items()}


class Daemon:
    """qdpd of the build folder on a socket in a fresh folder."""

    def __init__(self, build: pathlib.Path, devices: str, extra: List[str]) -> None:
        exe = build / "daemon" / "qdpd"
        if not os.access(exe, os.X_OK):
            raise SystemExit(f"no qdpd at {exe}: build it first (sh deploy/build.sh)")
        self.dir = tempfile.TemporaryDirectory(prefix="qdp-pybench.")
        os.chmod(self.dir.name, 0o755)
        self.socket = os.path.join(self.dir.name, "qdpd.sock")
        self.log = os.path.join(self.dir.name, "qdpd.log")
        self.target = "unix:" + self.socket
        env = dict(os.environ)
        lib = ROOT / ".gpu" / "lib"
        if lib.is_dir():
            env["LD_LIBRARY_PATH"] = str(lib) + (":" + env["LD_LIBRARY_PATH"]
                                                 if env.get("LD_LIBRARY_PATH") else "")
        args = [str(exe), "--socket", self.socket, "--devices", devices, "--lease-grace", "1",
                "--expire-interval", "1", *extra]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, env=env)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"qdpd exited with {self.proc.returncode}:\n{self.tail()}")
            if os.path.exists(self.socket) and b"listening on unix:" in \
                    pathlib.Path(self.log).read_bytes():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"qdpd did not listen within 60 s:\n{self.tail()}")
            time.sleep(0.05)

    def tail(self, n: int = 3000) -> str:
        try:
            return pathlib.Path(self.log).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.dir.cleanup()


class Bench:
    def __init__(self, args: argparse.Namespace, client: qdp.Client, daemon: Daemon) -> None:
        self.a = args
        self.quick = args.quick
        self.c = client
        self.daemon = daemon
        st = client.status()
        self.gpu = st.backend == "cuda"
        self.status = st
        try:
            import torch
            self.torch: Any = torch
        except ImportError:
            self.torch = None
        self.cuda = self.gpu and self.torch is not None and self.torch.cuda.is_available()
        self.qumat: Any = None
        self.qumat_why = ""
        if args.no_qumat:
            self.qumat_why = "--no-qumat"
        else:
            try:
                import qumat_qdp  # noqa: F401
                from qumat_qdp import QdpEngine
                self.qumat = QdpEngine
                self.qumat_version = getattr(qumat_qdp, "__version__", "0.2.0")
            except BaseException as e:  # ImportError, or its native module failing to load
                self.qumat_why = f"qumat_qdp not importable ({brief(e)})"
        self.engines: Dict[str, Any] = {}

    def engine(self, precision: str) -> Any:
        if precision not in self.engines:
            self.engines[precision] = self.qumat(0, precision=precision)
        return self.engines[precision]

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def need_qumat(self, op: str) -> bool:
        if self.qumat is None:
            say(op, impl="qumat", skipped=self.qumat_why)
            return False
        if not (self.torch is not None and self.torch.cuda.is_available()):
            say(op, impl="qumat", skipped="torch sees no GPU")
            return False
        return True

    def need_cuda(self, op: str) -> bool:
        if not self.cuda:
            why = "the daemon has no GPU" if not self.gpu else "torch sees no GPU here"
            say(op, impl="qdp", skipped=why)
            return False
        return True

    def release_all(self) -> None:
        gc.collect()
        for s in list(self.c._states):
            try:
                s.release()
            except qdp.Error:
                pass
        gc.collect()
        if self.torch is not None and self.torch.cuda.is_available():
            self.torch.cuda.empty_cache()

    # ---- (a) batches of 64 from NumPy ----

    def batch(self) -> None:
        op = "py-batch"
        q = 10 if self.quick else 16
        rows, dim = 64, 1 << q
        secs = 0.5 if self.quick else 2.0
        rng = np.random.default_rng(1)
        src = {"float64": rng.uniform(-1, 1, size=(rows, dim))}
        src["float32"] = src["float64"].astype(np.float32)
        rates: Dict[str, float] = {}
        modes = [("view", 1, False), ("out", 1, False), ("out", 2, False), ("out", 4, False),
                 ("view", 1, True), ("out", 2, True)]
        for dt in ("float64", "float32"):
            for tensor, depth, copy_in in modes:
                try:
                    r = self._qdp_batch(op, q, rows, src[dt], secs, copy_in, tensor, depth)
                    if not copy_in:
                        rates["qdp", dt] = max(rates.get(("qdp", dt), 0.0), r)
                except Exception as e:
                    say(op, impl="qdp", input="copied" if copy_in else "in-place", tensor=tensor,
                        in_flight=depth, qubits=q, batch=rows, **{"in": dt}, error=brief(e))
        for kind in ("plain", "obvious"):
            try:
                rates[kind, "float64"] = self._plain_batch(op, q, rows, src["float64"], secs, kind)
            except Exception as e:
                say(op, impl="qdp", path=kind, qubits=q, batch=rows, error=brief(e))
        if self.need_qumat(op):
            for dt in ("float64", "float32"):
                for prec in ("float64", "float32"):
                    try:
                        rates["qumat", dt, prec] = self._qumat_batch(op, q, rows, src[dt], secs,
                                                                     prec)
                    except Exception as e:
                        say(op, impl="qumat", qubits=q, batch=rows, **{"in": dt},
                            out="complex128" if prec == "float64" else "complex64",
                            error=brief(e))
        for dt in ("float64", "float32"):
            if ("qdp", dt) in rates and ("qumat", dt, "float64") in rates:
                say(op + "-ratio", **{"in": dt}, out="complex128",
                    qdp_over_qumat=rates["qdp", dt] / rates["qumat", dt, "float64"], target=4)
        for kind in ("plain", "obvious"):
            if (kind, "float64") in rates and ("qumat", "float64", "float64") in rates:
                say(op + "-ratio", path=kind, out="complex128",
                    qdp_over_qumat=rates[kind, "float64"] / rates["qumat", "float64", "float64"],
                    target=2)

    def _plain_batch(self, op: str, q: int, rows: int, X: np.ndarray, secs: float,
                     kind: str) -> float:
        """The code a user writes first, on an array that is not in shared memory: "plain" is
        ``qdp.encode(X, "amplitude", q)`` (the default client, at this daemon), "obvious" is
        ``c.encode(X, "amplitude", q)``, then ``.torch()`` and release."""
        c = self.c
        os.environ["QDP_TARGET"] = self.daemon.target  # where the default client connects

        def one() -> None:
            if kind == "plain":
                t = qdp.encode(X, "amplitude", q, policy="single")
            else:
                s = c.encode(X, "amplitude", q, policy="single")
                t = s.torch() if self.torch is not None else s.numpy()
                s.release()
            del t

        rate, n = self._rate(one, rows, secs)
        say(op, impl="qdp", path=kind, input="numpy", **{"in": X.dtype.name}, out="complex128",
            qubits=q, batch=rows, vectors_per_s=rate, batches=n)
        return rate

    def _rate(self, one: Callable[[], None], rows: int, secs: float) -> Tuple[float, int]:
        """Vectors per second of ``one`` (a batch of ``rows``): the median over groups of 20
        batches, each group ended by a device sync, for ``secs`` after 5 batches of warm-up;
        and how many batches ran."""
        for _ in range(5):
            one()
        self.sync()
        gc.collect()
        n, t0 = 0, time.perf_counter()
        chunks = []
        while time.perf_counter() - t0 < secs:
            c0 = time.perf_counter()
            for _ in range(20):
                one()
            self.sync()
            chunks.append(20 * rows / (time.perf_counter() - c0))
            n += 20
        return median(chunks), n

    def _qdp_batch(self, op: str, q: int, rows: int, X: np.ndarray, secs: float,
                   copy_in: bool, tensor: str, depth: int) -> float:
        """One way of qdp's batch pipeline: tensor "view" (a resident state, .torch(), release)
        or "out" (encode into torch tensors allocated up front; a GPU daemon only), with
        ``depth`` batches in flight from as many threads, each with a buffer of its own."""
        c = self.c
        if tensor == "out" and not self.cuda:
            say(op, impl="qdp", tensor="out", in_flight=depth, skipped="out= needs a GPU daemon")
            return 0.0
        bufs = [c.empty(X.shape, X.dtype) for _ in range(depth)]
        for b in bufs:
            b[...] = X
        outs: List[Any] = []
        if tensor == "out":
            outs = [self.torch.empty(X.shape, dtype=self.torch.complex128, device="cuda:0")
                    for _ in range(depth)]

        def one(k: int) -> None:
            buf = bufs[k]
            if copy_in:
                np.copyto(buf, X)
            if tensor == "out":
                c.encode(buf, "amplitude", q, policy="single", out=outs[k])
                return
            s = c.encode(buf, "amplitude", q, policy="single")
            t = s.torch()  # a view in place on a GPU daemon, a fetched copy on the CPU one
            s.release()  # the tensor's view keeps the memory until the tensor goes
            del t

        if depth == 1:
            rate, n = self._rate(lambda: one(0), rows, secs)
        else:
            with ThreadPoolExecutor(depth) as pool:
                rate, n = self._rate_group(pool, one, depth, rows, secs)
        kv: Dict[str, Any] = {"impl": "qdp", "input": "copied" if copy_in else "in-place",
                              "in": X.dtype.name, "out": "complex128", "qubits": q,
                              "batch": rows, "tensor": tensor if self.cuda else "copy",
                              "in_flight": depth, "vectors_per_s": rate, "batches": n}
        if not copy_in:
            kv["target_vectors_per_s"] = 60000
        say(op, **kv)
        del bufs, outs
        gc.collect()
        return rate

    def _rate_group(self, pool: "ThreadPoolExecutor", one: Callable[[int], None], depth: int,
                    rows: int, secs: float) -> Tuple[float, int]:
        """_rate with ``depth`` batches in flight: each of ``depth`` threads calls one(k) (k: its
        slot, its buffers) 20 times a group, back to back; a group ends when every thread is
        done and the device is synchronized. The median over groups, and the batches run."""
        def group(count: int) -> float:
            t0 = time.perf_counter()
            for f in [pool.submit(lambda k=k: [one(k) for _ in range(count)])
                      for k in range(depth)]:
                f.result()
            self.sync()
            return count * depth * rows / (time.perf_counter() - t0)

        group(5)
        gc.collect()
        n, t0, chunks = 0, time.perf_counter(), []
        while time.perf_counter() - t0 < secs:
            chunks.append(group(20))
            n += 20 * depth
        return median(chunks), n

    def _qumat_batch(self, op: str, q: int, rows: int, X: np.ndarray, secs: float,
                     prec: str) -> float:
        torch = self.torch
        eng = self.engine(prec)

        def one() -> None:
            t = torch.from_dlpack(eng.encode(X, q, "amplitude"))
            del t

        rate, n = self._rate(one, rows, secs)
        say(op, impl="qumat", **{"in": X.dtype.name},
            out="complex128" if prec == "float64" else "complex64", qubits=q, batch=rows,
            tensor="dlpack", vectors_per_s=rate, batches=n)
        return rate

    # ---- (b) a 2^30 CUDA tensor ----

    def cuda_input(self) -> None:
        op = "py-cuda-input"
        q = 20 if self.quick else 30
        if not self.need_cuda(op):
            return
        torch = self.torch
        x = torch.rand(1 << q, dtype=torch.float64, device="cuda:0") + 0.01
        torch.cuda.synchronize()
        ms: Dict[str, float] = {}
        n = 3 if self.quick else 7
        try:
            def one() -> Any:
                s = self.c.encode(x, "amplitude", q, policy="single")
                t = s.torch()
                return s, t

            def drop(r: Any) -> None:
                s, t = r
                del t
                s.release()
                gc.collect()

            xs = repeat(one, n, warm=0, between=drop)
            ms["qdp"] = median(xs[1:]) * 1e3
            say(op, impl="qdp", qubits=q, **{"in": "float64"}, out="complex128",
                tensor="state.torch()", ms=ms["qdp"], min_ms=min(xs[1:]) * 1e3,
                first_ms=xs[0] * 1e3, target_ms=9.5)
        except Exception as e:
            say(op, impl="qdp", qubits=q, tensor="state.torch()", error=brief(e))
        self.release_all()
        try:
            out = torch.empty(1 << q, dtype=torch.complex128, device="cuda:0")
            xs = repeat(lambda: self.c.encode(x, "amplitude", q, policy="single", out=out), n,
                        warm=0)
            ms["qdp"] = min(ms.get("qdp", float("inf")), median(xs[1:]) * 1e3)
            say(op, impl="qdp", qubits=q, **{"in": "float64"}, out="complex128",
                tensor="out=", ms=median(xs[1:]) * 1e3, min_ms=min(xs[1:]) * 1e3,
                first_ms=xs[0] * 1e3, target_ms=9.5)
            del out
        except Exception as e:
            say(op, impl="qdp", qubits=q, tensor="out=", error=brief(e))
        torch.cuda.empty_cache()
        if self.need_qumat(op):
            try:
                eng = self.engine("float64")

                def qone() -> Any:
                    t = torch.from_dlpack(eng.encode(x, q, "amplitude"))
                    torch.cuda.synchronize()
                    return t

                xs = repeat(qone, 3 if self.quick else 5, warm=1,
                            between=lambda r: torch.cuda.empty_cache())
                ms["qumat"] = median(xs) * 1e3
                say(op, impl="qumat", qubits=q, **{"in": "float64"}, out="complex128",
                    ms=ms["qumat"], min_ms=min(xs) * 1e3)
            except Exception as e:
                say(op, impl="qumat", qubits=q, error=brief(e))
        if len(ms) == 2:
            say(op + "-ratio", qubits=q, qumat_over_qdp=ms["qumat"] / ms["qdp"])
        del x
        self.release_all()

    # ---- (c) .numpy() of 1 GiB ----

    def numpy(self) -> None:
        op = "py-numpy"
        q = 20 if self.quick else 26
        nbytes = (1 << q) * 16
        try:
            with self.c.encode(np.full(q, 0.3), "angle", q, policy="single") as s:
                # The first call registers the region that the later ones reuse.
                xs = repeat(lambda: s.numpy(), 4 if self.quick else 6, warm=0)
                say(op, impl="qdp", qubits=q, bytes=nbytes, best_GBps=nbytes / min(xs[1:]) / 1e9,
                    GBps=nbytes / median(xs[1:]) / 1e9, first_ms=xs[0] * 1e3, target_GBps=10)
        except Exception as e:
            say(op, impl="qdp", qubits=q, error=brief(e))
        gc.collect()
        if self.need_qumat(op):
            try:
                torch = self.torch
                t = torch.from_dlpack(self.engine("float64").encode(np.full(1 << q, 1.0), q,
                                                                     "amplitude"))
                torch.cuda.synchronize()
                xs = repeat(lambda: t.cpu().numpy(), 3 if self.quick else 5, warm=1)
                say(op, impl="qumat", qubits=q, bytes=nbytes, via="tensor.cpu().numpy()",
                    best_GBps=nbytes / min(xs) / 1e9, GBps=nbytes / median(xs) / 1e9)
                del t
            except Exception as e:
                say(op, impl="qumat", qubits=q, error=brief(e))
        self.release_all()

    # ---- (d) .torch() of 16 GiB ----

    def torch_view(self) -> None:
        op = "py-torch"
        q = 20 if self.quick else 30
        if self.torch is None:
            say(op, impl="qdp", skipped="no torch here")
            return
        try:
            with self.c.encode(np.full(q, 0.3), "angle", q, policy="single") as s:
                def drop(t: Any) -> None:
                    del t
                    gc.collect()

                xs = repeat(lambda: s.torch(), 5 if self.quick else 9, warm=2, between=drop)
                say(op, impl="qdp", qubits=q, bytes=(1 << q) * 16,
                    tensor="view" if self.cuda else "copy", ms=median(xs) * 1e3,
                    min_ms=min(xs) * 1e3, target_ms=2)
        except Exception as e:
            say(op, impl="qdp", qubits=q, error=brief(e))
        self.release_all()

    # ---- (e) the small job ----

    def small(self) -> None:
        op = "py-small"
        q = 8
        n = 300 if self.quick else 3000
        x = np.random.default_rng(5).uniform(-1, 1, size=1 << q)
        c = self.c
        try:
            enc, rel, rt = [], [], []
            for i in range(n + 100):
                t0 = time.perf_counter()
                s = c.encode(x, "amplitude", q, policy="single")
                t1 = time.perf_counter()
                s.release()
                t2 = time.perf_counter()
                if i >= 100:
                    enc.append(t1 - t0)
                    rel.append(t2 - t1)
            for i in range(n // 3 + 30):
                t0 = time.perf_counter()
                with c.encode(x, "amplitude", q, policy="single") as s:
                    s.numpy()
                if i >= 30:
                    rt.append(time.perf_counter() - t0)
            p = lambda xs, f: sorted(xs)[int(f * (len(xs) - 1))] * 1e6  # noqa: E731
            say(op, impl="qdp", step="encode", qubits=q, input="inline", n=n,
                p50_us=p(enc, 0.5), p99_us=p(enc, 0.99), target_p50_us=300)
            say(op, impl="qdp", step="release", qubits=q, n=n, p50_us=p(rel, 0.5),
                p99_us=p(rel, 0.99))
            say(op, impl="qdp", step="encode+numpy+release", qubits=q, n=len(rt),
                p50_us=p(rt, 0.5), p99_us=p(rt, 0.99))
        except Exception as e:
            say(op, impl="qdp", qubits=q, error=brief(e))
        if self.need_qumat(op):
            try:
                torch = self.torch
                eng = self.engine("float64")
                xs = []
                for i in range(n + 100):
                    t0 = time.perf_counter()
                    t = torch.from_dlpack(eng.encode(x, q, "amplitude"))
                    torch.cuda.synchronize()
                    if i >= 100:
                        xs.append(time.perf_counter() - t0)
                    del t
                xs.sort()
                say(op, impl="qumat", step="encode", qubits=q, input="numpy", n=n,
                    p50_us=xs[len(xs) // 2] * 1e6, p99_us=xs[int(0.99 * (len(xs) - 1))] * 1e6)
            except Exception as e:
                say(op, impl="qumat", qubits=q, error=brief(e))
        self.release_all()

    # ---- (f) the largest state ----

    def largest(self) -> None:
        op = "py-largest"
        if self.quick:
            qs = [22, 21]
        else:
            qs = [33, 32, 31, 30]
        avail = _mem_available()
        done = False
        for q in qs:
            nbytes_in = (1 << q) * 8
            try:
                plan = self.c.plan(None, "amplitude", q, policy="single",
                                   shape=(1, 1 << q), input_dtype="float64")
            except Exception as e:
                say(op, impl="qdp", qubits=q, error=brief(e))
                continue
            need = max((d.need_bytes for d in plan.needs), default=0)
            budget = max((d.budget_bytes for d in plan.needs), default=0)
            if not plan.feasible:
                say(op, impl="qdp", qubits=q, fits="no", why="device",
                    need_GiB=need / GiB, budget_GiB=budget / GiB, plan=plan.message[:300])
                continue
            if avail and nbytes_in + (4 * GiB) > avail:
                say(op, impl="qdp", qubits=q, fits="no", why="host",
                    input_GiB=nbytes_in / GiB, host_available_GiB=avail / GiB)
                continue
            try:
                self._largest(op, q, need, budget)
                done = True
            except Exception as e:
                say(op, impl="qdp", qubits=q, error=brief(e))
            self.release_all()
            if done:
                break
        if self.need_qumat(op):
            # Its limit is checked before any data is read: a padded 4-value input suffices.
            for q in (31, 30):
                try:
                    t = self.torch.from_dlpack(self.engine("float64").encode(
                        np.ones(4), q, "amplitude"))
                    self.torch.cuda.synchronize()
                    say(op, impl="qumat", qubits=q, fits="yes", state_GiB=t.numel() * 16 / GiB)
                    del t
                    break
                except Exception as e:
                    say(op, impl="qumat", qubits=q, fits="no", refused=brief(e))
            self.release_all()

    def _largest(self, op: str, q: int, need: int, budget: int) -> None:
        torch = self.torch
        t0 = time.perf_counter()
        buf = self.c.empty(1 << q, np.float64)
        buf.fill(1.0)  # every amplitude 2^(-q/2)
        fill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        s = self.c.encode(buf, "amplitude", q, policy="single")
        enc_ms = (time.perf_counter() - t0) * 1e3
        try:
            info = s.info
            check = "unchecked"
            if self.cuda:
                t = s.torch()
                want = 2.0 ** (-q / 2)
                got = [t[0].item(), t[(1 << q) // 3].item(), t[-1].item()]
                check = "ok" if all(abs(g - want) < 1e-9 * want + 1e-18 for g in got) \
                    else f"bad:{got[0]}"
                del t
            say(op, impl="qdp", qubits=q, fits="yes", state_GiB=info.bytes / GiB,
                input_GiB=buf.nbytes / GiB, need_GiB=need / GiB, budget_GiB=budget / GiB,
                fill_s=fill_s, encode_ms=enc_ms, spot_check=check)
        finally:
            s.release()
            del buf
            gc.collect()


def _mem_available() -> int:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


WORKLOADS = {"a": "batch", "b": "cuda_input", "c": "numpy", "d": "torch_view", "e": "small",
             "f": "largest"}


def run_each(args: argparse.Namespace) -> int:
    """Runs each workload as ``--together --only W`` in a child process. qumat-qdp 0.2.0 aborts
    the whole process on some inputs (an illegal address inside its native code): a child that
    dies is reported as that workload's error line, and the next workload still runs."""
    only = [w.strip() for w in args.only.split(",") if w.strip()] or list(WORKLOADS)
    rc = 0
    for w in only:
        cmd = [sys.executable, __file__, args.build, "--together", "--only", w,
               "--devices", args.devices] + ["--qdpd-arg=" + a for a in args.qdpd_arg]
        cmd += ["--quick"] if args.quick else []
        cmd += ["--no-qumat"] if args.no_qumat else []
        sys.stdout.flush()
        child = subprocess.run(cmd)
        if child.returncode != 0:
            say("py-" + WORKLOADS.get(w, w), error=f"the workload's process exited with "
                f"{child.returncode} (a negative number is the signal that ended it)")
            rc = 1
    return rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", help="the build folder (its daemon/qdpd is started)")
    ap.add_argument("--quick", action="store_true", help="small sizes: seconds, on a CPU daemon")
    ap.add_argument("--devices", default="0", help="qdpd --devices (default GPU 0)")
    ap.add_argument("--only", default="", help="workloads to run, e.g. a,e (default: all)")
    ap.add_argument("--no-qumat", action="store_true", help="qdp figures only")
    ap.add_argument("--qdpd-arg", action="append", default=[],
                    help="one more qdpd argument (repeatable), e.g. --qdpd-arg=--workers=8")
    ap.add_argument("--together", action="store_true",
                    help="every workload in this process (default: each in a child process, so "
                         "that a library that aborts the process loses only its own workload)")
    args = ap.parse_args()
    if not args.together:
        return run_each(args)
    extra = list(args.qdpd_arg)
    if not args.devices.startswith("cpu"):
        extra += ["--mem-fraction", "0.97"]  # 33 qubits complex128 is 128 GiB of 140
    t_start = time.monotonic()
    daemon = Daemon(pathlib.Path(args.build).resolve(), args.devices, extra)
    rc = 0
    try:
        with qdp.Client(daemon.target, name="python-bench", timeout=600) as c:
            b = Bench(args, c, daemon)
            st = b.status
            dev = st.devices[0] if st.devices else None
            say("py-setup", backend=st.backend, devices=len(st.devices),
                model=(dev.model if dev else "") or "?",
                device_GiB=(dev.total_bytes / GiB if dev else 0.0),
                budget_GiB=(dev.budget_bytes / GiB if dev else 0.0),
                torch=getattr(b.torch, "__version__", "absent"),
                torch_cuda=bool(b.torch is not None and b.torch.cuda.is_available()),
                qumat=(b.qumat_version if b.qumat is not None else "absent"),
                numpy=np.__version__, python=sys.version.split()[0], quick=args.quick)
            if b.qumat is None:
                say("py-setup", impl="qumat", skipped=b.qumat_why)
            only = [w.strip() for w in args.only.split(",") if w.strip()] or list(WORKLOADS)
            for w in only:
                name = WORKLOADS.get(w, w)
                fn = getattr(b, name, None)
                if fn is None:
                    say("py-" + w, error=f"no workload {w!r}: use {','.join(WORKLOADS)}")
                    rc = 2
                    continue
                t0 = time.monotonic()
                try:
                    fn()
                except Exception as e:  # each workload catches its own; this is the backstop
                    say("py-" + name, error=brief(e))
                    traceback.print_exc(file=sys.stderr)
                    try:
                        b.release_all()
                    except Exception:
                        pass
                say("py-time", workload=name, s=time.monotonic() - t0)
    finally:
        if daemon.proc.poll() is not None:
            print(f"qdpd died ({daemon.proc.returncode}):\n{daemon.tail()}", file=sys.stderr)
            rc = 1
        daemon.stop()
    say("py-time", workload="all", s=time.monotonic() - t_start)
    return rc


if __name__ == "__main__":
    sys.exit(main())
