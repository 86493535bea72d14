/* test_runtime_ranks.c — the same jobs split over the ranks of a world (ranks as threads:
 * world_harness.h) giving the one-device bits: amplitude, its scaled fallback, iqp and the closed
 * forms; and a zero-norm sample refused on every rank. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"
#include "plan/plan.h"
#include "runtime/runtime.h"
#include "runtime_fixture.h"
#include "world_harness.h"

/* ---- ranks ---- */

/* Encodes on `ranks` ranks of cpu:per_rank each, over the first ndev devices of the world
 * (rank-major), and on one device of one mesh; the two must have the same bits. */
static void check_ranks_give_one_device_bits(int ranks, size_t per_rank, size_t ndev,
                                             enum plan_policy policy, qdp_encoding enc, uint32_t n,
                                             uint64_t batch, uint64_t cols, qdp_dtype in,
                                             qdp_dtype out, double scale) {
  struct runtime_mesh *meshes[16];
  char spec[16];
  snprintf(spec, sizeof spec, "cpu:%zu", per_rank);
  for (int r = 0; r < ranks; r++) {
    meshes[r] = qdpt_mesh(spec, GIB, 0);
  }
  struct plan_device devs[64];
  harness_plan_devices(meshes, ranks, per_rank, devs);
  size_t subset[64];
  for (size_t i = 0; i < ndev; i++) {
    subset[i] = i;
  }
  struct plan_world world = {.devices = devs, .count = (size_t)ranks * per_rank, .ranks = ranks};
  struct plan_request req = {.encoding = enc,
                             .qubits = n,
                             .batch = batch,
                             .values_per_sample = cols,
                             .in_dtype = in,
                             .out_dtype = out,
                             .policy = policy,
                             .device_subset = subset,
                             .device_subset_count = ndev,
                             .iqp_top_bits = runtime_mesh_iqp_top_bits(meshes[0])};
  struct plan *p = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(plan_compute(&req, &world, NULL, &p, &e), e);
  CK_OK(plan_check_feasible(p, &e), e);
  ck_assert_int_eq(p->shards[p->nshards - 1].rank, ranks - 1); /* the last rank takes part */

  uint64_t count = batch * cols;
  double *x = random_values(count, 7 + n);
  if (enc == QDP_ENCODING_BASIS) {
    for (uint64_t i = 0; i < count; i++) {
      x[i] = (double)((i * 2654435761u) % (UINT64_C(1) << n));
    }
  }
  float *x32 = malloc(count * sizeof *x32);
  for (uint64_t i = 0; i < count; i++) {
    x[i] *= scale;
    x32[i] = (float)x[i];
  }
  struct runtime_input input = {.data = in == QDP_DTYPE_FLOAT32 ? (void *)x32 : (void *)x,
                                .dtype = in,
                                .rows = batch,
                                .cols = cols};
  void *got = NULL;
  CK_OK(harness_encode(meshes, ranks, per_rank, p, &input, &got, &e), e);
  struct runtime_mesh *one = qdpt_mesh("cpu:1", GIB, 0);
  struct plan *p1 =
      qdpt_plan_on(one, 1, batch > 1 ? PLAN_BATCH : PLAN_SINGLE, enc, n, batch, cols, in, out);
  void *want = qdpt_encode_read(one, p1, &input);
  size_t bytes = batch * p->amplitudes * qdp_dtype_size(out);
  ck_assert_msg(memcmp(got, want, bytes) == 0,
                "encoding %d, %u qubits over %d ranks x %zu devices (%zu used): the bits differ "
                "from one device",
                (int)enc, n, ranks, per_rank, ndev);
  for (int r = 0; r < ranks; r++) {
    qdpt_assert_mesh_idle(meshes[r], "after the ranks' encode");
    runtime_mesh_destroy(meshes[r]);
  }
  free(got);
  free(want);
  free(x);
  free(x32);
  plan_destroy(p);
  plan_destroy(p1);
  runtime_mesh_destroy(one);
}

START_TEST(test_amplitude_over_ranks_gives_one_device_bits) {
  /* The norm's blocks of every rank are gathered and combined along the one tree. */
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_EVEN, QDP_ENCODING_AMPLITUDE, 12, 1, 4096 - 777,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  check_ranks_give_one_device_bits(3, 2, 6, PLAN_UNEVEN, QDP_ENCODING_AMPLITUDE, 11, 1, 2048,
                                   QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0);
  /* The last ranks hold only padding: their input window is empty. */
  check_ranks_give_one_device_bits(4, 1, 4, PLAN_EVEN, QDP_ENCODING_AMPLITUDE, 10, 1, 300,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  /* Whole samples per device, samples split between ranks. */
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_BATCH, QDP_ENCODING_AMPLITUDE, 6, 9, 50,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
}
END_TEST

/* The norm's fallback across ranks: every rank decides it from the same gathered sums, the
 * exponent is the maximum over every rank's values, and the scaled blocks are gathered and
 * combined as the plain ones are, so the bits are one device's. */
START_TEST(test_amplitude_fallback_over_ranks_gives_one_device_bits) {
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_EVEN, QDP_ENCODING_AMPLITUDE, 12, 1, 4096 - 777,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1e-170);
  check_ranks_give_one_device_bits(3, 2, 6, PLAN_UNEVEN, QDP_ENCODING_AMPLITUDE, 11, 1, 2000,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 1e30);
  check_ranks_give_one_device_bits(3, 1, 3, PLAN_CAPACITY, QDP_ENCODING_AMPLITUDE, 10, 1, 1000,
                                   QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1e-25);
  check_ranks_give_one_device_bits(4, 1, 4, PLAN_EVEN, QDP_ENCODING_AMPLITUDE, 10, 1, 300,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1e160);
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_BATCH, QDP_ENCODING_AMPLITUDE, 6, 9, 50,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1e-200);
}
END_TEST

START_TEST(test_iqp_over_ranks_gives_one_device_bits) {
  /* 8 shards on 4 ranks: the top 3 bits, each shard alone, no exchange. */
  check_ranks_give_one_device_bits(4, 2, 8, PLAN_EVEN, QDP_ENCODING_IQP, 7, 1, 7 + 21,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  /* 32 shards on 8 ranks of 4: global bits 0 and 1, below the top 3, pair shards of one rank.
   * 16 on 16 ranks of 1: bit 0 pairs ranks, which exchange through the world. */
  check_ranks_give_one_device_bits(8, 4, 32, PLAN_EVEN, QDP_ENCODING_IQP, 8, 1, 8 + 28,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  check_ranks_give_one_device_bits(16, 1, 16, PLAN_EVEN, QDP_ENCODING_IQP, 8, 1, 8 + 28,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  check_ranks_give_one_device_bits(16, 1, 16, PLAN_EVEN, QDP_ENCODING_IQP_Z, 8, 1, 8,
                                   QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0);
  check_ranks_give_one_device_bits(2, 1, 2, PLAN_EVEN, QDP_ENCODING_IQP, 6, 1, 6 + 15,
                                   QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0);
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_EVEN, QDP_ENCODING_IQP_Z, 8, 1, 8,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
}
END_TEST

START_TEST(test_closed_forms_over_ranks_give_one_device_bits) {
  check_ranks_give_one_device_bits(3, 2, 6, PLAN_UNEVEN, QDP_ENCODING_ANGLE, 9, 1, 9,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_EVEN, QDP_ENCODING_PHASE, 8, 1, 8,
                                   QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0);
  check_ranks_give_one_device_bits(2, 2, 4, PLAN_BATCH, QDP_ENCODING_BASIS, 5, 7, 1,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
}
END_TEST

START_TEST(test_zero_norm_over_ranks_is_refused_on_every_rank) {
  /* Every rank sees every block, so every rank refuses (no rank waits for another). */
  struct runtime_mesh *meshes[2] = {qdpt_mesh("cpu:1", GIB, 0), qdpt_mesh("cpu:1", GIB, 0)};
  struct plan_device devs[2];
  harness_plan_devices(meshes, 2, 1, devs);
  struct plan_world world = {.devices = devs, .count = 2, .ranks = 2};
  struct plan_request req = {.encoding = QDP_ENCODING_AMPLITUDE,
                             .qubits = 4,
                             .batch = 1,
                             .values_per_sample = 16,
                             .in_dtype = QDP_DTYPE_FLOAT64,
                             .out_dtype = QDP_DTYPE_COMPLEX128,
                             .policy = PLAN_EVEN};
  struct plan *p = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(plan_compute(&req, &world, NULL, &p, &e), e);
  double x[16] = {0};
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = 16};
  void *got = NULL;
  CK_STATUS(harness_encode(meshes, 2, 1, p, &in, &got, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_ptr_null(got);
  ck_assert_msg(strstr(e.msg, "sample 0 has zero norm"), "%s", e.msg);
  /* On rank 1 only: the ranks gather where each sample's first bad value is, so rank 0 names it
   * too. */
  x[12] = NAN;
  CK_STATUS(harness_encode(meshes, 2, 1, p, &in, &got, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_msg(strstr(e.msg, "sample 0 value 12 is nan"), "rank 0 says: %s", e.msg);
  for (int r = 0; r < 2; r++) {
    qdpt_assert_mesh_idle(meshes[r], "after the refusals");
    runtime_mesh_destroy(meshes[r]);
  }
  plan_destroy(p);
}
END_TEST

void runtime_add_encode_ranks(TCase *tc) {
  tcase_add_test(tc, test_amplitude_over_ranks_gives_one_device_bits);
  tcase_add_test(tc, test_amplitude_fallback_over_ranks_gives_one_device_bits);
  tcase_add_test(tc, test_iqp_over_ranks_gives_one_device_bits);
  tcase_add_test(tc, test_closed_forms_over_ranks_give_one_device_bits);
  tcase_add_test(tc, test_zero_norm_over_ranks_is_refused_on_every_rank);
}
