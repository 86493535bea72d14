/* mesh_bench_runtime.c — the figures through the runtime: amplitude from registered host memory on
 * one GPU against two, host input on one GPU (registered against a bare copy, not registered with
 * and without the copy threads), a 34-qubit angle state over both GPUs spot-checked against the
 * closed form, and a 33-qubit amplitude state on one GPU from 64 GiB of registered input. */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "mesh_bench.h"
#include "runtime/runtime.h"
#include "world/mesh_group.h"

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

void bench_host(uint32_t n) {
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
void bench_host_one(void) {
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
  printf(
      "mesh_bench host1 qubits=30 input_gib=8 registered_ms=%.1f registered_input_gb_s=%.1f "
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

void bench_capacity(void) {
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
void bench_big(void) {
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
