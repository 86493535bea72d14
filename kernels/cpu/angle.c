/* angle.c — angle encoding, psi_b = prod_k (b_k ? sin x_k : cos x_k) (CPU twin of angle.cu).
 *
 * sin and cos are taken once per sample and qubit. The low min(n, CPU_LO_BITS) bits of the index
 * resolve through a table of their partial products; the product over the high bits is formed
 * once per run of 2^CPU_LO_BITS amplitudes that share them. Both products multiply their factors
 * in ascending qubit order starting from 1, and psi = low * high, so an amplitude's bits depend
 * only on its global index and the sample, never on first or count.
 */
#include <math.h>
#include <stdint.h>

#include "cpu_internal.h"
#include "qdpk.h"

#define DEFINE_ANGLE(NAME, T, SINCOS_ROW) \
  static void NAME(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride, \
                   T *out) { \
    uint32_t n = s->qubits; \
    uint32_t lo_bits = n < CPU_LO_BITS ? n : CPU_LO_BITS; \
    uint64_t lo_mask = ((uint64_t)1 << lo_bits) - 1; \
    uint64_t end = s->first + s->count; \
    T c[64], sn[64], lo[(size_t)1 << CPU_LO_BITS]; \
    for (uint64_t r = 0; r < s->rows; r++) { \
      SINCOS_ROW(x, in, r * in_stride, n, c, sn); \
      lo[0] = (T)1; \
      for (uint32_t k = 0; k < lo_bits; k++) { \
        uint64_t half = (uint64_t)1 << k; \
        for (uint64_t i = 0; i < half; i++) { \
          lo[i + half] = lo[i] * sn[k]; \
          lo[i] = lo[i] * c[k]; \
        } \
      } \
      T *o = out + 2 * r * s->count; \
      uint64_t b = s->first; \
      while (b < end) { \
        uint64_t hi = b >> lo_bits; \
        T h = (T)1; \
        for (uint32_t k = lo_bits; k < n; k++) { \
          h = h * (((hi >> (k - lo_bits)) & 1) ? sn[k] : c[k]); \
        } \
        uint64_t stop = cpu_min_u64(end, (hi + 1) << lo_bits); \
        for (; b < stop; b++) { \
          o[2 * (b - s->first)] = lo[b & lo_mask] * h; \
          o[2 * (b - s->first) + 1] = (T)0; \
        } \
      } \
    } \
  }

DEFINE_ANGLE(angle_f32, float, cpu_sincos_row_f32)
DEFINE_ANGLE(angle_f64, double, cpu_sincos_row_f64)

void qdpk_cpu_angle(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                    void *out) {
  if (s->out == QDP_DTYPE_COMPLEX64) {
    angle_f32(s, x, in, in_stride, (float *)out);
  } else if (s->out == QDP_DTYPE_COMPLEX128) {
    angle_f64(s, x, in, in_stride, (double *)out);
  }
}
