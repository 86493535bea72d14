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
#include <math.h>
#include <stdint.h>

#include "cpu_internal.h"
#include "qdpk.h"

/* 64 leaves: 512 bytes of doubles per group, a whole number of cache lines; the level arrays
 * in DEFINE_SUMSQ_ROW (32, 16, 8, 4, then 2 + 2) are sized for exactly this group. */
#define SUMSQ_GROUP_BITS 6u
#define SUMSQ_GROUP (1u << SUMSQ_GROUP_BITS)

/* One row's tree over len values at x, summed in T and returned as double (exact for float).
 * LOAD reads value i (cpu_internal.h: any alignment); SCALE(v) is the value a leaf squares, before
 * its conversion to T: v itself, or v * 2^e (ldexp: exact, but for a result below the input type's
 * normal range, which rounds once). */
#define DEFINE_SUMSQ_ROW(NAME, LOAD, T, SCALE) \
  static double NAME(const void *x, uint64_t len, int e) { \
    (void)e; \
    T stack[64]; \
    unsigned top = 0; \
    uint64_t done = 0; \
    uint64_t full = len & ~(uint64_t)(SUMSQ_GROUP - 1); \
    for (; done < full; done += SUMSQ_GROUP) { \
      /* One level per array: each loop is a plain map the compiler can vectorize. */ \
      T l1[32], l2[16], l3[8], l4[4]; \
      for (unsigned i = 0; i < 32; i++) { \
        T a = (T)SCALE(LOAD(x, done + 2 * i)), b = (T)SCALE(LOAD(x, done + 2 * i + 1)); \
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
      T v = (T)SCALE(LOAD(x, done)); \
      v = v * v; \
      for (uint64_t c = done; c & 1; c >>= 1) { \
        v = stack[--top] + v; \
      } \
      stack[top++] = v; \
    } \
    if (top == 0) { \
      return 0.0; \
    } \
    T acc = stack[--top]; \
    while (top > 0) { \
      acc = stack[--top] + acc; \
    } \
    return (double)acc; \
  }

#define SUMSQ_AS_IS(v) (v)
#define SUMSQ_SCALED_F32(v) ldexpf((v), e)
#define SUMSQ_SCALED_F64(v) ldexp((v), e)

DEFINE_SUMSQ_ROW(sumsq_f32_f32, cpu_load_f32, float, SUMSQ_AS_IS)
DEFINE_SUMSQ_ROW(sumsq_f64_f32, cpu_load_f64, float, SUMSQ_AS_IS)
DEFINE_SUMSQ_ROW(sumsq_f32_f64, cpu_load_f32, double, SUMSQ_AS_IS)
DEFINE_SUMSQ_ROW(sumsq_f64_f64, cpu_load_f64, double, SUMSQ_AS_IS)
DEFINE_SUMSQ_ROW(scaled_f32_f32, cpu_load_f32, float, SUMSQ_SCALED_F32)
DEFINE_SUMSQ_ROW(scaled_f64_f32, cpu_load_f64, float, SUMSQ_SCALED_F64)
DEFINE_SUMSQ_ROW(scaled_f32_f64, cpu_load_f32, double, SUMSQ_SCALED_F32)
DEFINE_SUMSQ_ROW(scaled_f64_f64, cpu_load_f64, double, SUMSQ_SCALED_F64)

/* The row functions by [scaled][input float64][output double]. */
static double (*const SUMSQ_ROWS[2][2][2])(const void *x, uint64_t len, int e) = {
    {{sumsq_f32_f32, sumsq_f32_f64}, {sumsq_f64_f32, sumsq_f64_f64}},
    {{scaled_f32_f32, scaled_f32_f64}, {scaled_f64_f32, scaled_f64_f64}},
};

void qdpk_cpu_sumsq(const void *x, qdp_dtype in, uint64_t in_stride, uint64_t len, uint64_t block,
                    uint64_t rows, qdp_dtype out, const int32_t *scale_log2, double *ret_sums) {
  /* block only bounds len: past len the tree adds +0, which changes no bit (see above). */
  (void)block;
  if (in != QDP_DTYPE_FLOAT32 && in != QDP_DTYPE_FLOAT64) {
    return;
  }
  int in64 = in == QDP_DTYPE_FLOAT64, out64 = out != QDP_DTYPE_COMPLEX64;
  size_t isize = in64 ? sizeof(double) : sizeof(float);
  for (uint64_t r = 0; r < rows; r++) {
    /* A zero exponent is the unscaled tree: ldexp(v, 0) == v. */
    int e = scale_log2 ? scale_log2[r] : 0;
    const void *xr = (const unsigned char *)x + r * in_stride * isize;
    ret_sums[r] = SUMSQ_ROWS[e != 0][in64][out64](xr, len, e);
  }
}
