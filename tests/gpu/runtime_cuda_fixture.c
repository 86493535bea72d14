/* runtime_cuda_fixture.c — the helpers of runtime_cuda_fixture.h. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common_runtime.h"
#include "runtime_cuda_fixture.h"

double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void *encode_all(struct runtime_mesh *m, const struct plan *p, const struct runtime_input *in,
                 double *ret_ms) {
  double t0 = now_ms();
  struct runtime_state *s = qdpt_encode(m, p, in);
  if (ret_ms) {
    *ret_ms = now_ms() - t0;
  }
  void *buf = qdpt_read_all(s);
  ck_assert_uint_eq(runtime_state_bytes(s), p->total_bytes);
  runtime_state_destroy(s);
  qdpt_assert_mesh_idle(m, runtime_mesh_backend(m));
  return buf;
}

void fill_values(double *x, uint64_t count, uint64_t seed) {
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (uint64_t i = 0; i < count; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (double)(s >> 11) / 9007199254740992.0 * 4.0 - 2.0;
  }
}

void *as_dtype(const double *x64, uint64_t count, qdp_dtype in) {
  void *buf = malloc((size_t)(count * qdp_dtype_size(in)));
  ck_assert_ptr_nonnull(buf);
  for (uint64_t i = 0; i < count; i++) {
    if (in == QDP_DTYPE_FLOAT32) {
      ((float *)buf)[i] = (float)x64[i];
    } else if (in == QDP_DTYPE_INT64) {
      ((int64_t *)buf)[i] = (int64_t)x64[i];
    } else {
      ((double *)buf)[i] = x64[i];
    }
  }
  return buf;
}

struct compare compare_states(const void *got, const void *ref, uint64_t amps, qdp_dtype out,
                              uint32_t qubits, double tol, const char *what) {
  struct compare c = {0, 0, 0.0};
  double scale = pow(2.0, -(double)qubits / 2.0);
  uint64_t bad = 0, worst_at = 0;
  double worst_g = 0, worst_r = 0;
  for (uint64_t i = 0; i < 2 * amps; i++) {
    double g, r;
    int same;
    if (out == QDP_DTYPE_COMPLEX64) {
      float gf = ((const float *)got)[i], rf = ((const float *)ref)[i];
      same = memcmp(&gf, &rf, sizeof gf) == 0;
      g = gf;
      r = rf;
    } else {
      g = ((const double *)got)[i];
      r = ((const double *)ref)[i];
      same = memcmp(&g, &r, sizeof g) == 0;
    }
    double rel = fabs(g - r) / fmax(fabs(r), scale);
    if (!(rel <= tol)) {
      bad++;
    }
    if (!(rel <= c.worst)) {
      c.worst = isnan(rel) ? INFINITY : rel;
      worst_at = i;
      worst_g = g;
      worst_r = r;
    }
    c.values++;
    c.identical += (uint64_t)same;
  }
  printf("  %-58s %10" PRIu64 " values, %10" PRIu64 " bit-identical, worst rel %.3g\n", what,
         c.values, c.identical, c.worst);
  fflush(stdout);
  ck_assert_msg(bad == 0,
                "%s: %" PRIu64 " of %" PRIu64
                " values differ by more than %g relative; worst "
                "at %" PRIu64 " (%s part of amplitude %" PRIu64 "): %.17g vs CPU %.17g",
                what, bad, c.values, tol, worst_at, worst_at % 2 ? "imaginary" : "real",
                worst_at / 2, worst_g, worst_r);
  return c;
}

double *values_for(qdp_encoding enc, uint32_t n, uint64_t rows, uint64_t cols, uint64_t seed) {
  double *x = malloc((size_t)(rows * cols * sizeof *x));
  ck_assert_ptr_nonnull(x);
  fill_values(x, rows * cols, seed);
  if (enc == QDP_ENCODING_BASIS) {
    for (uint64_t r = 0; r < rows; r++) {
      x[r] = (double)((r * 2654435761u + 17) % (UINT64_C(1) << n));
    }
  }
  return x;
}
