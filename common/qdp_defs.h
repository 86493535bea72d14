/* qdp_defs.h — the vocabulary qdp's daemon, kernels and client library share: status codes,
 * encodings and element types. Plain C99, no dependencies, safe to include anywhere.
 *
 * Status numbers are part of the ABI and the wire contract: 1..16 are the gRPC status codes with the
 * same meaning; 100 and above are local causes (sent over the wire as INTERNAL with the detail in the
 * message). Numbers are append-only and never reused. Encodings and dtypes use the numbers of the
 * matching enums in proto/qdp.proto.
 */
#ifndef QDP_DEFS_H
#define QDP_DEFS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qdp_status {
  QDP_OK = 0,
  QDP_ERR_CANCELLED = 1,
  QDP_ERR_UNKNOWN = 2,
  QDP_ERR_INVALID_ARGUMENT = 3,
  QDP_ERR_DEADLINE_EXCEEDED = 4,
  QDP_ERR_NOT_FOUND = 5,
  QDP_ERR_ALREADY_EXISTS = 6,
  QDP_ERR_PERMISSION_DENIED = 7,
  QDP_ERR_RESOURCE_EXHAUSTED = 8,
  QDP_ERR_FAILED_PRECONDITION = 9,
  QDP_ERR_ABORTED = 10,
  QDP_ERR_OUT_OF_RANGE = 11,
  QDP_ERR_UNIMPLEMENTED = 12,
  QDP_ERR_INTERNAL = 13,
  QDP_ERR_UNAVAILABLE = 14,
  QDP_ERR_DATA_LOSS = 15,
  QDP_ERR_UNAUTHENTICATED = 16,
  QDP_ERR_CUDA = 100, /* a CUDA runtime call failed; cause = cudaError_t */
  QDP_ERR_NCCL = 101, /* cause = ncclResult_t */
  QDP_ERR_MPI = 102,  /* cause = MPI error class */
  QDP_ERR_SYSTEM = 103 /* a system call failed; cause = errno */
} qdp_status;

/* Static text, never NULL; "unknown status" for a value not listed above. */
const char *qdp_strerror(qdp_status s);
/* The symbol name ("QDP_ERR_NOT_FOUND"), or "QDP_ERR_UNKNOWN_CODE". */
const char *qdp_status_name(qdp_status s);

typedef enum qdp_encoding {
  QDP_ENCODING_UNSPECIFIED = 0,
  QDP_ENCODING_AMPLITUDE = 1, /* L <= 2^n values per sample, normalized, zero padded */
  QDP_ENCODING_ANGLE = 2,     /* n angles: prod_k (b_k ? sin x_k : cos x_k) */
  QDP_ENCODING_BASIS = 3,     /* one index per sample */
  QDP_ENCODING_IQP = 4,       /* n + n(n-1)/2 coefficients */
  QDP_ENCODING_IQP_Z = 5,     /* n coefficients */
  QDP_ENCODING_PHASE = 6      /* n phases: 2^-n/2 e^{i sum_k x_k b_k} */
} qdp_encoding;

/* "amplitude", "angle", "basis", "iqp", "iqp-z", "phase"; NULL for anything else. */
const char *qdp_encoding_name(qdp_encoding e);
/* Inverse of qdp_encoding_name; QDP_ENCODING_UNSPECIFIED when the name is unknown. */
qdp_encoding qdp_encoding_from_name(const char *name);

/* Input values each sample of `e` takes for n qubits: amplitude 2^n at most (any 1..2^n values
 * are accepted), angle, phase and iqp-z n, iqp n + n(n-1)/2, basis 1. 0 for an unknown encoding
 * and outside 1..63 qubits, where no state exists (2^n amplitudes must fit 64 bits). Inline so the
 * daemon's planner and the kernels state the rule once without linking anything. */
static inline uint64_t qdp_values_per_sample(qdp_encoding e, uint32_t qubits) {
  const uint64_t n = qubits;
  if (qubits < 1 || qubits > 63) {
    return 0;
  }
  switch (e) {
  case QDP_ENCODING_AMPLITUDE:
    return (uint64_t)1 << n;
  case QDP_ENCODING_ANGLE:
  case QDP_ENCODING_PHASE:
  case QDP_ENCODING_IQP_Z:
    return n;
  case QDP_ENCODING_IQP:
    return n + n * (n - 1) / 2;
  case QDP_ENCODING_BASIS:
    return 1;
  default:
    return 0;
  }
}

typedef enum qdp_dtype {
  QDP_DTYPE_UNSPECIFIED = 0,
  QDP_DTYPE_FLOAT32 = 1,
  QDP_DTYPE_FLOAT64 = 2,
  QDP_DTYPE_COMPLEX64 = 3,  /* interleaved float re, im */
  QDP_DTYPE_COMPLEX128 = 4, /* interleaved double re, im */
  QDP_DTYPE_INT64 = 5       /* basis indices only */
} qdp_dtype;

/* "float32", "float64", "complex64", "complex128", "int64"; NULL for anything else. */
const char *qdp_dtype_name(qdp_dtype t);
qdp_dtype qdp_dtype_from_name(const char *name);
/* Bytes per element; 0 for an unknown dtype. */
unsigned qdp_dtype_size(qdp_dtype t);

#ifdef __cplusplus
}
#endif
#endif /* QDP_DEFS_H */
