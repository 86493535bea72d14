/* qdpk_cuda_internal.cuh — helpers shared by the CUDA encode kernels (the .cu files here only).
 *
 * Everything here is static or a template: each .cu file stays a self-contained translation unit
 * and exports only its qdpk_* launchers (qdpk_cuda.h). Any host thread; device helpers are pure.
 *
 * Grid conventions used by every launcher:
 *  - blocks of QDPK_THREADS (256) threads: 8 warps, enough to hide latency with 8 resident
 *    blocks per multiprocessor (2048 threads, the Hopper maximum), few enough that per-block
 *    setup stays cheap;
 *  - x walks the amplitudes (or tiles) of a row, y walks the rows; both are folded into loops
 *    (x_ in kernels: for (bx = blockIdx.x; bx < nbx; bx += gridDim.x)) so that any count of rows
 *    or amplitudes runs within the grid limits (2^31 - 1 in x, 65535 in y);
 *  - all indices are 64-bit.
 */
#ifndef QDPK_CUDA_INTERNAL_CUH
#define QDPK_CUDA_INTERNAL_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "qdpk_cuda.h"
#include "qdpk_tune.h"

#define QDPK_THREADS 256
/* Grid limits: x is 2^31 - 1; y is 65535. Launches never ask for more; kernels loop beyond. */
#define QDPK_GRID_X_MAX 2147483647ull
#define QDPK_GRID_Y_MAX 65535ull

namespace qdpk {

/* The interleaved complex element of a real type: 8 bytes for float, 16 for double. */
template <typename R>
struct cplx;
template <>
struct cplx<float> {
  typedef float2 type;
};
template <>
struct cplx<double> {
  typedef double2 type;
};

template <typename R>
__device__ __forceinline__ typename cplx<R>::type make_cplx(R re, R im);
template <>
__device__ __forceinline__ float2 make_cplx<float>(float re, float im) {
  return make_float2(re, im);
}
template <>
__device__ __forceinline__ double2 make_cplx<double>(double re, double im) {
  return make_double2(re, im);
}

/* Products and sums that the compiler may not contract into a fused multiply-add, whatever the
 * -fmad setting: the CPU twins round every product, and the sum-of-squares tree must match them
 * bit for bit. */
__device__ __forceinline__ float mul_rn(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ double mul_rn(double a, double b) {
  return __dmul_rn(a, b);
}
__device__ __forceinline__ float fma_rn(float a, float b, float c) {
  return __fmaf_rn(a, b, c);
}
__device__ __forceinline__ double fma_rn(double a, double b, double c) {
  return __fma_rn(a, b, c);
}

/* a * b with every rounding spelled out (two fused multiply-adds over two products), so that one
 * kernel gives the same bits wherever the compiler inlines it. */
template <typename C>
__device__ __forceinline__ C cmul(C a, C b) {
  C r;
  r.x = fma_rn(a.x, b.x, -mul_rn(a.y, b.y));
  r.y = fma_rn(a.x, b.y, mul_rn(a.y, b.x));
  return r;
}

/* A value as the amplitude norm's scaled fallback takes it: as is, or (SCALED) times 2^e in its
 * own type, the ldexp of the CPU twin (correctly rounded in CUDA as in C, subnormal results
 * included: no flush to zero here). */
template <bool SCALED>
__device__ __forceinline__ float scaled(float v, int e) {
  return SCALED ? ldexpf(v, e) : v;
}
template <bool SCALED>
__device__ __forceinline__ double scaled(double v, int e) {
  return SCALED ? ldexp(v, e) : v;
}

__device__ __forceinline__ void sincos_r(float a, float *s, float *c) {
  sincosf(a, s, c);
}
__device__ __forceinline__ void sincos_r(double a, double *s, double *c) {
  sincos(a, s, c);
}

/* The Walsh-Hadamard tile (wht.cu, and iqp.cu's fused first pass): 4096 complex values held by
 * 256 threads, 16 each, thread t's register k holding tile index t + 256 k (register bits at
 * [8, 12)). A run of stages goes through the tile in groups of 4 bits that sit in registers,
 * regrouped through shared memory in between; index i is stored at i + i / 16 (one pad slot per
 * 16) so that the 8 threads of each quarter-warp's 16-byte accesses hit 8 different bank groups
 * for every grouping. Every stage is (a, b) <- (a + b, a - b). */
constexpr uint32_t TILE_BITS = 12;
constexpr uint32_t TILE = 1u << TILE_BITS;
constexpr uint32_t PER_THREAD = TILE / QDPK_THREADS; /* 16 values: 4 register bits */
constexpr uint32_t TILE_SLOTS = TILE + TILE / 16;    /* shared-memory slots of a tile */

__device__ __forceinline__ uint32_t tile_slot(uint32_t i) {
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
__device__ __forceinline__ void tile_regroup(C *sm, C (&r)[PER_THREAD], uint32_t t, uint32_t from,
                                             uint32_t to) {
  __syncthreads();
#pragma unroll
  for (uint32_t k = 0; k < PER_THREAD; k++) {
    sm[tile_slot(tile_index(t, k, from))] = r[k];
  }
  __syncthreads();
#pragma unroll
  for (uint32_t k = 0; k < PER_THREAD; k++) {
    r[k] = sm[tile_slot(tile_index(t, k, to))];
  }
}

/* The stage of register bit rb (0..3) on a thread's 16 registers. */
template <typename C>
__device__ __forceinline__ void tile_register_stage(C (&r)[PER_THREAD], uint32_t rb) {
#pragma unroll
  for (uint32_t k = 0; k < PER_THREAD; k++) {
    if (!(k & (1u << rb))) {
      add_sub(r[k], r[k | (1u << rb)]);
    }
  }
}

/* The stage of a tile bit that sits in bit lb (< 5) of the thread index, across lanes t and
 * t ^ 2^lb of one warp: the arithmetic of add_sub, a the value of the lower index, so the same
 * bits as the stage in registers. */
template <typename C>
__device__ __forceinline__ void tile_lane_stage(C (&r)[PER_THREAD], uint32_t t, uint32_t lb) {
  const bool upper = (t >> lb) & 1;
#pragma unroll
  for (uint32_t k = 0; k < PER_THREAD; k++) {
    C o;
    o.x = __shfl_xor_sync(0xffffffffu, r[k].x, 1u << lb);
    o.y = __shfl_xor_sync(0xffffffffu, r[k].y, 1u << lb);
    r[k].x = upper ? o.x - r[k].x : r[k].x + o.x;
    r[k].y = upper ? o.y - r[k].y : r[k].y + o.y;
  }
}

/* The stage of the tile bit in lane bit lb (< 5), that bit trading places with the one in register
 * bit rb: the upper lane sends its registers with bit rb clear, the lower one those with it set,
 * so each thread then holds pairs (k, k | 2^rb) of the lane bit's stage and runs it in registers,
 * with half the shuffles of tile_lane_stage. Afterwards register bit rb holds the tile bit that
 * lane bit lb held, and lane bit lb the one register bit rb held. The arithmetic of add_sub. */
template <typename C>
__device__ __forceinline__ void tile_lane_swap_stage(C (&r)[PER_THREAD], uint32_t t, uint32_t lb,
                                                     uint32_t rb) {
  const bool upper = (t >> lb) & 1;
#pragma unroll
  for (uint32_t k = 0; k < PER_THREAD; k++) {
    if (!(k & (1u << rb))) {
      const uint32_t h = k | (1u << rb);
      const C send = upper ? r[k] : r[h];
      C got;
      got.x = __shfl_xor_sync(0xffffffffu, send.x, 1u << lb);
      got.y = __shfl_xor_sync(0xffffffffu, send.y, 1u << lb);
      if (upper) {
        r[k] = got;
      } else {
        r[h] = got;
      }
      add_sub(r[k], r[h]);
    }
  }
}

/* The stages of tile bits [first, end), ascending, on registers that hold the tile with their
 * register bits at [8, 12), as they are left. Every thread of the block calls it. */
template <typename C>
__device__ __forceinline__ void tile_stages(C *sm, C (&r)[PER_THREAD], uint32_t t, uint32_t first,
                                            uint32_t end) {
  uint32_t cur = 8; /* where the register bits sit now */
  for (uint32_t pos = first; pos < end;) {
    const uint32_t p = pos < 8 ? pos : 8;
    const uint32_t stop = end < p + 4 ? end : p + 4;
    if (p != cur) {
      tile_regroup(sm, r, t, cur, p);
      cur = p;
    }
    const uint32_t lo = pos - p, hi = stop - p;
#pragma unroll
    for (uint32_t rb = 0; rb < 4; rb++) {
      if (rb >= lo && rb < hi) {
        tile_register_stage(r, rb);
      }
    }
    pos = stop;
  }
  if (cur != 8) {
    tile_regroup(sm, r, t, cur, 8);
  }
}

/* tile_stages over bits [POS, END) fixed at compile time (register bits now at CUR), leaving the
 * register bits at LEAVE: every shared-memory address becomes a per-thread base plus a constant,
 * where the run-time version spends integer work on each. For kernels that do little besides
 * (iqp.cu's fused pass, which stores from the layout of its last group). */
template <uint32_t POS, uint32_t END, uint32_t LEAVE = 8, uint32_t CUR = 8, typename C>
__device__ __forceinline__ void tile_stages_fixed(C *sm, C (&r)[PER_THREAD], uint32_t t) {
  if constexpr (POS >= END) {
    if constexpr (CUR != LEAVE) {
      tile_regroup(sm, r, t, CUR, LEAVE);
    }
  } else {
    constexpr uint32_t P = POS < 8 ? POS : 8;
    constexpr uint32_t STOP = END < P + 4 ? END : P + 4;
    if constexpr (P != CUR) {
      tile_regroup(sm, r, t, CUR, P);
    }
#pragma unroll
    for (uint32_t rb = POS - P; rb < STOP - P; rb++) {
      tile_register_stage(r, rb);
    }
    tile_stages_fixed<STOP, END, LEAVE, P>(sm, r, t);
  }
}

/* Raises a kernel's dynamic shared-memory limit to `bytes` once per device; *done_mask (one per
 * kernel) has bit d set once device d is done. A repeated call is harmless, so a race between
 * threads costs nothing. */
template <typename Kernel>
qdp_status allow_smem_once(Kernel kernel, size_t bytes, unsigned long long *done_mask) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    return QDP_ERR_CUDA;
  }
  unsigned long long bit = dev < 64 ? 1ull << dev : 0;
  if (bit != 0 && (__atomic_load_n(done_mask, __ATOMIC_ACQUIRE) & bit)) {
    return QDP_OK;
  }
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) !=
      cudaSuccess) {
    return QDP_ERR_CUDA;
  }
  __atomic_fetch_or(done_mask, bit, __ATOMIC_RELEASE);
  return QDP_OK;
}

/* Blocks along x for `items` items, QDPK_THREADS * per_thread items per block. */
static inline uint64_t blocks_for(uint64_t items, uint64_t per_thread) {
  uint64_t per_block = (uint64_t)QDPK_THREADS * per_thread;
  return (items + per_block - 1) / per_block;
}

static inline unsigned grid_x(uint64_t nbx) {
  return (unsigned)(nbx < QDPK_GRID_X_MAX ? nbx : QDPK_GRID_X_MAX);
}

static inline unsigned grid_y(uint64_t rows) {
  return (unsigned)(rows < QDPK_GRID_Y_MAX ? rows : QDPK_GRID_Y_MAX);
}

/* After a launch: a configuration or launch error is left in place (cudaPeekAtLastError, not
 * cudaGetLastError) so that the caller can read and name it, as qdpk_cuda.h promises. */
static inline qdp_status launched(void) {
  return cudaPeekAtLastError() == cudaSuccess ? QDP_OK : QDP_ERR_CUDA;
}

static inline int is_out_dtype(qdp_dtype t) {
  return t == QDP_DTYPE_COMPLEX64 || t == QDP_DTYPE_COMPLEX128;
}

static inline int is_real_dtype(qdp_dtype t) {
  return t == QDP_DTYPE_FLOAT32 || t == QDP_DTYPE_FLOAT64;
}

static inline int aligned(const void *p, size_t bytes) {
  return ((uintptr_t)p % bytes) == 0;
}

/* The span checks every closed-form launcher shares: 1..63 qubits, a non-empty range inside the
 * state, at least one row, a complex output type. */
static inline int span_ok(const struct qdpk_span *s) {
  if (s == NULL || s->qubits < 1 || s->qubits > 63 || s->count < 1 || s->rows < 1 ||
      !is_out_dtype(s->out)) {
    return 0;
  }
  uint64_t size = (uint64_t)1 << s->qubits;
  return s->first < size && s->count <= size - s->first;
}

/* Amplitudes per thread for a closed-form kernel: the tuning knob when it names a built variant
 * (1, 4 or 16), else the default. */
static inline int per_thread(int knob, int def) {
  return (knob == 1 || knob == 4 || knob == 16) ? knob : def;
}

/* The closed-form launchers' shared dispatch. `op` is a small struct of the launch's arguments with
 * a member `template <typename TI, typename R, int K> qdp_status run(const TI *x) const` that
 * launches the kernel; this picks its instantiation: the input type TI (float or double, and
 * int64_t where Indices says the op takes basis indices), the output precision R (float for
 * COMPLEX64, double for COMPLEX128) and the amplitudes per thread K (1, 4 or 16, from per_thread).
 * One place for the dtype and launch-shape matrix, so the ops cannot drift apart. */
template <typename TI, typename R, class Op>
qdp_status run_per_thread(int k, const void *x, const Op &op) {
  const TI *xt = static_cast<const TI *>(x);
  switch (k) {
  case 1:
    return op.template run<TI, R, 1>(xt);
  case 16:
    return op.template run<TI, R, 16>(xt);
  default:
    return op.template run<TI, R, 4>(xt);
  }
}

template <typename R, bool Indices, class Op>
qdp_status run_input(qdp_dtype in, int k, const void *x, const Op &op) {
  if constexpr (Indices) {
    if (in == QDP_DTYPE_INT64) {
      return run_per_thread<int64_t, R>(k, x, op);
    }
  }
  return in == QDP_DTYPE_FLOAT32 ? run_per_thread<float, R>(k, x, op)
                                 : run_per_thread<double, R>(k, x, op);
}

template <bool Indices = false, class Op>
qdp_status run_closed_form(const struct qdpk_span *s, qdp_dtype in, int k, const void *x,
                           const Op &op) {
  return s->out == QDP_DTYPE_COMPLEX64 ? run_input<float, Indices>(in, k, x, op)
                                       : run_input<double, Indices>(in, k, x, op);
}

/* The launch of a one-pass closed-form kernel over a span, for run_closed_form: 256 threads, K
 * amplitudes each, 256 apart, for coalesced 16-byte (complex128) stores; x: the span's amplitudes,
 * y: rows, both folded into loops past the grid limits. Kernels::get<TI, R, K>() names a kernel
 * taking (x, in_stride, qubits, first, count, rows, nbx, out). */
template <class Kernels>
struct span_launch {
  const struct qdpk_span *s;
  uint64_t in_stride;
  void *out;
  cudaStream_t stream;

  template <typename TI, typename R, int K>
  qdp_status run(const TI *x) const {
    uint64_t nbx = blocks_for(s->count, K);
    dim3 grid(grid_x(nbx), grid_y(s->rows));
    auto kernel = Kernels::template get<TI, R, K>();
    kernel<<<grid, QDPK_THREADS, 0, stream>>>(x, in_stride, s->qubits, s->first, s->count, s->rows,
                                              nbx, static_cast<typename cplx<R>::type *>(out));
    return launched();
  }
};

}  // namespace qdpk

#endif /* QDPK_CUDA_INTERNAL_CUH */
