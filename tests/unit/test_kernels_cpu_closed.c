/* test_kernels_cpu_closed.c — the closed forms of the index on the CPU: angle and phase against
 * hand-computed states, a long double product (angle) or closed-form (phase) reference, windows of
 * a 40-qubit state and their own sharded spans; basis, its strides and its shards. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kernels_cpu_fixture.h"
#include "qdpk.h"

/* ---- angle and phase ------------------------------------------------------------------------ */

static long double angle_ref(const void *x, qdp_dtype in, uint64_t base, uint32_t n, uint64_t b) {
  long double p = 1;
  for (uint32_t k = 0; k < n; k++) {
    long double a = in_at(x, in, base + k);
    p *= ((b >> k) & 1) ? sinl(a) : cosl(a);
  }
  return p;
}

/* The closed form 2^(-n/2) e^{i sum}, not a product: an independent route to the same values. */
static void phase_ref(const void *x, qdp_dtype in, uint64_t base, uint32_t n, uint64_t b,
                      long double *re, long double *im) {
  long double sum = 0;
  for (uint32_t k = 0; k < n; k++) {
    if ((b >> k) & 1) {
      sum += in_at(x, in, base + k);
    }
  }
  long double scale = powl(2.0L, -(long double)n / 2);
  *re = scale * cosl(sum);
  *im = scale * sinl(sum);
}

START_TEST(test_angle_hand_computed_two_qubits) {
  /* x = (pi/3, pi/4): cos = (1/2, sqrt(2)/2), sin = (sqrt(3)/2, sqrt(2)/2). */
  double v[2] = {M_PI / 3, M_PI / 4};
  double want[4] = {0.3535533905932738, 0.6123724356957946, 0.3535533905932738, 0.6123724356957946};
  for (int io = 0; io < 2; io++) {
    void *x = make_input(IN_TYPES[io], v, 2);
    for (int oo = 0; oo < 2; oo++) {
      qdp_dtype out = OUT_TYPES[oo];
      double o[8];
      struct qdpk_span s = span_of(2, 0, 4, 1, out);
      qdpk_cpu_angle(&s, x, IN_TYPES[io], 2, o);
      double tol = (out == QDP_DTYPE_COMPLEX64 || IN_TYPES[io] == QDP_DTYPE_FLOAT32) ? 1e-6 : 1e-15;
      for (int b = 0; b < 4; b++) {
        ck_assert_double_eq_tol(re_at(o, out, b), want[b], tol);
        ck_assert_double_eq(im_at(o, out, b), 0.0);
      }
    }
    free(x);
  }
}
END_TEST

START_TEST(test_angle_bit_order_first_qubit_is_bit_zero) {
  double v[3] = {M_PI / 2, 0, 0};
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    double o[16];
    struct qdpk_span s = span_of(3, 0, 8, 1, out);
    qdpk_cpu_angle(&s, v, QDP_DTYPE_FLOAT64, 3, o);
    ck_assert_double_eq_tol(re_at(o, out, 1), 1.0, 1e-7);
    for (int b = 0; b < 8; b++) {
      if (b != 1) {
        ck_assert_double_eq_tol(re_at(o, out, b), 0.0, 1e-7);
      }
    }
  }
}
END_TEST

/* With x/2 the single qubit at x = pi would be (0, 1); with x it is (-1, 0). */
START_TEST(test_angle_uses_x_not_half_x) {
  double v[1] = {M_PI};
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    double o[4];
    struct qdpk_span s = span_of(1, 0, 2, 1, out);
    qdpk_cpu_angle(&s, v, QDP_DTYPE_FLOAT64, 1, o);
    ck_assert_double_eq_tol(re_at(o, out, 0), -1.0, 1e-7);
    ck_assert_double_eq_tol(re_at(o, out, 1), 0.0, 1e-7);
  }
}
END_TEST

START_TEST(test_phase_hand_computed) {
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    double tol = out == QDP_DTYPE_COMPLEX64 ? 1e-7 : 1e-15;
    double o[8];
    /* One qubit at pi/2: (1, i) / sqrt(2). */
    double v1[1] = {M_PI / 2};
    struct qdpk_span s1 = span_of(1, 0, 2, 1, out);
    qdpk_cpu_phase(&s1, v1, QDP_DTYPE_FLOAT64, 1, o);
    ck_assert_double_eq_tol(re_at(o, out, 0), M_SQRT1_2, tol);
    ck_assert_double_eq_tol(im_at(o, out, 0), 0.0, tol);
    ck_assert_double_eq_tol(re_at(o, out, 1), 0.0, tol);
    ck_assert_double_eq_tol(im_at(o, out, 1), M_SQRT1_2, tol);
    /* (pi/2, pi): (1, i, -1, -i) / 2. */
    double v2[2] = {M_PI / 2, M_PI};
    struct qdpk_span s2 = span_of(2, 0, 4, 1, out);
    qdpk_cpu_phase(&s2, v2, QDP_DTYPE_FLOAT64, 2, o);
    double wre[4] = {0.5, 0, -0.5, 0}, wim[4] = {0, 0.5, 0, -0.5};
    for (int b = 0; b < 4; b++) {
      ck_assert_double_eq_tol(re_at(o, out, b), wre[b], tol);
      ck_assert_double_eq_tol(im_at(o, out, b), wim[b], tol);
    }
  }
}
END_TEST

/* Batches of rows with different parameters, each against the long double reference; n runs past
 * the table split (10 bits) so the high-bit product is exercised. */
static void check_closed_form(span_kernel k, int is_phase) {
  static const uint32_t qubits[] = {1, 2, 3, 7, 10, 11, 13};
  uint64_t rows = 3, stride = 17;
  double v[3 * 17];
  qdpt_rng_seed(is_phase ? 32 : 31);
  for (int i = 0; i < 3 * 17; i++) {
    v[i] = qdpt_rng_uniform(-PI_L, PI_L);
  }
  for (size_t qi = 0; qi < sizeof(qubits) / sizeof(qubits[0]); qi++) {
    uint32_t n = qubits[qi];
    uint64_t count = UINT64_C(1) << n;
    long double *re = qdpt_xmalloc(count * sizeof(long double)),
                *im = qdpt_xmalloc(count * sizeof(long double));
    for (int io = 0; io < 2; io++) {
      void *x = make_input(IN_TYPES[io], v, 3 * 17);
      for (int oo = 0; oo < 2; oo++) {
        qdp_dtype out = OUT_TYPES[oo];
        char *o = qdpt_xmalloc(rows * count * cplx_size(out));
        struct qdpk_span s = span_of(n, 0, count, rows, out);
        k(&s, x, IN_TYPES[io], stride, o);
        for (uint64_t r = 0; r < rows; r++) {
          for (uint64_t b = 0; b < count; b++) {
            if (is_phase) {
              phase_ref(x, IN_TYPES[io], r * stride, n, b, &re[b], &im[b]);
            } else {
              re[b] = angle_ref(x, IN_TYPES[io], r * stride, n, b);
              im[b] = 0;
            }
          }
          assert_state_close(o + r * count * cplx_size(out), out, re, im, count,
                             is_phase ? "phase" : "angle");
        }
        assert_rows_normalized(o, out, count, rows);
        free(o);
      }
      free(x);
    }
    free(re);
    free(im);
  }
}

/* A window of a 40-qubit state, far from index 0 and across table boundaries. */
static void check_high_window(span_kernel k, int is_phase) {
  uint32_t n = 40;
  uint64_t rows = 2, first = (UINT64_C(1) << 39) + (UINT64_C(1) << 25) + 1000, count = 3000;
  double v[80];
  qdpt_rng_seed(is_phase ? 34 : 33);
  for (int i = 0; i < 80; i++) {
    v[i] = qdpt_rng_uniform(-PI_L, PI_L);
  }
  long double *re = qdpt_xmalloc(count * sizeof(long double)),
              *im = qdpt_xmalloc(count * sizeof(long double));
  for (int oo = 0; oo < 2; oo++) {
    qdp_dtype out = OUT_TYPES[oo];
    char *o = qdpt_xmalloc(rows * count * cplx_size(out));
    struct qdpk_span s = span_of(n, first, count, rows, out);
    k(&s, v, QDP_DTYPE_FLOAT64, 40, o);
    for (uint64_t r = 0; r < rows; r++) {
      for (uint64_t j = 0; j < count; j++) {
        if (is_phase) {
          phase_ref(v, QDP_DTYPE_FLOAT64, r * 40, n, first + j, &re[j], &im[j]);
        } else {
          re[j] = angle_ref(v, QDP_DTYPE_FLOAT64, r * 40, n, first + j);
          im[j] = 0;
        }
      }
      assert_state_close(o + r * count * cplx_size(out), out, re, im, count,
                         is_phase ? "phase window" : "angle window");
    }
    free(o);
  }
  free(re);
  free(im);
}

static void check_sharding(span_kernel k, const char *what) {
  static const uint32_t qubits[] = {3, 10, 12};
  uint64_t rows = 3, stride = 12;
  double v[36];
  qdpt_rng_seed(35);
  for (int i = 0; i < 36; i++) {
    v[i] = qdpt_rng_uniform(-PI_L, PI_L);
  }
  for (size_t qi = 0; qi < 3; qi++) {
    for (int io = 0; io < 2; io++) {
      void *x = make_input(IN_TYPES[io], v, 36);
      for (int oo = 0; oo < 2; oo++) {
        check_spans_bit_identical(k, x, IN_TYPES[io], stride, qubits[qi], rows, OUT_TYPES[oo],
                                  what);
      }
      free(x);
    }
  }
}

START_TEST(test_angle_batch_matches_product_reference) {
  check_closed_form(qdpk_cpu_angle, 0);
}
END_TEST

START_TEST(test_angle_high_qubit_window_matches_reference) {
  check_high_window(qdpk_cpu_angle, 0);
}
END_TEST

START_TEST(test_angle_sharded_spans_bit_identical) {
  check_sharding(qdpk_cpu_angle, "angle span");
}
END_TEST

START_TEST(test_phase_batch_matches_closed_form) {
  check_closed_form(qdpk_cpu_phase, 1);
}
END_TEST

START_TEST(test_phase_high_qubit_window_matches_closed_form) {
  check_high_window(qdpk_cpu_phase, 1);
}
END_TEST

START_TEST(test_phase_sharded_spans_bit_identical) {
  check_sharding(qdpk_cpu_phase, "phase span");
}
END_TEST

/* ---- basis -------------------------------------------------------------------------------- */

START_TEST(test_basis_index_three_on_three_qubits) {
  double vd[1] = {3};
  int64_t vi[1] = {3};
  qdp_dtype ins[3] = {QDP_DTYPE_FLOAT32, QDP_DTYPE_FLOAT64, QDP_DTYPE_INT64};
  for (int io = 0; io < 3; io++) {
    void *x = ins[io] == QDP_DTYPE_INT64 ? NULL : make_input(ins[io], vd, 1);
    for (int oo = 0; oo < 2; oo++) {
      qdp_dtype out = OUT_TYPES[oo];
      double o[16];
      memset(o, 0x55, sizeof(o));
      struct qdpk_span s = span_of(3, 0, 8, 1, out);
      qdpk_cpu_basis(&s, x ? x : (void *)vi, ins[io], 1, o);
      for (int b = 0; b < 8; b++) {
        ck_assert_double_eq(re_at(o, out, b), b == 3 ? 1.0 : 0.0);
        ck_assert_double_eq(im_at(o, out, b), 0.0);
      }
    }
    free(x);
  }
}
END_TEST

START_TEST(test_basis_rows_follow_stride) {
  int64_t vi[6] = {0, 99, 7, 99, 5, 99};
  double o[3 * 8 * 2];
  struct qdpk_span s = span_of(3, 0, 8, 3, QDP_DTYPE_COMPLEX128);
  qdpk_cpu_basis(&s, vi, QDP_DTYPE_INT64, 2, o);
  uint64_t want[3] = {0, 7, 5};
  for (uint64_t r = 0; r < 3; r++) {
    for (uint64_t b = 0; b < 8; b++) {
      ck_assert_double_eq(o[2 * (r * 8 + b)], b == want[r] ? 1.0 : 0.0);
      ck_assert_double_eq(o[2 * (r * 8 + b) + 1], 0.0);
    }
  }
}
END_TEST

static void basis_kernel(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t stride,
                         void *out) {
  qdpk_cpu_basis(s, x, in, stride, out);
}

START_TEST(test_basis_sharded_only_owner_writes_one) {
  double v[4] = {0, 1023, 600, 257};
  for (int io = 0; io < 2; io++) {
    void *x = make_input(IN_TYPES[io], v, 4);
    for (int oo = 0; oo < 2; oo++) {
      check_spans_bit_identical(basis_kernel, x, IN_TYPES[io], 1, 10, 4, OUT_TYPES[oo],
                                "basis span");
    }
    free(x);
  }
  /* A span that does not hold the index is all zeros. */
  double o[2 * 256];
  double idx = 600;
  struct qdpk_span s = span_of(10, 0, 256, 1, QDP_DTYPE_COMPLEX128);
  qdpk_cpu_basis(&s, &idx, QDP_DTYPE_FLOAT64, 1, o);
  for (int i = 0; i < 512; i++) {
    ck_assert_double_eq(o[i], 0.0);
  }
  /* The owner writes its 1 at the local offset 600 - 512 = 88. */
  s.first = 512;
  qdpk_cpu_basis(&s, &idx, QDP_DTYPE_FLOAT64, 1, o);
  ck_assert_double_eq(o[2 * 88], 1.0);
}
END_TEST

void kernels_cpu_add_angle(TCase *tc) {
  tcase_add_test(tc, test_angle_hand_computed_two_qubits);
  tcase_add_test(tc, test_angle_bit_order_first_qubit_is_bit_zero);
  tcase_add_test(tc, test_angle_uses_x_not_half_x);
  tcase_add_test(tc, test_angle_batch_matches_product_reference);
  tcase_add_test(tc, test_angle_high_qubit_window_matches_reference);
  tcase_add_test(tc, test_angle_sharded_spans_bit_identical);
}

void kernels_cpu_add_phase(TCase *tc) {
  tcase_add_test(tc, test_phase_hand_computed);
  tcase_add_test(tc, test_phase_batch_matches_closed_form);
  tcase_add_test(tc, test_phase_high_qubit_window_matches_closed_form);
  tcase_add_test(tc, test_phase_sharded_spans_bit_identical);
}

void kernels_cpu_add_basis(TCase *tc) {
  tcase_add_test(tc, test_basis_index_three_on_three_qubits);
  tcase_add_test(tc, test_basis_rows_follow_stride);
  tcase_add_test(tc, test_basis_sharded_only_owner_writes_one);
}
