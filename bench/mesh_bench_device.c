/* mesh_bench_device.c — the two-GPU figures on inputs already on the GPUs, each beside its one-GPU
 * baseline: amplitude (the kernels with the norm over NCCL, and without the collective), a bare
 * collective, batch (samples split over the GPUs), and gather (a state's two halves on GPU 0
 * against the one-way peer copy bandwidth). */
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "device_comm.h"
#include "mesh_bench.h"
#include "qdpk_cuda.h"

void bench_amplitude(struct device_comm *comm) {
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

void bench_collective(struct device_comm *comm) {
  struct gpu g[2];
  gpu_setup(&g[0], 0, 1, 1, 1);
  gpu_setup(&g[1], 1, 1, 1, 1);
  printf("mesh_bench collective allgather_one_double_us=%.1f nccl=%d\n",
         time_gather_one(g, 2, comm), device_comm_nccl_version());
  fflush(stdout);
  gpu_teardown(&g[0]);
  gpu_teardown(&g[1]);
}

void bench_batch(struct device_comm *comm) {
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

void bench_gather(void) {
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
