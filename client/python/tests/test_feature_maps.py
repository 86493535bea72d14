"""help() answers: Client.encode's docstring gives every encoding's values per sample and
formula; qdp.feature_maps.iqp_parameters builds iqp's parameters as its docstring says, checked
against the statevector of the circuit it names (H, P, CP, H) built gate by gate with NumPy."""

from __future__ import annotations

import itertools
from typing import Callable, Dict, Tuple

import numpy as np
import pytest

import qdp
from qdp.feature_maps import iqp_pairs, iqp_parameters, zz_pair

import qdpref as ref

N = 4


def test_encodes_help_gives_each_encodings_values_and_formula() -> None:
    doc = qdp.Client.encode.__doc__
    for row in ("amplitude   L <= 2^n        x_b / ||x||",
                "angle       n               prod_k (cos x_k if b_k = 0 else sin x_k)",
                "RY(2 x_k)", "basis       1 (an index i)  1 at b = i",
                "iqp         n + n(n-1)/2", "order (0,1), (0,2) ... (0,n-1), (1,2)",
                "iqp-z       n               as iqp without the pair terms",
                "phase       n               2^(-n/2) e^{i sum_k x_k b_k}",
                "Qubit k is bit k of the amplitude index"):
        assert row in doc, row


def gate(n: int, gates: Dict[int, np.ndarray]) -> np.ndarray:
    """The 2^n x 2^n matrix of one-qubit gates on the given qubits (identity elsewhere); the
    first Kronecker factor is the most significant bit, qubit n-1."""
    m = np.eye(1)
    for q in range(n - 1, -1, -1):
        m = np.kron(m, gates.get(q, np.eye(2)))
    return m


def circuit_state(n: int, singles: np.ndarray, pair_angles: Dict[Tuple[int, int], float]
                  ) -> np.ndarray:
    """H on every qubit, P(singles[k]) on qubit k, CP(angle) on each pair, H on every qubit,
    applied to |0...0> as matrices."""
    H = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
    P = lambda a: np.diag([1, np.exp(1j * a)])  # noqa: E731
    psi = np.zeros(1 << n, complex)
    psi[0] = 1
    psi = gate(n, {k: H for k in range(n)}) @ psi
    for k in range(n):
        psi = gate(n, {k: P(singles[k])}) @ psi
    for (i, j), a in pair_angles.items():  # CP = |0><0|_i (x) 1 + |1><1|_i (x) P(a)_j
        psi = (gate(n, {i: np.diag([1, 0])}) + gate(n, {i: np.diag([0, 1]), j: P(a)})) @ psi
    return gate(n, {k: H for k in range(n)}) @ psi


def by_definition(x: np.ndarray, pair: Callable[[float, float], float]) -> np.ndarray:
    return circuit_state(len(x), x, {(i, j): pair(x[i], x[j])
                                     for i, j in itertools.combinations(range(len(x)), 2)})


def test_iqp_pairs_are_in_iqps_order() -> None:
    assert iqp_pairs(4) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert iqp_pairs(1) == [] and len(iqp_pairs(7)) == 21


@pytest.mark.parametrize("name,pair", [
    ("zz", lambda a, b: (np.pi - a) * (np.pi - b)),
    ("product", lambda a, b: a * b)])
def test_iqp_parameters_give_the_circuits_state(client: qdp.Client, name: str, pair) -> None:
    x = np.random.default_rng(31).uniform(0, 2 * np.pi, size=N)
    d = iqp_parameters(x) if name == "zz" else iqp_parameters(x, pair)
    assert d.shape == (N + N * (N - 1) // 2,) and d.dtype == np.float64
    with client.encode(d, "iqp", N) as s:
        got = s.numpy()
    np.testing.assert_allclose(got, by_definition(x, pair), rtol=0, atol=1e-12)
    ref.assert_close(got, ref.iqp(d, N), "complex128")


def test_iqp_parameters_of_a_batch(client: qdp.Client) -> None:
    X = np.random.default_rng(32).uniform(-1, 1, size=(3, N)).astype(np.float32)
    D = iqp_parameters(X)
    assert D.shape == (3, N + N * (N - 1) // 2)
    for row, d in zip(X, D):
        np.testing.assert_array_equal(d, iqp_parameters(row))
    with client.encode(D, "iqp", N) as s:
        want = np.stack([by_definition(row.astype(np.float64), zz_pair) for row in X])
        np.testing.assert_allclose(s.numpy(), want, rtol=0, atol=1e-12)


def test_iqp_parameters_refuse_what_they_cannot_use() -> None:
    with pytest.raises(qdp.InvalidArgument) as e:
        iqp_parameters([[1.0, 2.0], [3.0]])
    assert e.value.field == "x"
    for bad in (np.ones((2, 2, 2)), np.ones((2, 0))):
        with pytest.raises(qdp.InvalidArgument, match="features of shape") as e:
            iqp_parameters(bad)
        assert e.value.field == "x"
    for pair, says in ((lambda a, b: a + 1j * b, "complex128"),
                       (lambda a, b: np.ones(7), "shape (7,)"),
                       (lambda a, b: "no", "<U2")):
        with pytest.raises(qdp.InvalidArgument, match="pair returned") as e:
            iqp_parameters(np.ones(3), pair)
        assert e.value.field == "pair" and says in e.value.message
    np.testing.assert_array_equal(iqp_parameters([0.5, 1.0], lambda a, b: 0),
                                  [0.5, 1.0, 0.0])
