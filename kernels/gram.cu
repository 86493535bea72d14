/* gram.cu — the kernel matrix's element-wise passes on the GPU (CUDA twins of qdpk_cpu_gram_add
 * and qdpk_cpu_gram_finish, and the real parts' copy the real products read; the block products
 * themselves are cuBLAS's, runtime/cuda_gram.c).
 *
 * Complex products arrive conjugated (cuBLAS computes B^H A in its column-major order, which is
 * conj(A^H B) read row-major), so finish takes the conjugate back for the overlaps; |g|^2 is the
 * same either way. Real products are what they are. Each value depends only on its own entry:
 * any grid gives the same bits.
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
    gram_real_kernel(const typename cplx<R>::type *__restrict__ x, uint64_t ldx, uint64_t rows,
                     uint64_t width, R *__restrict__ out, uint64_t ldo) {
  const uint64_t n = rows * width;
  for (uint64_t i = blockIdx.x * (uint64_t)QDPK_THREADS + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * QDPK_THREADS) {
    const uint64_t r = i / width, c = i % width;
    out[r * ldo + c] = x[r * ldx + c].x;
  }
}

/* One value of the matrix: |v|^2, or v itself for overlaps. */
template <typename R>
__device__ __forceinline__ void put(void *out, uint64_t at, int overlaps, R re, R im) {
  if (overlaps) {
    static_cast<typename cplx<R>::type *>(out)[at] = make_cplx<R>(re, im);
  } else {
    static_cast<R *>(out)[at] = re * re + im * im; /* no contraction: -fmad=false */
  }
}

/* Entry (r, c) of the tile is G[r][c] (from the stored conj(G), or the real G; with fill, below
 * the diagonal from (c, r)); the mirror's (c, r) is its conjugate. */
template <typename R>
__global__ void __launch_bounds__(QDPK_THREADS)
    gram_finish_kernel(const R *__restrict__ g, uint64_t rows, uint64_t cols, int real,
                       int overlaps, int fill, void *__restrict__ out, void *__restrict__ mirror) {
  const uint64_t n = rows * cols;
  for (uint64_t i = blockIdx.x * (uint64_t)QDPK_THREADS + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * QDPK_THREADS) {
    const uint64_t r = i / cols, c = i % cols;
    const bool swap = fill && c < r;
    const uint64_t at = swap ? c * cols + r : i;
    R re, im;
    if (real) {
      re = g[at];
      im = 0;
    } else { /* stored conj(G[x][y]); below a filled diagonal G[r][c] = conj(G[c][r]) */
      re = g[2 * at];
      im = swap ? g[2 * at + 1] : -g[2 * at + 1];
    }
    put<R>(out, i, overlaps, re, im);
    if (mirror) {
      put<R>(mirror, c * rows + r, overlaps, re, -im);
    }
  }
}

}  // namespace

extern "C" qdp_status qdpk_gram_real(const void *x, uint64_t ldx, uint64_t rows, uint64_t width,
                                     qdp_dtype dt, void *out, uint64_t ldo, cudaStream_t stream) {
  if (!is_out_dtype(dt) || !x || !out) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  unsigned grid = grid_x(blocks_for(rows * width, 4));
  if (grid == 0) {
    return QDP_OK;
  }
  if (dt == QDP_DTYPE_COMPLEX64) {
    gram_real_kernel<float><<<grid, QDPK_THREADS, 0, stream>>>(
        static_cast<const float2 *>(x), ldx, rows, width, static_cast<float *>(out), ldo);
  } else {
    gram_real_kernel<double><<<grid, QDPK_THREADS, 0, stream>>>(
        static_cast<const double2 *>(x), ldx, rows, width, static_cast<double *>(out), ldo);
  }
  return launched();
}

extern "C" qdp_status qdpk_gram_add(void *g, const void *h, uint64_t n, qdp_dtype dt, int real,
                                    cudaStream_t stream) {
  if (!is_out_dtype(dt) || !g || !h) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  uint64_t scalars = real ? n : 2 * n;
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
                                       int real, int overlaps, int fill, void *out, void *mirror,
                                       cudaStream_t stream) {
  if (!is_out_dtype(dt) || !g || !out) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  unsigned grid = grid_x(blocks_for(rows * cols, 4));
  if (grid == 0) {
    return QDP_OK;
  }
  if (dt == QDP_DTYPE_COMPLEX64) {
    gram_finish_kernel<float><<<grid, QDPK_THREADS, 0, stream>>>(
        static_cast<const float *>(g), rows, cols, real, overlaps, fill, out, mirror);
  } else {
    gram_finish_kernel<double><<<grid, QDPK_THREADS, 0, stream>>>(
        static_cast<const double *>(g), rows, cols, real, overlaps, fill, out, mirror);
  }
  return launched();
}
