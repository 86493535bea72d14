/* sumsq.cu — amplitude pass 1: the pairwise sum of squares of each row, bit-identical to
 * qdpk_cpu_sumsq (kernels/cpu/sumsq.c).
 *
 * The tree is fixed by qdpk.h: T(a, b) = T(a, m) + T(m, b) over the aligned power-of-two block,
 * leaves x_i * x_i (in the accumulator precision, no fused multiply-add), zero past len. Every node
 * of that tree is computed here exactly as written, only by different hands:
 *  - a thread loads an aligned group of VEC consecutive values (one 16-byte load where alignment
 *    allows) and sums their squares as the subtree over that group;
 *  - the lanes of a segment (S <= 32 consecutive lanes, holding consecutive groups) combine with
 *    shuffles at offsets 1, 2, 4, ..., so lane l adds the subtree of lane l + off: each step joins
 *    two contiguous, equal, aligned subtrees;
 *  - a warp walks J consecutive segment-chunks, joined pairwise in registers; the WR warps of a row
 *    tile are joined pairwise through shared memory;
 *  - when a row spans several tiles, each tile's sum is a partial in the caller's workspace,
 *    and the same kernel runs again over the partials (no squaring), until one tile covers it.
 * A subtree wholly past len is +0 and adds nothing, so only tiles that overlap [0, len) run, and
 * later levels read partials past the last such tile as zero. No float atomics, no order that
 * depends on scheduling: the same input gives the same bits on any GPU, any launch.
 *
 * With per-row exponents (the norm's fallback) the first level's leaves are (x * 2^e)^2, the
 * product taken in the input type by ldexp before the conversion, as in the CPU twin. A launch
 * given exponents runs kernels of its own, so the unscaled ones are what they always were.
 */
#include "qdpk_cuda_internal.cuh"

extern "C" {
int qdpk_tune_sumsq_chunks = 0;
}

namespace {

using namespace qdpk;

/* Segment-chunks per warp (J at most JMAX, 4 or 8): 4 (or 8) independent 16-byte loads in flight
 * per thread, 64 (128) bytes, which with ~1800 resident threads is 112 KiB (224 KiB) per
 * multiprocessor in flight, over what the memory latency needs at full bandwidth. */
constexpr uint32_t WARPS = QDPK_THREADS / 32;
/* Smallest tile of a row that has more than one tile: 8 warps x 4 chunks x 32 lanes x 1 value.
 * The workspace bound rests on it (JMAX = 8 only makes tiles larger). */
constexpr uint64_t MIN_TILE = (uint64_t)WARPS * 4 * 32;

struct geom {
  uint32_t seg;    /* S: lanes per segment, a power of two <= 32 */
  uint32_t chunks; /* J: segment-chunks per warp (or per segment when S < 32) */
  uint32_t wpr;    /* WR: warps per row tile */
  uint32_t tpr;    /* threads per row tile: S * WR */
  uint32_t rpb;    /* rows per block: QDPK_THREADS / tpr */
  uint64_t tile;   /* values per row tile: tpr * J * VEC */
  uint64_t tiles;  /* tiles per row: block / tile (a power of two) */
  uint64_t used;   /* tiles that overlap [0, len), at least 1 */
};

geom make_geom(uint64_t block, uint64_t len, uint32_t vec, uint32_t jmax) {
  geom g;
  uint64_t groups = block / vec;
  if (groups < 32) {
    g.seg = (uint32_t)groups;
    g.chunks = 1;
    g.wpr = 1;
  } else {
    g.seg = 32;
    g.chunks = (uint32_t)(groups / 32 < jmax ? groups / 32 : jmax);
    uint64_t w = groups / (32ull * g.chunks);
    g.wpr = (uint32_t)(w < WARPS ? w : WARPS);
  }
  g.tpr = g.seg * g.wpr;
  g.rpb = QDPK_THREADS / g.tpr;
  g.tile = (uint64_t)g.tpr * g.chunks * vec;
  g.tiles = block / g.tile;
  g.used = (len + g.tile - 1) / g.tile;
  if (g.used == 0) {
    g.used = 1; /* an empty row still gets its (zero) sum written */
  }
  return g;
}

template <typename T, int VEC>
struct vec_of;
template <typename T>
struct vec_of<T, 1> {
  typedef T type;
};
template <>
struct vec_of<float, 2> {
  typedef float2 type;
};
template <>
struct vec_of<float, 4> {
  typedef float4 type;
};
template <>
struct vec_of<double, 2> {
  typedef double2 type;
};


template <typename A, bool SCALED, typename V>
__device__ __forceinline__ void unpack(const V &v, int e, A *out);
template <typename A, bool SCALED>
__device__ __forceinline__ void unpack(const float &v, int e, A *out) {
  out[0] = (A)scaled<SCALED>(v, e);
}
template <typename A, bool SCALED>
__device__ __forceinline__ void unpack(const double &v, int e, A *out) {
  out[0] = (A)scaled<SCALED>(v, e);
}
template <typename A, bool SCALED>
__device__ __forceinline__ void unpack(const float2 &v, int e, A *out) {
  out[0] = (A)scaled<SCALED>(v.x, e);
  out[1] = (A)scaled<SCALED>(v.y, e);
}
template <typename A, bool SCALED>
__device__ __forceinline__ void unpack(const float4 &v, int e, A *out) {
  out[0] = (A)scaled<SCALED>(v.x, e);
  out[1] = (A)scaled<SCALED>(v.y, e);
  out[2] = (A)scaled<SCALED>(v.z, e);
  out[3] = (A)scaled<SCALED>(v.w, e);
}
template <typename A, bool SCALED>
__device__ __forceinline__ void unpack(const double2 &v, int e, A *out) {
  out[0] = (A)scaled<SCALED>(v.x, e);
  out[1] = (A)scaled<SCALED>(v.y, e);
}

/* The subtree over one aligned group of VEC values (converted to the accumulator type on load),
 * squared when SQUARE. */
template <typename A, int VEC, bool SQUARE>
__device__ __forceinline__ A group_tree(A *v) {
#pragma unroll
  for (int i = 0; i < VEC; i++) {
    if (SQUARE) {
      v[i] = mul_rn(v[i], v[i]);
    }
  }
  /* Pairwise over the group: (0+1), then ((0+1)+(2+3)). */
#pragma unroll
  for (int w = 1; w < VEC; w *= 2) {
#pragma unroll
    for (int i = 0; i + w < VEC; i += 2 * w) {
      v[i] = v[i] + v[i + w];
    }
  }
  return v[0];
}

/* The same for a group starting at at that may reach past len (values there are zero) or belong
 * to no row (live false). */
template <typename TI, typename A, int VEC, bool SQUARE, bool SCALED>
__device__ __forceinline__ A group_sum(const TI *__restrict__ xr, uint64_t at, uint64_t len,
                                       bool live, int e) {
  A v[VEC];
  if (live && at + VEC <= len) {
    unpack<A, SCALED>(*reinterpret_cast<const typename vec_of<TI, VEC>::type *>(xr + at), e, v);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; i++) {
      v[i] = (live && at + i < len) ? (A)scaled<SCALED>(xr[at + i], e) : (A)0;
    }
  }
  return group_tree<A, VEC, SQUARE>(v);
}

/* At least 5 resident blocks (1280 threads): a register budget of 51 per thread, which the widest
 * variants need to keep their loads in registers (with no bound ptxas settled on 40 and spilled).
 */
template <typename TI, typename A, int VEC, bool SQUARE, bool SCALED, int JMAX>
__global__ void __launch_bounds__(QDPK_THREADS, 5)
    sumsq_kernel(const TI *__restrict__ x, uint64_t in_stride, uint64_t len, uint64_t rows, geom g,
                 const int32_t *__restrict__ scales, A *__restrict__ partials,
                 double *__restrict__ sums) {
  __shared__ A warp_sum[WARPS];
  const uint32_t t = threadIdx.x;
  const uint32_t lane = t & 31;
  const uint32_t warp = t >> 5;
  const uint32_t row_in_block = t / g.tpr;
  const uint32_t tr = t % g.tpr;
  const uint32_t seg_lane = tr % g.seg;
  const uint32_t seg_idx = tr / g.seg; /* warp within the row tile when S == 32, else 0 */
  const uint64_t row_groups = (rows + g.rpb - 1) / g.rpb;
  for (uint64_t rg = blockIdx.y; rg < row_groups; rg += gridDim.y) {
    const uint64_t r = rg * g.rpb + row_in_block;
    const bool row_ok = r < rows;
    const TI *xr = x + (row_ok ? r : 0) * in_stride;
    const int e = SCALED && row_ok ? scales[r] : 0;
    for (uint64_t p = blockIdx.x; p < g.used; p += gridDim.x) {
      const uint64_t e0 =
          p * g.tile + ((uint64_t)seg_idx * g.chunks * g.seg + seg_lane) * (uint64_t)VEC;
      A c[JMAX];
      if (row_ok && g.chunks == (uint32_t)JMAX &&
          e0 + (uint64_t)(JMAX - 1) * g.seg * VEC + VEC <= len) {
        /* Whole chunks: issue every load before any arithmetic. Warps issue in order, so a load
         * placed after a use of the previous one would wait for it; this way JMAX loads per
         * thread are in flight at once. */
        typename vec_of<TI, VEC>::type raw[JMAX];
#pragma unroll
        for (int j = 0; j < JMAX; j++) {
          raw[j] = *reinterpret_cast<const typename vec_of<TI, VEC>::type *>(
              xr + e0 + (uint64_t)j * g.seg * VEC);
        }
#pragma unroll
        for (int j = 0; j < JMAX; j++) {
          A v[VEC];
          unpack<A, SCALED>(raw[j], e, v);
          c[j] = group_tree<A, VEC, SQUARE>(v);
        }
      } else {
#pragma unroll
        for (int j = 0; j < JMAX; j++) {
          uint64_t at = e0 + (uint64_t)j * g.seg * VEC;
          c[j] = group_sum<TI, A, VEC, SQUARE, SCALED>(xr, at, len,
                                                       row_ok && (uint32_t)j < g.chunks, e);
        }
      }
      /* Every lane shuffles (the mask is the whole warp); only segment leaders keep a result. */
#pragma unroll
      for (int j = 0; j < JMAX; j++) {
        for (uint32_t off = 1; off < g.seg; off <<= 1) {
          c[j] = c[j] + __shfl_down_sync(0xffffffffu, c[j], off);
        }
      }
#pragma unroll
      for (int w = 1; w < JMAX; w *= 2) {
#pragma unroll
        for (int j = 0; j + w < JMAX; j += 2 * w) {
          if ((uint32_t)w < g.chunks) {
            c[j] = c[j] + c[j + w];
          }
        }
      }
      A sum = c[0];
      if (g.wpr > 1) {
        if (lane == 0) {
          warp_sum[warp] = sum;
        }
        __syncthreads();
        if (tr == 0) {
          A *ws = warp_sum + warp; /* this row tile's first warp */
          for (uint32_t w = 1; w < g.wpr; w <<= 1) {
            for (uint32_t i = 0; i + w < g.wpr; i += 2 * w) {
              ws[i] = ws[i] + ws[i + w];
            }
          }
          sum = ws[0];
        }
        __syncthreads(); /* the next tile rewrites warp_sum */
      }
      if (tr == 0 && row_ok) {
        if (g.tiles == 1) {
          sums[r] = (double)sum;
        } else {
          partials[r * g.tiles + p] = sum;
        }
      }
    }
  }
}

/* Workspace layout: partials of the odd levels (1, 3, ...) at offset 0, of the even levels after
 * them. Level 1 has at most block / MIN_TILE partials per row, level 2 at most that / MIN_TILE, and
 * level 3 fewer than level 1, so two regions suffice. Sized for double partials. */
void ws_layout(uint64_t block, uint64_t rows, size_t *ret_off_b, size_t *ret_total) {
  uint64_t p1 = block > MIN_TILE ? block / MIN_TILE : 0;
  uint64_t p2 = p1 > MIN_TILE ? p1 / MIN_TILE : 0;
  size_t a = (size_t)(rows * p1 * sizeof(double));
  size_t off_b = (a + 255) & ~(size_t)255;
  *ret_off_b = off_b;
  *ret_total = p1 == 0 ? 0 : off_b + (size_t)(rows * p2 * sizeof(double));
}

template <typename TI, typename A, bool SQUARE, bool SCALED, int JMAX>
void launch_vec(uint32_t vec, dim3 grid, const TI *x, uint64_t in_stride, uint64_t len,
                uint64_t rows, const geom &g, const int32_t *scales, A *partials, double *sums,
                cudaStream_t stream) {
  switch (vec) {
  case 4:
    sumsq_kernel<TI, A, (sizeof(TI) == 4 ? 4 : 1), SQUARE, SCALED, JMAX>
        <<<grid, QDPK_THREADS, 0, stream>>>(x, in_stride, len, rows, g, scales, partials, sums);
    break;
  case 2:
    sumsq_kernel<TI, A, 2, SQUARE, SCALED, JMAX>
        <<<grid, QDPK_THREADS, 0, stream>>>(x, in_stride, len, rows, g, scales, partials, sums);
    break;
  default:
    sumsq_kernel<TI, A, 1, SQUARE, SCALED, JMAX>
        <<<grid, QDPK_THREADS, 0, stream>>>(x, in_stride, len, rows, g, scales, partials, sums);
    break;
  }
}

/* One level over rows of `block` values of type TI. Vector width: 16 bytes where the row starts
 * and the stride allow it, else narrower; the tree does not depend on it. scales (device, one
 * exponent per row) selects the scaled leaves of the first level; NULL, and every later level,
 * the plain ones. */
template <typename TI, typename A, bool SQUARE>
qdp_status launch_level(const TI *x, uint64_t in_stride, uint64_t len, uint64_t block,
                        uint64_t rows, const int32_t *scales, A *partials, double *sums,
                        geom *ret_g, cudaStream_t stream) {
  uint32_t vec = 16 / sizeof(TI);
  while (vec > 1 &&
         (block < vec || !aligned(x, vec * sizeof(TI)) || (rows > 1 && in_stride % vec != 0))) {
    vec /= 2;
  }
  /* 8 chunks where the loads are at most 2 values wide and a row fills whole 8-warp tiles of 8
   * chunks; else 4 (float4 loads with 8 chunks would need twice the registers the launch bound
   * allows and spill). Measured on an H200: 2^30 float64, 2.15 ms with 8 against 2.28 with 4;
   * 4096 rows of 2^10, 4 was faster (45 against 47 us with pass 2). */
  int jmax = (vec <= 2 && block / vec >= 2048) ? 8 : 4;
  if (qdpk_tune_sumsq_chunks == 4 || qdpk_tune_sumsq_chunks == 8) {
    jmax = (vec <= 2) ? qdpk_tune_sumsq_chunks : 4;
  }
  geom g = make_geom(block, len, vec, (uint32_t)jmax);
  *ret_g = g;
  uint64_t row_groups = (rows + g.rpb - 1) / g.rpb;
  /* 256 threads = 8 warps, each warp one tile slice of 32 lanes x J chunks x VEC values (or several
   * short rows); x: the tiles of a row that hold data, y: groups of rows; both folded into loops
   * past the grid limits. */
  dim3 grid(grid_x(g.used), grid_y(row_groups));
  /* Scaled leaves exist only where values are squared, in kernels of their own: the unscaled
   * kernels of the fast path stay as they were. */
  if constexpr (SQUARE) {
    if (scales) {
      if (jmax == 8) {
        launch_vec<TI, A, true, true, 8>(vec, grid, x, in_stride, len, rows, g, scales, partials,
                                         sums, stream);
      } else {
        launch_vec<TI, A, true, true, 4>(vec, grid, x, in_stride, len, rows, g, scales, partials,
                                         sums, stream);
      }
      return launched();
    }
  }
  if (jmax == 8) {
    launch_vec<TI, A, SQUARE, false, 8>(vec, grid, x, in_stride, len, rows, g, NULL, partials, sums,
                                        stream);
  } else {
    launch_vec<TI, A, SQUARE, false, 4>(vec, grid, x, in_stride, len, rows, g, NULL, partials, sums,
                                        stream);
  }
  return launched();
}

template <typename TI, typename A>
qdp_status run_sumsq(const TI *x, uint64_t in_stride, uint64_t len, uint64_t block, uint64_t rows,
                     const int32_t *scales, unsigned char *ws, size_t ws_off_b, double *ret_sums,
                     cudaStream_t stream) {
  A *bufs[2] = {reinterpret_cast<A *>(ws), reinterpret_cast<A *>(ws + ws_off_b)};
  geom g;
  qdp_status rc = launch_level<TI, A, true>(x, in_stride, len, block, rows, scales, bufs[0],
                                            ret_sums, &g, stream);
  int which = 0;
  while (rc == QDP_OK && g.tiles > 1) {
    const A *src = bufs[which];
    which ^= 1;
    uint64_t tiles = g.tiles;
    rc = launch_level<A, A, false>(src, tiles, g.used, tiles, rows, NULL, bufs[which], ret_sums, &g,
                                   stream);
  }
  return rc;
}

}  // namespace

extern "C" size_t qdpk_sumsq_workspace_bytes(uint64_t block, uint64_t rows) {
  size_t off_b, total;
  ws_layout(block, rows, &off_b, &total);
  return total;
}

extern "C" qdp_status qdpk_sumsq(const void *x, qdp_dtype in, uint64_t in_stride, uint64_t len,
                                 uint64_t block, uint64_t rows, qdp_dtype out,
                                 const int32_t *scale_log2, void *workspace, size_t workspace_bytes,
                                 double *ret_sums, cudaStream_t stream) {
  if (!is_real_dtype(in) || !is_out_dtype(out) || block == 0 || (block & (block - 1)) != 0 ||
      len > block || ret_sums == NULL || (len > 0 && x == NULL)) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  if (rows == 0) {
    return QDP_OK;
  }
  size_t off_b, total;
  ws_layout(block, rows, &off_b, &total);
  if (total > 0 && (workspace == NULL || workspace_bytes < total || !aligned(workspace, 16))) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  unsigned char *ws = static_cast<unsigned char *>(workspace);
  int out32 = out == QDP_DTYPE_COMPLEX64;
  if (in == QDP_DTYPE_FLOAT32) {
    const float *xf = static_cast<const float *>(x);
    return out32 ? run_sumsq<float, float>(xf, in_stride, len, block, rows, scale_log2, ws, off_b,
                                           ret_sums, stream)
                 : run_sumsq<float, double>(xf, in_stride, len, block, rows, scale_log2, ws, off_b,
                                            ret_sums, stream);
  }
  const double *xd = static_cast<const double *>(x);
  return out32 ? run_sumsq<double, float>(xd, in_stride, len, block, rows, scale_log2, ws, off_b,
                                          ret_sums, stream)
               : run_sumsq<double, double>(xd, in_stride, len, block, rows, scale_log2, ws, off_b,
                                           ret_sums, stream);
}
