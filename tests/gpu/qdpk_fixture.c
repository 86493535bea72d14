/* qdpk_fixture.c — the helpers of qdpk_fixture.h. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "common.h"
#include "qdpk_fixture.h"

size_t real_size(qdp_dtype t) {
  return t == QDP_DTYPE_FLOAT32 ? 4 : 8;
}

size_t cplx_size(qdp_dtype t) {
  return t == QDP_DTYPE_COMPLEX64 ? 8 : 16;
}

void *dmalloc(size_t bytes) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  ck_assert_msg(e == cudaSuccess, "cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorName(e));
  return p;
}

void *to_device(const void *host, size_t bytes) {
  void *d = dmalloc(bytes);
  ck_assert_int_eq(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

void from_device(void *host, const void *dev, size_t bytes) {
  ck_assert_int_eq(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

void poison_device(void *dev, size_t bytes) {
  ck_assert_int_eq(cudaMemset(dev, 0xff, bytes), cudaSuccess);
}

void poison_host(void *host, size_t bytes) {
  memset(host, 0xff, bytes);
}

double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double t_start;

void expect_launch(qdp_status rc, const char *what) {
  fprintf(stderr, "%8.2f s  %s\n", seconds() - t_start, what);
  ck_assert_msg(rc == QDP_OK, "%s: launcher returned %s (%s)", what, qdp_status_name(rc),
                cudaGetErrorName(cudaPeekAtLastError()));
  cudaError_t e = cudaDeviceSynchronize();
  ck_assert_msg(e == cudaSuccess, "%s: kernel failed: %s", what, cudaGetErrorName(e));
}

void *random_reals(qdp_dtype t, uint64_t n, double lo, double hi, int spread) {
  void *p = qdpt_xmalloc((size_t)n * real_size(t));
  for (uint64_t i = 0; i < n; i++) {
    double v = qdpt_rng_uniform(lo, hi);
    if (spread) {
      v = ldexp(v, (int)(qdpt_rng_next() % 17) - 8);
    }
    if (t == QDP_DTYPE_FLOAT32) {
      ((float *)p)[i] = (float)v;
    } else {
      ((double *)p)[i] = v;
    }
  }
  return p;
}

double get_re(const void *p, qdp_dtype out, uint64_t i, int part) {
  return out == QDP_DTYPE_COMPLEX64 ? (double)((const float *)p)[2 * i + part]
                                    : ((const double *)p)[2 * i + part];
}

void expect_close(const void *gpu, const void *cpu, qdp_dtype out, uint64_t n, const char *what) {
  double tol = out == QDP_DTYPE_COMPLEX64 ? TOL32 : TOL64;
  double max_ref = 0, max_diff = 0;
  uint64_t worst = 0, ref_nan = 0, gpu_nan = 0;
  int any_ref_nan = 0, any_gpu_nan = 0;
  for (uint64_t i = 0; i < n; i++) {
    for (int part = 0; part < 2; part++) {
      double g = get_re(gpu, out, i, part), c = get_re(cpu, out, i, part);
      if (isnan(c) && !any_ref_nan) {
        any_ref_nan = 1;
        ref_nan = i;
      }
      if (isnan(g) && !any_gpu_nan) {
        any_gpu_nan = 1;
        gpu_nan = i;
      }
      if (fabs(c) > max_ref) {
        max_ref = fabs(c);
      }
      if (fabs(g - c) > max_diff) {
        max_diff = fabs(g - c);
        worst = i;
      }
    }
  }
  ck_assert_msg(!any_ref_nan, "%s: reference value %llu is NaN", what, (unsigned long long)ref_nan);
  ck_assert_msg(!any_gpu_nan, "%s: amplitude %llu was not written (NaN)", what,
                (unsigned long long)gpu_nan);
  ck_assert_msg(max_ref > 0, "%s: reference is all zeros", what);
  ck_assert_msg(max_diff <= tol * max_ref,
                "%s: max |gpu - cpu| = %.3e at %llu (gpu %.17g%+.17gi, cpu %.17g%+.17gi), "
                "relative %.3e > %.0e",
                what, max_diff, (unsigned long long)worst, get_re(gpu, out, worst, 0),
                get_re(gpu, out, worst, 1), get_re(cpu, out, worst, 0), get_re(cpu, out, worst, 1),
                max_diff / max_ref, tol);
}

void expect_same_bits(const void *gpu, const void *cpu, size_t bytes, size_t elem,
                      const char *what) {
  if (memcmp(gpu, cpu, bytes) == 0) {
    return;
  }
  size_t i = 0;
  while (memcmp((const char *)gpu + i * elem, (const char *)cpu + i * elem, elem) == 0) {
    i++;
  }
  ck_abort_msg("%s: bits differ first at element %zu of %zu", what, i, bytes / elem);
}

size_t in_size(qdp_dtype in) {
  return in == QDP_DTYPE_FLOAT32 ? 4 : 8;
}
