/* test_runtime_cuda_encode.c — encodes on one GPU against the CPU backend: every encoding in
 * complex64 and complex128, single samples and batches, with the same plan; amplitude inputs far
 * larger than the staging (the chunk sums must combine into the bits of one launch), through the
 * norm's fallback on every path, with batch rows longer and shorter than a chunk; and small host
 * inputs read in place from a pinned slot giving the staged bits. */
#include <check.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"
#include "plan/plan.h"
#include "runtime/runtime.h"
#include "runtime_cuda_fixture.h"

/* Staging of 1 GiB per device: slots of 2^26 float64 values, so the large inputs below fit one
 * launch and give the bits the chunked path must reproduce. */
#define LARGE_STAGING GIB

static double tol_of(qdp_dtype out) {
  return out == QDP_DTYPE_COMPLEX64 ? 1e-5 : 1e-12;
}

/* Input columns per sample of an encoding for n qubits in these tests. */
static uint64_t cols_of(qdp_encoding enc, uint32_t n) {
  if (enc == QDP_ENCODING_AMPLITUDE) {
    return (UINT64_C(1) << n) - 3; /* not a power of two: the last values are padding */
  }
  return qdp_values_per_sample(enc, n);
}

/* ---- every encoding, both precisions, single and batch ----------------------------------------
 */

START_TEST(test_every_encoding_matches_cpu_single_and_batch) {
  struct runtime_mesh *gpu = qdpt_mesh("cuda:0", 0, 0);
  struct runtime_mesh *cpu = qdpt_mesh("cpu:1", 16 * GIB, 0);
  static const qdp_encoding encs[] = {QDP_ENCODING_AMPLITUDE, QDP_ENCODING_ANGLE,
                                      QDP_ENCODING_BASIS,     QDP_ENCODING_PHASE,
                                      QDP_ENCODING_IQP,       QDP_ENCODING_IQP_Z};
  static const struct {
    qdp_dtype in, out;
  } types[] = {{QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64},
               {QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128},
               {QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64},
               {QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX128}};
  static const struct {
    uint32_t n;
    uint64_t batch;
  } shapes[] = {{12, 1}, {9, 7}};
  for (size_t e = 0; e < sizeof encs / sizeof encs[0]; e++) {
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
      for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        qdp_encoding enc = encs[e];
        uint32_t n = shapes[sh].n;
        uint64_t batch = shapes[sh].batch, cols = cols_of(enc, n);
        qdp_dtype in = types[t].in, out = types[t].out;
        if (enc == QDP_ENCODING_BASIS && t == 3) {
          in = QDP_DTYPE_INT64; /* basis also takes integer indices */
        }
        double *x64 = values_for(enc, n, batch, cols, 1000 * e + 10 * t + sh);
        void *x = as_dtype(x64, batch * cols, in);
        struct runtime_input input = {.data = x, .dtype = in, .rows = batch, .cols = cols};
        struct plan *pg = qdpt_plan_on(gpu, 1, PLAN_AUTO, enc, n, batch, cols, in, out);
        struct plan *pc = qdpt_plan_on(cpu, 1, PLAN_AUTO, enc, n, batch, cols, in, out);
        ck_assert_int_eq(pg->policy, pc->policy);
        void *got = encode_all(gpu, pg, &input, NULL);
        void *ref = encode_all(cpu, pc, &input, NULL);
        char what[128];
        snprintf(what, sizeof what, "%s %s->%s n=%u batch=%" PRIu64 ":", qdp_encoding_name(enc),
                 qdp_dtype_name(in), qdp_dtype_name(out), n, batch);
        compare_states(got, ref, batch << n, out, n, tol_of(out), what);
        free(got);
        free(ref);
        plan_destroy(pg);
        plan_destroy(pc);
        free(x);
        free(x64);
      }
    }
  }
  runtime_mesh_destroy(cpu);
  runtime_mesh_destroy(gpu);
}
END_TEST

/* ---- amplitude through many staging chunks ----------------------------------------------------
 */

/* One amplitude job on a GPU with small staging (many chunks, combined on the host), the same on a
 * GPU with staging large enough for one launch, and on the CPU: the two GPU states must be the
 * same bits, and both the CPU's within tolerance. */
static void check_chunked_amplitude(uint32_t n, uint64_t batch, uint64_t cols, qdp_dtype in,
                                    qdp_dtype out, uint64_t scaled_row, double scale) {
  struct runtime_mesh *small = qdpt_mesh("cuda:0", 0, SMALL_STAGING);
  struct runtime_mesh *cpu = qdpt_mesh("cpu:1", 64 * GIB, 0);
  ck_assert_uint_eq(runtime_mesh_staging_bytes(small), SMALL_STAGING);
  double *x64 = malloc((size_t)(batch * cols * sizeof *x64));
  ck_assert_ptr_nonnull(x64);
  fill_values(x64, batch * cols, n * 31 + batch);
  /* The norm's fallback: values of one row (UINT64_MAX: every row) times `scale`. */
  for (uint64_t r = 0; r < batch; r++) {
    for (uint64_t i = 0; scale != 1.0 && (scaled_row == UINT64_MAX || r == scaled_row) && i < cols;
         i++) {
      x64[r * cols + i] *= scale;
    }
  }
  void *x = as_dtype(x64, batch * cols, in);
  free(x64);
  struct runtime_input input = {.data = x, .dtype = in, .rows = batch, .cols = cols};
  uint64_t amps = batch << n;
  double ms_small = 0, ms_large = 0, ms_cpu = 0;

  struct plan *p =
      qdpt_plan_on(small, 1, PLAN_AUTO, QDP_ENCODING_AMPLITUDE, n, batch, cols, in, out);
  void *chunked = encode_all(small, p, &input, &ms_small);
  /* The same input from registered (page-locked) memory: uploaded by DMA straight from it, rows
   * packed by the copy engine instead of this thread. */
  struct qdp_error e = QDP_ERROR_INIT;
  bool registered = false;
  CK_OK(runtime_mesh_register_host(small, x, batch * cols * qdp_dtype_size(in), false, &registered,
                                   &e),
        e);
  ck_assert(registered);
  struct runtime_input pinned = input;
  pinned.pinned = true;
  void *direct = encode_all(small, p, &pinned, NULL);
  runtime_mesh_unregister_host(small, x);
  ck_assert_msg(memcmp(direct, chunked, (size_t)(amps * qdp_dtype_size(out))) == 0,
                "amplitude from registered memory differs from the staged copy");
  free(direct);
  plan_destroy(p);
  runtime_mesh_destroy(small);

  struct runtime_mesh *large = qdpt_mesh("cuda:0", 0, LARGE_STAGING);
  p = qdpt_plan_on(large, 1, PLAN_AUTO, QDP_ENCODING_AMPLITUDE, n, batch, cols, in, out);
  void *whole = encode_all(large, p, &input, &ms_large);
  plan_destroy(p);
  runtime_mesh_destroy(large);

  p = qdpt_plan_on(cpu, 1, PLAN_AUTO, QDP_ENCODING_AMPLITUDE, n, batch, cols, in, out);
  void *ref = encode_all(cpu, p, &input, &ms_cpu);
  plan_destroy(p);
  runtime_mesh_destroy(cpu);

  size_t bytes = (size_t)(amps * qdp_dtype_size(out));
  uint64_t slot = SMALL_STAGING / 2 / qdp_dtype_size(in); /* values per 512 KiB slot */
  char how[96];
  if (cols > slot) {
    snprintf(how, sizeof how, "%" PRIu64 " chunks per row", (cols + slot - 1) / slot);
  } else {
    snprintf(how, sizeof how, "%" PRIu64 " rows per slot", slot / cols);
  }
  printf("  amplitude %s->%s n=%u batch=%" PRIu64 " L=%" PRIu64
         " scale %g"
         ": 1 MiB staging (%s) %.1f ms, "
         "1 GiB staging %.1f ms, CPU %.1f ms\n",
         qdp_dtype_name(in), qdp_dtype_name(out), n, batch, cols, scale, how, ms_small, ms_large,
         ms_cpu);
  if (memcmp(chunked, whole, bytes) != 0) {
    size_t h = qdp_dtype_size(out) / 2, at = 0; /* first differing real number */
    while (memcmp((char *)chunked + at * h, (char *)whole + at * h, h) == 0) {
      at++;
    }
    double g = h == 4 ? ((float *)chunked)[at] : ((double *)chunked)[at];
    double w = h == 4 ? ((float *)whole)[at] : ((double *)whole)[at];
    ck_abort_msg(
        "amplitude through 1 MiB staging differs from one launch at amplitude %zu "
        "(%s part): %.17g vs %.17g",
        at / 2, at % 2 ? "imaginary" : "real", g, w);
  }
  char what[128];
  snprintf(what, sizeof what,
           "amplitude %s->%s n=%u batch=%" PRIu64 " scale %g chunked vs CPU:", qdp_dtype_name(in),
           qdp_dtype_name(out), n, batch, scale);
  compare_states(chunked, ref, amps, out, n, tol_of(out), what);
  free(ref);
  free(whole);
  free(chunked);
  free(x);
}

START_TEST(test_amplitude_larger_than_staging_chunk_gives_one_launch_bits) {
  /* 2^26 - 12345 values: 1024 chunks of 2^16 float64, the last one partial, then padding. */
  check_chunked_amplitude(26, 1, (UINT64_C(1) << 26) - 12345, QDP_DTYPE_FLOAT64,
                          QDP_DTYPE_COMPLEX128, UINT64_MAX, 1.0);
  /* The float tree: chunk sums added in float. */
  check_chunked_amplitude(25, 1, (UINT64_C(1) << 25) - 999, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64,
                          UINT64_MAX, 1.0);
}
END_TEST

/* The norm's fallback on the GPU: sums of squares that underflow (float64, float32, float64
 * rounded to float32) or overflow, redone with the rows' exponents through the chunked, the
 * resident and the registered-memory paths; one row of a batch alone; the CPU's state within
 * tolerance and the chunked and one-launch GPU states bit for bit. */
START_TEST(test_amplitude_fallback_matches_cpu_on_every_path) {
  const uint64_t all = UINT64_MAX;
  check_chunked_amplitude(20, 1, (UINT64_C(1) << 20) - 5, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128,
                          all, 1e-170);
  check_chunked_amplitude(20, 1, (UINT64_C(1) << 20) - 5, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128,
                          all, 1e160);
  check_chunked_amplitude(20, 1, (UINT64_C(1) << 20) - 5, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64,
                          all, 1e-30);
  check_chunked_amplitude(20, 1, (UINT64_C(1) << 20) - 5, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64,
                          all, 1e39);
  check_chunked_amplitude(20, 1, (UINT64_C(1) << 20) - 5, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64,
                          all, 1e-25);
  /* One row of a batch: rows longer than a slot, and many rows per slot. */
  check_chunked_amplitude(18, 3, 200000, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1, 1e-200);
  check_chunked_amplitude(14, 64, 10000, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64, 37, 1e-40);
  check_chunked_amplitude(14, 64, 10000, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 5, 1e19);
}
END_TEST

START_TEST(test_amplitude_batch_rows_longer_and_shorter_than_a_chunk) {
  /* Rows of 200000 values: 4 chunks each (path for rows longer than a slot, several rows). */
  check_chunked_amplitude(18, 3, 200000, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, UINT64_MAX, 1.0);
  /* 64 rows of 10000 values: 6 whole rows per 512 KiB slot, 11 pieces. */
  check_chunked_amplitude(14, 64, 10000, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, UINT64_MAX, 1.0);
  check_chunked_amplitude(14, 64, 10000, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, UINT64_MAX, 1.0);
}
END_TEST

/* ---- small host inputs, read in place from a pinned slot --------------------------------------
 */

/* A host input of at most 64 KiB is summed on the host and pass 2 reads it, with its norms and
 * the fallback's exponents, from a pinned slot in place. With 64 KiB slots a slice of exactly
 * 64 KiB leaves no room for its norms there, so the same job goes through the staged copy
 * instead: both must give the same bits (the same sums, the same kernel), and the CPU's state
 * within tolerance. */
static void check_small_in_place(uint32_t n, uint64_t batch, uint64_t cols, qdp_dtype in,
                                 qdp_dtype out, double scale) {
  struct runtime_mesh *mapped = qdpt_mesh("cuda:0", 0, SMALL_STAGING);
  struct runtime_mesh *staged = qdpt_mesh("cuda:0", 0, 2 * 65536);
  struct runtime_mesh *cpu = qdpt_mesh("cpu:1", GIB, 0);
  double *x64 = malloc((size_t)(batch * cols * sizeof *x64));
  ck_assert_ptr_nonnull(x64);
  fill_values(x64, batch * cols, n * 7 + batch);
  for (uint64_t i = 0; i < batch * cols; i++) {
    x64[i] *= i < cols ? scale : 1.0; /* the first row alone needs the fallback */
  }
  void *x = as_dtype(x64, batch * cols, in);
  free(x64);
  ck_assert_uint_le(batch * cols * qdp_dtype_size(in), 65536);
  struct runtime_input input = {.data = x, .dtype = in, .rows = batch, .cols = cols};
  void *st[3];
  struct runtime_mesh *meshes[3] = {mapped, staged, cpu};
  for (int k = 0; k < 3; k++) {
    struct plan *p =
        qdpt_plan_on(meshes[k], 1, PLAN_AUTO, QDP_ENCODING_AMPLITUDE, n, batch, cols, in, out);
    st[k] = encode_all(meshes[k], p, &input, NULL);
    plan_destroy(p);
  }
  char what[128];
  snprintf(what, sizeof what,
           "amplitude %s->%s n=%u batch=%" PRIu64 " scale %g in place:", qdp_dtype_name(in),
           qdp_dtype_name(out), n, batch, scale);
  struct compare c = compare_states(st[0], st[1], batch << n, out, n, 0.0, what);
  ck_assert_msg(c.identical == c.values, "%s differs from the staged copy", what);
  compare_states(st[0], st[2], batch << n, out, n, tol_of(out), what);
  for (int k = 0; k < 3; k++) {
    free(st[k]);
    runtime_mesh_destroy(meshes[k]);
  }
  free(x);
}

START_TEST(test_small_host_input_read_in_place_gives_staged_bits) {
  check_small_in_place(13, 1, 8192, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1.0);
  check_small_in_place(10, 8, 1024, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, 1e-200);
  check_small_in_place(14, 1, 16384, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0);
  check_small_in_place(11, 8, 2048, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1e-30);
  /* Rows of an odd length (the second starts off any 8-byte boundary), padding past them. */
  check_small_in_place(13, 2, 8191, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX128, 1.0);
  check_small_in_place(13, 2, 8191, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, 1.0);
}
END_TEST

void runtime_cuda_add_encode_one_gpu(TCase *tc) {
  tcase_add_test(tc, test_every_encoding_matches_cpu_single_and_batch);
  tcase_add_test(tc, test_amplitude_larger_than_staging_chunk_gives_one_launch_bits);
  tcase_add_test(tc, test_amplitude_batch_rows_longer_and_shorter_than_a_chunk);
  tcase_add_test(tc, test_amplitude_fallback_matches_cpu_on_every_path);
  tcase_add_test(tc, test_small_host_input_read_in_place_gives_staged_bits);
}
