// call16's pass2.cu over 2^n complex128 (n from the command line, default 26), to tell whether a
// pass of 10 stages in 64-byte runs slows with the size of the state. The second pass of a
// two-pass iqp at 26 qubits, timed on its own: a strided Walsh-Hadamard pass over 2^n complex128 whose tile is 4 consecutive values (64-byte runs) at each of 2^m positions
// 2^10 apart, m = log2(THREADS) + 2 (11 stages for 512 threads: a tile of 8192 values, one block
// per multiprocessor; 10 for 256 threads: 4096 values, two blocks). Loaded straight into the
// layout of its first four stages (register bits at tile bits 2..5), the tile bits 6..8 across
// lanes, one regrouping through shared memory for the rest, stored from there. Beside it: a copy
// of the same bytes, and the same pass without its stages (loads, the regrouping and stores only).
#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#define OK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__device__ __forceinline__ void add_sub(double2 &a, double2 &b) {
  double2 x = a, y = b;
  a = make_double2(x.x + y.x, x.y + y.y);
  b = make_double2(x.x - y.x, x.y - y.y);
}
__device__ __forceinline__ uint32_t slot(uint32_t i) { return i + (i >> 4); }
// Tile index of register k of thread t when the register bits sit at [p, p + 4).
__device__ __forceinline__ uint32_t tidx(uint32_t t, uint32_t k, uint32_t p) {
  return (t & ((1u << p) - 1)) | (k << p) | ((t >> p) << (p + 4));
}

template <int THREADS, bool STAGES>
__global__ void __launch_bounds__(THREADS, THREADS == 512 ? 1 : 2) pass2(double2 *data, uint64_t tiles) {
  constexpr uint32_t TB = (THREADS == 512 ? 9 : 8) + 4; // tile bits: 2 run bits + m strided
  constexpr uint32_t NAT = TB - 4;                       // natural layout's register bits
  extern __shared__ double2 sm[];
  const uint32_t t = threadIdx.x;
  for (uint64_t b = blockIdx.x; b < tiles; b += gridDim.x) {
    const uint64_t w = b & 255, hi = b >> 8; // bits 2..9 fastest, then those above the tile
    auto at = [&](uint32_t i) -> uint64_t {
      return (uint64_t)(i & 3) | ((uint64_t)(i >> 2) << 10) | (w << 2) | (hi << (10 + TB - 2));
    };
    double2 r[16];
    const uint64_t first = at(tidx(t, 0, 2)), natural = at(tidx(t, 0, NAT));
#pragma unroll
    for (uint32_t k = 0; k < 16; k++) r[k] = data[first + ((uint64_t)k << 10)];
    if (STAGES) {
#pragma unroll
      for (uint32_t rb = 0; rb < 4; rb++)
#pragma unroll
        for (uint32_t k = 0; k < 16; k++)
          if (!(k & (1u << rb))) add_sub(r[k], r[k | (1u << rb)]);
      // tile bits 6, 7, 8: thread bits 2, 3, 4 (lanes)
#pragma unroll
      for (uint32_t lb = 2; lb < 5; lb++) {
        const bool upper = (t >> lb) & 1;
#pragma unroll
        for (uint32_t k = 0; k < 16; k++) {
          double2 o;
          o.x = __shfl_xor_sync(0xffffffffu, r[k].x, 1u << lb);
          o.y = __shfl_xor_sync(0xffffffffu, r[k].y, 1u << lb);
          r[k].x = upper ? o.x - r[k].x : r[k].x + o.x;
          r[k].y = upper ? o.y - r[k].y : r[k].y + o.y;
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (uint32_t k = 0; k < 16; k++) sm[slot(tidx(t, k, 2))] = r[k];
    __syncthreads();
#pragma unroll
    for (uint32_t k = 0; k < 16; k++) r[k] = sm[slot(tidx(t, k, NAT))];
    if (STAGES) { // tile bits 9 .. TB-1 in register bits (9 - NAT) .. 3
#pragma unroll
      for (uint32_t rb = 9 - NAT; rb < 4; rb++)
#pragma unroll
        for (uint32_t k = 0; k < 16; k++)
          if (!(k & (1u << rb))) add_sub(r[k], r[k | (1u << rb)]);
    }
#pragma unroll
    for (uint32_t k = 0; k < 16; k++) data[natural + ((uint64_t)k << (NAT - 2 + 10))] = r[k];
  }
}

int main(int argc, char **argv) {
  const int lg = argc > 1 ? atoi(argv[1]) : 26;
  const uint64_t n = 1ull << lg, bytes = n * 16;
  double2 *d, *c;
  OK(cudaMalloc(&d, bytes));
  OK(cudaMalloc(&c, bytes));
  OK(cudaMemset(d, 0, bytes));
  const size_t smem512 = (8192 + 512) * 16, smem256 = (4096 + 256) * 16;
  OK(cudaFuncSetAttribute(pass2<512, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem512));
  OK(cudaFuncSetAttribute(pass2<512, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem512));
  OK(cudaFuncSetAttribute(pass2<256, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem256));
  OK(cudaFuncSetAttribute(pass2<256, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem256));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const char *names[] = {"copy", "m11_8192_stages", "m11_8192_moves_only", "m10_4096_stages",
                         "m10_4096_moves_only"};
  double copy_ms = 0;
  for (int round = 0; round < 2; round++) {
    for (int m = 0; m < 5; m++) {
      std::vector<float> ts;
      for (int rep = 0; rep < 8; rep++) {
        cudaEventRecord(e0);
        switch (m) {
        case 0: cudaMemcpyAsync(c, d, bytes, cudaMemcpyDeviceToDevice); break;
        case 1: pass2<512, true><<<n / 8192, 512, smem512>>>(d, n / 8192); break;
        case 2: pass2<512, false><<<n / 8192, 512, smem512>>>(d, n / 8192); break;
        case 3: pass2<256, true><<<n / 4096, 256, smem256>>>(d, n / 4096); break;
        case 4: pass2<256, false><<<n / 4096, 256, smem256>>>(d, n / 4096); break;
        }
        cudaEventRecord(e1);
        OK(cudaEventSynchronize(e1));
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (rep) ts.push_back(ms);
      }
      OK(cudaGetLastError());
      std::sort(ts.begin(), ts.end());
      double ms = ts[ts.size() / 2];
      if (m == 0) copy_ms = ms;
      printf("n=%d round=%d %-20s ms=%.4f of_copy=%.3f\n", lg, round, names[m], ms, copy_ms / ms);
    }
  }
  return 0;
}
