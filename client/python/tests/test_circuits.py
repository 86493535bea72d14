"""qdp._circuits, the circuit conversion of the simulators: gates from a plain list against
hand-computed states, from a PennyLane tape against default.qubit and from a Qiskit
QuantumCircuit against Statevector.evolve (the order of their bits taken into account), each
applied here by a NumPy applier of the documented convention; and the refusals."""

from __future__ import annotations

import math
import re
import warnings
from typing import List

import numpy as np
import pytest

import qdp
from qdp._circuits import Gate, circuit_gates


def apply(psi: np.ndarray, gates: List[Gate], n: int) -> np.ndarray:
    """The gates applied to psi (qubit k = bit k): targets[j] is bit j of the matrix index."""
    t = psi.reshape([2] * n)  # axis a is qubit n - 1 - a
    for g in gates:
        k = len(g.targets)
        m = g.matrix.reshape([2] * 2 * k)  # out bits k-1..0, then in bits k-1..0
        axes = [n - 1 - q for q in reversed(g.targets)]  # the state's axes of bits k-1..0
        t = np.tensordot(m, t, axes=(list(range(k, 2 * k)), axes))
        t = np.moveaxis(t, list(range(k)), axes)
    return t.reshape(-1)


def random_state(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=1 << n) + 1j * rng.normal(size=1 << n)
    return v / np.linalg.norm(v)


def test_a_plain_list_is_the_hand_computed_state() -> None:
    zero = np.zeros(4, complex)
    zero[0] = 1
    # H on qubit 0, then CNOT 0 -> 1: (|00> + |11>)/sqrt(2), indices 0 and 3.
    got = apply(zero, circuit_gates([("h", 0), ("cnot", 0, 1)], 2), 2)
    np.testing.assert_allclose(got, [1 / math.sqrt(2), 0, 0, 1 / math.sqrt(2)], atol=1e-15)
    # X on qubit 1 sets bit 1 (index 2), then RY(pi) takes qubit 0 from |0> to |1>: index 3.
    got = apply(zero, circuit_gates([("x", 1), ("ry", math.pi, 0)], 2), 2)
    np.testing.assert_allclose(got, [0, 0, 0, 1], atol=1e-15)
    # A unitary given with its targets: SWAP of qubits 0 and 2 moves bit 0 to bit 2.
    one = np.zeros(8, complex)
    one[1] = 1
    swap = [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]
    np.testing.assert_allclose(apply(one, circuit_gates([("unitary", swap, [0, 2])], 3), 3),
                               np.eye(8)[4], atol=1e-15)


def test_a_pennylane_tape_evolves_as_default_qubit() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qml = pytest.importorskip("pennylane")
    n = 4
    ops = [qml.Hadamard(0), qml.RX(0.3, 1), qml.CNOT([0, 2]), qml.RY(-1.1, 3), qml.CZ([3, 1]),
           qml.Rot(0.1, 0.2, 0.3, 2), qml.PhaseShift(0.7, 0), qml.SWAP([1, 2]),
           qml.Toffoli([0, 1, 3]), qml.CRZ(0.4, [2, 0])]
    tape = qml.tape.QuantumScript(ops, [qml.state()])
    psi = random_state(n, 1)
    dev = qml.device("default.qubit", wires=n)
    # PennyLane lists wire 0 as the most significant bit: reverse the bits both ways.
    rev = lambda v: v.reshape([2] * n).transpose(list(range(n))[::-1]).reshape(-1)  # noqa: E731
    prep = qml.tape.QuantumScript([qml.StatePrep(rev(psi), wires=range(n))] + ops, [qml.state()])
    want = rev(np.asarray(dev.execute(prep)))
    np.testing.assert_allclose(apply(psi, circuit_gates(tape, n), n), want, atol=1e-13)


def test_a_qiskit_circuit_evolves_as_statevector() -> None:
    qiskit = pytest.importorskip("qiskit")
    from qiskit.quantum_info import Statevector

    n = 4
    qc = qiskit.QuantumCircuit(n)
    qc.h(0)
    qc.rx(0.3, 1)
    qc.cx(0, 2)
    qc.ry(-1.1, 3)
    qc.cz(3, 1)
    qc.barrier()
    qc.u(0.1, 0.2, 0.3, 2)
    qc.swap(1, 2)
    qc.ccx(0, 1, 3)
    qc.crz(0.4, 2, 0)
    psi = random_state(n, 2)
    want = Statevector(psi).evolve(qc).data  # Qiskit's qubit k is bit k, as qdp's
    np.testing.assert_allclose(apply(psi, circuit_gates(qc, n), n), want, atol=1e-13)


def test_refusals_name_the_gate() -> None:
    cases = [([("ry", 0.1, 4)], "targets [4]"),
             ([("cnot", 1, 1)], "distinct"),
             ([("spin", 0)], "unknown gate"),
             ([("unitary", [[1, 0], [0, 2]], [0])], "not unitary"),
             ([("unitary", np.eye(4), [0])], "must be 2 x 2"),
             (["h"], "a gate is"),
             (42, "type int")]
    for circuit, words in cases:
        with pytest.raises(qdp.InvalidArgument, match=re.escape(words)) as e:
            circuit_gates(circuit, 4)
        assert e.value.field == "circuit"
    qiskit = pytest.importorskip("qiskit")
    qc = qiskit.QuantumCircuit(2, 1)
    qc.h(0)
    qc.measure(0, 0)
    with pytest.raises(qdp.InvalidArgument, match="not unitary: measure with State.sample"):
        circuit_gates(qc, 2)
    with pytest.raises(qdp.InvalidArgument, match="the circuit has 2 qubits, the state 1"):
        circuit_gates(qc, 1)
