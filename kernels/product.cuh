/* product.cuh — the kernel of the per-qubit product encodings (angle.cu, phase.cu).
 *
 * psi_b = prod_k f_k(b_k): each qubit k contributes one of two factors, picked by bit k of the
 * global index b, both made from sin x_k and cos x_k (taken once per sample and qubit, in the
 * output precision, as in the CPU twins). An encoding is a Factor<R> type: its value, its starting
 * values (low_start(n) for the low product, which carries any constant scale, and high_start()),
 * times(cs, sn, k, bit) to multiply in qubit k's factor (reading from shared memory only the value
 * it needs), and amplitude(high) for low * high.
 *
 * The product is split at bit 8 of b: a block writes 256 * K consecutive amplitudes, thread t the
 * ones K apart by 256, so every amplitude a thread writes has the same low 8 bits and the thread
 * forms their product once. The products over the high bits take only K + 1 values in a block;
 * K + 1 threads form them into shared memory. Each amplitude is then one product: the pass is bound
 * by its 16-byte (complex128) stores.
 *
 * Factors are multiplied in ascending qubit order from the starting values, and psi = low * high,
 * so a value depends on its global index and the sample only: sharded launches give the bits of
 * one launch. (The CPU twins split at bit 10 instead: the two agree to a few ulps.)
 */
#ifndef QDPK_PRODUCT_CUH
#define QDPK_PRODUCT_CUH

#include "qdpk_cuda_internal.cuh"

namespace qdpk {

constexpr uint32_t PRODUCT_LO_BITS = 8; /* log2(QDPK_THREADS) */

template <typename TI, typename R, int K, template <typename> class Factor>
__global__ void __launch_bounds__(QDPK_THREADS)
    product_kernel(const TI *__restrict__ x, uint64_t in_stride, uint32_t n, uint64_t first,
                   uint64_t count, uint64_t rows, uint64_t nbx,
                   typename cplx<R>::type *__restrict__ out) {
  constexpr uint32_t LO_BITS = PRODUCT_LO_BITS;
  __shared__ R cs[64], sn[64];
  __shared__ Factor<R> hi_prod[K + 1];
  const uint32_t t = threadIdx.x;
  const uint32_t lo_bits = n < LO_BITS ? n : LO_BITS;
  const Factor<R> low_start = Factor<R>::low_start(n);
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
        Factor<R> h = Factor<R>::high_start();
        for (uint32_t k = LO_BITS; k < n; k++) {
          h.times(cs, sn, k, (uint32_t)(hi >> (k - LO_BITS)) & 1);
        }
        hi_prod[t] = h;
      }
      const uint32_t lo = (uint32_t)((gbase + t) & (QDPK_THREADS - 1));
      Factor<R> l = low_start;
      for (uint32_t k = 0; k < lo_bits; k++) {
        l.times(cs, sn, k, (lo >> k) & 1);
      }
      const uint32_t carry = (uint32_t)(((gbase & (QDPK_THREADS - 1)) + t) >> LO_BITS);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < K; kk++) {
        const uint64_t j = j0 + t + (uint64_t)kk * QDPK_THREADS;
        if (j < count) {
          o[j] = l.amplitude(hi_prod[kk + carry]);
        }
      }
      __syncthreads(); /* hi_prod is rewritten for the next block of amplitudes */
    }
  }
}

template <template <typename> class Factor>
struct product_kernels {
  template <typename TI, typename R, int K>
  static auto get() {
    return product_kernel<TI, R, K, Factor>;
  }
};

/* The entry of a per-qubit product encoding: the arguments checked, then the span's launch with K
 * from the tuning knob (4 when unset). */
template <template <typename> class Factor>
qdp_status run_product(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                       void *out, cudaStream_t stream, int knob) {
  if (!span_ok(s) || !is_real_dtype(in) || x == NULL || out == NULL) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  return run_closed_form(s, in, per_thread(knob, 4), x,
                         span_launch<product_kernels<Factor>>{s, in_stride, out, stream});
}

}  // namespace qdpk

#endif /* QDPK_PRODUCT_CUH */
