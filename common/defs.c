/* The status and dtype tables behind qdp_defs.h (the encodings' are encodings.c). Shared by the
 * daemon, the kernels and libqdp. */
#include <stddef.h>
#include <string.h>

#include "qdp_defs.h"

#define QDP_STATUS_MAP(X) \
  X(QDP_OK, "ok") \
  X(QDP_ERR_CANCELLED, "cancelled") \
  X(QDP_ERR_UNKNOWN, "unknown error") \
  X(QDP_ERR_INVALID_ARGUMENT, "invalid argument") \
  X(QDP_ERR_DEADLINE_EXCEEDED, "deadline exceeded") \
  X(QDP_ERR_NOT_FOUND, "not found") \
  X(QDP_ERR_ALREADY_EXISTS, "already exists") \
  X(QDP_ERR_PERMISSION_DENIED, "permission denied") \
  X(QDP_ERR_RESOURCE_EXHAUSTED, "resource exhausted") \
  X(QDP_ERR_FAILED_PRECONDITION, "failed precondition") \
  X(QDP_ERR_ABORTED, "aborted") \
  X(QDP_ERR_OUT_OF_RANGE, "out of range") \
  X(QDP_ERR_UNIMPLEMENTED, "not implemented") \
  X(QDP_ERR_INTERNAL, "internal error") \
  X(QDP_ERR_UNAVAILABLE, "unavailable") \
  X(QDP_ERR_DATA_LOSS, "data loss") \
  X(QDP_ERR_UNAUTHENTICATED, "unauthenticated") \
  X(QDP_ERR_CUDA, "CUDA error") \
  X(QDP_ERR_NCCL, "NCCL error") \
  X(QDP_ERR_MPI, "MPI error") \
  X(QDP_ERR_SYSTEM, "system error")

const char *qdp_strerror(qdp_status s) {
#define X(code, text) \
  case code: \
    return text;
  switch (s) { QDP_STATUS_MAP(X) }
#undef X
  return "unknown status";
}

const char *qdp_status_name(qdp_status s) {
#define X(code, text) \
  case code: \
    return #code;
  switch (s) { QDP_STATUS_MAP(X) }
#undef X
  return "QDP_ERR_UNKNOWN_CODE";
}

static const char *const dtype_names[] = {
    [QDP_DTYPE_FLOAT32] = "float32",     [QDP_DTYPE_FLOAT64] = "float64",
    [QDP_DTYPE_COMPLEX64] = "complex64", [QDP_DTYPE_COMPLEX128] = "complex128",
    [QDP_DTYPE_INT64] = "int64",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The index of name in names[1..n), 0 (UNSPECIFIED) when it is not there. */
static unsigned index_of(const char *const *names, unsigned n, const char *name) {
  for (unsigned i = 1; name && i < n; i++) {
    if (strcmp(name, names[i]) == 0) {
      return i;
    }
  }
  return 0;
}

const char *qdp_dtype_name(qdp_dtype t) {
  return (unsigned)t < COUNT(dtype_names) ? dtype_names[t] : NULL;
}

qdp_dtype qdp_dtype_from_name(const char *name) {
  return (qdp_dtype)index_of(dtype_names, COUNT(dtype_names), name);
}

unsigned qdp_dtype_size(qdp_dtype t) {
  switch (t) {
  case QDP_DTYPE_FLOAT32:
    return 4;
  case QDP_DTYPE_FLOAT64:
  case QDP_DTYPE_COMPLEX64:
  case QDP_DTYPE_INT64:
    return 8;
  case QDP_DTYPE_COMPLEX128:
    return 16;
  default:
    return 0;
  }
}
