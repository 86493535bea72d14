// The amplitude norm's final combine on the device: the same pairwise tree as runtime/norm.c's
// norm_combine, over partial sums already in device memory, so a sum of squares gathered by a
// device collective needs no trip through the host and keeps the bits of one launch.
#include "qdpk_cuda.h"

namespace {

struct frame {
  uint64_t lo;
  uint32_t lg;
  int state;   // 0: not visited, 1: left pending, 2: right pending
  double left; // the left subtree's sum, once known
};

// norm_combine's recursion, unrolled onto an explicit stack (a tree over at most 2^63 values is
// at most 64 levels deep): a subtree with no part is zero, a subtree that is one part is its sum,
// any other is left + right, added in float for float states.
__device__ double combine_row(const qdpk_norm_part *parts, size_t n, uint32_t log2_total,
                              int single, const double *vals, uint64_t row_stride, uint64_t row) {
  frame st[66];
  int sp = 1;
  size_t cur = 0;
  double ret = 0.0;
  st[0] = frame{0, log2_total, 0, 0.0};
  while (sp > 0) {
    frame *f = &st[sp - 1];
    if (f->state == 0) {
      if (cur >= n || parts[cur].first - f->lo >= (1ull << f->lg)) {
        ret = 0.0;
        sp--;
      } else if (parts[cur].first == f->lo && parts[cur].log2 == f->lg) {
        ret = vals[parts[cur].src + row * row_stride];
        cur++;
        sp--;
      } else {
        f->state = 1;
        st[sp++] = frame{f->lo, f->lg - 1, 0, 0.0};
      }
    } else if (f->state == 1) {
      f->left = ret;
      f->state = 2;
      uint64_t half = 1ull << (f->lg - 1);
      st[sp++] = frame{f->lo + half, f->lg - 1, 0, 0.0};
    } else {
      ret = single ? (double)(__fadd_rn((float)f->left, (float)ret)) : __dadd_rn(f->left, ret);
      sp--;
    }
  }
  return ret;
}

__global__ void norm_combine_kernel(const qdpk_norm_part *parts, size_t n, uint32_t log2_total,
                                    int single, const double *vals, uint64_t row_stride,
                                    uint64_t rows, double *ret_totals) {
  uint64_t row = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (row < rows) {
    ret_totals[row] = combine_row(parts, n, log2_total, single, vals, row_stride, row);
  }
}

} // namespace

extern "C" qdp_status qdpk_norm_combine(const struct qdpk_norm_part *parts, size_t n,
                                        uint32_t log2_total, int single, const double *vals,
                                        uint64_t row_stride, uint64_t rows, double *ret_totals,
                                        cudaStream_t stream) {
  if (rows == 0) {
    return QDP_OK;
  }
  const unsigned threads = 128;
  uint64_t blocks = (rows + threads - 1) / threads;
  if (blocks > 0x7fffffffu) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  norm_combine_kernel<<<(unsigned)blocks, threads, 0, stream>>>(parts, n, log2_total, single, vals,
                                                                row_stride, rows, ret_totals);
  return cudaGetLastError() == cudaSuccess ? QDP_OK : QDP_ERR_CUDA;
}
