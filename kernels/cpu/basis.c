/* basis.c — basis encoding: 1 at the sample's index, 0 elsewhere (CPU twin of basis.cu). The
 * indices were checked by qdpk_cpu_check_basis, so each converts exactly to an integer < 2^n.
 */
#include <stdint.h>
#include <string.h>

#include "cpu_internal.h"
#include "qdpk.h"

static uint64_t basis_index(const void *x, qdp_dtype in, uint64_t i) {
  if (in == QDP_DTYPE_INT64) {
    return (uint64_t)cpu_load_i64(x, i);
  }
  return (uint64_t)cpu_load(x, in, i);
}

void qdpk_cpu_basis(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                    void *out) {
  size_t elem = s->out == QDP_DTYPE_COMPLEX64 ? 2 * sizeof(float) : 2 * sizeof(double);
  unsigned char *o = out;
  memset(o, 0, (size_t)(s->rows * s->count) * elem);
  for (uint64_t r = 0; r < s->rows; r++) {
    uint64_t idx = basis_index(x, in, r * in_stride);
    if (idx < s->first || idx - s->first >= s->count) {
      continue; /* another span owns the 1 */
    }
    uint64_t at = r * s->count + (idx - s->first);
    if (s->out == QDP_DTYPE_COMPLEX64) {
      ((float *)out)[2 * at] = 1.0f;
    } else {
      ((double *)out)[2 * at] = 1.0;
    }
  }
}
