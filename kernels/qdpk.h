/* qdpk.h — the encode kernels: pure functions of their inputs, one CPU twin per CUDA launcher.
 *
 * A launch writes `rows` samples and, in each, the amplitude index range [first, first + count) of
 * a 2^qubits state (docs/design.md, encodings: qubit k is bit k of the index; samples are row-major
 * [rows][count]). Input rows start `in_stride` elements apart. Output is interleaved complex:
 * COMPLEX64 (float re, im) or COMPLEX128 (double re, im), and every value is computed in the
 * output's precision (float for COMPLEX64, double for COMPLEX128): inputs are converted on load,
 * never in a separate pass.
 *
 * Exactness contract, shared with the CUDA kernels (the .cu files beside this header) so that CPU
 * and GPU agree bit for bit where noted:
 *  - sumsq is the pairwise tree over an aligned power-of-two block (T(a,b) = T(a,m) + T(m,b),
 * leaves x_i * x_i, zero past `len`), with no fused multiply-add: the same for any sharding of the
 * block, and identical between CPU and GPU.
 *  - wht applies its butterflies in ascending bit order, each stage (a, b) <- (a + b, a - b); the
 *    global-bit stages between shards (butterfly) continue that order, so any even sharding gives
 * the bits of the one-device transform.
 *  - every other value depends only on its own global index and the sample's parameters.
 * Kernels never validate what the runtime already checked (finite parameters that fit the output
 * precision, basis indices in range); the check functions below are those checks. Input may start
 * at any byte address for the CPU twins (a mapped file is read in place). Nothing here allocates,
 * logs or synchronizes. Any thread; the CPU twins are reentrant.
 */
#ifndef QDPK_H
#define QDPK_H

#include <float.h>
#include <stdint.h>

#include "qdp_defs.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qdpk_span {
  uint32_t qubits; /* n: each sample is a state of 2^n amplitudes, 1 <= n <= 63 */
  uint64_t first;  /* first amplitude index written in each sample */
  uint64_t count;  /* amplitudes written per sample, >= 1, first + count <= 2^n */
  uint64_t rows;   /* samples written, >= 1 */
  qdp_dtype out;   /* QDP_DTYPE_COMPLEX64 or QDP_DTYPE_COMPLEX128; out is [rows][count] */
};

/* Amplitude, pass 1. For each row r: the pairwise sum of squares over the aligned block
 * [0, block) of x + r * in_stride, where values at index >= len count as zero (len <= block,
 * block a power of two). Computed in the precision of `out`; stored in ret_sums[r] as double
 * (exact for float sums). scale_log2: NULL, or one exponent e_r per row, and each leaf is then
 * (x_i * 2^e_r)^2 with the product x_i * 2^e_r taken in the input precision (ldexp: exact unless
 * it falls below the input type's normal range, where it rounds once) before the conversion to
 * the output precision; e_r = 0 gives the bits of the unscaled tree. */
void qdpk_cpu_sumsq(const void *x, qdp_dtype in, uint64_t in_stride, uint64_t len, uint64_t block,
                    uint64_t rows, qdp_dtype out, const int32_t *scale_log2, double *ret_sums);

/* The largest |x| of `count` values, 0 for none (NaN is skipped: qdpk_cpu_find_nonfinite finds
 * it). The amplitude norm's fallback scales a sample by a power of two taken from it; a maximum
 * is the same whatever the order, so the maxima of shards combine to the sample's. */
double qdpk_cpu_absmax(const void *x, qdp_dtype in, uint64_t count);

/* Amplitude, pass 2: out[r][j] = v * inv_r, v = x[r * in_stride + j] for j < len, else 0, and
 * inv_r = 1 / sqrt(sumsq[r]), both in the precision of s->out. x points at the value of global
 * index s->first in row 0; len (<= s->count) values are present from there. scale_log2 as in
 * sumsq: v is x * 2^e_r, taken in the input precision before the conversion. */
void qdpk_cpu_amplitude(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                        uint64_t len, const double *sumsq, const int32_t *scale_log2, void *out);

/* x: [rows][in_stride], the first n values of each row are the angles x_k.
 * psi_b = prod_k (b_k ? sin x_k : cos x_k) (x, not x/2). */
void qdpk_cpu_angle(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                    void *out);

/* psi_b = 2^(-n/2) e^{i sum_k x_k b_k}. */
void qdpk_cpu_phase(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                    void *out);

/* One index per row (float32, float64 or int64, already checked by qdpk_cpu_check_basis):
 * psi = 1 at that index, 0 elsewhere in the span. */
void qdpk_cpu_basis(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                    void *out);

/* IQP, step 1: out = 2^-n e^{i theta(b)}, theta(b) = sum_i d_i b_i + (pairs ? sum_{i<j} d_{p(i,j)}
 * b_i b_j : 0), pair coefficients after the n singles in the order (0,1),(0,2)..(0,n-1),(1,2)...
 * Step 2 is the unnormalized Walsh-Hadamard transform over all n bits (wht, then butterfly for the
 * bits that select the shard), which gives psi_b = 2^-n sum_z (-1)^popcount(z & b) e^{i theta(z)}.
 */
void qdpk_cpu_iqp_phases(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                         int pairs, void *out);

/* IQP whole, the path a state takes on the CPU backend: psi over the span, with the top
 * K = min(n, QDPK_IQP_TOP_BITS) bits of the transform taken in registers per low index before the
 * low bits' stages (iqp_top.c gives the order). The span is whole blocks of 2^(n-K) (any number
 * of them), done here, or a power-of-two part of one aligned to its size, whose remaining low bits
 * above log2(count) are the exchange stages (qdpk_cpu_butterfly, ascending); QDPK_IQP_BAD_SPAN
 * otherwise.
 * Bit-identical however the state is split. 0, or QDPK_IQP_NO_MEMORY when its scratch (about
 * 80 KiB) cannot be allocated. */
#define QDPK_IQP_TOP_BITS 3u
#define QDPK_IQP_BAD_SPAN (-1)
#define QDPK_IQP_NO_MEMORY (-2)
int qdpk_cpu_iqp(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                 int pairs, void *out);

/* Whether qdpk_cpu_iqp (and qdpk_iqp on the GPU) takes span s of 1..63 qubits: whole blocks of
 * 2^(n-K), or a power-of-two part of one aligned to its size. */
static inline int qdpk_iqp_span_ok(const struct qdpk_span *s) {
  uint32_t n = s->qubits;
  uint64_t block = (uint64_t)1 << (n - (n < QDPK_IQP_TOP_BITS ? n : QDPK_IQP_TOP_BITS));
  if (s->first % block == 0 && s->count % block == 0) {
    return 1;
  }
  return s->count < block && (s->count & (s->count - 1)) == 0 && s->first % s->count == 0;
}

/* In place over each of `rows` rows of `count` (a power of two) complex values of type `out`:
 * the unnormalized Walsh-Hadamard transform over the low log2(count) bits, ascending bit order. */
void qdpk_cpu_wht(void *data, qdp_dtype out, uint64_t count, uint64_t rows);

/* One global-bit stage between two shards of equal size: (a, b) <- (a + b, a - b), elementwise over
 * `count` complex values; `a` holds the indices whose global bit is 0. */
void qdpk_cpu_butterfly(void *a, void *b, qdp_dtype out, uint64_t count);

/* Checks. Each returns 1 and the offending position when it finds a problem, else 0. */

/* First value (in [0, count)) that is NaN or +-Inf. */
int qdpk_cpu_find_nonfinite(const void *x, qdp_dtype in, uint64_t count, uint64_t *ret_index);

/* Parameters of the closed forms (angle, phase, iqp, iqp-z) that cannot be computed in the output
 * precision, in the order a row is checked. */
enum qdpk_param_fault {
  QDPK_PARAM_OK = 0,
  QDPK_PARAM_NOT_FINITE = 1,   /* NaN or +-Inf */
  QDPK_PARAM_NOT_FLOAT32 = 2,  /* finite float64 that rounds to +-Inf in float32 (COMPLEX64) */
  QDPK_PARAM_SUM_OVERFLOW = 3, /* summed: the row's |values| sum past qdpk_param_sum_limit */
};

/* The largest sum of a row's |values|, summed in double in index order, for which no partial sum
 * of iqp's theta can overflow the precision of `out`. theta(b) is a sum of at most
 * k = n + n(n-1)/2 <= 2016 of the row's values, converted to the output precision and added in
 * some order (iqp.c and iqp.cu differ in the order, never in the terms). Every partial result, the
 * conversions included, is then at most S (1 + u)^(k+1) in magnitude, S the exact sum of the
 * |values| and u the output's unit roundoff: below S (1 + 2^-12) for float (u = 2^-24), far below
 * for double. The sum in double is within a factor 1 + 2^-42 of S. So a computed sum of at most
 * MAX (1 - 2^-11), MAX the output's largest finite value, overflows in no order; above it, it may
 * (with values of one sign, theta of the all-ones index is S itself). */
static inline double qdpk_param_sum_limit(qdp_dtype out) {
  return (out == QDP_DTYPE_COMPLEX64 ? (double)FLT_MAX : DBL_MAX) * (1.0 - 0x1p-11);
}

/* The first row of `rows` (row r: the cols values from x[r * in_stride]) with a fault, checked
 * value by value and then, when `summed` (iqp, iqp-z: theta adds the values), the row's sum of
 * |values|. *ret_row and *ret_col name the row and value (col = cols for the sum), *ret_sum is the
 * sum (written for QDPK_PARAM_SUM_OVERFLOW only). */
enum qdpk_param_fault qdpk_cpu_check_params(const void *x, qdp_dtype in, uint64_t in_stride,
                                            uint64_t cols, uint64_t rows, qdp_dtype out, int summed,
                                            uint64_t *ret_row, uint64_t *ret_col, double *ret_sum);

enum qdpk_basis_fault {
  QDPK_BASIS_OK = 0,
  QDPK_BASIS_NOT_FINITE = 1,
  QDPK_BASIS_NOT_INTEGER = 2,
  QDPK_BASIS_NEGATIVE = 3,
  QDPK_BASIS_TOO_LARGE = 4 /* >= 2^qubits */
};

/* First row whose index (x[r * in_stride]) is not a valid basis index for `qubits` qubits. */
enum qdpk_basis_fault qdpk_cpu_check_basis(const void *x, qdp_dtype in, uint64_t in_stride,
                                           uint64_t rows, uint32_t qubits, uint64_t *ret_row);

/* The CPU kernels of one encoding, as the runtime dispatches to them (cpu/encoders.c holds one
 * per row of QDP_ENCODINGS, qdp_defs.h). What a row needs (common/qdp_encodings.h) says which it
 * has: a NORM reduction `scale` (pass 2, after qdpk_cpu_sumsq's totals), every other encoding
 * `encode`. */
struct qdpk_cpu_encoder {
  const char *name; /* how messages name the kernel: "qdpk_cpu_iqp" */
  /* The span's amplitudes from each row's parameters. 0, or QDPK_IQP_NO_MEMORY or
   * QDPK_IQP_BAD_SPAN (qdpk_cpu_iqp's). */
  int (*encode)(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                void *out);
  /* As qdpk_cpu_amplitude. */
  void (*scale)(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                uint64_t len, const double *sumsq, const int32_t *scale_log2, void *out);
};

/* ---- the kernel matrix (docs/design.md, kernel matrices) ----
 * One amplitude block of the Gram matrix of two batches: g[i][j] = sum_k conj(a[i][k]) b[j][k]
 * over k < len, for i < rows and j < cols; a's rows lda elements apart, b's ldb apart, g
 * [rows][cols] contiguous; a and b interleaved complex of `dt`, summed in its precision. With
 * `real` (states whose amplitudes are all real) a and b are their real parts
 * (qdpk_cpu_gram_real_rows: dt's real type) and g is real. The sum runs over QDPK_GRAM_LANES interleaved partial sums (lane k mod
 * QDPK_GRAM_LANES, each ascending in k) added in lane order, without fused multiply-add: the bits
 * depend only on the values, never on where they lie. With `upper` (a == b), only j >= i is
 * computed and the rest of g is zero. */
#define QDPK_GRAM_LANES 4u
void qdpk_cpu_gram(const void *a, uint64_t lda, uint64_t rows, const void *b, uint64_t ldb,
                   uint64_t cols, uint64_t len, qdp_dtype dt, int upper, int real, void *g);
/* The real parts of `rows` rows of `width` complex values of dt (src_pitch bytes apart) into dst
 * (dst_pitch bytes apart) as dt's real type. */
void qdpk_cpu_gram_real_rows(void *dst, uint64_t dst_pitch, const void *src, uint64_t src_pitch,
                             uint64_t width, uint64_t rows, qdp_dtype dt);
/* g[i] = g[i] + h[i] over n values of g (complex of dt, or with `real` its real type): one node
 * of the blocks' fixed tree. */
void qdpk_cpu_gram_add(void *g, const void *h, uint64_t n, qdp_dtype dt, int real);
/* The finished [rows][cols] tile of g (as qdpk_cpu_gram wrote it) into out, rows pitch_bytes
 * apart: |g|^2 as the real type of dt's precision, or with `overlaps` g itself (complex). With
 * `fill`, g holds only j >= i of a Hermitian tile and the rest is taken from there (conjugated).
 * With `mirror` (not NULL), the transpose too ([cols][rows], pitch_bytes apart, conjugated for
 * overlaps): the other half of a with itself. */
void qdpk_cpu_gram_finish(const void *g, uint64_t rows, uint64_t cols, qdp_dtype dt, int real,
                          int overlaps, int fill, void *out, void *mirror, uint64_t pitch_bytes);

/* ---- measurements (docs/design.md, measurements) ----
 * A window of a state: amplitudes [first, first + len) of each of `rows` samples (x's rows ld
 * complex values of m->dt apart; len a power of two, first a multiple of it), reduced to m's
 * `cols` doubles per row in double precision: each leaf of min(len, QDPK_MEASURE_LEAF) amplitudes
 * summed in the backend's fixed order, the leaves along the pairwise tree. So a window's value is
 * its subtree of one tree over [0, 2^n), whatever memory holds it, and windows combine along the
 * rest of that tree.
 *  - QDPK_MEASURE_PROBS: out[r][m] = sum of |x_b|^2 over the b whose bit qubits[j] is bit j of m
 *    (cols = 2^nq);
 *  - QDPK_MEASURE_PAULI: out[r][s] = Re sum_b conj(x_{b ^ xmask}) i^ny[s] (-1)^popcount(b &
 *    zmask[s]) x_b, the expectation of Pauli string s (xmask: its X and Y qubits, the same for
 *    every string of one call; zmask: its Z and Y qubits; ny: its Y count), with x_{b ^ xmask}
 *    read from `partner` (the window that holds those indices, rows pld apart; x itself when
 *    xmask is 0). */
#define QDPK_MEASURE_LEAF 1024u
#define QDPK_MEASURE_QUBITS_MAX 10u /* the most qubits of a marginal: 1024 outcomes */
enum qdpk_measure_kind { QDPK_MEASURE_PROBS = 1, QDPK_MEASURE_PAULI = 2 };
struct qdpk_measure {
  enum qdpk_measure_kind kind;
  qdp_dtype dt;            /* the state's */
  uint32_t nq;             /* PROBS: qubits[0..nq) */
  const uint32_t *qubits;
  uint32_t cols;           /* 2^nq, or the strings */
  uint64_t xmask;          /* PAULI */
  const uint64_t *zmask;   /* [cols] */
  const uint32_t *ny;      /* [cols] */
};
/* scratch: (len / the leaf) * cols doubles. */
void qdpk_cpu_measure(const struct qdpk_measure *m, const void *x, uint64_t ld, const void *partner,
                      uint64_t pld, uint64_t rows, uint64_t first, uint64_t len, double *scratch,
                      double *out);
/* Each basis state's probability: out[r][b] = |x[r][b]|^2 for b < count (out rows out_ld apart),
 * in double. */
void qdpk_cpu_abs2(const void *x, uint64_t ld, uint64_t rows, uint64_t count, qdp_dtype dt,
                   double *out, uint64_t out_ld);

/* The CPU kernels of encoding e; NULL for a number no row of the CPU table has. */
const struct qdpk_cpu_encoder *qdpk_cpu_encoder(qdp_encoding e);

/* One partial sum of squares of the amplitude norm: the aligned subtree [first, first + 2^log2)
 * of the pairwise tree; its value for row r is vals[src + r * row_stride] (qdpk_norm_combine). */
struct qdpk_norm_part {
  uint64_t first;
  uint32_t log2;
  uint64_t src;
};

#ifdef __cplusplus
}
#endif
#endif /* QDPK_H */
