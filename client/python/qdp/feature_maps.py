"""Feature maps: an encoding's parameters built from a sample's features.

iqp on n qubits takes n + n(n-1)/2 values per sample: the singles d_0 .. d_{n-1}, then one pair
term per pair of qubits in the order :func:`iqp_pairs` gives, (0,1), (0,2) ... (0,n-1), (1,2)
... (n-2,n-1). Its state is

    psi_b = 2^-n sum_z (-1)^popcount(z & b) e^{i theta(z)},
    theta(z) = sum_i d_i z_i + sum_{i<j} d_p(i,j) z_i z_j,

that is H on every qubit, P(d_i) on qubit i, CP(d_p(i,j)) on qubits i and j, and H on every
qubit again, from |0...0> (qubit k is bit k of the index b). :func:`iqp_parameters` fills that
vector from n features x the way the common ZZ feature map chooses its angles::

    import qdp
    from qdp.feature_maps import iqp_parameters

    X = ...                                       # (samples, n) features
    with qdp.Client() as c, c.encode(iqp_parameters(X), "iqp", n) as s:
        psi = s.numpy()
"""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

import numpy as np

from ._values import real_array
from .errors import InvalidArgument

__all__ = ["iqp_pairs", "iqp_parameters", "zz_pair"]


def iqp_pairs(n: int) -> List[Tuple[int, int]]:
    """The pairs of qubits of iqp's pair terms, in the order its parameters hold them.

    Parameters
    ----------
    n : int
        Qubits.

    Returns
    -------
    list of (int, int)
        (0, 1), (0, 2) ... (0, n-1), (1, 2) ... (n-2, n-1): pair term p is parameter n + p.
    """
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def zz_pair(xi: Any, xj: Any) -> Any:
    """(pi - x_i)(pi - x_j): the pair angle of the common ZZ feature map, elementwise."""
    return (np.pi - xi) * (np.pi - xj)


def iqp_parameters(x: Any, pair: Callable[[Any, Any], Any] = zz_pair) -> np.ndarray:
    """iqp's n + n(n-1)/2 parameters from n features per sample.

    d_i = x_i for the n singles, then d_(n+p) = pair(x_i, x_j) for the p-th pair (i, j) of
    :func:`iqp_pairs` (by default (pi - x_i)(pi - x_j)). ``encode(iqp_parameters(x), "iqp", n)``
    then gives H^n U(x) H^n |0>, with U(x) the phase e^{i theta(z)} on each basis state z,
    theta(z) = sum_i x_i z_i + sum_{i<j} pair(x_i, x_j) z_i z_j: P(x_i) on every qubit i and
    CP(pair(x_i, x_j)) on every pair, between two layers of H.

    Angles are taken as given: no factor 2, one layer. Qiskit's ``ZZFeatureMap`` differs in
    three ways with the same feature functions: it applies P(2 x_i), puts its pair angle
    2 pair(x_i, x_j) on the parity z_i XOR z_j (CX, P, CX) rather than on z_i z_j, and has no
    closing layer of H (its default repeats the block twice).

    Parameters
    ----------
    x : array-like or torch.Tensor (CPU)
        One sample's n features (1-D) or a batch of samples (2-D, one per row).
    pair : callable, optional
        ``pair(xi, xj)``: the pair term of features xi and xj. It is called once, with two
        arrays of the same shape (the first and second feature of every pair of every sample),
        and must work elementwise, as NumPy arithmetic does; what it returns is broadcast to
        that shape.

    Returns
    -------
    numpy.ndarray
        float64, of shape ``(n + n(n-1)/2,)`` for one sample or ``(samples, n + n(n-1)/2)``.

    Raises
    ------
    InvalidArgument
        Features that are not real numbers in 1 or 2 dimensions (field "x"), or a ``pair``
        whose result is not real numbers of that shape (field "pair").
    """
    X = real_array(x, field="x", dtype_field="x")
    if X.ndim not in (1, 2) or X.shape[-1] == 0:
        raise InvalidArgument(f"features of shape {X.shape}: pass one sample's n features "
                              "(1-D, n >= 1) or a batch of samples (2-D, one per row)", field="x")
    X = X.astype(np.float64)
    n = X.shape[-1]
    ij = np.array(iqp_pairs(n), dtype=np.intp).reshape(-1, 2)
    xi, xj = X[..., ij[:, 0]], X[..., ij[:, 1]]
    got = np.asarray(pair(xi, xj))
    if got.dtype.kind not in "fiu":
        raise InvalidArgument(f"pair returned {got.dtype} values: it must return real numbers",
                              field="pair")
    try:
        terms = np.broadcast_to(got, xi.shape)
    except ValueError:
        raise InvalidArgument(f"pair returned shape {got.shape} for arguments of shape "
                              f"{xi.shape}: it must work elementwise", field="pair") from None
    return np.concatenate([X, terms.astype(np.float64)], axis=-1)
