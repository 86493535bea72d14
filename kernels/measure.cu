/* measure.cu — measurements of a window of a state on the GPU (CUDA twin of qdpk_cpu_measure, in
 * its own fixed order; and qdpk_abs2).
 *
 * One block per (leaf, row) takes the leaf's amplitudes into shared memory and writes the leaf's
 * values: a Pauli string's sum as each thread's strided run then a pairwise tree across the
 * threads; an outcome's probability as the sum of the leaf's indices that carry it (enumerated
 * from the outcome's bits, so each amplitude is read once), by the whole block in the same way for
 * a few outcomes, by one thread each in ascending order for many. Passes of
 * pairwise sums then combine the leaves along the tree. Every value is a function of its inputs
 * and this fixed order: the same bits however the window's memory came to hold them.
 */
#include "qdpk_cuda_internal.cuh"

namespace {

using namespace qdpk;

constexpr uint32_t LEAF = QDPK_MEASURE_LEAF;
constexpr uint32_t PER = LEAF / QDPK_THREADS; /* amplitudes per thread in a full leaf */
/* Outcomes up to this many are summed by the whole block, one after the other. */
constexpr uint32_t COOPERATIVE_OUTCOMES = 32;

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

/* The kernel's view of a measurement (device arrays). */
struct spec {
  int kind;
  uint32_t nq, cols;
  const uint32_t *qubits; /* [nq] */
  uint64_t xl, xmask;     /* the X mask below the window, and all of it */
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

/* The pairwise tree of the block's values v[t] (QDPK_THREADS of them, in shared memory): v[0]. */
__device__ __forceinline__ void block_tree(double *v) {
  for (uint32_t step = 1; step < QDPK_THREADS; step *= 2) {
    __syncthreads();
    uint32_t t = threadIdx.x;
    if ((t & (2 * step - 1)) == 0 && t + step < QDPK_THREADS) {
      v[t] = v[t] + v[t + step];
    }
  }
  __syncthreads();
}

template <typename R>
__global__ void __launch_bounds__(QDPK_THREADS)
    leaf_kernel(spec s, const typename cplx<R>::type *__restrict__ x, uint64_t ld,
                const typename cplx<R>::type *__restrict__ partner, uint64_t pld, uint64_t rows,
                uint64_t first, uint64_t lsize, uint64_t leaves, double *__restrict__ parts) {
  __shared__ double sm[LEAF + QDPK_THREADS]; /* the leaf's |x|^2, then the threads' sums */
  const uint32_t t = threadIdx.x;
  for (uint64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (uint64_t l = blockIdx.x; l < leaves; l += gridDim.x) {
      const uint64_t lo = l * lsize;
      const typename cplx<R>::type *xr = x + r * ld, *pr = partner + r * pld;
      double *out = parts + (l * rows + r) * s.cols;
      if (s.kind == QDPK_MEASURE_PAULI) {
        double2 v[PER], p[PER];
        uint32_t n = 0;
        for (uint64_t j = lo + t; j < lo + lsize; j += QDPK_THREADS, n++) {
          v[n] = load<R>(xr, j);
          p[n] = load<R>(pr, j ^ s.xl);
        }
        for (uint32_t c = 0; c < s.cols; c++) {
          double acc = 0;
          uint32_t k = 0;
          for (uint64_t j = lo + t; j < lo + lsize; j += QDPK_THREADS, k++) {
            double tr = p[k].x * v[k].x + p[k].y * v[k].y, ti = p[k].x * v[k].y - p[k].y * v[k].x;
            double w = phase_re(s.ny[c], tr, ti);
            acc = acc + (__popcll((first + j) & s.zmask[c]) & 1 ? -w : w);
          }
          __syncthreads();
          sm[t] = acc;
          block_tree(sm);
          if (t == 0) {
            out[c] = sm[0];
          }
        }
        continue;
      }
      /* Probabilities: the leaf's |x|^2, then each outcome's indices in ascending order. */
      __syncthreads();
      for (uint64_t j = t; j < lsize; j += QDPK_THREADS) {
        double2 v = load<R>(xr, lo + j);
        sm[j] = v.x * v.x + v.y * v.y;
      }
      __syncthreads();
      const uint64_t base = first + lo;
      uint64_t qin = 0, qval_hi_mask = 0;
      for (uint32_t q = 0; q < s.nq; q++) {
        uint64_t bit = (uint64_t)1 << s.qubits[q];
        if (bit < lsize) {
          qin |= bit;
        } else {
          qval_hi_mask |= (uint64_t)1 << q;
        }
      }
      const uint64_t free = (lsize - 1) & ~qin;
      const uint64_t members = (uint64_t)1 << __popcll(free);
      /* Few outcomes: the block sums each one's members, a strided run per thread then the
       * tree across threads; many: a thread per outcome, in ascending order. */
      const bool together = s.cols <= COOPERATIVE_OUTCOMES;
      for (uint32_t c0 = together ? 0 : t; c0 < s.cols; c0 += together ? 1 : QDPK_THREADS) {
        bool here = true; /* outcome c0's bits above the leaf are the leaf's own */
        uint64_t fixed = 0;
        for (uint32_t q = 0; q < s.nq; q++) {
          uint64_t want = (c0 >> q) & 1u, pos = s.qubits[q];
          if ((qval_hi_mask >> q) & 1u) {
            here = here && ((base >> pos) & 1u) == want;
          } else {
            fixed |= want << pos;
          }
        }
        double acc = 0;
        for (uint64_t i = together ? t : 0; here && i < members; i += together ? QDPK_THREADS : 1) {
          acc = acc + sm[fixed | deposit(i, free)];
        }
        if (!together) {
          out[c0] = acc;
          continue;
        }
        __syncthreads();
        sm[LEAF + t] = acc;
        block_tree(sm + LEAF);
        if (t == 0) {
          out[c0] = sm[LEAF];
        }
      }
    }
  }
}

/* One level of the tree over the leaves: parts[i] += parts[i + step] for i a multiple of 2 step,
 * each part `width` doubles. */
__global__ void __launch_bounds__(QDPK_THREADS)
    tree_kernel(double *__restrict__ parts, uint64_t leaves, uint64_t step, uint64_t width) {
  const uint64_t pairs = (leaves + 2 * step - 1) / (2 * step);
  const uint64_t n = pairs * width;
  for (uint64_t i = blockIdx.x * (uint64_t)QDPK_THREADS + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * QDPK_THREADS) {
    const uint64_t left = (i / width) * 2 * step, k = i % width;
    if (left + step < leaves) {
      parts[left * width + k] = parts[left * width + k] + parts[(left + step) * width + k];
    }
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

}  // namespace

extern "C" size_t qdpk_measure_scratch_bytes(uint64_t len, uint64_t rows, uint32_t cols) {
  uint64_t leaves = len < LEAF ? 1 : len / LEAF;
  return (size_t)(leaves * rows * cols * sizeof(double));
}

extern "C" qdp_status qdpk_measure(const struct qdpk_measure *m, const uint32_t *qubits_dev,
                                   const uint64_t *zmask_dev, const uint32_t *ny_dev,
                                   const void *x, uint64_t ld, const void *partner, uint64_t pld,
                                   uint64_t rows, uint64_t first, uint64_t len, double *scratch,
                                   cudaStream_t stream) {
  if (!m || !is_out_dtype(m->dt) || !x || !scratch || len == 0 || (len & (len - 1)) != 0) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  const uint64_t lsize = len < LEAF ? len : LEAF;
  const uint64_t leaves = len / lsize;
  spec s = {m->kind, m->nq, m->cols, qubits_dev, m->xmask & (len - 1), m->xmask, zmask_dev,
            ny_dev};
  dim3 grid(grid_x(leaves), grid_y(rows));
  if (m->dt == QDP_DTYPE_COMPLEX64) {
    leaf_kernel<float><<<grid, QDPK_THREADS, 0, stream>>>(
        s, static_cast<const float2 *>(x), ld,
        static_cast<const float2 *>(partner ? partner : x), partner ? pld : ld, rows, first,
        lsize, leaves, scratch);
  } else {
    leaf_kernel<double><<<grid, QDPK_THREADS, 0, stream>>>(
        s, static_cast<const double2 *>(x), ld,
        static_cast<const double2 *>(partner ? partner : x), partner ? pld : ld, rows, first,
        lsize, leaves, scratch);
  }
  if (launched() != QDP_OK) {
    return QDP_ERR_CUDA;
  }
  const uint64_t width = rows * m->cols;
  for (uint64_t step = 1; step < leaves; step *= 2) {
    const uint64_t pairs = (leaves + 2 * step - 1) / (2 * step);
    tree_kernel<<<grid_x(blocks_for(pairs * width, 1)), QDPK_THREADS, 0, stream>>>(scratch, leaves,
                                                                                 step, width);
    if (launched() != QDP_OK) {
      return QDP_ERR_CUDA;
    }
  }
  return QDP_OK;
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
