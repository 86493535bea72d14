"""Writes tests/gpu/data/sim_reference_12q.npz, the reference of tests/gpu/test_sim_gpu.py: a
random 12-qubit circuit on an angle state and PennyLane default.qubit's final state and
expectation values. PennyLane need not be installed where the GPU tests run, so the values are
made once, on any machine that has it, and committed (about 70 KiB). PennyLane is imported only by main(): the GPU test imports
``as_tuples`` from here.

Run from the repository root with a Python that has PennyLane (and NumPy):

    python3 tests/gpu/make_sim_reference.py

The file holds:

- ``x`` (12,): the angles; qdp's angle state is prod_k (b_k ? sin x_k : cos x_k), which
  PennyLane prepares here as RY(2 x_k) on wire k from |0...0>.
- the circuit, one row per gate: ``kind`` (0 ry, 1 rx, 2 rz, 3 h, 4 cnot, 5 cz, 6 unitary),
  ``angle``, ``q0``, ``q1`` (the second qubit, -1 for one-qubit gates; cnot: q0 controls q1) and
  ``unitary`` (4 x 4, zero unless kind 6, acting with q0 as bit 0 of its index and q1 as bit 1).
- ``state`` (4096,): PennyLane's final state in qdp's order (qubit k is bit k of the index).
- ``z`` (12,): <Z_k>; ``strings`` and ``values``: a few Pauli strings (letter k on qubit k) and
  their expectation values.

Before writing, it checks PennyLane's state against an independent NumPy application of the same
gates (qdp._circuits' matrices) to 1e-12.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "client" / "python"))

from qdp._circuits import circuit_gates  # noqa: E402

N = 12
GATES = 160
OUT = ROOT / "tests" / "gpu" / "data" / "sim_reference_12q.npz"
STRINGS = ["Z" * N, "X" + "I" * (N - 2) + "Y", "IZIXIIIIYIIZ", "I" * (N - 1) + "X",
           "YYIIIIIIIIII"]


def random_circuit(rng: np.random.Generator) -> dict:
    kind = rng.integers(0, 7, size=GATES)
    kind[:N] = 3  # a layer of H first, so that every qubit is mixed
    angle = rng.uniform(-np.pi, np.pi, size=GATES)
    q0 = np.zeros(GATES, dtype=np.int64)
    q1 = np.full(GATES, -1, dtype=np.int64)
    unitary = np.zeros((GATES, 4, 4), dtype=np.complex128)
    for i in range(GATES):
        a, b = rng.choice(N, 2, replace=False)
        q0[i] = i if i < N else a
        if kind[i] >= 4:
            q1[i] = b
        if kind[i] == 6:
            z = rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4))
            qq, r = np.linalg.qr(z)
            unitary[i] = qq * (np.diag(r) / np.abs(np.diag(r)))
    angle[kind >= 3] = 0.0
    return {"kind": kind, "angle": angle, "q0": q0, "q1": q1, "unitary": unitary}


def as_tuples(c: dict) -> list:
    """The circuit as qdp.sim takes it."""
    names = ["ry", "rx", "rz", "h", "cnot", "cz"]
    out = []
    for k, t, a, b, u in zip(c["kind"], c["angle"], c["q0"], c["q1"], c["unitary"]):
        if k < 3:
            out.append((names[k], float(t), int(a)))
        elif k == 3:
            out.append(("h", int(a)))
        elif k < 6:
            out.append((names[k], int(a), int(b)))
        else:
            out.append(("unitary", u, [int(a), int(b)]))
    return out


def pennylane_ops(x: np.ndarray, c: dict) -> None:
    import pennylane as qml

    for k in range(N):
        qml.RY(2 * x[k], wires=k)
    rot = [qml.RY, qml.RX, qml.RZ]
    for k, t, a, b, u in zip(c["kind"], c["angle"], c["q0"], c["q1"], c["unitary"]):
        a, b = int(a), int(b)
        if k < 3:
            rot[k](float(t), wires=a)
        elif k == 3:
            qml.Hadamard(wires=a)
        elif k == 4:
            qml.CNOT(wires=[a, b])
        elif k == 5:
            qml.CZ(wires=[a, b])
        else:  # PennyLane's first wire is the matrix's most significant bit: b, then a
            qml.QubitUnitary(u, wires=[b, a])


def to_qdp_order(v: np.ndarray) -> np.ndarray:
    """PennyLane's state (wire 0 the most significant bit) with qubit k as bit k."""
    return np.transpose(v.reshape([2] * N), list(reversed(range(N)))).reshape(-1)


def numpy_apply(psi: np.ndarray, gates: list) -> np.ndarray:
    t = psi.reshape([2] * N)  # axis a is qubit N - 1 - a
    for g in gates:
        k = len(g.targets)
        m = g.matrix.reshape([2] * 2 * k)
        axes = [N - 1 - q for q in reversed(g.targets)]
        t = np.tensordot(m, t, axes=(list(range(k, 2 * k)), axes))
        t = np.moveaxis(t, list(range(k)), axes)
    return t.reshape(-1)


def pauli_op(s: str) -> object:
    import pennylane as qml

    ops = {"X": qml.PauliX, "Y": qml.PauliY, "Z": qml.PauliZ}
    terms = [ops[p](k) for k, p in enumerate(s) if p != "I"]
    return qml.prod(*terms) if len(terms) > 1 else terms[0]


def main() -> None:
    import pennylane as qml

    rng = np.random.default_rng(20261204)
    x = rng.uniform(-np.pi, np.pi, size=N)
    c = random_circuit(rng)
    dev = qml.device("default.qubit", wires=N)

    @qml.qnode(dev)
    def state() -> object:
        pennylane_ops(x, c)
        return qml.state()

    @qml.qnode(dev)
    def expvals() -> object:
        pennylane_ops(x, c)
        return [qml.expval(qml.PauliZ(k)) for k in range(N)] + \
            [qml.expval(pauli_op(s)) for s in STRINGS]

    psi = to_qdp_order(np.asarray(state(), dtype=np.complex128))
    vals = np.asarray(expvals(), dtype=np.float64)
    angle_state = np.ones(1)
    for k in range(N):  # qubit k is bit k: the new factor is the most significant so far
        angle_state = np.kron([np.cos(x[k]), np.sin(x[k])], angle_state)
    check = numpy_apply(angle_state.astype(np.complex128), circuit_gates(as_tuples(c), N))
    err = np.max(np.abs(check - psi))
    assert err < 1e-12, f"PennyLane and the NumPy application differ by {err}"
    z = vals[:N]
    i = np.arange(1 << N)
    zz = np.array([np.sum(np.abs(psi) ** 2 * (1 - 2 * ((i >> k) & 1))) for k in range(N)])
    assert np.max(np.abs(zz - z)) < 1e-12
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, x=x, state=psi, z=z, strings=np.array(STRINGS),
                        values=vals[N:], **c)
    print(f"wrote {OUT.relative_to(ROOT)}: {GATES} gates on {N} qubits, PennyLane "
          f"{qml.__version__}, |PennyLane - NumPy| = {err:.2e}")


if __name__ == "__main__":
    main()
