/* wht.c — IQP step 2: the unnormalized Walsh-Hadamard transform, and the butterfly stage that
 * carries it across shards (CPU twin of wht.cu).
 *
 * Stages run in ascending bit order, each (a, b) <- (a + b, a - b) with a the index whose bit is
 * clear. The value a stage writes depends only on the two values the previous stage left at the
 * same pair, so running the low stages block by block (all stages below WHT_BLOCK_BITS inside one
 * cache-sized block, then the next block) and two stages per pass performs exactly the same
 * operations as stage by stage over the whole row, and the bits match the plain order.
 */
#include <stdint.h>

#include "cpu_internal.h"
#include "qdpk.h"

/* 2^11 complex doubles are 32 KiB: one block's low stages stay in a typical L1 data cache. */
#define WHT_BLOCK_BITS 11u
#define DEFINE_WHT(STAGES, ROW, BUTTERFLY, T) \
  /* Stages [from, to) over len complex values at v, two per pass where two remain: the four \
   * values i, i + h, i + 2h, i + 3h go through stage k (pairs 0-1, 2-3) then stage k + 1 (pairs \
   * 0-2, 1-3), the same operations on the same values as one stage per pass, with half the \
   * passes over memory. Real and imaginary parts transform alike, so the loops run over scalars, \
   * contiguous in each of the four streams. */ \
  static void STAGES(T *v, uint64_t len, unsigned from, unsigned to) { \
    unsigned k = from; \
    for (; k + 2 <= to; k += 2) { \
      uint64_t h = (uint64_t)1 << k; \
      for (uint64_t base = 0; base < len; base += 4 * h) { \
        T *p0 = v + 2 * base, *p1 = p0 + 2 * h, *p2 = p1 + 2 * h, *p3 = p2 + 2 * h; \
        for (uint64_t i = 0; i < 2 * h; i++) { \
          T a = p0[i], b = p1[i], c = p2[i], d = p3[i]; \
          T s0 = a + b, s1 = a - b, s2 = c + d, s3 = c - d; \
          p0[i] = s0 + s2; \
          p1[i] = s1 + s3; \
          p2[i] = s0 - s2; \
          p3[i] = s1 - s3; \
        } \
      } \
    } \
    if (k < to) { \
      uint64_t h = (uint64_t)1 << k; \
      for (uint64_t base = 0; base < len; base += 2 * h) { \
        T *pa = v + 2 * base, *pb = pa + 2 * h; \
        for (uint64_t i = 0; i < 2 * h; i++) { \
          T a = pa[i], b = pb[i]; \
          pa[i] = a + b; \
          pb[i] = a - b; \
        } \
      } \
    } \
  } \
  static void ROW(T *v, uint64_t count) { \
    unsigned bits = 0; \
    while (((uint64_t)1 << bits) < count) { \
      bits++; \
    } \
    unsigned inner = bits < WHT_BLOCK_BITS ? bits : WHT_BLOCK_BITS; \
    uint64_t block = (uint64_t)1 << inner; \
    for (uint64_t base = 0; base < count; base += block) { \
      STAGES(v + 2 * base, block, 0, inner); \
    } \
    STAGES(v, count, inner, bits); \
  } \
  static void BUTTERFLY(T *a, T *b, uint64_t count) { \
    for (uint64_t i = 0; i < 2 * count; i++) { \
      T x = a[i], y = b[i]; \
      a[i] = x + y; \
      b[i] = x - y; \
    } \
  }

DEFINE_WHT(stages_f32, wht_row_f32, butterfly_f32, float)
DEFINE_WHT(stages_f64, wht_row_f64, butterfly_f64, double)

void qdpk_cpu_wht(void *data, qdp_dtype out, uint64_t count, uint64_t rows) {
  for (uint64_t r = 0; r < rows; r++) {
    if (out == QDP_DTYPE_COMPLEX64) {
      wht_row_f32((float *)data + 2 * r * count, count);
    } else if (out == QDP_DTYPE_COMPLEX128) {
      wht_row_f64((double *)data + 2 * r * count, count);
    }
  }
}

void qdpk_cpu_butterfly(void *a, void *b, qdp_dtype out, uint64_t count) {
  if (out == QDP_DTYPE_COMPLEX64) {
    butterfly_f32((float *)a, (float *)b, count);
  } else if (out == QDP_DTYPE_COMPLEX128) {
    butterfly_f64((double *)a, (double *)b, count);
  }
}
