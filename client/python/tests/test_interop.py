"""qdp states in PennyLane and Qiskit: every encoding's state from the daemon equals the state
of the equivalent circuit that qdp.interop's docstrings give, on PennyLane's default.qubit and in
Qiskit's Statevector; and StatePrep / Statevector of a state reproduce its amplitudes. The
bridges' host paths (a Lightning device's own state vector, Qiskit Aer) run gates from a state
against those references; each bridge without its library says what to install; the device
paths' checks of GPU memory run on plain interface objects, and qdp.interop.cudaq's decisions
against a stand-in module that records its calls (CUDA-Q itself, and every copy out of GPU
memory, need a GPU: bench/bridge_bench.py)."""

from __future__ import annotations

import sys

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


# --- The bridges: a Lightning device's own state vector, Qiskit Aer, CUDA-Q -----------------


def lightning_reference(qml, psi: np.ndarray, ops) -> tuple:
    """default.qubit's <Z> of every wire and final state for StatePrep(psi) then ``ops``."""
    dev = qml.device("default.qubit", wires=N)

    @qml.qnode(dev)
    def circuit():
        qml.StatePrep(psi, wires=range(N))
        for op in ops:
            qml.apply(op)
        return [qml.expval(qml.PauliZ(w)) for w in range(N)] + [qml.state()]

    out = circuit()
    return np.asarray(out[:N], dtype=float), np.asarray(out[N])


@pytest.mark.parametrize("encoding", ["angle", "iqp"])
def test_lightning_state_runs_gates_from_qdps_state(client, encoding) -> None:
    """lightning_state loads the state into lightning.qubit's own state vector (the host path,
    the code lightning.gpu's host path shares) and lightning_run continues from it, without the
    reset a QNode makes: against default.qubit from StatePrep of the same amplitudes."""
    qml = pytest.importorskip("pennylane")
    pytest.importorskip("pennylane_lightning")
    from pennylane.tape import QuantumScript

    from qdp.interop.pennylane import lightning_run, lightning_state

    x = params(encoding, np.random.default_rng(11))
    with client.encode(x, encoding, N) as s:
        psi = s.numpy()
        dev = qml.device("lightning.qubit", wires=N)
        sv = lightning_state(dev, s)
        np.testing.assert_allclose(sv.state, psi, atol=0)  # copied as it is: wire 0 = top bit
        ops = [qml.RY(0.7, wires=1), qml.CNOT(wires=[0, 2]), qml.RZ(-0.4, wires=3)]
        tape = QuantumScript(ops, [qml.expval(qml.PauliZ(w)) for w in range(N)] + [qml.state()])
        got = lightning_run(dev, tape, sv)
        z, state = lightning_reference(qml, psi, ops)
        np.testing.assert_allclose(np.asarray(got[:N], dtype=float), z, atol=1e-12)
        np.testing.assert_allclose(np.asarray(got[N]), state, atol=1e-12)
        np.testing.assert_allclose(sv.state, state, atol=1e-12)  # left as the gates made it
        assert lightning_state(dev, s) is sv  # the device's own buffer again, all overwritten
        np.testing.assert_allclose(sv.state, psi, atol=0)


def test_lightning_state_puts_qdp_qubit_k_on_wire_n_1_k(client) -> None:
    """qdp's angle state has <Z> = cos(2 x_k) on its qubit k: on Lightning that is wire n-1-k."""
    qml = pytest.importorskip("pennylane")
    pytest.importorskip("pennylane_lightning")
    from pennylane.tape import QuantumScript

    from qdp.interop.pennylane import lightning_run, lightning_state

    x = np.random.default_rng(12).uniform(0, np.pi, size=N)
    for dtype, atol in (("complex128", 1e-12), ("complex64", 1e-6)):
        with client.encode(x, "angle", N, dtype=dtype) as s:
            dev = qml.device("lightning.qubit", wires=N, c_dtype=np.dtype(dtype).type)
            lightning_state(dev, s, path="host")
            z = lightning_run(dev, QuantumScript([], [qml.expval(qml.PauliZ(w))
                                                      for w in range(N)]))
            np.testing.assert_allclose(np.asarray(z, dtype=float)[::-1], np.cos(2 * x),
                                       atol=atol)


def test_lightning_state_refusals(client) -> None:
    qml = pytest.importorskip("pennylane")
    pytest.importorskip("pennylane_lightning")
    from qdp.interop.pennylane import lightning_run, lightning_state

    psi = np.ones(1 << N, dtype=np.complex128) / np.sqrt(1 << N)
    dev = qml.device("lightning.qubit", wires=N)
    with pytest.raises(qdp.InvalidArgument) as e:
        lightning_state(qml.device("default.qubit", wires=N), psi)
    assert e.value.field == "dev" and "lightning.gpu" in str(e.value)
    with pytest.raises(qdp.InvalidArgument) as e:
        lightning_state(qml.device("lightning.qubit", wires=["a", "b", "c", "d"]), psi)
    assert e.value.field == "dev" and "wires=n" in str(e.value)
    with pytest.raises(qdp.InvalidArgument) as e:
        lightning_state(dev, psi[:8])
    assert "3 qubits" in str(e.value)
    with pytest.raises(qdp.InvalidArgument) as e:
        lightning_state(dev, psi, path="fast")
    assert e.value.field == "path"
    with pytest.raises(qdp.InvalidArgument) as e:
        lightning_state(dev, np.stack([psi, psi]))
    assert "batch of 2" in str(e.value)
    with client.encode(np.zeros(N), "angle", N) as s:  # the CPU backend: host memory
        with pytest.raises(qdp.NotSupported) as e:
            lightning_state(dev, s, path="device")
        assert "path='host'" in str(e.value)
    from pennylane.tape import QuantumScript

    lightning_state(dev, psi)
    with pytest.raises(qdp.InvalidArgument) as e:
        lightning_run(dev, QuantumScript([qml.RX(0.1, wires=9)], [qml.state()]))
    assert e.value.field == "tape"


def aer_run(qc):
    from qiskit_aer import AerSimulator

    return AerSimulator(method="statevector").run(qc).result()


@pytest.mark.parametrize("encoding", ["angle", "iqp", "amplitude"])
def test_aer_circuit_starts_from_qdps_state(client, encoding) -> None:
    """aer_circuit's set_statevector then gates, on Aer, against Qiskit's Statevector evolved by
    the same gates from the circuit of the encoding (qiskit_state, independent of the daemon)."""
    pytest.importorskip("qiskit_aer")
    from qiskit import QuantumCircuit
    from qiskit.quantum_info import Statevector

    from qdp.interop.qiskit import aer_circuit

    x = params(encoding, np.random.default_rng(13))
    gates = QuantumCircuit(N)
    gates.ry(0.7, 1)
    gates.cx(0, 2)
    gates.rz(-0.4, 3)
    want = Statevector(qiskit_state(encoding, x)).evolve(gates)
    with client.encode(x, encoding, N) as s:
        qc = aer_circuit(s, gates)
        qc.save_statevector()
        got = np.asarray(aer_run(qc).get_statevector(qc).data)
    np.testing.assert_allclose(got, np.asarray(want.data), atol=1e-12)


def test_aer_circuit_keeps_qdp_qubit_k_as_qubit_k(client) -> None:
    """<Z> of Aer's qubit k is cos(2 x_k) for qdp's angle state; and measured bit k is qubit k."""
    pytest.importorskip("qiskit_aer")
    from qiskit import QuantumCircuit
    from qiskit.quantum_info import SparsePauliOp

    from qdp.interop.qiskit import aer_circuit

    x = np.random.default_rng(14).uniform(0, np.pi, size=N)
    with client.encode(x, "angle", N, dtype="complex64") as s:
        qc = aer_circuit(s)
        for k in range(N):
            label = "I" * (N - 1 - k) + "Z" + "I" * k  # Qiskit labels: qubit 0 rightmost
            qc.save_expectation_value(SparsePauliOp(label), range(N), label=f"z{k}")
        res = aer_run(qc).data(0)
        z = [float(np.real(res[f"z{k}"])) for k in range(N)]
        np.testing.assert_allclose(z, np.cos(2 * x), atol=1e-6)
        probs = s.probabilities([2])  # qdp's own marginal of qubit 2
        m = QuantumCircuit(N, 1)
        m.measure(2, 0)
        counts = aer_run(aer_circuit(s, m)).get_counts()
        from qiskit_aer import AerSimulator

        shots = AerSimulator().options.shots
        assert counts.get("1", 0) / shots == pytest.approx(probs[1], abs=0.05)


def test_aer_circuit_refusals() -> None:
    pytest.importorskip("qiskit_aer")
    from qiskit import QuantumCircuit

    from qdp.interop.qiskit import aer_circuit

    psi = np.ones(8) / np.sqrt(8)
    with pytest.raises(qdp.InvalidArgument) as e:
        aer_circuit(psi, QuantumCircuit(2))
    assert e.value.field == "circuit"
    with pytest.raises(qdp.InvalidArgument):
        aer_circuit(np.stack([psi, psi]))
    with pytest.raises(qdp.InvalidArgument):
        aer_circuit(np.ones(6))


@pytest.mark.parametrize("module,fn,lib,pip", [
    ("cudaq", "state", "cudaq", "pip install cuda-quantum"),
    ("qiskit", "aer_circuit", "qiskit_aer", "pip install qiskit-aer"),
    ("qiskit", "aer_state", "qiskit_aer", "pip install qiskit-aer"),
    ("qiskit", "statevector", "qiskit", "pip install qiskit"),
    ("pennylane", "state_prep", "pennylane", "pip install pennylane"),
    ("pennylane", "lightning_state", "pennylane", "pip install pennylane"),
])
def test_each_bridge_without_its_library_says_what_to_install(monkeypatch, module, fn, lib,
                                                              pip) -> None:
    import importlib

    for name in list(sys.modules):
        if name == lib or name.startswith(lib + "."):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, lib, None)  # import raises ImportError
    mod = importlib.import_module(f"qdp.interop.{module}")
    args = (object(), np.ones(2) / np.sqrt(2)) if fn == "lightning_state" else \
        (np.ones(2) / np.sqrt(2),)
    with pytest.raises(qdp.NotSupported) as e:
        getattr(mod, fn)(*args)
    assert pip in str(e.value)


class CudaArray:
    """A plain object with a CUDA array interface (no memory behind it: only what the checks of
    qdp.interop._vector read before anything touches the pointer)."""

    def __init__(self, shape, typestr="<c16", strides=None) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (0x7F0000000000, False), "version": 3}


def test_device_vectors_are_checked_before_any_copy() -> None:
    from qdp.interop._vector import device_vector, host_vector

    v = device_vector(CudaArray((16,)))
    assert (v.qubits, v.dtype, v.size, v.ordinal) == (4, "complex128", 16, None)
    iface = v.__cuda_array_interface__
    assert iface["shape"] == (16,) and iface["data"][0] == 0x7F0000000000
    assert device_vector(CudaArray((1, 8), "<c8")).dtype == "complex64"  # one row of a view
    assert device_vector(np.ones(4)) is None  # host memory: the host path
    for bad, words in ((CudaArray((2, 8)), "1-D"), (CudaArray((16,), "<f8"), "complex64"),
                       (CudaArray((12,)), "power of two"),
                       (CudaArray((16,), strides=(32,)), "contiguous")):
        with pytest.raises(qdp.InvalidArgument) as e:
            device_vector(bad)
        assert words in str(e.value)
    with pytest.raises(qdp.InvalidArgument) as e:
        host_vector(CudaArray((16,)))
    assert "host path" in str(e.value)
    np.testing.assert_array_equal(host_vector(np.ones((1, 4)), np.complex64),
                                  np.ones(4, np.complex64))


class StandInCudaq:
    """Stands in for the cudaq module (which needs its wheel and, for GPU memory, a GPU) to test
    qdp.interop.cudaq's own decisions: the precision check, and the copy it has CUDA-Q make when
    ``State.from_data`` kept the pointer it was given. It is not CUDA-Q: it only records."""

    def __init__(self, precision: str, keeps_pointer: bool) -> None:
        import types

        self.calls: list = []
        self.refuse_gpu = False
        outer = self

        class Tensor:
            def __init__(self, ptr: int) -> None:
                self.ptr = ptr

            def data(self) -> int:
                return self.ptr

        class State:
            def __init__(self, ptr: int, data) -> None:
                self.ptr, self.data = ptr, data

            def getTensor(self):
                return Tensor(self.ptr)

            @staticmethod
            def from_data(x):
                outer.calls.append("from_data")
                cai = getattr(x, "__cuda_array_interface__", None)
                if cai is not None:  # GPU memory: only its pointer is read, never the memory
                    if outer.refuse_gpu:
                        raise RuntimeError("Current target 'stand-in' does not support CuPy "
                                           "arrays.")
                    ptr = cai["data"][0]
                    return State(ptr if keeps_pointer else ptr + 4096, None)
                copy = np.array(x)  # what a copying release holds: its own memory
                return State(x.ctypes.data if keeps_pointer else copy.ctypes.data, copy)

        class Target:
            name = "stand-in"

            def get_precision(self):
                return f"SimulationPrecision.{precision}"

        self.State = State
        self.get_target = lambda: Target()
        self.kernel = lambda f: f
        self.qvector = lambda s: None

        def get_state(kernel, st):
            outer.calls.append(f"get_state({kernel.__name__})")
            return State(-2, None if st.data is None else np.array(st.data))

        self.get_state = get_state
        self.module = types.ModuleType("cudaq")
        for k in ("State", "get_target", "kernel", "qvector", "get_state"):
            setattr(self.module, k, getattr(self, k))


@pytest.mark.parametrize("keeps_pointer", [False, True])
def test_cudaq_state_never_returns_a_state_over_memory_it_does_not_own(
        monkeypatch, keeps_pointer) -> None:
    from qdp.interop import cudaq as bridge

    cq = StandInCudaq("fp64", keeps_pointer)
    monkeypatch.setitem(sys.modules, "cudaq", cq.module)
    monkeypatch.delitem(sys.modules, "qdp.interop._cudaq_kernel", raising=False)
    psi = np.exp(1j * np.arange(8)) / np.sqrt(8)
    st = bridge.state(psi)
    want = ["from_data", "get_state(start_from)"] if keeps_pointer else ["from_data"]
    assert cq.calls == want
    np.testing.assert_array_equal(st.data, psi)
    monkeypatch.delitem(sys.modules, "qdp.interop._cudaq_kernel", raising=False)


def test_cudaq_state_refuses_a_dtype_that_is_not_the_targets(monkeypatch) -> None:
    from qdp.interop import cudaq as bridge

    cq = StandInCudaq("fp32", False)
    monkeypatch.setitem(sys.modules, "cudaq", cq.module)
    with pytest.raises(qdp.InvalidArgument) as e:
        bridge.state(np.ones(4, np.complex128) / 2)
    assert "option='fp64'" in str(e.value) and "complex64" in str(e.value)
    assert cq.calls == []  # refused before anything is copied
    bridge.state(np.ones(4, np.complex64) / 2)
    assert cq.calls == ["from_data"]
    with pytest.raises(qdp.InvalidArgument):
        bridge.state(np.ones(4) / 2)  # real amplitudes: CUDA-Q takes complex ones
    with pytest.raises(qdp.InvalidArgument) as e:
        bridge.state(np.ones((2, 4), np.complex64) / 2)
    assert "batch of 2" in str(e.value)


def test_cudaq_state_of_qdps_state_is_cudaqs_own(client) -> None:
    """With CUDA-Q here (its CPU target, qpp-cpu, where there is no GPU): the host path against
    CUDA-Q's own kernel of qdp's angle state (ry(2 x_k) on qubit k), and a kernel that starts
    from the bridged state acts on qdp's qubit 0 as its qubit 0."""
    cudaq = pytest.importorskip("cudaq")
    import cudaq_kernels as k

    from qdp.interop import cudaq as bridge

    if bridge._target_precision(cudaq) != "complex128":
        pytest.skip(f"CUDA-Q's target {cudaq.get_target().name} is not fp64")
    x = np.random.default_rng(15).uniform(0, np.pi, size=N)
    want = np.asarray(cudaq.get_state(k.angle, x.tolist()))
    with client.encode(x, "angle", N) as s:
        psi = s.numpy()
        st = bridge.state(s)
    np.testing.assert_allclose(want, psi, atol=1e-12)  # the order: qdp qubit k is CUDA-Q's k
    np.testing.assert_allclose(np.asarray(st), psi, atol=0)
    assert st.amplitude([1] + [0] * (N - 1)) == pytest.approx(psi[1], abs=0)  # qubit 0 = bit 0
    assert st[1] == pytest.approx(psi[1 << (N - 1)], abs=0)  # st[i]: i's bits reversed (docs)
    flipped = np.asarray(cudaq.get_state(k.x_on_qubit_0, st))
    np.testing.assert_allclose(flipped, psi.reshape(-1, 2)[:, ::-1].reshape(-1), atol=1e-12)
    if not cudaq.get_target().name.startswith("nvidia"):  # GPU memory on a CPU target
        with pytest.raises(qdp.NotSupported) as e:
            bridge.state(CudaArray((1 << N,)))  # refused by CUDA-Q before it reads the pointer
        assert "cudaq.set_target('nvidia')" in str(e.value)


@pytest.mark.parametrize("keeps_pointer", [False, True])
def test_cudaq_device_path_reads_the_pointer_and_copies_once(monkeypatch, keeps_pointer) -> None:
    """GPU memory (here a bare interface: the stand-in reads only the pointer) goes to from_data
    as a 1-D interface of the same pointer; kept by from_data, it is copied by a kernel."""
    from qdp.interop import cudaq as bridge

    cq = StandInCudaq("fp64", keeps_pointer)
    monkeypatch.setitem(sys.modules, "cudaq", cq.module)
    monkeypatch.delitem(sys.modules, "qdp.interop._cudaq_kernel", raising=False)
    st = bridge.state(CudaArray((1, 16)))
    assert st.ptr == -2 if keeps_pointer else st.ptr == 0x7F0000000000 + 4096
    assert cq.calls == (["from_data", "get_state(start_from)"] if keeps_pointer
                        else ["from_data"])
    cq.calls.clear()
    with pytest.raises(qdp.InvalidArgument) as e:
        bridge.state(CudaArray((16,), "<c8"))  # complex64 on an fp64 target
    assert "encode with dtype='complex128'" in str(e.value) and cq.calls == []
    cq.refuse_gpu = True
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(qdp.NotSupported) as e:
        bridge.state(CudaArray((16,)))
    assert "does not support CuPy" in str(e.value) and "s.numpy()" in str(e.value)
    monkeypatch.delitem(sys.modules, "qdp.interop._cudaq_kernel", raising=False)


def test_aer_state_holds_qdps_state_in_aers_own_state(client) -> None:
    """aer_state: Aer's state initialized with the amplitudes, then gates applied by Aer, against
    Qiskit's Statevector of the encoding's circuit evolved by the same gates; apply_x(0) flips
    qdp's qubit 0 (bit 0)."""
    pytest.importorskip("qiskit_aer")
    from qiskit import QuantumCircuit
    from qiskit.quantum_info import Statevector

    from qdp.interop.qiskit import aer_state

    x = params("iqp", np.random.default_rng(16))
    with client.encode(x, "iqp", N) as s:
        psi = s.numpy()
        st = aer_state(s)
    st.apply_h(1)
    st.apply_cx(0, 2)
    st.apply_x(0)
    got = st.move_to_ndarray()
    st.close()
    gates = QuantumCircuit(N)
    gates.h(1)
    gates.cx(0, 2)
    gates.x(0)
    want = Statevector(qiskit_state("iqp", x)).evolve(gates)
    np.testing.assert_allclose(got, np.asarray(want.data), atol=1e-12)
    st = aer_state(psi.astype(np.complex64))
    st.apply_x(0)
    np.testing.assert_allclose(st.move_to_ndarray(), psi.reshape(-1, 2)[:, ::-1].reshape(-1),
                               atol=1e-6)
    st.close()
    with pytest.raises(qdp.InvalidArgument) as e:
        aer_state(psi, method="density_matrix")
    assert e.value.field == "method"
