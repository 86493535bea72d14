/* cpu_internal.h — helpers shared by the CPU twins of the encode kernels (the .c files here).
 *
 * Everything here is static inline: the twins stay self-contained translation units and nothing
 * beyond the qdpk_cpu_* functions of qdpk.h is exported. Any thread.
 */
#ifndef QDPK_CPU_INTERNAL_H
#define QDPK_CPU_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qdpk.h"

/* Bits of the amplitude index that angle and phase resolve through a per-sample table: 2^10
 * complex doubles are 16 KiB of stack, small enough for any thread, and large enough that the
 * product over the remaining high bits is recomputed only once every 1024 amplitudes. The split
 * depends on the qubit count alone, never on the span, so each amplitude is the same function of
 * its global index however the state is sharded. */
#define CPU_LO_BITS 10u

/* Input values are read through memcpy: the CPU backend reads mapped files and shared memory in
 * place, where a value may start at any byte (a version-2 .npy header ends at byte 130, say), and
 * a plain load through a misaligned pointer is undefined. A fixed-size memcpy compiles to one
 * plain (unaligned) load on x86-64 and AArch64, so the kernels keep their speed. */
static inline float cpu_load_f32(const void *x, uint64_t i) {
  float v;
  memcpy(&v, (const unsigned char *)x + i * sizeof v, sizeof v);
  return v;
}

static inline double cpu_load_f64(const void *x, uint64_t i) {
  double v;
  memcpy(&v, (const unsigned char *)x + i * sizeof v, sizeof v);
  return v;
}

static inline int64_t cpu_load_i64(const void *x, uint64_t i) {
  int64_t v;
  memcpy(&v, (const unsigned char *)x + i * sizeof v, sizeof v);
  return v;
}

/* One input value as double: float32 widens exactly and float64 is returned as is, so converting
 * the result to float rounds once, like a direct float64 -> float load. Unknown types read 0. */
static inline double cpu_load(const void *x, qdp_dtype in, uint64_t i) {
  switch (in) {
  case QDP_DTYPE_FLOAT32:
    return (double)cpu_load_f32(x, i);
  case QDP_DTYPE_FLOAT64:
    return cpu_load_f64(x, i);
  case QDP_DTYPE_INT64:
    return (double)cpu_load_i64(x, i);
  default:
    return 0.0;
  }
}

/* cos and sin of one sample's n values (from element AT of x) in the output precision: angle and
 * phase take them once per sample and qubit, never per amplitude. */
#define CPU_DEFINE_SINCOS_ROW(NAME, T, COS, SIN) \
  static inline void NAME(const void *x, qdp_dtype in, uint64_t at, uint32_t n, T *c, T *s) { \
    for (uint32_t k = 0; k < n; k++) { \
      T v = (T)cpu_load(x, in, at + k); \
      c[k] = COS(v); \
      s[k] = SIN(v); \
    } \
  }

CPU_DEFINE_SINCOS_ROW(cpu_sincos_row_f32, float, cosf, sinf)
CPU_DEFINE_SINCOS_ROW(cpu_sincos_row_f64, double, cos, sin)

static inline uint64_t cpu_min_u64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

/* iqp's coefficients (iqp.c, iqp_top.c): row_of[i] + j is the index of d_p(i, j) in d, j > i. */
static inline void cpu_iqp_rows(uint32_t n, uint64_t *row_of) {
  for (uint32_t i = 0; i < n; i++) {
    row_of[i] = n + (uint64_t)i * n - (uint64_t)i * (i + 1) / 2 - (i + 1);
  }
}

/* iqp's theta over the set bits of index b: from +0, the singles of the set bits in ascending
 * order, then (with pairs) the pair terms of the set pairs in pair order, singles + pairs. */
#define CPU_DEFINE_THETA_PART(NAME, T) \
  static T NAME(const T *d, const uint64_t *row_of, uint64_t b, int pairs) { \
    T singles = (T)0; \
    for (uint64_t m = b; m != 0; m &= m - 1) { \
      singles = singles + d[__builtin_ctzll(m)]; \
    } \
    if (!pairs) { \
      return singles; \
    } \
    T ps = (T)0; \
    for (uint64_t m = b; m != 0;) { \
      const T *row = d + row_of[__builtin_ctzll(m)]; \
      m &= m - 1; \
      for (uint64_t mj = m; mj != 0; mj &= mj - 1) { \
        ps = ps + row[__builtin_ctzll(mj)]; \
      } \
    } \
    return singles + ps; \
  }

#endif /* QDPK_CPU_INTERNAL_H */
