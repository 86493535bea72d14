/* amplitude.c — amplitude pass 2: scale each row by 1 / sqrt(its sum of squares) (CPU twin of
 * amplitude.cu). The reciprocal is taken once per row in the output precision, so every value is
 * one correctly rounded product; padding past len is written as exact zeros. A row with a scale
 * exponent e != 0 (the norm's fallback, runtime/encode_norm.c) multiplies each value by 2^e in the
 * input precision first, the same ldexp its sum of squares squared.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_internal.h"
#include "qdpk.h"

/* LOAD reads value j (any alignment); SCALE(v) as in sumsq.c: v, or ldexp(v, e). */
#define DEFINE_AMPLITUDE_ROW(NAME, LOAD, T, SQRT, SCALE) \
  static void NAME(const void *xr, uint64_t len, uint64_t count, double sumsq, int e, T *o) { \
    (void)e; \
    T inv = (T)1 / SQRT((T)sumsq); \
    for (uint64_t j = 0; j < len; j++) { \
      o[2 * j] = (T)SCALE(LOAD(xr, j)) * inv; \
      o[2 * j + 1] = (T)0; \
    } \
    memset(o + 2 * len, 0, (size_t)(count - len) * 2 * sizeof(T)); \
  }

#define AMP_AS_IS(v) (v)
#define AMP_SCALED_F32(v) ldexpf((v), e)
#define AMP_SCALED_F64(v) ldexp((v), e)

DEFINE_AMPLITUDE_ROW(amplitude_f32_f32, cpu_load_f32, float, sqrtf, AMP_AS_IS)
DEFINE_AMPLITUDE_ROW(amplitude_f64_f32, cpu_load_f64, float, sqrtf, AMP_AS_IS)
DEFINE_AMPLITUDE_ROW(amplitude_f32_f64, cpu_load_f32, double, sqrt, AMP_AS_IS)
DEFINE_AMPLITUDE_ROW(amplitude_f64_f64, cpu_load_f64, double, sqrt, AMP_AS_IS)
DEFINE_AMPLITUDE_ROW(scaled_f32_f32, cpu_load_f32, float, sqrtf, AMP_SCALED_F32)
DEFINE_AMPLITUDE_ROW(scaled_f64_f32, cpu_load_f64, float, sqrtf, AMP_SCALED_F64)
DEFINE_AMPLITUDE_ROW(scaled_f32_f64, cpu_load_f32, double, sqrt, AMP_SCALED_F32)
DEFINE_AMPLITUDE_ROW(scaled_f64_f64, cpu_load_f64, double, sqrt, AMP_SCALED_F64)

void qdpk_cpu_amplitude(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                        uint64_t len, const double *sumsq, const int32_t *scale_log2, void *out) {
  if (in != QDP_DTYPE_FLOAT32 && in != QDP_DTYPE_FLOAT64) {
    return;
  }
  len = cpu_min_u64(len, s->count);
  int in64 = in == QDP_DTYPE_FLOAT64;
  size_t isize = in64 ? sizeof(double) : sizeof(float);
  for (uint64_t r = 0; r < s->rows; r++) {
    const void *xr = (const unsigned char *)x + r * in_stride * isize;
    /* A zero exponent is the unscaled row: ldexp(v, 0) == v. */
    int e = scale_log2 ? scale_log2[r] : 0;
    if (s->out == QDP_DTYPE_COMPLEX64) {
      float *o = (float *)out + 2 * r * s->count;
      if (e != 0) {
        (in64 ? scaled_f64_f32 : scaled_f32_f32)(xr, len, s->count, sumsq[r], e, o);
      } else {
        (in64 ? amplitude_f64_f32 : amplitude_f32_f32)(xr, len, s->count, sumsq[r], e, o);
      }
    } else {
      double *o = (double *)out + 2 * r * s->count;
      if (e != 0) {
        (in64 ? scaled_f64_f64 : scaled_f32_f64)(xr, len, s->count, sumsq[r], e, o);
      } else {
        (in64 ? amplitude_f64_f64 : amplitude_f32_f64)(xr, len, s->count, sumsq[r], e, o);
      }
    }
  }
}
