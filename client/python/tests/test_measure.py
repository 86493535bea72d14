"""State.probabilities and State.expectations against the CPU daemon: equal to the reference
states' (tests/reference) probabilities and to <psi|P|psi> with P built as a dense matrix here,
for one sample and a batch; a result over 4 MiB through shared memory; and the refusals."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from qdpref import batch, state

import qdp

PAULI = {"I": np.eye(2), "X": np.array([[0, 1], [1, 0]]), "Y": np.array([[0, -1j], [1j, 0]]),
         "Z": np.diag([1, -1])}


def dense(p: str) -> np.ndarray:
    """The matrix of Pauli string p, letter k on qubit k (bit k of the index: the last factor)."""
    return functools.reduce(np.kron, [PAULI[ch] for ch in reversed(p)])


def test_probabilities_of_every_basis_state_and_of_chosen_qubits(client: qdp.Client) -> None:
    X = np.random.default_rng(3).uniform(-1, 1, size=(4, 10))
    with client.encode(X, "iqp", 4) as s:
        P = np.abs(batch("iqp", X, 4)) ** 2
        np.testing.assert_allclose(s.probabilities(), P, rtol=0, atol=1e-15)
        m = s.probabilities([3, 1])  # outcome bit 0 is qubit 3, bit 1 qubit 1
        want = np.zeros((4, 4))
        for b in range(16):
            want[:, ((b >> 3) & 1) | (((b >> 1) & 1) << 1)] += P[:, b]
        np.testing.assert_allclose(m, want, rtol=0, atol=1e-15)
        np.testing.assert_allclose(m.sum(axis=1), 1.0, atol=1e-14)


def test_expectations_of_pauli_strings(client: qdp.Client) -> None:
    X = np.random.default_rng(4).uniform(-1, 1, size=(3, 6))
    strings = ["ZII", "IXI", "XYZ", "YYI", "ZZZ", "IIY"]
    with client.encode(X, "iqp", 3) as s:
        psi = batch("iqp", X, 3)
        want = np.stack([np.real(np.einsum("rb,bc,rc->r", psi.conj(), dense(p), psi))
                         for p in strings], axis=1)
        np.testing.assert_allclose(s.expectations(strings), want, rtol=0, atol=1e-15)
        one_string = s.expectations("XYZ")  # one string: one value per sample
        assert one_string.shape == (3,)
        np.testing.assert_allclose(one_string, want[:, 2], rtol=0, atol=1e-15)
    with client.encode([0.3, 1.1], "angle", 2) as one:  # one sample: cos(2x) for Z on a qubit
        assert one.expectations("ZI").shape == ()
        np.testing.assert_allclose(one.expectations(["ZI", "IZ"]), np.cos([0.6, 2.2]),
                                   atol=1e-15)
        np.testing.assert_allclose(one.probabilities([0]), [np.cos(0.3) ** 2, np.sin(0.3) ** 2],
                                   atol=1e-15)
        np.testing.assert_allclose(one.probabilities(),
                                   np.abs(state("angle", [0.3, 1.1], 2)) ** 2, atol=1e-15)


def test_large_probabilities_come_through_shared_memory(client: qdp.Client) -> None:
    X = np.random.default_rng(5).uniform(-1, 1, size=(40, 1 << 14))
    with client.encode(X, "amplitude", 14) as s:
        P = s.probabilities()  # 40 x 16384 float64: 5 MiB
        np.testing.assert_allclose(P, np.abs(batch("amplitude", X, 14)) ** 2, rtol=0, atol=1e-15)


def test_measurement_refusals(client: qdp.Client) -> None:
    with client.encode([1.0, 2.0, 3.0, 4.0], "amplitude", 2) as s:
        for bad, field in ((lambda: s.probabilities([2]), "qubits"),
                           (lambda: s.probabilities([0, 0]), "qubits"),
                           (lambda: s.probabilities([-1]), "qubits"),
                           (lambda: s.expectations("ZZZ"), "paulis"),
                           (lambda: s.expectations("ZA"), "paulis"),
                           (lambda: s.expectations([]), "paulis")):
            with pytest.raises(qdp.InvalidArgument) as e:
                bad()
            assert e.value.field == field, e.value
    with pytest.raises(qdp.NotFound):
        s.probabilities()  # released


def test_samples_from_a_seed(client: qdp.Client) -> None:
    X = np.random.default_rng(6).uniform(-1, 1, size=(2, 10))
    with client.encode(X, "iqp", 4) as s:
        a = s.sample(20000, seed=7)
        assert a.shape == (2, 20000) and a.dtype == np.int64
        np.testing.assert_array_equal(a, s.sample(20000, seed=7))  # the seed decides
        assert (a != s.sample(20000, seed=8)).any()
        P = np.abs(batch("iqp", X, 4)) ** 2
        for r in range(2):  # 5 standard deviations of a frequency of 20000 draws: < 0.018
            freq = np.bincount(a[r], minlength=16) / 20000
            assert np.abs(freq - P[r]).max() < 0.018, (freq, P[r])
    with client.encode([0.0, 0.0, 1.0, 0.0], "amplitude", 2) as basis2:
        np.testing.assert_array_equal(basis2.sample(7, seed=3), [2] * 7)
        for bad, field in ((lambda: basis2.sample(0), "shots"),
                           (lambda: basis2.sample(3, seed=-1), "seed"),
                           (lambda: basis2.sample(1 << 25), "shots")):
            with pytest.raises(qdp.InvalidArgument) as e:
                bad()
            assert e.value.field == field, e.value
