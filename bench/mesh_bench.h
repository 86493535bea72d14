/* mesh_bench.h — what the parts of mesh_bench share: the repetitions and limits, the exits on a
 * failed CUDA or qdp call, the timing helpers, a GPU's streams and buffers for the kernel-level
 * jobs, and the runtime-level helpers (mesh_bench_util.c); and the figures, one function each,
 * that main (mesh_bench.c) runs by name: device-resident inputs over NCCL (mesh_bench_device.c),
 * through the runtime (mesh_bench_runtime.c), over every GPU of the machine (mesh_bench_scaling.c)
 * and over ranks (mesh_bench_ranks.c, built with MPI only).
 */
#ifndef QDP_BENCH_MESH_BENCH_H
#define QDP_BENCH_MESH_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "device_comm.h"
#include "qdpk_cuda.h"
#include "runtime/runtime.h"
#include "world/mesh_group.h"

#define GIB (UINT64_C(1) << 30)
#define REPS 7
#define MAXG 8 /* GPUs one process drives here */

/* Monotonic milliseconds. */
double now_ms(void);

/* The median of v[0..n) (sorts v). */
double median(double *v, int n);

/* A failed CUDA call, or a qdp call that does not return QDP_OK, prints where and exits 1. */
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

/* One GPU of a kernel-level job: its stream, the sumsq workspace, the sums, the gathered sums, the
 * norms and the norm's parts. */
struct gpu {
  int ordinal;
  cudaStream_t stream;
  void *ws;
  size_t ws_bytes;
  double *sums, *recv, *norms;
  struct qdpk_norm_part *parts;
};

/* Waits for the streams of n GPUs. */
void sync_all(struct gpu *g, int n);

/* `bytes` on GPU `ordinal`, every byte `fill`. */
void *dev_alloc(int ordinal, uint64_t bytes, unsigned char fill);

/* Enqueues the all-gather of `count` doubles from every GPU's sums into every GPU's recv. */
void gather_sums(struct gpu *g, int n, struct device_comm *comm, uint64_t count);

/* Median microseconds of a bare all-gather of one double over n GPUs, stream syncs included. */
double time_gather_one(struct gpu *g, int n, struct device_comm *comm);

/* One amplitude job over `n` GPUs: GPU i holds amplitudes [i * per, (i + 1) * per) of each of
 * `rows` samples (per = 2^qubits / n, inputs x[i] of per values per row). With gather, the norm
 * goes over the communicator (all-gather of one part per GPU, combined on each); without, each
 * GPU computes its part as well but scales by the norm already in its `norms` (the same work
 * with the collective left out). */
void amplitude_job(struct gpu *g, int n, struct device_comm *comm, void *const *x, void *const *out,
                   uint32_t qubits, uint64_t rows, qdp_dtype in, qdp_dtype outt, bool gather);

/* Median wall time of REPS runs of the job after one warm-up. */
double time_amplitude(struct gpu *g, int n, struct device_comm *comm, void *const *x,
                      void *const *out, uint32_t qubits, uint64_t rows, qdp_dtype in,
                      qdp_dtype outt, bool gather);

/* Sets up g on GPU `ordinal`: a stream, a sumsq workspace for ws_rows rows of ws_block values, and
 * room for `rows` sums and norms. */
void gpu_setup(struct gpu *g, int ordinal, uint64_t ws_block, uint64_t ws_rows, uint64_t rows);

void gpu_teardown(struct gpu *g);

/* Frees a one-GPU job's buffers (on GPU 0) and a two-GPU job's (one per GPU). */
void side_by_side_free(struct gpu *g1, void **x1, void **o1, struct gpu *g2, void **x2, void **o2);

/* The parts of n equal shards: shard k's sum of squares in column k of recv. Loaded on the
 * `local` GPUs of g (all n in one process; one per rank across processes). */
void set_parts(struct gpu *g, int local, int n, uint32_t qubits);

/* A feasible plan of one sample over m with `policy` (exits when there is none). */
struct plan *plan_for(struct runtime_mesh *m, enum plan_policy policy, qdp_encoding enc, uint32_t n,
                      uint64_t cols, qdp_dtype in, qdp_dtype out);

/* A mesh with the device group the daemon's world_start hands it. */
struct runtime_mesh *mesh_copying(const char *spec, double fraction, unsigned copy_threads,
                                  struct mesh_group **ret_group);

/* mesh_copying with the default copy threads. */
struct runtime_mesh *mesh(const char *spec, double fraction, struct mesh_group **ret_group);

/* The worst relative error of an angle state's amplitudes at `at` against the product of
 * per-qubit cos/sin (the imaginary parts must be zero). */
double angle_spot_error(struct runtime_state *st, const double *x, uint32_t q, const uint64_t *at,
                        size_t nat, int c64);

/* The figures, by the names main runs them by: collective, amplitude, batch, gather
 * (mesh_bench_device.c); host, host1, capacity, big (mesh_bench_runtime.c); scaling, iqp,
 * capacity_max (mesh_bench_scaling.c, over `count` GPUs); and ranks under mpirun, which returns
 * main's exit status (mesh_bench_ranks.c). */
void bench_collective(struct device_comm *comm);
void bench_amplitude(struct device_comm *comm);
void bench_batch(struct device_comm *comm);
void bench_gather(void);
void bench_host(uint32_t n);
void bench_host_one(void);
void bench_capacity(void);
void bench_big(void);
void bench_scaling(int count, uint32_t qubits);
void bench_iqp_sizes(int count);
void bench_capacity_max(void);
int bench_ranks(int argc, char **argv, uint32_t qubits);

#endif
