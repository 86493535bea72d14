"""The NumPy reference of qdp's encodings: every state computed directly from its formula in the
Encodings table of docs/design.md, in float64 and complex128 (a direct sum over every z for iqp,
no fast transform), sharing no code with the daemon, libqdp or the Python package. Every test and
benchmark that checks a state against the formulas imports this module: meson puts this folder
on the integration, mpi and unit tests' PYTHONPATH, client/python/tests/conftest.py on the Python
package's tests' sys.path, and the benchmarks add it themselves.

Qubit k is bit k of the amplitude index b (little-endian). The function of each encoding takes
one sample's values, the number of qubits n and, optionally, the indices b at which to evaluate
psi_b (every b in [0, 2^n) by default), so that a test of a large state can check some of its
amplitudes without the whole vector:

    amplitude(x, n)  x_b / ||x|| for b < len(x), else 0
    angle(x, n)      prod_k (b_k ? sin x_k : cos x_k)
    basis(i, n)      1 at b = i, else 0 (i an index, or a sample of one value)
    iqp(d, n)        2^-n sum_z (-1)^popcount(z & b) e^{i theta(z)}, theta(z) = sum_i d_i z_i +
                     sum_{i<j} d_p z_i z_j, p running over the pairs (0,1), (0,2) ... (0,n-1),
                     (1,2) ... after the n singles
    iqp_z(d, n)      iqp with no pair terms (the encoding "iqp-z")
    phase(x, n)      2^(-n/2) e^{i sum_k x_k b_k}

By encoding name: ``REFERENCES`` (the functions), ``state``, ``batch`` and ``values_per_sample``.
``assert_close`` compares a state with them at the precision of its dtype (``tolerance``).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import numpy as np
from numpy.typing import ArrayLike

Index = Optional[ArrayLike]

# The sign matrix of iqp's direct sum is built this many entries at a time.
_IQP_BLOCK = 1 << 22


def _indices(n: int, index: Index) -> np.ndarray:
    """The amplitude indices to evaluate, as int64: every b in [0, 2^n), or those given."""
    if not 0 <= n <= 40:
        raise ValueError(f"n = {n}: the reference takes 0 to 40 qubits")
    if index is None:
        return np.arange(1 << n, dtype=np.int64)
    b = np.asarray(index, dtype=np.int64).reshape(-1)
    if b.size and (b.min() < 0 or b.max() >= 1 << n):
        raise ValueError(f"index: every b must lie in [0, 2^{n}); got {b.min()} to {b.max()}")
    return b


def _values(encoding: str, x: ArrayLike, n: int) -> np.ndarray:
    """One sample's values as float64, exactly as many as the encoding takes on n qubits."""
    v = np.asarray(x, dtype=np.float64).reshape(-1)
    want = values_per_sample(encoding, n)
    if v.size != want:
        raise ValueError(f"{encoding} on {n} qubits takes {want} values per sample, got {v.size}")
    return v


def _bit(b: np.ndarray, k: int) -> np.ndarray:
    """Bit k of each index, as booleans."""
    return ((b >> k) & 1).astype(bool)


def amplitude(x: ArrayLike, n: int, index: Index = None) -> np.ndarray:
    """x_b / ||x|| for b < L = len(x) <= 2^n, else 0.

    Raises ValueError for a sample longer than 2^n, empty, all zeros or not finite: it has no
    state.
    """
    v = np.asarray(x, dtype=np.float64).reshape(-1)
    if not 0 < v.size <= 1 << n:
        raise ValueError(f"amplitude on {n} qubits takes 1 to {1 << n} values, got {v.size}")
    if not np.all(np.isfinite(v)) or not np.any(v):
        raise ValueError("amplitude: the sample is all zeros or not finite, and has no state")
    # Divided by its largest |value| first, the sample's squares neither overflow nor underflow.
    v = v / np.max(np.abs(v))
    b = _indices(n, index)
    psi = np.zeros(b.size, np.complex128)
    inside = b < v.size
    psi[inside] = v[b[inside]] / np.sqrt(np.sum(v * v))
    return psi


def angle(x: ArrayLike, n: int, index: Index = None) -> np.ndarray:
    """prod_k (b_k ? sin x_k : cos x_k)."""
    v = _values("angle", x, n)
    b = _indices(n, index)
    psi = np.ones(b.size)
    for k in range(n):
        psi *= np.where(_bit(b, k), np.sin(v[k]), np.cos(v[k]))
    return psi.astype(np.complex128)


def basis(i: ArrayLike, n: int, index: Index = None) -> np.ndarray:
    """1 at b = i, else 0; i is an index or a sample holding one (a float of an integer value)."""
    v = np.asarray(i).reshape(-1)
    if v.size != 1:
        raise ValueError(f"basis takes 1 value per sample (the index), got {v.size}")
    if not (float(v[0]).is_integer() and 0 <= v[0] < 1 << n):
        raise ValueError(f"basis on {n} qubits: the index must be an integer in [0, {1 << n}), "
                         f"got {v[0]}")
    return (_indices(n, index) == int(v[0])).astype(np.complex128)


def phase(x: ArrayLike, n: int, index: Index = None) -> np.ndarray:
    """2^(-n/2) e^{i sum_k x_k b_k}."""
    v = _values("phase", x, n)
    b = _indices(n, index)
    theta = np.zeros(b.size)
    for k in range(n):
        theta += np.where(_bit(b, k), v[k], 0.0)
    return 2.0 ** (-n / 2) * np.exp(1j * theta)


def _iqp(encoding: str, d: ArrayLike, n: int, index: Index, pairs: bool) -> np.ndarray:
    """2^-n sum_z (-1)^popcount(z & b) e^{i theta(z)}, summed directly over every z."""
    v = _values(encoding, d, n)
    b = _indices(n, index)
    z = np.arange(1 << n, dtype=np.int64)
    theta = np.zeros(z.size)
    for k in range(n):
        theta += np.where(_bit(z, k), v[k], 0.0)
    if pairs:
        p = n
        for i in range(n):
            for j in range(i + 1, n):
                theta += np.where(_bit(z, i) & _bit(z, j), v[p], 0.0)
                p += 1
    e = np.exp(1j * theta)
    psi = np.empty(b.size, np.complex128)
    rows = max(1, _IQP_BLOCK >> n)
    for s in range(0, b.size, rows):
        zb = b[s:s + rows, None] & z[None, :]
        parity = np.zeros(zb.shape, np.int64)
        for k in range(n):
            parity ^= (zb >> k) & 1
        psi[s:s + rows] = (1 - 2 * parity) @ e
    return 2.0 ** -n * psi


def iqp(d: ArrayLike, n: int, index: Index = None) -> np.ndarray:
    """IQP with pair terms: n single coefficients, then one per pair (0,1), (0,2) ... (1,2) ..."""
    return _iqp("iqp", d, n, index, True)


def iqp_z(d: ArrayLike, n: int, index: Index = None) -> np.ndarray:
    """IQP with the n single coefficients alone (the encoding "iqp-z")."""
    return _iqp("iqp-z", d, n, index, False)


# One function per encoding, by its name in the table: tests/unit/test_encoding_table.py checks
# that the table (common/) has no encoding without one here.
REFERENCES: Dict[str, Callable[..., np.ndarray]] = {
    "amplitude": amplitude,
    "angle": angle,
    "basis": basis,
    "iqp": iqp,
    "iqp-z": iqp_z,
    "phase": phase,
}


def _function(encoding: str) -> Callable[..., np.ndarray]:
    if encoding not in REFERENCES:
        raise ValueError(f"encoding {encoding!r} has no reference: one of {', '.join(REFERENCES)}")
    return REFERENCES[encoding]


def values_per_sample(encoding: str, n: int) -> int:
    """How many values one sample of ``encoding`` takes on n qubits (amplitude: at most 2^n)."""
    _function(encoding)
    return {"amplitude": 1 << n, "angle": n, "basis": 1, "iqp": n + n * (n - 1) // 2,
            "iqp-z": n, "phase": n}[encoding]


def state(encoding: str, x: ArrayLike, n: int, index: Index = None) -> np.ndarray:
    """One sample's state vector (or its amplitudes at ``index``) by encoding name."""
    return _function(encoding)(x, n, index)


def batch(encoding: str, X: ArrayLike, n: int) -> np.ndarray:
    """A batch's states, [rows, 2^n]: one per row of X (basis: one index per row)."""
    f = _function(encoding)
    return np.stack([f(row, n) for row in np.asarray(X)])


def tolerance(dtype: object) -> float:
    """The largest error allowed per amplitude, relative to max(1, largest |amplitude|): 1e-5 for
    complex64 (computed in float32), 1e-12 for complex128."""
    dt = np.dtype(dtype)
    if dt == np.complex64:
        return 1e-5
    if dt == np.complex128:
        return 1e-12
    raise ValueError(f"dtype: a state is complex64 or complex128, not {dt}")


def assert_close(got: ArrayLike, want: ArrayLike, dtype: object, what: str = "") -> None:
    """Raises AssertionError, saying where and by how much, unless got has want's shape and every
    amplitude within ``tolerance(dtype)`` of it (a NaN never is)."""
    g = np.asarray(got)
    w = np.asarray(want)
    label = f"{what}: " if what else ""
    if g.shape != w.shape:
        raise AssertionError(f"{label}shape {g.shape}, expected {w.shape}")
    if not g.size:
        return
    err = np.abs(g.astype(np.complex128) - w)
    worst = int(np.argmax(np.where(np.isnan(err), np.inf, err)))
    tol = tolerance(dtype) * max(1.0, float(np.max(np.abs(w))))
    if not err.flat[worst] <= tol:
        at = np.unravel_index(worst, g.shape)
        raise AssertionError(f"{label}|got - want| = {err.flat[worst]:.3e} > {tol:.1e} at "
                             f"{tuple(int(i) for i in at)}: got {g.flat[worst]}, "
                             f"want {w.flat[worst]}")
