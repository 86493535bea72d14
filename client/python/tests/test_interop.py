"""qdp states in PennyLane and Qiskit: every encoding's state from the daemon equals the state
of the equivalent circuit that qdp.interop's docstrings give, on PennyLane's default.qubit and in
Qiskit's Statevector; and StatePrep / Statevector of a state reproduce its amplitudes."""

from __future__ import annotations

import numpy as np
import pytest

import qdp

N = 4


def params(encoding: str, rng: np.random.Generator) -> np.ndarray:
    if encoding == "amplitude":
        return rng.uniform(-1, 1, size=11)  # padded to 16
    if encoding == "basis":
        return np.array(11)
    if encoding == "iqp":
        return rng.uniform(-2, 2, size=N + N * (N - 1) // 2)
    return rng.uniform(-2, 2, size=N)


def pairs(n: int) -> list:
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


ENCODINGS = ["amplitude", "angle", "basis", "phase", "iqp-z", "iqp"]


def pennylane_circuit(qml, encoding: str, x: np.ndarray) -> None:
    wires = list(range(N))
    q = lambda k: N - 1 - k  # noqa: E731  the wire of qdp qubit k
    if encoding == "amplitude":
        qml.AmplitudeEmbedding(x, wires=wires, normalize=True, pad_with=0.0)
    elif encoding == "angle":
        qml.AngleEmbedding(2 * x, wires=wires[::-1], rotation="Y")
    elif encoding == "basis":
        qml.BasisEmbedding(int(x), wires=wires)
    else:
        for w in wires:
            qml.Hadamard(wires=w)
        for k in range(N):
            qml.PhaseShift(x[k], wires=q(k))
        if encoding == "iqp":
            for p, (i, j) in enumerate(pairs(N)):
                qml.ControlledPhaseShift(x[N + p], wires=[q(i), q(j)])
        if encoding != "phase":
            for w in wires:
                qml.Hadamard(wires=w)


def qiskit_state(encoding: str, x: np.ndarray) -> np.ndarray:
    from qiskit import QuantumCircuit
    from qiskit.quantum_info import Statevector

    qc = QuantumCircuit(N)
    if encoding == "amplitude":
        v = np.zeros(1 << N)
        v[:len(x)] = x
        qc.initialize(v / np.linalg.norm(v))
    elif encoding == "angle":
        for k in range(N):
            qc.ry(2 * x[k], k)
    elif encoding == "basis":
        for k in range(N):
            if (int(x) >> k) & 1:
                qc.x(k)
    else:
        qc.h(range(N))
        for k in range(N):
            qc.p(x[k], k)
        if encoding == "iqp":
            for p, (i, j) in enumerate(pairs(N)):
                qc.cp(x[N + p], i, j)
        if encoding != "phase":
            qc.h(range(N))
    return np.asarray(Statevector(qc).data)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_pennylane_circuits_give_qdps_states(client, encoding) -> None:
    qml = pytest.importorskip("pennylane")
    from qdp.interop.pennylane import state_prep

    x = params(encoding, np.random.default_rng(3))
    with client.encode(x, encoding, N) as s:
        got = s.numpy()
        dev = qml.device("default.qubit", wires=N)

        @qml.qnode(dev)
        def circuit():
            pennylane_circuit(qml, encoding, x)
            return qml.state()

        @qml.qnode(dev)
        def prepared():
            state_prep(s)
            return qml.state()

        np.testing.assert_allclose(np.asarray(circuit()), got, atol=1e-12)
        np.testing.assert_allclose(np.asarray(prepared()), got, atol=1e-12)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_qiskit_circuits_give_qdps_states(client, encoding) -> None:
    pytest.importorskip("qiskit")
    from qdp.interop.qiskit import statevector

    x = params(encoding, np.random.default_rng(4))
    with client.encode(x, encoding, N) as s:
        got = s.numpy()
        np.testing.assert_allclose(qiskit_state(encoding, x), got, atol=1e-12)
        sv = statevector(s)
        np.testing.assert_allclose(np.asarray(sv.data), got, atol=0)
        # Little-endian both: qubit 0's marginal is the same in Qiskit and in qdp's bits.
        p0 = sv.probabilities([0])
        probs = np.abs(got) ** 2
        assert p0[1] == pytest.approx(probs[1::2].sum(), abs=1e-12)


def test_reversed_wires_put_qdp_qubit_k_on_pennylane_wire_k(client) -> None:
    """The idiom the docstrings give: with wires range(n)[::-1], qdp's angle state is the RY
    circuit on wire k = qubit k, and <Z> on wire k is cos(2 x_k)."""
    qml = pytest.importorskip("pennylane")
    from qdp.interop import pennylane as qdp_pl

    for doc in (qdp_pl.__doc__, qdp_pl.state_prep.__doc__):
        assert "range(n)[::-1]" in doc
    x = np.random.default_rng(6).uniform(0, np.pi, size=N)
    dev = qml.device("default.qubit", wires=N)

    @qml.qnode(dev)
    def ry():
        for k in range(N):
            qml.RY(2 * x[k], wires=k)
        return qml.state()

    with client.encode(x, "angle", N) as s:
        psi = s.numpy()

        @qml.qnode(dev)
        def prepared():
            qml.StatePrep(psi, wires=range(N)[::-1])
            return qml.state()

        @qml.qnode(dev)
        def z_of_each_wire():
            qdp_pl.state_prep(s, wires=range(N)[::-1])
            return [qml.expval(qml.PauliZ(k)) for k in range(N)]

        np.testing.assert_allclose(np.asarray(prepared()), np.asarray(ry()), atol=1e-12)
        np.testing.assert_allclose(np.asarray(z_of_each_wire()), np.cos(2 * x), atol=1e-12)


def test_batches_and_wires(client) -> None:
    qml = pytest.importorskip("pennylane")
    pytest.importorskip("qiskit")
    from qdp.interop.pennylane import state_prep
    from qdp.interop.qiskit import statevector

    X = np.random.default_rng(5).uniform(0, 1, size=(3, N))
    with client.encode(X, "angle", N) as s:
        svs = statevector(s)
        assert len(svs) == 3
        op = state_prep(s, wires=["a", "b", "c", "d"])
        assert list(op.wires) == ["a", "b", "c", "d"]
    with pytest.raises(qdp.InvalidArgument) as e:
        state_prep(np.ones(8) / np.sqrt(8), wires=[0, 1])
    assert e.value.field == "wires"
    with pytest.raises(qdp.InvalidArgument):
        statevector(np.ones(6))
