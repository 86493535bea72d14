/* mesh_bench_util.c — mesh_bench's measurement helpers (mesh_bench.h): timing, GPUs set up for the
 * kernel-level jobs, the amplitude job over the communicator and its timing, and plans, meshes and
 * the closed-form spot check for the runtime-level figures. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "device_comm.h"
#include "mesh_bench.h"
#include "qdpk_cuda.h"
#include "runtime/runtime.h"
#include "world/mesh_group.h"

double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

void sync_all(struct gpu *g, int n) {
  for (int i = 0; i < n; i++) {
    CK(cudaSetDevice(g[i].ordinal));
    CK(cudaStreamSynchronize(g[i].stream));
  }
}

void *dev_alloc(int ordinal, uint64_t bytes, unsigned char fill) {
  void *p = NULL;
  CK(cudaSetDevice(ordinal));
  CK(cudaMalloc(&p, bytes));
  CK(cudaMemset(p, fill, bytes));
  return p;
}

void gather_sums(struct gpu *g, int n, struct device_comm *comm, uint64_t count) {
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

double time_gather_one(struct gpu *g, int n, struct device_comm *comm) {
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

void amplitude_job(struct gpu *g, int n, struct device_comm *comm, void *const *x, void *const *out,
                   uint32_t qubits, uint64_t rows, qdp_dtype in, qdp_dtype outt, bool gather) {
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

double time_amplitude(struct gpu *g, int n, struct device_comm *comm, void *const *x,
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

void gpu_setup(struct gpu *g, int ordinal, uint64_t ws_block, uint64_t ws_rows, uint64_t rows) {
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

void gpu_teardown(struct gpu *g) {
  CK(cudaSetDevice(g->ordinal));
  CK(cudaFree(g->ws));
  CK(cudaFree(g->sums));
  CK(cudaFree(g->recv));
  CK(cudaFree(g->norms));
  CK(cudaFree(g->parts));
  CK(cudaStreamDestroy(g->stream));
}

void side_by_side_free(struct gpu *g1, void **x1, void **o1, struct gpu *g2, void **x2, void **o2) {
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

void set_parts(struct gpu *g, int local, int n, uint32_t qubits) {
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

struct plan *plan_for(struct runtime_mesh *m, enum plan_policy policy, qdp_encoding enc, uint32_t n,
                      uint64_t cols, qdp_dtype in, qdp_dtype out) {
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

struct runtime_mesh *mesh_copying(const char *spec, double fraction, unsigned copy_threads,
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

struct runtime_mesh *mesh(const char *spec, double fraction, struct mesh_group **ret_group) {
  return mesh_copying(spec, fraction, 0, ret_group);
}

double angle_spot_error(struct runtime_state *st, const double *x, uint32_t q, const uint64_t *at,
                        size_t nat, int c64) {
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
