/* test_runtime_cuda_kernel.c — the kernel matrix on the CUDA backend (cuBLAS) against the CPU
 * backend's of the same states: both precisions, real states (amplitude, angle: the real
 * products) and complex ones (iqp, phase), a state with itself (HERK tiles on the diagonal,
 * GEMM ones mirrored) and with another, blocks small enough that the fixed tree has levels, the
 * result the same bits when computed again, and, with two GPUs, the same bits from a batch split
 * over them as from one. */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"
#include "runtime_cuda_fixture.h"

/* The largest |gpu - cpu| over n values of the result (complex when overlaps). */
static double worst(const void *gpu, const void *cpu, uint64_t n, qdp_dtype dt, bool overlaps) {
  double w = 0;
  uint64_t scalars = overlaps ? 2 * n : n;
  for (uint64_t i = 0; i < scalars; i++) {
    double g = dt == QDP_DTYPE_COMPLEX64 ? ((const float *)gpu)[i] : ((const double *)gpu)[i];
    double c = dt == QDP_DTYPE_COMPLEX64 ? ((const float *)cpu)[i] : ((const double *)cpu)[i];
    w = fmax(w, fabs(g - c));
  }
  return w;
}

static void against_cpu(qdp_encoding enc, uint32_t n, uint64_t cols, qdp_dtype dt,
                        struct runtime_kernel_tiles tiles) {
  struct runtime_mesh *gpu = qdpt_mesh("cuda:0", 0, 0);
  struct runtime_mesh *cpu = qdpt_mesh("cpu:1", 4 * GIB, 0);
  const uint64_t ra = 37, rb = 21; /* tiles that are not powers of two */
  double *x = values_for(enc, n, ra, cols, 5), *y = values_for(enc, n, rb, cols, 6);
  struct runtime_state *ga = qdpt_encode_f64(gpu, 1, PLAN_SINGLE, enc, n, ra, cols, x, dt);
  struct runtime_state *gb = qdpt_encode_f64(gpu, 1, PLAN_SINGLE, enc, n, rb, cols, y, dt);
  struct runtime_state *ca = qdpt_encode_f64(cpu, 1, PLAN_SINGLE, enc, n, ra, cols, x, dt);
  struct runtime_state *cb = qdpt_encode_f64(cpu, 1, PLAN_SINGLE, enc, n, rb, cols, y, dt);
  size_t es = qdp_dtype_size(dt);
  double tol = dt == QDP_DTYPE_COMPLEX64 ? 2e-6 : 1e-14;
  for (int overlaps = 0; overlaps <= 1; overlaps++) {
    size_t oes = overlaps ? es : es / 2;
    for (int self = 0; self <= 1; self++) {
      uint64_t nc = self ? ra : rb;
      void *g = malloc(ra * nc * oes), *g2 = malloc(ra * nc * oes), *c = malloc(ra * nc * oes);
      struct qdp_error e = QDP_ERROR_INIT;
      const char *dev = NULL;
      ck_assert_msg(runtime_state_kernel(gpu, ga, self ? NULL : gb, overlaps, tiles, g, &dev,
                                         &e) == QDP_OK,
                    "%s", e.msg);
      ck_assert_str_eq(dev, "cuda:0");
      ck_assert_msg(runtime_state_kernel(gpu, ga, self ? NULL : gb, overlaps, tiles, g2, NULL,
                                         &e) == QDP_OK,
                    "%s", e.msg);
      ck_assert_msg(runtime_state_kernel(cpu, ca, self ? NULL : cb, overlaps, tiles, c, NULL,
                                         &e) == QDP_OK,
                    "%s", e.msg);
      double w = worst(g, c, ra * nc, dt, overlaps);
      bool again = memcmp(g, g2, ra * nc * oes) == 0;
      printf("  kernel %s %u qubits %s, blocks of 2^%u, tiles of %u, %s, %s: |gpu - cpu| <= %.3g%s\n",
             qdp_encoding_name(enc), n, qdp_dtype_name(dt),
             tiles.block_log2 < n ? tiles.block_log2 : n, (unsigned)tiles.tile_rows,
             self ? "a with itself" : "a with b", overlaps ? "overlaps" : "fidelities", w,
             again ? ", the same bits again" : ", OTHER BITS AGAIN");
      ck_assert_msg(w <= tol, "|gpu - cpu| = %g > %g", w, tol);
      ck_assert(again);
      free(g);
      free(g2);
      free(c);
    }
  }
  runtime_state_destroy(ga);
  runtime_state_destroy(gb);
  runtime_state_destroy(ca);
  runtime_state_destroy(cb);
  free(x);
  free(y);
  qdpt_assert_mesh_idle(gpu, "after the GPU kernels");
  runtime_mesh_destroy(gpu);
  runtime_mesh_destroy(cpu);
}

START_TEST(test_kernel_against_the_cpu) {
  struct runtime_kernel_tiles small = {6, 16}, tiny = {3, 5};
  against_cpu(QDP_ENCODING_AMPLITUDE, 10, 1000, QDP_DTYPE_COMPLEX128, RUNTIME_KERNEL_TILES);
  against_cpu(QDP_ENCODING_AMPLITUDE, 10, 1000, QDP_DTYPE_COMPLEX128, small);
  against_cpu(QDP_ENCODING_AMPLITUDE, 10, 1000, QDP_DTYPE_COMPLEX64, small);
  against_cpu(QDP_ENCODING_IQP, 6, 21, QDP_DTYPE_COMPLEX128, tiny);
  against_cpu(QDP_ENCODING_IQP, 6, 21, QDP_DTYPE_COMPLEX64, tiny);
  against_cpu(QDP_ENCODING_PHASE, 8, 8, QDP_DTYPE_COMPLEX128, RUNTIME_KERNEL_TILES);
  against_cpu(QDP_ENCODING_ANGLE, 8, 8, QDP_DTYPE_COMPLEX64, RUNTIME_KERNEL_TILES);
}
END_TEST

START_TEST(test_kernel_same_bits_over_two_gpus) {
  struct runtime_mesh *m = qdpt_mesh("auto", 0, 0);
  if (runtime_mesh_count(m) < 2) {
    printf("  kernel over two GPUs: SKIPPED, this machine has %zu GPU\n", runtime_mesh_count(m));
    runtime_mesh_destroy(m);
    return;
  }
  double *x = values_for(QDP_ENCODING_IQP, 8, 64, 36, 7);
  struct runtime_state *one =
      qdpt_encode_f64(m, 1, PLAN_SINGLE, QDP_ENCODING_IQP, 8, 64, 36, x, QDP_DTYPE_COMPLEX128);
  struct runtime_state *two =
      qdpt_encode_f64(m, 2, PLAN_BATCH, QDP_ENCODING_IQP, 8, 64, 36, x, QDP_DTYPE_COMPLEX128);
  double complex *k1 = malloc(64 * 64 * 16), *k2 = malloc(64 * 64 * 16);
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(runtime_state_kernel(m, one, NULL, true, ((struct runtime_kernel_tiles){4, 24}), k1, NULL, &e), QDP_OK);
  ck_assert_int_eq(runtime_state_kernel(m, two, NULL, true, ((struct runtime_kernel_tiles){4, 24}), k2, NULL, &e), QDP_OK);
  ck_assert_msg(memcmp(k1, k2, 64 * 64 * 16) == 0, "a batch over two GPUs: other bits");
  printf("  kernel over two GPUs: the bits of one\n");
  runtime_state_destroy(one);
  runtime_state_destroy(two);
  free(k1);
  free(k2);
  free(x);
  runtime_mesh_destroy(m);
}
END_TEST

void runtime_cuda_add_kernel(TCase *tc) {
  tcase_add_test(tc, test_kernel_against_the_cpu);
  tcase_add_test(tc, test_kernel_same_bits_over_two_gpus);
}
