/* mesh_bench_scaling.c — the figures over every GPU of the machine, named only: strong scaling of
 * amplitude over 1, 2, 4, 8 GPUs, iqp at 30 and 31 qubits over 1 GPU and up, and the largest angle
 * states the GPUs hold together with the topology and placement. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "device_comm.h"
#include "mesh_bench.h"
#include "qdpk_cuda.h"
#include "runtime/runtime.h"
#include "world/mesh_group.h"

/* Strong scaling of amplitude complex128 2^qubits with its input on the GPUs, over 1, 2, 4, ...
 * GPUs of this process: each GPU count its own communicator, the same job, the same bits. */
void bench_scaling(int count, uint32_t qubits) {
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
 * the top bits alone and nothing is exchanged ("none"). Every GPU count gives the one-GPU bits
 * (checked on 4096 amplitudes at each end and the middle). */
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
void bench_iqp_sizes(int count) {
  for (uint32_t qubits = 30; qubits <= 31; qubits++) {
    bench_iqp(count, qubits);
  }
}

/* The largest angle states every GPU together holds (complex128 and complex64), encoded, described
 * (its shards) and read back in part against the closed form; and the topology and placement. */
void bench_capacity_max(void) {
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
