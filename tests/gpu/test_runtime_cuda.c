/* The runtime's CUDA backend against its CPU backend: every encoding in complex64 and complex128,
 * single samples and batches, on a "cuda" mesh and a "cpu" mesh with the same plan; amplitude
 * inputs far larger than the staging (the chunk sums must combine into the bits of one launch);
 * sharding over two GPUs giving the one-GPU bits; the same state split over two ranks (threads of
 * this process, one GPU each where there are two: the cross-rank norm and the cross-rank global-bit
 * stage through host memory) giving the one-GPU bits; the CPU backend's refusals and messages;
 * budget and cudaMalloc exhaustion; reads across shards and through the staging; concurrent jobs on
 * one GPU; and every device's used bytes back to 0 after each job. The amplitude norm's scaled
 * fallback (sums of squares that under- or overflow) runs through every one of those paths too,
 * and parameters complex64 cannot compute are refused with the CPU's messages.
 *
 * Runs only where a GPU is visible (exit 77 otherwise, which meson reports as a skip), in Check's
 * no-fork mode (a CUDA context does not survive fork). Prints one line per check with the numbers
 * it compared, and exits non-zero when any check fails.
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "device_comm.h"
#include "common_runtime.h"
#include "plan/plan.h"
#include "qdpk.h"
#include "runtime/mesh.h"
#include "runtime/runtime.h"
#include "world/mesh_group.h"
#include "world_harness.h"

#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
/* Staging of 1 MiB per device: 512 KiB slots, so a slot holds 2^16 float64 or 2^17 float32
 * values and any larger input goes through many chunks. */
#define SMALL_STAGING MIB
/* Staging of 1 GiB per device: slots of 2^26 float64 values, so the large inputs below fit one
 * launch and give the bits the chunked path must reproduce. */
#define LARGE_STAGING GIB

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Encodes and reads the whole state back (qdpt_read_all: poisoned first); the state held its plan's
 * bytes and the mesh is idle after it. */
static void *encode_all(struct runtime_mesh *m, const struct plan *p,
                        const struct runtime_input *in, double *ret_ms) {
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

/* Deterministic values in [-2, 2) (a 64-bit LCG: the same on every machine). */
static void fill_values(double *x, uint64_t count, uint64_t seed) {
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (uint64_t i = 0; i < count; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (double)(s >> 11) / 9007199254740992.0 * 4.0 - 2.0;
  }
}

/* Input of `count` values of dtype `in` from the values in x64. */
static void *as_dtype(const double *x64, uint64_t count, qdp_dtype in) {
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

struct compare {
  uint64_t values;    /* real numbers compared (2 per amplitude) */
  uint64_t identical; /* of which bit-identical */
  double worst;       /* largest |got - ref| / max(|ref|, 2^(-n/2)) */
};

/* got vs ref, `amps` complex values of `out`: each real part within `tol` relative to the larger
 * of |ref| and the amplitude scale of a normalized 2^n state, 2^(-n/2) (a value near zero has no
 * meaningful relative error of its own). */
static struct compare compare_states(const void *got, const void *ref, uint64_t amps, qdp_dtype out,
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

/* Sample values for an encoding: basis indices spread over [0, 2^n), else values in [-2, 2). */
static double *values_for(qdp_encoding enc, uint32_t n, uint64_t rows, uint64_t cols,
                          uint64_t seed) {
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
  snprintf(what, sizeof what, "amplitude %s->%s n=%u batch=%" PRIu64 " scale %g in place:",
           qdp_dtype_name(in), qdp_dtype_name(out), n, batch, scale);
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
    uint64_t cols = cases[i].enc == QDP_ENCODING_AMPLITUDE
                        ? (UINT64_C(1) << n) - 5
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
    j[r] = (struct joiner){.id = id, .size = n, .member = r, .ordinal = r, .timeout_ms = timeout_ms};
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
  struct runtime_input zin = {.data = zeros, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = 1 << 12};
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
  ck_assert_msg(given_back < 16 * MIB, "a 128 MiB buffer freed into a full cache gave %" PRIu64
                " B back: it was not kept", given_back);
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

static Suite *runtime_cuda_suite(void) {
  Suite *s = suite_create("runtime_cuda");
  TCase *tc = tcase_create("mesh");
  tcase_add_test(tc, test_mesh_describes_gpus_and_refuses_bad_specs);
  suite_add_tcase(s, tc);
  tc = tcase_create("encode");
  tcase_add_test(tc, test_every_encoding_matches_cpu_single_and_batch);
  tcase_add_test(tc, test_amplitude_larger_than_staging_chunk_gives_one_launch_bits);
  tcase_add_test(tc, test_amplitude_batch_rows_longer_and_shorter_than_a_chunk);
  tcase_add_test(tc, test_amplitude_fallback_matches_cpu_on_every_path);
  tcase_add_test(tc, test_small_host_input_read_in_place_gives_staged_bits);
  tcase_add_test(tc, test_two_gpus_even_shards_give_one_gpu_bits);
  tcase_add_test(tc, test_two_ranks_give_one_gpu_bits);
  tcase_add_test(tc, test_two_ranks_over_nccl_give_one_gpu_bits);
  tcase_add_test(tc, test_device_group_bounds_every_wait_on_another_process);
  tcase_add_test(tc, test_concurrent_jobs_share_one_gpu_staging);
  suite_add_tcase(s, tc);
  tc = tcase_create("refusals");
  tcase_add_test(tc, test_zero_norm_and_nan_refused_with_cpu_messages);
  tcase_add_test(tc, test_more_than_the_budget_is_refused_with_numbers);
  tcase_add_test(tc, test_cudamalloc_failure_is_resource_exhausted_with_free_bytes);
  suite_add_tcase(s, tc);
  tc = tcase_create("memory");
  tcase_add_test(tc, test_buffer_cache_makes_way_for_a_new_size);
  suite_add_tcase(s, tc);
  tc = tcase_create("read");
  tcase_add_test(tc, test_reads_cross_rows_shards_and_staging_pieces);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  int count = runtime_cuda_device_count();
  if (count == 0) {
    printf("test_runtime_cuda: no CUDA device visible, skipping\n");
    return 77;
  }
  printf("test_runtime_cuda: %d GPU%s\n", count, count == 1 ? "" : "s");
  fflush(stdout);
  return qdpt_run_suite(runtime_cuda_suite(), CK_NOFORK); /* a CUDA context does not survive fork */
}
