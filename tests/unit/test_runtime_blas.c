/* test_runtime_blas.c — the CPU backend's block product (the device op `gram`) through each CBLAS
 * it loads and through qdp's own loops: every dtype, real and complex operands, a tile with
 * itself (the upper half, zeros below) and of two batches, on shapes no kernel tile has (rows !=
 * cols, len not a multiple of 4, leading dimensions past len), against the direct sum in long
 * double, and the same bits again from the same call; the log line that names what the products
 * use; and the refusals of a QDP_BLAS that cannot be loaded, at every kernel, never a fallback.
 * The library is chosen once a process, at the first product: each test runs in a process of its
 * own (fork mode), QDP_BLAS set first. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common_runtime.h"
#include "log.h"
#include "runtime/mesh.h"

#define GIB (UINT64_C(1) << 30)

/* What QDP_BLAS says (NULL: unset) and what the log line at the first product must then name. */
struct blas_case {
  const char *name, *env, *logged;
};

static const struct blas_case cases[] = {
    {"unset: OpenBLAS first", NULL, "OpenBLAS"},
    {"OpenBLAS by its soname", "libopenblas.so.0", "OpenBLAS"},
    {"the reference CBLAS", QDP_TEST_REFERENCE_BLAS, QDP_TEST_REFERENCE_BLAS},
    {"qdp's own loops", "none", "qdp's own loops"},
};

/* A product's operands: rows x len of a (lda apart), cols x len of b (ldb apart). */
struct shape {
  uint64_t rows, cols, len, lda, ldb;
};

/* Small and past the BLAS's blocking; a tile with itself takes rows x rows of a. */
static const struct shape shapes[] = {{5, 7, 13, 16, 19}, {70, 45, 301, 304, 333}};

/* The log, into a file the test reads back; every line at INFO and above. */
static int log_to_file(void) {
  char path[] = "/tmp/qdp-test-blas-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  unlink(path);
  log_set_journal(0);
  log_set_level(LOG_LEVEL_INFO);
  log_set_fd(fd);
  return fd;
}

static char *logged(int fd) {
  static char text[8192];
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  text[n > 0 ? n : 0] = '\0';
  return text;
}

static long double scalar(const void *x, uint64_t i, bool f32) {
  return f32 ? ((const float *)x)[i] : ((const double *)x)[i];
}

/* g[i][j] against sum_k conj(a[i][k]) b[j][k] in long double, within the dtype's rounding of a
 * sum of len products; below the diagonal of a tile with itself, zero bits. */
static void check_product(const void *a, const void *b, const struct shape *s, uint64_t cols,
                          bool f32, bool real, bool upper, const void *g, const char *what) {
  unsigned parts = real ? 1 : 2;
  long double eps = f32 ? FLT_EPSILON : DBL_EPSILON;
  for (uint64_t i = 0; i < s->rows; i++) {
    for (uint64_t j = 0; j < cols; j++) {
      uint64_t at = (i * cols + j) * parts;
      if (upper && j < i) {
        for (unsigned p = 0; p < parts; p++) {
          long double v = scalar(g, at + p, f32);
          ck_assert_msg(v == 0 && !signbit(v), "%s: g[%d][%d] below the diagonal is %Lg, not 0",
                        what, (int)i, (int)j, v);
        }
        continue;
      }
      long double re = 0, im = 0, mag = 0;
      for (uint64_t k = 0; k < s->len; k++) {
        uint64_t x = (i * s->lda + k) * parts, y = (j * s->ldb + k) * parts;
        long double ar = scalar(a, x, f32), br = scalar(b, y, f32);
        long double ai = real ? 0 : scalar(a, x + 1, f32), bi = real ? 0 : scalar(b, y + 1, f32);
        re += ar * br + ai * bi;
        im += ar * bi - ai * br;
        mag += (fabsl(ar) + fabsl(ai)) * (fabsl(br) + fabsl(bi));
      }
      long double tol = 2 * s->len * eps * mag;
      long double got_re = scalar(g, at, f32), got_im = real ? 0 : scalar(g, at + 1, f32);
      ck_assert_msg(fabsl(got_re - re) <= tol && fabsl(got_im - im) <= tol,
                    "%s: g[%d][%d] = %.9Lg%+.9Lgi, the direct sum %.9Lg%+.9Lgi (within %.3Lg)",
                    what, (int)i, (int)j, got_re, got_im, re, im, tol);
    }
  }
}

/* Every (dtype, real, upper) and shape through cpu:0's gram op. */
static void products_match_the_direct_sum(struct runtime_device *d) {
  static const qdp_dtype dts[] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) {
    bool f32 = dts[t] == QDP_DTYPE_COMPLEX64;
    for (int real = 0; real < 2; real++) {
      for (int upper = 0; upper < 2; upper++) {
        for (size_t h = 0; h < sizeof shapes / sizeof shapes[0]; h++) {
          struct shape s = shapes[h];
          if (upper) { /* a with itself */
            s.cols = s.rows;
            s.ldb = s.lda;
          }
          size_t vs = (f32 ? 4 : 8) * (real ? 1 : 2); /* bytes of one value */
          void *a = qdpt_xmalloc(s.rows * s.lda * vs), *b = qdpt_xmalloc(s.cols * s.ldb * vs);
          void *g = qdpt_xmalloc(s.rows * s.cols * vs);
          unsigned parts = real ? 1 : 2;
          for (uint64_t i = 0; i < s.rows * s.lda * parts; i++) {
            double v = qdpt_rng_uniform(-1, 1);
            f32 ? (void)(((float *)a)[i] = (float)v) : (void)(((double *)a)[i] = v);
          }
          for (uint64_t i = 0; i < s.cols * s.ldb * parts; i++) {
            double v = qdpt_rng_uniform(-1, 1);
            f32 ? (void)(((float *)b)[i] = (float)v) : (void)(((double *)b)[i] = v);
          }
          memset(g, 0xff, s.rows * s.cols * vs); /* NaNs: every value must be written */
          char what[128];
          snprintf(what, sizeof what, "%s real=%d upper=%d %dx%d over %d", qdp_dtype_name(dts[t]),
                   real, upper, (int)s.rows, (int)s.cols, (int)s.len);
          struct qdp_error e = QDP_ERROR_INIT;
          qdp_status rc = d->ops->gram(d, a, s.lda, s.rows, upper ? a : b, s.ldb, s.cols, s.len,
                                       dts[t], upper, real, g, &e);
          ck_assert_msg(rc == QDP_OK, "%s: %s", what, e.msg);
          check_product(a, upper ? a : b, &s, s.cols, f32, real, upper, g, what);
          /* The same call, the same bits (the larger shape runs on the BLAS's threads). */
          void *again = qdpt_xmalloc(s.rows * s.cols * vs);
          rc = d->ops->gram(d, a, s.lda, s.rows, upper ? a : b, s.ldb, s.cols, s.len, dts[t], upper,
                            real, again, &e);
          ck_assert_msg(rc == QDP_OK && memcmp(g, again, s.rows * s.cols * vs) == 0,
                        "%s: other bits from the same call", what);
          free(a);
          free(b);
          free(g);
          free(again);
        }
      }
    }
  }
}

START_TEST(test_products_through_each_blas) {
  const struct blas_case *c = &cases[_i];
  if (c->env) {
    ck_assert_msg(c->env[0] != '/' || access(c->env, R_OK) == 0,
                  "%s is missing: install libblas3 (sh deploy/install-deps.sh --tests)", c->env);
    setenv("QDP_BLAS", c->env, 1);
  } else {
    unsetenv("QDP_BLAS");
  }
  int fd = log_to_file();
  struct runtime_mesh *m = qdpt_mesh("cpu:1", GIB, 0);
  qdpt_rng_seed(21);
  products_match_the_direct_sum(m->devs[0]);
  const char *text = logged(fd), *line = strstr(text, "kernel matrices on the CPU backend use");
  ck_assert_msg(line && strstr(line, c->logged),
                "%s: the log does not say the products use %s:\n%s", c->name, c->logged, text);
  ck_assert_msg(!strstr(line + 1, "kernel matrices on the CPU backend"),
                "%s: more than one line about the products:\n%s", c->name, text);
  runtime_mesh_destroy(m);
  close(fd);
}
END_TEST

/* A QDP_BLAS that cannot be used is an error at every product, naming the device, the library and
 * why, and what to do; g is left as it was. */
static void refused(const char *env, const char *why) {
  setenv("QDP_BLAS", env, 1);
  int fd = log_to_file();
  struct runtime_mesh *m = qdpt_mesh("cpu:2", GIB, 0);
  struct runtime_device *d = m->devs[1];
  double a[2 * 3] = {1, 0, 0, 1, 1, 1}, g[2] = {7, 7};
  for (int round = 0; round < 2; round++) {
    struct qdp_error e = QDP_ERROR_INIT;
    qdp_status rc = d->ops->gram(d, a, 3, 1, a, 3, 1, 3, QDP_DTYPE_COMPLEX128, false, false, g, &e);
    ck_assert_msg(rc == QDP_ERR_FAILED_PRECONDITION, "QDP_BLAS=%s, product %d: %s (%s)", env, round,
                  qdp_status_name(rc), e.msg);
    ck_assert_msg(strstr(e.msg, "cpu:1") && strstr(e.msg, env) && strstr(e.msg, why) &&
                      strstr(e.msg, "QDP_BLAS") && strstr(e.msg, "none"),
                  "QDP_BLAS=%s: the message does not name the device, the library, why (%s) and "
                  "what to do: %s",
                  env, why, e.msg);
    ck_assert(g[0] == 7 && g[1] == 7);
  }
  ck_assert_msg(strstr(logged(fd), env), "QDP_BLAS=%s: the log does not say:\n%s", env, logged(fd));
  runtime_mesh_destroy(m);
  close(fd);
}

START_TEST(test_a_blas_that_cannot_be_loaded_is_refused) {
  refused("/nonexistent/libcblas.so.3", "No such file");
}
END_TEST

START_TEST(test_a_library_without_cblas_is_refused) {
  refused("libm.so.6", "cblas_");
}
END_TEST

static Suite *blas_suite(void) {
  Suite *s = suite_create("runtime_blas");
  TCase *tc = tcase_create("blas");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_products_through_each_blas, 0, sizeof cases / sizeof cases[0]);
  tcase_add_test(tc, test_a_blas_that_cannot_be_loaded_is_refused);
  tcase_add_test(tc, test_a_library_without_cblas_is_refused);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return qdpt_run_suite(blas_suite(), CK_FORK);
}
