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
 *  - each strided pass takes 2^cl consecutive values (runs of 64 bytes or more: cl >= 2 for
 *    complex128, 3 for complex64) at each of 2^m positions 2^s apart (cl + m = 12) and applies
 *    stages s..s+m-1, m <= 10 (9 for complex64). With m >= 4 it loads the tile straight into
 *    the layout of its first 4 stages, runs those bits up to 8 that then sit in lane bits across
 *    lanes, and regroups through shared memory once (wht_direct_kernel); loaded in the natural
 *    layout a pass of 9 stages regroups three times.
 * So a 2^26 row costs three passes over memory (12 + 7 + 7 stages), not 26. qdpk_wht_from starts
 * at a later stage (iqp.cu's fused pass has applied the first ones) and skips the consecutive
 * pass when it can (from >= 12 - the most stages of a strided pass). The tile itself (registers,
 * regrouping through shared memory) is qdpk_cuda_internal.cuh's tile_stages.
 */
#include "qdpk_cuda_internal.cuh"
#include "qdpk_tune.h"

extern "C" {
int qdpk_tune_wht_load = 0;
}

namespace {

using namespace qdpk;

/* The most stages of a strided pass: runs of 2^(12 - m) values no shorter than 64 bytes. On an
 * H200 stores in runs of 64 bytes reach 0.85 of the fill rate, 128 bytes 0.87, 32 bytes 0.61; a
 * pass of 10 stages in runs of 64 bytes costs less than two passes of 5 (docs/performance.md,
 * "IQP"). So 19 stages after iqp's first pass (31 qubits) take two passes, not three. */
template <typename R>
constexpr uint32_t max_strided_bits() {
  return sizeof(typename cplx<R>::type) == 16 ? 10 : 9;
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

/* A strided pass (as wht_tile_kernel's, total a whole number of tiles, m >= 4 so CL = 12 - m <= 8)
 * with the tile loaded straight into the layout of its first stages: register bits at
 * [CL, CL + 4), so register k of thread t holds tile index tile_index(t, k, CL). Those 4 stages
 * run in registers; the tile bits CL + 4 .. 8 after them sit in lane bits and run across lanes;
 * when CL < 8, one regrouping into the natural layout brings the bits from max(9, CL + 4) to 11
 * into registers. CL is fixed at compile time, so the shared-memory addresses of the regrouping
 * and the lane masks are constants: that took a pass of 10 stages 8 KiB apart from 0.75 to 0.80 of
 * the copy on an H200 and left the shorter passes as they were (docs/performance.md, "IQP"). */
template <typename R, uint32_t CL>
__global__ void __launch_bounds__(QDPK_THREADS)
    wht_direct_kernel(typename cplx<R>::type *__restrict__ data, uint64_t tiles, uint32_t s) {
  typedef typename cplx<R>::type C;
  constexpr uint32_t M = TILE_BITS - CL;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  C *sm = reinterpret_cast<C *>(smem_raw);
  const uint32_t t = threadIdx.x;
  const uint64_t u = t & ((1u << CL) - 1);
  for (uint64_t b = blockIdx.x; b < tiles; b += gridDim.x) {
    const uint64_t w = b & ((1ull << (s - CL)) - 1), hi = b >> (s - CL);
    /* Tile index i = u | v << CL sits at hi << (M + s) | v << s | w << CL | u */
    const uint64_t base = (hi << (M + s)) | (w << CL) | u;
    const uint64_t first = base | ((uint64_t)(t >> CL) << (s + 4)); /* v = k | (t >> CL) << 4 */
    C r[PER_THREAD];
#pragma unroll
    for (uint32_t k = 0; k < PER_THREAD; k++) {
      r[k] = data[first + ((uint64_t)k << s)];
    }
#pragma unroll
    for (uint32_t rb = 0; rb < 4; rb++) {
      tile_register_stage(r, rb);
    }
#pragma unroll
    for (uint32_t tb = CL + 4; tb < 9; tb++) {
      tile_lane_stage(r, t, tb - 4);
    }
    if constexpr (CL == 8) { /* every stage done: bits 8..11 were the register bits */
#pragma unroll
      for (uint32_t k = 0; k < PER_THREAD; k++) {
        data[first + ((uint64_t)k << s)] = r[k];
      }
    } else {
      /* The first barrier of the regrouping also keeps the previous tile's reads of shared
       * memory ahead of this tile's writes. */
      tile_regroup(sm, r, t, CL, 8);
#pragma unroll
      for (uint32_t rb = 1; rb < 4; rb++) { /* tile bits 8 + rb from max(9, CL + 4) */
        if (8 + rb >= CL + 4) {
          tile_register_stage(r, rb);
        }
      }
      /* Natural layout: tile index t + 256 k, v = (t >> CL) + k 2^(8 - CL) */
      const uint64_t natural = base | ((uint64_t)(t >> CL) << s);
#pragma unroll
      for (uint32_t k = 0; k < PER_THREAD; k++) {
        data[natural + ((uint64_t)k << (8 - CL + s))] = r[k];
      }
    }
  }
}

/* Launches wht_direct_kernel<R, CL> for the run-time cl (2..8), raising its shared-memory limit
 * once per device. */
template <typename R, uint32_t CL = 2>
qdp_status launch_direct(uint32_t cl, typename cplx<R>::type *d, uint64_t tiles, uint32_t s,
                         size_t smem, cudaStream_t stream) {
  if constexpr (CL > 8) {
    return QDP_ERR_INVALID_ARGUMENT; /* never asked: m >= 4 */
  } else {
    if (cl != CL) {
      return launch_direct<R, CL + 1>(cl, d, tiles, s, smem, stream);
    }
    static unsigned long long smem_done = 0;
    qdp_status rc = allow_smem_once(wht_direct_kernel<R, CL>, smem, &smem_done);
    if (rc != QDP_OK) {
      return rc;
    }
    wht_direct_kernel<R, CL><<<grid_x(tiles), QDPK_THREADS, smem, stream>>>(d, tiles, s);
    return launched();
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
  const bool direct = qdpk_tune_wht_load != 2;
  qdp_status rc = allow_smem_once(wht_tile_kernel<R>, smem, &smem_done);
  if (rc != QDP_OK) {
    return rc;
  }
  const uint64_t total = rows * count;
  C *d = static_cast<C *>(data);
  uint32_t s = from;
  /* A consecutive pass: stages s..min(12, bits)-1 over 4096 consecutive values per block (several
   * whole rows when count < 4096). 256 threads x 16 values (the register file holds a whole tile);
   * one block per tile, folded past 2^31 - 1. A strided pass needs cl <= s. */
  constexpr uint32_t MAX_M = max_strided_bits<R>();
  if (count <= TILE || s + MAX_M < TILE_BITS) {
    uint32_t end = bits < TILE_BITS ? bits : TILE_BITS;
    uint64_t tiles = (total + TILE - 1) / TILE;
    wht_tile_kernel<R>
        <<<grid_x(tiles), QDPK_THREADS, smem, stream>>>(d, total, tiles, 0, s, end - s, 0);
    if ((rc = launched()) != QDP_OK) {
      return rc;
    }
    s = end;
  }
  /* Strided passes: as few as take up to MAX_M stages each, the stages shared evenly among them
   * (two of 7 rather than 9 and 5: the runs of consecutive values stay longer), over tiles of
   * 2^(12-m) consecutive x 2^m strided values, m >= 12 - s so that cl <= s; here count > 4096,
   * so total is a whole number of tiles. Same block shape; the direct load unless the knob
   * (qdpk_tune.h) asks for the natural one. */
  for (uint32_t m = 0; s < bits; s += m) {
    const uint32_t left = bits - s, passes = (left + MAX_M - 1) / MAX_M;
    m = (left + passes - 1) / passes;
    m = m + s < TILE_BITS ? TILE_BITS - s : m;
    m = m < left ? m : left;
    uint64_t tiles = total / TILE;
    if (direct && m >= 4) { /* cl <= 8: the register bits fit the tile */
      rc = launch_direct<R>(TILE_BITS - m, d, tiles, s, smem, stream);
    } else {
      wht_tile_kernel<R>
          <<<grid_x(tiles), QDPK_THREADS, smem, stream>>>(d, total, tiles, 1, TILE_BITS - m, m, s);
      rc = launched();
    }
    if (rc != QDP_OK) {
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
