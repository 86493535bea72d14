/* qdp_defs.h — the vocabulary qdp's daemon, kernels and client library share: status codes,
 * encodings and element types. Plain C99, no dependencies, safe to include anywhere.
 *
 * Status numbers are part of the ABI and the wire contract: 1..16 are the gRPC status codes with
 * the same meaning; 100 and above are local causes (sent over the wire as INTERNAL with the detail
 * in the message). Numbers are append-only and never reused. Encodings and dtypes use the numbers
 * of the matching enums in proto/qdp.proto.
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
  QDP_ERR_CUDA = 100,  /* a CUDA runtime call failed; cause = cudaError_t */
  QDP_ERR_NCCL = 101,  /* cause = ncclResult_t */
  QDP_ERR_MPI = 102,   /* cause = MPI error class */
  QDP_ERR_SYSTEM = 103 /* a system call failed; cause = errno */
} qdp_status;

/* Static text, never NULL; "unknown status" for a value not listed above. */
const char *qdp_strerror(qdp_status s);
/* The symbol name ("QDP_ERR_NOT_FOUND"), or "QDP_ERR_UNKNOWN_CODE". */
const char *qdp_status_name(qdp_status s);

/* The encodings, one row each: the one table of them. The enum below, qdp_encoding_name and
 * qdp_values_per_sample are made from it here, and common/qdp_encodings.h's descriptors (what the
 * planner, the runtime, the metrics and qdpctl read) there; each backend's kernels are in its own
 * table indexed by the encoding (kernels/qdpk.h, kernels/qdpk_cuda.h). Adding an encoding is a
 * row, its number in proto/qdp.proto's Encoding, its kernels and its tests (docs/design.md).
 * Columns of X(...):
 *   ID, number  QDP_ENCODING_<ID> = number, as proto/qdp.proto's Encoding numbers it
 *   name        what clients, logs and metrics call it
 *   values      a sample's values for n qubits (a C expression of uint64_t n)
 *   layout      AMPLITUDES: one value per amplitude index, 1 to `values` of them (the rest zero),
 *               each shard reading its own range; PARAMETERS: exactly `values`, read by every shard
 *   states      REAL or COMPLEX amplitudes
 *   reduction   NORM: one reduction of partial sums over each sample; NONE
 *   exchange    WHT: Walsh-Hadamard stages that exchange over the global bits; NONE
 *   check       what is refused before the kernels run: FINITE (values the output precision
 *               cannot take), FINITE_SUM (those, and sums that could overflow it), INDEX (what is
 *               not a basis index); NONE (the NORM reduction finds non-finite values and zero)
 *   dtypes      input dtypes taken: FLOAT (float32, float64), FLOAT_INT64 (and int64)
 *   count, noun a sample's values as help texts give them ("N + N(N-1)/2" "coefficients") */
/* clang-format off */
#define QDP_ENCODINGS(X) \
  X(AMPLITUDE, 1, "amplitude", (uint64_t)1 << n, AMPLITUDES, REAL, NORM, NONE, NONE, FLOAT, \
    "L <= 2^N", "values") \
  X(ANGLE, 2, "angle", n, PARAMETERS, REAL, NONE, NONE, FINITE, FLOAT, "N", "angles") \
  X(BASIS, 3, "basis", 1, PARAMETERS, REAL, NONE, NONE, INDEX, FLOAT_INT64, "1", "index") \
  X(IQP, 4, "iqp", n + n * (n - 1) / 2, PARAMETERS, COMPLEX, NONE, WHT, FINITE_SUM, FLOAT, \
    "N + N(N-1)/2", "coefficients") \
  X(IQP_Z, 5, "iqp-z", n, PARAMETERS, COMPLEX, NONE, WHT, FINITE_SUM, FLOAT, "N", \
    "coefficients") \
  X(PHASE, 6, "phase", n, PARAMETERS, COMPLEX, NONE, NONE, FINITE, FLOAT, "N", "phases")
/* clang-format on */

typedef enum qdp_encoding {
  QDP_ENCODING_UNSPECIFIED = 0,
#define QDP_ENCODING_ENUM_(ID, number, ...) QDP_ENCODING_##ID = number,
  QDP_ENCODINGS(QDP_ENCODING_ENUM_)
#undef QDP_ENCODING_ENUM_
} qdp_encoding;

/* "amplitude", "angle", "basis", "iqp", "iqp-z", "phase"; NULL for anything else. */
const char *qdp_encoding_name(qdp_encoding e);
/* Inverse of qdp_encoding_name; QDP_ENCODING_UNSPECIFIED when the name is unknown. */
qdp_encoding qdp_encoding_from_name(const char *name);

/* Input values each sample of `e` takes for n qubits (the table's `values`): amplitude 2^n at
 * most (any 1..2^n values are accepted), angle, phase and iqp-z n, iqp n + n(n-1)/2, basis 1. 0
 * for an unknown encoding and outside 1..63 qubits, where no state exists (2^n amplitudes must fit
 * 64 bits). Inline so the daemon's planner and the kernels state the rule once without linking
 * anything. */
static inline uint64_t qdp_values_per_sample(qdp_encoding e, uint32_t qubits) {
  const uint64_t n = qubits;
  if (qubits < 1 || qubits > 63) {
    return 0;
  }
  switch (e) {
#define QDP_VALUES_CASE_(ID, number, name, values, ...) \
  case QDP_ENCODING_##ID: \
    return values;
    QDP_ENCODINGS(QDP_VALUES_CASE_)
#undef QDP_VALUES_CASE_
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
