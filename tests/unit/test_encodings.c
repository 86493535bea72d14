/* Unit test of the encodings table (qdp_defs.h's QDP_ENCODINGS, common/qdp_encodings.h) and the
 * backends' tables of kernels: every row is whole and consistent with what the runtime supports,
 * every backend that is built has the kernel each row needs, and the CPU table runs the right
 * kernel for each row (its amplitudes against the formulas of docs/design.md, written out here for
 * two qubits). The NumPy reference and the manual pages are checked against the table by
 * test_encoding_table.py. */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "qdp_encodings.h"
#include "qdpk.h"
#if QDP_TEST_CUDA
#include "qdpk_cuda.h"
#endif

START_TEST(test_every_row_is_whole_and_named_once) {
  ck_assert_int_gt(QDP_ENCODING_COUNT, 1);
  ck_assert_ptr_null(qdp_encoding_desc(QDP_ENCODING_UNSPECIFIED));
  ck_assert_ptr_null(qdp_encoding_desc((qdp_encoding)QDP_ENCODING_COUNT));
  for (unsigned e = 1; e < QDP_ENCODING_COUNT; e++) {
    const struct qdp_encoding_desc *d = qdp_encoding_desc((qdp_encoding)e);
    ck_assert_msg(d != NULL, "no encoding has number %u: the numbers must be 1..rows", e);
    ck_assert_uint_eq(d->id, e);
    ck_assert_msg(d->name && d->name[0], "encoding %u has no name", e);
    ck_assert_str_eq(qdp_encoding_name((qdp_encoding)e), d->name);
    ck_assert_uint_eq(qdp_encoding_from_name(d->name), e);
    for (unsigned f = 1; f < e; f++) {
      ck_assert_msg(strcmp(d->name, qdp_encoding_desc((qdp_encoding)f)->name) != 0,
                    "encodings %u and %u are both named %s", f, e, d->name);
    }
    ck_assert_msg(d->count && d->count[0] && d->noun && d->noun[0],
                  "%s says nothing of its values for help texts", d->name);
    ck_assert_msg(d->dtypes != 0 && (d->dtypes & ~QDP_DTYPES_FLOAT_INT64) == 0,
                  "%s takes input dtypes 0x%x: float32, float64 or int64 only", d->name, d->dtypes);
    ck_assert_uint_eq(qdp_values_per_sample((qdp_encoding)e, 0), 0);
    ck_assert_uint_eq(qdp_values_per_sample((qdp_encoding)e, 64), 0);
    for (uint32_t n = 1; n <= 63; n++) {
      uint64_t v = qdp_values_per_sample((qdp_encoding)e, n);
      ck_assert_msg(v >= 1, "%s takes no values for %u qubits", d->name, n);
      ck_assert_msg(d->layout != QDP_LAYOUT_AMPLITUDES || v == UINT64_C(1) << n,
                    "%s lays its values out by amplitude but takes %llu of them for %u qubits",
                    d->name, (unsigned long long)v, n);
    }
  }
  ck_assert_uint_eq(qdp_encoding_from_name("sideways"), QDP_ENCODING_UNSPECIFIED);
  ck_assert_uint_eq(qdp_encoding_from_name(NULL), QDP_ENCODING_UNSPECIFIED);
  ck_assert_ptr_null(qdp_encoding_name(QDP_ENCODING_UNSPECIFIED));
}
END_TEST

/* The executor runs a NORM reduction over values laid out by amplitude, whose checks are the
 * reduction's own, and exchanges over the global bits only between shards of parameters. */
START_TEST(test_every_row_needs_what_the_runtime_runs) {
  for (unsigned e = 1; e < QDP_ENCODING_COUNT; e++) {
    const struct qdp_encoding_desc *d = qdp_encoding_desc((qdp_encoding)e);
    bool norm = d->reduction == QDP_REDUCTION_NORM;
    ck_assert_msg(norm == (d->layout == QDP_LAYOUT_AMPLITUDES),
                  "%s: the norm reduction is the one path for values laid out by amplitude",
                  d->name);
    ck_assert_msg(norm == (d->check == QDP_CHECK_NONE),
                  "%s: only the norm reduction checks the values itself", d->name);
    ck_assert_msg(!norm || d->exchange == QDP_EXCHANGE_NONE,
                  "%s: a norm reduction with an exchange has no executor", d->name);
  }
}
END_TEST

START_TEST(test_the_text_lists_come_from_the_table) {
  char buf[256];
  int n = qdp_encoding_names(buf, sizeof buf, " or ");
  ck_assert_int_eq(n, (int)strlen(buf));
  ck_assert_str_eq(buf, "amplitude, angle, basis, iqp, iqp-z or phase");
  char small[8];
  ck_assert_int_eq(qdp_encoding_names(small, sizeof small, " or "), n);
  ck_assert_str_eq(small, "amplitu");
  qdp_dtype_names(qdp_encoding_desc(QDP_ENCODING_BASIS)->dtypes, buf, sizeof buf, " or ");
  ck_assert_str_eq(buf, "float32 or float64 or int64");
  qdp_dtype_names(qdp_encoding_desc(QDP_ENCODING_ANGLE)->dtypes, buf, sizeof buf, ", ");
  ck_assert_str_eq(buf, "float32, float64");
  /* An input before its encoding is known: today's set, floats and basis's integer indices. */
  ck_assert_uint_eq(qdp_input_dtypes(), (1u << QDP_DTYPE_FLOAT32) | (1u << QDP_DTYPE_FLOAT64) |
                                            (1u << QDP_DTYPE_INT64));
  n = qdp_input_dtypes_text(buf, sizeof buf);
  ck_assert_int_eq(n, (int)strlen(buf));
  ck_assert_str_eq(buf, "float32 or float64 (basis also int64)");
}
END_TEST

/* A backend's table must have, for every row, the kernel its reduction runs. */
#define CK_KERNELS(lookup, backend) \
  do { \
    for (unsigned e_ = 1; e_ < QDP_ENCODING_COUNT; e_++) { \
      const struct qdp_encoding_desc *d_ = qdp_encoding_desc((qdp_encoding)e_); \
      bool norm_ = d_->reduction == QDP_REDUCTION_NORM; \
      ck_assert_msg(lookup((qdp_encoding)e_) != NULL, "the %s table has no row for %s", backend, \
                    d_->name); \
      ck_assert_msg(lookup((qdp_encoding)e_)->name != NULL, "%s: %s's kernel has no name", \
                    backend, d_->name); \
      ck_assert_msg(norm_ ? lookup((qdp_encoding)e_)->scale != NULL \
                          : lookup((qdp_encoding)e_)->encode != NULL, \
                    "the %s table has no %s kernel for %s", backend, norm_ ? "scale" : "encode", \
                    d_->name); \
    } \
    ck_assert_ptr_null(lookup(QDP_ENCODING_UNSPECIFIED)); \
    ck_assert_ptr_null(lookup((qdp_encoding)QDP_ENCODING_COUNT)); \
  } while (0)

START_TEST(test_the_cpu_backend_has_every_kernel) {
  CK_KERNELS(qdpk_cpu_encoder, "CPU");
}
END_TEST

#if QDP_TEST_CUDA
START_TEST(test_the_cuda_backend_has_every_kernel) {
  CK_KERNELS(qdpk_cuda_encoder, "CUDA");
}
END_TEST
#endif

/* ---- the CPU table runs each row's own kernel: two qubits against the formulas ---- */

static int bit(unsigned b, unsigned k) {
  return (b >> k) & 1u;
}

/* psi_b of docs/design.md's table for sample x of 2 qubits. */
static double complex formula(qdp_encoding e, const double *x, unsigned b) {
  double complex sum = 0;
  switch (e) {
  case QDP_ENCODING_AMPLITUDE: /* x holds 3 values, the 4th is padding */
    return b < 3 ? x[b] / sqrt(x[0] * x[0] + x[1] * x[1] + x[2] * x[2]) : 0;
  case QDP_ENCODING_ANGLE:
    return (bit(b, 0) ? sin(x[0]) : cos(x[0])) * (bit(b, 1) ? sin(x[1]) : cos(x[1]));
  case QDP_ENCODING_BASIS:
    return b == (unsigned)x[0] ? 1 : 0;
  case QDP_ENCODING_PHASE:
    return 0.5 * cexp(I * (x[0] * bit(b, 0) + x[1] * bit(b, 1)));
  case QDP_ENCODING_IQP:
  case QDP_ENCODING_IQP_Z:
    for (unsigned z = 0; z < 4; z++) {
      double theta = x[0] * bit(z, 0) + x[1] * bit(z, 1);
      theta += e == QDP_ENCODING_IQP ? x[2] * bit(z, 0) * bit(z, 1) : 0;
      sum += (__builtin_popcount(z & b) & 1 ? -1.0 : 1.0) * cexp(I * theta);
    }
    return sum / 4;
  default:
    ck_abort_msg("encoding %d has no formula in this test: write it from docs/design.md", (int)e);
    return 0;
  }
}

START_TEST(test_the_cpu_table_runs_each_rows_kernel) {
  for (unsigned e = 1; e < QDP_ENCODING_COUNT; e++) {
    const struct qdp_encoding_desc *d = qdp_encoding_desc((qdp_encoding)e);
    const struct qdpk_cpu_encoder *k = qdpk_cpu_encoder((qdp_encoding)e);
    const double x[3] = {e == QDP_ENCODING_BASIS ? 2.0 : 0.3, 0.7, -1.1};
    double out[8] = {0};
    struct qdpk_span s = {
        .qubits = 2, .first = 0, .count = 4, .rows = 1, .out = QDP_DTYPE_COMPLEX128};
    uint64_t values = qdp_values_per_sample((qdp_encoding)e, 2);
    if (d->reduction == QDP_REDUCTION_NORM) {
      double sumsq = x[0] * x[0] + x[1] * x[1] + x[2] * x[2];
      k->scale(&s, x, QDP_DTYPE_FLOAT64, 3, 3, &sumsq, NULL, out);
    } else {
      ck_assert_int_eq(k->encode(&s, x, QDP_DTYPE_FLOAT64, values, out), 0);
    }
    bool imaginary = false;
    for (unsigned b = 0; b < 4; b++) {
      double complex want = formula((qdp_encoding)e, x, b);
      ck_assert_msg(
          fabs(out[2 * b] - creal(want)) < 1e-12 && fabs(out[2 * b + 1] - cimag(want)) < 1e-12,
          "%s: psi_%u is %g%+gi, the formula gives %g%+gi", d->name, b, out[2 * b], out[2 * b + 1],
          creal(want), cimag(want));
      imaginary = imaginary || out[2 * b + 1] != 0;
    }
    ck_assert_msg(imaginary != d->real, "%s's row says its states are %s, but this one is %s",
                  d->name, d->real ? "real" : "complex", imaginary ? "complex" : "real");
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("encodings");
  TCase *tc = tcase_create("table");
  tcase_add_test(tc, test_every_row_is_whole_and_named_once);
  tcase_add_test(tc, test_every_row_needs_what_the_runtime_runs);
  tcase_add_test(tc, test_the_text_lists_come_from_the_table);
  suite_add_tcase(s, tc);
  tc = tcase_create("kernels");
  tcase_add_test(tc, test_the_cpu_backend_has_every_kernel);
#if QDP_TEST_CUDA
  tcase_add_test(tc, test_the_cuda_backend_has_every_kernel);
#endif
  tcase_add_test(tc, test_the_cpu_table_runs_each_rows_kernel);
  suite_add_tcase(s, tc);
  return qdpt_run_suite(s, CK_FORK_GETENV);
}
