/* amplitude.c — amplitude pass 2: scale each row by 1 / sqrt(its sum of squares) (CPU twin of
 * amplitude.cu). The reciprocal is taken once per row in the output precision, so every value is
 * one correctly rounded product; padding past len is written as exact zeros.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_internal.h"
#include "qdpk.h"

#define DEFINE_AMPLITUDE(NAME, TIN, T, SQRT) \
  static void NAME(const struct qdpk_span *s, const TIN *x, uint64_t in_stride, uint64_t len, \
                   const double *sumsq, T *out) { \
    for (uint64_t r = 0; r < s->rows; r++) { \
      const TIN *xr = x + r * in_stride; \
      T *o = out + 2 * r * s->count; \
      T inv = (T)1 / SQRT((T)sumsq[r]); \
      for (uint64_t j = 0; j < len; j++) { \
        o[2 * j] = (T)xr[j] * inv; \
        o[2 * j + 1] = (T)0; \
      } \
      memset(o + 2 * len, 0, (size_t)(s->count - len) * 2 * sizeof(T)); \
    } \
  }

DEFINE_AMPLITUDE(amplitude_f32_f32, float, float, sqrtf)
DEFINE_AMPLITUDE(amplitude_f64_f32, double, float, sqrtf)
DEFINE_AMPLITUDE(amplitude_f32_f64, float, double, sqrt)
DEFINE_AMPLITUDE(amplitude_f64_f64, double, double, sqrt)

void qdpk_cpu_amplitude(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                        uint64_t len, const double *sumsq, void *out) {
  len = cpu_min_u64(len, s->count);
  int out32 = s->out == QDP_DTYPE_COMPLEX64;
  if (in == QDP_DTYPE_FLOAT32) {
    if (out32) {
      amplitude_f32_f32(s, (const float *)x, in_stride, len, sumsq, (float *)out);
    } else {
      amplitude_f32_f64(s, (const float *)x, in_stride, len, sumsq, (double *)out);
    }
  } else if (in == QDP_DTYPE_FLOAT64) {
    if (out32) {
      amplitude_f64_f32(s, (const double *)x, in_stride, len, sumsq, (float *)out);
    } else {
      amplitude_f64_f64(s, (const double *)x, in_stride, len, sumsq, (double *)out);
    }
  }
}
