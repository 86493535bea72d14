/* angle.cu — angle encoding, psi_b = prod_k (b_k ? sin x_k : cos x_k) (CUDA twin of
 * qdpk_cpu_angle): a product encoding (product.cuh) whose factors are real, cos x_k for a clear
 * bit and sin x_k for a set one, each product rounded.
 */
#include "product.cuh"

extern "C" {
int qdpk_tune_angle_per_thread = 0;
}

namespace {

using namespace qdpk;

template <typename R>
struct angle_factor {
  R v;

  static __device__ __forceinline__ angle_factor low_start(uint32_t) { return {(R)1}; }
  static __device__ __forceinline__ angle_factor high_start() { return {(R)1}; }
  __device__ __forceinline__ void times(const R *cs, const R *sn, uint32_t k, uint32_t bit) {
    v = mul_rn(v, bit ? sn[k] : cs[k]);
  }
  __device__ __forceinline__ typename cplx<R>::type amplitude(const angle_factor &h) const {
    return make_cplx<R>(mul_rn(v, h.v), (R)0);
  }
};

}  // namespace

extern "C" qdp_status qdpk_angle(const struct qdpk_span *s, const void *x, qdp_dtype in,
                                 uint64_t in_stride, void *out, cudaStream_t stream) {
  return run_product<angle_factor>(s, x, in, in_stride, out, stream, qdpk_tune_angle_per_thread);
}
