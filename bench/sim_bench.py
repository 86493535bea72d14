#!/usr/bin/env python3
"""qdp.sim (cuStateVec in place on a served state) beside cuStateVec on its own buffer.

Usage: bench/sim_bench.py [BUILD_DIR] [--target unix:...] [--qubits 30] [--layers 20]
                          [--big-qubits 33] [--big-layers 5] [--skip-big] [--json PATH]

Starts BUILD_DIR/daemon/qdpd (--devices auto), or uses the daemon at --target, and runs:

(a) in place vs own buffer: a complex128 angle state of --qubits (30: 16 GiB) on one GPU, then
    --layers layers of RY on every qubit and a CNOT chain (q0 -> q1 -> ... -> q(n-1)), applied
    (1) by qdp.sim to the daemon's memory and (2) by cuStateVec to a torch.empty buffer on the
    same GPU holding a copy of the same initial state, with the same matrices and arguments.
    Prints both times (gates and the synchronize after them; opening the simulator and making
    cuStateVec's handle are timed apart), the ratio (target: qdp.sim within 5%, ratio <= 1.05)
    and whether the final states are bit-identical (torch.equal).
(b) a large state: a complex128 angle state of --big-qubits (33: 128 GiB, policy single on one
    GPU), --big-layers layers of RY(t) on every qubit in place, then every <Z_k> against the
    closed form (target: max error <= 1e-10). qdp's angle state is the product state
    prod_k (cos x_k |0> + sin x_k |1>) = prod_k RY(2 x_k)|0>, so after L layers of RY(t) qubit k
    is RY(2 x_k + L t)|0> and <Z_k> = cos(2 x_k + L t).

Prints "bench op=sim ..." lines and writes a JSON summary with --json. Needs a GPU daemon on
this node, torch with CUDA and cuStateVec's Python bindings (pip install cuquantum-python-cu12
or -cu13, with libcustatevec.so.1 and its cuBLAS on LD_LIBRARY_PATH). --qubits 20
--big-qubits 24 is a quick check.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any, Dict, List

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "client" / "python"))
from python_bench import Daemon, brief, say  # noqa: E402

import numpy as np  # noqa: E402

import qdp  # noqa: E402
from qdp import sim  # noqa: E402
from qdp._circuits import Gate, circuit_gates  # noqa: E402

C64F = 5  # CUDA_C_64F
ROW = 1  # CUSTATEVEC_MATRIX_LAYOUT_ROW


def layers(n: int, count: int, rng: np.random.Generator) -> List[Gate]:
    gates: List[Any] = []
    for _ in range(count):
        gates += [("ry", float(t), q) for q, t in enumerate(rng.uniform(-np.pi, np.pi, n))]
        gates += [("cnot", q, q + 1) for q in range(n - 1)]
    return circuit_gates(gates, n)


def own_buffer(cusv: Any, torch: Any, init: Any, n: int, gates: List[Gate],
               compute: int) -> Dict[str, Any]:
    """The gates by cuStateVec on a torch.empty buffer holding a copy of ``init``."""
    dev = init.device
    buf = torch.empty(1 << n, dtype=torch.complex128, device=dev)
    buf.copy_(init)
    torch.cuda.synchronize(dev)
    with torch.cuda.device(dev):
        t0 = time.perf_counter()
        h = cusv.create()
        setup = time.perf_counter() - t0
        work = None
        have = 0
        try:
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            for g in gates:
                m = np.ascontiguousarray(g.matrix, dtype=np.complex128)
                size = cusv.apply_matrix_get_workspace_size(h, C64F, n, m.ctypes.data, C64F, ROW,
                                                            0, len(g.targets), 0, compute)
                if size > have:
                    work, have = torch.empty(size, dtype=torch.uint8, device=dev), size
                cusv.apply_matrix(h, buf.data_ptr(), C64F, n, m.ctypes.data, C64F, ROW, 0,
                                  list(g.targets), len(g.targets), [], [], 0, compute,
                                  work.data_ptr() if size else 0, size)
            torch.cuda.synchronize(dev)
            secs = time.perf_counter() - t0
        finally:
            cusv.destroy(h)
    return {"buf": buf, "secs": secs, "setup_secs": setup}


def part_a(c: qdp.Client, cusv: Any, torch: Any, n: int, count: int) -> Dict[str, Any]:
    rng = np.random.default_rng(30)
    x = rng.uniform(-np.pi, np.pi, n)
    gates = layers(n, count, rng)
    compute = int(getattr(getattr(cusv, "ComputeType", None), "COMPUTE_64F", 1 << 4))
    with c.encode(x, "angle", n, policy="single") as s:
        views = s.shards()  # a read lease: copy the initial state for cuStateVec's own buffer
        try:
            (v,) = views
            init = torch.as_tensor(v, device=f"cuda:{v.ordinal}").reshape(-1).clone()
            torch.cuda.synchronize(init.device)
        finally:
            views[0].close()
        t0 = time.perf_counter()
        simu = sim.Simulator(s)
        open_secs = time.perf_counter() - t0
        try:
            simu.synchronize()
            t0 = time.perf_counter()
            simu.apply(gates)
            simu.synchronize()
            qdp_secs = time.perf_counter() - t0
        finally:
            t0 = time.perf_counter()
            simu.close()
            close_secs = time.perf_counter() - t0
        own = own_buffer(cusv, torch, init, n, gates, compute)
        del init
        views = s.shards()
        try:
            got = torch.as_tensor(views[0], device=f"cuda:{views[0].ordinal}").reshape(-1)
            same = bool(torch.equal(got, own["buf"]))
            diff = float((got - own["buf"]).abs().max()) if not same else 0.0
            del got
        finally:
            views[0].close()
        del own["buf"]
    ratio = qdp_secs / own["secs"]
    out = {"qubits": n, "layers": count, "gates": len(gates), "qdp_sim_s": qdp_secs,
           "custatevec_own_buffer_s": own["secs"], "ratio": ratio, "target_ratio": 1.05,
           "within_target": ratio <= 1.05, "bit_identical": same, "max_abs_diff": diff,
           "open_s": open_secs, "close_s": close_secs,
           "own_handle_s": own["setup_secs"]}
    say("sim", part="a", impl="qdp.sim", qubits=n, gates=len(gates), s=qdp_secs,
        ms_per_gate=1e3 * qdp_secs / len(gates), open_s=open_secs, close_s=close_secs)
    say("sim", part="a", impl="custatevec-own-buffer", qubits=n, gates=len(gates),
        s=own["secs"], ms_per_gate=1e3 * own["secs"] / len(gates))
    say("sim", part="a", ratio=ratio, target="<=1.05", within=ratio <= 1.05,
        bit_identical=same, max_abs_diff=diff)
    return out


def part_b(c: qdp.Client, n: int, count: int) -> Dict[str, Any]:
    rng = np.random.default_rng(33)
    x = rng.uniform(-np.pi, np.pi, n)
    t = 0.37
    strings = ["I" * k + "Z" + "I" * (n - 1 - k) for k in range(n)]
    t0 = time.perf_counter()
    with c.encode(x, "angle", n, policy="single") as s:
        encode_secs = time.perf_counter() - t0
        with sim.Simulator(s) as simu:
            simu.synchronize()
            t0 = time.perf_counter()
            for _ in range(count):
                simu.apply([("ry", t, q) for q in range(n)])
            simu.synchronize()
            gate_secs = time.perf_counter() - t0
            t0 = time.perf_counter()
            z = np.asarray(simu.expectation(strings))
            z_secs = time.perf_counter() - t0
    want = np.cos(2 * x + count * t)  # see the module's text
    err = float(np.max(np.abs(z - want)))
    nbytes = 16 << n
    out = {"qubits": n, "layers": count, "gates": n * count, "encode_s": encode_secs,
           "gates_s": gate_secs, "ms_per_gate": 1e3 * gate_secs / (n * count),
           "GBps_per_gate": 2 * nbytes / (gate_secs / (n * count)) / 1e9,
           "expectations_s": z_secs, "max_abs_error": err, "target_error": 1e-10,
           "within_target": err <= 1e-10}
    say("sim", part="b", qubits=n, GiB=nbytes / 2**30, layers=count, encode_s=encode_secs,
        gates_s=gate_secs, ms_per_gate=out["ms_per_gate"], GBps=out["GBps_per_gate"],
        z_s=z_secs, max_err=err, target="<=1e-10", within=err <= 1e-10)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", type=pathlib.Path, nargs="?")
    ap.add_argument("--target", help="a running GPU qdpd instead of starting BUILD_DIR's")
    ap.add_argument("--qubits", type=int, default=30)
    ap.add_argument("--layers", type=int, default=20)
    ap.add_argument("--big-qubits", type=int, default=33)
    ap.add_argument("--big-layers", type=int, default=5)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--json", type=pathlib.Path)
    ap.add_argument("--daemon-arg", action="append", default=None,
                    help="an argument for the qdpd started (repeat it); default --mem-fraction "
                    "0.97, so that 33 qubits (128 GiB) fit on one 141 GiB H200")
    a = ap.parse_args()
    if a.build is None and not a.target:
        ap.error("give BUILD_DIR or --target")
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError:
        say("sim", skipped="torch is not installed")
        return 0
    try:
        cusv = sim.load_custatevec()
    except sim.CuStateVecUnavailable as e:
        say("sim", skipped=brief(e))
        return 0
    say("sim", custatevec=cusv.get_version(), bindings=cusv.__name__, torch=torch.__version__)
    extra = a.daemon_arg if a.daemon_arg is not None else ["--mem-fraction", "0.97"]
    d = None if a.target else Daemon(a.build, "auto", extra)
    summary: Dict[str, Any] = {}
    rc = 0
    try:
        with qdp.Client(a.target or d.target) as c:  # type: ignore[union-attr]
            if c.status().backend != "cuda" or not torch.cuda.is_available():
                say("sim", skipped="the daemon has no GPU, or torch sees none")
                return 0
            try:
                summary["a"] = part_a(c, cusv, torch, a.qubits, a.layers)
            except qdp.Error as e:
                say("sim", part="a", failed=brief(e))
                summary["a"] = {"failed": brief(e)}
                rc = 1
            torch.cuda.empty_cache()
            if not a.skip_big:
                try:
                    summary["b"] = part_b(c, a.big_qubits, a.big_layers)
                except qdp.ResourceExhausted as e:
                    say("sim", part="b", skipped=f"{2 ** a.big_qubits * 16 / 2**30:.0f} GiB do "
                        f"not fit: {brief(e)}")
                    summary["b"] = {"skipped": brief(e)}
                except qdp.Error as e:
                    say("sim", part="b", failed=brief(e))
                    summary["b"] = {"failed": brief(e)}
                    rc = 1
    finally:
        if d is not None:
            d.stop()
    if a.json:
        a.json.write_text(json.dumps(summary, indent=2, default=float) + "\n")
        say("sim", json=str(a.json))
    ok = all(p.get("within_target", True) and p.get("bit_identical", True)
             for p in summary.values())
    return rc or (0 if ok else 2)


if __name__ == "__main__":
    sys.exit(main())
