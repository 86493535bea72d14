/* gram.cu — the kernel matrix's element-wise passes on the GPU (CUDA twins of qdpk_cpu_gram_add
 * and qdpk_cpu_gram_finish; the block products themselves are cuBLAS's, runtime/cuda_gram.c).
 *
 * The products arrive conjugated (cuBLAS computes B^H A in its column-major order, which is
 * conj(A^H B) read row-major), so finish takes the conjugate back for the overlaps; |g|^2 is the
 * same either way. Each value depends only on its own entry: any grid gives the same bits.
 */
#include "qdpk_cuda_internal.cuh"

namespace {

using namespace qdpk;

template <typename R>
__global__ void __launch_bounds__(QDPK_THREADS)
    gram_add_kernel(R *__restrict__ g, const R *__restrict__ h, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)QDPK_THREADS + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * QDPK_THREADS) {
    g[i] = g[i] + h[i];
  }
}

template <typename R>
__global__ void __launch_bounds__(QDPK_THREADS)
    gram_finish_kernel(const typename cplx<R>::type *__restrict__ g, uint64_t rows, uint64_t cols,
                       int overlaps, int upper, void *__restrict__ out) {
  const uint64_t n = rows * cols;
  for (uint64_t i = blockIdx.x * (uint64_t)QDPK_THREADS + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * QDPK_THREADS) {
    const uint64_t r = i / cols, c = i % cols;
    if (upper && c < r) {
      continue;
    }
    const typename cplx<R>::type v = g[i];
    if (overlaps) {
      static_cast<typename cplx<R>::type *>(out)[i] = make_cplx<R>(v.x, -v.y);
    } else {
      static_cast<R *>(out)[i] = v.x * v.x + v.y * v.y; /* no contraction: -fmad=false */
    }
  }
}

}  // namespace

extern "C" qdp_status qdpk_gram_add(void *g, const void *h, uint64_t n, qdp_dtype dt,
                                    cudaStream_t stream) {
  if (!is_out_dtype(dt) || !g || !h) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  uint64_t scalars = 2 * n;
  unsigned grid = grid_x(blocks_for(scalars, 4));
  if (grid == 0) {
    return QDP_OK;
  }
  if (dt == QDP_DTYPE_COMPLEX64) {
    gram_add_kernel<float><<<grid, QDPK_THREADS, 0, stream>>>(static_cast<float *>(g),
                                                              static_cast<const float *>(h), scalars);
  } else {
    gram_add_kernel<double><<<grid, QDPK_THREADS, 0, stream>>>(
        static_cast<double *>(g), static_cast<const double *>(h), scalars);
  }
  return launched();
}

extern "C" qdp_status qdpk_gram_finish(const void *g, uint64_t rows, uint64_t cols, qdp_dtype dt,
                                       int overlaps, int upper, void *out, cudaStream_t stream) {
  if (!is_out_dtype(dt) || !g || !out) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  unsigned grid = grid_x(blocks_for(rows * cols, 4));
  if (grid == 0) {
    return QDP_OK;
  }
  if (dt == QDP_DTYPE_COMPLEX64) {
    gram_finish_kernel<float><<<grid, QDPK_THREADS, 0, stream>>>(
        static_cast<const cplx<float>::type *>(g), rows, cols, overlaps, upper, out);
  } else {
    gram_finish_kernel<double><<<grid, QDPK_THREADS, 0, stream>>>(
        static_cast<const cplx<double>::type *>(g), rows, cols, overlaps, upper, out);
  }
  return launched();
}
