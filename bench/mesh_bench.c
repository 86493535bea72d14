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
 * kernels' cost does not depend on the values.
 *
 * This file is the command line: the names of the figures and the order main runs them in. The
 * figures are in mesh_bench_device.c, mesh_bench_runtime.c, mesh_bench_scaling.c and
 * mesh_bench_ranks.c, the helpers they share in mesh_bench_util.c (mesh_bench.h). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench_cli.h"
#include "device_comm.h"
#include "mesh_bench.h"

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
