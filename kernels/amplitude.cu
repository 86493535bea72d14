/* amplitude.cu — amplitude pass 2: out[r][j] = x[r][j] / sqrt(sumsq[r]) for j < len, 0 past it
 * (CUDA twin of qdpk_cpu_amplitude).
 *
 * One fused pass: each value is read once, converted to the output precision, scaled and written
 * with its zero imaginary part; the padding is written by the same pass. It moves 8 + 16 bytes per
 * complex128 amplitude from float64 input (4 + 8 for complex64 from float32), which is all the
 * pass must move. As the CPU twin does, the reciprocal 1 / sqrt(sum) is taken once per row in the
 * output precision (correctly rounded division and square root: no fast-math), and every value is
 * one rounded product.
 *
 * Blocks run in reverse index order: pass 1 (sumsq) read the input front to back, so its tail is
 * what the L2 cache still holds when this pass starts.
 *
 * Rows with scale exponents (the norm's fallback) multiply each value by 2^e in the input type
 * (ldexp, as the CPU twin) before the conversion; a launch given exponents runs kernels of its own
 * (SCALED), so the fast path's kernels are unchanged.
 */
#include "qdpk_cuda_internal.cuh"

extern "C" {
int qdpk_tune_amplitude_per_thread = 0;
int qdpk_tune_amplitude_forward = 0;
int qdpk_tune_amplitude_streaming = 0;
}

namespace {

using namespace qdpk;

__device__ __forceinline__ float inv_sqrt_rn(double s, float) {
  return 1.0f / sqrtf((float)s);
}
__device__ __forceinline__ double inv_sqrt_rn(double s, double) {
  return 1.0 / sqrt(s);
}

/* K amplitudes per thread, 256 apart (complex128: 16-byte stores, coalesced). Measured on an H200:
 * one amplitude per thread over a full grid moved 4.19 TB/s, where grid-stride loops over few
 * blocks moved 2.2-3.9 TB/s; K > 1 keeps a full grid and puts K loads in flight per thread. */
template <typename TI, typename R, int K, bool SCALED>
__global__ void __launch_bounds__(QDPK_THREADS)
    amplitude1_kernel(const TI *__restrict__ x, uint64_t in_stride, uint64_t len,
                      const double *__restrict__ sumsq, const int32_t *__restrict__ scales,
                      typename cplx<R>::type *__restrict__ out, uint64_t count, uint64_t rows,
                      uint64_t nbx, int reverse, int stream) {
  __shared__ R inv_s;
  for (uint64_t ry = blockIdx.y; ry < rows; ry += gridDim.y) {
    const uint64_t r = reverse ? rows - 1 - ry : ry;
    const TI *xr = x + r * in_stride;
    const int e = SCALED ? scales[r] : 0;
    typename cplx<R>::type *o = out + r * count;
    R inv = (R)0;
    for (uint64_t bx = blockIdx.x; bx < nbx; bx += gridDim.x) {
      const uint64_t b = reverse ? nbx - 1 - bx : bx;
      const uint64_t j0 = b * (uint64_t)(QDPK_THREADS * K) + threadIdx.x;
      /* The loads are issued before the row's scale is known, so their latency and the scale's
       * (a division and a square root on one thread) overlap. */
      TI raw[K];
#pragma unroll
      for (int k = 0; k < K; k++) {
        const uint64_t j = j0 + (uint64_t)k * QDPK_THREADS;
        raw[k] = j < len ? (stream ? __ldcs(xr + j) : xr[j]) : (TI)0;
      }
      R v[K];
#pragma unroll
      for (int k = 0; k < K; k++) {
        v[k] = (R)scaled<SCALED>(raw[k], e);
      }
      if (bx == blockIdx.x) { /* block-uniform: first pass over this row */
        if (threadIdx.x == 0) {
          inv_s = inv_sqrt_rn(sumsq[r], R());
        }
        __syncthreads();
        inv = inv_s;
      }
#pragma unroll
      for (int k = 0; k < K; k++) {
        const uint64_t j = j0 + (uint64_t)k * QDPK_THREADS;
        if (j < count) {
          const typename cplx<R>::type c = make_cplx<R>(mul_rn(v[k], inv), (R)0);
          if (stream) {
            __stcs(o + j, c);
          } else {
            o[j] = c;
          }
        }
      }
    }
    __syncthreads(); /* inv_s is rewritten for the next row */
  }
}

template <typename TI, int N>
struct in_vec;
template <>
struct in_vec<float, 2> {
  typedef float2 type;
};
template <>
struct in_vec<double, 2> {
  typedef double2 type;
};

/* Two amplitudes per step, for complex64: one 16-byte store (float4 = two complex64); K steps per
 * thread, 256 pairs apart. vin: the two inputs can be read as one vector (row starts aligned). */
template <typename TI, int K, bool SCALED>
__global__ void __launch_bounds__(QDPK_THREADS)
    amplitude2_kernel(const TI *__restrict__ x, uint64_t in_stride, uint64_t len,
                      const double *__restrict__ sumsq, const int32_t *__restrict__ scales,
                      float4 *__restrict__ out, uint64_t count, uint64_t rows, uint64_t nbx,
                      bool vin, int reverse, int stream) {
  __shared__ float inv_s;
  for (uint64_t ry = blockIdx.y; ry < rows; ry += gridDim.y) {
    const uint64_t r = reverse ? rows - 1 - ry : ry;
    const TI *xr = x + r * in_stride;
    const int e = SCALED ? scales[r] : 0;
    float4 *o = out + r * (count / 2); /* count is even on this path */
    float inv = 0.0f;
    for (uint64_t bx = blockIdx.x; bx < nbx; bx += gridDim.x) {
      const uint64_t b = reverse ? nbx - 1 - bx : bx;
      const uint64_t jp0 = b * (uint64_t)(QDPK_THREADS * K) + threadIdx.x; /* pair index */
      /* Raw loads first, conversions after: a conversion between two loads would hold the
       * second one back until the first arrives (warps issue in order). */
      typename in_vec<TI, 2>::type raw[K];
#pragma unroll
      for (int k = 0; k < K; k++) {
        const uint64_t j = 2 * (jp0 + (uint64_t)k * QDPK_THREADS);
        if (vin && j + 2 <= len) {
          const typename in_vec<TI, 2>::type *p =
              reinterpret_cast<const typename in_vec<TI, 2>::type *>(xr + j);
          raw[k] = stream ? __ldcs(p) : *p;
        } else {
          raw[k].x = j < len ? xr[j] : (TI)0;
          raw[k].y = j + 1 < len ? xr[j + 1] : (TI)0;
        }
      }
      float v0[K], v1[K];
#pragma unroll
      for (int k = 0; k < K; k++) {
        v0[k] = (float)scaled<SCALED>(raw[k].x, e);
        v1[k] = (float)scaled<SCALED>(raw[k].y, e);
      }
      if (bx == blockIdx.x) { /* as in amplitude1_kernel: the loads are already in flight */
        if (threadIdx.x == 0) {
          inv_s = inv_sqrt_rn(sumsq[r], 0.0f);
        }
        __syncthreads();
        inv = inv_s;
      }
#pragma unroll
      for (int k = 0; k < K; k++) {
        const uint64_t jp = jp0 + (uint64_t)k * QDPK_THREADS;
        if (2 * jp < count) {
          const float4 c = make_float4(__fmul_rn(v0[k], inv), 0.0f, __fmul_rn(v1[k], inv), 0.0f);
          if (stream) {
            __stcs(o + jp, c);
          } else {
            o[jp] = c;
          }
        }
      }
    }
    __syncthreads();
  }
}

/* Amplitudes (complex128) or pairs (complex64) per thread: the tuning knob when it names a built
 * variant (1, 2 or 4), else 2. Measured on an H200 over 2^30 amplitudes, pass 2 alone: complex128
 * 6.29 ms with 2 against 7.07 (1) and 6.45 (4); complex64 3.15 ms against 3.26 and 3.25. */
static int amp_per_thread(void) {
  int k = qdpk_tune_amplitude_per_thread;
  return (k == 1 || k == 4) ? k : 2;
}

template <typename TI, typename R, int K>
qdp_status launch1_k(const struct qdpk_span *s, const TI *x, uint64_t in_stride, uint64_t len,
                     const double *sumsq, const int32_t *scales, void *out, cudaStream_t stream) {
  uint64_t nbx = blocks_for(s->count, K);
  /* 256 threads, K amplitudes each (256 apart); x: the amplitudes of a row, y: rows (folded past
   * 65535). */
  dim3 grid(grid_x(nbx), grid_y(s->rows));
  auto kernel = scales ? amplitude1_kernel<TI, R, K, true> : amplitude1_kernel<TI, R, K, false>;
  kernel<<<grid, QDPK_THREADS, 0, stream>>>(
      x, in_stride, len, sumsq, scales, static_cast<typename cplx<R>::type *>(out), s->count,
      s->rows, nbx, !qdpk_tune_amplitude_forward, qdpk_tune_amplitude_streaming == 1);
  return launched();
}

template <typename TI, typename R>
qdp_status launch1(const struct qdpk_span *s, const TI *x, uint64_t in_stride, uint64_t len,
                   const double *sumsq, const int32_t *scales, void *out, cudaStream_t stream) {
  switch (amp_per_thread()) {
  case 2:
    return launch1_k<TI, R, 2>(s, x, in_stride, len, sumsq, scales, out, stream);
  case 4:
    return launch1_k<TI, R, 4>(s, x, in_stride, len, sumsq, scales, out, stream);
  default:
    return launch1_k<TI, R, 1>(s, x, in_stride, len, sumsq, scales, out, stream);
  }
}

template <typename TI, int K>
qdp_status launch_c64_k(const struct qdpk_span *s, const TI *x, uint64_t in_stride, uint64_t len,
                        const double *sumsq, const int32_t *scales, void *out,
                        cudaStream_t stream) {
  bool vin = aligned(x, 2 * sizeof(TI)) && (s->rows == 1 || in_stride % 2 == 0);
  uint64_t nbx = blocks_for(s->count / 2, K);
  /* 256 threads, K amplitude pairs (one 16-byte store each, 256 pairs apart); x: a row, y: rows
   * (folded). */
  dim3 grid(grid_x(nbx), grid_y(s->rows));
  auto kernel = scales ? amplitude2_kernel<TI, K, true> : amplitude2_kernel<TI, K, false>;
  kernel<<<grid, QDPK_THREADS, 0, stream>>>(
      x, in_stride, len, sumsq, scales, static_cast<float4 *>(out), s->count, s->rows, nbx, vin,
      !qdpk_tune_amplitude_forward, qdpk_tune_amplitude_streaming == 1);
  return launched();
}

template <typename TI>
qdp_status launch_c64(const struct qdpk_span *s, const TI *x, uint64_t in_stride, uint64_t len,
                      const double *sumsq, const int32_t *scales, void *out, cudaStream_t stream) {
  if (s->count % 2 != 0 || !aligned(out, 16)) {
    return launch1<TI, float>(s, x, in_stride, len, sumsq, scales, out, stream);
  }
  switch (amp_per_thread()) {
  case 2:
    return launch_c64_k<TI, 2>(s, x, in_stride, len, sumsq, scales, out, stream);
  case 4:
    return launch_c64_k<TI, 4>(s, x, in_stride, len, sumsq, scales, out, stream);
  default:
    return launch_c64_k<TI, 1>(s, x, in_stride, len, sumsq, scales, out, stream);
  }
}

}  // namespace

extern "C" qdp_status qdpk_amplitude(const struct qdpk_span *s, const void *x, qdp_dtype in,
                                     uint64_t in_stride, uint64_t len, const double *sumsq,
                                     const int32_t *scale_log2, void *out, cudaStream_t stream) {
  if (!span_ok(s) || !is_real_dtype(in) || sumsq == NULL || out == NULL || (len > 0 && x == NULL)) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  if (len > s->count) {
    len = s->count; /* as the CPU twin: values past the span are not this launch's */
  }
  if (s->out == QDP_DTYPE_COMPLEX64) {
    return in == QDP_DTYPE_FLOAT32
               ? launch_c64<float>(s, static_cast<const float *>(x), in_stride, len, sumsq,
                                   scale_log2, out, stream)
               : launch_c64<double>(s, static_cast<const double *>(x), in_stride, len, sumsq,
                                    scale_log2, out, stream);
  }
  return in == QDP_DTYPE_FLOAT32
             ? launch1<float, double>(s, static_cast<const float *>(x), in_stride, len, sumsq,
                                      scale_log2, out, stream)
             : launch1<double, double>(s, static_cast<const double *>(x), in_stride, len, sumsq,
                                       scale_log2, out, stream);
}
