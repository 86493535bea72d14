"""The encodings from their formulas, in NumPy, as the tests' reference (qubit k is bit k of the
amplitude index b; direct sums, no fast transforms)."""

from __future__ import annotations

import numpy as np


def index_bits(n: int) -> np.ndarray:
    """B[b, k] = bit k of b, for b in [0, 2^n)."""
    b = np.arange(1 << n)
    return (b[:, None] >> np.arange(n)[None, :]) & 1


def amplitude(x: np.ndarray, n: int) -> np.ndarray:
    """x / ||x||, zero padded to 2^n."""
    x = np.asarray(x, np.float64)
    out = np.zeros(1 << n, np.complex128)
    out[: x.size] = x / np.linalg.norm(x)
    return out


def angle(x: np.ndarray, n: int) -> np.ndarray:
    """prod_k (b_k ? sin x_k : cos x_k)."""
    x = np.asarray(x, np.float64)
    B = index_bits(n)
    return np.prod(np.where(B == 1, np.sin(x), np.cos(x)), axis=1).astype(np.complex128)


def basis(i: int, n: int) -> np.ndarray:
    """|i>."""
    out = np.zeros(1 << n, np.complex128)
    out[int(i)] = 1
    return out


def phase(x: np.ndarray, n: int) -> np.ndarray:
    """2^(-n/2) e^{i sum_k x_k b_k}."""
    x = np.asarray(x, np.float64)
    return 2.0 ** (-n / 2) * np.exp(1j * (index_bits(n) @ x))


def iqp(d: np.ndarray, n: int, pairs: bool = True) -> np.ndarray:
    """2^-n sum_z (-1)^popcount(z & b) e^{i theta(z)}, theta(z) = sum_i d_i z_i
    + sum_{i<j} d_p z_i z_j with p running over the pairs (0,1), (0,2), ..., (1,2), ... after the
    n single-qubit coefficients (no pairs for iqp-z)."""
    d = np.asarray(d, np.float64)
    Z = index_bits(n)
    theta = Z @ d[:n]
    if pairs:
        p = n
        for i in range(n):
            for j in range(i + 1, n):
                theta = theta + d[p] * Z[:, i] * Z[:, j]
                p += 1
    z = np.arange(1 << n)
    pop = np.array([[bin(int(a) & int(b)).count("1") for a in z] for b in z])
    return 2.0 ** -n * ((-1.0) ** pop @ np.exp(1j * theta))


def values_per_sample(encoding: str, n: int) -> int:
    """Parameters one sample of ``encoding`` takes on n qubits (amplitude: up to 2^n)."""
    return {"amplitude": 1 << n, "angle": n, "basis": 1, "phase": n, "iqp": n + n * (n - 1) // 2,
            "iqp-z": n}[encoding]


def state(encoding: str, x: np.ndarray, n: int) -> np.ndarray:
    """One sample's state vector."""
    if encoding == "amplitude":
        return amplitude(x, n)
    if encoding == "angle":
        return angle(x, n)
    if encoding == "basis":
        return basis(np.asarray(x).reshape(-1)[0], n)
    if encoding == "phase":
        return phase(x, n)
    if encoding == "iqp":
        return iqp(x, n, True)
    if encoding == "iqp-z":
        return iqp(x, n, False)
    raise ValueError(encoding)


def batch(encoding: str, X: np.ndarray, n: int) -> np.ndarray:
    """A batch's states, one per row."""
    return np.stack([state(encoding, row, n) for row in np.asarray(X)])


def close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    """Asserts got matches want within the precision of dtype."""
    tol = 2e-6 if dtype == "complex64" else 1e-12
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.complex128), want, rtol=0, atol=tol)
