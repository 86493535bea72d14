/* test_runtime_cuda_memory.c — the CUDA backend's memory: the CPU backend's refusals and messages
 * (zero norm, NaN), more than the budget refused with the numbers, a cudaMalloc failure reported as
 * RESOURCE_EXHAUSTED with the free bytes, the buffer cache making way for a new size, reads across
 * rows, shards and staging pieces, and concurrent jobs sharing one GPU's staging. Every device's
 * used bytes are back to 0 after each job. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"
#include "plan/plan.h"
#include "runtime/mesh.h"
#include "runtime/runtime.h"
#include "runtime_cuda_fixture.h"

/* ---- refusals ----------------------------------------------------------------------------------
 */

/* The same job on both backends must fail with the same status and the same message, and leave
 * nothing allocated. */
static void expect_same_refusal(struct runtime_mesh *gpu, struct runtime_mesh *cpu,
                                const struct runtime_input *in, qdp_encoding enc, uint32_t n,
                                qdp_dtype out, qdp_status want, const char *fragment) {
  struct plan *pg = qdpt_plan_on(gpu, 1, PLAN_AUTO, enc, n, in->rows, in->cols, in->dtype, out);
  struct plan *pc = qdpt_plan_on(cpu, 1, PLAN_AUTO, enc, n, in->rows, in->cols, in->dtype, out);
  struct runtime_state *sg = NULL, *sc = NULL;
  struct qdp_error eg = QDP_ERROR_INIT, ec = QDP_ERROR_INIT;
  qdp_status rg = runtime_encode(gpu, pg, in, &sg, &eg);
  qdp_status rcpu = runtime_encode(cpu, pc, in, &sc, &ec);
  printf("  refused on cuda: %s: %s\n", qdp_status_name(rg), eg.msg);
  fflush(stdout);
  CK_STATUS(rg, want, eg);
  CK_STATUS(rcpu, want, ec);
  ck_assert_ptr_null(sg);
  ck_assert_ptr_null(sc);
  ck_assert_str_eq(eg.msg, ec.msg);
  ck_assert_str_eq(eg.field, ec.field);
  ck_assert_msg(strstr(eg.msg, fragment) != NULL, "message '%s' lacks '%s'", eg.msg, fragment);
  qdpt_assert_mesh_idle(gpu, fragment);
  qdpt_assert_mesh_idle(cpu, fragment);
  plan_destroy(pg);
  plan_destroy(pc);
}

START_TEST(test_zero_norm_and_nan_refused_with_cpu_messages) {
  enum { N = 10, B = 4, L = 1000 };
  struct runtime_mesh *gpu = qdpt_mesh("cuda:0", 0, SMALL_STAGING);
  struct runtime_mesh *cpu = qdpt_mesh("cpu:1", 16 * GIB, 0);
  double *x = malloc(B * L * sizeof *x);
  ck_assert_ptr_nonnull(x);
  fill_values(x, B * L, 5);
  memset(x + 2 * L, 0, L * sizeof *x); /* sample 2 is all zeros */
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = B, .cols = L};
  expect_same_refusal(gpu, cpu, &in, QDP_ENCODING_AMPLITUDE, N, QDP_DTYPE_COMPLEX128,
                      QDP_ERR_INVALID_ARGUMENT, "sample 2 has zero norm: every value is zero");
  x[2 * L + 7] = 0.5;
  x[3 * L + 555] = NAN;
  expect_same_refusal(gpu, cpu, &in, QDP_ENCODING_AMPLITUDE, N, QDP_DTYPE_COMPLEX128,
                      QDP_ERR_INVALID_ARGUMENT, "sample 3 value 555 is nan");
  x[3 * L + 555] = -INFINITY;
  expect_same_refusal(gpu, cpu, &in, QDP_ENCODING_AMPLITUDE, N, QDP_DTYPE_COMPLEX64,
                      QDP_ERR_INVALID_ARGUMENT, "sample 3 value 555 is -inf");
  double angles[2][3] = {{0.1, 0.2, 0.3}, {0.4, INFINITY, 0.6}};
  struct runtime_input ain = {.data = angles, .dtype = QDP_DTYPE_FLOAT64, .rows = 2, .cols = 3};
  expect_same_refusal(gpu, cpu, &ain, QDP_ENCODING_ANGLE, 3, QDP_DTYPE_COMPLEX128,
                      QDP_ERR_INVALID_ARGUMENT, "sample 1 value 1 is inf");
  /* complex64 computes in float32: float64 beyond its range is refused for the closed forms (it
   * once gave NaN states on the GPU too), and so are iqp sums float32 cannot hold. */
  angles[1][1] = 1e39;
  static const qdp_encoding closed[3] = {QDP_ENCODING_ANGLE, QDP_ENCODING_PHASE,
                                         QDP_ENCODING_IQP_Z};
  for (int k = 0; k < 3; k++) {
    expect_same_refusal(gpu, cpu, &ain, closed[k], 3, QDP_DTYPE_COMPLEX64, QDP_ERR_INVALID_ARGUMENT,
                        "sample 1 value 1 is 1e+39, which does not fit float32");
  }
  float big[2] = {3e38f, 3e38f};
  struct runtime_input bin = {.data = big, .dtype = QDP_DTYPE_FLOAT32, .rows = 1, .cols = 2};
  expect_same_refusal(gpu, cpu, &bin, QDP_ENCODING_IQP_Z, 2, QDP_DTYPE_COMPLEX64,
                      QDP_ERR_INVALID_ARGUMENT, "magnitudes sum to 6e+38");
  free(x);
  runtime_mesh_destroy(cpu);
  runtime_mesh_destroy(gpu);
}
END_TEST

START_TEST(test_more_than_the_budget_is_refused_with_numbers) {
  /* A budget of 48 MiB: one 32 MiB state fits (with 1 MiB staging), a second does not. */
  struct runtime_mesh *m = qdpt_mesh("cuda:0", 48 * MIB, SMALL_STAGING);
  struct runtime_device_info info;
  runtime_mesh_device_info(m, 0, &info);
  ck_assert_uint_eq(info.budget_bytes, 48 * MIB);
  double x[21];
  fill_values(x, 21, 9);
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = 21};

  /* The planner refuses a 64 MiB state outright, naming the device and the numbers. */
  struct plan *big = qdpt_plan_try(m, 1, PLAN_SINGLE, QDP_ENCODING_ANGLE, 22, 1, 22,
                                   QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(plan_check_feasible(big, &e), QDP_ERR_RESOURCE_EXHAUSTED, e);
  printf("  over budget (planner): %s\n", e.msg);
  ck_assert_msg(strstr(e.msg, "cuda:0 needs 65 MiB") && strstr(e.msg, "budget is 48 MiB"), "%s",
                e.msg);
  ck_assert_uint_eq(e.need_bytes, 64 * MIB + SMALL_STAGING); /* exact in the detail */
  ck_assert_uint_eq(e.free_bytes, 48 * MIB);
  plan_destroy(big);

  /* Planned while the device was empty; the second run finds it holding the first state. */
  struct plan *p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_ANGLE, 21, 1, 21, QDP_DTYPE_FLOAT64,
                                QDP_DTYPE_COMPLEX128);
  struct runtime_state *first = NULL, *second = NULL;
  CK_OK(runtime_encode(m, p, &in, &first, &e), e);
  runtime_mesh_device_info(m, 0, &info);
  ck_assert_uint_eq(info.used_bytes, 32 * MIB);
  e = (struct qdp_error)QDP_ERROR_INIT;
  CK_STATUS(runtime_encode(m, p, &in, &second, &e), QDP_ERR_RESOURCE_EXHAUSTED, e);
  printf("  over budget (runtime): %s\n", e.msg);
  ck_assert_ptr_null(second);
  ck_assert_msg(strstr(e.msg, "cuda:0 needs 32 MiB") && strstr(e.msg, "of its 48 MiB"), "%s",
                e.msg);
  ck_assert_uint_eq(e.need_bytes, 32 * MIB);
  ck_assert_uint_eq(e.free_bytes, 16 * MIB);
  runtime_state_destroy(first);
  qdpt_assert_mesh_idle(m, "after the budget refusal");
  plan_destroy(p);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_cudamalloc_failure_is_resource_exhausted_with_free_bytes) {
  /* A budget far beyond the GPU (1 TiB) lets a 256 GiB state through the reservation; cudaMalloc
   * must then refuse it, reported with the bytes asked and the bytes free. The plan is computed
   * against that budget directly (the mesh's own view caps it at the free memory). */
  struct runtime_mesh *m = qdpt_mesh("cuda:0", 1024 * GIB, SMALL_STAGING);
  struct runtime_device_info info;
  runtime_mesh_device_info(m, 0, &info);
  struct plan_device dev = {.rank = 0, .ordinal = info.ordinal, .budget_bytes = 1024 * GIB};
  snprintf(dev.name, sizeof dev.name, "%s", info.name);
  struct plan_world world = {.devices = &dev, .count = 1, .ranks = 1};
  enum { N = 34 }; /* 2^34 complex128 = 256 GiB */
  struct plan_request req = {.encoding = QDP_ENCODING_ANGLE,
                             .qubits = N,
                             .batch = 1,
                             .values_per_sample = N,
                             .in_dtype = QDP_DTYPE_FLOAT64,
                             .out_dtype = QDP_DTYPE_COMPLEX128,
                             .policy = PLAN_SINGLE,
                             .staging_bytes = runtime_mesh_staging_bytes(m)};
  struct plan *p = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(plan_compute(&req, &world, NULL, &p, &e), e);
  CK_OK(plan_check_feasible(p, &e), e);
  double x[N] = {0};
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = N};
  struct runtime_state *s = NULL;
  CK_STATUS(runtime_encode(m, p, &in, &s, &e), QDP_ERR_RESOURCE_EXHAUSTED, e);
  printf("  cudaMalloc refusal: %s\n", e.msg);
  ck_assert_ptr_null(s);
  ck_assert_msg(strstr(e.msg, "cuda:0 cannot allocate 256 GiB") != NULL, "%s", e.msg);
  ck_assert_uint_eq(e.need_bytes, UINT64_C(1) << 38);
  ck_assert_uint_gt(e.free_bytes, 0);
  ck_assert_uint_lt(e.free_bytes, info.total_bytes);
  ck_assert_int_eq(e.device, info.ordinal);
  qdpt_assert_mesh_idle(m, "after the cudaMalloc failure");
  /* The device still works after the refusal. */
  plan_destroy(p);
  p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_ANGLE, 10, 1, 10, QDP_DTYPE_FLOAT64,
                   QDP_DTYPE_COMPLEX128);
  in.cols = 10;
  free(encode_all(m, p, &in, NULL));
  plan_destroy(p);
  runtime_mesh_destroy(m);
}
END_TEST

/* The device's free bytes as the driver counts them (kept buffers are not free there). */
static uint64_t driver_free_bytes(void) {
  size_t free_b = 0, total_b = 0;
  ck_assert_int_eq(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  return free_b;
}

START_TEST(test_buffer_cache_makes_way_for_a_new_size) {
  /* A daemon that has run jobs of many sizes holds its cache full of them. A state of a size
   * never seen before must still be kept when it is freed, so that a stream of such jobs stops
   * paying cudaMalloc and cudaFree; the entry kept longest ago makes way. Seen through the
   * driver: freeing a kept 128 MiB buffer gives it nothing back, freeing one that is not gives
   * it all 128 MiB. */
  struct runtime_mesh *m = qdpt_mesh("cuda:0", 0, 0);
  struct runtime_device *d = m->devs[0];
  struct qdp_error e = QDP_ERROR_INIT;
  enum { FILL = 32 };
  void *p[FILL];
  for (int k = 0; k < FILL; k++) { /* 32 distinct sizes from 2 MiB, 98 MiB in all */
    CK_OK(d->ops->alloc(d, 2 * MIB + (uint64_t)k * 64 * 1024, &p[k], &e), e);
  }
  for (int k = 0; k < FILL; k++) { /* freed oldest first: p[0] is kept longest ago */
    d->ops->free(d, p[k], 2 * MIB + (uint64_t)k * 64 * 1024);
  }
  void *big = NULL;
  CK_OK(d->ops->alloc(d, 128 * MIB, &big, &e), e);
  uint64_t before = driver_free_bytes();
  d->ops->free(d, big, 128 * MIB);
  uint64_t given_back = driver_free_bytes() - before;
  printf("  a new size freed into a full cache: %" PRIu64 " B given back to the driver\n",
         given_back);
  ck_assert_msg(given_back < 16 * MIB,
                "a 128 MiB buffer freed into a full cache gave %" PRIu64 " B back: it was not kept",
                given_back);
  /* The oldest size was the one let go: asking for it again takes new memory from the driver;
   * the next oldest is still kept and takes none. */
  void *q = NULL;
  before = driver_free_bytes();
  CK_OK(d->ops->alloc(d, 2 * MIB + 64 * 1024, &q, &e), e);
  ck_assert_uint_eq(driver_free_bytes(), before);
  d->ops->free(d, q, 2 * MIB + 64 * 1024);
  before = driver_free_bytes();
  CK_OK(d->ops->alloc(d, 2 * MIB, &q, &e), e);
  ck_assert_uint_ge(before - driver_free_bytes(), 2 * MIB);
  d->ops->free(d, q, 2 * MIB);
  runtime_mesh_destroy(m);
}
END_TEST

/* ---- reads -------------------------------------------------------------------------------------
 */

START_TEST(test_reads_cross_rows_shards_and_staging_pieces) {
  /* A 64 MiB state read whole goes through the 512 KiB staging slots (128 pieces); the same state
   * read in odd-sized pieces of at most 1 MiB goes directly. Both must give the same bits, and
   * the CPU's values within tolerance. */
  enum { N = 18, B = 16 };
  struct runtime_mesh *gpu = qdpt_mesh("cuda:0", 0, SMALL_STAGING);
  struct runtime_mesh *cpu = qdpt_mesh("cpu:1", 16 * GIB, 0);
  double *x = values_for(QDP_ENCODING_PHASE, N, B, N, 3);
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = B, .cols = N};
  struct plan *p = qdpt_plan_on(gpu, 1, PLAN_AUTO, QDP_ENCODING_PHASE, N, B, N, QDP_DTYPE_FLOAT64,
                                QDP_DTYPE_COMPLEX128);
  struct plan *pc = qdpt_plan_on(cpu, 1, PLAN_AUTO, QDP_ENCODING_PHASE, N, B, N, QDP_DTYPE_FLOAT64,
                                 QDP_DTYPE_COMPLEX128);
  uint64_t total = (uint64_t)B << N;
  void *ref = encode_all(cpu, pc, &in, NULL);
  struct runtime_state *s = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_encode(gpu, p, &in, &s, &e), e);
  double *whole = malloc((size_t)(total * 16));
  double *pieces = malloc((size_t)(total * 16));
  ck_assert_ptr_nonnull(whole);
  ck_assert_ptr_nonnull(pieces);
  memset(whole, 0xA5, (size_t)(total * 16));
  memset(pieces, 0x5A, (size_t)(total * 16));
  CK_OK(runtime_state_read(s, 0, total, whole, &e), e);
  uint64_t at = 0, step = 65536 - 77, nreads = 0; /* pieces cross every row boundary */
  while (at < total) {
    uint64_t n = total - at < step ? total - at : step;
    CK_OK(runtime_state_read(s, at, n, pieces + 2 * at, &e), e);
    at += n;
    nreads++;
  }
  ck_assert_msg(memcmp(whole, pieces, (size_t)(total * 16)) == 0,
                "a staged read differs from direct reads of the same state");
  printf("  read 64 MiB whole (staged) and in %" PRIu64 " direct pieces: identical\n", nreads);
  compare_states(whole, ref, total, QDP_DTYPE_COMPLEX128, N, 1e-12, "phase batch read back:");
  /* A read that straddles a row boundary, and one past the end. */
  double pair[8];
  CK_OK(runtime_state_read(s, (UINT64_C(1) << N) - 2, 4, pair, &e), e);
  ck_assert(memcmp(pair, whole + 2 * ((UINT64_C(1) << N) - 2), sizeof pair) == 0);
  CK_STATUS(runtime_state_read(s, total - 1, 2, pair, &e), QDP_ERR_OUT_OF_RANGE, e);
  runtime_state_destroy(s);
  qdpt_assert_mesh_idle(gpu, "after the reads");
  free(pieces);
  free(whole);
  free(ref);
  plan_destroy(pc);
  plan_destroy(p);
  free(x);
  runtime_mesh_destroy(cpu);
  runtime_mesh_destroy(gpu);

  /* Across shards on different GPUs, where there are several. */
  struct runtime_mesh *m = qdpt_mesh("auto", 0, SMALL_STAGING);
  size_t ndev = runtime_mesh_count(m) < 4 ? runtime_mesh_count(m) : 4;
  if (ndev < 2) {
    printf("  reads across GPU shards: SKIPPED, this machine has 1 GPU\n");
    fflush(stdout);
    runtime_mesh_destroy(m);
    return;
  }
  enum { M = 5 };
  double a[M] = {0.3, 1.1, -0.7, 2.0, 0.25};
  struct runtime_input ain = {.data = a, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = M};
  struct plan *p1 = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_ANGLE, M, 1, M, QDP_DTYPE_FLOAT64,
                                 QDP_DTYPE_COMPLEX128);
  struct plan *pu = qdpt_plan_on(m, ndev, ndev == 2 ? PLAN_EVEN : PLAN_UNEVEN, QDP_ENCODING_ANGLE,
                                 M, 1, M, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
  double *one = encode_all(m, p1, &ain, NULL);
  CK_OK(runtime_encode(m, pu, &ain, &s, &e), e);
  double part[2 * 20];
  CK_OK(runtime_state_read(s, 7, 20, part, &e), e); /* crosses shard edges */
  ck_assert(memcmp(part, one + 2 * 7, sizeof part) == 0);
  printf("  read [7, 27) across %zu GPU shards: identical to 1 GPU\n", ndev);
  runtime_state_destroy(s);
  qdpt_assert_mesh_idle(m, "after the reads across GPUs");
  free(one);
  plan_destroy(pu);
  plan_destroy(p1);
  runtime_mesh_destroy(m);
}
END_TEST

/* ---- concurrency -------------------------------------------------------------------------------
 */

struct job {
  struct runtime_mesh *m;
  const struct plan *p;
  const struct runtime_input *in;
  void *out;
  qdp_status rc;
  struct qdp_error err;
};

static void *run_job(void *arg) {
  struct job *j = arg;
  struct runtime_state *s = NULL;
  j->err = (struct qdp_error)QDP_ERROR_INIT;
  j->rc = runtime_encode(j->m, j->p, j->in, &s, &j->err);
  if (j->rc == QDP_OK) {
    j->rc = runtime_state_read(s, 0, j->p->amplitudes * j->p->batch, j->out, &j->err);
  }
  runtime_state_destroy(s);
  return NULL;
}

START_TEST(test_concurrent_jobs_share_one_gpu_staging) {
  /* Four amplitude jobs at once on one GPU, each streaming 16 chunks through the same 1 MiB
   * staging: the staging must be handed from job to job, and each result equal the job run
   * alone. */
  enum { N = 20, JOBS = 4 };
  uint64_t cols = (UINT64_C(1) << N) - 7;
  struct runtime_mesh *m = qdpt_mesh("cuda:0", 0, SMALL_STAGING);
  double *x = malloc((size_t)(JOBS * cols * sizeof *x));
  ck_assert_ptr_nonnull(x);
  fill_values(x, JOBS * cols, 42);
  struct plan *p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, N, 1, cols,
                                QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
  struct runtime_input ins[JOBS];
  struct job jobs[JOBS];
  pthread_t tids[JOBS];
  size_t bytes = (size_t)p->total_bytes;
  for (int i = 0; i < JOBS; i++) {
    ins[i] = (struct runtime_input){
        .data = x + i * cols, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = cols};
    jobs[i] = (struct job){.m = m, .p = p, .in = &ins[i], .out = malloc(bytes)};
    ck_assert_ptr_nonnull(jobs[i].out);
  }
  for (int i = 0; i < JOBS; i++) {
    ck_assert_int_eq(pthread_create(&tids[i], NULL, run_job, &jobs[i]), 0);
  }
  for (int i = 0; i < JOBS; i++) {
    pthread_join(tids[i], NULL);
  }
  for (int i = 0; i < JOBS; i++) {
    CK_OK_AT(jobs[i].rc, jobs[i].err, "job %d", i);
    void *alone = encode_all(m, p, &ins[i], NULL);
    ck_assert_msg(memcmp(alone, jobs[i].out, bytes) == 0,
                  "job %d run concurrently differs from the same job alone", i);
    free(alone);
    free(jobs[i].out);
  }
  printf("  %d concurrent amplitude jobs on cuda:0: each identical to the job alone\n", JOBS);
  fflush(stdout);
  qdpt_assert_mesh_idle(m, "after the concurrent jobs");
  plan_destroy(p);
  free(x);
  runtime_mesh_destroy(m);
}
END_TEST

void runtime_cuda_add_encode_staging(TCase *tc) {
  tcase_add_test(tc, test_concurrent_jobs_share_one_gpu_staging);
}

void runtime_cuda_add_refusals(TCase *tc) {
  tcase_add_test(tc, test_zero_norm_and_nan_refused_with_cpu_messages);
  tcase_add_test(tc, test_more_than_the_budget_is_refused_with_numbers);
  tcase_add_test(tc, test_cudamalloc_failure_is_resource_exhausted_with_free_bytes);
}

void runtime_cuda_add_memory(TCase *tc) {
  tcase_add_test(tc, test_buffer_cache_makes_way_for_a_new_size);
}

void runtime_cuda_add_read(TCase *tc) {
  tcase_add_test(tc, test_reads_cross_rows_shards_and_staging_pieces);
}
