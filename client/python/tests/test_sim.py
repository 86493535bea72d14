"""qdp.sim without a GPU: the import without cuStateVec, the layouts it takes and refuses, the
bookkeeping of a sharded state's qubit order, argument checks, and the refusal of a CPU-backend
state.

The simulator's engine (which shard runs what, which bits a gate first swaps, the permutation it
leaves, the shares of expectations and samples) is driven here through the public methods over a
NumPy executor of the same five operations cuStateVec runs on the GPU (matrix on local bits,
Pauli rotation, swap of bits inside a shard, swap of global with local bits across shards,
expectations and sampling of a shard). Every result is compared with the gates applied to the
whole state vector by test_circuits' applier, an independent path that knows nothing of shards.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any, List, Sequence, Tuple

import numpy as np
import pytest

import qdp
from qdp import sim
from qdp._circuits import Gate, circuit_gates
from qdp.records import Shard
from qdp.sim import BitPlan, ShardGroup, Simulator, plan_groups

from test_circuits import apply


# --- the NumPy executor --------------------------------------------------------------------

def swap_bits(v: np.ndarray, a: int, b: int) -> np.ndarray:
    """v with index bits a and b exchanged."""
    i = np.arange(v.size)
    j = i ^ ((((i >> a) ^ (i >> b)) & 1) * ((1 << a) | (1 << b)))
    out = np.empty_like(v)
    out[j] = v
    return out


def pauli_matrix(ops: Sequence[int]) -> np.ndarray:
    """The matrix of Paulis ``ops`` (0 I, 1 X, 2 Y, 3 Z), ops[j] on bit j of its index."""
    one = [np.eye(2), np.array([[0, 1], [1, 0]]), np.array([[0, -1j], [1j, 0]]), np.diag([1, -1])]
    m = np.ones((1, 1))
    for o in ops:
        m = np.kron(one[o], m)
    return m


class Memory:
    """One shard's memory: (rows, count) complex128."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data


class NumpyExecutor:
    """The operations of qdp.sim's cuStateVec backend on NumPy shards, each by its definition."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Any]] = []

    def apply_matrix(self, slot: Memory, row: int, nbits: int, matrix: np.ndarray,
                     targets: List[int], controls: List[int], values: List[int]) -> None:
        assert all(0 <= b < nbits for b in targets + controls), "a bit outside the shard"
        self.calls.append(("matrix", tuple(targets)))
        v = slot.data[row]
        new = apply(v.copy(), [Gate(matrix, tuple(targets))], nbits)
        i = np.arange(v.size)
        ok = np.ones(v.size, bool)
        for c, val in zip(controls, values):
            ok &= ((i >> c) & 1) == val
        v[ok] = new[ok]

    def pauli_rotation(self, slot: Memory, row: int, nbits: int, angle: float,
                       paulis: List[int], bits: List[int]) -> None:
        self.calls.append(("rotation", tuple(bits)))
        p = pauli_matrix(paulis or [0])
        u = np.cos(angle) * np.eye(p.shape[0]) + 1j * np.sin(angle) * p  # exp(i angle P)
        slot.data[row] = apply(slot.data[row].copy(), [Gate(u, tuple(bits or [0]))], nbits)

    def expectations(self, slot: Memory, row: int, nbits: int,
                     terms: List[Tuple[List[int], List[int]]]) -> np.ndarray:
        v = slot.data[row]
        out = []
        for ops, bits in terms:
            pv = apply(v.copy(), [Gate(pauli_matrix(ops or [0]), tuple(bits or [0]))], nbits)
            out.append(float(np.vdot(v, pv).real))
        return np.array(out)

    def swap_global(self, grp: ShardGroup, row: int, pairs: Sequence[Tuple[int, int]]) -> None:
        L = grp.local_bits
        assert all(max(p) >= L and min(p) < L for p in pairs), f"not global-local: {pairs}"
        self.calls.append(("global", tuple(pairs)))
        whole = np.concatenate([s.data[row] for s in grp.slots])
        for a, b in pairs:
            whole = swap_bits(whole, a, b)
        for i, s in enumerate(grp.slots):
            s.data[row] = whole[i << L:(i + 1) << L]

    def swap_local(self, slot: Memory, row: int, nbits: int,
                   pairs: Sequence[Tuple[int, int]]) -> None:
        assert all(max(p) < nbits for p in pairs)
        self.calls.append(("local", tuple(pairs)))
        for a, b in pairs:
            slot.data[row] = swap_bits(slot.data[row], a, b)

    def sample(self, grp: ShardGroup, row: int, randnums: np.ndarray) -> np.ndarray:
        whole = np.concatenate([s.data[row] for s in grp.slots])
        cum = np.cumsum(np.abs(whole) ** 2)
        return np.minimum(np.searchsorted(cum, randnums * cum[-1], side="right"),
                          whole.size - 1)


def random_batch(batch: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(batch, 1 << n)) + 1j * rng.normal(size=(batch, 1 << n))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def shards_of(psi: np.ndarray, n: int, g: int, by_sample: bool = False
              ) -> Tuple[List[Shard], List[Memory]]:
    """Shard records and memories of batch ``psi``: 2^g equal amplitude ranges of every sample,
    or (by_sample) one shard per sample."""
    batch = psi.shape[0]
    shards, mems = [], []
    if by_sample:
        for r in range(batch):
            shards.append(Shard(0, f"cuda:{r}", "", 0, 1 << n, r, 1, 0))
            mems.append(Memory(psi[r:r + 1].copy()))
        return shards, mems
    size = (1 << n) >> g
    for i in range(1 << g):
        shards.append(Shard(0, f"cuda:{i}", "", i * size, size, 0, batch, 0))
        mems.append(Memory(psi[:, i * size:(i + 1) * size].copy()))
    return shards, mems


def simulator(psi: np.ndarray, n: int, g: int, by_sample: bool = False
              ) -> Tuple[Simulator, List[Memory], NumpyExecutor]:
    shards, mems = shards_of(psi, n, g, by_sample)
    # Handed over in a scrambled order: the groups order them by first amplitude.
    order = list(reversed(range(len(shards))))
    groups = plan_groups([shards[i] for i in order], n, psi.shape[0], "t",
                         [mems[i] for i in order])
    ex = NumpyExecutor()
    engine = sim._Engine(groups, ex, n, psi.shape[0])
    return Simulator._over(engine, "complex128", "t"), mems, ex


def memory(mems: List[Memory], by_sample: bool = False) -> np.ndarray:
    if by_sample:
        return np.concatenate([m.data for m in mems], axis=0)
    return np.concatenate([m.data for m in mems], axis=1)


def unpermute(v: np.ndarray, perm: Sequence[int]) -> np.ndarray:
    """The amplitudes in qdp's order of memory ``v`` in which qubit k is at bit perm[k]."""
    i = np.arange(v.shape[-1])
    m = np.zeros_like(i)
    for k, b in enumerate(perm):
        m |= ((i >> k) & 1) << b
    return v[..., m]


def random_circuit(n: int, count: int, seed: int) -> List[Any]:
    rng = np.random.default_rng(seed)
    out: List[Any] = []
    for _ in range(count):
        kind = rng.integers(6)
        a, b = (int(q) for q in rng.choice(n, 2, replace=False))
        t = float(rng.uniform(-np.pi, np.pi))
        if kind < 3:
            out.append((("ry", "rx", "rz")[kind], t, a))
        elif kind == 3:
            out.append(("h", a))
        elif kind == 4:
            out.append((("cnot", "cz")[int(rng.integers(2))], a, b))
        else:
            z = rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4))
            out.append(("unitary", np.linalg.qr(z)[0], [a, b]))
    return out


# --- loading cuStateVec ----------------------------------------------------------------------

def test_import_qdp_imports_neither_sim_nor_cuquantum() -> None:
    code = ("import sys, qdp; assert 'qdp.sim' not in sys.modules; "
            "assert not [m for m in sys.modules if m.startswith('cuquantum')]; "
            "import qdp.sim; assert not [m for m in sys.modules if m.startswith('cuquantum')]")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_without_cuquantum_the_first_use_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cuquantum", None)  # as if not installed
    with pytest.raises(sim.CuStateVecUnavailable) as e:
        sim.load_custatevec()
    assert "pip install cuquantum-python-cu12" in str(e.value)
    assert "cuquantum-python-cu13" in str(e.value)
    assert isinstance(e.value, ImportError) and isinstance(e.value, qdp.NotSupported)


def test_a_broken_cuquantum_init_still_gives_the_custatevec_bindings(
        tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "cuquantum"
    (pkg / "bindings").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('libcudensitymat.so.0: not found')\n")
    (pkg / "bindings" / "__init__.py").write_text("raise ImportError('nvmath missing')\n")
    (pkg / "bindings" / "custatevec.py").write_text("WHERE = __file__\n"
                                                    "def get_version():\n    return 11500\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("cuquantum")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        mod = sim.load_custatevec()
        assert mod.WHERE == str(pkg / "bindings" / "custatevec.py")
    finally:
        for name in [m for m in sys.modules if m.startswith("cuquantum")]:
            del sys.modules[name]


def test_bindings_whose_library_does_not_load_say_where_it_must_be(
        tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "cuquantum" / "bindings"
    pkg.mkdir(parents=True)
    (tmp_path / "cuquantum" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "custatevec.py").write_text(
        "def get_version():\n    raise RuntimeError('libcustatevec.so.1: cannot open')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("cuquantum")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        with pytest.raises(sim.CuStateVecUnavailable) as e:
            sim.load_custatevec()
        assert "libcustatevec.so.1: cannot open" in str(e.value)
        assert "LD_LIBRARY_PATH" in str(e.value)
    finally:
        for name in [m for m in sys.modules if m.startswith("cuquantum")]:
            del sys.modules[name]


def test_status_names() -> None:
    assert sim.status_name(3) == "CUSTATEVEC_STATUS_INVALID_VALUE"
    assert sim.status_name(8) == "CUSTATEVEC_STATUS_INSUFFICIENT_WORKSPACE"
    e = sim.CuStateVecError("custatevecApplyMatrix", 7)
    assert "custatevecApplyMatrix failed with CUSTATEVEC_STATUS_NOT_SUPPORTED (7)" in str(e)


# --- layouts -----------------------------------------------------------------------------------

def shard(first: int, count: int, device: str = "cuda:0", row_first: int = 0, rows: int = 1,
          rank: int = 0) -> Shard:
    return Shard(rank, device, "", first, count, row_first, rows, 0)


def test_equal_shards_make_global_bits() -> None:
    n = 10
    shards = [shard(i << 8, 1 << 8, f"cuda:{i}", rows=3) for i in (2, 0, 3, 1)]
    (grp,) = plan_groups(shards, n, 3)
    assert (grp.global_bits, grp.local_bits, grp.rows) == (2, 8, 3)
    assert [s.first for s in grp.slots] == [0, 256, 512, 768]
    (one,) = plan_groups([shard(0, 1 << n)], n, 1)
    assert (one.global_bits, one.local_bits) == (0, n)


def test_a_batch_split_by_sample_is_one_group_per_shard() -> None:
    shards = [shard(0, 64, "cuda:1", row_first=3, rows=2), shard(0, 64, "cuda:0", rows=3)]
    groups = plan_groups(shards, 6, 5)
    assert [(g.row_first, g.rows, g.global_bits) for g in groups] == [(0, 3, 0), (3, 2, 0)]


@pytest.mark.parametrize("shards, batch, words", [
    ([shard(0, 600, "cuda:0"), shard(600, 424, "cuda:1")], 1, ["uneven", "policy='even'"]),
    ([shard(0, 512, "cuda:0"), shard(512, 256, "cuda:1"), shard(768, 256, "cuda:2")], 1,
     ["not a power of two"]),
    ([shard(0, 512, "cuda:0"), shard(512, 512, "cuda:0")], 1, ["two of its shards are on one"]),
    ([shard(0, 512, "cuda:0"), shard(512, 512, "cuda:1", rank=1)], 1, ["rank 1"]),
    ([shard(0, 1024, "cuda:0", rows=2)], 3, ["samples [0, 2) of 3"]),
    ([shard(0, 1024, "cuda:0", rows=2), shard(0, 1024, "cuda:1", row_first=1, rows=2)], 3,
     ["sample 1 is in two"]),
])
def test_layouts_it_cannot_simulate_are_refused_with_the_fix(shards, batch, words) -> None:
    with pytest.raises(qdp.NotSupported) as e:
        plan_groups(shards, 10, batch, "s1")
    for w in words:
        assert w in str(e.value), str(e.value)
    assert "s1" in str(e.value) and "policy='single'" in str(e.value)


def test_a_cpu_layout_is_refused_as_the_cpu_backend() -> None:
    with pytest.raises(qdp.NotSupported, match="CPU backend"):
        plan_groups([shard(0, 1024, "cpu:0")], 10, 1)


# --- the bit plan ------------------------------------------------------------------------------

def test_a_gate_on_local_qubits_needs_no_swap() -> None:
    p = BitPlan(8, 2)
    assert p.swaps_for([0, 5]) == [] and p.is_identity
    assert p.is_local(5) and not p.is_local(6)


def test_a_global_target_swaps_with_the_least_recently_used_local_bit() -> None:
    p = BitPlan(6, 2)  # local bits 0-3, global 4-5
    p.touch([3])
    p.touch([0, 1])
    # bits 2 (never used) first; then 3, used before 0 and 1
    assert p.swaps_for([5, 4], keep=[]) == [(5, 2), (4, 3)]
    assert p.swaps_for([5, 2]) == [(5, 3)]  # 2 is a target, hence kept
    pairs = p.swaps_for([5], keep=[2])
    assert pairs == [(5, 3)]
    p.swap(pairs)
    assert p.bit(5) == 3 and p.bit(3) == 5 and p.permutation == (0, 1, 2, 5, 4, 3)
    assert p.is_local(5) and not p.is_local(3)


def test_too_many_qubits_for_one_shard_are_refused() -> None:
    p = BitPlan(4, 2)  # two local bits
    with pytest.raises(qdp.InvalidArgument, match="2 qubits inside one shard.*has 2|needs 3"):
        p.swaps_for([2, 3], keep=[0])


@pytest.mark.parametrize("seed", range(20))
def test_restore_steps_bring_every_qubit_home_without_global_pairs(seed) -> None:
    rng = np.random.default_rng(seed)
    n, g = int(rng.integers(3, 9)), 0
    g = int(rng.integers(1, n))
    p = BitPlan(n, g)
    for _ in range(int(rng.integers(1, 12))):
        k = int(rng.integers(1, min(n - g, n) + 1))
        need = [int(q) for q in rng.choice(n, min(k, n - g), replace=False)]
        p.swap(p.swaps_for(need))
        p.touch(need)
        assert all(p.is_local(q) for q in need)
    steps = p.restore_steps()
    for a, b in steps:
        assert min(a, b) < p.local_bits, f"a swap of two global bits {(a, b)}"
    p.swap(steps)
    assert p.is_identity


# --- the engine over NumPy shards vs the whole vector -------------------------------------

@pytest.mark.parametrize("g, batch", [(0, 1), (1, 1), (2, 1), (3, 2), (2, 3)])
def test_a_random_circuit_on_shards_is_the_whole_vectors(g, batch) -> None:
    n = 6
    psi = random_batch(batch, n, seed=g * 10 + batch)
    s, mems, ex = simulator(psi, n, g)
    circuit = random_circuit(n, 60, seed=g + 100 * batch)
    s.apply(circuit)
    gates = circuit_gates(circuit, n)
    want = np.stack([apply(psi[r].copy(), gates, n) for r in range(batch)])
    got = unpermute(memory(mems), s.permutation)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    if g:
        assert any(c[0] == "global" for c in ex.calls), "no gate needed a global swap"
        assert not s.permutation == tuple(range(n))
    s.close()
    np.testing.assert_allclose(memory(mems), want, rtol=0, atol=1e-12)  # back in qdp's order


def test_restore_order_false_leaves_the_permutation() -> None:
    n = 5
    psi = random_batch(1, n, 1)
    s, mems, _ = simulator(psi, n, 2)
    s.apply([("h", 4), ("cnot", 4, 3), ("ry", 0.4, 0)])
    perm = s.permutation
    s.restore_order = False
    s.close()
    want = apply(psi[0].copy(), circuit_gates([("h", 4), ("cnot", 4, 3), ("ry", 0.4, 0)], n), n)
    assert perm != tuple(range(n))
    np.testing.assert_allclose(unpermute(memory(mems)[0], perm), want, atol=1e-12)


def test_a_control_on_a_global_qubit_runs_on_half_the_shards_without_swaps() -> None:
    n = 5
    psi = random_batch(1, n, 2)
    s, mems, ex = simulator(psi, n, 2)
    u = np.linalg.qr(np.random.default_rng(3).normal(size=(2, 2)))[0]
    s.apply_matrix(u, [1], controls=[4, 0], control_values=[1, 0])
    assert [c[0] for c in ex.calls] == ["matrix", "matrix"] and s.permutation == tuple(range(n))
    i = np.arange(1 << n)
    full = apply(psi[0].copy(), [Gate(u, (1,))], n)
    ok = (((i >> 4) & 1) == 1) & ((i & 1) == 0)
    want = np.where(ok, full, psi[0])
    np.testing.assert_allclose(memory(mems)[0], want, atol=1e-12)


@pytest.mark.parametrize("g", [0, 2])
def test_rotate_is_the_matrix_form(g) -> None:
    n = 5
    psi = random_batch(2, n, 4)
    s, mems, _ = simulator(psi, n, g)
    s.rotate("Y", 0.7, [4]).rotate("X", -1.1, 0).rotate("ZZ", 0.3, [3, 4]).rotate("XZY", 0.9,
                                                                                  [4, 1, 3])
    s.rotate("Z", 0.5, [4])  # only a global Z when sharded: a phase per shard
    y = np.array([[0, -1j], [1j, 0]])
    x, z = np.array([[0, 1], [1, 0]]), np.diag([1, -1])

    def expm(p: np.ndarray, t: float) -> np.ndarray:
        return np.cos(t / 2) * np.eye(p.shape[0]) - 1j * np.sin(t / 2) * p

    gates = [Gate(expm(y, 0.7), (4,)), Gate(expm(x, -1.1), (0,)),
             Gate(expm(np.kron(z, z), 0.3), (3, 4)),
             Gate(expm(np.kron(y, np.kron(z, x)), 0.9), (4, 1, 3)), Gate(expm(z, 0.5), (4,))]
    # ("ry", t, q) is rotate("Y", t, [q]): the package's RY is exp(-i t/2 Y)
    np.testing.assert_allclose(circuit_gates([("ry", 0.7, 4)], n)[0].matrix, gates[0].matrix,
                               atol=1e-15)
    want = np.stack([apply(psi[r].copy(), gates, n) for r in range(2)])
    s.close()
    np.testing.assert_allclose(memory(mems), want, rtol=0, atol=1e-12)


def expectation_of(v: np.ndarray, s: str) -> float:
    n = len(s)
    ops = [" XYZ".index(c) if c != "I" else 0 for c in s]
    pv = apply(v.copy(), [Gate(pauli_matrix(ops), tuple(range(n)))], n)
    return float(np.vdot(v, pv).real)


@pytest.mark.parametrize("g, batch", [(0, 1), (2, 1), (2, 2)])
def test_expectations_are_the_vectors(g, batch) -> None:
    n = 5
    psi = random_batch(batch, n, 5 + g)
    s, _, _ = simulator(psi, n, g)
    s.apply(random_circuit(n, 20, 8))  # leaves a permutation when sharded
    psi2 = np.stack([apply(psi[r].copy(), circuit_gates(random_circuit(n, 20, 8), n), n)
                     for r in range(batch)])
    strings = ["ZIIII", "IIIIZ", "XIIIY", "IYIXZ", "ZZZZZ", "IIIII", "IIIXI"]
    got = s.expectation(strings)
    want = np.array([[expectation_of(psi2[r], p) for p in strings] for r in range(batch)])
    assert got.shape == ((len(strings),) if batch == 1 else (batch, len(strings)))
    np.testing.assert_allclose(got, want[0] if batch == 1 else want, atol=1e-12)
    one = s.expectation("iiizx")
    if batch == 1:
        assert isinstance(one, float) and abs(one - expectation_of(psi2[0], "IIIZX")) < 1e-12
    else:
        assert one.shape == (batch,)
    s.close()


@pytest.mark.parametrize("g, by_sample", [(0, False), (2, False), (0, True)])
def test_sample_frequencies_follow_the_probabilities(g, by_sample) -> None:
    n, shots = 4, 40000
    psi = random_batch(2, n, 9)
    s, _, _ = simulator(psi, n, g, by_sample)
    s.apply([("h", 3), ("cnot", 3, 0), ("ry", 0.3, 2)])
    psi2 = np.stack([apply(psi[r].copy(), circuit_gates([("h", 3), ("cnot", 3, 0),
                                                         ("ry", 0.3, 2)], n), n)
                     for r in range(2)])
    out = s.sample(shots, qubits=[3, 0], seed=7)
    assert out.shape == (2, shots) and out.dtype == np.int64
    np.testing.assert_array_equal(out, s.sample(shots, qubits=[3, 0], seed=7))
    for r in range(2):
        p = np.abs(psi2[r].reshape([2] * n)) ** 2  # axes: qubit 3, 2, 1, 0
        want = np.array([p[0, :, :, 0].sum(), p[1, :, :, 0].sum(),  # outcome bit 0 = qubit 3
                         p[0, :, :, 1].sum(), p[1, :, :, 1].sum()])
        freq = np.bincount(out[r], minlength=4) / shots
        sigma = np.sqrt(want * (1 - want) / shots)
        assert np.all(np.abs(freq - want) <= 5 * sigma + 1e-9), (freq, want)
    s.close()


# --- argument checks -------------------------------------------------------------------------

@pytest.fixture
def small() -> Simulator:
    s, _, _ = simulator(random_batch(1, 3, 0), 3, 1)
    return s


@pytest.mark.parametrize("call, field", [
    (lambda s: s.apply_matrix(np.eye(2), [3]), "targets"),
    (lambda s: s.apply_matrix(np.eye(2), [0, 0]), "targets"),
    (lambda s: s.apply_matrix(np.eye(2), []), "targets"),
    (lambda s: s.apply_matrix(np.eye(2), ["a"]), "targets"),
    (lambda s: s.apply_matrix(np.eye(4), [0]), "circuit"),
    (lambda s: s.apply_matrix(np.ones((2, 2)), [0]), "circuit"),
    (lambda s: s.apply_matrix(np.eye(2), [0], controls=[0]), "controls"),
    (lambda s: s.apply_matrix(np.eye(2), [0], controls=[7]), "controls"),
    (lambda s: s.apply_matrix(np.eye(2), [0], controls=[1], control_values=[2]),
     "control_values"),
    (lambda s: s.apply_matrix(np.eye(2), [0], controls=[1], control_values=[1, 1]),
     "control_values"),
    (lambda s: s.apply([("ry", 0.1, 9)]), "circuit"),
    (lambda s: s.apply(3), "circuit"),
    (lambda s: s.rotate("Q", 0.1, [0]), "paulis"),
    (lambda s: s.rotate("XX", 0.1, [0]), "paulis"),
    (lambda s: s.rotate("", 0.1, []), "paulis"),
    (lambda s: s.rotate("X", float("nan"), [0]), "theta"),
    (lambda s: s.rotate("X", "a", [0]), "theta"),
    (lambda s: s.expectation("ZZ"), "paulis"),
    (lambda s: s.expectation(["ZZZ", "ZQZ"]), "paulis"),
    (lambda s: s.expectation([]), "paulis"),
    (lambda s: s.expectation(5), "paulis"),
    (lambda s: s.sample(0), "shots"),
    (lambda s: s.sample(1 << 31), "shots"),
    (lambda s: s.sample(2.5), "shots"),
    (lambda s: s.sample(10, qubits=[0, 0]), "qubits"),
    (lambda s: s.sample(10, seed=-1), "seed"),
])
def test_bad_arguments_are_refused_naming_the_field(small, call, field) -> None:
    with pytest.raises(qdp.InvalidArgument) as e:
        call(small)
    assert e.value.field == field, (e.value.field, str(e.value))


def test_a_closed_simulator_refuses_calls(small) -> None:
    small.close()
    small.close()
    with pytest.raises(qdp.InvalidArgument, match="closed"):
        small.apply([("h", 0)])


def test_network_is_checked_before_anything() -> None:
    with pytest.raises(qdp.InvalidArgument) as e:
        Simulator(SimpleNamespace(), network="ring")
    assert e.value.field == "network"


# --- a real daemon's state on the CPU backend --------------------------------------------

def test_a_cpu_backend_state_is_refused_saying_why(client) -> None:
    with client.encode(np.linspace(0.1, 0.8, 4), "angle", 4) as st:
        with pytest.raises(qdp.NotSupported) as e:
            Simulator(st)
        assert "CPU backend" in str(e.value) and st.handle in str(e.value)
        assert "--devices" in str(e.value)
        np.testing.assert_allclose(np.abs(st.numpy()) ** 2 @ np.ones(16), 1.0)  # no lease left


def test_samples_on_two_groups_of_shards_each_keep_their_own_order() -> None:
    n, size = 5, 16  # rows [0, 2) on cuda:0-1, row 2 on cuda:2-3, each cut in two halves
    psi = random_batch(3, n, 12)
    shards, mems = [], []
    for rows, (r0, r1) in ((2, (0, 2)), (1, (2, 3))):
        for i in range(2):
            shards.append(Shard(0, f"cuda:{r0 + i}", "", i * size, size, r0, rows, 0))
            mems.append(Memory(psi[r0:r1, i * size:(i + 1) * size].copy()))
    groups = plan_groups(shards, n, 3, "t", mems)
    assert [(g.row_first, g.rows, g.global_bits) for g in groups] == [(0, 2, 1), (2, 1, 1)]
    s = Simulator._over(sim._Engine(groups, NumpyExecutor(), n, 3), "complex128", "t")
    circuit = random_circuit(n, 30, 13)
    s.apply(circuit)
    perms = s.permutations
    assert [p[0] for p in perms] == [(0, 2), (2, 1)] and perms[0][1] != tuple(range(n))
    s.close()
    got = np.concatenate([np.concatenate([m.data for m in mems[:2]], axis=1),
                          np.concatenate([m.data for m in mems[2:]], axis=1)])
    gates = circuit_gates(circuit, n)
    want = np.stack([apply(psi[r].copy(), gates, n) for r in range(3)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
