"""The NumPy reference of the encodings (tests/reference/qdpref.py) against states worked out by
hand from docs/design.md's formulas on one to three qubits, its amplitudes at chosen indices
against its whole states, its refusals, and its comparison (assert_close).

Usage: test_reference.py (qdpref on PYTHONPATH).
"""

import cmath
import math
import unittest

import numpy as np

import qdpref


class ByHand(unittest.TestCase):
    def same(self, got, want):
        np.testing.assert_allclose(got, np.asarray(want, np.complex128), rtol=0, atol=1e-15)

    def test_amplitude(self):
        self.same(qdpref.amplitude([3.0, 4.0], 2), [0.6, 0.8, 0, 0])
        # Squares that would underflow or overflow in float64 still give the state.
        for v in (1e-200, 1e200):
            self.same(qdpref.amplitude([v, v], 1), [2 ** -0.5, 2 ** -0.5])

    def test_angle(self):
        a, b = 0.3, -1.1
        self.same(qdpref.angle([a, b], 2),
                  [math.cos(a) * math.cos(b), math.sin(a) * math.cos(b),
                   math.cos(a) * math.sin(b), math.sin(a) * math.sin(b)])

    def test_basis(self):
        self.same(qdpref.basis(2, 2), [0, 0, 1, 0])
        self.same(qdpref.basis(np.array([1.0]), 2), [0, 1, 0, 0])

    def test_phase(self):
        a, b = 0.7, 2.5
        e = cmath.exp
        self.same(qdpref.phase([a, b], 2),
                  [0.5, 0.5 * e(1j * a), 0.5 * e(1j * b), 0.5 * e(1j * (a + b))])

    def test_iqp_on_two_qubits(self):
        # theta(z) over z = 0..3: 0, a, b, a + b + c (c the pair (0,1)); psi_b sums the four with
        # the signs (-1)^popcount(z & b).
        a, b, c = 0.4, -0.9, 1.3
        t = [1, cmath.exp(1j * a), cmath.exp(1j * b), cmath.exp(1j * (a + b + c))]
        signs = [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]
        self.same(qdpref.iqp([a, b, c], 2), [sum(s * v for s, v in zip(row, t)) / 4
                                             for row in signs])
        t[3] = cmath.exp(1j * (a + b))
        self.same(qdpref.iqp_z([a, b], 2), [sum(s * v for s, v in zip(row, t)) / 4
                                            for row in signs])

    def test_iqp_pairs_come_in_the_order_01_02_12(self):
        # Only the second pair's coefficient, pi: theta is pi where bits 0 and 2 are set (z = 5,
        # 7), so psi_b = [b = 0] - (1/4) sum_{z in {5, 7}} (-1)^popcount(z & b). The pair (1, 2)
        # in its place would give psi_2 = 1/2 instead of 0.
        psi = qdpref.iqp([0, 0, 0, 0, math.pi, 0], 3)
        want = [(b == 0) - 0.25 * sum((-1) ** bin(z & b).count("1") for z in (5, 7))
                for b in range(8)]
        self.same(psi, want)
        self.assertAlmostEqual(abs(psi[2]), 0.0, 15)


class Indices(unittest.TestCase):
    def test_amplitudes_at_indices_are_those_of_the_whole_state(self):
        rng = np.random.default_rng(11)
        n = 5
        index = [31, 0, 7, 7, 16]
        for encoding in qdpref.REFERENCES:
            k = qdpref.values_per_sample(encoding, n)
            x = [19] if encoding == "basis" else rng.uniform(-2, 2, k - (encoding == "amplitude"))
            whole = qdpref.state(encoding, x, n)
            self.assertEqual(whole.shape, (1 << n,), encoding)
            np.testing.assert_array_equal(qdpref.state(encoding, x, n, index), whole[index],
                                          encoding)

    def test_batch_is_one_state_per_row(self):
        X = np.array([[0.1, 0.2], [0.3, 0.4]])
        np.testing.assert_array_equal(qdpref.batch("phase", X, 2),
                                      np.stack([qdpref.phase(X[0], 2), qdpref.phase(X[1], 2)]))


class Refusals(unittest.TestCase):
    def refused(self, words, f, *args):
        with self.assertRaises(ValueError) as e:
            f(*args)
        for w in words:
            self.assertIn(w, str(e.exception))

    def test_what_has_no_state_is_refused_with_the_reason(self):
        self.refused(["angle on 3 qubits takes 3 values", "got 2"], qdpref.angle, [1, 2], 3)
        self.refused(["iqp on 3 qubits takes 6 values", "got 3"], qdpref.iqp, [1, 2, 3], 3)
        self.refused(["integer in [0, 8)", "got 8"], qdpref.basis, 8, 3)
        self.refused(["integer in [0, 8)", "got 1.5"], qdpref.basis, 1.5, 3)
        self.refused(["all zeros"], qdpref.amplitude, [0.0, 0.0], 1)
        self.refused(["1 to 2 values", "got 3"], qdpref.amplitude, [1, 2, 3], 1)
        self.refused(["[0, 2^2)", "got 0 to 4"], qdpref.phase, [1, 2], 2, [0, 4])
        self.refused(["'nope'", "amplitude, angle"], qdpref.state, "nope", [1.0], 1)
        self.refused(["complex64 or complex128", "float64"], qdpref.tolerance, "float64")


class AssertClose(unittest.TestCase):
    def test_within_the_tolerance_of_the_dtype_passes(self):
        want = np.array([0.6, 0.8j])
        qdpref.assert_close(want + 0.9e-12, want, "complex128")
        qdpref.assert_close((want + 0.9e-5).astype(np.complex64), want, np.complex64)

    def test_beyond_it_a_nan_or_another_shape_fails_saying_where(self):
        want = np.array([0.6, 0.8])
        for got, dtype, words in ((want + [0, 2e-12], "complex128", ["at (1,)", "2.000e-12"]),
                                  (want + [2e-5, 0], "complex64", ["at (0,)", "2.000e-05"]),
                                  (np.array([0.6, np.nan]), "complex128", ["nan", "at (1,)"]),
                                  (want[:1], "complex128", ["shape (1,)", "expected (2,)"])):
            with self.assertRaises(AssertionError) as e:
                qdpref.assert_close(got, want, dtype, "the case")
            for w in ["the case: "] + words:
                self.assertIn(w, str(e.exception))


if __name__ == "__main__":
    unittest.main()
