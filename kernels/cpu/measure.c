/* measure.c — measurements of a window of a state on the CPU (qdpk.h, "measurements"): each
 * leaf summed in ascending index order, the leaves along the pairwise tree.
 *
 * For a Pauli string with X or Y qubits, b ^ xmask of an index b = first + j of the window is
 * (first ^ xh) + (j ^ xl), xh and xl the mask's bits above and below the window's size: the
 * partner window starts at first ^ xh and holds it at j ^ xl.
 */
#include <stdint.h>
#include <string.h>

#include "qdpk.h"

/* Amplitude j of a row as doubles. */
static void load(const void *row, qdp_dtype dt, uint64_t j, double *re, double *im) {
  if (dt == QDP_DTYPE_COMPLEX64) {
    *re = ((const float *)row)[2 * j];
    *im = ((const float *)row)[2 * j + 1];
  } else {
    *re = ((const double *)row)[2 * j];
    *im = ((const double *)row)[2 * j + 1];
  }
}

/* The outcome of the measured qubits in index b. */
static uint64_t outcome(const struct qdpk_measure *m, uint64_t b) {
  uint64_t o = 0;
  for (uint32_t j = 0; j < m->nq; j++) {
    o |= ((b >> m->qubits[j]) & 1u) << j;
  }
  return o;
}

/* Re(i^ny t) of t = tr + i ti. */
static double phase_re(uint32_t ny, double tr, double ti) {
  switch (ny & 3u) {
  case 0:
    return tr;
  case 1:
    return -ti;
  case 2:
    return -tr;
  default:
    return ti;
  }
}

/* One leaf of one row: window offsets [lo, lo + n) into acc[cols], ascending. */
static void leaf(const struct qdpk_measure *m, const void *x, const void *p, uint64_t xl,
                 uint64_t first, uint64_t lo, uint64_t n, double *acc) {
  memset(acc, 0, m->cols * sizeof *acc);
  for (uint64_t j = lo; j < lo + n; j++) {
    uint64_t b = first + j;
    double xr, xi;
    load(x, m->dt, j, &xr, &xi);
    if (m->kind == QDPK_MEASURE_PROBS) {
      acc[outcome(m, b)] += xr * xr + xi * xi;
      continue;
    }
    double pr, pi;
    load(p, m->dt, j ^ xl, &pr, &pi);
    double tr = pr * xr + pi * xi, ti = pr * xi - pi * xr; /* conj(partner) x */
    for (uint32_t s = 0; s < m->cols; s++) {
      double v = phase_re(m->ny[s], tr, ti);
      acc[s] += __builtin_parityll(b & m->zmask[s]) ? -v : v;
    }
  }
}

void qdpk_cpu_measure(const struct qdpk_measure *m, const void *x, uint64_t ld, const void *partner,
                      uint64_t pld, uint64_t rows, uint64_t first, uint64_t len, double *scratch,
                      double *out) {
  uint64_t lsize = len < QDPK_MEASURE_LEAF ? len : QDPK_MEASURE_LEAF;
  uint64_t leaves = len / lsize;
  uint64_t xl = m->kind == QDPK_MEASURE_PAULI ? m->xmask & (len - 1) : 0;
  size_t es = qdp_dtype_size(m->dt);
  double *buf = scratch;
  for (uint64_t r = 0; r < rows; r++) {
    const char *xr = (const char *)x + r * ld * es;
    const char *pr = partner ? (const char *)partner + r * pld * es : xr;
    for (uint64_t l = 0; l < leaves; l++) {
      leaf(m, xr, pr, xl, first, l * lsize, lsize, buf + l * m->cols);
    }
    for (uint64_t step = 1; step < leaves; step *= 2) {
      for (uint64_t i = 0; i + step < leaves; i += 2 * step) {
        for (uint32_t c = 0; c < m->cols; c++) {
          buf[i * m->cols + c] += buf[(i + step) * m->cols + c];
        }
      }
    }
    memcpy(out + r * m->cols, buf, m->cols * sizeof *buf);
  }
}

void qdpk_cpu_abs2(const void *x, uint64_t ld, uint64_t rows, uint64_t count, qdp_dtype dt,
                   double *out, uint64_t out_ld) {
  size_t es = qdp_dtype_size(dt);
  for (uint64_t r = 0; r < rows; r++) {
    const char *row = (const char *)x + r * ld * es;
    for (uint64_t b = 0; b < count; b++) {
      double re, im;
      load(row, dt, b, &re, &im);
      out[r * out_ld + b] = re * re + im * im;
    }
  }
}
