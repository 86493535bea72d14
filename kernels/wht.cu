/* wht.cu — IQP step 2: the unnormalized Walsh-Hadamard transform in place over each row, and the
 * butterfly stage that carries it across shards (CUDA twins of qdpk_cpu_wht, qdpk_cpu_butterfly).
 * Bit-identical to the CPU: every stage is (a, b) <- (a + b, a - b), stages run in ascending bit
 * order, and a stage's outputs depend only on the two values the previous stage left at the same
 * pair, so any grouping of stages into passes performs the same roundings.
 *
 * A pass loads a tile of 4096 complex values into registers and shared memory, applies several
 * consecutive stages there and writes the tile back once:
 *  - a consecutive pass takes 4096 consecutive values (several whole rows when count < 4096) and
 *    applies stages from..11 (or up to log2(count));
 *  - each strided pass takes 2^cl consecutive values (cl >= 3: 128-byte runs of complex128) at
 *    each of 2^m positions 2^s apart (cl + m = 12) and applies stages s..s+m-1, m <= 9.
 *  - a cluster pass, where the stages left number 10 to 14: a cluster of 2^c blocks (c <= 4)
 *    holds 2^(12+c) values, runs of 4 consecutive values (64 bytes of complex128) at 2^(10+c)
 *    positions. Each block applies the 10 stages of its own tile, then the blocks trade through
 *    distributed shared memory: block q takes its 1/2^c of the tile indices from every block's
 *    tile and applies the c stages across the blocks in registers. One pass where the strided
 *    passes take two, at runs 16 times shorter; chosen by qdpk_tune_wht_passes = 1 only, until
 *    measured against them.
 * So a 2^26 row costs three passes over memory (12 + 7 + 7 stages), or two (12 + 14), not 26.
 * qdpk_wht_from starts at a later stage (iqp.cu's fused pass has applied the first ones) and
 * skips the consecutive pass when it can (from >= 3). The tile itself (registers, regrouping
 * through shared memory) is qdpk_cuda_internal.cuh's tile_stages.
 */
#include <cooperative_groups.h>

#include "qdpk_cuda_internal.cuh"
#include "qdpk_tune.h"

extern "C" {
int qdpk_tune_wht_passes = 0;
}

namespace {

using namespace qdpk;

constexpr uint32_t MAX_GLOBAL_BITS = 9; /* so that cl = 12 - m >= 3 */

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
    tile_stages(sm, r, t, cl, cl + m);
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

constexpr uint32_t CLUSTER_RUN_BITS = 2;                        /* 4 consecutive values */
constexpr uint32_t CLUSTER_LOCAL_BITS = TILE_BITS - CLUSTER_RUN_BITS; /* stages of one block */
constexpr uint32_t CLUSTER_MAX_BITS = 4;                        /* 16 blocks: non-portable */

/* The cluster pass over stages s..s+10+CB-1 of every cluster tile (see the file comment); the
 * cluster's blocks hold the tile's top CB bits, block rank q at q. ctiles: cluster tiles in all,
 * folded past the grid. */
template <typename R, uint32_t CB>
__global__ void __launch_bounds__(QDPK_THREADS, 2) /* two blocks per multiprocessor */
    wht_cluster_kernel(typename cplx<R>::type *__restrict__ data, uint64_t ctiles, uint32_t s) {
  typedef typename cplx<R>::type C;
  namespace cg = cooperative_groups;
  constexpr uint32_t CS = 1u << CB, J = PER_THREAD / CS, SHARE = TILE / CS;
  constexpr uint32_t M = CLUSTER_LOCAL_BITS + CB;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  C *sm = reinterpret_cast<C *>(smem_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const uint32_t t = threadIdx.x, q = cluster.block_rank();
  const uint64_t nclusters = gridDim.x / CS;
  for (uint64_t b = blockIdx.x / CS; b < ctiles; b += nclusters) {
    /* Global index of tile index i of block rank `rank`: the run bits, then the bits below s
     * and above s + M from b, the tile's strided bits at s. */
    const uint64_t w = b & ((1ull << (s - CLUSTER_RUN_BITS)) - 1);
    const uint64_t hi = b >> (s - CLUSTER_RUN_BITS);
    auto addr = [&](uint32_t rank, uint32_t i) -> uint64_t {
      const uint64_t v = (i >> CLUSTER_RUN_BITS) | ((uint64_t)rank << CLUSTER_LOCAL_BITS);
      return (hi << (M + s)) | (v << s) | (w << CLUSTER_RUN_BITS) |
             (i & ((1u << CLUSTER_RUN_BITS) - 1));
    };
    C r[PER_THREAD];
#pragma unroll
    for (uint32_t k = 0; k < PER_THREAD; k++) {
      r[k] = data[addr(q, t + k * QDPK_THREADS)];
    }
    tile_stages(sm, r, t, CLUSTER_RUN_BITS, TILE_BITS);
    __syncthreads(); /* the last regrouping has been read */
#pragma unroll
    for (uint32_t k = 0; k < PER_THREAD; k++) {
      sm[tile_slot(t + k * QDPK_THREADS)] = r[k];
    }
    cluster.sync();
    /* v[j * CS + rank]: tile index q * SHARE + t + 256 j of block `rank`. */
    C v[PER_THREAD];
#pragma unroll
    for (uint32_t rank = 0; rank < CS; rank++) {
      const C *from = cluster.map_shared_rank(sm, rank);
#pragma unroll
      for (uint32_t j = 0; j < J; j++) {
        v[j * CS + rank] = from[tile_slot(q * SHARE + t + QDPK_THREADS * j)];
      }
    }
    /* The rank bits are v's low register bits: their stages, ascending. */
#pragma unroll
    for (uint32_t rb = 0, bit = 1; bit < CS; rb++, bit <<= 1) {
      tile_register_stage(v, rb);
    }
#pragma unroll
    for (uint32_t k = 0; k < PER_THREAD; k++) {
      data[addr(k % CS, q * SHARE + t + QDPK_THREADS * (k / CS))] = v[k];
    }
    cluster.sync(); /* every block's tile has been read before the next tile rewrites it */
  }
}

/* One cluster pass of 2^CB blocks over stages s..s+10+CB-1 of `total` values, when the device can
 * run such clusters; *ret_done says whether it ran. */
template <typename R, uint32_t CB>
qdp_status run_cluster(typename cplx<R>::type *d, uint64_t total, uint32_t s, cudaStream_t stream,
                       bool *ret_done) {
  typedef typename cplx<R>::type C;
  static unsigned long long smem_done = 0;
  auto kernel = wht_cluster_kernel<R, CB>;
  const size_t smem = (size_t)TILE_SLOTS * sizeof(C);
  *ret_done = false;
  qdp_status rc = allow_smem_once(kernel, smem, &smem_done);
  if (rc != QDP_OK) {
    return rc;
  }
  if (CB > 3 && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
                    cudaSuccess) {
    (void)cudaGetLastError();
    return QDP_OK; /* no clusters of 16 here: the strided passes */
  }
  const uint64_t cs = 1ull << CB, ctiles = total / (TILE * cs);
  const uint64_t nclusters = ctiles < QDPK_GRID_X_MAX / cs ? ctiles : QDPK_GRID_X_MAX / cs;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = (unsigned)cs;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)(nclusters * cs));
  cfg.blockDim = dim3(QDPK_THREADS);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int fits = 0;
  if (cudaOccupancyMaxActiveClusters(&fits, kernel, &cfg) != cudaSuccess || fits == 0) {
    (void)cudaGetLastError();
    return QDP_OK;
  }
  if (cudaLaunchKernelEx(&cfg, kernel, d, ctiles, s) != cudaSuccess) {
    return QDP_ERR_CUDA;
  }
  *ret_done = true;
  return launched();
}

template <typename R>
qdp_status run_cluster_pass(typename cplx<R>::type *d, uint64_t total, uint32_t s, uint32_t cb,
                            cudaStream_t stream, bool *ret_done) {
  switch (cb) {
    case 0:
      return run_cluster<R, 0>(d, total, s, stream, ret_done);
    case 1:
      return run_cluster<R, 1>(d, total, s, stream, ret_done);
    case 2:
      return run_cluster<R, 2>(d, total, s, stream, ret_done);
    case 3:
      return run_cluster<R, 3>(d, total, s, stream, ret_done);
    default:
      return run_cluster<R, 4>(d, total, s, stream, ret_done);
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

/* Stages from..log2(count)-1 of each row; the lower ones are already applied. */
template <typename R>
qdp_status run_wht(void *data, uint64_t count, uint64_t rows, uint32_t from, cudaStream_t stream) {
  typedef typename cplx<R>::type C;
  static unsigned long long smem_done = 0;
  uint32_t bits = 0;
  while ((1ull << bits) < count) {
    bits++;
  }
  if (from >= bits) {
    return QDP_OK; /* nothing left (or one value per row: no stage) */
  }
  /* complex128 tiles take 68 KiB, over the 48 KiB default */
  const size_t smem = (size_t)TILE_SLOTS * sizeof(C);
  qdp_status rc = allow_smem_once(wht_tile_kernel<R>, smem, &smem_done);
  if (rc != QDP_OK) {
    return rc;
  }
  const uint64_t total = rows * count;
  C *d = static_cast<C *>(data);
  uint32_t s = from;
  /* A consecutive pass: stages s..min(12, bits)-1 over 4096 consecutive values per block (several
   * whole rows when count < 4096). 256 threads x 16 values (the register file holds a whole tile);
   * one block per tile, folded past 2^31 - 1. A strided pass needs s >= 3 (cl <= s). */
  if (count <= TILE || s + MAX_GLOBAL_BITS < TILE_BITS) {
    uint32_t end = bits < TILE_BITS ? bits : TILE_BITS;
    uint64_t tiles = (total + TILE - 1) / TILE;
    wht_tile_kernel<R>
        <<<grid_x(tiles), QDPK_THREADS, smem, stream>>>(d, total, tiles, 0, s, end - s, 0);
    if ((rc = launched()) != QDP_OK) {
      return rc;
    }
    s = end;
  }
  /* Strided passes: as few as take up to 9 stages each, the stages shared evenly among them (two
   * of 7 rather than 9 and 5: the runs of consecutive values stay longer), over tiles of
   * 2^(12-m) consecutive x 2^m strided values, m >= 12 - s so that cl <= s; here count > 4096,
   * so total is a whole number of tiles. Same block shape. With the cluster pass (opt-in,
   * qdpk_tune.h) the last 10 to 14 stages are one cluster pass where the device runs clusters
   * that large, and the strided passes take only the stages before them. */
  const int cluster = qdpk_tune_wht_passes == 1;
  const uint32_t cluster_max = CLUSTER_LOCAL_BITS + CLUSTER_MAX_BITS;
  for (uint32_t m = 0; s < bits; s += m) {
    const uint32_t left = bits - s;
    if (cluster && left >= CLUSTER_LOCAL_BITS && left <= cluster_max && s >= CLUSTER_RUN_BITS) {
      bool done = false;
      rc = run_cluster_pass<R>(d, total, s, left - CLUSTER_LOCAL_BITS, stream, &done);
      if (rc != QDP_OK || done) {
        return rc;
      }
    }
    const uint32_t strided = cluster && left > cluster_max ? left - cluster_max : left;
    const uint32_t passes = (strided + MAX_GLOBAL_BITS - 1) / MAX_GLOBAL_BITS;
    m = (strided + passes - 1) / passes;
    m = m + s < TILE_BITS ? TILE_BITS - s : m;
    m = m < left ? m : left;
    uint64_t tiles = total / TILE;
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

extern "C" qdp_status qdpk_wht_from(void *data, qdp_dtype out, uint64_t count, uint64_t rows,
                                    uint32_t from_bit, cudaStream_t stream) {
  if (!is_out_dtype(out) || data == NULL || count == 0 || (count & (count - 1)) != 0) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  if (rows == 0) {
    return QDP_OK;
  }
  return out == QDP_DTYPE_COMPLEX64 ? run_wht<float>(data, count, rows, from_bit, stream)
                                    : run_wht<double>(data, count, rows, from_bit, stream);
}

extern "C" qdp_status qdpk_wht(void *data, qdp_dtype out, uint64_t count, uint64_t rows,
                               cudaStream_t stream) {
  return qdpk_wht_from(data, out, count, rows, 0, stream);
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
