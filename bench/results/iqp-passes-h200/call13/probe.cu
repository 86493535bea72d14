// Store-pattern probe for a two-pass iqp at 26 qubits: 2^26 complex128 written by tiles of 8192
// values whose indices differ in the top 14 bits (the tile's y low 12 bits fixed), against
// contiguous tiles and cudaMemset. 512 threads x 16 values, one block per multiprocessor.
#include <cstdio>
#include <cstdint>
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>
#define OK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
template <int LGR, bool CS>
__global__ void __launch_bounds__(512, 1) store_kernel(double2 *out, uint64_t tiles, double a) {
  // LGR < 0: contiguous tiles; else runs of 2^LGR values (16 B each) per line, y low fastest
  extern __shared__ double2 sm[];
  const uint32_t t = threadIdx.x;
  for (uint64_t g = blockIdx.x; g < tiles; g += gridDim.x) {
    double2 r[16];
#pragma unroll
    for (int k = 0; k < 16; k++) { r[k].x = a * (g + k); r[k].y = a * t; }
#pragma unroll
    for (int k = 0; k < 16; k++) sm[t + 512 * k + ((t + 512 * k) >> 4)] = r[k];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 16; k++) { uint32_t i = (t * 16 + k); r[k] = sm[i + (i >> 4)]; }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 16; k++) {
      const uint32_t i = t + 512 * k;
      uint64_t at;
      if (LGR < 0) {
        at = g * 8192 + i;
      } else {
        constexpr int L = LGR < 0 ? 0 : LGR;
        const uint64_t groups = 4096 >> L;
        const uint64_t ybase = (g % groups) << L, sub = g / groups;
        const uint64_t rr = i & ((1u << L) - 1), j = i >> L;
        at = (((sub << (13 - L)) | j) << 12) | (ybase + rr);
      }
      if (CS) __stcs(out + at, r[k]); else out[at] = r[k];
    }
  }
}
int main() {
  const uint64_t n = 1ull << 26, bytes = n * 16;
  double2 *out; OK(cudaMalloc(&out, bytes));
  void *cp; OK(cudaMalloc(&cp, bytes));
  int sms; OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  size_t smem = (8192 + 512) * 16;
  typedef void (*K)(double2 *, uint64_t, double);
  K ks[] = {store_kernel<-1, false>, store_kernel<0, false>, store_kernel<1, false>,
            store_kernel<2, false>, store_kernel<3, false>, store_kernel<0, true>, store_kernel<1, true>};
  const char *kn[] = {"contiguous", "runs16B", "runs32B", "runs64B", "runs128B", "runs16B_cs", "runs32B_cs"};
  for (K k : ks) OK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int round = 0; round < 2; round++) {
    for (int m = 0; m < 9; m++) {
      std::vector<float> ts;
      for (int rep = 0; rep < 7; rep++) {
        cudaEventRecord(e0);
        const uint64_t tiles = n / 8192;
        if (m == 0) cudaMemsetAsync(out, rep, bytes);
        else if (m == 1) cudaMemcpyAsync(cp, out, bytes, cudaMemcpyDeviceToDevice);
        else ks[m - 2]<<<(unsigned)tiles, 512, smem>>>(out, tiles, 1.0 + rep);
        cudaEventRecord(e1); OK(cudaEventSynchronize(e1));
        float ms; cudaEventElapsedTime(&ms, e0, e1); if (rep) ts.push_back(ms);
      }
      OK(cudaGetLastError());
      std::sort(ts.begin(), ts.end());
      double ms = ts[ts.size() / 2], moved = m == 1 ? 2.0 * bytes : bytes;
      printf("round=%d %-12s ms=%.4f GBps=%.0f\n", round, m == 0 ? "memset" : m == 1 ? "copy(rw)" : kn[m - 2], ms, moved / ms / 1e6);
    }
  }
  return 0;
}
