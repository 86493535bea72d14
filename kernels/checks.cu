/* checks.cu — input checks for inputs that already live on the GPU (CUDA twins of
 * qdpk_cpu_find_nonfinite, qdpk_cpu_check_basis and qdpk_cpu_check_params): a device pointer
 * handed in by a client must be checked where it is, without a copy to the host.
 *
 * Each check reports the first offending position, as the CPU twin does: threads that find one
 * take the minimum with a 64-bit integer atomicMin on the result word (integer atomics are exact
 * and order-free; no float is ever accumulated). The launcher sets the word to "none" with a
 * one-thread kernel, scans, and a one-thread kernel turns the word into the reported values. Three
 * launches on one stream, no host synchronization.
 */
#include "basis_fault.h"
#include "qdpk_cuda_internal.cuh"

namespace {

using namespace qdpk;

constexpr unsigned long long NONE = ~0ull;
/* Values per thread in the scan: 8 loads in flight per thread over a full grid. */
constexpr int SCAN_PER_THREAD = 8;

__global__ void set_none_kernel(unsigned long long *word) {
  *word = NONE;
}

template <typename T>
__global__ void __launch_bounds__(QDPK_THREADS)
    nonfinite_kernel(const T *__restrict__ x, uint64_t count, uint64_t nbx,
                     unsigned long long *first) {
  for (uint64_t bx = blockIdx.x; bx < nbx; bx += gridDim.x) {
    const uint64_t base = bx * (uint64_t)(QDPK_THREADS * SCAN_PER_THREAD);
    /* A block wholly past an index already found cannot lower the minimum. */
    if (*(volatile unsigned long long *)first < base) {
      return;
    }
    T v[SCAN_PER_THREAD];
#pragma unroll
    for (int k = 0; k < SCAN_PER_THREAD; k++) {
      const uint64_t i = base + threadIdx.x + (uint64_t)k * QDPK_THREADS;
      v[k] = i < count ? x[i] : (T)0;
    }
#pragma unroll
    for (int k = 0; k < SCAN_PER_THREAD; k++) {
      if (!isfinite(v[k])) {
        atomicMin(first, (unsigned long long)(base + threadIdx.x + (uint64_t)k * QDPK_THREADS));
        break; /* later k are higher indices */
      }
    }
  }
}

__global__ void nonfinite_report_kernel(const unsigned long long *word, int *found,
                                        uint64_t *index) {
  unsigned long long w = *word;
  *found = w != NONE;
  *index = w != NONE ? (uint64_t)w : 0;
}

__device__ __forceinline__ int basis_fault_of(float v, uint32_t qubits) {
  return qdpk_basis_fault_real((double)v, qubits);
}
__device__ __forceinline__ int basis_fault_of(double v, uint32_t qubits) {
  return qdpk_basis_fault_real(v, qubits);
}
__device__ __forceinline__ int basis_fault_of(int64_t v, uint32_t qubits) {
  return qdpk_basis_fault_int(v, qubits);
}

/* The key row * 8 + fault orders by row first, so the minimum is the first bad row, with its
 * fault in the low 3 bits. */
template <typename T>
__global__ void __launch_bounds__(QDPK_THREADS)
    basis_check_kernel(const T *__restrict__ x, uint64_t in_stride, uint64_t rows, uint32_t qubits,
                       unsigned long long *first) {
  for (uint64_t r = blockIdx.x * (uint64_t)QDPK_THREADS + threadIdx.x; r < rows;
       r += (uint64_t)gridDim.x * QDPK_THREADS) {
    int f = basis_fault_of(x[r * in_stride], qubits);
    if (f != QDPK_BASIS_OK) {
      atomicMin(first, (unsigned long long)((r << 3) | (uint64_t)f));
      return; /* this thread's later rows are higher */
    }
  }
}

__global__ void basis_report_kernel(unsigned long long *word, int *fault) {
  unsigned long long w = *word;
  *fault = w == NONE ? QDPK_BASIS_OK : (int)(w & 7);
  *word = w == NONE ? 0 : w >> 3;
}

/* One row per thread: its values in index order, then (summed) its sum of |values| in double in
 * index order, the CPU twin's order, so the sum and its comparison have the CPU's bits. The key
 * (row * (cols + 1) + col) * 4 + fault orders by row, then by value, the sum last. */
template <typename T>
__global__ void __launch_bounds__(QDPK_THREADS)
    params_check_kernel(const T *__restrict__ x, uint64_t in_stride, uint64_t cols, uint64_t rows,
                        int to_float, int summed, double limit, unsigned long long *first) {
  for (uint64_t r = blockIdx.x * (uint64_t)QDPK_THREADS + threadIdx.x; r < rows;
       r += (uint64_t)gridDim.x * QDPK_THREADS) {
    const uint64_t base = r * (cols + 1);
    double sum = 0.0;
    int fault = QDPK_PARAM_OK;
    uint64_t col = 0;
    for (uint64_t c = 0; c < cols && fault == QDPK_PARAM_OK; c++) {
      const double v = (double)x[r * in_stride + c];
      if (!isfinite(v)) {
        fault = QDPK_PARAM_NOT_FINITE;
      } else if (to_float && isinf((float)v)) {
        fault = QDPK_PARAM_NOT_FLOAT32;
      } else {
        sum = __dadd_rn(sum, fabs(v));
      }
      col = c;
    }
    if (fault == QDPK_PARAM_OK && summed && sum > limit) {
      fault = QDPK_PARAM_SUM_OVERFLOW;
      col = cols;
    }
    if (fault != QDPK_PARAM_OK) {
      atomicMin(first, (unsigned long long)(((base + col) << 2) | (uint64_t)fault));
      return; /* this thread's later rows are higher */
    }
  }
}

__global__ void params_report_kernel(const unsigned long long *word, uint64_t cols, int *fault,
                                     uint64_t *row, uint64_t *col) {
  const unsigned long long w = *word;
  const uint64_t at = w == NONE ? 0 : (uint64_t)(w >> 2);
  *fault = w == NONE ? QDPK_PARAM_OK : (int)(w & 3);
  *row = at / (cols + 1);
  *col = at % (cols + 1);
}

/* One thread: the result word starts at "none". */
qdp_status set_none(unsigned long long *word, cudaStream_t stream) {
  set_none_kernel<<<1, 1, 0, stream>>>(word);
  return launched();
}

template <typename T>
qdp_status scan_params(const T *x, uint64_t in_stride, uint64_t cols, uint64_t rows, qdp_dtype out,
                       int summed, int *ret_fault, uint64_t *ret_row, uint64_t *ret_col,
                       cudaStream_t stream) {
  /* ret_col holds the result word until the report splits it. */
  unsigned long long *word = reinterpret_cast<unsigned long long *>(ret_col);
  qdp_status rc = set_none(word, stream);
  if (rc != QDP_OK) {
    return rc;
  }
  if (rows > 0) {
    uint64_t nbx = blocks_for(rows, 1);
    int to_float = out == QDP_DTYPE_COMPLEX64 && sizeof(T) == sizeof(double);
    /* 256 threads, one row each (at most 2016 values: a row of parameters, not a state); folded
     * past the grid limit. */
    params_check_kernel<T><<<grid_x(nbx), QDPK_THREADS, 0, stream>>>(
        x, in_stride, cols, rows, to_float, summed, qdpk_param_sum_limit(out), word);
    if ((rc = launched()) != QDP_OK) {
      return rc;
    }
  }
  params_report_kernel<<<1, 1, 0, stream>>>(word, cols, ret_fault, ret_row, ret_col);
  return launched();
}

template <typename T>
qdp_status scan_nonfinite(const T *x, uint64_t count, int *ret_found, uint64_t *ret_index,
                          cudaStream_t stream) {
  unsigned long long *word = reinterpret_cast<unsigned long long *>(ret_index);
  qdp_status rc = set_none(word, stream);
  if (rc != QDP_OK) {
    return rc;
  }
  if (count > 0) {
    uint64_t nbx = blocks_for(count, SCAN_PER_THREAD);
    /* 256 threads x 8 values, coalesced scalar loads over a full grid (a read-only pass, bound by
     * memory bandwidth); folded past 2^31 - 1 blocks. */
    nonfinite_kernel<T><<<grid_x(nbx), QDPK_THREADS, 0, stream>>>(x, count, nbx, word);
    if ((rc = launched()) != QDP_OK) {
      return rc;
    }
  }
  /* One thread: the word becomes (found, index). */
  nonfinite_report_kernel<<<1, 1, 0, stream>>>(word, ret_found, ret_index);
  return launched();
}

template <typename T>
qdp_status scan_basis(const T *x, uint64_t in_stride, uint64_t rows, uint32_t qubits,
                      int *ret_fault, uint64_t *ret_row, cudaStream_t stream) {
  unsigned long long *word = reinterpret_cast<unsigned long long *>(ret_row);
  qdp_status rc = set_none(word, stream);
  if (rc != QDP_OK) {
    return rc;
  }
  if (rows > 0) {
    uint64_t nbx = blocks_for(rows, 1);
    /* 256 threads, one row each (a strided gather of one value per row); folded past the grid
     * limit. */
    basis_check_kernel<T>
        <<<grid_x(nbx), QDPK_THREADS, 0, stream>>>(x, in_stride, rows, qubits, word);
    if ((rc = launched()) != QDP_OK) {
      return rc;
    }
  }
  basis_report_kernel<<<1, 1, 0, stream>>>(word, ret_fault);
  return launched();
}

}  // namespace

extern "C" qdp_status qdpk_find_nonfinite(const void *x, qdp_dtype in, uint64_t count,
                                          int *ret_found, uint64_t *ret_index,
                                          cudaStream_t stream) {
  if (!(is_real_dtype(in) || in == QDP_DTYPE_INT64) || ret_found == NULL || ret_index == NULL ||
      (count > 0 && x == NULL) || !aligned(ret_index, 8)) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  switch (in) {
  case QDP_DTYPE_FLOAT32:
    return scan_nonfinite(static_cast<const float *>(x), count, ret_found, ret_index, stream);
  case QDP_DTYPE_FLOAT64:
    return scan_nonfinite(static_cast<const double *>(x), count, ret_found, ret_index, stream);
  default:
    /* int64 values are always finite: only the "none" result is written. */
    return scan_nonfinite(static_cast<const double *>(NULL), 0, ret_found, ret_index, stream);
  }
}

extern "C" qdp_status qdpk_check_basis(const void *x, qdp_dtype in, uint64_t in_stride,
                                       uint64_t rows, uint32_t qubits, int *ret_fault,
                                       uint64_t *ret_row, cudaStream_t stream) {
  if (!(is_real_dtype(in) || in == QDP_DTYPE_INT64) || ret_fault == NULL || ret_row == NULL ||
      (rows > 0 && x == NULL) || !aligned(ret_row, 8)) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  switch (in) {
  case QDP_DTYPE_FLOAT32:
    return scan_basis(static_cast<const float *>(x), in_stride, rows, qubits, ret_fault, ret_row,
                      stream);
  case QDP_DTYPE_FLOAT64:
    return scan_basis(static_cast<const double *>(x), in_stride, rows, qubits, ret_fault, ret_row,
                      stream);
  default:
    return scan_basis(static_cast<const int64_t *>(x), in_stride, rows, qubits, ret_fault, ret_row,
                      stream);
  }
}

extern "C" qdp_status qdpk_check_params(const void *x, qdp_dtype in, uint64_t in_stride,
                                        uint64_t cols, uint64_t rows, qdp_dtype out, int summed,
                                        int *ret_fault, uint64_t *ret_row, uint64_t *ret_col,
                                        cudaStream_t stream) {
  if (!is_real_dtype(in) || !is_out_dtype(out) || ret_fault == NULL || ret_row == NULL ||
      ret_col == NULL || (rows > 0 && cols > 0 && x == NULL) || !aligned(ret_col, 8)) {
    return QDP_ERR_INVALID_ARGUMENT;
  }
  if (in == QDP_DTYPE_FLOAT32) {
    return scan_params(static_cast<const float *>(x), in_stride, cols, rows, out, summed, ret_fault,
                       ret_row, ret_col, stream);
  }
  return scan_params(static_cast<const double *>(x), in_stride, cols, rows, out, summed, ret_fault,
                     ret_row, ret_col, stream);
}
