#!/usr/bin/env python3
"""What each bridge of qdp.interop costs, measured where its library runs, beside the in-place
figures of the same state on the same GPU.

Usage: bench/bridge_bench.py BUILD_DIR [--qubits 24,30] [--runs 5] [--host-runs 3]
                             [--aer-runs 2] [--only inplace,cudaq,lightning,aer] [--json PATH]
                             [--cpu]

Starts BUILD_DIR/daemon/qdpd (python_bench's Daemon, --devices auto) and for each qubit count n
encodes one angle state of n qubits (complex128, policy "single": one piece on one GPU; 256 MiB
at 24 qubits, 16 GiB at 30), then times, each the median of --runs after a warm-up (--host-runs
for the paths through host memory, which move 16 GiB twice at 30 qubits):

  inplace    the state where it is: "view" opens a view and closes it (Describe with views, the
             CUDA IPC open, the lease's end: what every device path pays once), "read" reads
             every byte once (torch.view_as_real(t).sum()), "copy" is one device copy of the
             state by torch into memory allocated beforehand (the floor of any bridge that
             copies on the device), and "sim_ry" one RY layer on every qubit applied in place by
             qdp.sim (only where qdp.sim and cuStateVec import: it is another branch's work).
  cudaq      qdp.interop.cudaq.state(s) on the nvidia target at fp64: view, cudaq.State.from_data
             and the device copy, end to end ("state"); whether this CUDA-Q's from_data copied
             device memory or kept the pointer (then the adapter's kernel copy is in "state");
             and "kernel_start": a kernel starting from the result (cudaq.qvector(st)), which is
             what a user's kernel pays again on top.
  lightning  qdp.interop.pennylane.lightning_state on lightning.gpu (c_dtype complex128): path
             "device" (updateData of a CUDA tensor over the view: GPU to GPU) when this
             pennylane-lightning-gpu takes it, and path "host" (State.numpy() then a host to
             device copy: the copies qml.StatePrep makes), with the host fetch apart.
  aer        qdp.interop.qiskit.aer_circuit on AerSimulator(method="statevector", device="GPU"):
             the host fetch (State.numpy()), then a run of set_statevector + one saved <Z> less
             a run of the same circuit without set_statevector = what Aer's copy of the host
             data into its GPU state costs ("set"); "total" = fetch + set. And Aer's own state,
             qdp.interop.qiskit.aer_state(psi, device="GPU"): AerState.initialize's one copy
             of the fetched array ("state"; "state_total" = fetch + state), checked by
             P(qubit 0 = 0) = cos^2 x_0. The loaded run is
             timed --aer-runs times without a warm-up: Aer took the instruction's data in at
             0.15-0.27 GB/s on a 2-vCPU VM's CPU device (1.0-1.8 s at 24 qubits), which would
             be one to two minutes a run at 30 qubits; give 24 and 30 qubits separate
             invocations where a command has a time limit.

Every figure is one line ``bench op=bridge lib=... what=... qubits=n ms=...`` with its unit and
its ratios: ``over_copy`` (the figure over one device copy of the state by torch) and
``over_inplace`` (over qdp.sim's RY layer when measured, else over the read; the line says which
in ``inplace=``). Each bridge also checks what it produced: the amplitudes of a few basis states,
or <Z> of qdp's qubit 0 against cos(2 x_0) (``check=ok`` or the error). A library that is not
importable prints ``skipped="..."`` with what to install, and the others still run. --json PATH
writes every figure as {"qubits": {n: {"lib.what": ms}}, "versions": {...}, "skipped": [...]}.

Needs a GPU daemon, torch (and numpy) here. --cpu runs the script's own code against a CPU
daemon instead (lightning.qubit, Aer's CPU device and CUDA-Q's CPU target: host paths only; the
in-place figures skip), with small --qubits, to check it before a GPU run; its figures mean
nothing. The wheels each bridge needs, carried to a machine without network (pip install
--no-index --find-links DIR ...; sizes as PyPI lists them):

  cudaq      cuda-quantum-cu13 0.16 (87.7 MB; cuda-quantum-cu12 0.16.0.post1 is 92.0 MB) with
             what it requires: astpretty, custatevec, cutensornet and cudensitymat of its CUDA
             major (cu13 / cu12), the nvidia-* CUDA libraries (cublas, curand, cusparse,
             cusolver, cuda-runtime, cuda-nvrtc) unless the machine has them, cupy, scipy,
             requests (pip download cuda-quantum-cu13 fetches them all); 0.16 runs on the CPU
             target with the wheel alone (--no-deps plus astpretty)
  lightning  pennylane (with its dependencies: autograd, rustworkx, ...), pennylane-lightning
             0.45 (24 MB), pennylane-lightning-gpu 0.45 (0.9 MB), custatevec-cu13 (57 MB;
             cu12 for CUDA 12)
  aer        qiskit 2.x and qiskit-aer-gpu 0.18.2 (19.5 MB; the CPU-only qiskit-aer 0.18.2 is
             14.2 MB and has no GPU device)

The GPU figures of docs/performance.md ("Bridges") come from this script's output.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import json
import pathlib
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Tuple

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from python_bench import Daemon, brief, median, say  # noqa: E402

import numpy as np  # noqa: E402

import qdp  # noqa: E402

PIP = {
    "cudaq": "pip install cuda-quantum-cu13 (cu12 for CUDA 12)",
    "lightning": "pip install pennylane pennylane-lightning-gpu custatevec-cu13",
    "aer": "pip install qiskit qiskit-aer-gpu",
}


def timed(fn: Callable[[], Any], runs: int, sync: Callable[[], None],
          after: Callable[[Any], None] = lambda r: None, warm: bool = True) -> Tuple[float, Any]:
    """Median ms of fn() then sync() over ``runs`` after one untimed call (none without
    ``warm``); the result of each call is kept until the clock has stopped (so that freeing it
    is not timed), then given to ``after`` and dropped. Returns (ms, the last result)."""
    r = None
    if warm:
        r = fn()
        sync()
        after(r)
    xs: List[float] = []
    for _ in range(runs):
        r = None
        gc.collect()
        t0 = time.perf_counter()
        r = fn()
        sync()
        xs.append((time.perf_counter() - t0) * 1e3)
        after(r)
    return median(xs), r


class Run:
    def __init__(self, a: argparse.Namespace, c: qdp.Client) -> None:
        import torch

        self.a = a
        self.c = c
        self.torch = torch
        self.figures: Dict[int, Dict[str, float]] = {}
        self.skipped: List[str] = []
        self.versions: Dict[str, str] = {"torch": torch.__version__, "qdp": qdp.__version__}
        self.cpu = a.cpu

    def sync(self) -> None:
        if not self.cpu:
            self.torch.cuda.synchronize()

    def free(self) -> None:
        gc.collect()
        if not self.cpu:
            self.torch.cuda.empty_cache()

    def record(self, lib: str, what: str, n: int, ms: float, **kv: Any) -> None:
        f = self.figures.setdefault(n, {})
        f[f"{lib}.{what}"] = ms
        copy = f.get("inplace.copy")
        base_name = "sim_ry" if "inplace.sim_ry" in f else "read"
        base = f.get(f"inplace.{base_name}")
        extra: Dict[str, Any] = {}
        if lib != "inplace" or what not in ("copy", base_name):
            if copy:
                extra["over_copy"] = ms / copy
            if base:
                extra["over_inplace"] = ms / base
                extra["inplace"] = base_name
        if what not in ("view", "run_empty"):
            extra["GBps"] = (16 << n) / ms / 1e6
        say("bridge", lib=lib, what=what, qubits=n, ms=ms, **extra, **kv)

    def skip(self, lib: str, n: int, why: str) -> None:
        self.skipped.append(f"{lib} {n}: {why}")
        say("bridge", lib=lib, qubits=n, skipped=why)

    # --- the state where it is ----------------------------------------------------------------

    def inplace(self, s: qdp.State, n: int, x: np.ndarray) -> None:
        if self.cpu:
            return self.skip("inplace", n, "--cpu: host memory has no views")
        torch = self.torch

        def view() -> None:
            vs = s.shards()
            torch.as_tensor(vs[0], device=f"cuda:{vs[0].ordinal}")
            vs[0].close()

        ms, _ = timed(view, self.a.runs, self.sync)
        self.record("inplace", "view", n, ms)
        t = s.torch()
        ms, _ = timed(lambda: torch.view_as_real(t).sum(), self.a.runs, self.sync)
        self.record("inplace", "read", n, ms)
        dst = torch.empty_like(t)
        ms, _ = timed(lambda: dst.copy_(t), self.a.runs, self.sync)
        self.record("inplace", "copy", n, ms)
        t = dst = None
        self.free()
        try:
            from qdp.sim import Simulator  # another branch's module: optional here
        except Exception as e:
            self.skip("inplace.sim_ry", n, f"qdp.sim does not import here ({brief(e)})")
            return
        try:
            layer = [("ry", 0.1, k) for k in range(n)]
            with client_state(self.c, x, n) as s2, Simulator(s2) as sim:
                ms, _ = timed(lambda: sim.apply(layer), self.a.runs, sim.synchronize)
            self.record("inplace", "sim_ry", n, ms, gates=n)
        except Exception as e:
            self.skip("inplace.sim_ry", n, f"qdp.sim failed: {brief(e)}")

    # --- CUDA-Q -----------------------------------------------------------------------------

    def cudaq(self, s: qdp.State, n: int, x: np.ndarray) -> None:
        try:
            import cudaq
        except ImportError:
            return self.skip("cudaq", n, f"no cudaq here: {PIP['cudaq']}")
        from qdp.interop import cudaq as bridge

        self.versions["cudaq"] = str(getattr(cudaq, "__version__", "?"))
        probe = [0, 1, 1 << (n - 1), (1 << n) - 1]
        kept: Any = "-"
        if self.cpu:  # CUDA-Q's CPU target: the host path
            psi = s.numpy()
            want = [complex(psi[i]) for i in probe]
        else:
            try:
                cudaq.set_target("nvidia", option="fp64")
            except Exception as e:
                return self.skip("cudaq", n, f"no nvidia target at fp64: {brief(e)}")
            t = s.torch()
            want = [complex(t[i].item()) for i in probe]
            ptr = t.data_ptr()
            try:  # does this CUDA-Q's from_data copy device memory or keep the pointer?
                st = cudaq.State.from_data(t)
                kept = bridge._data_pointer(st) == ptr
                st = None
            except Exception as e:
                kept = f"from_data of a torch tensor failed: {brief(e)}"
            t = None
            self.free()
        ms, st = timed(lambda: bridge.state(s), self.a.runs, self.sync)
        # amplitude() takes qubit 0's bit first; st[i] would read i with its bits reversed
        got = [complex(st.amplitude([(i >> k) & 1 for k in range(n)])) for i in probe]
        check = "ok" if np.allclose(got, want, atol=1e-12) else f"amplitudes {got} != {want}"
        self.record("cudaq", "state", n, ms, from_data_keeps_pointer=str(kept), check=check)
        try:
            ms, _ = timed(lambda: bridge._owned_copy(cudaq, st), self.a.runs, self.sync)
            self.record("cudaq", "kernel_start", n, ms)
        except Exception as e:
            self.skip("cudaq.kernel_start", n, brief(e))
        st = None
        self.free()

    # --- PennyLane lightning.gpu --------------------------------------------------------------

    def lightning(self, s: qdp.State, n: int, x: np.ndarray) -> None:
        try:
            import pennylane as qml
            from pennylane.tape import QuantumScript
        except ImportError:
            return self.skip("lightning", n, f"no pennylane here: {PIP['lightning']}")
        from qdp.interop.pennylane import lightning_run, lightning_state

        self.versions["pennylane"] = qml.__version__
        name = "lightning.qubit" if self.cpu else "lightning.gpu"
        try:
            dev = qml.device(name, wires=n, c_dtype=np.complex128)
        except Exception as e:
            if self.cpu:
                return self.skip("lightning", n, f"no {name}: {brief(e)}; {PIP['lightning']}")
            # no usable lightning.gpu here: measure the host path into lightning.qubit instead
            self.skip("lightning.device", n, f"no {name}: {brief(e)}; {PIP['lightning']}")
            name = "lightning.qubit"
            try:
                dev = qml.device(name, wires=n, c_dtype=np.complex128)
            except Exception as e2:
                return self.skip("lightning", n, f"no {name} either: {brief(e2)}")
        self.versions["lightning_device"] = name
        for dist in ("pennylane_lightning", "pennylane_lightning_gpu"):
            try:
                self.versions[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                pass
        z0 = QuantumScript([], [qml.expval(qml.PauliZ(n - 1))])  # qdp qubit 0 is wire n-1

        def check() -> str:
            z = float(lightning_run(dev, z0))
            return "ok" if abs(z - np.cos(2 * x[0])) < 1e-9 else f"<Z0> {z} != {np.cos(2 * x[0])}"

        paths = [("host", self.a.host_runs)] if name != "lightning.gpu" else \
            [("device", self.a.runs), ("host", self.a.host_runs)]
        for path, runs in paths:
            try:
                ms, _ = timed(lambda: lightning_state(dev, s, path=path), runs, self.sync)
                self.record("lightning", path, n, ms, device=name, check=check())
            except qdp.NotSupported as e:
                self.skip(f"lightning.{path}", n, str(e))
            except Exception as e:
                self.skip(f"lightning.{path}", n, f"failed: {brief(e)}")
        ms, _ = timed(lambda: s.numpy(), self.a.host_runs, lambda: None)
        self.record("lightning", "host_fetch", n, ms)
        dev = None
        self.free()

    # --- Qiskit Aer on the GPU ----------------------------------------------------------------

    def aer(self, s: qdp.State, n: int, x: np.ndarray) -> None:
        try:
            from qiskit import QuantumCircuit
            from qiskit.quantum_info import SparsePauliOp
            from qiskit_aer import AerSimulator
            import qiskit_aer
        except ImportError:
            return self.skip("aer", n, f"no qiskit-aer here: {PIP['aer']}")
        from qdp.interop.qiskit import aer_circuit, aer_state

        self.versions["qiskit_aer"] = qiskit_aer.__version__
        where = "CPU" if self.cpu else "GPU"
        if not self.cpu:
            why = aer_gpu_missing(AerSimulator, QuantumCircuit)
            if why:  # no usable GPU device: Aer's CPU device (the host path) instead
                where = "CPU"
                self.skip("aer.gpu", n, f"{why} (measuring Aer's CPU device): {PIP['aer']}")
        self.versions["aer_device"] = where
        sim = AerSimulator(method="statevector", device=where)
        ms_fetch, psi = timed(lambda: s.numpy(), self.a.host_runs, lambda: None)
        self.record("aer", "host_fetch", n, ms_fetch)
        def release(st: Any) -> None:  # Aer 0.18 closes an allocated state once moved out
            st.move_to_ndarray()
            st.close()

        try:  # Aer's own state: one copy of the fetched array (moving it back is not timed)
            ms_state, _ = timed(lambda: aer_state(psi, device=where), self.a.host_runs,
                                lambda: None, after=release)
            st = aer_state(psi, device=where)
            probs = st.probabilities([0])
            release(st)
            st = None
            check = "ok" if abs(probs[0] - np.cos(x[0]) ** 2) < 1e-9 else \
                f"P(qubit 0 = 0) {probs[0]} != {np.cos(x[0]) ** 2}"
            self.record("aer", "state", n, ms_state, check=check)
            self.record("aer", "state_total", n, ms_fetch + ms_state)
        except Exception as e:
            self.skip("aer.state", n, f"failed: {brief(e)}")
        z0 = SparsePauliOp("I" * (n - 1) + "Z")  # Qiskit's qubit 0 is the rightmost letter

        def with_z(qc: Any) -> Any:
            qc.save_expectation_value(z0, range(n), label="z0")
            return qc

        empty = with_z(QuantumCircuit(n))
        loaded = with_z(aer_circuit(psi))
        psi = None
        self.free()
        result: Dict[str, Any] = {}

        def run(qc: Any) -> Callable[[], None]:
            def go() -> None:
                result["r"] = sim.run(qc).result()
            return go

        try:  # the empty run's warm-up starts Aer's device; the loaded one needs none
            ms_empty, _ = timed(run(empty), self.a.host_runs, lambda: None)
            ms_run, _ = timed(run(loaded), self.a.aer_runs, lambda: None, warm=False)
        except Exception as e:
            return self.skip("aer", n, f"run failed: {brief(e)}")
        z = float(np.real(result["r"].data(0)["z0"]))
        check = "ok" if abs(z - np.cos(2 * x[0])) < 1e-9 else f"<Z0> {z} != {np.cos(2 * x[0])}"
        self.record("aer", "run_empty", n, ms_empty)
        self.record("aer", "run_loaded", n, ms_run, check=check)
        self.record("aer", "set", n, ms_run - ms_empty)
        self.record("aer", "total", n, ms_fetch + ms_run - ms_empty)
        del loaded
        self.free()


def aer_gpu_missing(AerSimulator: Any, QuantumCircuit: Any) -> str:
    """Why Aer's GPU device cannot run here, or "" when it can. AerSimulator(device="GPU")
    .available_devices() answers ["GPU"] whatever the build has (its name ends in "_gpu"), and
    a GPU build lists "GPU" even where its CUDA libraries fail: run one qubit on it."""
    if "GPU" not in AerSimulator().available_devices():
        return "this qiskit-aer has no GPU device"
    qc = QuantumCircuit(1)
    qc.save_statevector()
    try:
        r = AerSimulator(method="statevector", device="GPU").run(qc).result()
        return "" if r.success else f"Aer's GPU device failed: {r.status}"
    except Exception as e:
        return f"Aer's GPU device failed: {brief(e)}"


class client_state:
    """A fresh angle state of x on one GPU, released at the end of the with block."""

    def __init__(self, c: qdp.Client, x: np.ndarray, n: int) -> None:
        self.s = c.encode(x, "angle", n, dtype="complex128", policy="single")
        if len(self.s.info.shards) != 1:
            raise SystemExit(f"policy 'single' gave {len(self.s.info.shards)} shards")

    def __enter__(self) -> qdp.State:
        return self.s

    def __exit__(self, *exc: Any) -> None:
        self.s.release()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--qubits", default="24,30")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--host-runs", type=int, default=3)
    ap.add_argument("--aer-runs", type=int, default=2)
    ap.add_argument("--only", default="inplace,cudaq,lightning,aer")
    ap.add_argument("--json", type=pathlib.Path)
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args()
    only = [w for w in a.only.split(",") if w]
    unknown = set(only) - {"inplace", "cudaq", "lightning", "aer"}
    if unknown:
        raise SystemExit(f"--only: unknown {sorted(unknown)}")
    if importlib.util.find_spec("torch") is None:
        raise SystemExit("bridge_bench needs torch (pip install torch)")
    d = Daemon(a.build, "auto", [])
    status = 0
    try:
        with qdp.Client(d.target) as c:
            if c.status().backend != "cuda" and not a.cpu:
                say("bridge", skipped="the daemon has no GPU (--cpu checks the script on it)")
                return 0
            r = Run(a, c)
            for n in [int(q) for q in a.qubits.split(",") if q]:
                x = np.random.default_rng(n).uniform(0, np.pi, size=n)
                with client_state(c, x, n) as s:
                    for lib in ("inplace", "cudaq", "lightning", "aer"):
                        if lib not in only:
                            continue
                        try:
                            getattr(r, lib)(s, n, x)
                        except Exception as e:
                            status = 1
                            say("bridge", lib=lib, qubits=n, error=brief(e))
                            traceback.print_exc()
                        r.free()
            say("bridge-versions", **r.versions)
            if a.json:
                a.json.write_text(json.dumps({"qubits": r.figures, "versions": r.versions,
                                              "skipped": r.skipped}, indent=1) + "\n")
    finally:
        d.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
