/* phase.cu — phase encoding, psi_b = 2^(-n/2) e^{i sum_k x_k b_k} (CUDA twin of qdpk_cpu_phase).
 *
 * Written, as in the CPU twin, as the product of e^{i x_k} over the set bits of b: a product
 * encoding (product.cuh) whose factor is 1 for a clear bit and cos x_k + i sin x_k for a set one,
 * the low product starting from the 2^(-n/2) scale. Each complex product is 4 multiplies and
 * 2 adds, each rounded (no fused multiply-add, as in the CPU twin).
 */
#include "product.cuh"

extern "C" {
int qdpk_tune_phase_per_thread = 0;
}

namespace {

using namespace qdpk;

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

template <typename R>
struct phase_factor {
  R re, im;

  static __device__ __forceinline__ phase_factor low_start(uint32_t n) {
    return {phase_scale(n, R()), (R)0};
  }
  static __device__ __forceinline__ phase_factor high_start() { return {(R)1, (R)0}; }
  __device__ __forceinline__ void times(const R *cs, const R *sn, uint32_t k, uint32_t bit) {
    if (bit) {
      cmul(re, im, cs[k], sn[k]);
    }
  }
  __device__ __forceinline__ typename cplx<R>::type amplitude(const phase_factor &h) const {
    R ar = re, am = im;
    cmul(ar, am, h.re, h.im);
    return make_cplx<R>(ar, am);
  }
};

}  // namespace

extern "C" qdp_status qdpk_phase(const struct qdpk_span *s, const void *x, qdp_dtype in,
                                 uint64_t in_stride, void *out, cudaStream_t stream) {
  return run_product<phase_factor>(s, x, in, in_stride, out, stream, qdpk_tune_phase_per_thread);
}
