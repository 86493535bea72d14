/* test_runtime_measure.c — measurements on the CPU backend: probabilities of every basis state and
 * of chosen qubits, and Pauli expectations (Z strings together, X and Y ones with their partner
 * windows), against sums over the state read back in long double, with the same bits from every
 * sharding (one device, 2 and 4 even shards, uneven shards that cut windows, a batch split by
 * sample) and windows small enough that the tree has levels and partners lie in other shards;
 * samples from a seed, the same on every sharding; and the refusals. */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"
#include "plan/plan.h"
#include "runtime/runtime.h"
#include "runtime_fixture.h"

enum { N = 5, DIM = 1 << N };

struct layout {
  const char *name;
  size_t ndev;
  enum plan_policy policy;
};

/* The expectation of (xmask, zmask, ny) over amplitudes psi of one row, in long double. */
static long double expectation(const double complex *psi, struct runtime_pauli p) {
  long double complex sum = 0;
  long double complex ph = (p.ny & 3) == 0 ? 1 : (p.ny & 3) == 1 ? I : (p.ny & 3) == 2 ? -1 : -I;
  for (uint64_t b = 0; b < DIM; b++) {
    long double sign = __builtin_parityll(b & p.zmask) ? -1 : 1;
    sum += conjl((long double complex)psi[b ^ p.xmask]) * ph * sign * (long double complex)psi[b];
  }
  return creall(sum);
}

static const struct runtime_pauli strings[] = {
    {0, 1, 0},         /* Z on qubit 0 */
    {0, 0x11, 0},      /* Z0 Z4 */
    {0x10, 0, 0},      /* X4: its partner window is another shard's */
    {0x3, 0x1, 1},     /* Y0 X1 */
    {0x16, 0x14, 2},   /* X1 Y2 Y4 */
    {0, 0x1f, 0},      /* Z on every qubit */
};
#define NSTRINGS (sizeof strings / sizeof strings[0])

static void same_bits_everywhere(const struct layout *ls, size_t nl, qdp_encoding enc,
                                 uint64_t cols, uint64_t rows) {
  struct runtime_mesh *m = qdpt_mesh("cpu:4", GIB, 0);
  double *x = random_values(rows * cols, 21);
  const uint32_t qubits[3] = {4, 0, 2};
  struct runtime_measure probs = {3, qubits, 0, NULL, 2};
  struct runtime_measure all = {0, NULL, 0, NULL, 2};
  struct runtime_measure ex = {0, NULL, NSTRINGS, strings, 2};
  double *p0 = calloc(rows * 8, 8), *a0 = calloc(rows * DIM, 8), *e0 = calloc(rows * NSTRINGS, 8);
  double *p1 = calloc(rows * 8, 8), *a1 = calloc(rows * DIM, 8), *e1 = calloc(rows * NSTRINGS, 8);
  struct qdp_error e = QDP_ERROR_INIT;
  for (size_t i = 0; i < nl; i++) {
    struct runtime_state *s =
        qdpt_encode_f64(m, ls[i].ndev, ls[i].policy, enc, N, rows, cols, x, QDP_DTYPE_COMPLEX128);
    double *p = i ? p1 : p0, *a = i ? a1 : a0, *ev = i ? e1 : e0;
    ck_assert_msg(runtime_state_measure(m, s, &probs, p, NULL, &e) == QDP_OK, "%s: %s",
                  ls[i].name, e.msg);
    ck_assert_msg(runtime_state_measure(m, s, &all, a, NULL, &e) == QDP_OK, "%s: %s", ls[i].name,
                  e.msg);
    ck_assert_msg(runtime_state_measure(m, s, &ex, ev, NULL, &e) == QDP_OK, "%s: %s", ls[i].name,
                  e.msg);
    if (i > 0) {
      ck_assert_msg(memcmp(p0, p1, rows * 8 * 8) == 0, "%s: other probabilities' bits", ls[i].name);
      ck_assert_msg(memcmp(a0, a1, rows * DIM * 8) == 0, "%s: other bits", ls[i].name);
      ck_assert_msg(memcmp(e0, e1, rows * NSTRINGS * 8) == 0, "%s: other expectations' bits",
                    ls[i].name);
    } else {
      double complex *psi = qdpt_read_all(s);
      for (uint64_t r = 0; r < rows; r++) {
        const double complex *row = psi + r * DIM;
        long double want[8] = {0}, total = 0;
        for (uint64_t b = 0; b < DIM; b++) {
          long double pb = (long double)creal(row[b]) * creal(row[b]) +
                           (long double)cimag(row[b]) * cimag(row[b]);
          unsigned o = (unsigned)(((b >> 4) & 1) | (((b >> 0) & 1) << 1) | (((b >> 2) & 1) << 2));
          want[o] += pb;
          total += pb;
          ck_assert_double_eq_tol(a0[r * DIM + b], (double)pb, 1e-15);
        }
        ck_assert_double_eq_tol((double)total, 1.0, 1e-14);
        for (unsigned o = 0; o < 8; o++) {
          ck_assert_double_eq_tol(p0[r * 8 + o], (double)want[o], 1e-15);
        }
        for (size_t k = 0; k < NSTRINGS; k++) {
          long double w = expectation(row, strings[k]);
          ck_assert_msg(fabsl(e0[r * NSTRINGS + k] - w) < 1e-14,
                        "row %d string %zu: %.17g, the direct sum %.17Lg", (int)r, k,
                        e0[r * NSTRINGS + k], w);
        }
      }
      free(psi);
    }
    runtime_state_destroy(s);
  }
  free(p0);
  free(p1);
  free(a0);
  free(a1);
  free(e0);
  free(e1);
  free(x);
  qdpt_assert_mesh_idle(m, "after the measurements");
  runtime_mesh_destroy(m);
}

START_TEST(test_measure_same_bits_on_any_sharding) {
  static const struct layout batches[] = {
      {"one device", 1, PLAN_SINGLE}, {"3 by sample", 3, PLAN_BATCH}, {"2 by sample", 2, PLAN_BATCH}};
  static const struct layout samples[] = {{"one device", 1, PLAN_SINGLE},
                                          {"2 even", 2, PLAN_EVEN},
                                          {"4 even", 4, PLAN_EVEN},
                                          {"3 uneven", 3, PLAN_UNEVEN}};
  uint64_t iqp_cols = N + N * (N - 1) / 2;
  same_bits_everywhere(batches, 3, QDP_ENCODING_IQP, iqp_cols, 5);
  same_bits_everywhere(samples, 4, QDP_ENCODING_IQP, iqp_cols, 1);
  same_bits_everywhere(samples, 4, QDP_ENCODING_AMPLITUDE, DIM - 5, 1);
}
END_TEST

START_TEST(test_measure_hand_computed_and_refusals) {
  struct runtime_mesh *m = qdpt_mesh("cpu:1", GIB, 0);
  /* (|00> + |11>)/sqrt(2): P(q0) = [1/2, 1/2], <ZZ> = 1, <XX> = 1, <YY> = -1, <ZI> = 0. */
  const double bell[4] = {1, 0, 0, 1};
  struct runtime_state *s =
      qdpt_encode_f64(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, 2, 1, 4, bell, QDP_DTYPE_COMPLEX128);
  const uint32_t q0 = 0;
  double p[2], ev[4];
  struct qdp_error e = QDP_ERROR_INIT;
  struct runtime_measure probs = {1, &q0, 0, NULL, RUNTIME_MEASURE_WINDOW_LOG2};
  ck_assert_int_eq(runtime_state_measure(m, s, &probs, p, NULL, &e), QDP_OK);
  ck_assert_double_eq_tol(p[0], 0.5, 1e-15);
  ck_assert_double_eq_tol(p[1], 0.5, 1e-15);
  const struct runtime_pauli ps[4] = {{0, 3, 0}, {3, 0, 0}, {3, 3, 2}, {0, 1, 0}};
  struct runtime_measure ex = {0, NULL, 4, ps, RUNTIME_MEASURE_WINDOW_LOG2};
  ck_assert_int_eq(runtime_state_measure(m, s, &ex, ev, NULL, &e), QDP_OK);
  ck_assert_double_eq_tol(ev[0], 1.0, 1e-15);
  ck_assert_double_eq_tol(ev[1], 1.0, 1e-15);
  ck_assert_double_eq_tol(ev[2], -1.0, 1e-15);
  ck_assert_double_eq_tol(ev[3], 0.0, 1e-15);
  /* A qubit the state does not have, or named twice; a string past its qubits. */
  const uint32_t bad[2] = {0, 2}, twice[2] = {1, 1};
  struct runtime_measure r1 = {2, bad, 0, NULL, RUNTIME_MEASURE_WINDOW_LOG2};
  ck_assert_int_eq(runtime_state_measure(m, s, &r1, p, NULL, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "qubits");
  struct runtime_measure r2 = {2, twice, 0, NULL, RUNTIME_MEASURE_WINDOW_LOG2};
  ck_assert_int_eq(runtime_state_measure(m, s, &r2, p, NULL, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "twice"));
  const struct runtime_pauli wide = {0, 4, 0};
  struct runtime_measure r3 = {0, NULL, 1, &wide, RUNTIME_MEASURE_WINDOW_LOG2};
  ck_assert_int_eq(runtime_state_measure(m, s, &r3, ev, NULL, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "paulis");
  runtime_state_destroy(s);
  qdpt_assert_mesh_idle(m, "after the measurements");
  runtime_mesh_destroy(m);
}
END_TEST

/* Samples: the same for a seed on every layout, other for another seed, and their frequencies
 * those of the state's probabilities (20000 shots over 32 outcomes: each within 0.02, far beyond
 * 5 standard deviations); with windows of 4 the search goes through gathered windows and shards
 * on the devices, with windows of 2^13 the state's 32 amplitudes (2^(13 - 8)) are searched on the
 * host. A state past window_log2 + 10 qubits refused. */
static void samples_same_on_any_sharding(unsigned window_log2) {
  static const struct layout ls[] = {{"one device", 1, PLAN_SINGLE},
                                     {"2 even", 2, PLAN_EVEN},
                                     {"3 uneven", 3, PLAN_UNEVEN},
                                     {"4 even", 4, PLAN_EVEN}};
  enum { SHOTS = 20000 };
  struct runtime_mesh *m = qdpt_mesh("cpu:4", GIB, 0);
  uint64_t cols = N + N * (N - 1) / 2;
  double *x = random_values(cols, 31);
  int64_t *first = malloc(SHOTS * 8), *got = malloc(SHOTS * 8);
  struct qdp_error e = QDP_ERROR_INIT;
  for (size_t i = 0; i < 4; i++) {
    struct runtime_state *s =
        qdpt_encode_f64(m, ls[i].ndev, ls[i].policy, QDP_ENCODING_IQP, N, 1, cols, x,
                        QDP_DTYPE_COMPLEX128);
    ck_assert_msg(runtime_state_sample(m, s, SHOTS, 7, window_log2, i ? got : first, NULL, &e) == QDP_OK,
                  "%s: %s", ls[i].name, e.msg);
    if (i > 0) {
      ck_assert_msg(memcmp(first, got, SHOTS * 8) == 0, "%s: other samples", ls[i].name);
    } else {
      double complex *psi = qdpt_read_all(s);
      double freq[DIM] = {0};
      for (int k = 0; k < SHOTS; k++) {
        ck_assert(first[k] >= 0 && first[k] < DIM);
        freq[first[k]] += 1.0 / SHOTS;
      }
      for (int b = 0; b < DIM; b++) {
        double p = creal(psi[b]) * creal(psi[b]) + cimag(psi[b]) * cimag(psi[b]);
        ck_assert_msg(fabs(freq[b] - p) < 0.02, "outcome %d: frequency %g, probability %g", b,
                      freq[b], p);
      }
      free(psi);
      ck_assert_int_eq(runtime_state_sample(m, s, SHOTS, 8, window_log2, got, NULL, &e), QDP_OK);
      ck_assert(memcmp(first, got, SHOTS * 8) != 0);
    }
    runtime_state_destroy(s);
  }
  free(x);
  free(first);
  free(got);
  qdpt_assert_mesh_idle(m, "after the samples");
  runtime_mesh_destroy(m);
}

START_TEST(test_samples_same_on_any_sharding) {
  samples_same_on_any_sharding(2);
  samples_same_on_any_sharding(13);
  /* 13 qubits with windows of 4 amplitudes: past 2 + 10. */
  struct runtime_mesh *m = qdpt_mesh("cpu:1", GIB, 0);
  double *y = random_values(1 << 13, 32);
  int64_t got[4];
  struct qdp_error e = QDP_ERROR_INIT;
  struct runtime_state *big = qdpt_encode_f64(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, 13, 1,
                                              1 << 13, y, QDP_DTYPE_COMPLEX128);
  ck_assert_int_eq(runtime_state_sample(m, big, 4, 1, 2, got, NULL, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "state");
  runtime_state_destroy(big);
  free(y);
  runtime_mesh_destroy(m);
}
END_TEST

void runtime_add_measure(TCase *tc) {
  tcase_add_test(tc, test_samples_same_on_any_sharding);
  tcase_add_test(tc, test_measure_hand_computed_and_refusals);
  tcase_add_test(tc, test_measure_same_bits_on_any_sharding);
}
