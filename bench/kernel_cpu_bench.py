#!/usr/bin/env python3
"""The kernel matrix on the CPU backend beside the quantum-kernel libraries a QML user reaches for.

Usage: bench/kernel_cpu_bench.py BUILD_DIR [--samples 500] [--qubits 8] [--pl-samples 24]
                                 [--qiskit-python PYTHON]

Angle-encoded samples (RY(2 x_k) on qubit k: qdp's angle encoding), the symmetric kernel
|<x_i|x_j>|^2 of N samples, each the median of 3 runs after a warm-up:

  qdp        qdp.kernel(X, encoding="angle", qubits=n) on BUILD_DIR's qdpd (--devices cpu:1):
             one Kernel call from the inputs, the matrix into this process; and Client.kernel of
             resident states alone
  pennylane  qml.kernels.square_kernel_matrix with default.qubit and lightning.qubit (a QNode of
             AngleEmbedding(rotation="Y") and its adjoint, the probability of |0...0>), timed on
             --pl-samples samples and scaled to N by the pairs (each pair is one circuit)
  qiskit     qiskit-machine-learning's FidelityStatevectorKernel on the same feature map, all N,
             run with --qiskit-python (an interpreter that has it) when given

Prints "bench op=kernel-cpu ..." lines: seconds, and qdp's speedup over each with the largest
|difference| from qdp's matrix (pennylane on its subset). Libraries that are missing are skipped
with a line that says so.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any, List, Tuple

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from python_bench import Daemon, median_ms, say  # noqa: E402

import qdp  # noqa: E402

QISKIT = """
import json, sys, time, numpy as np
from qiskit import QuantumCircuit
from qiskit.circuit import ParameterVector
from qiskit_machine_learning.kernels import FidelityStatevectorKernel
X = np.load(sys.argv[1]); n = X.shape[1]
p = ParameterVector("x", n)
fm = QuantumCircuit(n)
for k in range(n):
    fm.ry(2 * p[k], k)
kern = FidelityStatevectorKernel(feature_map=fm)
kern.evaluate(X[:4])
t = time.perf_counter(); K = kern.evaluate(X); t = time.perf_counter() - t
np.save(sys.argv[2], K)
print(json.dumps({"s": t}))
"""


def pennylane(X: np.ndarray, K: np.ndarray, N: int) -> List[Tuple[str, float]]:
    """Each PennyLane device's seconds for N samples (scaled from X's pairs)."""
    try:
        import pennylane as qml  # type: ignore[import-not-found]
    except ImportError:
        say("kernel-cpu", impl="pennylane", skipped="pennylane is not installed")
        return []
    m, n = X.shape
    out = []
    for name in ("default.qubit", "lightning.qubit"):
        try:
            dev = qml.device(name, wires=n)
        except Exception as e:  # lightning may be absent
            say("kernel-cpu", impl="pennylane", device=name, skipped=str(e)[:80])
            continue

        @qml.qnode(dev)
        def circuit(x1: Any, x2: Any) -> Any:
            qml.AngleEmbedding(x1, wires=range(n), rotation="Y")
            qml.adjoint(qml.AngleEmbedding)(x2, wires=range(n), rotation="Y")
            return qml.probs(wires=range(n))

        # AngleEmbedding's RY(theta) is qdp's angle x with theta = 2 x.
        t0 = time.perf_counter()
        Kp = qml.kernels.square_kernel_matrix(2 * X, lambda a, b: circuit(a, b)[0],
                                              assume_normalized_kernel=True)
        t = time.perf_counter() - t0
        scaled = t / (m * (m - 1) // 2) * (N * (N - 1) // 2)
        say("kernel-cpu", impl="pennylane", device=name, samples=m, s=t, scaled_to=N,
            scaled_s=scaled, max_abs_diff=float(np.abs(np.asarray(Kp) - K[:m, :m]).max()))
        out.append((f"pennylane-{name}", scaled))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--qubits", type=int, default=8)
    ap.add_argument("--pl-samples", type=int, default=24)
    ap.add_argument("--qiskit-python", default="")
    a = ap.parse_args()
    X = np.random.default_rng(0).uniform(0, np.pi, size=(a.samples, a.qubits))
    d = Daemon(a.build, "cpu:1", [])
    try:
        os.environ["QDP_TARGET"] = d.target
        K = qdp.kernel(X, encoding="angle", qubits=a.qubits)
        one = median_ms(lambda: qdp.kernel(X, encoding="angle", qubits=a.qubits), 3) / 1e3
        c = qdp.default_client()
        with c.encode(X, "angle", a.qubits) as s:
            resident = median_ms(lambda: c.kernel(s), 3) / 1e3
        say("kernel-cpu", impl="qdp", samples=a.samples, qubits=a.qubits, s=one,
            resident_s=resident)
    finally:
        d.stop()
    others = pennylane(X[:a.pl_samples], K, a.samples)
    if a.qiskit_python:
        with tempfile.TemporaryDirectory() as tmp:
            xp, kp = os.path.join(tmp, "X.npy"), os.path.join(tmp, "K.npy")
            np.save(xp, X)
            p = subprocess.run([a.qiskit_python, "-c", QISKIT, xp, kp], capture_output=True,
                               text=True)
            if p.returncode == 0:
                t = json.loads(p.stdout.strip().splitlines()[-1])["s"]
                diff = float(np.abs(np.load(kp) - K).max())
                say("kernel-cpu", impl="qiskit", samples=a.samples, s=t, max_abs_diff=diff)
                others.append(("qiskit", t))
            else:
                say("kernel-cpu", impl="qiskit", skipped=p.stderr.strip()[-120:])
    for name, t in others:
        say("kernel-cpu-ratio", against=name, qdp_speedup=t / one, target=1000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
