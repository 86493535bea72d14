/* checks.c — the input checks the runtime runs before a launch (CPU twins of checks.cu). They scan
 * in index order and stop at the first problem, so the position reported is the first one, as the
 * user would look for it.
 */
#include <math.h>
#include <stdint.h>

#include "basis_fault.h"
#include "cpu_internal.h"
#include "qdpk.h"

int qdpk_cpu_find_nonfinite(const void *x, qdp_dtype in, uint64_t count, uint64_t *ret_index) {
  /* int64 values are always finite. */
  if (in != QDP_DTYPE_FLOAT32 && in != QDP_DTYPE_FLOAT64) {
    return 0;
  }
  for (uint64_t i = 0; i < count; i++) {
    if (!isfinite(cpu_load(x, in, i))) {
      *ret_index = i;
      return 1;
    }
  }
  return 0;
}

double qdpk_cpu_absmax(const void *x, qdp_dtype in, uint64_t count) {
  double max = 0.0;
  for (uint64_t i = 0; i < count; i++) {
    double v = fabs(cpu_load(x, in, i));
    max = v > max ? v : max; /* NaN compares false */
  }
  return max;
}

enum qdpk_param_fault qdpk_cpu_check_params(const void *x, qdp_dtype in, uint64_t in_stride,
                                            uint64_t cols, uint64_t rows, qdp_dtype out, int summed,
                                            uint64_t *ret_row, uint64_t *ret_col, double *ret_sum) {
  int to_float = out == QDP_DTYPE_COMPLEX64 && in == QDP_DTYPE_FLOAT64;
  double limit = qdpk_param_sum_limit(out);
  for (uint64_t r = 0; r < rows; r++) {
    double sum = 0.0;
    for (uint64_t c = 0; c < cols; c++) {
      double v = cpu_load(x, in, r * in_stride + c);
      enum qdpk_param_fault f = !isfinite(v)                  ? QDPK_PARAM_NOT_FINITE
                                : to_float && isinf((float)v) ? QDPK_PARAM_NOT_FLOAT32
                                                              : QDPK_PARAM_OK;
      if (f != QDPK_PARAM_OK) {
        *ret_row = r;
        *ret_col = c;
        return f;
      }
      sum += fabs(v);
    }
    if (summed && sum > limit) {
      *ret_row = r;
      *ret_col = cols;
      *ret_sum = sum;
      return QDPK_PARAM_SUM_OVERFLOW;
    }
  }
  return QDPK_PARAM_OK;
}

enum qdpk_basis_fault qdpk_cpu_check_basis(const void *x, qdp_dtype in, uint64_t in_stride,
                                           uint64_t rows, uint32_t qubits, uint64_t *ret_row) {
  for (uint64_t r = 0; r < rows; r++) {
    enum qdpk_basis_fault f;
    if (in == QDP_DTYPE_INT64) {
      f = qdpk_basis_fault_int(cpu_load_i64(x, r * in_stride), qubits);
    } else {
      f = qdpk_basis_fault_real(cpu_load(x, in, r * in_stride), qubits);
    }
    if (f != QDPK_BASIS_OK) {
      *ret_row = r;
      return f;
    }
  }
  return QDPK_BASIS_OK;
}
