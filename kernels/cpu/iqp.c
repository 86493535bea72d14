/* iqp.c — IQP step 1: out = 2^-n e^{i theta(b)} (CPU twin of iqp.cu). Step 2 is wht.c.
 *
 * The index splits into low bits l (the low L = min(n, CPU_LO_BITS) bits) and high bits h, and
 * theta splits with it: theta(b) = A(l) + S_h(l) + B(h), where A holds the terms whose bits are all
 * low, B those whose bits are all high, and S_h(l) = sum over set low bits i (ascending) of
 * w_i(h), w_i(h) = sum over set high bits j (ascending) of d_p(i,j), the pair terms across the
 * split. A(l) and B(h) are both theta_part(): from +0, the singles of the set bits in ascending
 * order, then (with pairs) the pair terms of the set pairs in pair order, singles + pairs. Each
 * amplitude is then ((A(l) + S_h(l)) + B(h)) in the output precision (without pairs A(l) + B(h))
 * and one cos and one sin: O(1) additions per amplitude once A is tabulated per sample and S per
 * run of 2^L amplitudes sharing h. A table entry and the direct sum are the same additions in the
 * same order, so partly covered runs (at span edges) compute directly and get the same bits, and
 * every amplitude is a function of its global index and the sample alone. The 2^-n scale is a power
 * of two, so folding it into the product with cos and sin rounds nothing.
 */
#include <math.h>
#include <stdint.h>

#include "cpu_internal.h"
#include "qdpk.h"

/* n + n(n-1)/2 coefficients for n = 63: 2016 doubles, 16 KiB of stack. */
#define IQP_MAX_QUBITS 63u
#define IQP_MAX_PARAMS (IQP_MAX_QUBITS + IQP_MAX_QUBITS * (IQP_MAX_QUBITS - 1) / 2)

/* S_h(l) directly: from +0, w_i for the set bits i of l in ascending order. */
#define DEFINE_CROSS_SUM(NAME, T) \
  static T NAME(const T *w, uint64_t l) { \
    T acc = (T)0; \
    for (uint64_t m = l; m != 0; m &= m - 1) { \
      acc = acc + w[__builtin_ctzll(m)]; \
    } \
    return acc; \
  }

#define DEFINE_IQP(NAME, THETA_PART, CROSS_SUM, T, COS, SIN, LDEXP) \
  static void NAME(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride, \
                   int pairs, T *out) { \
    uint32_t n = s->qubits; \
    uint32_t lo_bits = n < CPU_LO_BITS ? n : CPU_LO_BITS; \
    uint64_t run = (uint64_t)1 << lo_bits, lo_mask = run - 1; \
    uint64_t end = s->first + s->count; \
    uint64_t np = qdp_values_per_sample(pairs ? QDP_ENCODING_IQP : QDP_ENCODING_IQP_Z, n); \
    T scale = LDEXP((T)1, -(int)n); \
    T d[IQP_MAX_PARAMS], a_tab[(size_t)1 << CPU_LO_BITS], s_tab[(size_t)1 << CPU_LO_BITS]; \
    T w[CPU_LO_BITS]; \
    uint64_t row_of[IQP_MAX_QUBITS]; \
    cpu_iqp_rows(n, row_of); \
    /* Tabulate A only when the span is at least one run long; otherwise it costs more than it \
     * saves. Either way the value is theta_part(l). */ \
    int have_a = s->count >= run; \
    for (uint64_t r = 0; r < s->rows; r++) { \
      for (uint64_t k = 0; k < np; k++) { \
        d[k] = (T)cpu_load(x, in, r * in_stride + k); \
      } \
      for (uint64_t l = 0; have_a && l < run; l++) { \
        a_tab[l] = THETA_PART(d, row_of, l, pairs); \
      } \
      T *o = out + 2 * r * s->count; \
      uint64_t b = s->first; \
      while (b < end) { \
        uint64_t hbits = b & ~lo_mask; \
        uint64_t stop = cpu_min_u64(end, hbits + run); \
        int full = b == hbits && stop - b == run; \
        T bt = THETA_PART(d, row_of, hbits, pairs); \
        if (pairs) { \
          for (uint32_t i = 0; i < lo_bits; i++) { \
            const T *row = d + row_of[i]; \
            T acc = (T)0; \
            for (uint64_t m = hbits; m != 0; m &= m - 1) { \
              acc = acc + row[__builtin_ctzll(m)]; \
            } \
            w[i] = acc; \
          } \
          if (full) { \
            /* s_tab[l + 2^k] = s_tab[l] + w_k adds w in ascending bit order, as CROSS_SUM. */ \
            s_tab[0] = (T)0; \
            for (uint32_t k = 0; k < lo_bits; k++) { \
              uint64_t half = (uint64_t)1 << k; \
              for (uint64_t l = 0; l < half; l++) { \
                s_tab[l + half] = s_tab[l] + w[k]; \
              } \
            } \
          } \
        } \
        for (; b < stop; b++) { \
          uint64_t l = b & lo_mask; \
          T theta = have_a ? a_tab[l] : THETA_PART(d, row_of, l, pairs); \
          if (pairs) { \
            theta = theta + (full ? s_tab[l] : CROSS_SUM(w, l)); \
          } \
          theta = theta + bt; \
          o[2 * (b - s->first)] = scale * COS(theta); \
          o[2 * (b - s->first) + 1] = scale * SIN(theta); \
        } \
      } \
    } \
  }

CPU_DEFINE_THETA_PART(theta_part_f32, float)
CPU_DEFINE_THETA_PART(theta_part_f64, double)
DEFINE_CROSS_SUM(cross_sum_f32, float)
DEFINE_CROSS_SUM(cross_sum_f64, double)
DEFINE_IQP(iqp_f32, theta_part_f32, cross_sum_f32, float, cosf, sinf, ldexpf)
DEFINE_IQP(iqp_f64, theta_part_f64, cross_sum_f64, double, cos, sin, ldexp)

void qdpk_cpu_iqp_phases(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                         int pairs, void *out) {
  if (s->qubits < 1 || s->qubits > IQP_MAX_QUBITS) {
    return;
  }
  if (s->out == QDP_DTYPE_COMPLEX64) {
    iqp_f32(s, x, in, in_stride, pairs, (float *)out);
  } else if (s->out == QDP_DTYPE_COMPLEX128) {
    iqp_f64(s, x, in, in_stride, pairs, (double *)out);
  }
}
