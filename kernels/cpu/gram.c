/* gram.c — the kernel matrix's block products on the CPU (qdpk.h, "the kernel matrix").
 *
 * Each product keeps QDPK_GRAM_LANES partial sums per entry, lane l taking k = l, l + LANES, ...
 * in ascending order, and adds the lanes in order at the end: independent chains the compiler can
 * keep in registers, and an order fixed by k alone. The project is built without contraction into
 * fused multiply-adds (-ffp-contract=off, meson.build), so the products round as written.
 */
#include <stdint.h>
#include <string.h>

#include "qdpk.h"

#define L QDPK_GRAM_LANES

/* One entry: sum_k conj(x[k]) y[k] over n complex values. */
#define DEFINE_DOT(NAME, T) \
  static void NAME(const T *x, const T *y, uint64_t n, T *ret) { \
    T re[L] = {0}, im[L] = {0}; \
    uint64_t k = 0; \
    for (; k + L <= n; k += L) { \
      for (unsigned l = 0; l < L; l++) { \
        T xr = x[2 * (k + l)], xi = x[2 * (k + l) + 1]; \
        T yr = y[2 * (k + l)], yi = y[2 * (k + l) + 1]; \
        re[l] += xr * yr + xi * yi; \
        im[l] += xr * yi - xi * yr; \
      } \
    } \
    for (unsigned l = 0; k < n; k++, l++) { \
      T xr = x[2 * k], xi = x[2 * k + 1], yr = y[2 * k], yi = y[2 * k + 1]; \
      re[l] += xr * yr + xi * yi; \
      im[l] += xr * yi - xi * yr; \
    } \
    T sr = re[0], si = im[0]; \
    for (unsigned l = 1; l < L; l++) { \
      sr += re[l]; \
      si += im[l]; \
    } \
    ret[0] = sr; \
    ret[1] = si; \
  }
DEFINE_DOT(dot_f, float)
DEFINE_DOT(dot_d, double)

void qdpk_cpu_gram(const void *a, uint64_t lda, uint64_t rows, const void *b, uint64_t ldb,
                   uint64_t cols, uint64_t len, qdp_dtype dt, int upper, void *g) {
  for (uint64_t i = 0; i < rows; i++) {
    if (upper) { /* the half left out holds zeros, so that sums over it read defined values */
      memset((char *)g + i * cols * qdp_dtype_size(dt), 0, i * qdp_dtype_size(dt));
    }
    for (uint64_t j = upper ? i : 0; j < cols; j++) {
      if (dt == QDP_DTYPE_COMPLEX64) {
        dot_f((const float *)a + 2 * i * lda, (const float *)b + 2 * j * ldb, len,
              (float *)g + 2 * (i * cols + j));
      } else {
        dot_d((const double *)a + 2 * i * lda, (const double *)b + 2 * j * ldb, len,
              (double *)g + 2 * (i * cols + j));
      }
    }
  }
}

void qdpk_cpu_gram_add(void *g, const void *h, uint64_t n, qdp_dtype dt) {
  if (dt == QDP_DTYPE_COMPLEX64) {
    float *x = g;
    const float *y = h;
    for (uint64_t i = 0; i < 2 * n; i++) {
      x[i] += y[i];
    }
  } else {
    double *x = g;
    const double *y = h;
    for (uint64_t i = 0; i < 2 * n; i++) {
      x[i] += y[i];
    }
  }
}

void qdpk_cpu_gram_finish(const void *g, uint64_t rows, uint64_t cols, qdp_dtype dt, int overlaps,
                          int upper, void *out, uint64_t pitch_bytes) {
  for (uint64_t i = 0; i < rows; i++) {
    char *row = (char *)out + i * pitch_bytes;
    for (uint64_t j = upper ? i : 0; j < cols; j++) {
      if (dt == QDP_DTYPE_COMPLEX64) {
        const float *v = (const float *)g + 2 * (i * cols + j);
        if (overlaps) {
          ((float *)row)[2 * j] = v[0];
          ((float *)row)[2 * j + 1] = v[1];
        } else {
          ((float *)row)[j] = v[0] * v[0] + v[1] * v[1];
        }
      } else {
        const double *v = (const double *)g + 2 * (i * cols + j);
        if (overlaps) {
          ((double *)row)[2 * j] = v[0];
          ((double *)row)[2 * j + 1] = v[1];
        } else {
          ((double *)row)[j] = v[0] * v[0] + v[1] * v[1];
        }
      }
    }
  }
}
