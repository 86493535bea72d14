/* Requests' fields checked before anything is planned: input shapes, upload limits, the output
 * dtype, placement, lifetimes. Pure: no pipeline state, no I/O. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "qdp_encodings.h"
#include "qdp_size.h"

/* Bytes per value of an input dtype some encoding takes (common/qdp_encodings.h); 0 for complex
 * or unknown dtypes, which no encoding takes. */
static unsigned input_size(int dtype) {
  return (unsigned)dtype < 32 && (qdp_input_dtypes() >> dtype & 1u)
             ? qdp_dtype_size((qdp_dtype)dtype)
             : 0;
}

static qdp_status bad_dtype(int dtype, const char *field, struct qdp_error *reterr) {
  char f[48], takes[128];
  snprintf(f, sizeof f, "%s.dtype", field);
  qdp_input_dtypes_text(takes, sizeof takes);
  const char *name = qdp_dtype_name((qdp_dtype)dtype);
  if (dtype == QDP_DTYPE_UNSPECIFIED) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, f,
                         "%s is unspecified; input values are %s", f, takes);
  }
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, f,
                       "%s = %s (%d) is not an input dtype; use %s", f, name ? name : "unknown",
                       dtype, takes);
}

qdp_status job_input_shape(int dtype, uint64_t rows, uint64_t cols, uint64_t nbytes,
                           const char *field, uint64_t *ret_rows, uint64_t *ret_cols,
                           struct qdp_error *reterr) {
  unsigned es = input_size(dtype);
  if (es == 0) {
    return bad_dtype(dtype, field, reterr);
  }
  if (nbytes == 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field, "%s holds no values", field);
  }
  if (nbytes % es != 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s holds %" PRIu64 " bytes, not a whole number of %u-byte %s values",
                         field, nbytes, es, qdp_dtype_name((qdp_dtype)dtype));
  }
  uint64_t values = nbytes / es;
  uint64_t r = rows ? rows : 1;
  if (cols == 0) {
    if (values % r != 0) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                           "%s holds %" PRIu64 " values, which do not split into %" PRIu64 " rows",
                           field, values, r);
    }
    *ret_rows = r;
    *ret_cols = values / r;
    return QDP_OK;
  }
  if (r > UINT64_MAX / cols || r * cols != values) {
    char f[48];
    snprintf(f, sizeof f, "%s.cols", field);
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, f,
                         "%s holds %" PRIu64 " %s values but rows * cols = %" PRIu64 " * %" PRIu64
                         " asks for another count",
                         field, values, qdp_dtype_name((qdp_dtype)dtype), r, cols);
  }
  *ret_rows = r;
  *ret_cols = cols;
  return QDP_OK;
}

qdp_status job_declared_shape(int dtype, uint64_t rows, uint64_t cols, const char *field,
                              uint64_t *ret_rows, uint64_t *ret_cols, struct qdp_error *reterr) {
  unsigned es = input_size(dtype);
  if (es == 0) {
    return bad_dtype(dtype, field, reterr);
  }
  char f[48];
  snprintf(f, sizeof f, "%s.cols", field);
  if (cols == 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, f,
                         "%s is 0: an input given by its shape alone needs its values per sample",
                         f);
  }
  uint64_t r = rows ? rows : 1;
  if (r > UINT64_MAX / cols || r * cols > UINT64_MAX / es) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, f,
                         "%s declares rows * cols = %" PRIu64 " * %" PRIu64
                         " values, more than 64 bits of bytes",
                         field, r, cols);
  }
  *ret_rows = r;
  *ret_cols = cols;
  return QDP_OK;
}

qdp_status job_upload_limit(int dtype, uint64_t rows, uint64_t cols, uint64_t max_upload_bytes,
                            uint64_t *ret_limit, bool *ret_exact, struct qdp_error *reterr) {
  unsigned es = input_size(dtype);
  if (es == 0) {
    return bad_dtype(dtype, "request.input", reterr);
  }
  if (cols == 0) {
    *ret_limit = max_upload_bytes;
    *ret_exact = false;
    return QDP_OK;
  }
  uint64_t r = rows ? rows : 1;
  if (r > UINT64_MAX / cols || r * cols > UINT64_MAX / es) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "request.input",
                         "request.input declares rows * cols = %" PRIu64 " * %" PRIu64
                         " values, more than 64 bits of bytes",
                         r, cols);
  }
  uint64_t bytes = r * cols * es;
  if (bytes > max_upload_bytes) {
    struct qdp_error e = QDP_ERROR_INIT;
    qdp_error_set(&e, QDP_ERR_RESOURCE_EXHAUSTED, "request.input",
                  "the upload declares %s (%" PRIu64 " x %" PRIu64
                  " %s) but max_upload_bytes is %s; send a .npy path or shared memory",
                  QDP_SIZE_STR(bytes), r, cols, qdp_dtype_name((qdp_dtype)dtype),
                  QDP_SIZE_STR(max_upload_bytes));
    e.need_bytes = bytes;
    e.free_bytes = max_upload_bytes;
    if (reterr) {
      *reterr = e;
    }
    return e.code;
  }
  *ret_limit = bytes;
  *ret_exact = true;
  return QDP_OK;
}

qdp_status job_output_dtype(int dtype, qdp_dtype *ret, struct qdp_error *reterr) {
  switch (dtype) {
  case QDP_DTYPE_UNSPECIFIED:
  case QDP_DTYPE_COMPLEX128:
    *ret = QDP_DTYPE_COMPLEX128;
    return QDP_OK;
  case QDP_DTYPE_COMPLEX64:
    *ret = QDP_DTYPE_COMPLEX64;
    return QDP_OK;
  default: {
    const char *name = qdp_dtype_name((qdp_dtype)dtype);
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "output_dtype",
                         "output_dtype = %s (%d) is not a state dtype; use complex64 or complex128",
                         name ? name : "unknown", dtype);
  }
  }
}

qdp_status job_placement(const struct job_placement *pl, const struct plan_device *devs, size_t n,
                         enum plan_policy *ret_policy, size_t *ret_subset, size_t *ret_count,
                         struct qdp_error *reterr) {
  *ret_policy = PLAN_AUTO;
  *ret_count = 0;
  if (!pl) {
    return QDP_OK;
  }
  if (pl->policy < PLAN_AUTO || pl->policy > PLAN_BATCH) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.policy",
                         "placement.policy = %d is not a policy (0 auto .. 5 batch)", pl->policy);
  }
  *ret_policy = (enum plan_policy)pl->policy;
  if (pl->ndevices > n) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.devices",
                         "placement.devices names %zu devices but this daemon has %zu",
                         pl->ndevices, n);
  }
  for (size_t i = 0; i < pl->ndevices; i++) {
    const char *want = pl->devices[i];
    size_t j = 0;
    while (j < n && strcmp(devs[j].name, want) != 0) {
      j++;
    }
    if (j == n) {
      char names[256] = "";
      size_t len = 0;
      for (size_t k = 0; k < n && len < sizeof names; k++) {
        len +=
            (size_t)snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "", devs[k].name);
      }
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.devices",
                           "placement.devices[%zu] = '%.64s' is not a device of this daemon (%s)",
                           i, want, names);
    }
    for (size_t k = 0; k < i; k++) {
      if (ret_subset[k] == j) {
        return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "placement.devices",
                             "placement.devices names '%.64s' twice", want);
      }
    }
    ret_subset[i] = j;
  }
  *ret_count = pl->ndevices;
  return QDP_OK;
}

uint64_t job_ttl_ms(uint64_t ttl_seconds) {
  return ttl_seconds > UINT64_MAX / 1000 ? UINT64_MAX : ttl_seconds * 1000;
}
