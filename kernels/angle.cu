/* angle.cu — angle encoding, psi_b = prod_k (b_k ? sin x_k : cos x_k) (CUDA twin of
 * qdpk_cpu_angle).
 *
 * Closed form, split at bit 8 of the global index b: a block writes 256 * K consecutive amplitudes,
 * thread t the ones K apart by 256, so every amplitude a thread writes has the same low 8 bits and
 * the thread forms their product (8 factors) once. The products over the high bits take only K + 1
 * values in a block; K + 1 threads form them into shared memory. Each amplitude is then one
 * product: the pass is bound by its 16-byte (complex128) stores. sin and cos are taken once per
 * sample and qubit, in the output precision, as in the CPU twin.
 *
 * Each value is lo(b mod 256) * hi(b div 256), factors multiplied in ascending qubit order from 1:
 * it depends on the global index and the sample only, so sharded launches give the bits of one
 * launch. (The CPU twin splits at bit 10 instead: the two agree to a few ulps.)
 */
#include "qdpk_cuda_internal.cuh"

extern "C" {
int qdpk_tune_angle_per_thread = 0;
}

namespace {

using namespace qdpk;

constexpr uint32_t LO_BITS = 8; /* log2(QDPK_THREADS) */

template <typename TI, typename R, int K>
__global__ void __launch_bounds__(QDPK_THREADS)
    angle_kernel(const TI *__restrict__ x, uint64_t in_stride, uint32_t n, uint64_t first,
                 uint64_t count, uint64_t rows, uint64_t nbx,
                 typename cplx<R>::type *__restrict__ out) {
  __shared__ R cs[64], sn[64], hi_prod[K + 1];
  const uint32_t t = threadIdx.x;
  const uint32_t lo_bits = n < LO_BITS ? n : LO_BITS;
  for (uint64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    if (t < n) {
      R a = (R)x[r * in_stride + t];
      sincos_r(a, &sn[t], &cs[t]);
    }
    __syncthreads();
    typename cplx<R>::type *o = out + r * count;
    for (uint64_t bx = blockIdx.x; bx < nbx; bx += gridDim.x) {
      const uint64_t j0 = bx * (uint64_t)(QDPK_THREADS * K);
      const uint64_t gbase = first + j0;
      if (t <= (uint32_t)K) {
        const uint64_t hi = (gbase >> LO_BITS) + t;
        R h = (R)1;
        for (uint32_t k = LO_BITS; k < n; k++) {
          h = mul_rn(h, ((hi >> (k - LO_BITS)) & 1) ? sn[k] : cs[k]);
        }
        hi_prod[t] = h;
      }
      const uint32_t lo = (uint32_t)((gbase + t) & (QDPK_THREADS - 1));
      R l = (R)1;
      for (uint32_t k = 0; k < lo_bits; k++) {
        l = mul_rn(l, ((lo >> k) & 1) ? sn[k] : cs[k]);
      }
      const uint32_t carry = (uint32_t)(((gbase & (QDPK_THREADS - 1)) + t) >> LO_BITS);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < K; kk++) {
        const uint64_t j = j0 + t + (uint64_t)kk * QDPK_THREADS;
        if (j < count) {
          o[j] = make_cplx<R>(mul_rn(l, hi_prod[kk + carry]), (R)0);
        }
      }
      __syncthreads(); /* hi_prod is rewritten for the next block of amplitudes */
    }
  }
}

struct angle_kernels {
  template <typename TI, typename R, int K>
  static auto get() {
    return angle_kernel<TI, R, K>;
  }
};

}  // namespace

extern "C" qdp_status qdpk_angle(const struct qdpk_span *s, const void *x, qdp_dtype in,
                                 uint64_t in_stride, void *out, cudaStream_t stream) {
  return run_product<angle_kernels>(s, x, in, in_stride, out, stream, qdpk_tune_angle_per_thread);
}
