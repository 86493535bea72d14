/* basis.cu — basis encoding: 1 at the sample's index, 0 elsewhere in the span (CUDA twin of
 * qdpk_cpu_basis).
 *
 * One pass that writes every amplitude once, the 1 included: no separate fill and scatter, so the
 * state costs exactly its bytes of stores. The index was checked (qdpk_check_basis), so it
 * converts exactly: float32 widens to double and truncates as in the CPU twin.
 */
#include "qdpk_cuda_internal.cuh"

extern "C" {
int qdpk_tune_basis_per_thread = 0;
}

namespace {

using namespace qdpk;

__device__ __forceinline__ uint64_t basis_index(const float *x) {
  return (uint64_t)(double)*x;
}
__device__ __forceinline__ uint64_t basis_index(const double *x) {
  return (uint64_t)*x;
}
__device__ __forceinline__ uint64_t basis_index(const int64_t *x) {
  return (uint64_t)*x;
}

template <typename TI, typename R, int K>
__global__ void __launch_bounds__(QDPK_THREADS)
    basis_kernel(const TI *__restrict__ x, uint64_t in_stride, uint32_t /* qubits */,
                 uint64_t first, uint64_t count, uint64_t rows, uint64_t nbx,
                 typename cplx<R>::type *__restrict__ out) {
  for (uint64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    /* Every thread reads the same word: one broadcast transaction per warp. The index is made
     * local to the span; one outside it (another span's 1) wraps to a value >= count. */
    const uint64_t at = basis_index(x + r * in_stride) - first;
    typename cplx<R>::type *o = out + r * count;
    for (uint64_t bx = blockIdx.x; bx < nbx; bx += gridDim.x) {
      const uint64_t j0 = bx * (uint64_t)(QDPK_THREADS * K) + threadIdx.x;
#pragma unroll
      for (int kk = 0; kk < K; kk++) {
        const uint64_t j = j0 + (uint64_t)kk * QDPK_THREADS;
        if (j < count) {
          o[j] = make_cplx<R>(j == at ? (R)1 : (R)0, (R)0);
        }
      }
    }
  }
}

struct basis_kernels {
  template <typename TI, typename R, int K>
  static auto get() {
    return basis_kernel<TI, R, K>;
  }
};

}  // namespace

extern "C" qdp_status qdpk_basis(const struct qdpk_span *s, const void *x, qdp_dtype in,
                                 uint64_t in_stride, void *out, cudaStream_t stream) {
  if (!span_ok(s) || !(is_real_dtype(in) || in == QDP_DTYPE_INT64) || x == NULL || out == NULL) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  return run_closed_form<true>(s, in, per_thread(qdpk_tune_basis_per_thread, 1), x,
                               span_launch<basis_kernels>{s, in_stride, out, stream});
}
