"""qdp.sim on a GPU qdpd: cuStateVec applied in place to served states.

- A random 12-qubit circuit (RY, RX, RZ, H, CNOT, CZ, random two-qubit unitaries) on an angle
  state gives the bits that cuStateVec gives applying the same gates to its own copy of the
  state in a torch buffer, and PennyLane default.qubit's state and <Z_k> to 1e-12 (computed on a
  machine with PennyLane by tests/gpu/make_sim_reference.py, committed in
  tests/gpu/data/sim_reference_12q.npz).
- Pauli rotations against their matrix form, expectation values against the fetched state and
  the daemon's own State.expectations, sample frequencies against the probabilities, a batch,
  the write lease (reads refused while the simulator is open).
- With two GPUs or more: a state sharded over two GPUs, with gates on its global qubit, gives
  the single-GPU state's bits.

Run: tests/gpu/sim_gpu.sh BUILD_DIR (or pytest on this file with QDPD or QDP_TARGET set). It
needs cuStateVec's Python bindings importable (PYTHONPATH), libcustatevec.so.1 and its cuBLAS
loadable (LD_LIBRARY_PATH) and torch with CUDA; each missing piece is a skip
that says what is missing.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator, List

import numpy as np
import pytest

import qdp
from qdp import sim
from qdp._circuits import circuit_gates

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "gpu" / "data" / "sim_reference_12q.npz"
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
sys.path.insert(0, str(ROOT / "client" / "python" / "tests"))

from make_sim_reference import as_tuples  # noqa: E402  (PennyLane only in its main())

N = 12
C64F = 5  # CUDA_C_64F


# --- fixtures ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cusv() -> Any:
    try:
        mod = sim.load_custatevec()
    except sim.CuStateVecUnavailable as e:
        pytest.skip(str(e))
    print(f"cuStateVec {mod.get_version()} from {mod.__name__}", flush=True)
    return mod


@pytest.fixture(scope="module")
def torch() -> Any:
    t = pytest.importorskip("torch", reason="torch is not installed")
    if not t.cuda.is_available():
        pytest.skip("torch sees no GPU here")
    return t


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    if os.environ.get("QDP_TARGET"):
        yield os.environ["QDP_TARGET"]
        return
    qdpd = os.environ.get("QDPD") or str(ROOT / "build" / "daemon" / "qdpd")
    if not os.access(qdpd, os.X_OK):
        pytest.skip(f"no qdpd at {qdpd}: set QDPD (or QDP_TARGET of a running GPU qdpd)")
    with tempfile.TemporaryDirectory(prefix="qdp-sim.") as folder:
        sock, log = os.path.join(folder, "qdpd.sock"), os.path.join(folder, "qdpd.log")
        with open(log, "wb") as f:
            proc = subprocess.Popen([qdpd, "--socket", sock, "--devices", "auto",
                                     "--lease-grace", "1", "--expire-interval", "1"],
                                    stdout=subprocess.DEVNULL, stderr=f)
        try:
            deadline = time.monotonic() + 60
            while b"listening on unix:" not in pathlib.Path(log).read_bytes():
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"qdpd did not start: {pathlib.Path(log).read_text()[-2000:]}")
                time.sleep(0.05)
            yield "unix:" + sock
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def client(target: str, cusv: Any, torch: Any) -> Iterator[qdp.Client]:
    with qdp.Client(target, name="pytest-sim") as c:
        if c.status().backend != "cuda":
            pytest.skip("the daemon found no GPU (--devices auto chose the CPU backend)")
        yield c


def gpus(c: qdp.Client) -> List[str]:
    return [d.name for d in c.status().devices if d.name.startswith("cuda")]


@pytest.fixture(scope="module")
def ref() -> Any:
    return np.load(DATA)


def circuit_of(ref: Any) -> list:
    return as_tuples({k: ref[k] for k in ("kind", "angle", "q0", "q1", "unitary")})


def apply_np(psi: np.ndarray, gates: list, n: int) -> np.ndarray:
    from test_circuits import apply
    return apply(psi.copy(), gates, n)


def own_buffer(cusv: Any, torch: Any, psi0: np.ndarray, gates: list, device: str) -> np.ndarray:
    """The gates applied by cuStateVec to its own copy of the state in a torch buffer, with the
    arguments qdp.sim passes (row-major complex128 matrices, compute type 64F)."""
    compute = int(getattr(getattr(cusv, "ComputeType", None), "COMPUTE_64F", 1 << 4))
    n = int(np.log2(psi0.size))
    buf = torch.from_numpy(psi0.copy()).to(device)
    with torch.cuda.device(torch.device(device)):
        h = cusv.create()
        try:
            for g in gates:
                m = np.ascontiguousarray(g.matrix, dtype=np.complex128)
                size = cusv.apply_matrix_get_workspace_size(h, C64F, n, m.ctypes.data, C64F, 1,
                                                            0, len(g.targets), 0, compute)
                work = torch.empty(max(size, 1), dtype=torch.uint8, device=device)
                cusv.apply_matrix(h, buf.data_ptr(), C64F, n, m.ctypes.data, C64F, 1, 0,
                                  list(g.targets), len(g.targets), [], [], 0, compute,
                                  work.data_ptr() if size else 0, size)
                torch.cuda.synchronize()
        finally:
            cusv.destroy(h)
    return buf.cpu().numpy()


# --- tests -------------------------------------------------------------------------------

def test_circuit_matches_custatevec_own_buffer_and_pennylane(client, cusv, torch, ref) -> None:
    circuit = circuit_of(ref)
    with client.encode(ref["x"], "angle", N, policy="single") as st:
        psi0 = st.numpy()
        with sim.Simulator(st) as s:
            s.apply(circuit)
            z = s.expectation(["I" * k + "Z" + "I" * (N - 1 - k) for k in range(N)])
            vals = s.expectation(list(ref["strings"]))
        got = st.numpy()
    theirs = own_buffer(cusv, torch, psi0, circuit_gates(circuit, N), "cuda:0")
    print(f"qdp.sim vs cuStateVec's own buffer: max |diff| {np.max(np.abs(got - theirs)):.3e}; "
          f"vs PennyLane {np.max(np.abs(got - ref['state'])):.3e}; <Z> vs PennyLane "
          f"{np.max(np.abs(z - ref['z'])):.3e}", flush=True)
    assert got.tobytes() == theirs.tobytes(), "qdp.sim and cuStateVec's own buffer differ"
    np.testing.assert_allclose(got, ref["state"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(z, ref["z"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(vals, ref["values"], rtol=0, atol=1e-12)


def test_reads_wait_for_the_write_lease(client) -> None:
    with client.encode(np.linspace(0.1, 1.2, 8), "angle", 8) as st:
        with sim.Simulator(st) as s:
            with pytest.raises(qdp.FailedPrecondition):
                st.numpy()
            s.apply([("x", 0)])
        assert st.info.leases == 0
        psi = st.numpy()
    x = np.linspace(0.1, 1.2, 8)
    want = np.ones(1)
    for k in range(8):
        c, sn = np.cos(x[k]), np.sin(x[k])
        want = np.kron([sn, c] if k == 0 else [c, sn], want)  # X on qubit 0 swaps its factors
    np.testing.assert_allclose(psi, want, atol=1e-14)


def test_pauli_rotation_is_its_matrix_form(client) -> None:
    n = 10
    x = np.random.default_rng(2).uniform(-2, 2, size=n)
    y, z = np.array([[0, -1j], [1j, 0]]), np.diag([1.0, -1.0])
    xm = np.array([[0, 1], [1, 0]])

    def expm(p: np.ndarray, t: float) -> np.ndarray:  # exp(-i t/2 P), P^2 = 1
        return np.cos(t / 2) * np.eye(p.shape[0]) - 1j * np.sin(t / 2) * p

    with client.encode(x, "angle", n) as a, client.encode(x, "angle", n) as b:
        with sim.Simulator(a) as s:
            s.rotate("Y", 0.7, [3]).rotate("ZZ", -0.4, [1, 8]).rotate("XYZ", 1.3, [0, 9, 4])
        with sim.Simulator(b) as s:
            s.apply_matrix(expm(y, 0.7), [3]).apply_matrix(expm(np.kron(z, z), -0.4), [1, 8])
            s.apply_matrix(expm(np.kron(z, np.kron(y, xm)), 1.3), [0, 9, 4])
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-13)
        ry = circuit_gates([("ry", 0.7, 3)], n)[0].matrix
        np.testing.assert_allclose(ry, expm(y, 0.7), atol=1e-15)


def test_expectations_are_the_states(client, ref) -> None:
    strings = ["Z" + "I" * (N - 1), "I" * (N - 1) + "Z", "XIYIIIIIIIIZ", "YYYYIIIIXXXX",
               "ZZZZZZZZZZZZ", "I" * N]
    with client.encode(ref["x"], "angle", N) as st:
        with sim.Simulator(st) as s:
            s.apply(circuit_of(ref)[:80])
            got = s.expectation(strings)
        daemon = st.expectations(strings)
        psi = st.numpy()
    i = np.arange(1 << N)
    for k, p in enumerate(strings):
        v = psi.copy()
        for q, c in enumerate(p):  # P psi: X flips bit q, Y flips with i(-1)^b, Z signs
            b = (i >> q) & 1
            if c == "X":
                v = v[i ^ (1 << q)]
            elif c == "Y":
                v = -1j * (1 - 2 * b) * v[i ^ (1 << q)]
            elif c == "Z":
                v = (1 - 2 * b) * v
        want = float(np.vdot(psi, v).real)
        assert abs(got[k] - want) < 1e-12, (p, got[k], want)
    np.testing.assert_allclose(got, daemon, rtol=0, atol=1e-12)


def test_sample_frequencies_follow_the_probabilities(client) -> None:
    n, shots = 8, 200_000
    x = np.random.default_rng(5).uniform(-1.5, 1.5, size=n)
    with client.encode(x, "angle", n) as st:
        with sim.Simulator(st) as s:
            s.apply([("h", 0), ("cnot", 0, 5), ("ry", 0.8, 6), ("cz", 6, 2)])
            out = s.sample(shots, qubits=[5, 0, 6], seed=11)
            again = s.sample(shots, qubits=[5, 0, 6], seed=11)
            full = s.sample(1000, seed=3)
        psi = st.numpy()
    np.testing.assert_array_equal(out, again)
    assert out.shape == (shots,) and full.shape == (1000,) and full.max() < 1 << n
    i = np.arange(1 << n)
    outcome = ((i >> 5) & 1) | (((i >> 0) & 1) << 1) | (((i >> 6) & 1) << 2)
    want = np.bincount(outcome, weights=np.abs(psi) ** 2, minlength=8)
    freq = np.bincount(out, minlength=8) / shots
    sigma = np.sqrt(want * (1 - want) / shots)
    assert np.all(np.abs(freq - want) <= 5 * sigma + 1e-9), (freq, want)
    assert np.all(np.abs(psi[full]) > 0)


def test_a_batch_gets_the_circuit_on_every_sample(client) -> None:
    n = 10
    X = np.random.default_rng(3).uniform(-2, 2, size=(3, n))
    circuit = [("h", 9), ("cnot", 9, 0), ("ry", 0.3, 4), ("rz", -1.1, 9), ("cz", 4, 7)]
    with client.encode(X, "angle", n) as st:
        psi0 = st.numpy()
        with sim.Simulator(st) as s:
            s.apply(circuit)
            z = s.expectation("I" * 9 + "Z")
        got = st.numpy()
    gates = circuit_gates(circuit, n)
    for r in range(3):
        np.testing.assert_allclose(got[r], apply_np(psi0[r], gates, n), rtol=0, atol=1e-12)
    i = np.arange(1 << n)
    want = (np.abs(got) ** 2) @ (1 - 2 * ((i >> 9) & 1))
    np.testing.assert_allclose(z, want, atol=1e-12)


def test_a_sharded_state_gives_the_single_gpu_bits(client, ref) -> None:
    devices = gpus(client)
    if len(devices) < 2:
        pytest.skip(f"needs two GPUs; the daemon has {len(devices)}")
    circuit = circuit_of(ref) + [("h", N - 1), ("cnot", N - 1, 0), ("ry", 0.4, N - 1),
                                 ("unitary", np.eye(4)[[1, 0, 3, 2]], [N - 1, 3])]
    strings = ["I" * (N - 1) + "Z", "X" + "I" * (N - 2) + "Y", "Z" * N]
    with client.encode(ref["x"], "angle", N, policy="even", devices=devices[:2]) as two, \
            client.encode(ref["x"], "angle", N, policy="single") as one:
        assert len(two.info.shards) == 2
        assert two.numpy().tobytes() == one.numpy().tobytes()
        with sim.Simulator(two) as s:
            s.apply(circuit)
            assert s.permutation != tuple(range(N)), "no gate moved the global qubit"
            e2 = s.expectation(strings)
            s2 = s.sample(50_000, qubits=[N - 1, 0], seed=4)
        with sim.Simulator(one) as s:
            s.apply(circuit)
            e1 = s.expectation(strings)
            s1 = s.sample(50_000, qubits=[N - 1, 0], seed=4)
        a, b = two.numpy(), one.numpy()
    print(f"2 GPUs vs 1: max |diff| {np.max(np.abs(a - b)):.3e}, bit-identical "
          f"{a.tobytes() == b.tobytes()}", flush=True)
    np.testing.assert_allclose(a, ref_state_after(ref, circuit), rtol=0, atol=1e-12)
    assert a.tobytes() == b.tobytes(), "the sharded state differs from the single GPU's"
    np.testing.assert_allclose(e2, e1, rtol=0, atol=1e-12)
    f1 = np.bincount(s1, minlength=4) / len(s1)
    f2 = np.bincount(s2, minlength=4) / len(s2)
    assert np.max(np.abs(f1 - f2)) < 0.02, (f1, f2)


def ref_state_after(ref: Any, circuit: list) -> np.ndarray:
    """PennyLane's state with the extra gates of the sharded test applied by NumPy."""
    extra = circuit_gates(circuit[len(circuit_of(ref)):], N)
    return apply_np(ref["state"], extra, N)
