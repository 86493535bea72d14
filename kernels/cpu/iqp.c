/* iqp.c — IQP step 1: out = 2^-n e^{i theta(b)} (CPU twin of iqp.cu). Step 2 is wht.c.
 *
 * theta(b) is summed in the output precision in one fixed order, starting from +0: the singles
 * d_i of the set bits i in ascending order, then (with pairs) the pair terms d_p(i,j) of the set
 * pairs in pair order (i ascending, then j ascending), and theta = singles + pairs. Terms of clear
 * bits are d * 0 = +-0, which leave a sum unchanged, so skipping them gives the bits of the full
 * sum. One cos and one sin per amplitude, O(popcount(b)^2) additions. The 2^-n scale is a power
 * of two, so folding it into the product with cos and sin rounds nothing.
 */
#include <math.h>
#include <stdint.h>

#include "cpu_internal.h"
#include "qdpk.h"

/* n + n(n-1)/2 coefficients for n = 63: 2016 doubles, 16 KiB of stack. */
#define IQP_MAX_QUBITS 63u
#define IQP_MAX_PARAMS (IQP_MAX_QUBITS + IQP_MAX_QUBITS * (IQP_MAX_QUBITS - 1) / 2)

#define DEFINE_IQP(NAME, T, COS, SIN, LDEXP) \
  static void NAME(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride, \
                   int pairs, T *out) { \
    uint32_t n = s->qubits; \
    uint64_t np = qdpk_params_per_sample(pairs ? QDP_ENCODING_IQP : QDP_ENCODING_IQP_Z, n); \
    T scale = LDEXP((T)1, -(int)n); \
    T d[IQP_MAX_PARAMS]; \
    /* row_of[i] + j is the index of d_p(i,j) for j > i. */ \
    uint64_t row_of[IQP_MAX_QUBITS]; \
    for (uint32_t i = 0; i < n; i++) { \
      row_of[i] = n + (uint64_t)i * n - (uint64_t)i * (i + 1) / 2 - (i + 1); \
    } \
    for (uint64_t r = 0; r < s->rows; r++) { \
      for (uint64_t k = 0; k < np; k++) { \
        d[k] = (T)cpu_load(x, in, r * in_stride + k); \
      } \
      T *o = out + 2 * r * s->count; \
      for (uint64_t j = 0; j < s->count; j++) { \
        uint64_t b = s->first + j; \
        T singles = (T)0; \
        for (uint64_t m = b; m != 0; m &= m - 1) { \
          singles = singles + d[__builtin_ctzll(m)]; \
        } \
        T theta = singles; \
        if (pairs) { \
          T ps = (T)0; \
          for (uint64_t m = b; m != 0;) { \
            const T *row = d + row_of[__builtin_ctzll(m)]; \
            m &= m - 1; \
            for (uint64_t mj = m; mj != 0; mj &= mj - 1) { \
              ps = ps + row[__builtin_ctzll(mj)]; \
            } \
          } \
          theta = singles + ps; \
        } \
        o[2 * j] = scale * COS(theta); \
        o[2 * j + 1] = scale * SIN(theta); \
      } \
    } \
  }

DEFINE_IQP(iqp_f32, float, cosf, sinf, ldexpf)
DEFINE_IQP(iqp_f64, double, cos, sin, ldexp)

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
