/* test_runtime_kernel.c — the kernel matrix on the CPU backend: a hand-computed pair, the same
 * bits from every sharding of both states (one device, 2 and 4 even shards, uneven shards that
 * cut blocks, a batch split by sample) with blocks and tiles small enough that the tree has
 * levels and a state with itself has mirrored tiles, values against the direct sum in long
 * double, real states (amplitude) and complex ones (iqp), and its refusals; the form from inputs
 * in tiles against the same sums and the resident form's bits. */
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

START_TEST(test_kernel_hand_computed) {
  struct runtime_mesh *m = qdpt_mesh("cpu:1", GIB, 0);
  /* |0> and (|0> + |1>)/sqrt(2): overlap 1/sqrt(2), fidelity 1/2. */
  const double x[4] = {1, 0, 1, 1};
  struct runtime_state *s =
      qdpt_encode_f64(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, 1, 2, 2, x, QDP_DTYPE_COMPLEX128);
  double k[4];
  double complex o[4];
  struct qdp_error e = QDP_ERROR_INIT;
  const char *dev = NULL;
  ck_assert_int_eq(runtime_state_kernel(m, s, NULL, false, RUNTIME_KERNEL_TILES, k, &dev, &e),
                   QDP_OK);
  ck_assert_str_eq(dev, "cpu:0");
  ck_assert_double_eq_tol(k[0], 1.0, 1e-15);
  ck_assert_double_eq_tol(k[1], 0.5, 1e-15);
  ck_assert_double_eq(k[1], k[2]);
  ck_assert_double_eq_tol(k[3], 1.0, 1e-15);
  ck_assert_int_eq(runtime_state_kernel(m, s, s, true, RUNTIME_KERNEL_TILES, o, NULL, &e),
                   QDP_OK);
  ck_assert_double_eq_tol(creal(o[1]), 1 / sqrt(2.0), 1e-15);
  ck_assert_double_eq(cimag(o[1]), 0.0);
  runtime_state_destroy(s);
  qdpt_assert_mesh_idle(m, "after the kernel");
  runtime_mesh_destroy(m);
}
END_TEST

enum { QUBITS = 5, DIM = 1 << QUBITS };
/* Blocks of 4 amplitudes (a tree of 8 leaves) and tiles of 3 rows: every path of the driver. */
#define SMALL_TILES ((struct runtime_kernel_tiles){2, 3})

/* A layout of a batch of `rows` samples: policies that split one state's amplitudes hold one
 * sample (the planner's rule), so they are compared on single samples. */
struct layout {
  const char *name;
  size_t ndev;
  enum plan_policy policy;
};

static const struct layout batches[] = {{"one device", 1, PLAN_SINGLE},
                                        {"3 by sample", 3, PLAN_BATCH},
                                        {"2 by sample", 2, PLAN_BATCH}};
static const struct layout samples[] = {{"one device", 1, PLAN_SINGLE},
                                        {"2 even", 2, PLAN_EVEN},
                                        {"4 even", 4, PLAN_EVEN},
                                        {"3 uneven", 3, PLAN_UNEVEN}};

/* The kernels of a (rows samples of x) with itself and with b (rows - 1 samples of y, 1 when
 * rows is 1) for each layout, layout i's a against layout i+1's b: every result must have the
 * bits of the first layout's, which is checked against the direct sum in long double. */
static void same_bits_everywhere(const struct layout *ls, size_t nl, qdp_encoding enc,
                                 uint64_t cols, uint64_t rows) {
  uint64_t brows = rows > 1 ? rows - 1 : 1;
  struct runtime_mesh *m = qdpt_mesh("cpu:4", GIB, 0);
  double *x = random_values(rows * cols, 11), *y = random_values(brows * cols, 12);
  struct runtime_state *a[4], *b[4];
  for (size_t i = 0; i < nl; i++) {
    a[i] = qdpt_encode_f64(m, ls[i].ndev, ls[i].policy, enc, QUBITS, rows, cols, x,
                           QDP_DTYPE_COMPLEX128);
    b[i] = qdpt_encode_f64(m, ls[i].ndev, ls[i].policy, enc, QUBITS, brows, cols, y,
                           QDP_DTYPE_COMPLEX128);
  }
  double complex *pa = qdpt_read_all(a[0]), *pb = qdpt_read_all(b[0]);
  struct qdp_error e = QDP_ERROR_INIT;
  double complex *self = calloc(rows * rows, sizeof *self), *cross = calloc(rows * brows, 16);
  double complex *self0 = calloc(rows * rows, sizeof *self), *cross0 = calloc(rows * brows, 16);
  double *kk = calloc(rows * brows, 8), *kk0 = calloc(rows * brows, 8);
  for (size_t i = 0; i < nl; i++) {
    const struct runtime_state *other = b[(i + 1) % nl];
    ck_assert_msg(runtime_state_kernel(m, a[i], NULL, true, SMALL_TILES, self, NULL, &e) == QDP_OK,
                  "%s: %s", ls[i].name, e.msg);
    ck_assert_msg(runtime_state_kernel(m, a[i], other, true, SMALL_TILES, cross, NULL, &e) == QDP_OK,
                  "%s: %s", ls[i].name, e.msg);
    ck_assert_msg(runtime_state_kernel(m, a[i], other, false, SMALL_TILES, kk, NULL, &e) == QDP_OK,
                  "%s: %s", ls[i].name, e.msg);
    if (i > 0) {
      ck_assert_msg(memcmp(self, self0, rows * rows * 16) == 0, "%s: other bits than %s",
                    ls[i].name, ls[0].name);
      ck_assert_msg(memcmp(cross, cross0, rows * brows * 16) == 0,
                    "%s against %s: other bits than %s", ls[i].name, ls[(i + 1) % nl].name,
                    ls[0].name);
      ck_assert_msg(memcmp(kk, kk0, rows * brows * 8) == 0, "%s: other bits than %s", ls[i].name,
                    ls[0].name);
      continue;
    }
    memcpy(self0, self, rows * rows * 16);
    memcpy(cross0, cross, rows * brows * 16);
    memcpy(kk0, kk, rows * brows * 8);
    for (uint64_t r = 0; r < rows; r++) {
      for (uint64_t c = 0; c < brows; c++) {
        long double re = 0, im = 0;
        for (int j = 0; j < DIM; j++) {
          long double ar = creal(pa[r * DIM + j]), ai = cimag(pa[r * DIM + j]);
          long double br = creal(pb[c * DIM + j]), bi = cimag(pb[c * DIM + j]);
          re += ar * br + ai * bi;
          im += ar * bi - ai * br;
        }
        double complex got = cross[r * brows + c];
        ck_assert_msg(fabsl(creal(got) - re) < 1e-14 && fabsl(cimag(got) - im) < 1e-14,
                      "<a_%d|b_%d> = %.17g%+.17gi, the direct sum %.17Lg%+.17Lgi", (int)r, (int)c,
                      creal(got), cimag(got), re, im);
        ck_assert_double_eq_tol(kk[r * brows + c], (double)(re * re + im * im), 1e-14);
      }
      ck_assert_double_eq_tol(creal(self[r * rows + r]), 1.0, 1e-14);
      for (uint64_t c = 0; c < rows; c++) {
        long double re = 0, im = 0;
        for (int j = 0; j < DIM; j++) {
          long double ar = creal(pa[r * DIM + j]), ai = cimag(pa[r * DIM + j]);
          long double br = creal(pa[c * DIM + j]), bi = cimag(pa[c * DIM + j]);
          re += ar * br + ai * bi;
          im += ar * bi - ai * br;
        }
        double complex got = self[r * rows + c];
        ck_assert_msg(fabsl(creal(got) - re) < 1e-14 && fabsl(cimag(got) - im) < 1e-14,
                      "<a_%d|a_%d> = %.17g%+.17gi, the direct sum %.17Lg%+.17Lgi", (int)r, (int)c,
                      creal(got), cimag(got), re, im);
        if (c < r) {
          ck_assert(got == conj(self[c * rows + r]));
        }
      }
    }
  }
  for (size_t i = 0; i < nl; i++) {
    runtime_state_destroy(a[i]);
    runtime_state_destroy(b[i]);
  }
  free(self);
  free(cross);
  free(self0);
  free(cross0);
  free(kk);
  free(kk0);
  free(pa);
  free(pb);
  free(x);
  free(y);
  qdpt_assert_mesh_idle(m, "after the kernels");
  runtime_mesh_destroy(m);
}

/* iqp's states are complex: the overlaps' imaginary parts and their conjugates count. */
START_TEST(test_kernel_same_bits_on_any_sharding) {
  uint64_t iqp_cols = QUBITS + QUBITS * (QUBITS - 1) / 2;
  same_bits_everywhere(batches, 3, QDP_ENCODING_AMPLITUDE, DIM - 3, 6);
  same_bits_everywhere(batches, 3, QDP_ENCODING_IQP, iqp_cols, 7);
  same_bits_everywhere(samples, 4, QDP_ENCODING_AMPLITUDE, DIM - 3, 1);
  same_bits_everywhere(samples, 4, QDP_ENCODING_IQP, iqp_cols, 1);
}
END_TEST

START_TEST(test_kernel_refusals) {
  /* A device whose budget the state fills: no room for the workspace, refused with the numbers
   * and nothing kept. */
  uint64_t bytes = 2 * 16 * 16 + 32; /* the state and its norm's workspace */
  struct runtime_mesh *m = qdpt_mesh("cpu:1", bytes, 0);
  double *x = random_values(2 * 16, 3);
  struct runtime_state *s =
      qdpt_encode_f64(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, 4, 2, 16, x, QDP_DTYPE_COMPLEX128);
  double k[4];
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(runtime_state_kernel(m, s, NULL, false, RUNTIME_KERNEL_TILES, k, NULL, &e),
                   QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg, "cpu:0"));
  ck_assert_uint_gt(e.need_bytes, 0);
  ck_assert_uint_eq(e.free_bytes, 32);
  ck_assert_uint_eq(qdpt_used_on(m, 0), 2 * 16 * 16);
  runtime_state_destroy(s);
  runtime_mesh_destroy(m);
  /* Other qubits: field "b". */
  m = qdpt_mesh("cpu:1", GIB, 0);
  s = qdpt_encode_f64(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, 4, 2, 16, x, QDP_DTYPE_COMPLEX128);
  struct runtime_state *t = qdpt_encode_f64(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, 3, 1, 8, x, QDP_DTYPE_COMPLEX128);
  ck_assert_int_eq(runtime_state_kernel(m, s, t, false, RUNTIME_KERNEL_TILES, k, NULL, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "b");
  ck_assert_ptr_nonnull(strstr(e.msg, "3 qubits"));
  runtime_state_destroy(s);
  runtime_state_destroy(t);
  free(x);
  qdpt_assert_mesh_idle(m, "after the refusals");
  runtime_mesh_destroy(m);
}
END_TEST

/* ---- from inputs ---- */

/* The matrices from inputs against the direct sums over the resident states' amplitudes, a of 7
 * rows by b of 6 and a with itself: by rows (amplitude, iqp) in the tiling's tiles of 3 with no
 * bound and under one that holds fewer (two tiles of 3 rows of states: iqp's 3, amplitude's 2
 * with its real parts' operands); by blocks (angle, phase) of 4 amplitudes of every row with no
 * bound and of 2 under one; and with no bound, the bits of the resident form's same tiles. */
static void from_inputs(qdp_encoding enc, uint64_t cols) {
  enum { ROWS = 7, BROWS = 6 };
  struct runtime_mesh *m = qdpt_mesh("cpu:2", GIB, 0);
  double *x = random_values(ROWS * cols, 21), *y = random_values(BROWS * cols, 22);
  struct runtime_input ia = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = ROWS, .cols = cols};
  struct runtime_input ib = {.data = y, .dtype = QDP_DTYPE_FLOAT64, .rows = BROWS, .cols = cols};
  struct plan *pa = qdpt_plan_on(m, 1, PLAN_SINGLE, enc, QUBITS, ROWS, cols, QDP_DTYPE_FLOAT64,
                                 QDP_DTYPE_COMPLEX128);
  struct plan *pb = qdpt_plan_on(m, 1, PLAN_SINGLE, enc, QUBITS, BROWS, cols, QDP_DTYPE_FLOAT64,
                                 QDP_DTYPE_COMPLEX128);
  struct runtime_kernel_input a = {&ia, pa}, b = {&ib, pb};
  bool by_blocks = plan_windows_amplitudes(enc);
  /* Rows: two tiles of 3 rows of 2^5 complex amplitudes. Blocks: 2 amplitudes of each of the 7
   * rows, operands and (angle's real states) the encode's buffer. */
  uint64_t bound = by_blocks ? 7 * 2 * 32 : 2 * 3 * DIM * 16;
  struct runtime_state *sa = qdpt_encode_f64(m, 1, PLAN_SINGLE, enc, QUBITS, ROWS, cols, x,
                                             QDP_DTYPE_COMPLEX128);
  struct runtime_state *sb = qdpt_encode_f64(m, 1, PLAN_SINGLE, enc, QUBITS, BROWS, cols, y,
                                             QDP_DTYPE_COMPLEX128);
  double complex *va = qdpt_read_all(sa), *vb = qdpt_read_all(sb);
  double complex self[ROWS * ROWS], cross[ROWS * BROWS], want[ROWS * BROWS];
  double kk[ROWS * BROWS];
  struct qdp_error e = QDP_ERROR_INIT;
  for (int bounded = 0; bounded < 2; bounded++) {
    uint64_t mb = bounded ? bound : 0;
    const char *dev = NULL;
    CK_OK_AT(runtime_inputs_kernel(m, &a, NULL, true, SMALL_TILES, mb, self, &dev, &e), e,
             "self, max_bytes %d", (int)mb);
    ck_assert_str_eq(dev, "cpu:0");
    CK_OK_AT(runtime_inputs_kernel(m, &a, &b, true, SMALL_TILES, mb, cross, NULL, &e), e, "cross");
    CK_OK_AT(runtime_inputs_kernel(m, &a, &b, false, SMALL_TILES, mb, kk, NULL, &e), e, "K");
    for (int r = 0; r < ROWS; r++) {
      for (int c = 0; c < ROWS + BROWS; c++) {
        const double complex *v = c < ROWS ? va + c * DIM : vb + (c - ROWS) * DIM;
        long double re = 0, im = 0;
        for (int j = 0; j < DIM; j++) {
          long double ar = creal(va[r * DIM + j]), ai = cimag(va[r * DIM + j]);
          re += ar * creal(v[j]) + ai * cimag(v[j]);
          im += ar * cimag(v[j]) - ai * creal(v[j]);
        }
        double complex got = c < ROWS ? self[r * ROWS + c] : cross[r * BROWS + c - ROWS];
        ck_assert_msg(fabsl(creal(got) - re) < 1e-14 && fabsl(cimag(got) - im) < 1e-14,
                      "max_bytes %d row %d column %d: %.17g%+.17gi, the direct sum "
                      "%.17Lg%+.17Lgi",
                      (int)mb, r, c, creal(got), cimag(got), re, im);
        if (c >= ROWS) {
          ck_assert_double_eq_tol(kk[r * BROWS + c - ROWS], (double)(re * re + im * im), 1e-14);
        }
      }
    }
    if (!bounded) {
      CK_OK_AT(runtime_state_kernel(m, sa, sb, true, SMALL_TILES, want, NULL, &e), e, "resident");
      ck_assert_msg(memcmp(want, cross, sizeof cross) == 0, "other bits than the resident form's");
    }
  }
  runtime_state_destroy(sa);
  runtime_state_destroy(sb);
  free(va);
  free(vb);
  plan_destroy(pa);
  plan_destroy(pb);
  free(x);
  free(y);
  qdpt_assert_mesh_idle(m, "at the end");
  runtime_mesh_destroy(m);
}

START_TEST(test_kernel_from_inputs) {
  from_inputs(QDP_ENCODING_AMPLITUDE, DIM - 3);
  from_inputs(QDP_ENCODING_IQP, QUBITS + QUBITS * (QUBITS - 1) / 2);
  from_inputs(QDP_ENCODING_ANGLE, QUBITS);
  from_inputs(QDP_ENCODING_PHASE, QUBITS);
}
END_TEST

/* An encode's refusal names its tile's rows; max_bytes below one row's tiles is refused with the
 * least that works; a device too full for the tiles takes smaller ones, and one without room for
 * a row's is refused with the numbers; nothing is kept either way. */
START_TEST(test_kernel_from_inputs_refusals) {
  enum { ROWS = 7, COLS = 4 };
  double x[ROWS * COLS];
  for (int i = 0; i < ROWS * COLS; i++) {
    x[i] = 1 + i;
  }
  memset(x + 4 * COLS, 0, COLS * sizeof x[0]); /* row 4: zero norm */
  struct runtime_mesh *m = qdpt_mesh("cpu:1", GIB, 0);
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = ROWS, .cols = COLS};
  struct plan *p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, 2, ROWS, COLS,
                                QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
  struct runtime_kernel_input a = {&in, p};
  double k[ROWS * ROWS];
  struct qdp_error e = QDP_ERROR_INIT;
  /* A row of each of two tiles of 2-qubit states and of each operand of their real parts. */
  uint64_t row = 2 * 4 * 16 + 2 * 4 * 8;
  ck_assert_int_eq(
      runtime_inputs_kernel(m, &a, NULL, false, RUNTIME_KERNEL_TILES, 3 * row, k, NULL, &e),
      QDP_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(e.msg, "a's rows 3 to 5"), "%s", e.msg);
  ck_assert_int_eq(
      runtime_inputs_kernel(m, &a, NULL, false, RUNTIME_KERNEL_TILES, row - 1, k, NULL, &e),
      QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "max_bytes");
  ck_assert_uint_eq(e.need_bytes, row);
  qdpt_assert_mesh_idle(m, "after the refusals");
  runtime_mesh_destroy(m);
  /* A device one byte short of tiles of 7 rows (2 * 7 rows of states and of real parts, 3 tiles
   * of partials) takes smaller ones; one short of tiles of one row is refused with the numbers. */
  x[4 * COLS] = 1;
  uint64_t need7 = 7 * row + 3 * 7 * 7 * 16, need1 = row + 3 * 16;
  m = qdpt_mesh("cpu:1", need7 - 1, 0);
  CK_OK_AT(runtime_inputs_kernel(m, &a, NULL, false, RUNTIME_KERNEL_TILES, 0, k, NULL, &e), e,
           "smaller tiles");
  ck_assert_double_eq_tol(k[0], 1.0, 1e-14);
  qdpt_assert_mesh_idle(m, "after smaller tiles");
  runtime_mesh_destroy(m);
  m = qdpt_mesh("cpu:1", need1 - 1, 0);
  ck_assert_int_eq(runtime_inputs_kernel(m, &a, NULL, false, RUNTIME_KERNEL_TILES, 0, k, NULL, &e),
                   QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg, "cpu:0"));
  ck_assert_uint_eq(e.need_bytes, need1);
  qdpt_assert_mesh_idle(m, "after a refused workspace");
  runtime_mesh_destroy(m);
  plan_destroy(p);
}
END_TEST

void runtime_add_kernel(TCase *tc) {
  tcase_add_test(tc, test_kernel_from_inputs);
  tcase_add_test(tc, test_kernel_from_inputs_refusals);
  tcase_add_test(tc, test_kernel_hand_computed);
  tcase_add_test(tc, test_kernel_same_bits_on_any_sharding);
  tcase_add_test(tc, test_kernel_refusals);
}
