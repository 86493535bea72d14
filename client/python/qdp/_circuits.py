"""Circuits as qdp's simulators take them: a list of gates, each a unitary matrix on target qubits,
from a plain list, a PennyLane tape or a Qiskit ``QuantumCircuit``.

Qubit k is bit k of the amplitude index, as qdp lays its states out (and as Qiskit numbers its
qubits). A gate's matrix acts on its targets with ``targets[j]`` as bit j of the matrix's row and
column index (the order cuStateVec's apply-matrix call takes). PennyLane wire ``w`` (an integer)
is qubit ``w``; PennyLane lists its state vectors with wire 0 as the most significant bit, so
``qml.state()`` of the same circuit is qdp's state with the bit order reversed.
"""

from __future__ import annotations

import cmath
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Sequence, Tuple

import numpy as np

from .errors import InvalidArgument


@dataclass(frozen=True)
class Gate:
    """A unitary on ``targets``: ``matrix`` is (2^k, 2^k) complex128, ``targets[j]`` bit j of its
    index."""

    matrix: np.ndarray
    targets: Tuple[int, ...]


_S2 = 1 / math.sqrt(2)
_FIXED: Dict[str, np.ndarray] = {
    "h": np.array([[_S2, _S2], [_S2, -_S2]]),
    "x": np.array([[0, 1], [1, 0]]),
    "y": np.array([[0, -1j], [1j, 0]]),
    "z": np.diag([1, -1]),
    "s": np.diag([1, 1j]),
    "sdg": np.diag([1, -1j]),
    "t": np.diag([1, cmath.exp(1j * math.pi / 4)]),
    "tdg": np.diag([1, cmath.exp(-1j * math.pi / 4)]),
    # Two qubits (a, b): index bit 0 is a. cnot/cx: a controls b.
    "cnot": np.array([[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0]]),
    "cz": np.diag([1, 1, 1, -1]),
    "swap": np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]),
}
_FIXED["cx"] = _FIXED["cnot"]


def _rotation(axis: str) -> Callable[[float], np.ndarray]:
    def make(theta: float) -> np.ndarray:
        c, s = math.cos(theta / 2), math.sin(theta / 2)
        if axis == "x":
            return np.array([[c, -1j * s], [-1j * s, c]])
        if axis == "y":
            return np.array([[c, -s], [s, c]])
        return np.diag([cmath.exp(-0.5j * theta), cmath.exp(0.5j * theta)])
    return make


_ANGLED: Dict[str, Callable[[float], np.ndarray]] = {
    "rx": _rotation("x"), "ry": _rotation("y"), "rz": _rotation("z"),
    "phase": lambda phi: np.diag([1, cmath.exp(1j * phi)]),
}


def gate(matrix: Any, targets: Sequence[int], qubits: int, where: str = "circuit") -> Gate:
    """A checked :class:`Gate`: distinct targets among ``qubits`` qubits, a square matrix of
    their size that is unitary (to 1e-10)."""
    t = tuple(int(q) for q in targets)
    if not t or len(set(t)) != len(t) or any(q < 0 or q >= qubits for q in t):
        raise InvalidArgument(f"{where}: targets {list(t)} must be distinct qubits of the "
                              f"{qubits}-qubit state (0 to {qubits - 1})", field="circuit")
    m = np.asarray(matrix, dtype=np.complex128)
    dim = 1 << len(t)
    if m.shape != (dim, dim):
        raise InvalidArgument(f"{where}: a matrix of shape {m.shape} on {len(t)} qubits; it "
                              f"must be {dim} x {dim}", field="circuit")
    if not np.allclose(m @ m.conj().T, np.eye(dim), rtol=0, atol=1e-10):
        raise InvalidArgument(f"{where}: the matrix is not unitary (U U^dagger differs from the "
                              "identity by more than 1e-10)", field="circuit")
    return Gate(m, t)


def _of_tuple(item: Any, qubits: int, i: int) -> Gate:
    where = f"gate {i} ({item!r})"
    if isinstance(item, Gate):
        return gate(item.matrix, item.targets, qubits, where)
    if not isinstance(item, (tuple, list)) or not item or not isinstance(item[0], str):
        raise InvalidArgument(f"{where}: a gate is a qdp Gate or a tuple (name, ...), e.g. "
                              "('ry', 0.3, 2), ('cnot', 0, 1), ('unitary', U, [0, 1])",
                              field="circuit")
    name, args = item[0].lower(), list(item[1:])
    if name in _FIXED:
        return gate(_FIXED[name], args, qubits, where)
    if name in _ANGLED and len(args) == 2:
        return gate(_ANGLED[name](float(args[0])), args[1:], qubits, where)
    if name == "unitary" and len(args) == 2:
        return gate(args[0], args[1], qubits, where)
    known = sorted(_FIXED) + sorted(_ANGLED) + ["unitary"]
    raise InvalidArgument(f"{where}: unknown gate or arguments; the names are "
                          f"{', '.join(known)} ((name, angle, qubit) for rx, ry, rz, phase; "
                          "('unitary', U, targets))", field="circuit")


def _of_pennylane(tape: Any, qubits: int) -> List[Gate]:
    import pennylane as qml  # type: ignore[import-not-found]

    out = []
    for i, op in enumerate(tape.operations):
        where = f"operation {i} ({op.name})"
        wires = list(op.wires)
        if not all(isinstance(w, (int, np.integer)) for w in wires):
            raise InvalidArgument(f"{where}: wires {wires}: qdp takes integer wires, wire w "
                                  "being qubit w", field="circuit")
        if not op.has_matrix:
            raise InvalidArgument(f"{where} has no matrix (state preparation, a measurement "
                                  "or a template): decompose it, or prepare the state with "
                                  "qdp's encodings", field="circuit")
        # PennyLane's matrix takes its first wire as the most significant bit.
        m = qml.matrix(op, wire_order=op.wires)
        out.append(gate(m, list(reversed(wires)), qubits, where))
    return out


def _of_qiskit(circuit: Any, qubits: int) -> List[Gate]:
    from qiskit.quantum_info import Operator  # type: ignore[import-not-found]

    out = []
    for i, instr in enumerate(circuit.data):
        op = instr.operation
        where = f"instruction {i} ({op.name})"
        if op.name == "barrier":
            continue
        if op.name in ("measure", "reset") or getattr(op, "num_clbits", 0):
            raise InvalidArgument(f"{where} is not unitary: measure with State.sample and "
                                  "State.expectations instead", field="circuit")
        # Qiskit's matrix takes the instruction's first qubit as bit 0, as qdp does.
        targets = [circuit.find_bit(q).index for q in instr.qubits]
        out.append(gate(Operator(op).data, targets, qubits, where))
    return out


def circuit_gates(circuit: Any, qubits: int) -> List[Gate]:
    """The gates of ``circuit`` for a state of ``qubits`` qubits.

    Parameters
    ----------
    circuit : list, PennyLane tape or Qiskit QuantumCircuit
        A list of gates (:class:`Gate`, or tuples such as ``("ry", 0.3, 2)``, ``("cnot", 0,
        1)``, ``("unitary", U, [0, 1])``), a PennyLane ``QuantumScript``/tape (its operations;
        its measurements are not gates), or a Qiskit ``QuantumCircuit`` (barriers skipped).
    qubits : int
        The state's qubits: every target must be below it.

    Returns
    -------
    list of Gate

    Raises
    ------
    InvalidArgument
        An unknown gate, targets outside the state or repeated, a matrix that is not unitary or
        not of its targets' size, a measurement or reset, or a circuit of another kind (field
        "circuit").
    """
    if hasattr(circuit, "operations") and hasattr(circuit, "wires"):
        return _of_pennylane(circuit, qubits)
    if hasattr(circuit, "data") and hasattr(circuit, "find_bit"):
        if circuit.num_qubits > qubits:
            raise InvalidArgument(f"the circuit has {circuit.num_qubits} qubits, the state "
                                  f"{qubits}", field="circuit")
        return _of_qiskit(circuit, qubits)
    if isinstance(circuit, Iterable) and not isinstance(circuit, (str, bytes)):
        return [_of_tuple(item, qubits, i) for i, item in enumerate(circuit)]
    raise InvalidArgument(f"a circuit of type {type(circuit).__name__}: give a list of gates, a "
                          "PennyLane tape or a Qiskit QuantumCircuit", field="circuit")
