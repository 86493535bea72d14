/* iqp.cu — IQP on the GPU: qdpk_iqp, the state a device writes (twin of qdpk_cpu_iqp), and the
 * reference path's step 1, qdpk_iqp_phases: out = 2^-n e^{i theta(b)} (twin of
 * qdpk_cpu_iqp_phases), whose step 2 is the Walsh-Hadamard transform of wht.cu.
 *
 * theta(b) = sum_i d_i b_i + sum_{i<j} d_p(i,j) b_i b_j splits at bit 8 of b into a part of the low
 * bits, a part of the high bits, and the cross pairs (i low, j high):
 *   theta = theta_lo(b mod 256) + theta_hi(b div 256) + sum_{i low, b_i = 1} c_i(b div 256),
 *   c_i(h) = sum_{j high, h_j = 1} d_p(i,j).
 * The phases kernel: as in product.cuh, a block writes 256 * K consecutive amplitudes and thread t
 * those K apart by 256, which share their low 8 bits: the thread forms theta_lo once (O(64)
 * terms); theta_hi and the eight c_i take K + 1 values per block, formed by 9 (K + 1) threads into
 * shared memory. Each amplitude then costs at most 9 additions, one sincos and one 16-byte store,
 * instead of the O(popcount^2) sum of the direct form. The coefficients live in shared memory
 * (n + n(n-1)/2 values: 16 KiB of doubles at 63 qubits).
 *
 * qdpk_iqp follows iqp_top.c's order but for where E goes: per low index y (the low L = n - K
 * bits), the 2^K top values v_t(y) = T(t) * (E(y) * prod over set bits i of t of C_i(y)),
 * E(y) = 2^-n e^{i theta(0, y)} (multiplied in first here, where it costs no product of its own;
 * after the stages on the CPU), their top-bit stages in registers, then the low bits' stages,
 * ascending. E takes the split above (one sincos per y for 8 values); C_i(y) = e^{i u_i(y)}, u_i
 * the pairs of top bit i with y, is the product of its low and high parts. Small states (2^L <
 * 512) pack several samples into a tile. One pass computes all that for a tile, runs
 * the tile's low stages (bits 0..8 for whole blocks, 0..11 for a part of one) in registers and
 * shared memory and writes the state once; qdpk_wht_from's strided passes finish the low bits. So
 * 26 qubits take three passes over memory, the first a write only, where the reference path takes
 * four. Every rounding of a value is spelled out (cmul, sums in a fixed order), and each value is
 * a function of (t, y) and the sample alone: the state is bit-identical however it is split.
 *
 * The sums run in other orders than the CPU twins', so values agree to rounding (a few ulps of
 * |theta|), not bit for bit; the phases kernel's values depend on the global index and the sample
 * only, so its sharded launches give the bits of one launch.
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

/* ---- IQP whole: qdpk_iqp ---- */

constexpr uint32_t TOP_BITS = QDPK_IQP_TOP_BITS;
constexpr uint32_t TOPS = 1u << TOP_BITS;
constexpr uint32_t WHOLE_Y_BITS = 9; /* low indices per tile of whole blocks: 512 x 8 tops */

/* The sum of d_p(i, j) over the set bits j of mask (i not among them), ascending j. */
template <typename R>
__device__ R pair_sum(const R *d, uint32_t n, uint32_t i, uint64_t mask) {
  R acc = (R)0;
  for (; mask != 0; mask &= mask - 1) {
    const uint32_t j = (uint32_t)__ffsll((long long)mask) - 1;
    acc = acc + d[j < i ? pair_index(n, j, i) : pair_index(n, i, j)];
  }
  return acc;
}

/* theta over the set bits of b alone: per set bit i, ascending, d_i and then (pairs) its pairs
 * with the set bits above it. */
template <typename R>
__device__ R theta_of(const R *d, uint32_t n, int pairs, uint64_t b) {
  R acc = (R)0;
  for (uint64_t m = b; m != 0; m &= m - 1) {
    const uint32_t i = (uint32_t)__ffsll((long long)m) - 1;
    acc = acc + d[i];
    if (pairs) {
      acc = acc + pair_sum(d, n, i, m & (m - 1));
    }
  }
  return acc;
}

template <typename R>
__device__ __forceinline__ typename cplx<R>::type expi(R th) {
  R sv, cv;
  sincos_r(th, &sv, &cv);
  return make_cplx<R>(cv, sv);
}

/* The span's shape (qdpk_cpu_iqp's rules): L = n - K low bits, blocks of 2^L, and either whole
 * blocks (tops t0..t1) or a power-of-two part of block t0 from low index y0. */
struct iqp_shape {
  uint32_t k_bits, l_bits;
  uint64_t block, t0, t1, y0;
  bool whole;

  __host__ __device__ iqp_shape(uint32_t n, uint64_t first, uint64_t count) {
    k_bits = n < TOP_BITS ? n : TOP_BITS;
    l_bits = n - k_bits;
    block = 1ull << l_bits;
    t0 = first >> l_bits;
    t1 = (first + count - 1) >> l_bits;
    whole = first % block == 0 && count % block == 0;
    y0 = whole ? 0 : first & (block - 1);
  }
  /* Low indices of one top value in the span, and the low-bit stages the fused pass applies
   * (those of its tile: 512 x 8 tops, or 4096 of one top). */
  __host__ __device__ uint64_t len(uint64_t count) const {
    return whole ? block : count;
  }
  __host__ __device__ uint32_t fused_bits(uint64_t count) const {
    uint32_t bits = 0;
    while ((1ull << bits) < len(count)) {
      bits++;
    }
    uint32_t cap = whole ? WHOLE_Y_BITS : TILE_BITS;
    return bits < cap ? bits : cap;
  }
};

/* The top-bit values of one low index y, in registers: q_t = E(y) * prod over set bits i of t of
 * C_i (ascending bits; C_i = cl[i] * ch[i]), v_t = T(t) * q_t (T(0) = 1: v_0 = E), then the
 * top-bit stages, ascending. E multiplies every value of y alike, so it goes in first, where it
 * costs no product of its own. Values t >= 2^k_bits are never stored. */
template <typename C>
__device__ __forceinline__ void top_values(C (&v)[TOPS], const C *tb, const C (&cl)[TOP_BITS],
                                           const C *ch, C e, uint32_t k_bits, int pairs) {
  C q[TOPS];
  q[0] = e;
  if (pairs) {
#pragma unroll
    for (uint32_t i = 0; i < TOP_BITS; i++) {
      const C c = cmul(cl[i], ch[i]);
#pragma unroll
      for (uint32_t t = 0; t < (1u << i); t++) {
        q[t + (1u << i)] = cmul(q[t], c);
      }
    }
  } else {
#pragma unroll
    for (uint32_t t = 1; t < TOPS; t++) {
      q[t] = e;
    }
  }
  v[0] = q[0];
#pragma unroll
  for (uint32_t t = 1; t < TOPS; t++) {
    v[t] = cmul(tb[t], q[t]);
  }
#pragma unroll
  for (uint32_t i = 0; i < TOP_BITS; i++) {
    if (i < k_bits) {
#pragma unroll
      for (uint32_t t = 0; t < TOPS; t++) {
        if (!(t & (1u << i))) {
          add_sub(v[t], v[t | (1u << i)]);
        }
      }
    }
  }
}

/* The span shapes of the fused pass: a part of one block; whole blocks of 2^L >= 512 low indices;
 * whole blocks of fewer, several samples to a tile. */
enum iqp_tile { TILE_PART, TILE_WHOLE, TILE_PACKED };
constexpr uint32_t PACKED_ROWS_MAX = 64;

/* Rows along y, groups of `group` tiles along x (both folded into loops past the grid limits).
 * WHOLE: a tile is 512 consecutive low indices x the 8 tops (thread t: y = base + t and
 * base + t + 256, all tops; tile index y - base + 512 u for top u), of which the span's tops are
 * stored; PART: 4096 consecutive low indices of top t0 (thread t: y = base + t + 256 j); PACKED
 * (2^L < 512): the 512 of WHOLE hold `packed` samples of 2^L each. The low indices split at bit 8:
 * the thread's low part lo is fixed, so theta_lo and the low parts of C_i are formed once per row
 * (per value when PACKED, whose samples differ by thread); the (at most 32) high parts h of a
 * group's low indices get theta_hi, the cross sums with the low bits and the high parts of C_i in
 * shared memory, formed in parallel once per group. Each value then costs a share of one sine and
 * cosine (E(y)), a few complex products and its stages; the tile's low-bit stages run in
 * registers and shared memory (tile_stages) and the tile is written once. Every shape computes
 * each value by the same operations, so they give the same bits. */
template <typename TI, typename R, int SHAPE>
__global__ void __launch_bounds__(QDPK_THREADS, 2) /* two blocks per multiprocessor: <= 128 regs */
    iqp_whole_kernel(const TI *__restrict__ x, uint64_t in_stride, uint32_t n, int pairs,
                     uint64_t first, uint64_t count, uint64_t rows, uint64_t tiles, uint32_t group,
                     uint64_t groups, uint32_t packed, typename cplx<R>::type *__restrict__ out) {
  typedef typename cplx<R>::type C;
  constexpr bool WHOLE = SHAPE != TILE_PART, PACKED = SHAPE == TILE_PACKED;
  constexpr uint32_t J = WHOLE ? 2 : PER_THREAD; /* low indices per thread and tile */
  constexpr uint32_t Y = J * QDPK_THREADS;       /* low indices per tile */
  constexpr uint32_t H = 32;                     /* high parts per group: J * group <= 32 */
  constexpr uint32_t SUMS = LO_BITS + TOP_BITS;  /* per high part, besides theta_hi */
  extern __shared__ __align__(16) unsigned char smem_raw[];
  C *sm = reinterpret_cast<C *>(smem_raw);
  R *d = reinterpret_cast<R *>(sm + TILE_SLOTS); /* the coefficients of `packed` rows */
  __shared__ C tb[PACKED ? PACKED_ROWS_MAX : 1][TOPS], ch[H][TOP_BITS];
  __shared__ R th_hi[H], cross[H][LO_BITS];
  const uint32_t t = threadIdx.x;
  const iqp_shape sh(n, first, count);
  const uint32_t lo_bits = sh.l_bits < LO_BITS ? sh.l_bits : LO_BITS;
  const uint32_t lo = (uint32_t)((sh.y0 + t) & ((1ull << lo_bits) - 1));
  const uint64_t y_end = sh.y0 + sh.len(count);
  const uint32_t stages = sh.fused_bits(count);
  const uint32_t np = n + (pairs ? n * (n - 1) / 2 : 0);
  const R scale = iqp_scale(n, R());
  /* The row loop's state, set by setup_rows and read by run_group: two functions rather than
   * one loop body, which ptxas allocates without the 80 bytes of spills the loop had (complex128:
   * about 1 % off iqp at 26 and 30 qubits on an H200; docs/performance.md, "IQP"). */
  uint32_t here = 1;
  R th_lo = (R)0;
  C cl[TOP_BITS];
  /* The rows from r0: their coefficients into shared memory, T(t), and the thread's low parts. */
  auto setup_rows = [&](uint64_t r0) {
    here = rows - r0 < packed ? (uint32_t)(rows - r0) : packed;
    for (uint32_t k = t; k < here * np; k += QDPK_THREADS) {
      d[k] = (R)x[(r0 + k / np) * in_stride + k % np];
    }
    __syncthreads();
    for (uint32_t w = t; w < here * TOPS; w += QDPK_THREADS) {
      const uint32_t u = w % TOPS;
      tb[w / TOPS][u] = expi(u < (1u << sh.k_bits)
                                 ? theta_of(d + (w / TOPS) * np, n, pairs, (uint64_t)u << sh.l_bits)
                                 : (R)0);
    }
    if (!PACKED) {
      th_lo = theta_of(d, n, pairs, lo);
#pragma unroll
      for (uint32_t i = 0; i < TOP_BITS; i++) {
        cl[i] = expi(pairs && i < sh.k_bits ? pair_sum(d, n, sh.l_bits + i, lo) : (R)0);
      }
    }
  };
  /* Group g of the rows from r0: its tiles, computed, transformed and stored. */
  auto run_group = [&](uint64_t r0, uint64_t g) {
    const uint64_t gbase = sh.y0 + g * group * Y;
    /* High part h = gbase / 256 + j of the group's low indices: 12 sums each (one high part, 0,
     * when PACKED: those sums are those of any row). theta_hi, the longest (O(popcount^2)), has
     * the first warp to itself, one lane per h; the other warps share the 11 O(popcount) sums,
     * so no warp runs two kinds of loop one after the other. */
    const uint32_t nh = J * group;
    auto high = [&](uint32_t j) -> uint64_t {
      const uint64_t hm = ((gbase >> LO_BITS) + j) << LO_BITS; /* the set high bits of y */
      return hm < sh.block ? hm : 0; /* past the block: its values are not stored */
    };
    if (t < 32) {
      if (t < nh) {
        th_hi[t] = theta_of(d, n, pairs, high(t));
      }
    } else {
      for (uint32_t w = t - 32; w < nh * SUMS; w += QDPK_THREADS - 32) {
        const uint32_t j = w / SUMS, i = w % SUMS;
        if (i < LO_BITS) {
          cross[j][i] = pairs && i < lo_bits ? pair_sum(d, n, i, high(j)) : (R)0;
        } else {
          ch[j][i - LO_BITS] = expi(pairs && i - LO_BITS < sh.k_bits
                                        ? pair_sum(d, n, sh.l_bits + i - LO_BITS, high(j))
                                        : (R)0);
        }
      }
    }
    __syncthreads();
    for (uint32_t q = 0; q < group && g * group + q < tiles; q++) {
      const uint64_t base = gbase + (uint64_t)q * Y;
      C reg[PER_THREAD];
#pragma unroll
      for (uint32_t j = 0; j < J; j++) {
        const uint32_t hj = PACKED ? 0 : q * J + j;
        /* PACKED: this value's row within the tile and low index (rows past `here` compute
         * row 0's values, never stored). */
        const uint32_t at = t + QDPK_THREADS * j;
        const uint32_t rr = PACKED && (at >> sh.l_bits) < here ? at >> sh.l_bits : 0;
        const uint32_t yl = PACKED ? at & (uint32_t)(sh.block - 1) : lo;
        if (PACKED) {
          const R *dr = d + rr * np;
          th_lo = theta_of(dr, n, pairs, yl);
#pragma unroll
          for (uint32_t i = 0; i < TOP_BITS; i++) {
            cl[i] = expi(pairs && i < sh.k_bits ? pair_sum(dr, n, sh.l_bits + i, yl) : (R)0);
          }
        }
        R th = th_lo + th_hi[hj];
#pragma unroll
        for (uint32_t i = 0; i < LO_BITS; i++) {
          if ((yl >> i) & 1) {
            th = th + cross[hj][i];
          }
        }
        C e = expi(th);
        e.x = scale * e.x;
        e.y = scale * e.y;
        C v[TOPS];
        top_values(v, tb[PACKED ? rr : 0], cl, ch[hj], e, sh.k_bits, pairs);
        if (WHOLE) {
#pragma unroll
          for (uint32_t u = 0; u < TOPS; u++) {
            reg[j + J * u] = v[u];
          }
        } else {
          C keep = v[0];
#pragma unroll
          for (uint32_t u = 1; u < TOPS; u++) {
            if (u == sh.t0) {
              keep = v[u];
            }
          }
          reg[j] = keep;
        }
      }
      if (SHAPE == TILE_WHOLE) {
        /* Blocks of 512 or more, all 9 bits: 0..7 through two regroupings, which leave tile bit
         * 8 in lane bit 4, then bit 8 across lanes, trading places with bit 7 in register bit 3;
         * the tile is stored from there, a regrouping fewer than tile_stages_fixed<0, 9>. */
        tile_stages_fixed<0, 8, 4>(sm, reg, t);
        tile_lane_swap_stage(reg, t, 4, 3);
      } else {
        tile_stages(sm, reg, t, 0, stages);
      }
      /* Value (row r0 + rr, top u, low index y) goes to o + rr * count + u * 2^L + y. Register
       * k holds tile index tile_index(t, k, 4) with bits 7 and 8 swapped when TILE_WHOLE (the
       * warp's top, u = t / 32), else t + 256 k (j + J u = k). */
      C *o = out + r0 * count - sh.t0 * sh.block - sh.y0;
#pragma unroll
      for (uint32_t k = 0; k < PER_THREAD; k++) {
        const uint32_t n = tile_index(t, k, 4);
        const uint32_t i = SHAPE == TILE_WHOLE
                               ? (n & ~0x180u) | ((n >> 1) & 0x80u) | ((n << 1) & 0x100u)
                               : t + QDPK_THREADS * k;
        const uint32_t j = (i >> LO_BITS) % J, u = (i >> LO_BITS) / J;
        const uint64_t at = base + (i & (QDPK_THREADS - 1)) + (uint64_t)QDPK_THREADS * j;
        const uint64_t rr = PACKED ? at >> sh.l_bits : 0, y = PACKED ? at & (sh.block - 1) : at;
        if ((PACKED ? rr < here : y < y_end) && (!WHOLE || (u >= sh.t0 && u <= sh.t1))) {
          o[rr * count + (WHOLE ? (uint64_t)u << sh.l_bits : sh.t0 << sh.l_bits) + y] = reg[k];
        }
      }
      __syncthreads(); /* the tile's shared memory is rewritten by the next tile */
    }
  };
  for (uint64_t r0 = blockIdx.y * (uint64_t)packed; r0 < rows; r0 += (uint64_t)gridDim.y * packed) {
    setup_rows(r0);
    for (uint64_t g = blockIdx.x; g < groups; g += gridDim.x) {
      run_group(r0, g);
    }
    /* d is rewritten for the next row; the loop above ended on a barrier. */
  }
}

/* The same arguments as the phases kernel's launch; run takes the tile shape instead of K. */
struct iqp_whole_launch : iqp_launch {
  template <typename TI, typename R, int SHAPE>
  qdp_status run(const TI *x) const {
    typedef typename cplx<R>::type C;
    static unsigned long long smem_done = 0;
    const uint32_t n = s->qubits;
    const iqp_shape sh(n, s->first, s->count);
    const uint32_t np = n + (pairs ? n * (n - 1) / 2 : 0);
    /* PACKED: as many samples as fill the 512 low indices of a tile, at most 64. */
    uint32_t packed = 1;
    while (SHAPE == TILE_PACKED && packed < PACKED_ROWS_MAX && (packed * 2) * sh.block <= 512) {
      packed *= 2;
    }
    /* The tile, then the coefficients: at most 2016 (63 qubits) or 64 samples' of 6 qubits. */
    const size_t smem_max = TILE_SLOTS * sizeof(C) + (63 + 63 * 62 / 2) * sizeof(R);
    const size_t smem = TILE_SLOTS * sizeof(C) + (size_t)packed * np * sizeof(R);
    qdp_status rc = allow_smem_once(iqp_whole_kernel<TI, R, SHAPE>, smem_max, &smem_done);
    if (rc != QDP_OK) {
      return rc;
    }
    const uint64_t y_per_tile = SHAPE == TILE_PART ? TILE : (1ull << WHOLE_Y_BITS);
    const uint64_t len = sh.len(s->count);
    const uint64_t tiles = (len + y_per_tile - 1) / y_per_tile;
    /* Tiles of whole blocks share their group's sums by up to 16 (32 high parts) while that
     * leaves 1024 groups or more to spread over the multiprocessors. */
    uint32_t group = 1;
    while (SHAPE == TILE_WHOLE && group < 16 && tiles * s->rows / (2 * group) >= 1024) {
      group *= 2;
    }
    const uint64_t groups = (tiles + group - 1) / group;
    dim3 grid(grid_x(groups), grid_y((s->rows + packed - 1) / packed));
    iqp_whole_kernel<TI, R, SHAPE>
        <<<grid, QDPK_THREADS, smem, stream>>>(x, in_stride, n, pairs, s->first, s->count, s->rows,
                                               tiles, group, groups, packed, static_cast<C *>(out));
    if ((rc = launched()) != QDP_OK) {
      return rc;
    }
    /* The low bits above the fused pass's, in each block (or the part) the span holds. */
    return qdpk_wht_from(out, s->out, len, s->rows * (s->count / len), sh.fused_bits(s->count),
                         stream);
  }

  template <typename TI, typename R>
  qdp_status run_shape(const void *x) const {
    const TI *xt = static_cast<const TI *>(x);
    const iqp_shape sh(s->qubits, s->first, s->count);
    if (!sh.whole) {
      return run<TI, R, TILE_PART>(xt);
    }
    return sh.block < (1ull << WHOLE_Y_BITS) ? run<TI, R, TILE_PACKED>(xt)
                                             : run<TI, R, TILE_WHOLE>(xt);
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

extern "C" qdp_status qdpk_iqp(const struct qdpk_span *s, const void *x, qdp_dtype in,
                               uint64_t in_stride, int pairs, void *out, cudaStream_t stream) {
  if (!span_ok(s) || !is_real_dtype(in) || x == NULL || out == NULL) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  if (!qdpk_iqp_span_ok(s)) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  const iqp_whole_launch op{{s, in_stride, pairs != 0, out, stream}};
  const bool f32 = in == QDP_DTYPE_FLOAT32;
  if (s->out == QDP_DTYPE_COMPLEX64) {
    return f32 ? op.run_shape<float, float>(x) : op.run_shape<double, float>(x);
  }
  return f32 ? op.run_shape<float, double>(x) : op.run_shape<double, double>(x);
}
