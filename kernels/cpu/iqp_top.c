/* iqp_top.c — IQP whole on the CPU: a shard of psi with no exchange for the top K bits.
 *
 * psi(b) = 2^-n sum_z (-1)^popcount(z & b) e^{i theta(z)}. Split b and z at L = n - K into top
 * bits t (K = min(n, QDPK_IQP_TOP_BITS)) and low bits: b = (t, l), z = (s, y). theta splits too:
 * theta(s, y) = theta(0, y) + theta(s, 0) + sum over set bits i of s of u_i(y), u_i(y) the pair
 * terms between top bit i and the set low bits of y. So for each low index y the 2^K values
 *   v_s(y) = T(s) * P_s(y),  T(s) = e^{i theta(s, 0)},
 *   P_s(y) = prod over set bits i of s, ascending, of C_i(y) = e^{i u_i(y)}
 * take a few complex products, the top-bit stages of the transform run over them in registers
 * (ascending bits, (a, b) <- (a + b, a - b)), and h_t(y) is E(y) = 2^-n e^{i theta(0, y)}, common
 * to every t, times the result. A shard holds whole t blocks, or a power-of-two part of one, and
 * keeps the h_t(y) it holds; the low-bit stages (qdpk_cpu_wht) then
 * finish psi over the low bits the shard holds (all L of them when it holds whole blocks), and
 * the low bits that select a shard (a state of more than 2^K shards) are the exchange stages run
 * after (qdpk_cpu_butterfly).
 *
 * E and the products come from tables, as angle.c's products do: y splits into its low lb =
 * min(L, CPU_LO_BITS) bits l and the rest h. E(y) = scale * ((A[l] * S_h[l]) * H_h): A[l] =
 * e^{i theta(l)} per sample, S_h[l] the product of e^{i w_j(h)} over the set bits j of l
 * (ascending), w_j(h) the pair terms between low bit j and the set bits of h, H_h = e^{i
 * theta(h)}. C_i(y) = Cl_i[l] * Ch_i(h), the products of e^{i c_ij} over the set bits j of l and
 * of h, so P_s(y) = Pl_s[l] * Ph_s(h) with Pl_s, Ph_s the products of the Cl_i and of the Ch_i
 * over the set bits i of s (ascending): v_s(y) = TH_s * Pl_s[l], TH_s = T(s) * Ph_s(h) taken once
 * per run of h. A low index then costs 2^K - 1 products for its values, where forming each C_i
 * and P_s anew cost 2^(K+1) + K - 2; that work is the same on every shard, and only the low bits'
 * stages halve with the shard. Every table is built from its first entry by products in ascending
 * bit order, the same whatever the span, so each value is a function of (t, y) and the sample
 * alone: the state is bit-identical however many shards it has. Sums that feed one sine and cosine
 * add in ascending bit order (theta: cpu_internal.h's theta part, as iqp.c).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "qdpk.h"

#define TOP_MAX (1u << QDPK_IQP_TOP_BITS)
#define RUN_MAX ((size_t)1 << CPU_LO_BITS)

/* Scratch per row, in complex values: A, S (a run), Cl (one per top bit), Pl (2^K per l). */
#define SCRATCH_VALUES ((2 + QDPK_IQP_TOP_BITS + TOP_MAX) * RUN_MAX)

#define DEFINE_IQP_TOP(NAME, T, COS, SIN, LDEXP) \
  CPU_DEFINE_THETA_PART(NAME##_theta, T) \
  /* tab[l] for l < 2^bits: the product of f[j] over the set bits j of l, ascending. */ \
  static void NAME##_products(T *tab, const T *f, uint32_t bits) { \
    tab[0] = (T)1; \
    tab[1] = (T)0; \
    for (uint32_t k = 0; k < bits; k++) { \
      uint64_t half = (uint64_t)1 << k; \
      T fr = f[2 * k], fi = f[2 * k + 1]; \
      for (uint64_t l = 0; l < half; l++) { \
        T ar = tab[2 * l], ai = tab[2 * l + 1]; \
        tab[2 * (l + half)] = ar * fr - ai * fi; \
        tab[2 * (l + half) + 1] = ar * fi + ai * fr; \
      } \
    } \
  } \
  /* One low index y (its l in the run): the 2^k values v_t, their top-bit stages, and the \
   * shard's share of them, times E(y), into o. th: TH_t of the run (T(t) alone without pairs); \
   * pl: Pl_t[l], 2^k of them. */ \
  static inline void NAME##_one(uint32_t k, int pairs, uint64_t l, T er, T ei, const T *s_tab, \
                                T hr, T hi, const T *th, const T *pl, T *o, uint64_t at, \
                                uint64_t t0, uint64_t t1, uint64_t stride) { \
    uint64_t tops = (uint64_t)1 << k; \
    T vr[TOP_MAX] = {0}, vi[TOP_MAX] = {0}; /* all set below (zeros: -Wmaybe-uninitialized) */ \
    if (pairs) { \
      T sr = s_tab[2 * l], si = s_tab[2 * l + 1]; \
      T zr = er * sr - ei * si, zi = er * si + ei * sr; \
      er = zr; \
      ei = zi; \
    } \
    T xr = er * hr - ei * hi, xi = er * hi + ei * hr; /* E(y), scaled */ \
    vr[0] = th[0]; /* v_0 = TH_0: Pl_0 = 1 */ \
    vi[0] = th[1]; \
    _Pragma("GCC unroll 8") for (uint64_t t = 1; t < tops; t++) { /* v_t = TH_t * Pl_t[l] */ \
      T ar = th[2 * t], ai = th[2 * t + 1]; \
      if (pairs) { \
        T br = pl[2 * t], bi = pl[2 * t + 1]; \
        vr[t] = ar * br - ai * bi; \
        vi[t] = ar * bi + ai * br; \
      } else { \
        vr[t] = ar; \
        vi[t] = ai; \
      } \
    } \
    _Pragma("GCC unroll 3") for (uint32_t i = 0; i < k; i++) { /* the top-bit stages, ascending */ \
      uint64_t h = (uint64_t)1 << i; \
      _Pragma("GCC unroll 8") for (uint64_t t = 0; t < tops; t++) { \
        if (!(t & h)) { \
          T ar = vr[t], ai = vi[t], br = vr[t | h], bi = vi[t | h]; \
          vr[t] = ar + br; \
          vi[t] = ai + bi; \
          vr[t | h] = ar - br; \
          vi[t | h] = ai - bi; \
        } \
      } \
    } \
    _Pragma("GCC unroll 8") for (uint64_t t = t0; t <= t1; t++) { /* E times the shard's values */ \
      o[2 * (t * stride + at)] = xr * vr[t] - xi * vi[t]; \
      o[2 * (t * stride + at) + 1] = xr * vi[t] + xi * vr[t]; \
    } \
  } \
  /* One row: d its coefficients (row_of: cpu_iqp_rows); o its [count] output; tab scratch of \
   * SCRATCH_VALUES. */ \
  static void NAME(const struct qdpk_span *s, const T *d, const uint64_t *row_of, int pairs, T *o, \
                   T *tab) { \
    uint32_t n = s->qubits, k_bits = n < QDPK_IQP_TOP_BITS ? n : QDPK_IQP_TOP_BITS; \
    uint32_t l_bits = n - k_bits, lb = l_bits < CPU_LO_BITS ? l_bits : CPU_LO_BITS; \
    uint64_t block = (uint64_t)1 << l_bits, mask = block - 1, tops = (uint64_t)1 << k_bits; \
    uint64_t run = (uint64_t)1 << lb, lo_mask = run - 1; \
    uint64_t t0 = s->first >> l_bits, t1 = (s->first + s->count - 1) >> l_bits; \
    uint64_t y0 = t0 == t1 ? s->first & mask : 0, y1 = t0 == t1 ? y0 + s->count : block; \
    T scale = LDEXP((T)1, -(int)n); \
    T *a_tab = tab, *s_tab = tab + 2 * RUN_MAX, *cl = tab + 4 * RUN_MAX; \
    T *pl = cl + 2 * QDPK_IQP_TOP_BITS * RUN_MAX; /* Pl_t[l] at pl[2 * (l * TOP_MAX + t)] */ \
    T f[2 * 64], tb[2 * TOP_MAX], th_run[2 * TOP_MAX], ph[2 * TOP_MAX]; \
    for (uint64_t l = 0; l < run; l++) { \
      T th = NAME##_theta(d, row_of, l, pairs); \
      a_tab[2 * l] = COS(th); \
      a_tab[2 * l + 1] = SIN(th); \
    } \
    for (uint32_t i = 0; pairs && i < k_bits; i++) { \
      for (uint32_t j = 0; j < lb; j++) { \
        T c = d[row_of[j] + l_bits + i]; /* c_ij */ \
        f[2 * j] = COS(c); \
        f[2 * j + 1] = SIN(c); \
      } \
      NAME##_products(cl + 2 * i * RUN_MAX, f, lb); \
    } \
    for (uint64_t l = 0; pairs && l < run; l++) { /* Pl_t[l]: the products of the Cl_i[l] */ \
      for (uint32_t i = 0; i < k_bits; i++) { \
        f[2 * i] = cl[2 * (i * RUN_MAX + l)]; \
        f[2 * i + 1] = cl[2 * (i * RUN_MAX + l) + 1]; \
      } \
      NAME##_products(pl + 2 * l * TOP_MAX, f, k_bits); \
    } \
    for (uint64_t t = 0; t < tops; t++) { \
      T th = NAME##_theta(d, row_of, t << l_bits, pairs); \
      tb[2 * t] = COS(th); \
      tb[2 * t + 1] = SIN(th); \
    } \
    for (uint64_t y = y0; y < y1;) { \
      uint64_t hbits = y & ~lo_mask, stop = hbits + run < y1 ? hbits + run : y1; \
      T th = NAME##_theta(d, row_of, hbits, pairs); \
      T hr = scale * COS(th), hi = scale * SIN(th); \
      for (uint64_t t = 0; t < 2 * tops; t++) { \
        th_run[t] = tb[t]; /* TH_t = T(t) without pairs */ \
      } \
      if (pairs) { /* S_h: e^{i w_j(h)} per low bit j; Ch_i: e^{i sum over h of c_im} */ \
        for (uint32_t j = 0; j < lb; j++) { \
          T w = (T)0; \
          for (uint64_t m = hbits; m != 0; m &= m - 1) { \
            w = w + d[row_of[j] + (uint64_t)__builtin_ctzll(m)]; \
          } \
          f[2 * j] = COS(w); \
          f[2 * j + 1] = SIN(w); \
        } \
        NAME##_products(s_tab, f, lb); \
        for (uint32_t i = 0; i < k_bits; i++) { \
          T u = (T)0; \
          for (uint64_t m = hbits; m != 0; m &= m - 1) { \
            u = u + d[row_of[__builtin_ctzll(m)] + l_bits + i]; \
          } \
          f[2 * i] = COS(u); \
          f[2 * i + 1] = SIN(u); \
        } \
        NAME##_products(ph, f, k_bits);       /* Ph_t: the products of the Ch_i */ \
        for (uint64_t t = 1; t < tops; t++) { /* TH_t = T(t) * Ph_t; TH_0 = T(0) */ \
          T ar = tb[2 * t], ai = tb[2 * t + 1], br = ph[2 * t], bi = ph[2 * t + 1]; \
          th_run[2 * t] = ar * br - ai * bi; \
          th_run[2 * t + 1] = ar * bi + ai * br; \
        } \
      } \
      for (; y < stop; y++) { \
        uint64_t l = y & lo_mask; \
        uint64_t at = y - s->first; /* value t goes to o[t * 2^L + at] (modulo 2^64) */ \
        /* K as a constant in the common case: the loops over the tops unroll and \
         * the values stay in registers. */ \
        if (k_bits == QDPK_IQP_TOP_BITS) { \
          NAME##_one(QDPK_IQP_TOP_BITS, pairs, l, a_tab[2 * l], a_tab[2 * l + 1], s_tab, hr, hi, \
                     th_run, pl + 2 * l * TOP_MAX, o, at, t0, t1, block); \
        } else { \
          NAME##_one(k_bits, pairs, l, a_tab[2 * l], a_tab[2 * l + 1], s_tab, hr, hi, th_run, \
                     pl + 2 * l * TOP_MAX, o, at, t0, t1, block); \
        } \
      } \
    } \
  }

DEFINE_IQP_TOP(iqp_top_f32, float, cosf, sinf, ldexpf)
DEFINE_IQP_TOP(iqp_top_f64, double, cos, sin, ldexp)

int qdpk_cpu_iqp(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                 int pairs, void *out) {
  uint32_t n = s->qubits;
  if (n < 1 || n > 63 || !qdpk_iqp_span_ok(s)) {
    return QDPK_IQP_BAD_SPAN;
  }
  uint64_t block = (uint64_t)1 << (n - (n < QDPK_IQP_TOP_BITS ? n : QDPK_IQP_TOP_BITS));
  uint64_t np = qdp_values_per_sample(pairs ? QDP_ENCODING_IQP : QDP_ENCODING_IQP_Z, n);
  uint64_t row_of[63];
  cpu_iqp_rows(n, row_of);
  int f32 = s->out == QDP_DTYPE_COMPLEX64;
  size_t tsize = f32 ? sizeof(float) : sizeof(double);
  void *tab = malloc(2 * SCRATCH_VALUES * tsize);
  void *d = malloc(np * tsize);
  if (!tab || !d) {
    free(tab);
    free(d);
    return QDPK_IQP_NO_MEMORY;
  }
  for (uint64_t r = 0; r < s->rows; r++) {
    for (uint64_t k = 0; k < np; k++) {
      double v = cpu_load(x, in, r * in_stride + k);
      if (f32) {
        ((float *)d)[k] = (float)v;
      } else {
        ((double *)d)[k] = v;
      }
    }
    if (f32) {
      iqp_top_f32(s, d, row_of, pairs, (float *)out + 2 * r * s->count, tab);
    } else {
      iqp_top_f64(s, d, row_of, pairs, (double *)out + 2 * r * s->count, tab);
    }
  }
  free(tab);
  free(d);
  uint64_t len = s->count < block ? s->count : block; /* the low bits this shard holds */
  qdpk_cpu_wht(out, s->out, len, s->rows * (s->count / len));
  return 0;
}
