/* measure.cu — measurements of a window of a state on the GPU (CUDA twin of qdpk_cpu_measure, in
 * its own fixed order; and qdpk_abs2).
 *
 * A window's value only has to be one fixed function of the window's amplitudes (kernels/qdpk.h),
 * so the GPU takes its own leaves: one block per (leaf, row) of LEAF amplitudes, each thread
 * reading its strided run of them once and adding each amplitude to every value of the pass
 * (up to 8 strings, or up to 32 outcomes of a probability, in registers), then a fixed tree per
 * value across the block (warp shuffles, then the warps). Many outcomes take small leaves through
 * shared memory, a thread per outcome summing its indices in ascending order. A second launch sums each value's leaves, one
 * block per value in the same way. Every sum is a function of its inputs and this order: the
 * same bits however the window's memory came to hold them.
 */
#include "qdpk_cuda_internal.cuh"

namespace {

using namespace qdpk;

constexpr uint32_t LEAF = 1u << 14;            /* amplitudes of a leaf: 64 a thread */
constexpr uint32_t SMALL_LEAF = 1024;          /* many outcomes: the leaf in shared memory */
constexpr uint32_t COOPERATIVE_OUTCOMES = 32;  /* outcomes up to this many: the block sums each */
constexpr uint32_t WARPS = QDPK_THREADS / 32;

/* The kernel's view of a measurement (device arrays). */
struct spec {
  int kind;
  uint32_t nq, cols;
  const uint32_t *qubits; /* [nq] */
  uint64_t xl;            /* the X mask below the window */
  bool diag;              /* no X mask at all: <b|P|b> terms only, no partner read */
  const uint64_t *zmask;  /* [cols] */
  const uint32_t *ny;     /* [cols] */
};

template <typename R>
__device__ __forceinline__ double2 load(const typename cplx<R>::type *p, uint64_t j) {
  typename cplx<R>::type v = p[j];
  return make_double2((double)v.x, (double)v.y);
}

__device__ __forceinline__ double phase_re(uint32_t ny, double tr, double ti) {
  switch (ny & 3u) {
  case 0:
    return tr;
  case 1:
    return -ti;
  case 2:
    return -tr;
  default:
    return ti;
  }
}

/* Index i's bits deposited, lowest first, into the set bits of mask. */
__device__ __forceinline__ uint64_t deposit(uint64_t i, uint64_t mask) {
  uint64_t j = 0;
  while (mask) {
    uint64_t low = mask & (~mask + 1);
    if (i & 1u) {
      j |= low;
    }
    i >>= 1;
    mask &= mask - 1;
  }
  return j;
}

/* The block's values v (one a thread) along a fixed tree: pairs of lanes, then of warps. The
 * whole block calls it; thread 0 gets the sum. `ws` holds WARPS doubles. */
__device__ __forceinline__ double block_sum(double v, double *ws) {
  for (uint32_t off = 1; off < 32; off *= 2) {
    double o = __shfl_down_sync(0xffffffffu, v, off);
    if ((threadIdx.x & (2 * off - 1)) == 0) {
      v = v + o;
    }
  }
  __syncthreads();
  if ((threadIdx.x & 31u) == 0) {
    ws[threadIdx.x / 32] = v;
  }
  __syncthreads();
  double s = 0;
  if (threadIdx.x == 0) { /* the warps' sums, pairwise */
    double a[WARPS];
    for (uint32_t w = 0; w < WARPS; w++) {
      a[w] = ws[w];
    }
    for (uint32_t step = 1; step < WARPS; step *= 2) {
      for (uint32_t w = 0; w + step < WARPS; w += 2 * step) {
        a[w] = a[w] + a[w + step];
      }
    }
    s = a[0];
  }
  return s;
}

/* Outcome c's place in a leaf starting at index base: whether its bits above the leaf are the
 * leaf's own, and its bits below fixed into *ret_fixed. */
__device__ __forceinline__ bool outcome_here(const spec &s, uint64_t c, uint64_t base,
                                             uint64_t lsize, uint64_t *ret_fixed) {
  bool here = true;
  uint64_t fixed = 0;
  for (uint32_t q = 0; q < s.nq; q++) {
    uint64_t want = (c >> q) & 1u, pos = s.qubits[q];
    if (((uint64_t)1 << pos) >= lsize) {
      here = here && ((base >> pos) & 1u) == want;
    } else {
      fixed |= want << pos;
    }
  }
  *ret_fixed = fixed;
  return here;
}

/* A leaf's K values (K a power of two >= the columns of this pass, cols0 its first): each thread
 * reads each of its amplitudes once and adds it to every value it counts in, in the order of its
 * run; then the block's tree per value. */
template <typename R, uint32_t K>
__device__ __forceinline__ void leaf_values(const spec &s, const typename cplx<R>::type *xr,
                                            const typename cplx<R>::type *pr, uint64_t first,
                                            uint64_t lo, uint64_t lsize, uint32_t c0, double *out,
                                            uint64_t stride, double *ws) {
  const uint32_t t = threadIdx.x;
  const uint32_t n = s.cols - c0 < K ? s.cols - c0 : K;
  double acc[K];
#pragma unroll
  for (uint32_t k = 0; k < K; k++) {
    acc[k] = 0;
  }
  if (s.kind == QDPK_MEASURE_PAULI) {
    uint64_t zm[K];
    uint32_t ny[K];
#pragma unroll
    for (uint32_t k = 0; k < K; k++) {
      zm[k] = k < n ? s.zmask[c0 + k] : 0;
      ny[k] = k < n ? s.ny[c0 + k] : 0;
    }
    for (uint64_t j = t; j < lsize; j += QDPK_THREADS) {
      double2 v = load<R>(xr, j);
      double tr, ti;
      if (s.diag) {
        tr = v.x * v.x + v.y * v.y;
        ti = 0;
      } else {
        double2 p = load<R>(pr, (lo + j) ^ s.xl);
        tr = p.x * v.x + p.y * v.y;
        ti = p.x * v.y - p.y * v.x;
      }
      const uint64_t b = first + lo + j;
#pragma unroll
      for (uint32_t k = 0; k < K; k++) {
        double w = phase_re(ny[k], tr, ti);
        acc[k] = acc[k] + (__popcll(b & zm[k]) & 1 ? -w : w);
      }
    }
  } else {
    /* Probabilities: the outcome of each index from the measured qubits' bits. */
    for (uint64_t j = t; j < lsize; j += QDPK_THREADS) {
      double2 v = load<R>(xr, j);
      const double p = v.x * v.x + v.y * v.y;
      const uint64_t b = first + lo + j;
      uint32_t o = 0;
      for (uint32_t q = 0; q < s.nq; q++) {
        o |= (uint32_t)((b >> s.qubits[q]) & 1u) << q;
      }
#pragma unroll
      for (uint32_t k = 0; k < K; k++) {
        acc[k] = acc[k] + (o == c0 + k ? p : 0.0);
      }
    }
  }
#pragma unroll
  for (uint32_t k = 0; k < K; k++) {
    double sum = block_sum(acc[k], ws);
    if (t == 0 && k < n) {
      out[(c0 + k) * stride] = sum;
    }
  }
}

template <typename R, uint32_t K>
__global__ void __launch_bounds__(QDPK_THREADS)
    leaf_kernel(spec s, const typename cplx<R>::type *__restrict__ x, uint64_t ld,
                const typename cplx<R>::type *__restrict__ partner, uint64_t pld, uint64_t rows,
                uint64_t first, uint64_t lsize, uint64_t leaves, double *__restrict__ parts) {
  __shared__ double ws[WARPS];
  for (uint64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (uint64_t l = blockIdx.x; l < leaves; l += gridDim.x) {
      const uint64_t lo = l * lsize;
      /* parts: [cols][rows][leaves], so that the second launch reads each value's leaves in a
       * row */
      for (uint32_t c0 = 0; c0 < s.cols; c0 += K) {
        leaf_values<R, K>(s, x + r * ld + lo, partner + r * pld, first, lo, lsize, c0,
                          parts + r * leaves + l, rows * leaves, ws);
      }
    }
  }
}

/* Many outcomes: a small leaf's |x|^2 in shared memory, then a thread per outcome summing its
 * indices in ascending order. */
template <typename R>
__global__ void __launch_bounds__(QDPK_THREADS)
    many_kernel(spec s, const typename cplx<R>::type *__restrict__ x, uint64_t ld, uint64_t rows,
                uint64_t first, uint64_t lsize, uint64_t leaves, double *__restrict__ parts) {
  __shared__ double sm[SMALL_LEAF];
  const uint32_t t = threadIdx.x;
  for (uint64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (uint64_t l = blockIdx.x; l < leaves; l += gridDim.x) {
      const uint64_t lo = l * lsize;
      const typename cplx<R>::type *xr = x + r * ld + lo;
      __syncthreads();
      for (uint64_t j = t; j < lsize; j += QDPK_THREADS) {
        double2 v = load<R>(xr, j);
        sm[j] = v.x * v.x + v.y * v.y;
      }
      __syncthreads();
      uint64_t qin = 0;
      for (uint32_t q = 0; q < s.nq; q++) {
        uint64_t bit = (uint64_t)1 << s.qubits[q];
        qin |= bit < lsize ? bit : 0;
      }
      const uint64_t free = (lsize - 1) & ~qin;
      const uint64_t members = (uint64_t)1 << __popcll(free);
      for (uint32_t c = t; c < s.cols; c += QDPK_THREADS) {
        uint64_t fixed;
        bool here = outcome_here(s, c, first + lo, lsize, &fixed);
        double acc = 0;
        for (uint64_t i = 0; here && i < members; i++) {
          acc = acc + sm[fixed | deposit(i, free)];
        }
        parts[((uint64_t)c * rows + r) * leaves + l] = acc;
      }
    }
  }
}

/* Each value's leaves (value v = c * rows + r, a row of `leaves` parts) summed: strided runs,
 * then the block's tree; into sums[r][c]. */
__global__ void __launch_bounds__(QDPK_THREADS)
    tree_kernel(const double *__restrict__ parts, uint64_t rows, uint64_t cols, uint64_t leaves,
                double *__restrict__ sums) {
  __shared__ double ws[WARPS];
  for (uint64_t v = blockIdx.x; v < rows * cols; v += gridDim.x) {
    double acc = 0;
    for (uint64_t l = threadIdx.x; l < leaves; l += QDPK_THREADS) {
      acc = acc + parts[v * leaves + l];
    }
    double sum = block_sum(acc, ws);
    if (threadIdx.x == 0) {
      sums[(v % rows) * cols + v / rows] = sum;
    }
    __syncthreads();
  }
}

template <typename R>
__global__ void __launch_bounds__(QDPK_THREADS)
    abs2_kernel(const typename cplx<R>::type *__restrict__ x, uint64_t ld, uint64_t rows,
                uint64_t count, double *__restrict__ out) {
  const uint64_t n = rows * count;
  for (uint64_t i = blockIdx.x * (uint64_t)QDPK_THREADS + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * QDPK_THREADS) {
    double2 v = load<R>(x, (i / count) * ld + i % count);
    out[i] = v.x * v.x + v.y * v.y;
  }
}

/* The leaf launch for s: values a pass of K at a time, K the smallest power of two that holds
 * them (at most 8 strings, or COOPERATIVE_OUTCOMES outcomes, a pass); many outcomes their own. */
template <typename R>
void launch(const spec &s, bool many, const typename cplx<R>::type *x, uint64_t ld,
            const typename cplx<R>::type *p, uint64_t pld, uint64_t rows, uint64_t first,
            uint64_t lsize, uint64_t leaves, double *parts, dim3 grid, cudaStream_t stream) {
  if (many) {
    many_kernel<R><<<grid, QDPK_THREADS, 0, stream>>>(s, x, ld, rows, first, lsize, leaves, parts);
  } else if (s.cols <= 1) {
    leaf_kernel<R, 1><<<grid, QDPK_THREADS, 0, stream>>>(s, x, ld, p, pld, rows, first, lsize,
                                                         leaves, parts);
  } else if (s.cols <= 2) {
    leaf_kernel<R, 2><<<grid, QDPK_THREADS, 0, stream>>>(s, x, ld, p, pld, rows, first, lsize,
                                                         leaves, parts);
  } else if (s.cols <= 4) {
    leaf_kernel<R, 4><<<grid, QDPK_THREADS, 0, stream>>>(s, x, ld, p, pld, rows, first, lsize,
                                                         leaves, parts);
  } else if (s.cols <= 8 || s.kind == QDPK_MEASURE_PAULI) {
    leaf_kernel<R, 8><<<grid, QDPK_THREADS, 0, stream>>>(s, x, ld, p, pld, rows, first, lsize,
                                                         leaves, parts);
  } else if (s.cols <= 16) {
    leaf_kernel<R, 16><<<grid, QDPK_THREADS, 0, stream>>>(s, x, ld, p, pld, rows, first, lsize,
                                                          leaves, parts);
  } else {
    leaf_kernel<R, COOPERATIVE_OUTCOMES><<<grid, QDPK_THREADS, 0, stream>>>(
        s, x, ld, p, pld, rows, first, lsize, leaves, parts);
  }
}

uint64_t leaf_size(const struct qdpk_measure *m, uint64_t len) {
  uint64_t leaf = m->kind == QDPK_MEASURE_PROBS && m->cols > COOPERATIVE_OUTCOMES ? SMALL_LEAF
                                                                                  : LEAF;
  return len < leaf ? len : leaf;
}

}  // namespace

extern "C" size_t qdpk_measure_scratch_bytes(const struct qdpk_measure *m, uint64_t len,
                                             uint64_t rows) {
  /* The leaves' parts, then each value's sum. */
  return (size_t)((len / leaf_size(m, len) + 1) * rows * m->cols * sizeof(double));
}

extern "C" qdp_status qdpk_measure(const struct qdpk_measure *m, const uint32_t *qubits_dev,
                                   const uint64_t *zmask_dev, const uint32_t *ny_dev,
                                   const void *x, uint64_t ld, const void *partner, uint64_t pld,
                                   uint64_t rows, uint64_t first, uint64_t len, double *scratch,
                                   double **ret_values, cudaStream_t stream) {
  if (!m || !is_out_dtype(m->dt) || !x || !scratch || len == 0 || (len & (len - 1)) != 0) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  const uint64_t lsize = leaf_size(m, len);
  const uint64_t leaves = len / lsize;
  spec s = {m->kind, m->nq, m->cols, qubits_dev, m->xmask & (len - 1), m->xmask == 0, zmask_dev,
            ny_dev};
  dim3 grid(grid_x(leaves), grid_y(rows));
  bool many = m->kind == QDPK_MEASURE_PROBS && m->cols > COOPERATIVE_OUTCOMES;
  if (m->dt == QDP_DTYPE_COMPLEX64) {
    launch<float>(s, many, static_cast<const float2 *>(x), ld,
                  static_cast<const float2 *>(partner ? partner : x), partner ? pld : ld, rows,
                  first, lsize, leaves, scratch, grid, stream);
  } else {
    launch<double>(s, many, static_cast<const double2 *>(x), ld,
                   static_cast<const double2 *>(partner ? partner : x), partner ? pld : ld, rows,
                   first, lsize, leaves, scratch, grid, stream);
  }
  if (launched() != QDP_OK) {
    return QDP_ERR_CUDA;
  }
  const uint64_t values = rows * m->cols;
  double *sums = scratch + values * leaves;
  tree_kernel<<<grid_x(values), QDPK_THREADS, 0, stream>>>(scratch, rows, m->cols, leaves, sums);
  *ret_values = sums;
  return launched();
}

extern "C" qdp_status qdpk_abs2(const void *x, uint64_t ld, uint64_t rows, uint64_t count,
                                qdp_dtype dt, double *out, cudaStream_t stream) {
  if (!is_out_dtype(dt) || !x || !out) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  unsigned grid = grid_x(blocks_for(rows * count, 4));
  if (grid == 0) {
    return QDP_OK;
  }
  if (dt == QDP_DTYPE_COMPLEX64) {
    abs2_kernel<float><<<grid, QDPK_THREADS, 0, stream>>>(static_cast<const float2 *>(x), ld, rows,
                                                          count, out);
  } else {
    abs2_kernel<double><<<grid, QDPK_THREADS, 0, stream>>>(static_cast<const double2 *>(x), ld,
                                                           rows, count, out);
  }
  return launched();
}
