/* mesh_bench_ranks.c — `mpirun -n R mesh_bench ranks`: one GPU per process, the norm over NCCL
 * across the processes. Each rank drives the GPU of its local index on its node, joins a NCCL
 * group whose unique id rank 0 broadcasts over MPI (never a device pointer through MPI), and runs
 * its 1/R of amplitude complex128 2^31. Baseline in the same run: rank 0 alone with the whole
 * state on its GPU. Times are the slowest rank's, median of REPS. Built with MPI only. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <mpi.h>

#include "device_comm.h"
#include "mesh_bench.h"
#include "qdpk_cuda.h"

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

int bench_ranks(int argc, char **argv, uint32_t qubits) {
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
        memcmp(&norm, &base_norm, 8) == 0 ? "yes" : "NO", size, (median(tb, REPS) - given) * 1e3,
        bare_blocking);
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
