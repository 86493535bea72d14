/* phase.c — phase encoding, psi_b = 2^(-n/2) e^{i sum_k x_k b_k} (CPU twin of phase.cu).
 *
 * Written as the product of e^{i x_k} over the set bits of b, so sin and cos are taken once per
 * sample and qubit rather than once per amplitude. As in angle.c, the low min(n, CPU_LO_BITS) bits
 * resolve through a table (which also carries the 2^(-n/2) scale) and the high bits through a
 * product formed once per run of 2^CPU_LO_BITS amplitudes; factors multiply in ascending qubit
 * order, so an amplitude's bits depend only on its global index and the sample.
 */
#include <math.h>
#include <stdint.h>

#include "cpu_internal.h"
#include "qdpk.h"

/* 2^(-n/2): a power of two times sqrt(1/2) for odd n, each step exact but the correctly rounded
 * square root, so the scale is the correctly rounded value in either precision. */
#define DEFINE_PHASE(NAME, T, SINCOS_ROW, SQRT, LDEXP) \
  static void NAME(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride, \
                   T *out) { \
    uint32_t n = s->qubits; \
    uint32_t lo_bits = n < CPU_LO_BITS ? n : CPU_LO_BITS; \
    uint64_t lo_mask = ((uint64_t)1 << lo_bits) - 1; \
    uint64_t end = s->first + s->count; \
    T scale = (n & 1) ? LDEXP(SQRT((T)0.5), -(int)(n / 2)) : LDEXP((T)1, -(int)(n / 2)); \
    T c[64], sn[64], lo[(size_t)2 << CPU_LO_BITS]; \
    for (uint64_t r = 0; r < s->rows; r++) { \
      SINCOS_ROW(x, in, r * in_stride, n, c, sn); \
      lo[0] = scale; \
      lo[1] = (T)0; \
      for (uint32_t k = 0; k < lo_bits; k++) { \
        uint64_t half = (uint64_t)1 << k; \
        for (uint64_t i = 0; i < half; i++) { \
          T re = lo[2 * i], im = lo[2 * i + 1]; \
          lo[2 * (i + half)] = re * c[k] - im * sn[k]; \
          lo[2 * (i + half) + 1] = re * sn[k] + im * c[k]; \
        } \
      } \
      T *o = out + 2 * r * s->count; \
      uint64_t b = s->first; \
      while (b < end) { \
        uint64_t hi = b >> lo_bits; \
        uint64_t stop = cpu_min_u64(end, (hi + 1) << lo_bits); \
        if (hi == 0) { \
          /* No high bit set: the table entry is the amplitude. */ \
          for (; b < stop; b++) { \
            o[2 * (b - s->first)] = lo[2 * (b & lo_mask)]; \
            o[2 * (b - s->first) + 1] = lo[2 * (b & lo_mask) + 1]; \
          } \
          continue; \
        } \
        /* The first set bit's factor is taken as is; later ones multiply in. */ \
        T hr = (T)0, hm = (T)0; \
        int started = 0; \
        for (uint32_t k = lo_bits; k < n; k++) { \
          if (!((hi >> (k - lo_bits)) & 1)) { \
            continue; \
          } \
          if (!started) { \
            hr = c[k]; \
            hm = sn[k]; \
            started = 1; \
          } else { \
            T re = hr * c[k] - hm * sn[k]; \
            hm = hr * sn[k] + hm * c[k]; \
            hr = re; \
          } \
        } \
        for (; b < stop; b++) { \
          T lr = lo[2 * (b & lo_mask)], lm = lo[2 * (b & lo_mask) + 1]; \
          o[2 * (b - s->first)] = lr * hr - lm * hm; \
          o[2 * (b - s->first) + 1] = lr * hm + lm * hr; \
        } \
      } \
    } \
  }

DEFINE_PHASE(phase_f32, float, cpu_sincos_row_f32, sqrtf, ldexpf)
DEFINE_PHASE(phase_f64, double, cpu_sincos_row_f64, sqrt, ldexp)

void qdpk_cpu_phase(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                    void *out) {
  if (s->out == QDP_DTYPE_COMPLEX64) {
    phase_f32(s, x, in, in_stride, (float *)out);
  } else if (s->out == QDP_DTYPE_COMPLEX128) {
    phase_f64(s, x, in, in_stride, (double *)out);
  }
}
