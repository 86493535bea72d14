/* qdpk_bench.cu — times the CUDA encode kernels (kernels/qdpk_cuda.h) on one GPU and prints one
 * machine-readable line per case:
 *
 *   bench impl=qdp op=amplitude dtype=complex128 n=30 batch=1 ms=8.190 GBps=4195.3 roofline=0.973
 *
 * ms is the median over the repetitions (CUDA events around each repetition, after warm-up);
 * GBps is the bytes the encoding must move (each input read once per pass it needs, each output
 * written once) over that time; roofline is the time those bytes take at the reference bandwidth
 * measured in the same run (device copy, read + write, for cases that read; cudaMemset fill for
 * write-only cases) over the measured time. Batched cases add samples_per_s. Inputs are random
 * (never zeros), generated on the device; batched cases rotate over several input and output sets
 * so that no repetition finds its data in the 60 MB L2 cache left by the previous one.
 *
 * Usage: qdpk_bench [--no-variants]   (variants: the amplitudes-per-thread knobs of qdpk_tune.h)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench_cli.h"
#include "qdpk.h"
#include "qdpk_cuda.h"
#include "qdpk_tune.h"

#define GiB (1ull << 30)

static void die(const char *what, cudaError_t e) {
  fprintf(stderr, "qdpk_bench: %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  exit(1);
}

#define CUDA_OK(expr) \
  do { \
    cudaError_t e_ = (expr); \
    if (e_ != cudaSuccess) { \
      die(#expr, e_); \
    } \
  } while (0)

static void qdp_ok(qdp_status rc, const char *what) {
  if (rc != QDP_OK) {
    fprintf(stderr, "qdpk_bench: %s returned %d (%s)\n", what, (int)rc,
            cudaGetErrorName(cudaPeekAtLastError()));
    exit(1);
  }
}

/* Uniform values in [lo, hi) from a hash of the index: random-looking data without a host copy. */
template <typename T>
__global__ void fill_random(T *p, uint64_t n, uint64_t seed, double lo, double hi) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x) {
    uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u = (double)(z >> 11) * 0x1.0p-53;
    p[i] = (T)(lo + (hi - lo) * u);
  }
}

template <typename T>
static void random_device(T *p, uint64_t n, uint64_t seed, double lo, double hi) {
  /* 4096 blocks of 256 threads with a grid-stride loop: setup only, never timed. */
  fill_random<T><<<4096, 256>>>(p, n, seed, lo, hi);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
}

/* ---- timing ---- */

typedef void (*op_fn)(void *ctx, int rep);

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median milliseconds of `reps` timed repetitions after `warmup` untimed ones. */
static double time_median(op_fn f, void *ctx, int warmup, int reps) {
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; i++) {
    f(ctx, i);
  }
  CUDA_OK(cudaDeviceSynchronize());
  double *ms = (double *)malloc(sizeof(double) * reps);
  for (int i = 0; i < reps; i++) {
    CUDA_OK(cudaEventRecord(a, 0));
    f(ctx, i);
    CUDA_OK(cudaEventRecord(b, 0));
    CUDA_OK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_OK(cudaEventElapsedTime(&t, a, b));
    ms[i] = t;
  }
  CUDA_OK(cudaGetLastError());
  qsort(ms, reps, sizeof(double), cmp_double);
  double med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
  free(ms);
  CUDA_OK(cudaEventDestroy(a));
  CUDA_OK(cudaEventDestroy(b));
  return med;
}

static double copy_GBps, fill_GBps;

/* One result line. bytes: what the case must move; ref_GBps: the bandwidth its roofline uses. */
static void report(const char *op, const char *dtype, unsigned n, uint64_t batch, double ms,
                   double bytes, double ref_GBps, const char *extra) {
  double gbps = bytes / (ms * 1e-3) / 1e9;
  printf("bench impl=qdp op=%s dtype=%s n=%u batch=%llu ms=%.4f GBps=%.1f roofline=%.3f", op, dtype,
         n, (unsigned long long)batch, ms, gbps, gbps / ref_GBps);
  if (batch > 1) {
    printf(" samples_per_s=%.4g", (double)batch / (ms * 1e-3));
  }
  if (extra && *extra) {
    printf(" %s", extra);
  }
  printf("\n");
  fflush(stdout);
}

/* ---- reference bandwidths ---- */

struct copy_ctx {
  void *dst, *src;
  size_t bytes;
};

static void op_copy(void *p, int rep) {
  struct copy_ctx *c = (struct copy_ctx *)p;
  (void)rep;
  CUDA_OK(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, 0));
}

static void op_fill(void *p, int rep) {
  struct copy_ctx *c = (struct copy_ctx *)p;
  CUDA_OK(cudaMemsetAsync(c->dst, rep & 0xff, c->bytes, 0));
}

/* ---- amplitude ---- */

struct amp_ctx {
  char *in, *out; /* set s at in + s * in_set, out + s * out_set */
  size_t in_set, out_set;
  int sets;
  qdp_dtype in_t, out_t;
  unsigned n;
  uint64_t rows;
  void *ws;
  size_t ws_bytes;
  double *sums;
  int pass; /* 0: both passes, 1: sumsq only, 2: amplitude pass only */
};

static void op_amplitude(void *p, int rep) {
  struct amp_ctx *c = (struct amp_ctx *)p;
  int set = rep % c->sets;
  const void *x = c->in + set * c->in_set;
  void *out = c->out + set * c->out_set;
  uint64_t count = 1ull << c->n;
  if (c->pass != 2) {
    qdp_ok(qdpk_sumsq(x, c->in_t, count, count, count, c->rows, c->out_t, NULL, c->ws, c->ws_bytes,
                      c->sums, 0),
           "qdpk_sumsq");
  }
  if (c->pass != 1) {
    struct qdpk_span s = {c->n, 0, count, c->rows, c->out_t};
    qdp_ok(qdpk_amplitude(&s, x, c->in_t, count, count, c->sums, NULL, out, 0), "qdpk_amplitude");
  }
}

static void bench_amplitude(char *in, char *out, void *ws, size_t ws_cap, double *sums,
                            qdp_dtype in_t, qdp_dtype out_t, unsigned n, uint64_t rows, int sets,
                            int pass, int reps, const char *variant) {
  uint64_t amps = rows << n;
  size_t in_el = in_t == QDP_DTYPE_FLOAT32 ? 4 : 8, out_el = out_t == QDP_DTYPE_COMPLEX64 ? 8 : 16;
  struct amp_ctx c = {in,
                      out,
                      amps * in_el,
                      amps * out_el,
                      sets,
                      in_t,
                      out_t,
                      n,
                      rows,
                      ws,
                      qdpk_sumsq_workspace_bytes(1ull << n, rows),
                      sums,
                      pass};
  if (c.ws_bytes > ws_cap) {
    fprintf(stderr, "qdpk_bench: workspace %zu > %zu\n", c.ws_bytes, ws_cap);
    exit(1);
  }
  double ms = time_median(op_amplitude, &c, 3, reps);
  /* Pass 1 reads the input, pass 2 reads it again and writes the state. */
  double bytes = (double)amps * (pass == 1   ? in_el
                                 : pass == 2 ? in_el + out_el
                                             : 2 * in_el + out_el);
  const char *op = pass == 1 ? "sumsq" : pass == 2 ? "amplitude_pass2" : "amplitude";
  char extra[96];
  snprintf(extra, sizeof extra, "input=%s%s%s", in_t == QDP_DTYPE_FLOAT32 ? "float32" : "float64",
           variant ? " variant=" : "", variant ? variant : "");
  report(op, qdp_dtype_name(out_t), n, rows, ms, bytes, copy_GBps, extra);
  /* Sanity: the state has unit norm (first row, first million amplitudes bounded by 1). */
  if (pass == 0) {
    double host[4];
    CUDA_OK(cudaMemcpy(host, sums, rows < 4 ? rows * sizeof(double) : sizeof host,
                       cudaMemcpyDeviceToHost));
    if (!(host[0] > 0) || !isfinite(host[0])) {
      fprintf(stderr, "qdpk_bench: amplitude sum of squares %g is not positive\n", host[0]);
      exit(1);
    }
  }
}

/* The amplitude knobs of qdpk_tune.h over their values: sumsq chunks (pass 1 and both passes),
 * amplitudes per thread and cache hints (pass 2 and both passes). Defaults are restored after. */
static void sweep_amplitude(char *in, char *out, void *ws, size_t ws_cap, double *sums,
                            qdp_dtype in_t, qdp_dtype out_t, unsigned n, uint64_t rows, int sets,
                            int pass, int reps) {
  static const int js[] = {4, 8}, ks[] = {1, 2, 4};
  for (int a = 0; a < (pass == 2 ? 1 : 2); a++) {
    for (int b = (pass == 0 ? 1 : 0); b < (pass == 1 ? 1 : 3); b++) {
      for (int c = 0; c < (pass == 1 ? 1 : 2); c++) {
        char v[32];
        if (pass == 1) {
          snprintf(v, sizeof v, "j%d", js[a]);
        } else if (pass == 2) {
          snprintf(v, sizeof v, "k%d_s%d", ks[b], c);
        } else {
          snprintf(v, sizeof v, "j%d_k%d_s%d", js[a], ks[b], c);
        }
        qdpk_tune_sumsq_chunks = pass == 2 ? 0 : js[a];
        qdpk_tune_amplitude_per_thread = ks[b];
        qdpk_tune_amplitude_streaming = c;
        bench_amplitude(in, out, ws, ws_cap, sums, in_t, out_t, n, rows, sets, pass, reps, v);
      }
    }
  }
  qdpk_tune_sumsq_chunks = 0;
  qdpk_tune_amplitude_per_thread = 0;
  qdpk_tune_amplitude_streaming = 0;
}

/* ---- closed forms ---- */

enum closed { C_ANGLE, C_PHASE, C_BASIS, C_IQP };

struct closed_ctx {
  enum closed op;
  const void *x;
  qdp_dtype in_t;
  struct qdpk_span s;
  void *out;
  int stage; /* iqp: 0 the reference path (phases + wht), 1 phases only, 2 wht only, 3 qdpk_iqp,
              * 4 the strided passes qdpk_iqp runs after its first (qdpk_wht_from bit 9) */
};

static void op_closed(void *p, int rep) {
  struct closed_ctx *c = (struct closed_ctx *)p;
  (void)rep;
  unsigned n = c->s.qubits;
  switch (c->op) {
  case C_ANGLE:
    qdp_ok(qdpk_angle(&c->s, c->x, c->in_t, n, c->out, 0), "qdpk_angle");
    break;
  case C_PHASE:
    qdp_ok(qdpk_phase(&c->s, c->x, c->in_t, n, c->out, 0), "qdpk_phase");
    break;
  case C_BASIS:
    qdp_ok(qdpk_basis(&c->s, c->x, c->in_t, 1, c->out, 0), "qdpk_basis");
    break;
  case C_IQP:
    if (c->stage == 4) {
      qdp_ok(qdpk_wht_from(c->out, c->s.out, c->s.count >> 3, c->s.rows << 3, 9, 0),
             "qdpk_wht_from");
      break;
    }
    if (c->stage == 3) {
      qdp_ok(qdpk_iqp(&c->s, c->x, c->in_t, qdp_values_per_sample(QDP_ENCODING_IQP, n), 1, c->out,
                      0),
             "qdpk_iqp");
      break;
    }
    if (c->stage != 2) {
      qdp_ok(qdpk_iqp_phases(&c->s, c->x, c->in_t, qdp_values_per_sample(QDP_ENCODING_IQP, n), 1,
                             c->out, 0),
             "qdpk_iqp_phases");
    }
    if (c->stage != 1) {
      qdp_ok(qdpk_wht(c->out, c->s.out, c->s.count, c->s.rows, 0), "qdpk_wht");
    }
    break;
  }
}

static const char *closed_name(enum closed op) {
  static const char *names[] = {"angle", "phase", "basis", "iqp"};
  return names[op];
}

static void bench_closed_rows(enum closed op, const void *x, qdp_dtype in_t, unsigned n,
                              uint64_t rows, void *out, int stage, int reps, const char *extra) {
  struct closed_ctx c = {op, x, in_t, {n, 0, 1ull << n, rows, QDP_DTYPE_COMPLEX128}, out, stage};
  double ms = time_median(op_closed, &c, 3, reps);
  double amps = (double)(1ull << n) * (double)rows;
  const char *name = closed_name(op);
  double bytes = amps * 16; /* every closed form writes the state once */
  static const char *iqp_names[] = {"iqp_reference", "iqp_phases", "wht", "iqp", "iqp_after_first"};
  if (op == C_IQP) {
    name = iqp_names[stage];
  }
  report(name, "complex128", n, rows, ms, bytes, fill_GBps, extra);
}

static void bench_closed(enum closed op, const void *x, qdp_dtype in_t, unsigned n, void *out,
                         int stage, int reps, const char *extra) {
  bench_closed_rows(op, x, in_t, n, 1, out, stage, reps, extra);
}

/* One strided pass of the transform over 2^30 complex128 values: stages s..s+m-1, runs of
 * 2^(12-m) consecutive values 2^s apart (kernels/wht.cu), as qdpk_wht_from runs it on rows of
 * 2^(s+m). */
struct wht_pass_ctx {
  void *out;
  unsigned s, m;
};

static void op_wht_pass(void *p, int rep) {
  struct wht_pass_ctx *c = (struct wht_pass_ctx *)p;
  (void)rep;
  qdp_ok(qdpk_wht_from(c->out, QDP_DTYPE_COMPLEX128, 1ull << (c->s + c->m),
                       1ull << (30 - c->s - c->m), c->s, 0),
         "qdpk_wht_from");
}

static void bench_wht_pass(void *out, unsigned s, unsigned m, const char *variant) {
  struct wht_pass_ctx c = {out, s, m};
  double ms = time_median(op_wht_pass, &c, 2, 5);
  char extra[64];
  snprintf(extra, sizeof extra, "s=%u m=%u%s%s", s, m, *variant ? " variant=" : "", variant);
  report("wht_pass", "complex128", 30, 1, ms, 2.0 * 16 * (double)(1ull << 30), copy_GBps, extra);
}

static void bench_closed_variants(enum closed op, const void *x, qdp_dtype in_t, unsigned n,
                                  void *out, int *knob, int reps) {
  static const int ks[] = {1, 4, 16};
  int saved = *knob;
  for (int i = 0; i < 3; i++) {
    char extra[32];
    snprintf(extra, sizeof extra, "variant=k%d", ks[i]);
    *knob = ks[i];
    bench_closed(op, x, in_t, n, out, 0, reps, extra);
  }
  *knob = saved;
}

static const char usage[] =
    "Usage: qdpk_bench [--no-variants]\n"
    "Times the CUDA encode kernels on GPU 0, one `bench impl=qdp op=... ms= GBps= roofline=` line\n"
    "per case: ms the median, roofline the share of this run's device copy (or fill) rate. The\n"
    "variants are the launch-shape knobs of kernels/qdpk_tune.h beside their defaults;\n"
    "--no-variants leaves out the amplitudes-per-thread ones.\n";

int main(int argc, char **argv) {
  bench_cli_help(argc, argv, usage);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--no-variants") != 0) {
      bench_cli_fail("qdpk_bench", usage, "unknown option '%s'", argv[i]);
    }
  }
  int variants = argc == 1;
  int dev = 0;
  CUDA_OK(cudaSetDevice(dev));
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, dev));
  printf("device %s sms=%d l2_MB=%.0f mem_GiB=%.1f\n", prop.name, prop.multiProcessorCount,
         prop.l2CacheSize / 1e6, prop.totalGlobalMem / (double)GiB);

  /* 8 GiB of input (2^30 float64) and 16 GiB of output (2^30 complex128), shared by all cases. */
  char *in = NULL, *out = NULL;
  CUDA_OK(cudaMalloc((void **)&in, 8 * GiB));
  CUDA_OK(cudaMalloc((void **)&out, 16 * GiB));
  size_t ws_cap = 64ull << 20;
  void *ws = NULL;
  double *sums = NULL;
  CUDA_OK(cudaMalloc(&ws, ws_cap));
  CUDA_OK(cudaMalloc((void **)&sums, 1u << 16));
  random_device((double *)in, 1ull << 30, 1, -1.0, 1.0);
  CUDA_OK(cudaMemset(out, 0x3f, 16 * GiB));

  /* Reference bandwidths: a 4 GiB device-to-device copy (8 GiB moved) and a 16 GiB fill. */
  struct copy_ctx cc = {out, in, 4 * GiB};
  double ms = time_median(op_copy, &cc, 2, 10);
  copy_GBps = 2.0 * cc.bytes / (ms * 1e-3) / 1e9;
  printf("bench impl=qdp op=copy dtype=bytes n=0 batch=1 ms=%.4f GBps=%.1f roofline=1.000\n", ms,
         copy_GBps);
  struct copy_ctx fc = {out, NULL, 16 * GiB};
  ms = time_median(op_fill, &fc, 2, 10);
  fill_GBps = fc.bytes / (ms * 1e-3) / 1e9;
  printf("bench impl=qdp op=fill dtype=bytes n=0 batch=1 ms=%.4f GBps=%.1f roofline=1.000\n", ms,
         fill_GBps);
  fflush(stdout);

  /* Amplitude, 2^30, input on the GPU: both passes, then each pass alone; variants first. */
  static const qdp_dtype amp_in[2] = {QDP_DTYPE_FLOAT64, QDP_DTYPE_FLOAT32};
  static const qdp_dtype amp_out[2] = {QDP_DTYPE_COMPLEX128, QDP_DTYPE_COMPLEX64};
  for (int t = 0; t < 2; t++) {
    if (t == 1) {
      random_device((float *)in, 1ull << 30, 2, -1.0, 1.0);
    }
    if (variants) {
      for (int pass = 0; pass <= 2; pass++) {
        sweep_amplitude(in, out, ws, ws_cap, sums, amp_in[t], amp_out[t], 30, 1, 1, pass, 10);
      }
    }
    for (int pass = 0; pass <= 2; pass++) {
      bench_amplitude(in, out, ws, ws_cap, sums, amp_in[t], amp_out[t], 30, 1, 1, pass, 15, NULL);
    }
  }

  /* Batched amplitude, complex128 from float64, 4 rotating sets. */
  random_device((double *)in, 1ull << 30, 3, -1.0, 1.0);
  static const struct {
    uint64_t rows;
    unsigned n;
  } batches[] = {{4096, 10}, {1024, 16}, {64, 20}};
  for (int i = 0; i < 3; i++) {
    if (variants) {
      sweep_amplitude(in, out, ws, ws_cap, sums, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128,
                      batches[i].n, batches[i].rows, 4, 0, 100);
    }
    bench_amplitude(in, out, ws, ws_cap, sums, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128,
                    batches[i].n, batches[i].rows, 4, 0, 200, NULL);
  }

  /* Closed forms at 30 qubits (IQP at 20, 26 and 30), complex128 from float64 parameters. */
  double *params = NULL;
  int64_t *basis_idx = NULL;
  CUDA_OK(cudaMalloc((void **)&params, 1u << 16));
  CUDA_OK(cudaMalloc((void **)&basis_idx, sizeof(int64_t)));
  random_device(params, 30, 4, -M_PI, M_PI);
  int64_t idx = 123456789;
  CUDA_OK(cudaMemcpy(basis_idx, &idx, sizeof idx, cudaMemcpyHostToDevice));
  if (variants) {
    bench_closed_variants(C_ANGLE, params, QDP_DTYPE_FLOAT64, 30, out, &qdpk_tune_angle_per_thread,
                          10);
    bench_closed_variants(C_PHASE, params, QDP_DTYPE_FLOAT64, 30, out, &qdpk_tune_phase_per_thread,
                          10);
    bench_closed_variants(C_BASIS, basis_idx, QDP_DTYPE_INT64, 30, out, &qdpk_tune_basis_per_thread,
                          10);
  }
  bench_closed(C_ANGLE, params, QDP_DTYPE_FLOAT64, 30, out, 0, 15, "");
  bench_closed(C_PHASE, params, QDP_DTYPE_FLOAT64, 30, out, 0, 15, "");
  bench_closed(C_BASIS, basis_idx, QDP_DTYPE_INT64, 30, out, 0, 15, "");

  /* IQP: what a device runs (qdpk_iqp, op=iqp) beside the reference path (op=iqp_reference) and
   * its two steps, in the same run. */
  static const unsigned iqp_n[] = {20, 26, 30};
  for (int i = 0; i < 3; i++) {
    unsigned n = iqp_n[i];
    random_device(params, qdp_values_per_sample(QDP_ENCODING_IQP, n), 5 + n, -1.0, 1.0);
    int reps = n == 20 ? 200 : n == 26 ? 20 : 5;
    if (variants) {
      static const int ks[] = {1, 4, 16};
      int saved = qdpk_tune_iqp_per_thread;
      for (int k = 0; k < 3; k++) {
        char extra[32];
        snprintf(extra, sizeof extra, "variant=k%d", ks[k]);
        qdpk_tune_iqp_per_thread = ks[k];
        bench_closed(C_IQP, params, QDP_DTYPE_FLOAT64, n, out, 1, reps, extra);
      }
      qdpk_tune_iqp_per_thread = saved;
    }
    if (n >= 26) {
      /* The strided passes loaded in the natural layout, beside the default. */
      qdpk_tune_wht_load = 2;
      bench_closed(C_IQP, params, QDP_DTYPE_FLOAT64, n, out, 2, reps, "variant=natural_load");
      bench_closed(C_IQP, params, QDP_DTYPE_FLOAT64, n, out, 3, reps, "variant=natural_load");
      bench_closed(C_IQP, params, QDP_DTYPE_FLOAT64, n, out, 4, reps, "variant=natural_load");
      qdpk_tune_wht_load = 0;
    }
    bench_closed(C_IQP, params, QDP_DTYPE_FLOAT64, n, out, 1, reps, "");
    bench_closed(C_IQP, params, QDP_DTYPE_FLOAT64, n, out, 2, reps, "");
    bench_closed(C_IQP, params, QDP_DTYPE_FLOAT64, n, out, 0, reps, "");
    bench_closed(C_IQP, params, QDP_DTYPE_FLOAT64, n, out, 3, reps, "");
    bench_closed(C_IQP, params, QDP_DTYPE_FLOAT64, n, out, 4, reps, "");
  }
  /* The consecutive pass (s=0: 4096 consecutive values, 12 stages), then single strided passes,
   * near (8 KiB apart) and far (up to 32 MiB apart), runs of 64 B to 2 KiB, loaded straight into
   * their first stages' layout (the default) and in the natural one. */
  static const unsigned pass_sm[][2] = {{0, 12}, {9, 10}, {20, 10}, {9, 9},  {18, 9}, {21, 9},
                                        {9, 8},  {9, 7},  {16, 7},  {23, 7}, {9, 5},  {25, 5}};
  for (size_t i = 0; i < sizeof pass_sm / sizeof pass_sm[0]; i++) {
    /* Finite after the 14 runs of up to 12 stages that both loads make. */
    random_device((double *)out, 2ull << 30, 7, -1.0, 1.0);
    bench_wht_pass(out, pass_sm[i][0], pass_sm[i][1], "");
    if (pass_sm[i][0] != 0) { /* the consecutive pass has one load */
      qdpk_tune_wht_load = 2;
      bench_wht_pass(out, pass_sm[i][0], pass_sm[i][1], "natural_load");
      qdpk_tune_wht_load = 0;
    }
  }
  /* Batched small states: 4096 of 10 qubits and 1024 of 14, parameters from `in`. */
  random_device((double *)in, 1ull << 20, 6, -1.0, 1.0);
  static const struct {
    uint64_t rows;
    unsigned n;
  } iqp_batches[] = {{4096, 10}, {1024, 14}};
  for (int i = 0; i < 2; i++) {
    bench_closed_rows(C_IQP, in, QDP_DTYPE_FLOAT64, iqp_batches[i].n, iqp_batches[i].rows, out, 0,
                      200, "");
    bench_closed_rows(C_IQP, in, QDP_DTYPE_FLOAT64, iqp_batches[i].n, iqp_batches[i].rows, out, 3,
                      200, "");
  }
  CUDA_OK(cudaFree(basis_idx));
  CUDA_OK(cudaFree(params));
  CUDA_OK(cudaFree(sums));
  CUDA_OK(cudaFree(ws));
  CUDA_OK(cudaFree(out));
  CUDA_OK(cudaFree(in));
  return 0;
}
