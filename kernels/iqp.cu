/* iqp.cu — IQP step 1: out = 2^-n e^{i theta(b)} (CUDA twin of qdpk_cpu_iqp_phases); step 2 is the
 * Walsh-Hadamard transform of wht.cu.
 *
 * theta(b) = sum_i d_i b_i + sum_{i<j} d_p(i,j) b_i b_j splits at bit 8 of b into a part of the low
 * bits, a part of the high bits, and the cross pairs (i low, j high):
 *   theta = theta_lo(b mod 256) + theta_hi(b div 256) + sum_{i low, b_i = 1} c_i(b div 256),
 *   c_i(h) = sum_{j high, h_j = 1} d_p(i,j).
 * As in angle.cu, a block writes 256 * K consecutive amplitudes and thread t those K apart by 256,
 * which share their low 8 bits: the thread forms theta_lo once (O(64) terms); theta_hi and the
 * eight c_i take K + 1 values per block, formed by 9 (K + 1) threads into shared memory. Each
 * amplitude then costs at most 9 additions, one sincos and one 16-byte store, instead of the
 * O(popcount^2) sum of the direct form. The coefficients live in shared memory (n + n(n-1)/2
 * values: 16 KiB of doubles at 63 qubits).
 *
 * The sum runs in another order than the CPU twin's, so values agree to rounding (a few ulps of
 * |theta|), not bit for bit; each value depends on the global index and the sample only, so
 * sharded launches give the bits of one launch.
 */
#include "qdpk_cuda_internal.cuh"

extern "C" {
int qdpk_tune_iqp_per_thread = 0;
}

namespace {

using namespace qdpk;

constexpr uint32_t LO_BITS = 8; /* log2(QDPK_THREADS) */

/* Index of d_p(i,j), i < j: pairs follow the n singles in the order (0,1)..(0,n-1),(1,2)... */
__device__ __forceinline__ uint32_t pair_index(uint32_t n, uint32_t i, uint32_t j) {
  return n + i * n - i * (i + 1) / 2 + (j - i - 1);
}

__device__ __forceinline__ float iqp_scale(uint32_t n, float) {
  return ldexpf(1.0f, -(int)n);
}
__device__ __forceinline__ double iqp_scale(uint32_t n, double) {
  return ldexp(1.0, -(int)n);
}

template <typename TI, typename R, int K>
__global__ void __launch_bounds__(QDPK_THREADS)
    iqp_kernel(const TI *__restrict__ x, uint64_t in_stride, uint32_t n, int pairs, uint64_t first,
               uint64_t count, uint64_t rows, uint64_t nbx,
               typename cplx<R>::type *__restrict__ out) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  R *d = reinterpret_cast<R *>(smem_raw);
  __shared__ R th_hi[K + 1], cross[K + 1][LO_BITS];
  const uint32_t t = threadIdx.x;
  const uint32_t lo_bits = n < LO_BITS ? n : LO_BITS;
  const uint32_t np = n + (pairs ? n * (n - 1) / 2 : 0);
  const R scale = iqp_scale(n, R());
  for (uint64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (uint32_t k = t; k < np; k += QDPK_THREADS) {
      d[k] = (R)x[r * in_stride + k];
    }
    __syncthreads();
    typename cplx<R>::type *o = out + r * count;
    for (uint64_t bx = blockIdx.x; bx < nbx; bx += gridDim.x) {
      const uint64_t j0 = bx * (uint64_t)(QDPK_THREADS * K);
      const uint64_t gbase = first + j0;
      if (t < (uint32_t)(K + 1) * (LO_BITS + 1)) {
        const uint32_t m = t / (LO_BITS + 1);
        const uint32_t which = t % (LO_BITS + 1);
        const uint64_t hi = (gbase >> LO_BITS) + m;
        R acc = (R)0;
        if (which == LO_BITS) {
          /* theta_hi: singles and pairs among the high bits. */
          for (uint32_t i = LO_BITS; i < n; i++) {
            if ((hi >> (i - LO_BITS)) & 1) {
              acc = acc + d[i];
              if (pairs) {
                for (uint32_t j = i + 1; j < n; j++) {
                  if ((hi >> (j - LO_BITS)) & 1) {
                    acc = acc + d[pair_index(n, i, j)];
                  }
                }
              }
            }
          }
          th_hi[m] = acc;
        } else {
          /* c_i: pairs of low bit i with the set high bits. */
          if (pairs && which < lo_bits) {
            for (uint32_t j = LO_BITS; j < n; j++) {
              if ((hi >> (j - LO_BITS)) & 1) {
                acc = acc + d[pair_index(n, which, j)];
              }
            }
          }
          cross[m][which] = acc;
        }
      }
      const uint32_t lo = (uint32_t)((gbase + t) & (QDPK_THREADS - 1));
      R th_lo = (R)0;
      for (uint32_t i = 0; i < lo_bits; i++) {
        if ((lo >> i) & 1) {
          th_lo = th_lo + d[i];
          if (pairs) {
            for (uint32_t j = i + 1; j < lo_bits; j++) {
              if ((lo >> j) & 1) {
                th_lo = th_lo + d[pair_index(n, i, j)];
              }
            }
          }
        }
      }
      const uint32_t carry = (uint32_t)(((gbase & (QDPK_THREADS - 1)) + t) >> LO_BITS);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < K; kk++) {
        const uint64_t j = j0 + t + (uint64_t)kk * QDPK_THREADS;
        if (j < count) {
          const uint32_t m = kk + carry;
          R th = th_lo + th_hi[m];
#pragma unroll
          for (uint32_t i = 0; i < LO_BITS; i++) {
            if ((lo >> i) & 1) {
              th = th + cross[m][i];
            }
          }
          R sv, cv;
          sincos_r(th, &sv, &cv);
          o[j] = make_cplx<R>(scale * cv, scale * sv);
        }
      }
      __syncthreads(); /* th_hi and cross are rewritten for the next block of amplitudes */
    }
    /* d is rewritten for the next row; the loop above ended on a barrier. */
  }
}

struct iqp_launch {
  const struct qdpk_span *s;
  uint64_t in_stride;
  int pairs;
  void *out;
  cudaStream_t stream;

  template <typename TI, typename R, int K>
  qdp_status run(const TI *x) const {
    uint32_t n = s->qubits;
    size_t smem = (size_t)(n + (pairs ? n * (n - 1) / 2 : 0)) * sizeof(R);
    uint64_t nbx = blocks_for(s->count, K);
    /* 256 threads (the low 8 index bits), K amplitudes each, 256 apart: coalesced 16-byte stores;
     * the coefficients in dynamic shared memory (at most 16 KiB). x: the span's amplitudes,
     * y: rows; both folded into loops past the grid limits. */
    dim3 grid(grid_x(nbx), grid_y(s->rows));
    iqp_kernel<TI, R, K>
        <<<grid, QDPK_THREADS, smem, stream>>>(x, in_stride, n, pairs, s->first, s->count, s->rows,
                                               nbx, static_cast<typename cplx<R>::type *>(out));
    return launched();
  }
};

}  // namespace

extern "C" qdp_status qdpk_iqp_phases(const struct qdpk_span *s, const void *x, qdp_dtype in,
                                      uint64_t in_stride, int pairs, void *out,
                                      cudaStream_t stream) {
  if (!span_ok(s) || !is_real_dtype(in) || x == NULL || out == NULL) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  /* 16 amplitudes per thread by default: the per-block sums (theta_hi, c_i) are amortized over
   * 4096 amplitudes. Measured on an H200 at 26 qubits: 0.48 ms against 0.87 (4) and 2.13 (1). */
  return run_closed_form(s, in, per_thread(qdpk_tune_iqp_per_thread, 16), x,
                         iqp_launch{s, in_stride, pairs != 0, out, stream});
}
