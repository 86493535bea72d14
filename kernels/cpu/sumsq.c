/* sumsq.c — amplitude pass 1: the pairwise sum of squares of each row (CPU twin of sumsq.cu).
 *
 * The tree is fixed by qdpk.h: T(a, b) = T(a, m) + T(m, b) over the aligned power-of-two block,
 * leaves x_i * x_i, zero past len. Two facts make an iterative walk produce the same bits:
 *  - a subtree that lies wholly past len is +0, and v + 0 == v exactly for every v >= 0, Inf and
 *    NaN, so the tree over the block equals the tree over the smallest power of two >= len;
 *  - walking the leaves left to right and merging equal-sized neighbours as a binary counter does
 *    (a stack of at most 64 complete subtrees) builds exactly the nodes of that tree; what remains
 *    when len is not a power of two is the right spine of the tree, where each right child is the
 *    zero-padded remainder, so folding the stack from the top down finishes the same tree.
 * Leaves are consumed in aligned groups of 64 whose subtree is summed directly, so the counter
 * runs once per 64 values. Products and sums are in the precision of `out`; -ffp-contract=off
 * (meson.build) keeps the compiler from fusing x * x into the following add.
 */
#include <stdint.h>

#include "cpu_internal.h"
#include "qdpk.h"

/* 64 leaves: 512 bytes of doubles per group, a whole number of cache lines; the level arrays
 * in DEFINE_SUMSQ_ROW (32, 16, 8, 4, then 2 + 2) are sized for exactly this group. */
#define SUMSQ_GROUP_BITS 6u
#define SUMSQ_GROUP (1u << SUMSQ_GROUP_BITS)

#define DEFINE_SUMSQ_ROW(NAME, TIN, T) \
  static T NAME(const TIN *x, uint64_t len) { \
    T stack[64]; \
    unsigned top = 0; \
    uint64_t done = 0; \
    uint64_t full = len & ~(uint64_t)(SUMSQ_GROUP - 1); \
    for (; done < full; done += SUMSQ_GROUP) { \
      /* One level per array: each loop is a plain map the compiler can vectorize. */ \
      const TIN *g = x + done; \
      T l1[32], l2[16], l3[8], l4[4]; \
      for (unsigned i = 0; i < 32; i++) { \
        T a = (T)g[2 * i], b = (T)g[2 * i + 1]; \
        l1[i] = a * a + b * b; \
      } \
      for (unsigned i = 0; i < 16; i++) { \
        l2[i] = l1[2 * i] + l1[2 * i + 1]; \
      } \
      for (unsigned i = 0; i < 8; i++) { \
        l3[i] = l2[2 * i] + l2[2 * i + 1]; \
      } \
      for (unsigned i = 0; i < 4; i++) { \
        l4[i] = l3[2 * i] + l3[2 * i + 1]; \
      } \
      T v = (l4[0] + l4[1]) + (l4[2] + l4[3]); \
      for (uint64_t c = done >> SUMSQ_GROUP_BITS; c & 1; c >>= 1) { \
        v = stack[--top] + v; \
      } \
      stack[top++] = v; \
    } \
    /* Fewer than 64 leaves remain: merges stay inside the last group. */ \
    for (; done < len; done++) { \
      T v = (T)x[done]; \
      v = v * v; \
      for (uint64_t c = done; c & 1; c >>= 1) { \
        v = stack[--top] + v; \
      } \
      stack[top++] = v; \
    } \
    if (top == 0) { \
      return (T)0; \
    } \
    T acc = stack[--top]; \
    while (top > 0) { \
      acc = stack[--top] + acc; \
    } \
    return acc; \
  }

DEFINE_SUMSQ_ROW(sumsq_f32_f32, float, float)
DEFINE_SUMSQ_ROW(sumsq_f64_f32, double, float)
DEFINE_SUMSQ_ROW(sumsq_f32_f64, float, double)
DEFINE_SUMSQ_ROW(sumsq_f64_f64, double, double)

void qdpk_cpu_sumsq(const void *x, qdp_dtype in, uint64_t in_stride, uint64_t len, uint64_t block,
                    uint64_t rows, qdp_dtype out, double *ret_sums) {
  /* block only bounds len: past len the tree adds +0, which changes no bit (see above). */
  (void)block;
  int out32 = out == QDP_DTYPE_COMPLEX64;
  for (uint64_t r = 0; r < rows; r++) {
    double s = 0.0;
    if (in == QDP_DTYPE_FLOAT32) {
      const float *xr = (const float *)x + r * in_stride;
      s = out32 ? (double)sumsq_f32_f32(xr, len) : sumsq_f32_f64(xr, len);
    } else if (in == QDP_DTYPE_FLOAT64) {
      const double *xr = (const double *)x + r * in_stride;
      s = out32 ? (double)sumsq_f64_f32(xr, len) : sumsq_f64_f64(xr, len);
    }
    ret_sums[r] = s;
  }
}
