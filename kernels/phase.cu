/* phase.cu — phase encoding, psi_b = 2^(-n/2) e^{i sum_k x_k b_k} (CUDA twin of qdpk_cpu_phase).
 *
 * Written, as in the CPU twin, as the product of e^{i x_k} over the set bits of b, so sin and cos
 * are taken once per sample and qubit (in the output precision), never per amplitude. The split is
 * angle.cu's: a block writes 256 * K consecutive amplitudes, thread t those K apart by 256, which
 * share their low 8 bits; the thread forms that low product once (with the 2^(-n/2) scale as its
 * starting value) and K + 1 threads form the high products a block needs into shared memory. Each
 * amplitude is then one complex product (4 multiplies, 2 adds, each rounded: no fused
 * multiply-add, as in the CPU twin) and one 16-byte store.
 *
 * Each value depends on its global index and the sample only, so sharded launches give the bits of
 * one launch. (The CPU twin splits at bit 10: the two agree to a few ulps.)
 */
#include "qdpk_cuda_internal.cuh"

extern "C" {
int qdpk_tune_phase_per_thread = 0;
}

namespace {

using namespace qdpk;

constexpr uint32_t LO_BITS = 8; /* log2(QDPK_THREADS) */

/* (ar + i am) * (br + i bm), each product rounded. */
template <typename R>
__device__ __forceinline__ void cmul(R &ar, R &am, R br, R bm) {
  R re = mul_rn(ar, br) - mul_rn(am, bm);
  R im = mul_rn(ar, bm) + mul_rn(am, br);
  ar = re;
  am = im;
}

/* 2^(-n/2), correctly rounded: a power of two, times sqrt(1/2) for odd n. */
__device__ __forceinline__ float phase_scale(uint32_t n, float) {
  return (n & 1) ? ldexpf(sqrtf(0.5f), -(int)(n / 2)) : ldexpf(1.0f, -(int)(n / 2));
}
__device__ __forceinline__ double phase_scale(uint32_t n, double) {
  return (n & 1) ? ldexp(sqrt(0.5), -(int)(n / 2)) : ldexp(1.0, -(int)(n / 2));
}

template <typename TI, typename R, int K>
__global__ void __launch_bounds__(QDPK_THREADS)
    phase_kernel(const TI *__restrict__ x, uint64_t in_stride, uint32_t n, uint64_t first,
                 uint64_t count, uint64_t rows, uint64_t nbx,
                 typename cplx<R>::type *__restrict__ out) {
  __shared__ R cs[64], sn[64], hr_s[K + 1], hm_s[K + 1];
  const uint32_t t = threadIdx.x;
  const uint32_t lo_bits = n < LO_BITS ? n : LO_BITS;
  const R scale = phase_scale(n, R());
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
        R hr = (R)1, hm = (R)0;
        for (uint32_t k = LO_BITS; k < n; k++) {
          if ((hi >> (k - LO_BITS)) & 1) {
            cmul(hr, hm, cs[k], sn[k]);
          }
        }
        hr_s[t] = hr;
        hm_s[t] = hm;
      }
      const uint32_t lo = (uint32_t)((gbase + t) & (QDPK_THREADS - 1));
      R lr = scale, lm = (R)0;
      for (uint32_t k = 0; k < lo_bits; k++) {
        if ((lo >> k) & 1) {
          cmul(lr, lm, cs[k], sn[k]);
        }
      }
      const uint32_t carry = (uint32_t)(((gbase & (QDPK_THREADS - 1)) + t) >> LO_BITS);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < K; kk++) {
        const uint64_t j = j0 + t + (uint64_t)kk * QDPK_THREADS;
        if (j < count) {
          R ar = lr, am = lm;
          cmul(ar, am, hr_s[kk + carry], hm_s[kk + carry]);
          o[j] = make_cplx<R>(ar, am);
        }
      }
      __syncthreads(); /* the high products are rewritten for the next block of amplitudes */
    }
  }
}

struct phase_kernels {
  template <typename TI, typename R, int K>
  static auto get() {
    return phase_kernel<TI, R, K>;
  }
};

}  // namespace

extern "C" qdp_status qdpk_phase(const struct qdpk_span *s, const void *x, qdp_dtype in,
                                 uint64_t in_stride, void *out, cudaStream_t stream) {
  return run_product<phase_kernels>(s, x, in, in_stride, out, stream, qdpk_tune_phase_per_thread);
}
