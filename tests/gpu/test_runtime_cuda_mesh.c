/* test_runtime_cuda_mesh.c — meshes of GPUs: the mesh describing its GPUs and refusing bad specs;
 * even shards over two GPUs giving the one-GPU bits (over NCCL and through the host fallback); the
 * same state split over two ranks (threads of this process, one GPU each where there are two: the
 * cross-rank norm and global-bit stage through host memory, and over an NCCL group) giving the
 * one-GPU bits; and a device group that bounds every wait on another process. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"
#include "device_comm.h"
#include "plan/plan.h"
#include "runtime/mesh.h"
#include "runtime/runtime.h"
#include "runtime_cuda_fixture.h"
#include "world/mesh_group.h"
#include "world_harness.h"

/* ---- two GPUs ----------------------------------------------------------------------------------
 */

/* A mesh of every GPU with the device group world_start would hand it; wanted false: none, the
 * fallback when NCCL cannot be used. */
static struct runtime_mesh *mesh_grouped(const struct runtime_mesh_config *cfg, bool wanted,
                                         struct mesh_group **ret_group) {
  struct runtime_mesh *m = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_mesh_create(cfg, &m, &e), e);
  CK_OK(mesh_group_create(m, wanted, ret_group, &e), e);
  return m;
}

START_TEST(test_two_gpus_even_shards_give_one_gpu_bits) {
  struct runtime_mesh_config cfg = {.devices = "auto", .staging_bytes = SMALL_STAGING};
  struct mesh_group *mg = NULL, *hg = NULL;
  struct runtime_mesh *m = mesh_grouped(&cfg, true, &mg);
  ck_assert_str_eq(runtime_mesh_backend(m), "cuda");
  if (runtime_mesh_count(m) < 2) {
    printf("  two GPUs: SKIPPED, this machine has %zu GPU\n", runtime_mesh_count(m));
    fflush(stdout);
    mesh_group_destroy(mg);
    runtime_mesh_destroy(m);
    return;
  }
  /* The same mesh reducing on the host: the fallback when NCCL cannot be used. */
  struct runtime_mesh *host = mesh_grouped(&cfg, false, &hg);
  int nccl = strncmp(runtime_mesh_collectives(m), "nccl", 4) == 0;
  printf("  collectives: %s; fallback mesh: %s\n", runtime_mesh_collectives(m),
         runtime_mesh_collectives(host));
  ck_assert_str_eq(runtime_mesh_collectives(host), "host (configured)");
  static const struct {
    qdp_encoding enc;
    uint32_t n;
    uint64_t batch;
    qdp_dtype in, out;
    double scale; /* amplitude: values times this (1e-170, 1e30: the norm's fallback) */
    int uneven;   /* policy uneven, which over two GPUs makes the even halves */
  } cases[] = {
      /* 2^20 - 5 values: the second shard holds [2^19, 2^20 - 5) and 5 zeros; with 1 MiB
       * staging each shard also goes through 8 chunks (8 norm parts each). */
      {QDP_ENCODING_AMPLITUDE, 20, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0, 0},
      {QDP_ENCODING_AMPLITUDE, 20, 1, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0, 0},
      /* Short input: the second GPU's half is padding only (no parts of its own). */
      {QDP_ENCODING_AMPLITUDE, 15, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0, 0},
      /* The fallback after the device-collective norm: the totals go up again, scaled. */
      {QDP_ENCODING_AMPLITUDE, 20, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1e-170, 0},
      {QDP_ENCODING_AMPLITUDE, 20, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 1e30, 0},
      {QDP_ENCODING_AMPLITUDE, 15, 1, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1e-25, 0},
      /* iqp over the two GPUs: each transforms the top bits alone, nothing is exchanged. */
      {QDP_ENCODING_IQP, 14, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0, 0},
      {QDP_ENCODING_IQP_Z, 16, 1, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0, 0},
      {QDP_ENCODING_IQP, 13, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 1.0, 1},
      {QDP_ENCODING_ANGLE, 16, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint32_t n = cases[i].n;
    uint64_t rows = cases[i].batch;
    int amp = cases[i].enc == QDP_ENCODING_AMPLITUDE;
    uint64_t cols = !amp      ? qdp_values_per_sample(cases[i].enc, n)
                    : n == 15 ? UINT64_C(1) << (n - 2)
                              : (UINT64_C(1) << n) - 5;
    double *x64 = values_for(cases[i].enc, n, rows, cols, 77 + i);
    for (uint64_t k = 0; k < rows * cols; k++) {
      x64[k] *= cases[i].scale;
    }
    void *x = as_dtype(x64, rows * cols, cases[i].in);
    struct runtime_input input = {.data = x, .dtype = cases[i].in, .rows = rows, .cols = cols};
    struct plan *p1 =
        qdpt_plan_on(m, 1, PLAN_SINGLE, cases[i].enc, n, rows, cols, cases[i].in, cases[i].out);
    struct plan *p2 = qdpt_plan_on(m, 2, cases[i].uneven ? PLAN_UNEVEN : PLAN_EVEN, cases[i].enc, n,
                                   rows, cols, cases[i].in, cases[i].out);
    ck_assert_uint_eq(p2->nshards, 2);
    ck_assert_uint_eq(p2->global_bits, 1);
    ck_assert_uint_ne(p2->shards[0].device, p2->shards[1].device);
    void *one = encode_all(m, p1, &input, NULL);
    struct runtime_state *st = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    CK_OK(runtime_encode(m, p2, &input, &st, &e), e);
    const char *how = runtime_state_collective(st);
    ck_assert_str_eq(how, amp ? (nccl ? "nccl" : "host") : "none");
    runtime_state_destroy(st);
    void *two = encode_all(m, p2, &input, NULL);
    void *fallback = encode_all(host, p2, &input, NULL);
    int same = memcmp(one, two, (size_t)p1->total_bytes) == 0;
    int same_host = memcmp(one, fallback, (size_t)p1->total_bytes) == 0;
    printf("  %s %s->%s n=%u batch=%" PRIu64
           " scale %g%s: 1 GPU vs 2 GPUs (%s) %s, vs 2 GPUs "
           "(host) %s\n",
           qdp_encoding_name(cases[i].enc), qdp_dtype_name(cases[i].in),
           qdp_dtype_name(cases[i].out), n, rows, cases[i].scale, cases[i].uneven ? " uneven" : "",
           how, same ? "bit-identical" : "DIFFER", same_host ? "bit-identical" : "DIFFER");
    fflush(stdout);
    ck_assert_msg(same && same_host, "%s over 2 GPUs differs from 1 GPU",
                  qdp_encoding_name(cases[i].enc));
    free(fallback);
    free(two);
    free(one);
    plan_destroy(p2);
    plan_destroy(p1);
    free(x);
    free(x64);
  }
  /* A zero sample split over both GPUs is refused through the device path too, naming it. */
  {
    uint64_t rows = 1, cols = UINT64_C(1) << 12;
    double *x = calloc(rows * cols, sizeof *x);
    ck_assert_ptr_nonnull(x);
    struct runtime_input input = {
        .data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = rows, .cols = cols};
    struct plan *p2 = qdpt_plan_on(m, 2, PLAN_EVEN, QDP_ENCODING_AMPLITUDE, 12, rows, cols,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
    struct runtime_state *st = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    CK_STATUS(runtime_encode(m, p2, &input, &st, &e), QDP_ERR_INVALID_ARGUMENT, e);
    ck_assert_ptr_null(st);
    ck_assert_msg(strstr(e.msg, "sample 0 has zero norm") != NULL, "message: %s", e.msg);
    qdpt_assert_mesh_idle(m, "after the zero-norm refusal");
    plan_destroy(p2);
    free(x);
  }
  mesh_group_destroy(hg);
  mesh_group_destroy(mg);
  runtime_mesh_destroy(host);
  runtime_mesh_destroy(m);
}
END_TEST

/* An even plan of one sample over two ranks of one GPU each (ranks[r]: rank r's mesh), counting
 * the staging of `one`; shard 1 must land on rank 1. */
static struct plan *plan_two_ranks(struct runtime_mesh **ranks, struct runtime_mesh *one,
                                   qdp_encoding enc, uint32_t n, uint64_t cols, qdp_dtype in,
                                   qdp_dtype out) {
  struct plan_device devs[2];
  harness_plan_devices(ranks, 2, 1, devs);
  struct plan_world world = {.devices = devs, .count = 2, .ranks = 2};
  struct plan_request req = {.encoding = enc,
                             .qubits = n,
                             .batch = 1,
                             .values_per_sample = cols,
                             .in_dtype = in,
                             .out_dtype = out,
                             .policy = PLAN_EVEN,
                             .staging_bytes = runtime_mesh_staging_bytes(one),
                             .iqp_top_bits = runtime_mesh_iqp_top_bits(one)};
  struct plan *p = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(plan_compute(&req, &world, NULL, &p, &e), e);
  ck_assert_int_eq(p->shards[1].rank, 1);
  return p;
}

START_TEST(test_two_ranks_give_one_gpu_bits) {
  /* Each rank a mesh of its own GPU (both on cuda:0 when there is one): amplitude's norm blocks go
   * through the ranks' all-gather, iqp's last global bit through combine_host (the partner's half
   * in host memory, uploaded and combined by the butterfly kernel). */
  struct runtime_mesh *probe = qdpt_mesh("auto", 0, SMALL_STAGING);
  int gpus = (int)runtime_mesh_count(probe);
  runtime_mesh_destroy(probe);
  struct runtime_mesh *ranks[2] = {qdpt_mesh("cuda:0", 0, SMALL_STAGING),
                                   qdpt_mesh(gpus > 1 ? "cuda:1" : "cuda:0", 0, SMALL_STAGING)};
  struct runtime_mesh *one = qdpt_mesh("cuda:0", 0, SMALL_STAGING);
  static const struct {
    qdp_encoding enc;
    uint32_t n;
    qdp_dtype in, out;
    double scale; /* values times this: 1e-170 and 1e30 take the norm's fallback across ranks */
  } cases[] = {
      {QDP_ENCODING_AMPLITUDE, 20, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0},
      {QDP_ENCODING_AMPLITUDE, 20, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0},
      {QDP_ENCODING_AMPLITUDE, 20, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1e-170},
      {QDP_ENCODING_AMPLITUDE, 20, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 1e30},
      {QDP_ENCODING_IQP, 14, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0},
      {QDP_ENCODING_IQP_Z, 16, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint32_t n = cases[i].n;
    uint64_t cols = cases[i].enc == QDP_ENCODING_AMPLITUDE ? (UINT64_C(1) << n) - 5
                                                           : qdp_values_per_sample(cases[i].enc, n);
    double *x64 = values_for(cases[i].enc, n, 1, cols, 91 + i);
    for (uint64_t k = 0; k < cols; k++) {
      x64[k] *= cases[i].scale;
    }
    void *x = as_dtype(x64, cols, cases[i].in);
    struct runtime_input input = {.data = x, .dtype = cases[i].in, .rows = 1, .cols = cols};
    struct plan *p2 = plan_two_ranks(ranks, one, cases[i].enc, n, cols, cases[i].in, cases[i].out);
    struct qdp_error e = QDP_ERROR_INIT;
    struct plan *p1 =
        qdpt_plan_on(one, 1, PLAN_SINGLE, cases[i].enc, n, 1, cols, cases[i].in, cases[i].out);
    void *want = encode_all(one, p1, &input, NULL);
    void *got = NULL;
    CK_OK(harness_encode(ranks, 2, 1, p2, &input, &got, &e), e);
    int same = memcmp(want, got, (size_t)p1->total_bytes) == 0;
    printf("  %s %s->%s n=%u scale %g: 1 GPU vs 2 ranks (%s) %s\n", qdp_encoding_name(cases[i].enc),
           qdp_dtype_name(cases[i].in), qdp_dtype_name(cases[i].out), n, cases[i].scale,
           gpus > 1 ? "cuda:0 + cuda:1" : "both on cuda:0", same ? "bit-identical" : "DIFFER");
    fflush(stdout);
    ck_assert_msg(same, "%s over 2 ranks differs from 1 GPU", qdp_encoding_name(cases[i].enc));
    for (int r = 0; r < 2; r++) {
      qdpt_assert_mesh_idle(ranks[r], "after the ranks' encode");
    }
    free(got);
    free(want);
    plan_destroy(p2);
    plan_destroy(p1);
    free(x);
    free(x64);
  }
  runtime_mesh_destroy(ranks[0]);
  runtime_mesh_destroy(ranks[1]);
  runtime_mesh_destroy(one);
}
END_TEST

/* ---- one NCCL group across ranks (threads here, one GPU each) ---------------------------------
 */

struct joiner {
  const unsigned char *id;
  int size, member, ordinal;
  uint64_t timeout_ms;
  struct device_comm *group;
  qdp_status rc;
  struct qdp_error err;
  double ms;
};

static void *join_group(void *arg) {
  struct joiner *j = arg;
  double t0 = now_ms();
  j->err = (struct qdp_error)QDP_ERROR_INIT;
  j->rc = device_comm_create_members(j->id, j->size, j->member, &j->ordinal, 1, j->timeout_ms,
                                     &j->group, &j->err);
  j->ms = now_ms() - t0;
  return NULL;
}

/* Members 0..n-1 of one group, member r on cuda:r, each joined from its own thread as the ranks
 * of a world do from their processes. */
static void make_group(int n, uint64_t timeout_ms, struct device_comm **ret) {
  unsigned char id[DEVICE_COMM_ID_BYTES];
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(device_comm_unique_id(id, &e), e);
  struct joiner j[2];
  pthread_t tid[2];
  for (int r = 0; r < n; r++) {
    j[r] =
        (struct joiner){.id = id, .size = n, .member = r, .ordinal = r, .timeout_ms = timeout_ms};
    ck_assert_int_eq(pthread_create(&tid[r], NULL, join_group, &j[r]), 0);
  }
  for (int r = 0; r < n; r++) {
    pthread_join(tid[r], NULL);
    CK_OK_AT(j[r].rc, j[r].err, "member %d", r);
    ret[r] = j[r].group;
  }
}

START_TEST(test_two_ranks_over_nccl_give_one_gpu_bits) {
  /* The world's path when every device is a GPU: the amplitude norm's partial sums all-gathered
   * over one NCCL group joining both ranks' GPUs (after the ranks agree that all partials are
   * queued), each GPU combining them along the same tree; iqp's global-bit stage between the
   * ranks swapped over the group piece by piece. */
  if (runtime_cuda_device_count() < 2) {
    printf("  SKIP: NCCL across ranks needs two GPUs (a GPU can be one member only)\n");
    return;
  }
  struct runtime_mesh *ranks[2] = {qdpt_mesh("cuda:0", 0, SMALL_STAGING),
                                   qdpt_mesh("cuda:1", 0, SMALL_STAGING)};
  struct runtime_mesh *one = qdpt_mesh("cuda:0", 0, SMALL_STAGING);
  struct device_comm *groups[2];
  make_group(2, 20000, groups);
  static const struct {
    qdp_encoding enc;
    uint32_t n;
    uint64_t cols;
    qdp_dtype in, out;
    double scale; /* values times this: not 1, the norm's fallback after the NCCL gather */
  } cases[] = {
      {QDP_ENCODING_AMPLITUDE, 20, (UINT64_C(1) << 20) - 5, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128,
       1.0},
      {QDP_ENCODING_AMPLITUDE, 20, (UINT64_C(1) << 19) + 3, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64,
       1.0},
      {QDP_ENCODING_AMPLITUDE, 18, UINT64_C(1) << 18, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0},
      /* rank 1 holds padding only */
      {QDP_ENCODING_AMPLITUDE, 16, 1000, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0},
      {QDP_ENCODING_AMPLITUDE, 20, (UINT64_C(1) << 20) - 5, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128,
       1e-170},
      {QDP_ENCODING_AMPLITUDE, 20, (UINT64_C(1) << 19) + 3, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64,
       1e39},
      {QDP_ENCODING_AMPLITUDE, 16, 1000, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1e-25},
      /* 2^22 complex128 per rank: 4 exchange pieces of 16 MiB */
      {QDP_ENCODING_IQP, 23, 23 + 23 * 22 / 2, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0},
      {QDP_ENCODING_IQP_Z, 16, 16, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    qdp_encoding enc = cases[i].enc;
    uint32_t n = cases[i].n;
    uint64_t cols = cases[i].cols;
    double *x64 = values_for(enc, n, 1, cols, 191 + i);
    for (uint64_t k = 0; k < cols; k++) {
      x64[k] *= cases[i].scale;
    }
    void *x = as_dtype(x64, cols, cases[i].in);
    struct runtime_input input = {.data = x, .dtype = cases[i].in, .rows = 1, .cols = cols};
    struct plan *p2 = plan_two_ranks(ranks, one, enc, n, cols, cases[i].in, cases[i].out);
    struct qdp_error e = QDP_ERROR_INIT;
    struct plan *p1 = qdpt_plan_on(one, 1, PLAN_SINGLE, enc, n, 1, cols, cases[i].in, cases[i].out);
    void *want = encode_all(one, p1, &input, NULL);
    void *got = NULL;
    const char *how = NULL;
    double t0 = now_ms();
    CK_OK(harness_encode_grouped(ranks, 2, 1, groups, p2, &input, &got, &how, &e), e);
    double ms = now_ms() - t0;
    int same = memcmp(want, got, (size_t)p1->total_bytes) == 0;
    printf("  %s %s->%s n=%u cols=%" PRIu64 " scale %g: 2 ranks over %s in %.2f ms vs 1 GPU %s\n",
           qdp_encoding_name(enc), qdp_dtype_name(cases[i].in), qdp_dtype_name(cases[i].out), n,
           cols, cases[i].scale, how, ms, same ? "bit-identical" : "DIFFER");
    fflush(stdout);
    ck_assert_str_eq(how, "nccl");
    ck_assert_msg(same, "%s over 2 ranks and NCCL differs from 1 GPU", qdp_encoding_name(enc));
    for (int r = 0; r < 2; r++) {
      qdpt_assert_mesh_idle(ranks[r], "after the NCCL ranks' encode");
    }
    free(got);
    free(want);
    plan_destroy(p2);
    plan_destroy(p1);
    free(x);
    free(x64);
  }
  /* A zero sample is refused on both ranks with the message one GPU gives. */
  double *zeros = calloc(1 << 12, sizeof *zeros);
  struct runtime_input zin = {
      .data = zeros, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = 1 << 12};
  struct plan *pz = plan_two_ranks(ranks, one, QDP_ENCODING_AMPLITUDE, 12, 1 << 12,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
  struct qdp_error e = QDP_ERROR_INIT;
  void *got = NULL;
  CK_STATUS(harness_encode_grouped(ranks, 2, 1, groups, pz, &zin, &got, NULL, &e),
            QDP_ERR_INVALID_ARGUMENT, e);
  printf("  zero sample over 2 ranks and NCCL refused: %s\n", e.msg);
  ck_assert_ptr_nonnull(strstr(e.msg, "zero norm"));
  ck_assert_ptr_null(got);
  for (int r = 0; r < 2; r++) {
    qdpt_assert_mesh_idle(ranks[r], "after the NCCL ranks' refusal");
    ck_assert(device_comm_usable(groups[r]));
    device_comm_destroy(groups[r]);
  }
  plan_destroy(pz);
  free(zeros);
  runtime_mesh_destroy(ranks[0]);
  runtime_mesh_destroy(ranks[1]);
  runtime_mesh_destroy(one);
}
END_TEST

START_TEST(test_device_group_bounds_every_wait_on_another_process) {
  /* A member that never joins, and a collective another member never enters: both end within the
   * group's timeout with UNAVAILABLE, and an aborted group fails every later call at once. */
  if (runtime_cuda_device_count() < 2) {
    printf("  SKIP: needs two GPUs\n");
    return;
  }
  unsigned char id[DEVICE_COMM_ID_BYTES];
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(device_comm_unique_id(id, &e), e);
  struct joiner alone = {.id = id, .size = 2, .member = 0, .ordinal = 0, .timeout_ms = 700};
  join_group(&alone);
  printf("  joining alone: %s after %.0f ms: %s\n", qdp_status_name(alone.rc), alone.ms,
         alone.err.msg);
  CK_STATUS(alone.rc, QDP_ERR_UNAVAILABLE, alone.err);
  ck_assert_ptr_null(alone.group);
  ck_assert(alone.ms >= 600 && alone.ms < 5000);

  struct device_comm *groups[2];
  make_group(2, 3000, groups); /* joining takes most of a second: leave it room */
  double *buf = NULL;
  ck_assert_int_eq(cudaSetDevice(0), 0);
  ck_assert_int_eq(cudaMalloc((void **)&buf, 3 * sizeof *buf), 0);
  cudaStream_t stream;
  ck_assert_int_eq(cudaStreamCreate(&stream), 0);
  const double *send[1] = {buf};
  double *recv[1] = {buf + 1};
  void *streams[1] = {stream};
  /* The first collective also connects the members: the bound may end the call itself. */
  double t0 = now_ms();
  qdp_status rc = device_comm_allgather_f64_all(groups[0], send, recv, 1, streams, &e);
  if (rc == QDP_OK) {
    rc = device_comm_wait(groups[0], 0, stream, &e);
  }
  double waited = now_ms() - t0;
  printf("  member 1 never gathers: %s after %.0f ms: %s\n", qdp_status_name(rc), waited, e.msg);
  CK_STATUS(rc, QDP_ERR_UNAVAILABLE, e);
  ck_assert(waited >= 2900 && waited < 8000);
  ck_assert(!device_comm_usable(groups[0]));
  t0 = now_ms();
  CK_STATUS(device_comm_allgather_f64_all(groups[0], send, recv, 1, streams, &e),
            QDP_ERR_UNAVAILABLE, e);
  ck_assert(now_ms() - t0 < 100);
  printf("  later call on the aborted group: %s\n", e.msg);
  /* The aborted collective must not leave the stream stuck. */
  ck_assert_int_eq(cudaStreamSynchronize(stream), 0);
  ck_assert_int_eq(cudaStreamDestroy(stream), 0);
  ck_assert_int_eq(cudaFree(buf), 0);
  device_comm_destroy(groups[0]);
  device_comm_destroy(groups[1]);
  fflush(stdout);
}
END_TEST

/* ---- the mesh ----------------------------------------------------------------------------------
 */

START_TEST(test_mesh_describes_gpus_and_refuses_bad_specs) {
  int count = runtime_cuda_device_count();
  struct runtime_mesh *m = qdpt_mesh("auto", 0, 0);
  ck_assert_str_eq(runtime_mesh_backend(m), "cuda");
  ck_assert_uint_eq(runtime_mesh_count(m), (size_t)count);
  /* The default staging: two 64 MiB slots. */
  ck_assert_uint_eq(runtime_mesh_staging_bytes(m), 128 * MIB);
  for (size_t i = 0; i < runtime_mesh_count(m); i++) {
    struct runtime_device_info info;
    runtime_mesh_device_info(m, i, &info);
    printf("  %s: %s, %s, cc %d.%d, %" PRIu64 " B total, %" PRIu64 " B free, budget %" PRIu64
           " B\n",
           info.name, info.model, info.uuid, info.cc_major, info.cc_minor, info.total_bytes,
           info.free_bytes, info.budget_bytes);
    char want[32];
    snprintf(want, sizeof want, "cuda:%zu", i);
    ck_assert_str_eq(info.name, want);
    ck_assert_int_eq(info.kind, RUNTIME_DEVICE_CUDA);
    ck_assert_int_eq(info.ordinal, (int)i);
    ck_assert_uint_eq(strlen(info.uuid), 40);
    ck_assert(strncmp(info.uuid, "GPU-", 4) == 0 && info.uuid[12] == '-' && info.uuid[17] == '-');
    ck_assert_uint_gt(strlen(info.model), 0);
    ck_assert_int_ge(info.cc_major, 7);
    ck_assert_uint_gt(info.total_bytes, 0);
    ck_assert_uint_le(info.free_bytes, info.total_bytes);
    /* 0.9 of what was free before the staging was taken: at most 0.9 of the total. */
    ck_assert_uint_le(info.budget_bytes, (uint64_t)(0.9 * (double)info.total_bytes) + 1);
    ck_assert_uint_gt(info.budget_bytes, (uint64_t)(0.5 * (double)info.free_bytes));
    ck_assert_uint_eq(info.used_bytes, 0);
  }
  /* The link matrix: the diagonal is "self"; every pair with a peer path has peer access on. */
  size_t n = runtime_mesh_count(m);
  printf("  topology from %s\n", runtime_mesh_topology_source(m));
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < n; j++) {
      struct runtime_link l;
      runtime_mesh_link(m, i, j, &l);
      if (i == j) {
        ck_assert_int_eq(l.kind, RUNTIME_LINK_SELF);
        continue;
      }
      printf("  cuda:%zu -> cuda:%zu: %s, %d NVLink links, peer access %s, perf rank %d\n", i, j,
             runtime_link_kind_name(l.kind), l.nvlinks, l.peer ? "on" : "off", l.perf_rank);
      ck_assert_msg(l.kind == RUNTIME_LINK_NONE || l.peer,
                    "cuda:%zu -> cuda:%zu has a %s path but peer access is off", i, j,
                    runtime_link_kind_name(l.kind));
      ck_assert(l.kind != RUNTIME_LINK_NVLINK ||
                strcmp(runtime_mesh_topology_source(m), "nvml") == 0);
      /* NVML always knows how many links a pair it calls NVLink has (directly or via NVSwitch). */
      ck_assert_msg(l.kind != RUNTIME_LINK_NVLINK || l.nvlinks > 0, "an NVLink pair with 0 links");
    }
  }
  runtime_mesh_destroy(m);

  char past[32];
  snprintf(past, sizeof past, "cuda:%d", count);
  const char *bad[] = {past, "0,0", "cuda:0,cuda:0", "x", "0,", "cuda:", "-1", "0;1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct runtime_mesh_config cfg = {.devices = bad[i]};
    struct runtime_mesh *b = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    CK_STATUS(runtime_mesh_create(&cfg, &b, &e), QDP_ERR_INVALID_ARGUMENT, e);
    ck_assert_ptr_null(b);
    ck_assert_str_eq(e.field, "devices");
    printf("  devices '%s' refused: %s\n", bad[i], e.msg);
  }
  fflush(stdout);
}
END_TEST

void runtime_cuda_add_mesh(TCase *tc) {
  tcase_add_test(tc, test_mesh_describes_gpus_and_refuses_bad_specs);
}

void runtime_cuda_add_encode_shards(TCase *tc) {
  tcase_add_test(tc, test_two_gpus_even_shards_give_one_gpu_bits);
  tcase_add_test(tc, test_two_ranks_give_one_gpu_bits);
  tcase_add_test(tc, test_two_ranks_over_nccl_give_one_gpu_bits);
  tcase_add_test(tc, test_device_group_bounds_every_wait_on_another_process);
}
