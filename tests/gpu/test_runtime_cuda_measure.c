/* test_runtime_cuda_measure.c — measurements on the CUDA backend against the CPU backend's of the
 * same states: probabilities of every basis state and of a few and of many qubits, Pauli strings
 * of Z alone and with X and Y (their partner windows elsewhere in the state), both precisions,
 * windows small enough that the tree over them has levels, and the same bits when measured
 * again. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"
#include "runtime_cuda_fixture.h"

static double worst(const double *a, const double *b, uint64_t n) {
  double w = 0;
  for (uint64_t i = 0; i < n; i++) {
    w = fmax(w, fabs(a[i] - b[i]));
  }
  return w;
}

static void against_cpu(qdp_encoding enc, uint32_t n, uint64_t rows, uint64_t cols, qdp_dtype dt,
                        unsigned window_log2) {
  struct runtime_mesh *gpu = qdpt_mesh("cuda:0", 0, 0);
  struct runtime_mesh *cpu = qdpt_mesh("cpu:1", 8 * GIB, 0);
  double *x = values_for(enc, n, rows, cols, 9);
  struct runtime_state *g = qdpt_encode_f64(gpu, 1, PLAN_SINGLE, enc, n, rows, cols, x, dt);
  struct runtime_state *c = qdpt_encode_f64(cpu, 1, PLAN_SINGLE, enc, n, rows, cols, x, dt);
  const uint32_t few[2] = {n - 1, 0}, many[9] = {0, 1, 2, 3, 4, 5, 6, 7, n - 1};
  const struct runtime_pauli ps[4] = {
      {0, 1, 0}, {0, ((uint64_t)1 << n) - 1, 0}, {(uint64_t)1 << (n - 1), 1, 0}, {3, 2, 1}};
  const struct runtime_measure reqs[4] = {{0, NULL, 0, NULL, window_log2},
                                          {2, few, 0, NULL, window_log2},
                                          {9, many, 0, NULL, window_log2},
                                          {0, NULL, 4, ps, window_log2}};
  const char *names[4] = {"every basis state", "2 qubits", "9 qubits", "4 Pauli strings"};
  /* complex64: each backend encoded its own state, equal to float rounding */
  double tol = dt == QDP_DTYPE_COMPLEX64 ? 1e-6 : 1e-14;
  for (int k = 0; k < 4; k++) {
    uint64_t w = reqs[k].npaulis ? reqs[k].npaulis
                 : reqs[k].nqubits ? (uint64_t)1 << reqs[k].nqubits
                                   : (uint64_t)1 << n;
    double *a = malloc(rows * w * 8), *a2 = malloc(rows * w * 8), *b = malloc(rows * w * 8);
    struct qdp_error e = QDP_ERROR_INIT;
    double t0 = now_ms();
    ck_assert_msg(runtime_state_measure(gpu, g, &reqs[k], a, NULL, &e) == QDP_OK, "%s", e.msg);
    double ms = now_ms() - t0;
    ck_assert_msg(runtime_state_measure(gpu, g, &reqs[k], a2, NULL, &e) == QDP_OK, "%s", e.msg);
    ck_assert_msg(runtime_state_measure(cpu, c, &reqs[k], b, NULL, &e) == QDP_OK, "%s", e.msg);
    double d = worst(a, b, rows * w);
    bool again = memcmp(a, a2, rows * w * 8) == 0;
    printf("  measure %s %u qubits x %llu %s, windows of 2^%u, %s: |gpu - cpu| <= %.3g, %.3f ms%s\n",
           qdp_encoding_name(enc), n, (unsigned long long)rows, qdp_dtype_name(dt),
           window_log2 < n ? window_log2 : n, names[k], d, ms,
           again ? ", the same bits again" : ", OTHER BITS AGAIN");
    ck_assert_msg(d <= tol, "%s: |gpu - cpu| = %g > %g", names[k], d, tol);
    ck_assert(again);
    free(a);
    free(a2);
    free(b);
  }
  runtime_state_destroy(g);
  runtime_state_destroy(c);
  free(x);
  qdpt_assert_mesh_idle(gpu, "after the GPU measurements");
  runtime_mesh_destroy(gpu);
  runtime_mesh_destroy(cpu);
}

START_TEST(test_measure_against_the_cpu) {
  against_cpu(QDP_ENCODING_IQP, 14, 3, 14 + 91, QDP_DTYPE_COMPLEX128, 12);
  against_cpu(QDP_ENCODING_IQP, 14, 3, 14 + 91, QDP_DTYPE_COMPLEX64, RUNTIME_MEASURE_WINDOW_LOG2);
  against_cpu(QDP_ENCODING_AMPLITUDE, 16, 4, 60000, QDP_DTYPE_COMPLEX128, 10);
  against_cpu(QDP_ENCODING_PHASE, 20, 1, 20, QDP_DTYPE_COMPLEX128, RUNTIME_MEASURE_WINDOW_LOG2);
}
END_TEST

void runtime_cuda_add_measure(TCase *tc) {
  tcase_add_test(tc, test_measure_against_the_cpu);
}
