/* wht.cu — IQP step 2: the unnormalized Walsh-Hadamard transform in place over each row, and the
 * butterfly stage that carries it across shards (CUDA twins of qdpk_cpu_wht, qdpk_cpu_butterfly).
 * Bit-identical to the CPU: every stage is (a, b) <- (a + b, a - b), stages run in ascending bit
 * order, and a stage's outputs depend only on the two values the previous stage left at the same
 * pair, so any grouping of stages into passes performs the same roundings.
 *
 * A pass loads a tile of 4096 complex values into registers and shared memory, applies several
 * consecutive stages there and writes the tile back once:
 *  - the first pass takes 4096 consecutive values (several whole rows when count < 4096) and
 *    applies stages 0..11 (or all log2(count) of them);
 *  - each later pass takes 2^cl consecutive values (cl >= 3: 128-byte runs of complex128) at
 *    each of 2^m positions 2^s apart (cl + m = 12) and applies stages s..s+m-1, m <= 9.
 * So a 2^26 row costs three passes over memory (12 + 9 + 5 stages), not 26.
 *
 * Inside a tile, thread t holds 16 values whose tile indices differ in 4 bits [p, p + 4) and
 * applies the stages of those bits in registers; between groups of 4 bits the tile goes through
 * shared memory to regroup. Index i is stored at i + i / 16 (one pad slot per 16) so that the 8
 * threads of each quarter-warp's 16-byte accesses hit 8 different bank groups for every grouping.
 */
#include "qdpk_cuda_internal.cuh"

namespace {

using namespace qdpk;

constexpr uint32_t TILE_BITS = 12;
constexpr uint32_t TILE = 1u << TILE_BITS;
constexpr uint32_t PER_THREAD = TILE / QDPK_THREADS; /* 16 values: 4 register bits */
constexpr uint32_t MAX_GLOBAL_BITS = 9;              /* so that cl = 12 - m >= 3 */
constexpr uint32_t SMEM_SLOTS = TILE + TILE / 16;

__device__ __forceinline__ uint32_t slot(uint32_t i) {
  return i + (i >> 4);
}

/* Tile index of register k of thread t when the register bits sit at [p, p + 4). */
__device__ __forceinline__ uint32_t tile_index(uint32_t t, uint32_t k, uint32_t p) {
  uint32_t low = t & ((1u << p) - 1);
  return low | (k << p) | ((t >> p) << (p + 4));
}

template <typename C>
__device__ __forceinline__ void add_sub(C &a, C &b) {
  C x = a, y = b;
  a.x = x.x + y.x;
  a.y = x.y + y.y;
  b.x = x.x - y.x;
  b.y = x.y - y.y;
}

/* Moves thread t's registers r from the register bits at [from, from + 4) to [to, to + 4) through
 * shared memory sm; the first barrier: the previous regrouping has been read by every thread. */
template <typename C>
__device__ __forceinline__ void regroup(C *sm, C (&r)[PER_THREAD], uint32_t t, uint32_t from,
                                        uint32_t to) {
  __syncthreads();
#pragma unroll
  for (uint32_t k = 0; k < PER_THREAD; k++) {
    sm[slot(tile_index(t, k, from))] = r[k];
  }
  __syncthreads();
#pragma unroll
  for (uint32_t k = 0; k < PER_THREAD; k++) {
    r[k] = sm[slot(tile_index(t, k, to))];
  }
}

template <typename R>
__global__ void __launch_bounds__(QDPK_THREADS)
    wht_tile_kernel(typename cplx<R>::type *__restrict__ data, uint64_t total, uint64_t tiles,
                    int strided, uint32_t cl, uint32_t m, uint32_t s) {
  typedef typename cplx<R>::type C;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  C *sm = reinterpret_cast<C *>(smem_raw);
  const uint32_t t = threadIdx.x;
  for (uint64_t b = blockIdx.x; b < tiles; b += gridDim.x) {
    /* Global index of tile index i (both modes are bit concatenations, see the file comment). */
    auto addr = [&](uint32_t i) -> uint64_t {
      if (!strided) {
        return b * TILE + i;
      }
      const uint64_t u = i & ((1u << cl) - 1);
      const uint64_t v = i >> cl;
      const uint64_t w = b & ((1ull << (s - cl)) - 1);
      const uint64_t hi = b >> (s - cl);
      return (hi << (m + s)) | (v << s) | (w << cl) | u;
    };
    C r[PER_THREAD];
    /* Load with the register bits at [8, 12): tile index t + 256 k, coalesced. */
#pragma unroll
    for (uint32_t k = 0; k < PER_THREAD; k++) {
      const uint64_t g = addr(t + k * QDPK_THREADS);
      if (g < total) {
        r[k] = data[g];
      } else {
        r[k].x = (R)0;
        r[k].y = (R)0;
      }
    }
    uint32_t cur = 8; /* where the register bits sit now */
    for (uint32_t pos = cl; pos < cl + m;) {
      const uint32_t p = pos < 8 ? pos : 8;
      const uint32_t end = (cl + m < p + 4) ? cl + m : p + 4;
      if (p != cur) {
        regroup(sm, r, t, cur, p);
        cur = p;
      }
      const uint32_t lo = pos - p, hi = end - p;
#pragma unroll
      for (uint32_t rb = 0; rb < 4; rb++) {
        if (rb >= lo && rb < hi) {
#pragma unroll
          for (uint32_t k = 0; k < PER_THREAD; k++) {
            if (!(k & (1u << rb))) {
              add_sub(r[k], r[k | (1u << rb)]);
            }
          }
        }
      }
      pos = end;
    }
    if (cur != 8) {
      regroup(sm, r, t, cur, 8);
    }
#pragma unroll
    for (uint32_t k = 0; k < PER_THREAD; k++) {
      const uint64_t g = addr(t + k * QDPK_THREADS);
      if (g < total) {
        data[g] = r[k];
      }
    }
    __syncthreads(); /* shared memory is rewritten by the next tile */
  }
}

template <typename C>
__global__ void __launch_bounds__(QDPK_THREADS)
    butterfly_kernel(C *__restrict__ a, C *__restrict__ b, uint64_t count) {
  for (uint64_t i = blockIdx.x * (uint64_t)QDPK_THREADS + threadIdx.x; i < count;
       i += (uint64_t)gridDim.x * QDPK_THREADS) {
    C x = a[i], y = b[i];
    add_sub(x, y);
    a[i] = x;
    b[i] = y;
  }
}

/* Raise the dynamic shared-memory limit once per device (complex128 tiles take 68 KiB, over the
 * 48 KiB default). A repeated call is harmless, so a race between threads costs nothing. */
template <typename R>
qdp_status allow_smem(size_t bytes) {
  static unsigned long long done_mask = 0; /* bit d: device d done */
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    return QDP_ERR_CUDA;
  }
  unsigned long long bit = dev < 64 ? 1ull << dev : 0;
  if (bit != 0 && (__atomic_load_n(&done_mask, __ATOMIC_ACQUIRE) & bit)) {
    return QDP_OK;
  }
  if (cudaFuncSetAttribute(wht_tile_kernel<R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)bytes) != cudaSuccess) {
    return QDP_ERR_CUDA;
  }
  __atomic_fetch_or(&done_mask, bit, __ATOMIC_RELEASE);
  return QDP_OK;
}

template <typename R>
qdp_status run_wht(void *data, uint64_t count, uint64_t rows, cudaStream_t stream) {
  typedef typename cplx<R>::type C;
  uint32_t bits = 0;
  while ((1ull << bits) < count) {
    bits++;
  }
  if (bits == 0) {
    return QDP_OK; /* one value per row: no stage */
  }
  const size_t smem = (size_t)SMEM_SLOTS * sizeof(C);
  qdp_status rc = allow_smem<R>(smem);
  if (rc != QDP_OK) {
    return rc;
  }
  const uint64_t total = rows * count;
  C *d = static_cast<C *>(data);
  /* First pass: stages 0..min(12, bits)-1 over 4096 consecutive values per block. 256 threads x 16
   * values (the register file holds a whole tile); one block per tile, folded past 2^31 - 1. */
  uint32_t m = bits < TILE_BITS ? bits : TILE_BITS;
  uint64_t tiles = (total + TILE - 1) / TILE;
  wht_tile_kernel<R><<<grid_x(tiles), QDPK_THREADS, smem, stream>>>(d, total, tiles, 0, 0, m, 0);
  if ((rc = launched()) != QDP_OK) {
    return rc;
  }
  /* Later passes: up to 9 stages each over tiles of 2^(12-m) consecutive x 2^m strided values;
   * here count >= 4096, so total is a whole number of tiles. Same block shape. */
  for (uint32_t s = m; s < bits; s += m) {
    m = bits - s < MAX_GLOBAL_BITS ? bits - s : MAX_GLOBAL_BITS;
    tiles = total / TILE;
    wht_tile_kernel<R>
        <<<grid_x(tiles), QDPK_THREADS, smem, stream>>>(d, total, tiles, 1, TILE_BITS - m, m, s);
    if ((rc = launched()) != QDP_OK) {
      return rc;
    }
  }
  return QDP_OK;
}

template <typename C>
qdp_status run_butterfly(void *a, void *b, uint64_t count, cudaStream_t stream) {
  uint64_t nbx = blocks_for(count, 1);
  /* 256 threads, one pair each (16-byte loads and stores for complex128) over a full grid; a
   * grid-stride loop only past the 2^31 - 1 block limit. */
  butterfly_kernel<C>
      <<<grid_x(nbx), QDPK_THREADS, 0, stream>>>(static_cast<C *>(a), static_cast<C *>(b), count);
  return launched();
}

}  // namespace

extern "C" qdp_status qdpk_wht(void *data, qdp_dtype out, uint64_t count, uint64_t rows,
                               cudaStream_t stream) {
  if (!is_out_dtype(out) || data == NULL || count == 0 || (count & (count - 1)) != 0) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  if (rows == 0) {
    return QDP_OK;
  }
  return out == QDP_DTYPE_COMPLEX64 ? run_wht<float>(data, count, rows, stream)
                                    : run_wht<double>(data, count, rows, stream);
}

extern "C" qdp_status qdpk_butterfly(void *a, void *b, qdp_dtype out, uint64_t count,
                                     cudaStream_t stream) {
  if (!is_out_dtype(out) || a == NULL || b == NULL) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  if (count == 0) {
    return QDP_OK;
  }
  return out == QDP_DTYPE_COMPLEX64 ? run_butterfly<float2>(a, b, count, stream)
                                    : run_butterfly<double2>(a, b, count, stream);
}
