/* basis_fault.h — the fault of one basis index, shared by the CPU twin (cpu/checks.c) and the CUDA
 * check (checks.cu) so that both report the same fault for the same value.
 *
 * Faults are checked in the order of enum qdpk_basis_fault: a value both fractional and negative
 * (-1.5) is not an integer; -0.0 is the index 0. Pure functions; host and device.
 */
#ifndef QDPK_BASIS_FAULT_H
#define QDPK_BASIS_FAULT_H

#include <math.h>
#include <stdint.h>

#include "qdpk.h"

#ifdef __CUDACC__
#define QDPK_HOST_DEVICE __host__ __device__
#else
#define QDPK_HOST_DEVICE
#endif

static inline QDPK_HOST_DEVICE enum qdpk_basis_fault qdpk_basis_fault_real(double v,
                                                                           uint32_t qubits) {
  if (!isfinite(v)) {
    return QDPK_BASIS_NOT_FINITE;
  }
  if (v != trunc(v)) {
    return QDPK_BASIS_NOT_INTEGER;
  }
  if (v < 0) {
    return QDPK_BASIS_NEGATIVE;
  }
  if (qubits < 64 && v >= ldexp(1.0, (int)qubits)) {
    return QDPK_BASIS_TOO_LARGE;
  }
  return QDPK_BASIS_OK;
}

static inline QDPK_HOST_DEVICE enum qdpk_basis_fault qdpk_basis_fault_int(int64_t v,
                                                                          uint32_t qubits) {
  if (v < 0) {
    return QDPK_BASIS_NEGATIVE;
  }
  /* For 63 qubits and more every non-negative int64 is in range. */
  if (qubits < 63 && (uint64_t)v >= ((uint64_t)1 << qubits)) {
    return QDPK_BASIS_TOO_LARGE;
  }
  return QDPK_BASIS_OK;
}

#endif /* QDPK_BASIS_FAULT_H */
