"""Circuits on a served state, in place on its GPUs, by NVIDIA cuStateVec.

:class:`Simulator` takes a state's shards under the exclusive write lease
(``State.shards(writable=True)``), applies gates, Pauli rotations, expectation values and
sampling to the daemon's own memory with cuStateVec, and gives the lease back when closed::

    import qdp
    from qdp.sim import Simulator

    with qdp.Client() as c, c.encode(x, "angle", 20) as s:
        with Simulator(s) as sim:
            sim.apply([("ry", 0.3, 0), ("cnot", 0, 1)])
            z0 = sim.expectation("Z" + "I" * 19)
        psi = s.numpy()  # the daemon serves the evolved state again

Qubit k is bit k of the amplitude index, as everywhere in qdp; a gate matrix acts on its targets
with ``targets[j]`` as bit j of the matrix index (see :mod:`qdp._circuits`).

While the simulator is open the daemon serves no read of the state (its numpy, torch, kernels
and measurements answer FailedPrecondition naming the lease's holder): read it through the
simulator, or close it first.

cuStateVec is an optional dependency: ``import qdp.sim`` works without it, and the first call
that needs it raises :class:`CuStateVecUnavailable` (an ImportError and a
:class:`qdp.NotSupported`) saying ``pip install cuquantum-python-cu12`` (or ``-cu13``).
``import qdp`` never imports this module.

Sharded states. qdp shards a state by contiguous amplitude ranges over the GPUs of a node. With
2^g equal shards the top g bits of the index choose the shard ("global" bits) and the low
n - g bits index inside it ("local" bits). A gate on local qubits runs on every shard on its own
GPU. A gate with a target on a global qubit first exchanges that qubit with a local one
(``custatevecMultiDeviceSwapIndexBits``, all shards in this process, one cuStateVec handle per
shard); from then on the memory holds a permutation of qdp's qubit order, which the simulator
records (:attr:`Simulator.permutation`) and accounts for in every later gate, expectation and
sample. A control on a global qubit needs no exchange: the gate runs only on the shards whose
index has that bit. :meth:`Simulator.close` swaps the bits back by default
(``restore_order=True``), so the daemon serves the state in qdp's order again; with
``restore_order=False`` it leaves the permutation (cheaper, but the served amplitudes are then
permuted: only for states you discard). A batch split by sample (each shard whole state vectors
of some samples) runs each shard on its own GPU. Other layouts are refused with what to do.

Batches (batch > 1): every operation applies to every sample, one sample after the other.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import math
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._circuits import circuit_gates, gate
from .errors import InvalidArgument, NotSupported

__all__ = ["Simulator", "BitPlan", "ShardGroup", "plan_groups", "load_custatevec",
           "CuStateVecUnavailable", "CuStateVecError"]

_INSTALL = ("install NVIDIA cuQuantum's Python bindings: pip install cuquantum-python-cu12 "
            "(CUDA 12) or pip install cuquantum-python-cu13 (CUDA 13)")

_CUDA_C_32F, _CUDA_C_64F = 4, 5  # cudaDataType_t
_COMPUTE_32F, _COMPUTE_64F = 1 << 2, 1 << 4  # custatevecComputeType_t
_LAYOUT_ROW = 1  # CUSTATEVEC_MATRIX_LAYOUT_ROW
_PAULI = {"I": 0, "X": 1, "Y": 2, "Z": 3}  # custatevecPauli_t
_NETWORK = {"switch": 1, "fullmesh": 2}  # custatevecDeviceNetworkType_t
_PEER_ALREADY_ENABLED = 704  # cudaErrorPeerAccessAlreadyEnabled
_STATUS_NAMES = (
    "SUCCESS", "NOT_INITIALIZED", "ALLOC_FAILED", "INVALID_VALUE", "ARCH_MISMATCH",
    "EXECUTION_FAILED", "INTERNAL_ERROR", "NOT_SUPPORTED", "INSUFFICIENT_WORKSPACE",
    "SAMPLER_NOT_PREPROCESSED", "NO_DEVICE_ALLOCATOR", "DEVICE_ALLOCATOR_ERROR",
    "COMMUNICATOR_ERROR", "LOADING_LIBRARY_FAILED", "INVALID_CONFIGURATION",
    "ALREADY_INITIALIZED", "INVALID_WIRE", "SYSTEM_ERROR", "CUDA_ERROR", "NUMERICAL_ERROR",
    "RESOURCES_NOT_ACCESSIBLE")


class CuStateVecUnavailable(NotSupported, ImportError):
    """cuStateVec's Python bindings could not be imported here; the message says how to install
    them. Both an :class:`ImportError` and a :class:`qdp.NotSupported`."""


class CuStateVecError(NotSupported):
    """A cuStateVec call failed; ``status_name`` is its status ("CUSTATEVEC_STATUS_...")."""

    def __init__(self, call: str, status: int, detail: str = "") -> None:
        self.status_code = int(status)
        self.status_name = status_name(status)
        text = f"{call} failed with {self.status_name} ({self.status_code})"
        super().__init__(f"{text}: {detail}" if detail else text, hint="")


def status_name(status: int) -> str:
    """The name of a ``custatevecStatus_t`` value ("CUSTATEVEC_STATUS_INVALID_VALUE")."""
    s = int(status)
    if 0 <= s < len(_STATUS_NAMES):
        return f"CUSTATEVEC_STATUS_{_STATUS_NAMES[s]}"
    return f"CUSTATEVEC_STATUS_{s}"


# --- loading cuStateVec --------------------------------------------------------------------

def _bindings_only(failure: BaseException) -> Any:
    """cuStateVec's bindings without cuquantum's package init, which also loads cuDensityMat,
    nvmath-python and cuda-core: where that init fails and the package's files are here, its two
    packages are entered as bare namespaces and only the custatevec bindings are imported."""
    if "cuquantum" in sys.modules:
        raise failure
    spec = importlib.util.find_spec("cuquantum")
    if spec is None or not spec.submodule_search_locations:
        raise failure
    root = list(spec.submodule_search_locations)[0]
    bindings = os.path.join(root, "bindings")
    if not os.path.isdir(bindings):
        raise failure
    for name, path in (("cuquantum", root), ("cuquantum.bindings", bindings)):
        m = types.ModuleType(name)
        m.__path__ = [path]
        sys.modules[name] = m
    try:
        return importlib.import_module("cuquantum.bindings.custatevec")
    except BaseException:
        sys.modules.pop("cuquantum.bindings", None)
        sys.modules.pop("cuquantum", None)
        raise


def load_custatevec() -> Any:
    """cuStateVec's Python bindings: ``cuquantum.bindings.custatevec`` (cuQuantum 24.08 and
    later), else ``cuquantum.custatevec`` (earlier releases).

    Returns
    -------
    module

    Raises
    ------
    CuStateVecUnavailable
        Neither imports; the message gives the pip command and the import error.
    """
    errors = []
    mod = None
    for name in ("cuquantum.bindings.custatevec", "cuquantum.custatevec"):
        try:
            mod = importlib.import_module(name)
            break
        except Exception as e:  # a broken package init raises more than ImportError
            errors.append(e)
    if mod is None:
        try:
            mod = _bindings_only(errors[0])
        except Exception as e:
            raise CuStateVecUnavailable(f"qdp.sim needs cuStateVec, which does not import here "
                                        f"({type(e).__name__}: {e}): {_INSTALL}; and the CUDA "
                                        "libraries it needs on LD_LIBRARY_PATH", hint="") from None
    try:
        mod.get_version()  # the bindings open libcustatevec.so.1 at their first call
    except Exception as e:
        raise CuStateVecUnavailable(f"cuStateVec's bindings ({mod.__name__}) import, but its "
                                    f"library does not load ({type(e).__name__}: {e}): put the "
                                    "folder of libcustatevec.so.1 (a wheel's cuquantum/lib) and "
                                    "the cuBLAS it needs on LD_LIBRARY_PATH, or "
                                    f"{_INSTALL}", hint="") from None
    return mod


# --- the layout of a state's shards and where each qubit is --------------------------------

@dataclass
class ShardGroup:
    """Shards that together hold the same samples: ``slots[i]`` holds amplitudes
    ``[i * 2^local, (i + 1) * 2^local)`` of samples ``[row_first, row_first + rows)``, so
    ``i`` is the value of the ``global_bits`` top index bits.

    Attributes
    ----------
    slots : list
        The shards' views (or any objects), ordered by their first amplitude.
    row_first, rows : int
        The samples they hold.
    global_bits, local_bits : int
        g and n - g.
    """

    slots: List[Any]
    row_first: int
    rows: int
    global_bits: int
    local_bits: int


def _refuse_layout(handle: str, why: str) -> NotSupported:
    return NotSupported(f"qdp.sim cannot simulate state {handle} as it is sharded: {why}. It "
                        "needs 2^g equal shards of contiguous amplitude ranges on GPUs of this "
                        "node, or whole samples per GPU: encode it with policy='single' (one GPU), "
                        "policy='even' over a power-of-two number of GPUs (devices=[...]) or, "
                        "for a batch, policy='batch'", hint="")


def plan_groups(shards: Sequence[Any], qubits: int, batch: int, handle: str = "",
                slots: Optional[Sequence[Any]] = None) -> List[ShardGroup]:
    """The groups in which a state's shards can be simulated, or why they cannot.

    Parameters
    ----------
    shards : sequence of qdp.Shard
        The state's layout (each ``first``, ``count``, ``row_first``, ``rows``, ``rank``,
        ``device``).
    qubits, batch : int
        The state's.
    handle : str
        For messages.
    slots : sequence, optional
        What each group lists for shard i (its view); default the shards themselves.

    Returns
    -------
    list of ShardGroup
        Ordered by samples; together they hold every sample once.

    Raises
    ------
    NotSupported
        Shards on another rank or the CPU backend, uneven shards, a group that is not a power of
        two of shards, samples held twice or by none, two shards of a group on one device.
    """
    if not shards:
        raise _refuse_layout(handle, "it has no shards")
    items = list(slots) if slots is not None else list(shards)
    dim = 1 << qubits
    by_rows: Dict[Tuple[int, int], List[Tuple[Any, Any]]] = {}
    for sh, item in zip(shards, items):
        if sh.rank != 0:
            raise _refuse_layout(handle, f"a shard is on rank {sh.rank}, and this process "
                                         "opens only the GPUs of its own node (rank 0)")
        if not str(sh.device).startswith("cuda"):
            raise NotSupported(f"state {handle} is on the CPU backend ({sh.device}): qdp.sim "
                               "runs cuStateVec on the state's GPU memory; use a qdpd with "
                               "GPUs (--devices auto)", hint="")
        rows = sh.rows or 1
        by_rows.setdefault((sh.row_first, rows), []).append((sh, item))
    groups = []
    next_row = 0
    for (row_first, rows), members in sorted(by_rows.items()):
        if row_first != next_row:
            raise _refuse_layout(handle, f"samples [{next_row}, {row_first}) are in no shard "
                                         "or in two" if row_first > next_row else
                                 f"sample {row_first} is in two shards' sample ranges")
        next_row = row_first + rows
        members.sort(key=lambda m: m[0].first)
        k = len(members)
        if k & (k - 1):
            raise _refuse_layout(handle, f"samples [{row_first}, {next_row}) are cut into {k} "
                                         "shards, not a power of two")
        g = k.bit_length() - 1
        size = dim >> g
        for i, (sh, _) in enumerate(members):
            if sh.first != i * size or sh.count != size:
                raise _refuse_layout(handle, f"its shards are uneven (one holds amplitudes "
                                             f"[{sh.first}, {sh.first + sh.count}), where "
                                             f"{k} equal shards hold {size} each)")
        devices = [m[0].device for m in members]
        if g and len(set(devices)) != k:
            raise _refuse_layout(handle, f"two of its shards are on one GPU ({devices})")
        groups.append(ShardGroup([m[1] for m in members], row_first, rows, g, qubits - g))
    if next_row != batch:
        raise _refuse_layout(handle, f"its shards hold samples [0, {next_row}) of {batch}")
    return groups


class BitPlan:
    """Which index bit holds each qubit of a state cut into 2^g shards, and the swaps that a
    gate needs.

    Index bits ``0 .. local_bits - 1`` are local (inside a shard), ``local_bits .. qubits - 1``
    global (the shard's number). At first qubit k is bit k; :meth:`swap` exchanges the qubits of
    two bits as a bit swap of the memory does.

    Parameters
    ----------
    qubits, global_bits : int
        n and g (0 <= g <= n).
    """

    def __init__(self, qubits: int, global_bits: int) -> None:
        if not 0 <= global_bits <= qubits:
            raise InvalidArgument(f"global_bits {global_bits} of a {qubits}-qubit state",
                                  field="global_bits")
        self.qubits = qubits
        self.global_bits = global_bits
        self.local_bits = qubits - global_bits
        self._bit_of = list(range(qubits))  # qubit -> index bit
        self._qubit_at = list(range(qubits))  # index bit -> qubit
        self._used = [0] * qubits  # index bit -> when a gate last touched it
        self._clock = 0

    @property
    def permutation(self) -> Tuple[int, ...]:
        """``permutation[k]``: the index bit holding qubit k (the identity in qdp's order)."""
        return tuple(self._bit_of)

    @property
    def is_identity(self) -> bool:
        """Whether every qubit k is at bit k."""
        return all(b == q for q, b in enumerate(self._bit_of))

    def bit(self, qubit: int) -> int:
        """The index bit holding ``qubit``."""
        return self._bit_of[qubit]

    def is_local(self, qubit: int) -> bool:
        """Whether ``qubit`` is in a local bit."""
        return self._bit_of[qubit] < self.local_bits

    def swaps_for(self, need: Sequence[int], keep: Sequence[int] = ()) -> List[Tuple[int, int]]:
        """The bit swaps that bring every qubit of ``need`` into a local bit, each pair
        ``(global bit, local bit)``; the local bits given up hold neither ``need`` nor ``keep``
        qubits and are those least recently used. Changes nothing (see :meth:`swap`).

        Raises
        ------
        InvalidArgument
            More qubits must be local than there are local bits (field "targets").
        """
        busy = {self._bit_of[q] for q in list(need) + list(keep) if self.is_local(q)}
        far = [self._bit_of[q] for q in need if not self.is_local(q)]
        if not far:
            return []
        free = [b for b in range(self.local_bits) if b not in busy]
        if len(far) > len(free):
            raise InvalidArgument(
                f"the operation needs {len(busy) + len(far)} qubits inside one shard, and each "
                f"of this state's 2^{self.global_bits} shards has {self.local_bits}: use fewer "
                "targets, or fewer GPUs for the state", field="targets")
        free.sort(key=lambda b: (self._used[b], -b))  # least recently used, then the highest
        return list(zip(far, free[:len(far)]))

    def swap(self, pairs: Sequence[Tuple[int, int]]) -> None:
        """Records that the memory's index bits of each pair were exchanged."""
        for a, b in pairs:
            qa, qb = self._qubit_at[a], self._qubit_at[b]
            self._qubit_at[a], self._qubit_at[b] = qb, qa
            self._bit_of[qa], self._bit_of[qb] = b, a
            self._used[a], self._used[b] = self._used[b], self._used[a]

    def touch(self, qubits: Sequence[int]) -> None:
        """Records that a gate just used ``qubits`` (for the choice of bits to give up)."""
        self._clock += 1
        for q in qubits:
            self._used[self._bit_of[q]] = self._clock

    def restore_steps(self) -> List[Tuple[int, int]]:
        """The bit swaps, in order, that bring every qubit k back to bit k: each either
        ``(local, global)`` or ``(local, local)``, never two global bits. Changes nothing."""
        at = list(self._qubit_at)
        of = list(self._bit_of)
        steps: List[Tuple[int, int]] = []

        def do(a: int, b: int) -> None:
            steps.append((a, b))
            qa, qb = at[a], at[b]
            at[a], at[b] = qb, qa
            of[qa], of[qb] = b, a

        L = self.local_bits
        for bit in range(L, self.qubits):
            where = of[bit]
            if where == bit:
                continue
            if where < L:
                do(where, bit)
            else:  # in another global bit: through local bit 0
                do(0, where)
                do(0, bit)
        for bit in range(L):
            while at[bit] != bit:
                do(bit, at[bit])
        return steps


# --- validation --------------------------------------------------------------------------

def _qubit_list(values: Any, qubits: int, field: str, allow_empty: bool = False) -> List[int]:
    if isinstance(values, (int, np.integer)):
        values = [values]
    try:
        out = [int(v) for v in values]
        if any(float(v) != int(v) for v in values):
            raise ValueError
    except (TypeError, ValueError):
        raise InvalidArgument(f"{field} must be qubit numbers (integers), not {values!r}",
                              field=field) from None
    if not out and not allow_empty:
        raise InvalidArgument(f"{field} is empty: name at least one qubit", field=field)
    if len(set(out)) != len(out) or any(q < 0 or q >= qubits for q in out):
        raise InvalidArgument(f"{field} {out} must be distinct qubits of the {qubits}-qubit "
                              f"state (0 to {qubits - 1})", field=field)
    return out


def _pauli_strings(paulis: Any, qubits: int) -> Tuple[List[str], bool]:
    """The strings, and whether one was given alone (not in a list)."""
    single = isinstance(paulis, str)
    items = [paulis] if single else paulis
    try:
        items = list(items)
    except TypeError:
        raise InvalidArgument(f"paulis must be a string or a list of strings, not "
                              f"{type(paulis).__name__}", field="paulis") from None
    if not items:
        raise InvalidArgument("paulis is empty: give at least one string", field="paulis")
    out = []
    for i, p in enumerate(items):
        if not isinstance(p, str) or len(p) != qubits or set(p.upper()) - set("IXYZ"):
            raise InvalidArgument(f"paulis[{i}] = {p!r}: each string has one letter I, X, Y or "
                                  f"Z per qubit ({qubits}), letter k acting on qubit k",
                                  field="paulis")
        out.append(p.upper())
    return out, single


def _angle(theta: Any) -> float:
    try:
        t = float(theta)
    except (TypeError, ValueError):
        raise InvalidArgument(f"theta must be a real number, not {theta!r}",
                              field="theta") from None
    if not math.isfinite(t):
        raise InvalidArgument(f"theta must be finite, not {t}", field="theta")
    return t


# --- the engine: what runs where, on any backend -----------------------------------------

class _Engine:
    """The simulation of a state's groups of shards on a backend: the permutation of each group,
    the swaps a gate needs, and each operation shard by shard and sample by sample.

    The backend runs one operation on one shard's sample (``slot``, ``row``) with index bits
    already placed; :class:`_CuStateVec` is cuStateVec's.
    """

    def __init__(self, groups: List[ShardGroup], backend: Any, qubits: int, batch: int) -> None:
        self.groups = groups
        self.backend = backend
        self.qubits = qubits
        self.batch = batch
        self.plans = [BitPlan(qubits, g.global_bits) for g in groups]

    def _bring_local(self, gi: int, need: Sequence[int], keep: Sequence[int]) -> None:
        grp, plan = self.groups[gi], self.plans[gi]
        pairs = plan.swaps_for(need, keep)
        if pairs:
            for row in range(grp.rows):
                self.backend.swap_global(grp, row, pairs)
            plan.swap(pairs)

    def _slot_matches(self, plan: BitPlan, index: int, far: List[Tuple[int, int]]) -> bool:
        return all(((index >> (plan.bit(q) - plan.local_bits)) & 1) == v for q, v in far)

    def apply_matrix(self, matrix: np.ndarray, targets: List[int], controls: List[int],
                     values: List[int]) -> None:
        for gi, grp in enumerate(self.groups):
            plan = self.plans[gi]
            self._bring_local(gi, targets, [c for c in controls if plan.is_local(c)])
            t = [plan.bit(q) for q in targets]
            near = [(plan.bit(c), v) for c, v in zip(controls, values) if plan.is_local(c)]
            far = [(c, v) for c, v in zip(controls, values) if not plan.is_local(c)]
            for i, slot in enumerate(grp.slots):
                if self._slot_matches(plan, i, far):
                    for row in range(grp.rows):
                        self.backend.apply_matrix(slot, row, grp.local_bits, matrix, t,
                                                  [b for b, _ in near], [v for _, v in near])
            plan.touch(targets + controls)

    def rotate(self, paulis: str, theta: float, targets: List[int]) -> None:
        """exp(-i theta/2 P): cuStateVec's rotation is exp(i angle P), given -theta/2."""
        for gi, grp in enumerate(self.groups):
            plan = self.plans[gi]
            moved = [q for q, p in zip(targets, paulis) if p != "I"]
            self._bring_local(gi, [q for q, p in zip(targets, paulis) if p in "XY"], moved)
            # Z on a global qubit is the sign of the shard's bit: exp(-i t/2 (+-1) P')
            ops, bits, far = [], [], []
            for q, p in zip(targets, paulis):
                if p == "I":
                    continue
                if plan.is_local(q):
                    ops.append(_PAULI[p])
                    bits.append(plan.bit(q))
                else:
                    far.append(q)
            for i, slot in enumerate(grp.slots):
                sign = 1
                for q in far:
                    if (i >> (plan.bit(q) - plan.local_bits)) & 1:
                        sign = -sign
                for row in range(grp.rows):
                    self.backend.pauli_rotation(slot, row, grp.local_bits, -0.5 * theta * sign,
                                                ops, bits)
            plan.touch(moved)

    def _terms(self, plan: BitPlan, s: str) -> Tuple[List[int], List[int], List[int]]:
        """String ``s`` where its qubits are now: the local Paulis, their bits, and the qubits
        of its Z factors on global bits."""
        used = [q for q, p in enumerate(s) if p != "I"]
        ops = [_PAULI[s[q]] for q in used if plan.is_local(q)]
        bits = [plan.bit(q) for q in used if plan.is_local(q)]
        return ops, bits, [q for q in used if not plan.is_local(q)]

    def _measure(self, gi: int, strings: List[str], which: List[int], out: np.ndarray) -> None:
        grp, plan = self.groups[gi], self.plans[gi]
        terms = [self._terms(plan, strings[si]) for si in which]
        for row in range(grp.rows):
            total = np.zeros(len(which))
            for i, slot in enumerate(grp.slots):
                vals = self.backend.expectations(slot, row, grp.local_bits,
                                                 [(ops, bits) for ops, bits, _ in terms])
                for j, (_, _, far) in enumerate(terms):
                    sign = 1
                    for q in far:  # Z on a global bit: the sign of the shard's bit
                        if (i >> (plan.bit(q) - plan.local_bits)) & 1:
                            sign = -sign
                    total[j] += sign * vals[j]
            out[grp.row_first + row, which] = total

    def expectations(self, strings: List[str]) -> np.ndarray:
        out = np.zeros((self.batch, len(strings)))
        for gi in range(len(self.groups)):
            plan = self.plans[gi]
            ready = [si for si, s in enumerate(strings)
                     if all(plan.is_local(q) for q, p in enumerate(s) if p in "XY")]
            if ready:  # together, in one pass per shard
                self._measure(gi, strings, ready, out)
            for si, s in enumerate(strings):  # X or Y on a global qubit: one at a time
                if si in ready:
                    continue
                used = [q for q, p in enumerate(s) if p != "I"]
                self._bring_local(gi, [q for q, p in enumerate(s) if p in "XY"], used)
                self._measure(gi, strings, [si], out)
        return out

    def sample(self, shots: int, qubits: List[int], rng: np.random.Generator) -> np.ndarray:
        out = np.zeros((self.batch, shots), dtype=np.int64)
        for gi, grp in enumerate(self.groups):
            plan = self.plans[gi]
            for row in range(grp.rows):
                randnums = np.sort(rng.random(shots))
                phys = np.asarray(self.backend.sample(grp, row, randnums), dtype=np.int64)
                bits = np.zeros(shots, dtype=np.int64)
                for j, q in enumerate(qubits):
                    bits |= ((phys >> plan.bit(q)) & 1) << j
                out[grp.row_first + row] = bits[rng.permutation(shots)]
        return out

    def restore(self) -> None:
        for gi, grp in enumerate(self.groups):
            plan = self.plans[gi]
            for a, b in plan.restore_steps():
                lo, hi = min(a, b), max(a, b)
                for row in range(grp.rows):
                    if hi >= grp.local_bits:
                        self.backend.swap_global(grp, row, [(hi, lo)])
                    else:
                        for slot in grp.slots:
                            self.backend.swap_local(slot, row, grp.local_bits, [(lo, hi)])
                plan.swap([(a, b)])


# --- cuStateVec on the shards' views -----------------------------------------------------

class _CuStateVec:
    """cuStateVec calls on views: one handle per shard, created on the shard's GPU, with the
    extra workspace each call asks for (cudaMalloc, kept and grown per handle)."""

    def __init__(self, cusv: Any, views: Sequence[Any], dtype: str, network: str) -> None:
        from . import _cuda

        self.cusv = cusv
        self.cuda = _cuda.runtime()
        self.rt = self.cuda.rt
        self.sv_type = _CUDA_C_64F if dtype == "complex128" else _CUDA_C_32F
        self.compute = _COMPUTE_64F if dtype == "complex128" else _COMPUTE_32F
        self.np_dtype = np.complex128 if dtype == "complex128" else np.complex64
        self.itemsize = int(np.dtype(self.np_dtype).itemsize)
        self.network = _NETWORK[network]
        self.views = list(views)
        self.handles: Dict[int, int] = {}  # id(view) -> handle
        self.work: Dict[int, Tuple[int, int]] = {}  # handle -> (pointer, bytes)
        self._keep: List[Any] = []  # host arrays the calls since the last sync read
        self.devices = sorted({v.ordinal for v in self.views})
        try:
            for v in self.views:
                with self.cuda.on_device(v.ordinal):
                    self.handles[id(v)] = self._call("custatevecCreate", cusv.create)
            if len(self.devices) > 1:
                self._enable_peers()
        except BaseException:
            self.close()
            raise

    def _call(self, name: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:
            status = getattr(e, "status", None)
            if status is None:
                raise
            raise CuStateVecError(name, int(status), str(e)) from None

    def _cuda_check(self, rc: int, what: str) -> None:
        if rc:
            raise NotSupported(f"{what} failed with CUDA error {rc}", hint="")

    def _enable_peers(self) -> None:
        for d in self.devices:
            with self.cuda.on_device(d):
                for p in self.devices:
                    if p == d:
                        continue
                    ok = ctypes.c_int()
                    self._cuda_check(self.rt.cudaDeviceCanAccessPeer(ctypes.byref(ok), d, p),
                                     "cudaDeviceCanAccessPeer")
                    if not ok.value:
                        raise NotSupported(f"GPU {d} cannot reach GPU {p} directly (no peer "
                                           "access): a gate on a global qubit needs it; encode "
                                           "the state on one GPU (policy='single')", hint="")
                    rc = self.rt.cudaDeviceEnablePeerAccess(p, 0)
                    if rc == _PEER_ALREADY_ENABLED:
                        self.rt.cudaGetLastError()  # clear the sticky-free error it records
                    else:
                        self._cuda_check(rc, f"cudaDeviceEnablePeerAccess({d} -> {p})")

    def _workspace(self, handle: int, ordinal: int, size: int) -> int:
        ptr, have = self.work.get(handle, (0, 0))
        if size <= have:
            return ptr
        with self.cuda.on_device(ordinal):
            self.synchronize_device(ordinal)
            if ptr:
                self.rt.cudaFree(ctypes.c_void_p(ptr))
                del self.work[handle]
            p = ctypes.c_void_p()
            self._cuda_check(self.rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size)),
                             f"cudaMalloc of {size} bytes of cuStateVec workspace")
        self.work[handle] = (int(p.value or 0), size)
        return self.work[handle][0]

    def _sv(self, view: Any, row: int) -> int:
        return int(view.ptr) + row * int(view.shape[1]) * self.itemsize

    def apply_matrix(self, view: Any, row: int, nbits: int, matrix: np.ndarray,
                     targets: List[int], controls: List[int], values: List[int]) -> None:
        c = self.cusv
        h = self.handles[id(view)]
        m = np.ascontiguousarray(matrix, dtype=self.np_dtype)
        self._keep.append(m)
        with self.cuda.on_device(view.ordinal):
            size = self._call("custatevecApplyMatrixGetWorkspaceSize",
                              c.apply_matrix_get_workspace_size, h, self.sv_type, nbits,
                              m.ctypes.data, self.sv_type, _LAYOUT_ROW, 0, len(targets),
                              len(controls), self.compute)
            work = self._workspace(h, view.ordinal, size) if size else 0
            self._call("custatevecApplyMatrix", c.apply_matrix, h, self._sv(view, row),
                       self.sv_type, nbits, m.ctypes.data, self.sv_type, _LAYOUT_ROW, 0,
                       targets, len(targets), controls, values, len(controls), self.compute,
                       work, size)

    def pauli_rotation(self, view: Any, row: int, nbits: int, angle: float, paulis: List[int],
                       bits: List[int]) -> None:
        with self.cuda.on_device(view.ordinal):
            self._call("custatevecApplyPauliRotation", self.cusv.apply_pauli_rotation,
                       self.handles[id(view)], self._sv(view, row), self.sv_type, nbits, angle,
                       paulis or [0], bits or [0], len(bits) or 1, [], [], 0)

    def expectations(self, view: Any, row: int, nbits: int,
                     terms: List[Tuple[List[int], List[int]]]) -> np.ndarray:
        """<P> of each term (local Paulis, their bits) on this shard's sample, as its share of
        the whole state's: the sum over the shard of conj(psi_b) (P psi)_b. cuStateVec's values
        are scaled by the shard's squared norm over its value of the identity, which makes them
        that sum whether or not cuStateVec divides by the shard's norm."""
        c = self.cusv
        h, sv = self.handles[id(view)], self._sv(view, row)
        ops = [list(p) or [0] for p, _ in terms] + [[0]]  # an empty term: I on bit 0
        bits = [list(b) or [0] for _, b in terms] + [[0]]
        vals = np.zeros(len(ops))
        norm = np.zeros(2)
        with self.cuda.on_device(view.ordinal):
            self._call("custatevecAbs2SumArray", c.abs2sum_array, h, sv, self.sv_type, nbits,
                       norm.ctypes.data, [0], 1, [], [], 0)
            self._call("custatevecComputeExpectationsOnPauliBasis",
                       c.compute_expectations_on_pauli_basis, h, sv, self.sv_type, nbits,
                       vals.ctypes.data, ops, len(ops), bits, [len(b) for b in bits])
            self.synchronize_device(view.ordinal)  # the host values are complete
        n, ident = float(norm.sum()), float(vals[-1])
        if n == 0.0 or ident == 0.0:
            return np.zeros(len(terms))
        return vals[:-1] * (n / ident)

    def swap_global(self, grp: ShardGroup, row: int, pairs: Sequence[Tuple[int, int]]) -> None:
        if grp.global_bits == 0:
            raise AssertionError("a global swap of an unsharded state")
        handles = [self.handles[id(v)] for v in grp.slots]
        svs = [self._sv(v, row) for v in grp.slots]
        self.synchronize()
        self._call("custatevecMultiDeviceSwapIndexBits", self.cusv.multi_device_swap_index_bits,
                   handles, len(handles), svs, self.sv_type, grp.global_bits, grp.local_bits,
                   [list(p) for p in pairs], len(pairs), [], [], 0, self.network)
        self.synchronize()

    def swap_local(self, view: Any, row: int, nbits: int,
                   pairs: Sequence[Tuple[int, int]]) -> None:
        with self.cuda.on_device(view.ordinal):
            self._call("custatevecSwapIndexBits", self.cusv.swap_index_bits,
                       self.handles[id(view)], self._sv(view, row), self.sv_type, nbits,
                       [list(p) for p in pairs], len(pairs), [], [], 0)

    def sample(self, grp: ShardGroup, row: int, randnums: np.ndarray) -> np.ndarray:
        """Index bit strings (all index bits) of ``randnums`` (ascending), in their order: each
        shard's sampler with the shard's offset in the cumulative sum when there are several
        (custatevecSamplerApplySubSVOffset)."""
        c = self.cusv
        shots = len(randnums)
        samplers = []
        out = np.zeros(shots, dtype=np.int64)
        try:
            norms = []
            for v in grp.slots:
                h = self.handles[id(v)]
                with self.cuda.on_device(v.ordinal):
                    s, size = self._call("custatevecSamplerCreate", c.sampler_create, h,
                                         self._sv(v, row), self.sv_type, grp.local_bits, shots)
                    samplers.append(s)
                    work = self._workspace(h, v.ordinal, size) if size else 0
                    self._call("custatevecSamplerPreprocess", c.sampler_preprocess, h, s, work,
                               size)
                    norms.append(self._call("custatevecSamplerGetSquaredNorm",
                                            c.sampler_get_squared_norm, h, s))
            cum = np.concatenate([[0.0], np.cumsum(norms)])
            total = cum[-1]
            k = len(grp.slots)
            if k > 1:
                for i, v in enumerate(grp.slots):
                    with self.cuda.on_device(v.ordinal):
                        self._call("custatevecSamplerApplySubSVOffset",
                                   c.sampler_apply_sub_sv_offset, self.handles[id(v)],
                                   samplers[i], i, k, float(cum[i]), float(total))
            edges = np.searchsorted(randnums, cum[1:] / total)
            edges[-1] = shots
            start = 0
            for i, v in enumerate(grp.slots):
                end = int(edges[i])
                if end > start:
                    with self.cuda.on_device(v.ordinal):
                        part = np.zeros(end - start, dtype=np.int64)
                        r = np.ascontiguousarray(randnums[start:end])
                        self._call("custatevecSamplerSample", c.sampler_sample,
                                   self.handles[id(v)], samplers[i], part.ctypes.data,
                                   list(range(grp.local_bits)), grp.local_bits, r.ctypes.data,
                                   end - start, 0)  # RANDNUM_ORDER
                        self.synchronize_device(v.ordinal)
                    out[start:end] = part | (i << grp.local_bits)
                start = max(start, end)
        finally:
            for s in samplers:
                with contextlib.suppress(Exception):
                    c.sampler_destroy(s)
        return out

    def synchronize_device(self, ordinal: int) -> None:
        with self.cuda.on_device(ordinal):
            self._cuda_check(self.rt.cudaDeviceSynchronize(), f"cudaDeviceSynchronize({ordinal})")

    def synchronize(self) -> None:
        for d in self.devices:
            self.synchronize_device(d)
        self._keep.clear()

    def close(self) -> None:
        for v in self.views:
            h = self.handles.pop(id(v), None)
            if h is None:
                continue
            with self.cuda.on_device(v.ordinal):
                self.rt.cudaDeviceSynchronize()
                ptr, _ = self.work.pop(h, (0, 0))
                if ptr:
                    self.rt.cudaFree(ctypes.c_void_p(ptr))
                with contextlib.suppress(Exception):
                    self.cusv.destroy(h)
        self._keep.clear()


# --- the public class ----------------------------------------------------------------------

class Simulator:
    """cuStateVec on a served state, in place, under the state's write lease.

    Parameters
    ----------
    state : qdp.State
        A state of a GPU qdpd on this node (complex64 or complex128).
    restore_order : bool, optional
        Whether :meth:`close` swaps the index bits of a sharded state back into qdp's qubit
        order (default True). False leaves the served state in :attr:`permutation`'s order.
    network : {"switch", "fullmesh"}, optional
        The GPUs' interconnect, for cuStateVec's swaps across GPUs (NVSwitch: "switch").

    Raises
    ------
    NotSupported
        A state on the CPU backend, a sharding it cannot simulate (see the module's text),
        a qdp without writable views; :class:`CuStateVecUnavailable` without cuStateVec.
    FailedPrecondition
        Another holds a lease on the state.

    Notes
    -----
    The simulator holds the exclusive write lease until :meth:`close` (or the end of its
    ``with`` block): meanwhile the daemon answers every read of the state with
    FailedPrecondition. Close synchronizes every GPU, so the daemon's later reads see the
    writes.
    """

    def __init__(self, state: Any, *, restore_order: bool = True,
                 network: str = "switch") -> None:
        if network not in _NETWORK:
            raise InvalidArgument(f"network {network!r}: use 'switch' or 'fullmesh'",
                                  field="network")
        self.restore_order = bool(restore_order)
        self.qubits = int(state.qubits)
        self.batch = int(state.batch)
        self.dtype = str(state.dtype)
        if self.dtype not in ("complex64", "complex128"):
            raise NotSupported(f"state {state.handle} is {self.dtype}; qdp.sim takes complex64 "
                               "and complex128 states", hint="")
        self._state = state
        self._engine: Optional[_Engine] = None
        self._backend: Optional[_CuStateVec] = None
        self._views: List[Any] = []
        self._closed = False
        info = state.info
        plan_groups(info.shards, self.qubits, self.batch, state.handle)  # refuse early
        cusv = load_custatevec()  # before the lease: nothing to give back when it is missing
        self._views = list(state.shards(writable=True))
        try:
            if not self._views or not all(getattr(v, "writable", False) for v in self._views):
                raise NotSupported(f"the daemon opened views of state {state.handle} that are "
                                   "not writable: upgrade qdpd", hint="")
            groups = plan_groups([v.shard for v in self._views], self.qubits, self.batch,
                                 state.handle, self._views)
            self._backend = _CuStateVec(cusv, self._views, self.dtype, network)
            self._engine = _Engine(groups, self._backend, self.qubits, self.batch)
        except BaseException:
            self._views[0].close()
            raise

    @classmethod
    def _over(cls, engine: _Engine, dtype: str, handle: str = "",
              restore_order: bool = True) -> "Simulator":
        """A simulator over an engine already made, holding no lease and no views (the tests
        drive the engine's NumPy reference executor through the public methods this way)."""
        sim = cls.__new__(cls)
        sim.restore_order = restore_order
        sim.qubits, sim.batch, sim.dtype = engine.qubits, engine.batch, dtype
        sim._state = types.SimpleNamespace(handle=handle)
        sim._engine, sim._backend, sim._views, sim._closed = engine, None, [], False
        return sim

    def __repr__(self) -> str:
        what = "closed" if self._closed else f"open, permutation={list(self.permutation)}"
        return (f"<qdp.sim.Simulator {self._state.handle} qubits={self.qubits} "
                f"batch={self.batch} {self.dtype} {what}>")

    def _live(self) -> _Engine:
        if self._closed or self._engine is None:
            raise InvalidArgument("the simulator is closed: open a new one on the state",
                                  field="simulator")
        return self._engine

    @property
    def permutation(self) -> Tuple[int, ...]:
        """``permutation[k]``: the index bit of the memory that holds qubit k now (the identity
        unless a gate on a global qubit of a sharded state moved it). For a batch whose samples
        are on several groups of GPUs, the first group's (see :attr:`permutations`)."""
        return self._live().plans[0].permutation

    @property
    def permutations(self) -> List[Tuple[Tuple[int, int], Tuple[int, ...]]]:
        """Each group of shards' samples ``(row_first, rows)`` and its :attr:`permutation`."""
        eng = self._live()
        return [((g.row_first, g.rows), p.permutation) for g, p in zip(eng.groups, eng.plans)]

    @property
    def views(self) -> List[Any]:
        """The writable views of the shards (``__cuda_array_interface__``), in the memory's
        current bit order (see :attr:`permutation`)."""
        return list(self._views)

    def apply(self, circuit: Any) -> "Simulator":
        """Applies a circuit: a list of gates (``("ry", 0.3, 2)``, ``("cnot", 0, 1)``,
        ``("unitary", U, [0, 1])``, :class:`qdp._circuits.Gate`), a PennyLane tape or a Qiskit
        QuantumCircuit (see :func:`qdp._circuits.circuit_gates`).

        Returns
        -------
        Simulator
            Itself, for chaining.

        Raises
        ------
        InvalidArgument
            A gate the conversion refuses (field "circuit").
        """
        eng = self._live()
        for g in circuit_gates(circuit, self.qubits):
            eng.apply_matrix(g.matrix, list(g.targets), [], [])
        return self

    def apply_matrix(self, matrix: Any, targets: Union[int, Sequence[int]],
                     controls: Union[int, Sequence[int]] = (),
                     control_values: Optional[Sequence[int]] = None) -> "Simulator":
        """Applies a unitary on ``targets`` (``targets[j]`` is bit j of the matrix index),
        controlled by ``controls``.

        Parameters
        ----------
        matrix : array_like
            (2^k, 2^k), unitary to 1e-10.
        targets : int or sequence of int
            k distinct qubits.
        controls : int or sequence of int, optional
            Qubits, none of the targets, on which the gate is conditioned.
        control_values : sequence of int, optional
            The value (0 or 1) each control must have; default all 1.

        Returns
        -------
        Simulator

        Raises
        ------
        InvalidArgument
            Bad targets or matrix (field "circuit"), controls (field "controls") or
            control_values (field "control_values").
        """
        eng = self._live()
        t = _qubit_list(targets, self.qubits, "targets")
        g = gate(matrix, t, self.qubits, "apply_matrix")
        c = _qubit_list(controls, self.qubits, "controls", allow_empty=True)
        if set(c) & set(t):
            raise InvalidArgument(f"controls {c} and targets {t} share qubits",
                                  field="controls")
        if control_values is None:
            vals = [1] * len(c)
        else:
            vals = [int(v) for v in control_values]
            if len(vals) != len(c) or any(v not in (0, 1) for v in vals):
                raise InvalidArgument(f"control_values {list(control_values)} must be one 0 or "
                                      f"1 per control ({len(c)})", field="control_values")
        eng.apply_matrix(g.matrix, t, c, vals)
        return self

    def rotate(self, paulis: str, theta: float, targets: Union[int, Sequence[int]]) -> "Simulator":
        """Applies exp(-i theta/2 P), P the tensor product of ``paulis[j]`` on
        ``targets[j]`` (``rotate("Y", t, [q])`` is RY(t) on q; ``rotate("ZZ", t, [a, b])`` is
        RZZ(t)).

        Parameters
        ----------
        paulis : str
            One of I, X, Y, Z per target.
        theta : float
        targets : int or sequence of int
            Distinct qubits, as many as letters.

        Returns
        -------
        Simulator

        Raises
        ------
        InvalidArgument
            Field "paulis", "theta" or "targets".
        """
        eng = self._live()
        if not isinstance(paulis, str) or not paulis or set(paulis.upper()) - set("IXYZ"):
            raise InvalidArgument(f"paulis must be a string of I, X, Y and Z, not {paulis!r}",
                                  field="paulis")
        t = _qubit_list(targets, self.qubits, "targets")
        if len(t) != len(paulis):
            raise InvalidArgument(f"paulis {paulis!r} has {len(paulis)} letters for "
                                  f"{len(t)} targets {t}", field="paulis")
        eng.rotate(paulis.upper(), _angle(theta), t)
        return self

    def expectation(self, paulis: Union[str, Sequence[str]]) -> Union[float, np.ndarray]:
        """Expectation values <psi|P|psi> of Pauli strings on the simulated state.

        Parameters
        ----------
        paulis : str or sequence of str
            One letter per qubit (I, X, Y, Z), letter k on qubit k, as
            :meth:`qdp.State.expectations` takes them.

        Returns
        -------
        float or numpy.ndarray
            A float for one string (not in a list) of one sample; else float64 of shape
            ``(len(paulis),)`` for one sample, ``(batch,)`` for one string of a batch,
            ``(batch, len(paulis))``.

        Raises
        ------
        InvalidArgument
            A string of the wrong length or letters (field "paulis").
        """
        eng = self._live()
        strings, single = _pauli_strings(paulis, self.qubits)
        vals = eng.expectations(strings)
        if single:
            return float(vals[0, 0]) if self.batch == 1 else vals[:, 0].copy()
        return vals[0].copy() if self.batch == 1 else vals

    def sample(self, shots: int, qubits: Optional[Sequence[int]] = None,
               seed: Optional[int] = None) -> np.ndarray:
        """Measurement outcomes in the computational basis, without collapsing the state.

        Parameters
        ----------
        shots : int
            Outcomes per sample, 1 to 2^31 - 1.
        qubits : sequence of int, optional
            The qubits measured: bit j of an outcome is qubit ``qubits[j]``. Default every qubit
            (bit k is qubit k).
        seed : int, optional
            Seeds the random numbers (NumPy's default_rng); the same seed and state give the
            same outcomes.

        Returns
        -------
        numpy.ndarray
            int64, ``(shots,)`` for one sample, ``(batch, shots)`` for a batch.

        Raises
        ------
        InvalidArgument
            Field "shots", "qubits" or "seed".
        """
        eng = self._live()
        if isinstance(shots, bool) or not isinstance(shots, (int, np.integer)) or \
                not 1 <= int(shots) < 1 << 31:
            raise InvalidArgument(f"shots must be an integer from 1 to 2^31 - 1, not {shots!r}",
                                  field="shots")
        qs = list(range(self.qubits)) if qubits is None else \
            _qubit_list(qubits, self.qubits, "qubits")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                                 or seed < 0):
            raise InvalidArgument(f"seed must be a non-negative integer or None, not {seed!r}",
                                  field="seed")
        out = eng.sample(int(shots), qs, np.random.default_rng(seed))
        return out[0] if self.batch == 1 else out

    def synchronize(self) -> None:
        """Waits for every GPU's work so far."""
        self._live()
        if self._backend is not None:
            self._backend.synchronize()

    def close(self) -> None:
        """Swaps the bits back into qdp's order (with ``restore_order``), synchronizes, destroys
        the cuStateVec handles and ends the write lease; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._engine is not None and self.restore_order:
                self._engine.restore()
        finally:
            try:
                if self._backend is not None:
                    self._backend.synchronize()
                    self._backend.close()
            finally:
                if self._views:
                    self._views[0].close()  # synchronizes each view's device, ends the lease

    def __enter__(self) -> "Simulator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
