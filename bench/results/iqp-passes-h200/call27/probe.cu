// Call 27's probe, built against 70e5900's kernels (its knobs qdpk_tune_iqp_chunk_stages and
// qdpk_tune_iqp_chunk_lag are gone since): qdpk_iqp at n qubits unchunked, then chunked with
// passes of 6, 7 and 8 stages at lags of 2 to 16 quarters of a wave of tiles. Median of 20 (26
// qubits) or 5 (30) after two warm-ups.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "qdpk_cuda.h"
#include "qdpk_tune.h"
static double run(const qdpk_span *s, double *dx, uint64_t np, void *ws, size_t wsb, void *out, int reps) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<float> v;
  for (int i = 0; i < reps + 2; i++) {
    cudaEventRecord(a);
    if (qdpk_iqp(s, dx, QDP_DTYPE_FLOAT64, np, 1, ws, wsb, out, 0) != QDP_OK) { printf("launch failed\n"); exit(1); }
    cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); if (i >= 2) v.push_back(ms);
  }
  if (cudaGetLastError() != cudaSuccess) { printf("cuda error\n"); exit(1); }
  std::sort(v.begin(), v.end()); return v[v.size() / 2];
}
int main(int argc, char **argv) {
  unsigned n = argc > 1 ? atoi(argv[1]) : 26;
  uint64_t np = n + n * (n - 1) / 2, count = 1ull << n;
  std::vector<double> hx(np); srand(5); for (auto &x : hx) x = (rand() / (double)RAND_MAX) * 2 - 1;
  double *dx; cudaMalloc(&dx, np * 8); cudaMemcpy(dx, hx.data(), np * 8, cudaMemcpyHostToDevice);
  void *out; cudaMalloc(&out, count * 16); void *ws; size_t wsb = 16 << 20; cudaMalloc(&ws, wsb);
  qdpk_span s = {n, 0, count, 1, QDP_DTYPE_COMPLEX128};
  int reps = n >= 30 ? 5 : 20;
  printf("probe n=%u unchunked ms=%.4f\n", n, run(&s, dx, np, NULL, 0, out, reps));
  const int lags[] = {2, 3, 5, 8, 12, 16};
  for (int m = 6; m <= 8; m++) for (int l : lags) {
    qdpk_tune_iqp_chunk_stages = m; qdpk_tune_iqp_chunk_lag = l;
    if (qdpk_iqp_workspace_bytes(&s) > wsb) { printf("ws too big\n"); return 1; }
    printf("probe n=%u chunk=%d lag=%d ms=%.4f\n", n, m, l, run(&s, dx, np, ws, wsb, out, reps));
  }
  return 0;
}
