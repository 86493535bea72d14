/* mesh_bench — the two-GPU figures, each beside its one-GPU baseline in the same run.
 *
 *   amplitude   complex128 2^31 from float64 already on the GPUs: the executor's device path (sum
 *               of squares, NCCL all-gather of the parts, the tree combined on every GPU, scale)
 *               on 2 GPUs against the same kernels on 1; and the same 2-GPU job with the norm
 *               given, so the difference is what the collective costs inside an encode
 *   collective  a bare all-gather of one double over the mesh's communicator, with stream syncs
 *   batch       4096 x 2^16 complex64 from float32 on the GPUs, samples split over the 2 GPUs
 *   host        amplitude 2^30 and 2^31 from registered host memory through the runtime, 1 GPU
 *               vs 2 (the input goes up once, into each state's buffer)
 *   gather      a 2^31 complex128 state's two halves assembled on GPU 0 (peer copy + local copy)
 *               against the measured one-way peer copy bandwidth
 *   capacity    a 34-qubit complex128 angle state (256 GiB) over both GPUs through the runtime,
 *               spot-checked against the closed form
 *   big         a 33-qubit complex128 amplitude state (128 GiB) on one GPU from 64 GiB of
 *               registered host input, uploaded once into the state's buffer
 * Named only (`mesh_bench scaling,iqp,capacity_max`), over every GPU of the machine: strong scaling
 * of amplitude over 1, 2, 4, 8 GPUs, iqp 30 and 31 qubits over 1, 2, 4, 8 GPUs, the largest angle
 * states the GPUs hold together, and the topology. `mpirun -n R mesh_bench ranks`: R processes of
 * one GPU each, the norm over NCCL across them, against one process alone. `mesh_bench iqp` alone
 * runs on one GPU too; `mesh_bench host1` is host input on one GPU (registered, against a bare copy
 * of the same buffer; not registered, with and without the copy threads).
 *
 * Times are host wall clock around work on both GPUs (synchronized before and after), median of
 * the repetitions after one warm-up. Lines: "mesh_bench NAME key=value ...". Exit 77 without two
 * GPUs. Inputs on the GPUs are a fixed byte pattern (every value the same finite double): the
 * kernels' cost does not depend on the values. */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#ifdef QDP_BENCH_MPI
#include <mpi.h>
#endif

#include "bench_cli.h"
#include "device_comm.h"
#include "qdpk_cuda.h"
#include "runtime/runtime.h"
#include "world/mesh_group.h"

#define GIB (UINT64_C(1) << 30)
#define REPS 7
#define MAXG 8 /* GPUs one process drives here */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

#define CK(call) \
  do { \
    cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) { \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
      exit(1); \
    } \
  } while (0)
#define QK(call) \
  do { \
    qdp_status s_ = (call); \
    if (s_ != QDP_OK) { \
      fprintf(stderr, "%s:%d: %s: status %d (%s)\n", __FILE__, __LINE__, #call, (int)s_, \
              cudaGetErrorName(cudaGetLastError())); \
      exit(1); \
    } \
  } while (0)

struct gpu {
  int ordinal;
  cudaStream_t stream;
  void *ws;
  size_t ws_bytes;
  double *sums, *recv, *norms;
  struct qdpk_norm_part *parts;
};

static void sync_all(struct gpu *g, int n) {
  for (int i = 0; i < n; i++) {
    CK(cudaSetDevice(g[i].ordinal));
    CK(cudaStreamSynchronize(g[i].stream));
  }
}

static void *dev_alloc(int ordinal, uint64_t bytes, unsigned char fill) {
  void *p = NULL;
  CK(cudaSetDevice(ordinal));
  CK(cudaMalloc(&p, bytes));
  CK(cudaMemset(p, fill, bytes));
  return p;
}

/* Enqueues the all-gather of `count` doubles from every GPU's sums into every GPU's recv. */
static void gather_sums(struct gpu *g, int n, struct device_comm *comm, uint64_t count) {
  const double *send[MAXG];
  double *recv[MAXG];
  void *streams[MAXG];
  for (int i = 0; i < n; i++) {
    send[i] = g[i].sums;
    recv[i] = g[i].recv;
    streams[i] = g[i].stream;
  }
  struct qdp_error e = QDP_ERROR_INIT;
  QK(device_comm_allgather_f64_all(comm, send, recv, count, streams, &e));
}

/* Median microseconds of a bare all-gather of one double over n GPUs, stream syncs included. */
static double time_gather_one(struct gpu *g, int n, struct device_comm *comm) {
  double t[200];
  for (int r = -20; r < 200; r++) {
    double t0 = now_ms();
    gather_sums(g, n, comm, 1);
    sync_all(g, n);
    if (r >= 0) {
      t[r] = now_ms() - t0;
    }
  }
  return median(t, 200) * 1e3;
}

/* One amplitude job over `n` GPUs: GPU i holds amplitudes [i * per, (i + 1) * per) of each of
 * `rows` samples (per = 2^qubits / n, inputs x[i] of per values per row). With gather, the norm
 * goes over the communicator (all-gather of one part per GPU, combined on each); without, each
 * GPU computes its part as well but scales by the norm already in its `norms` (the same work
 * with the collective left out). */
static void amplitude_job(struct gpu *g, int n, struct device_comm *comm, void *const *x,
                          void *const *out, uint32_t qubits, uint64_t rows, qdp_dtype in,
                          qdp_dtype outt, bool gather) {
  uint64_t per = (UINT64_C(1) << qubits) / (uint64_t)n;
  for (int i = 0; i < n; i++) {
    CK(cudaSetDevice(g[i].ordinal));
    QK(qdpk_sumsq(x[i], in, per, per, per, rows, outt, NULL, g[i].ws, g[i].ws_bytes,
                  n == 1 ? g[i].norms : g[i].sums, g[i].stream));
  }
  if (gather && n > 1) {
    gather_sums(g, n, comm, rows);
    for (int i = 0; i < n; i++) {
      CK(cudaSetDevice(g[i].ordinal));
      QK(qdpk_norm_combine(g[i].parts, (size_t)n, qubits, outt == QDP_DTYPE_COMPLEX64, g[i].recv,
                           rows, 1, g[i].norms, g[i].stream));
    }
  }
  for (int i = 0; i < n; i++) {
    CK(cudaSetDevice(g[i].ordinal));
    struct qdpk_span span = {
        .qubits = qubits, .first = (uint64_t)i * per, .count = per, .rows = rows, .out = outt};
    QK(qdpk_amplitude(&span, x[i], in, per, per, g[i].norms, NULL, out[i], g[i].stream));
  }
  sync_all(g, n);
}

/* Median wall time of REPS runs of the job after one warm-up. */
static double time_amplitude(struct gpu *g, int n, struct device_comm *comm, void *const *x,
                             void *const *out, uint32_t qubits, uint64_t rows, qdp_dtype in,
                             qdp_dtype outt, bool gather) {
  double t[REPS];
  amplitude_job(g, n, comm, x, out, qubits, rows, in, outt, gather);
  for (int r = 0; r < REPS; r++) {
    double t0 = now_ms();
    amplitude_job(g, n, comm, x, out, qubits, rows, in, outt, gather);
    t[r] = now_ms() - t0;
  }
  return median(t, REPS);
}

static void gpu_setup(struct gpu *g, int ordinal, uint64_t ws_block, uint64_t ws_rows,
                      uint64_t rows) {
  g->ordinal = ordinal;
  CK(cudaSetDevice(ordinal));
  CK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  g->ws_bytes = qdpk_sumsq_workspace_bytes(ws_block, ws_rows);
  CK(cudaMalloc(&g->ws, g->ws_bytes ? g->ws_bytes : 1));
  CK(cudaMalloc((void **)&g->sums, rows * sizeof(double)));
  CK(cudaMalloc((void **)&g->recv, MAXG * rows * sizeof(double)));
  CK(cudaMalloc((void **)&g->norms, rows * sizeof(double)));
  CK(cudaMalloc((void **)&g->parts, MAXG * sizeof(struct qdpk_norm_part)));
}

static void gpu_teardown(struct gpu *g) {
  CK(cudaSetDevice(g->ordinal));
  CK(cudaFree(g->ws));
  CK(cudaFree(g->sums));
  CK(cudaFree(g->recv));
  CK(cudaFree(g->norms));
  CK(cudaFree(g->parts));
  CK(cudaStreamDestroy(g->stream));
}

/* Frees a one-GPU job's buffers (on GPU 0) and a two-GPU job's (one per GPU). */
static void side_by_side_free(struct gpu *g1, void **x1, void **o1, struct gpu *g2, void **x2,
                              void **o2) {
  for (int i = 0; i < 2; i++) {
    CK(cudaSetDevice(i));
    CK(cudaFree(x2[i]));
    CK(cudaFree(o2[i]));
  }
  CK(cudaSetDevice(0));
  CK(cudaFree(x1[0]));
  CK(cudaFree(o1[0]));
  gpu_teardown(&g1[0]);
  gpu_teardown(&g2[0]);
  gpu_teardown(&g2[1]);
}

/* The parts of n equal shards: shard k's sum of squares in column k of recv. Loaded on the
 * `local` GPUs of g (all n in one process; one per rank across processes). */
static void set_parts(struct gpu *g, int local, int n, uint32_t qubits) {
  struct qdpk_norm_part parts[MAXG];
  uint32_t lg = qubits - (uint32_t)__builtin_ctz((unsigned)n);
  for (int k = 0; k < n; k++) {
    parts[k] = (struct qdpk_norm_part){(uint64_t)k << lg, lg, (uint64_t)k};
  }
  for (int i = 0; i < local; i++) {
    CK(cudaSetDevice(g[i].ordinal));
    CK(cudaMemcpy(g[i].parts, parts, (size_t)n * sizeof *parts, cudaMemcpyHostToDevice));
  }
}

static void bench_amplitude(struct device_comm *comm) {
  const uint32_t n = 31;
  const uint64_t N = UINT64_C(1) << n;
  struct gpu g1[1], g2[2];
  gpu_setup(&g1[0], 0, N, 1, 1);
  gpu_setup(&g2[0], 0, N / 2, 1, 1);
  gpu_setup(&g2[1], 1, N / 2, 1, 1);
  set_parts(g2, 2, 2, n);
  /* 0x3F in every byte: each double is about 4.8e-4. */
  void *x1[1] = {dev_alloc(0, N * 8, 0x3F)};
  void *o1[1] = {dev_alloc(0, N * 16, 0)};
  void *x2[2] = {dev_alloc(0, N / 2 * 8, 0x3F), dev_alloc(1, N / 2 * 8, 0x3F)};
  void *o2[2] = {dev_alloc(0, N / 2 * 16, 0), dev_alloc(1, N / 2 * 16, 0)};
  double one =
      time_amplitude(g1, 1, comm, x1, o1, n, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, true);
  double two =
      time_amplitude(g2, 2, comm, x2, o2, n, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, true);
  double given =
      time_amplitude(g2, 2, comm, x2, o2, n, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, false);
  /* The 2-GPU norm must have the 1-GPU bits (the same tree), and so must the first amplitude. */
  double n1 = 0, n2a = 0, n2b = 0, a1[2], a2[2];
  CK(cudaSetDevice(0));
  CK(cudaMemcpy(&n1, g1[0].norms, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&n2a, g2[0].norms, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(a1, (char *)o1[0] + (N - 1) * 16, 16, cudaMemcpyDeviceToHost));
  CK(cudaSetDevice(1));
  CK(cudaMemcpy(&n2b, g2[1].norms, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(a2, (char *)o2[1] + (N / 2 - 1) * 16, 16, cudaMemcpyDeviceToHost));
  int same = memcmp(&n1, &n2a, 8) == 0 && memcmp(&n1, &n2b, 8) == 0 && memcmp(a1, a2, 16) == 0;
  double bytes = (double)N * (8 + 8 + 16); /* the input read by each pass, the state written */
  printf(
      "mesh_bench amplitude qubits=31 out=complex128 one_gpu_ms=%.3f two_gpu_ms=%.3f "
      "speedup=%.3f target=1.85 norm_sumsq=%.17g same_bits=%s two_gpu_tb_s=%.3f\n",
      one, two, one / two, n1, same ? "yes" : "NO", bytes / (two * 1e-3) / 1e12);
  printf(
      "mesh_bench norm_in_encode two_gpu_ms=%.3f norm_given_ms=%.3f overhead_us=%.1f "
      "target_us=30\n",
      two, given, (two - given) * 1e3);
  fflush(stdout);
  side_by_side_free(g1, x1, o1, g2, x2, o2);
}

static void bench_collective(struct device_comm *comm) {
  struct gpu g[2];
  gpu_setup(&g[0], 0, 1, 1, 1);
  gpu_setup(&g[1], 1, 1, 1, 1);
  printf("mesh_bench collective allgather_one_double_us=%.1f nccl=%d\n",
         time_gather_one(g, 2, comm), device_comm_nccl_version());
  fflush(stdout);
  gpu_teardown(&g[0]);
  gpu_teardown(&g[1]);
}

static void bench_batch(struct device_comm *comm) {
  const uint32_t n = 16;
  const uint64_t B = 4096, N = UINT64_C(1) << n;
  struct gpu g1[1], g2[2];
  gpu_setup(&g1[0], 0, N, B, B);
  gpu_setup(&g2[0], 0, N, B / 2, B / 2);
  gpu_setup(&g2[1], 1, N, B / 2, B / 2);
  void *x1[1] = {dev_alloc(0, B * N * 4, 0x3F)};
  void *o1[1] = {dev_alloc(0, B * N * 8, 0)};
  void *x2[2] = {dev_alloc(0, B / 2 * N * 4, 0x3F), dev_alloc(1, B / 2 * N * 4, 0x3F)};
  void *o2[2] = {dev_alloc(0, B / 2 * N * 8, 0), dev_alloc(1, B / 2 * N * 8, 0)};
  /* Samples split by GPU: each GPU runs the one-GPU job on its half of the batch, no exchange. */
  double t1[REPS], t2[REPS];
  for (int r = -1; r < REPS; r++) {
    double t0 = now_ms();
    amplitude_job(g1, 1, comm, x1, o1, n, B, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64, true);
    double t1e = now_ms();
    for (int i = 0; i < 2; i++) {
      CK(cudaSetDevice(i));
      QK(qdpk_sumsq(x2[i], QDP_DTYPE_FLOAT32, N, N, N, B / 2, QDP_DTYPE_COMPLEX64, NULL, g2[i].ws,
                    g2[i].ws_bytes, g2[i].norms, g2[i].stream));
      struct qdpk_span span = {
          .qubits = n, .first = 0, .count = N, .rows = B / 2, .out = QDP_DTYPE_COMPLEX64};
      QK(qdpk_amplitude(&span, x2[i], QDP_DTYPE_FLOAT32, N, N, g2[i].norms, NULL, o2[i],
                        g2[i].stream));
    }
    sync_all(g2, 2);
    double t2e = now_ms();
    if (r >= 0) {
      t1[r] = t1e - t0;
      t2[r] = t2e - t1e;
    }
  }
  double one = median(t1, REPS), two = median(t2, REPS);
  printf(
      "mesh_bench batch samples=4096 qubits=16 out=complex64 one_gpu_ms=%.3f two_gpu_ms=%.3f "
      "speedup=%.3f target=1.9 two_gpu_samples_s=%.3g\n",
      one, two, one / two, (double)B / (two * 1e-3));
  fflush(stdout);
  side_by_side_free(g1, x1, o1, g2, x2, o2);
}

static void bench_gather(void) {
  const uint64_t half = 16 * GIB; /* each GPU's half of a 2^31 complex128 state */
  void *src0 = dev_alloc(0, half, 1), *src1 = dev_alloc(1, half, 2);
  void *dst = dev_alloc(0, 2 * half, 0);
  cudaStream_t s0, s1;
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  double tp[REPS], tg[REPS];
  for (int r = -1; r < REPS; r++) {
    /* The link alone: GPU 1 -> GPU 0, 4 GiB. */
    double t0 = now_ms();
    CK(cudaMemcpyPeerAsync(dst, 0, src1, 1, 4 * GIB, s1));
    CK(cudaStreamSynchronize(s1));
    double t1 = now_ms();
    /* The gather: the remote half over the link while the local half is copied on GPU 0. */
    CK(cudaMemcpyAsync(dst, src0, half, cudaMemcpyDeviceToDevice, s0));
    CK(cudaMemcpyPeerAsync((char *)dst + half, 0, src1, 1, half, s1));
    CK(cudaStreamSynchronize(s0));
    CK(cudaStreamSynchronize(s1));
    double t2 = now_ms();
    if (r >= 0) {
      tp[r] = t1 - t0;
      tg[r] = t2 - t1;
    }
  }
  double peer = (double)(4 * GIB) / (median(tp, REPS) * 1e-3) / 1e9;
  double gms = median(tg, REPS);
  double rate = (double)half / (gms * 1e-3) / 1e9; /* bytes over the link per second */
  unsigned char a = 0, b = 0;
  CK(cudaMemcpy(&a, dst, 1, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&b, (char *)dst + 2 * half - 1, 1, cudaMemcpyDeviceToHost));
  printf(
      "mesh_bench gather state_gib=32 peer_gb_s=%.1f gather_ms=%.2f link_gb_s=%.1f "
      "fraction_of_peer=%.3f target=0.80 content=%s\n",
      peer, gms, rate, rate / peer, a == 1 && b == 2 ? "ok" : "WRONG");
  fflush(stdout);
  CK(cudaStreamDestroy(s0));
  CK(cudaStreamDestroy(s1));
  CK(cudaFree(dst));
  CK(cudaFree(src0));
  CK(cudaSetDevice(1));
  CK(cudaFree(src1));
}

static struct plan *plan_for(struct runtime_mesh *m, enum plan_policy policy, qdp_encoding enc,
                             uint32_t n, uint64_t cols, qdp_dtype in, qdp_dtype out) {
  struct plan_device devs[8];
  runtime_mesh_plan_devices(m, 0, devs);
  struct plan_world world = {.devices = devs, .count = runtime_mesh_count(m), .ranks = 1};
  struct plan_request req = {.encoding = enc,
                             .qubits = n,
                             .batch = 1,
                             .values_per_sample = cols,
                             .in_dtype = in,
                             .out_dtype = out,
                             .policy = policy,
                             .staging_bytes = runtime_mesh_staging_bytes(m),
                             .iqp_top_bits = runtime_mesh_iqp_top_bits(m)};
  struct plan *p = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  if (plan_compute(&req, &world, NULL, &p, &e) != QDP_OK || plan_check_feasible(p, &e) != QDP_OK) {
    fprintf(stderr, "plan: %s\n", e.msg);
    exit(1);
  }
  return p;
}

/* A mesh with the device group the daemon's world_start hands it. */
static struct runtime_mesh *mesh_copying(const char *spec, double fraction, unsigned copy_threads,
                                         struct mesh_group **ret_group) {
  struct runtime_mesh_config cfg = {
      .devices = spec, .mem_fraction = fraction, .copy_threads = copy_threads};
  struct runtime_mesh *m = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  if (runtime_mesh_create(&cfg, &m, &e) != QDP_OK ||
      mesh_group_create(m, true, ret_group, &e) != QDP_OK) {
    fprintf(stderr, "mesh %s: %s\n", spec, e.msg);
    exit(1);
  }
  return m;
}

static struct runtime_mesh *mesh(const char *spec, double fraction, struct mesh_group **ret_group) {
  return mesh_copying(spec, fraction, 0, ret_group);
}

static double encode_ms(struct runtime_mesh *m, const struct plan *p,
                        const struct runtime_input *in, const char **ret_how) {
  struct runtime_state *s = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  double t0 = now_ms();
  if (runtime_encode(m, p, in, &s, &e) != QDP_OK) {
    fprintf(stderr, "encode: %s\n", e.msg);
    exit(1);
  }
  double ms = now_ms() - t0;
  *ret_how = runtime_state_collective(s);
  runtime_state_destroy(s);
  return ms;
}

/* N float64 amplitudes in plain host memory, none zero. */
static double *host_input(uint64_t N) {
  double *x = malloc(N * sizeof *x);
  if (!x) {
    fprintf(stderr, "no host memory for %" PRIu64 " B of input\n", N * 8);
    exit(1);
  }
  for (uint64_t i = 0; i < N; i++) {
    x[i] = (double)((i * 2654435761u) % 1000) / 1000.0 + 0.001;
  }
  return x;
}

static void bench_host(uint32_t n) {
  const uint64_t N = UINT64_C(1) << n;
  double *x = host_input(N);
  struct mesh_group *g1 = NULL, *g2 = NULL;
  struct runtime_mesh *m1 = mesh("0", 0, &g1), *m2 = mesh("0,1", 0, &g2);
  bool reg1 = false, reg2 = false;
  struct qdp_error e = QDP_ERROR_INIT;
  double tr = now_ms();
  if (runtime_mesh_register_host(m1, x, N * 8, false, &reg1, &e) != QDP_OK) {
    fprintf(stderr, "register: %s\n", e.msg);
    exit(1);
  }
  tr = now_ms() - tr;
  /* The pinning is process-wide: the second mesh's devices see it already. */
  struct runtime_input pinned = {
      .data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = N, .pinned = true};
  struct runtime_input plain = pinned;
  plain.pinned = false;
  struct plan *p1 = plan_for(m1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, n, N, QDP_DTYPE_FLOAT64,
                             QDP_DTYPE_COMPLEX128);
  struct plan *p2 = plan_for(m2, PLAN_EVEN, QDP_ENCODING_AMPLITUDE, n, N, QDP_DTYPE_FLOAT64,
                             QDP_DTYPE_COMPLEX128);
  const char *how1 = "", *how2 = "";
  double t1[3], t2[3], tp[3];
  for (int r = -1; r < 3; r++) {
    double a = encode_ms(m1, p1, &pinned, &how1);
    double b = encode_ms(m2, p2, &pinned, &how2);
    double c = encode_ms(m1, p1, &plain, &how1);
    if (r >= 0) {
      t1[r] = a;
      t2[r] = b;
      tp[r] = c;
    }
  }
  double one = median(t1, 3), two = median(t2, 3), pageable = median(tp, 3);
  /* The ceiling: the same registered input copied to GPU 0 alone, then to both GPUs at once
   * (each its half), with nothing else. */
  double th1[3], th2[3];
  void *d0 = dev_alloc(0, N * 8, 0), *d1 = dev_alloc(1, N * 4, 0);
  for (int r = 0; r < 3; r++) {
    CK(cudaSetDevice(0));
    double t0 = now_ms();
    CK(cudaMemcpy(d0, x, N * 8, cudaMemcpyHostToDevice));
    th1[r] = now_ms() - t0;
    cudaStream_t st[2];
    for (int g = 0; g < 2; g++) {
      CK(cudaSetDevice(g));
      CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
    }
    t0 = now_ms();
    CK(cudaSetDevice(0));
    CK(cudaMemcpyAsync(d0, x, N * 4, cudaMemcpyHostToDevice, st[0]));
    CK(cudaSetDevice(1));
    CK(cudaMemcpyAsync(d1, x + N / 2, N * 4, cudaMemcpyHostToDevice, st[1]));
    for (int g = 0; g < 2; g++) {
      CK(cudaSetDevice(g));
      CK(cudaStreamSynchronize(st[g]));
      CK(cudaStreamDestroy(st[g]));
    }
    th2[r] = now_ms() - t0;
  }
  CK(cudaSetDevice(0));
  CK(cudaFree(d0));
  CK(cudaSetDevice(1));
  CK(cudaFree(d1));
  /* The same copy into memory just allocated, as a job's state is: what the first touch of
   * fresh device memory adds. */
  double tf[3];
  for (int r = 0; r < 3; r++) {
    void *fresh = NULL;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&fresh, N * 16));
    double t0 = now_ms();
    CK(cudaMemcpy((char *)fresh + N * 8, x, N * 8, cudaMemcpyHostToDevice));
    tf[r] = now_ms() - t0;
    CK(cudaFree(fresh));
  }
  /* What allocating the state costs inside those figures (the runtime allocates per job). */
  double talloc[3];
  for (int r = 0; r < 3; r++) {
    void *p = NULL;
    CK(cudaSetDevice(0));
    double t0 = now_ms();
    CK(cudaMalloc(&p, N * 16));
    talloc[r] = now_ms() - t0;
    CK(cudaFree(p));
  }
  double gb = (double)N * 8 / 1e9;
  printf(
      "mesh_bench host qubits=%u input_gib=%u register_ms=%.0f one_gpu_ms=%.1f two_gpu_ms=%.1f "
      "speedup=%.3f target=1.8 one_gpu_input_gb_s=%.1f two_gpu_input_gb_s=%.1f "
      "one_gpu_unregistered_ms=%.1f collective=%s cudamalloc_state_ms=%.1f "
      "copy_only_one_gpu_gb_s=%.1f copy_only_two_gpus_gb_s=%.1f copy_into_fresh_gb_s=%.1f\n",
      n, (unsigned)((N * 8) >> 30), tr, one, two, one / two, gb / (one * 1e-3), gb / (two * 1e-3),
      pageable, how2, median(talloc, 3), gb / (median(th1, 3) * 1e-3), gb / (median(th2, 3) * 1e-3),
      gb / (median(tf, 3) * 1e-3));
  fflush(stdout);
  plan_destroy(p1);
  plan_destroy(p2);
  runtime_mesh_unregister_host(m1, x);
  (void)reg2;
  mesh_group_destroy(g2);
  mesh_group_destroy(g1);
  runtime_mesh_destroy(m2);
  runtime_mesh_destroy(m1);
  free(x);
}

/* One GPU: amplitude complex128 from 2^30 float64 in host memory through the runtime, as one
 * job of a loop (the state's buffer is the freed one of the job before), against a bare copy of
 * the same registered buffer into device memory in use, in the same run; and from the same
 * memory not registered, packed by the encoding thread alone (copy_threads 1) and by the
 * default copy threads. */
static void bench_host_one(void) {
  const uint32_t n = 30;
  const uint64_t N = UINT64_C(1) << n;
  double *x = host_input(N);
  struct mesh_group *g = NULL, *g1 = NULL;
  struct runtime_mesh *m = mesh("0", 0, &g), *m1 = mesh_copying("0", 0, 1, &g1);
  struct plan *p = plan_for(m, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, n, N, QDP_DTYPE_FLOAT64,
                            QDP_DTYPE_COMPLEX128);
  struct plan *p1 = plan_for(m1, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, n, N, QDP_DTYPE_FLOAT64,
                             QDP_DTYPE_COMPLEX128);
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = N};
  const char *how = "";
  double tu[3], tu1[3], tr[5], tc[3];
  for (int r = -1; r < 3; r++) {
    double a = encode_ms(m, p, &in, &how), b = encode_ms(m1, p1, &in, &how);
    if (r >= 0) {
      tu[r] = a;
      tu1[r] = b;
    }
  }
  bool reg = false;
  struct qdp_error e = QDP_ERROR_INIT;
  if (runtime_mesh_register_host(m, x, N * 8, false, &reg, &e) != QDP_OK) {
    fprintf(stderr, "register: %s\n", e.msg);
    exit(1);
  }
  in.pinned = true;
  for (int r = -1; r < 5; r++) {
    double a = encode_ms(m, p, &in, &how);
    if (r >= 0) {
      tr[r] = a;
    }
  }
  void *d = dev_alloc(0, N * 8, 0);
  CK(cudaSetDevice(0));
  CK(cudaMemcpy(d, x, N * 8, cudaMemcpyHostToDevice)); /* touched once */
  for (int r = 0; r < 3; r++) {
    double t0 = now_ms();
    CK(cudaMemcpy(d, x, N * 8, cudaMemcpyHostToDevice));
    tc[r] = now_ms() - t0;
  }
  CK(cudaFree(d));
  double gb = (double)N * 8 / 1e9, reg_ms = median(tr, 5), copy_ms = median(tc, 3);
  printf("mesh_bench host1 qubits=30 input_gib=8 registered_ms=%.1f registered_input_gb_s=%.1f "
         "copy_only_gb_s=%.1f registered_over_copy=%.3f target=0.9 unregistered_ms=%.1f "
         "unregistered_input_gb_s=%.1f unregistered_one_thread_ms=%.1f "
         "unregistered_one_thread_input_gb_s=%.1f copy_threads_speedup=%.2f\n",
         reg_ms, gb / (reg_ms * 1e-3), gb / (copy_ms * 1e-3), copy_ms / reg_ms, median(tu, 3),
         gb / (median(tu, 3) * 1e-3), median(tu1, 3), gb / (median(tu1, 3) * 1e-3),
         median(tu1, 3) / median(tu, 3));
  fflush(stdout);
  plan_destroy(p);
  plan_destroy(p1);
  runtime_mesh_unregister_host(m, x);
  mesh_group_destroy(g);
  mesh_group_destroy(g1);
  runtime_mesh_destroy(m);
  runtime_mesh_destroy(m1);
  free(x);
}

/* The worst relative error of an angle state's amplitudes at `at` against the product of
 * per-qubit cos/sin (the imaginary parts must be zero). */
static double angle_spot_error(struct runtime_state *st, const double *x, uint32_t q,
                               const uint64_t *at, size_t nat, int c64) {
  double worst = 0;
  struct qdp_error e = QDP_ERROR_INIT;
  for (size_t i = 0; i < nat; i++) {
    double v[2] = {0, 0};
    float f[2] = {0, 0};
    QK(runtime_state_read(st, at[i], 1, c64 ? (void *)f : (void *)v, &e));
    if (c64) {
      v[0] = f[0];
      v[1] = f[1];
    }
    double want = 1;
    for (uint32_t k = 0; k < q; k++) {
      want *= (at[i] >> k & 1) ? sin(x[k]) : cos(x[k]);
    }
    double err = fabs(v[0] - want) / fabs(want) + fabs(v[1]);
    worst = err > worst ? err : worst;
  }
  return worst;
}

static void bench_capacity(void) {
  const uint32_t n = 34;
  double x[34];
  for (uint32_t k = 0; k < n; k++) {
    x[k] = 0.1 + 0.05 * k;
  }
  struct mesh_group *g = NULL;
  struct runtime_mesh *m = mesh("0,1", 0.97, &g);
  struct plan *p =
      plan_for(m, PLAN_AUTO, QDP_ENCODING_ANGLE, n, n, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = n};
  struct runtime_state *s = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  double t0 = now_ms();
  if (runtime_encode(m, p, &in, &s, &e) != QDP_OK) {
    fprintf(stderr, "capacity encode: %s\n", e.msg);
    exit(1);
  }
  double ms = now_ms() - t0;
  /* Spot checks against the product of per-qubit cos/sin, one per region of the state. */
  const uint64_t at[] = {0,
                         1,
                         (UINT64_C(1) << 33) - 1,
                         UINT64_C(1) << 33,
                         (UINT64_C(1) << 34) - 1,
                         0x2AAAAAAAAull,
                         0x15555555Bull};
  double worst = angle_spot_error(s, x, n, at, sizeof at / sizeof at[0], 0);
  printf(
      "mesh_bench capacity qubits=34 out=complex128 gib=%.0f shards=%zu policy=%s "
      "encode_ms=%.1f spot_checks=%zu worst_rel_err=%.2e\n",
      (double)p->total_bytes / (double)GIB, p->nshards, plan_policy_name(p->policy), ms,
      sizeof at / sizeof at[0], worst);
  fflush(stdout);
  runtime_state_destroy(s);
  plan_destroy(p);
  mesh_group_destroy(g);
  runtime_mesh_destroy(m);
}

/* The largest amplitude state one GPU holds, from host input: 33 qubits complex128 (128 GiB)
 * from 2^33 float64 (64 GiB) in registered host memory, uploaded once into the state's own
 * buffer. The first 2^20 values are non-zero, the rest zero (untouched pages); spot checks
 * compare with x / ||x|| computed here. */
static void bench_big(void) {
  const uint32_t n = 33;
  const uint64_t N = UINT64_C(1) << n, nz = UINT64_C(1) << 20;
  double *x = calloc(N, sizeof *x);
  if (!x) {
    printf("mesh_bench big skipped=no_host_memory_for_64_GiB\n");
    return;
  }
  long double ss = 0;
  for (uint64_t i = 0; i < nz; i++) {
    x[i] = 1.0 + (double)(i % 97) / 97.0;
    ss += (long double)x[i] * x[i];
  }
  struct mesh_group *g = NULL;
  struct runtime_mesh *m = mesh("0", 0.97, &g);
  bool reg = false;
  struct qdp_error e = QDP_ERROR_INIT;
  double tr = now_ms();
  if (runtime_mesh_register_host(m, x, N * 8, false, &reg, &e) != QDP_OK) {
    fprintf(stderr, "register 64 GiB: %s\n", e.msg);
    exit(1);
  }
  tr = now_ms() - tr;
  struct plan *p = plan_for(m, PLAN_SINGLE, QDP_ENCODING_AMPLITUDE, n, N, QDP_DTYPE_FLOAT64,
                            QDP_DTYPE_COMPLEX128);
  struct runtime_input in = {
      .data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = N, .pinned = true};
  struct runtime_state *st = NULL;
  double t0 = now_ms();
  if (runtime_encode(m, p, &in, &st, &e) != QDP_OK) {
    fprintf(stderr, "33-qubit encode: %s\n", e.msg);
    exit(1);
  }
  double ms = now_ms() - t0;
  struct runtime_device_info info;
  runtime_mesh_device_info(m, 0, &info);
  const uint64_t at[] = {0, 1, 96, nz - 1, nz, N / 2, N - 1};
  double worst = 0;
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
    double got[2];
    if (runtime_state_read(st, at[i], 1, got, &e) != QDP_OK) {
      fprintf(stderr, "read: %s\n", e.msg);
      exit(1);
    }
    double want = (double)((long double)x[at[i]] / sqrtl(ss));
    double err = want != 0 ? fabs(got[0] - want) / want : fabs(got[0]);
    err += fabs(got[1]);
    worst = err > worst ? err : worst;
  }
  printf(
      "mesh_bench big qubits=33 out=complex128 state_gib=128 input_gib=64 register_ms=%.0f "
      "encode_ms=%.0f input_gb_s=%.1f target_gb_s=47 device_used_gib=%.2f spot_checks=%zu "
      "worst_rel_err=%.2e\n",
      tr, ms, (double)N * 8 / 1e9 / (ms * 1e-3),
      (double)(info.total_bytes - info.free_bytes) / (double)GIB, sizeof at / sizeof at[0], worst);
  fflush(stdout);
  runtime_state_destroy(st);
  plan_destroy(p);
  runtime_mesh_unregister_host(m, x);
  mesh_group_destroy(g);
  runtime_mesh_destroy(m);
  free(x);
}

/* ---- every GPU of the machine (the eight-GPU run; checked on two) ---- */

/* Strong scaling of amplitude complex128 2^qubits with its input on the GPUs, over 1, 2, 4, ...
 * GPUs of this process: each GPU count its own communicator, the same job, the same bits. */
static void bench_scaling(int count, uint32_t qubits) {
  const uint64_t N = UINT64_C(1) << qubits;
  double one = 0, norm1 = 0;
  for (int k = 1; k <= count && k <= MAXG; k *= 2) {
    struct gpu g[MAXG];
    void *x[MAXG], *o[MAXG];
    int ords[MAXG];
    struct device_comm *comm = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    for (int i = 0; i < k; i++) {
      ords[i] = i;
      gpu_setup(&g[i], i, N / (uint64_t)k, 1, 1);
      x[i] = dev_alloc(i, N / (uint64_t)k * 8, 0x3F);
      o[i] = dev_alloc(i, N / (uint64_t)k * 16, 0);
    }
    if (k > 1) {
      QK(device_comm_create_local(ords, (size_t)k, &comm, &e));
      set_parts(g, k, k, qubits);
    }
    double ms =
        time_amplitude(g, k, comm, x, o, qubits, 1, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128, true);
    double ag = 0;
    if (k > 1) {
      ag = time_gather_one(g, k, comm);
    }
    double norm = 0;
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(&norm, g[0].norms, 8, cudaMemcpyDeviceToHost));
    if (k == 1) {
      one = ms;
      norm1 = norm;
    }
    printf(
        "mesh_bench scaling qubits=%u out=complex128 gpus=%d ms=%.3f speedup=%.3f "
        "allgather_one_double_us=%.1f same_norm_bits=%s\n",
        qubits, k, ms, one / ms, ag, memcmp(&norm, &norm1, 8) == 0 ? "yes" : "NO");
    fflush(stdout);
    device_comm_destroy(comm);
    for (int i = 0; i < k; i++) {
      CK(cudaSetDevice(i));
      CK(cudaFree(x[i]));
      CK(cudaFree(o[i]));
      gpu_teardown(&g[i]);
    }
  }
}

/* iqp with pair terms over 1, 2, 4, ... GPUs through the runtime: up to 8 GPUs each transforms
 * the top bits alone and nothing is exchanged ("none"). Every GPU count gives the one-GPU bits (checked on 4096 amplitudes at each
 * end and the middle). */
static void bench_iqp(int count, uint32_t qubits) {
  uint64_t np = qubits + (uint64_t)qubits * (qubits - 1) / 2, N = UINT64_C(1) << qubits;
  double *x = malloc(np * sizeof *x);
  double(*ref)[2] = malloc(3 * 4096 * sizeof *ref), (*got)[2] = malloc(3 * 4096 * sizeof *got);
  if (!x || !ref || !got) {
    exit(1);
  }
  for (uint64_t i = 0; i < np; i++) {
    x[i] = 0.01 * (double)(i % 37) - 0.15;
  }
  const uint64_t at[3] = {0, N / 2 - 2048, N - 4096};
  double one = 0;
  for (int k = 1; k <= count && k <= MAXG; k *= 2) {
    char spec[32] = "0";
    for (int i = 1; i < k; i++) {
      snprintf(spec + strlen(spec), sizeof spec - strlen(spec), ",%d", i);
    }
    struct mesh_group *g = NULL;
    struct runtime_mesh *m = mesh(spec, 0, &g);
    struct plan *p = plan_for(m, k == 1 ? PLAN_SINGLE : PLAN_EVEN, QDP_ENCODING_IQP, qubits, np,
                              QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128);
    struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = np};
    double t[3];
    const char *how = "";
    struct qdp_error e = QDP_ERROR_INIT;
    int same = 1;
    for (int r = -1; r < 3; r++) {
      struct runtime_state *st = NULL;
      double t0 = now_ms();
      if (runtime_encode(m, p, &in, &st, &e) != QDP_OK) {
        fprintf(stderr, "iqp encode: %s\n", e.msg);
        exit(1);
      }
      if (r >= 0) {
        t[r] = now_ms() - t0;
      }
      how = runtime_state_collective(st);
      for (int j = 0; r == 2 && j < 3; j++) {
        QK(runtime_state_read(st, at[j], 4096, k == 1 ? ref[j * 4096] : got[j * 4096], &e));
      }
      runtime_state_destroy(st);
    }
    if (k > 1) {
      same = memcmp(ref, got, 3 * 4096 * sizeof *ref) == 0;
    }
    double ms = median(t, 3);
    one = k == 1 ? ms : one;
    printf(
        "mesh_bench iqp qubits=%u out=complex128 gpus=%d ms=%.2f speedup=%.3f stages=%s "
        "same_bits=%s\n",
        qubits, k, ms, one / ms, k == 1 ? "none" : how, same ? "yes" : "NO");
    fflush(stdout);
    plan_destroy(p);
    mesh_group_destroy(g);
    runtime_mesh_destroy(m);
  }
  free(x);
  free(ref);
  free(got);
}

/* iqp at 30 and 31 qubits, the sizes the runs report. */
static void bench_iqp_sizes(int count) {
  for (uint32_t qubits = 30; qubits <= 31; qubits++) {
    bench_iqp(count, qubits);
  }
}

/* The largest angle states every GPU together holds (complex128 and complex64), encoded, described
 * (its shards) and read back in part against the closed form; and the topology and placement. */
static void bench_capacity_max(void) {
  struct mesh_group *g = NULL;
  struct runtime_mesh *m = mesh("auto", 0.97, &g);
  size_t n = runtime_mesh_count(m);
  printf("mesh_bench topology source=%s collectives=\"%s\"\n", runtime_mesh_topology_source(m),
         runtime_mesh_collectives(m));
  for (size_t i = 0; i < n; i++) {
    printf("mesh_bench topology cuda:%zu", i);
    for (size_t j = 0; j < n; j++) {
      struct runtime_link l;
      runtime_mesh_link(m, i, j, &l);
      printf(" %s%s%d", runtime_link_kind_name(l.kind), l.peer ? "+peer/" : "/", l.nvlinks);
    }
    printf("\n");
  }
  uint64_t budget = 0;
  for (size_t i = 0; i < n; i++) {
    struct runtime_device_info info;
    runtime_mesh_device_info(m, i, &info);
    budget += info.budget_bytes - runtime_mesh_staging_bytes(m);
  }
  for (int c64 = 0; c64 < 2; c64++) {
    unsigned osize = c64 ? 8 : 16;
    uint32_t q = 0;
    while (((UINT64_C(1) << (q + 1)) * osize) <= budget / n * n && q < 40) {
      q++;
    }
    /* Even shards over a power-of-two GPU count: each must fit its own GPU's budget. */
    while (q > 0 && ((UINT64_C(1) << q) * osize) / n > budget / n) {
      q--;
    }
    double x[40];
    for (uint32_t k = 0; k < q; k++) {
      x[k] = 0.05 + 0.07 * k;
    }
    qdp_dtype out = c64 ? QDP_DTYPE_COMPLEX64 : QDP_DTYPE_COMPLEX128;
    struct plan *p = plan_for(m, PLAN_AUTO, QDP_ENCODING_ANGLE, q, q, QDP_DTYPE_FLOAT64, out);
    struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = q};
    struct runtime_state *st = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    double t0 = now_ms();
    if (runtime_encode(m, p, &in, &st, &e) != QDP_OK) {
      fprintf(stderr, "capacity encode: %s\n", e.msg);
      exit(1);
    }
    double ms = now_ms() - t0;
    uint64_t N = UINT64_C(1) << q;
    const uint64_t at[] = {0, 1, N / 3, N / 2, N - 1};
    double worst = angle_spot_error(st, x, q, at, sizeof at / sizeof at[0], c64);
    printf(
        "mesh_bench capacity_max qubits=%u out=%s gib=%.0f gpus=%zu policy=%s encode_ms=%.1f "
        "worst_rel_err=%.2e shards=",
        q, c64 ? "complex64" : "complex128", (double)p->total_bytes / (double)GIB, n,
        plan_policy_name(p->policy), ms, worst);
    for (size_t i = 0; i < p->nshards; i++) {
      printf("%s%s:[%" PRIu64 ",+%" PRIu64 ")", i ? "," : "", p->needs[i].name, p->shards[i].first,
             p->shards[i].count);
    }
    printf("\n");
    fflush(stdout);
    runtime_state_destroy(st);
    plan_destroy(p);
  }
  mesh_group_destroy(g);
  runtime_mesh_destroy(m);
}

#ifdef QDP_BENCH_MPI
/* ---- ranks: one GPU per process, the norm over NCCL across the processes ----
 * Under `mpirun -n R mesh_bench ranks`: each rank drives the GPU of its local index on its node,
 * joins a NCCL group whose unique id rank 0 broadcasts over MPI (never a device pointer through
 * MPI), and runs its 1/R of amplitude complex128 2^31. Baseline in the same run: rank 0 alone
 * with the whole state on its GPU. Times are the slowest rank's, median of REPS. */
/* Median microseconds of 100 all-gathers of one double over comm with a stream sync, each the
 * slowest rank's (after 10 unmeasured); t holds 100 scratch entries. */
static double ranks_bare_allgather(struct device_comm *comm, struct gpu *g, double *t) {
  struct qdp_error e = QDP_ERROR_INIT;
  for (int r = -10; r < 100; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double s0 = now_ms();
    QK(device_comm_allgather_f64(comm, 0, g->sums, g->recv, 1, g->stream, &e));
    CK(cudaStreamSynchronize(g->stream));
    double ms = now_ms() - s0, worst = 0;
    MPI_Allreduce(&ms, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r >= 0) {
      t[r] = worst;
    }
  }
  return median(t, 100) * 1e3;
}

static double ranks_job(struct gpu *g, struct device_comm *comm, int size, void *x, void *o,
                        uint32_t qubits, bool gather) {
  uint64_t per = (UINT64_C(1) << qubits) / (uint64_t)size;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now_ms();
  CK(cudaSetDevice(g->ordinal));
  QK(qdpk_sumsq(x, QDP_DTYPE_FLOAT64, per, per, per, 1, QDP_DTYPE_COMPLEX128, NULL, g->ws,
                g->ws_bytes, size == 1 ? g->norms : g->sums, g->stream));
  if (size > 1 && gather) {
    struct qdp_error e = QDP_ERROR_INIT;
    QK(device_comm_allgather_f64(comm, 0, g->sums, g->recv, 1, g->stream, &e));
    QK(qdpk_norm_combine(g->parts, (size_t)size, qubits, 0, g->recv, 1, 1, g->norms, g->stream));
  }
  struct qdpk_span span = {.qubits = qubits,
                           .first = (uint64_t)rank * per,
                           .count = per,
                           .rows = 1,
                           .out = QDP_DTYPE_COMPLEX128};
  QK(qdpk_amplitude(&span, x, QDP_DTYPE_FLOAT64, per, per, g->norms, NULL, o, g->stream));
  CK(cudaStreamSynchronize(g->stream));
  double ms = now_ms() - t0, worst = 0;
  MPI_Allreduce(&ms, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

static int bench_ranks(int argc, char **argv, uint32_t qubits) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  int ordinal = lr ? atoi(lr) : rank, count = 0;
  CK(cudaGetDeviceCount(&count));
  if (size > MAXG || (size & (size - 1)) != 0 || ordinal >= count) {
    if (rank == 0) {
      printf("mesh_bench ranks: needs a power-of-two rank count up to %d, one GPU each\n", MAXG);
    }
    MPI_Finalize();
    return 77;
  }
  const uint64_t N = UINT64_C(1) << qubits, per = N / (uint64_t)size;
  unsigned char id[DEVICE_COMM_ID_BYTES];
  struct qdp_error e = QDP_ERROR_INIT;
  if (rank == 0) {
    QK(device_comm_unique_id(id, &e));
  }
  MPI_Bcast(id, DEVICE_COMM_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
  struct device_comm *comm = NULL;
  double t0 = now_ms();
  QK(device_comm_create_members(id, size, rank, &ordinal, 1, 60000, &comm, &e));
  double create_ms = now_ms() - t0;
  struct gpu g, g1;
  gpu_setup(&g, ordinal, per, 1, 1);
  set_parts(&g, 1, size, qubits);
  void *x = dev_alloc(ordinal, per * 8, 0x3F), *o = dev_alloc(ordinal, per * 16, 0);
  /* Rank 0 alone, the whole state: the baseline. */
  double one = 0, base_norm = 0;
  if (rank == 0) {
    gpu_setup(&g1, ordinal, N, 1, 1);
    void *x1 = dev_alloc(ordinal, N * 8, 0x3F), *o1 = dev_alloc(ordinal, N * 16, 0);
    double t[REPS];
    for (int r = -1; r < REPS; r++) {
      double s0 = now_ms();
      QK(qdpk_sumsq(x1, QDP_DTYPE_FLOAT64, N, N, N, 1, QDP_DTYPE_COMPLEX128, NULL, g1.ws,
                    g1.ws_bytes, g1.norms, g1.stream));
      struct qdpk_span span = {
          .qubits = qubits, .first = 0, .count = N, .rows = 1, .out = QDP_DTYPE_COMPLEX128};
      QK(qdpk_amplitude(&span, x1, QDP_DTYPE_FLOAT64, N, N, g1.norms, NULL, o1, g1.stream));
      CK(cudaStreamSynchronize(g1.stream));
      if (r >= 0) {
        t[r] = now_ms() - s0;
      }
    }
    one = median(t, REPS);
    CK(cudaMemcpy(&base_norm, g1.norms, 8, cudaMemcpyDeviceToHost));
    CK(cudaFree(x1));
    CK(cudaFree(o1));
    gpu_teardown(&g1);
  }
  double tw[REPS], tg[REPS], ta[100];
  /* Warm-up long enough for the GPUs to come back to full clocks after the idle join. */
  for (int r = 0; r < 30; r++) {
    ranks_job(&g, comm, size, x, o, qubits, true);
  }
  for (int r = 0; r < REPS; r++) {
    tw[r] = ranks_job(&g, comm, size, x, o, qubits, true);
    tg[r] = ranks_job(&g, comm, size, x, o, qubits, false);
  }
  double bare = ranks_bare_allgather(comm, &g, ta);
  /* The same group made blocking (no bound on its waits): what the bound costs per collective. */
  struct device_comm *blocking = NULL;
  if (rank == 0) {
    QK(device_comm_unique_id(id, &e));
  }
  MPI_Bcast(id, DEVICE_COMM_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
  QK(device_comm_create_members(id, size, rank, &ordinal, 1, 0, &blocking, &e));
  double bare_blocking = ranks_bare_allgather(blocking, &g, ta);
  double tb[REPS];
  for (int r = 0; r < 30; r++) {
    ranks_job(&g, blocking, size, x, o, qubits, true);
  }
  for (int r = 0; r < REPS; r++) {
    tb[r] = ranks_job(&g, blocking, size, x, o, qubits, true);
  }
  device_comm_destroy(blocking);
  double norm = 0;
  ranks_job(&g, comm, size, x, o, qubits, true);
  CK(cudaMemcpy(&norm, g.norms, 8, cudaMemcpyDeviceToHost));
  if (rank == 0) {
    double with = median(tw, REPS), given = median(tg, REPS);
    printf(
        "mesh_bench ranks=%d gpus_per_rank=1 amplitude qubits=%u out=complex128 "
        "comm_create_ms=%.0f one_rank_ms=%.3f ranks_ms=%.3f speedup=%.3f target=1.8 "
        "norm_given_ms=%.3f norm_overhead_us=%.1f allgather_one_double_us=%.1f "
        "target_collective_us=60 same_norm_bits=%s\n"
        "mesh_bench ranks=%d blocking_group: norm_overhead_us=%.1f allgather_one_double_us=%.1f\n",
        size, qubits, create_ms, one, with, one / with, given, (with - given) * 1e3, bare,
        memcmp(&norm, &base_norm, 8) == 0 ? "yes" : "NO", size,
        (median(tb, REPS) - given) * 1e3, bare_blocking);
    fflush(stdout);
  }
  CK(cudaSetDevice(ordinal));
  CK(cudaFree(x));
  CK(cudaFree(o));
  gpu_teardown(&g);
  device_comm_destroy(comm);
  MPI_Finalize();
  return 0;
}
#endif

static const char usage[] =
    "Usage: mesh_bench [NAME[,NAME...]]         (default: the two-GPU figures)\n"
    "       mpirun -n R mesh_bench ranks\n"
    "Two-GPU figures, each beside its one-GPU baseline in the same run: collective, amplitude,\n"
    "batch, gather, host, capacity, big. Named only: scaling (amplitude over 1, 2, 4, 8 GPUs),\n"
    "iqp (30 and 31 qubits over 1 GPU and up; runs on one GPU too), capacity_max, host1 (host\n"
    "input on one GPU). ranks: R processes of one GPU each, the norm over NCCL, against one\n"
    "alone.\n"
    "Exits 77 without the GPUs a figure needs.\n";

/* Every comma-separated name of `only` is one mesh_bench knows. */
static void check_names(const char *only) {
  static const char *const known[] = {"collective", "amplitude", "batch",        "gather",
                                      "host",       "capacity",  "big",          "scaling",
                                      "iqp",        "host1",     "capacity_max", "ranks"};
  for (const char *p = only; *p;) {
    size_t n = strcspn(p, ",");
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
      ok |= strlen(known[i]) == n && strncmp(p, known[i], n) == 0;
    }
    if (!ok) {
      bench_cli_fail("mesh_bench", usage, "no figure is called '%.*s'", (int)n, p);
    }
    p += n + (p[n] == ',');
  }
}

int main(int argc, char **argv) {
  int count = 0;
  bench_cli_help(argc, argv, usage);
  if (argc > 1) {
    check_names(argv[1]);
  }
  if (argc > 2) {
    bench_cli_fail("mesh_bench", usage, "one list of names, not '%s' after it", argv[2]);
  }
#ifdef QDP_BENCH_MPI
  if (argc > 1 && strcmp(argv[1], "ranks") == 0) {
    return bench_ranks(argc, argv, 31);
  }
#endif
  const char *only = argc > 1 ? argv[1] : "";
  if (cudaGetDeviceCount(&count) == cudaSuccess && count >= 1 &&
      (strcmp(only, "iqp") == 0 || strcmp(only, "host1") == 0)) {
    if (strcmp(only, "iqp") == 0) {
      bench_iqp_sizes(count); /* over 1 GPU and up */
    } else {
      bench_host_one();
    }
    return 0;
  }
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
    printf("mesh_bench: needs two GPUs, found %d\n", count);
    return 77;
  }
  for (int i = 0; i < 2; i++) {
    CK(cudaSetDevice(i));
    cudaError_t err = cudaDeviceEnablePeerAccess(1 - i, 0);
    if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled) {
      printf("mesh_bench: no peer access %d -> %d (%s)\n", i, 1 - i, cudaGetErrorName(err));
    }
    (void)cudaGetLastError();
  }
  int ords[2] = {0, 1};
  struct device_comm *comm = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  double t0 = now_ms();
  QK(device_comm_create_local(ords, 2, &comm, &e));
  printf("mesh_bench comm_create_ms=%.0f\n", now_ms() - t0);
  if (!*only || strstr(only, "collective")) {
    bench_collective(comm);
  }
  if (!*only || strstr(only, "amplitude")) {
    bench_amplitude(comm);
  }
  if (!*only || strstr(only, "batch")) {
    bench_batch(comm);
  }
  if (!*only || strstr(only, "gather")) {
    bench_gather();
  }
  device_comm_destroy(comm);
  if (!*only || strstr(only, "host")) {
    bench_host(30);
    bench_host(31); /* 16 GiB of input */
  }
  if (!*only || (strstr(only, "capacity") && !strstr(only, "capacity_max"))) {
    bench_capacity();
  }
  if (!*only || strstr(only, "big")) {
    bench_big();
  }
  /* Named only: every GPU of the machine. */
  if (strstr(only, "scaling")) {
    bench_scaling(count, count >= 8 ? 32 : 31);
  }
  if (strstr(only, "iqp")) {
    bench_iqp_sizes(count);
  }
  if (strstr(only, "capacity_max")) {
    bench_capacity_max();
  }
  return 0;
}
