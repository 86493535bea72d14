/* runtime_cuda_fixture.h — what the runtime's CUDA tests (test_runtime_cuda*.c) share besides
 * common_runtime.h: the staging sizes, deterministic input values, an encode read back whole, and
 * the comparison of a state with its CPU reference that prints its numbers
 * (runtime_cuda_fixture.c); and the function of each part that adds its tests to a tcase of
 * test_runtime_cuda.c's suite.
 */
#ifndef QDP_TESTS_RUNTIME_CUDA_FIXTURE_H
#define QDP_TESTS_RUNTIME_CUDA_FIXTURE_H

#include <check.h>
#include <stdint.h>

#include "plan/plan.h"
#include "runtime/runtime.h"

#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

/* Staging of 1 MiB per device: 512 KiB slots, so a slot holds 2^16 float64 or 2^17 float32
 * values and any larger input goes through many chunks. */
#define SMALL_STAGING MIB

/* Monotonic milliseconds. */
double now_ms(void);

/* Encodes and reads the whole state back (qdpt_read_all: poisoned first); the state held its plan's
 * bytes and the mesh is idle after it. */
void *encode_all(struct runtime_mesh *m, const struct plan *p, const struct runtime_input *in,
                 double *ret_ms);

/* Deterministic values in [-2, 2) (a 64-bit LCG: the same on every machine). */
void fill_values(double *x, uint64_t count, uint64_t seed);

/* Input of `count` values of dtype `in` from the values in x64. */
void *as_dtype(const double *x64, uint64_t count, qdp_dtype in);

struct compare {
  uint64_t values;    /* real numbers compared (2 per amplitude) */
  uint64_t identical; /* of which bit-identical */
  double worst;       /* largest |got - ref| / max(|ref|, 2^(-n/2)) */
};

/* got vs ref, `amps` complex values of `out`: each real part within `tol` relative to the larger
 * of |ref| and the amplitude scale of a normalized 2^n state, 2^(-n/2) (a value near zero has no
 * meaningful relative error of its own). */
struct compare compare_states(const void *got, const void *ref, uint64_t amps, qdp_dtype out,
                              uint32_t qubits, double tol, const char *what);

/* Sample values for an encoding: basis indices spread over [0, 2^n), else values in [-2, 2). */
double *values_for(qdp_encoding enc, uint32_t n, uint64_t rows, uint64_t cols, uint64_t seed);

/* Each adds tests of the tcase its name begins with to tc. */
void runtime_cuda_add_mesh(TCase *tc);           /* test_runtime_cuda_mesh.c */
void runtime_cuda_add_encode_one_gpu(TCase *tc); /* test_runtime_cuda_encode.c */
void runtime_cuda_add_encode_shards(TCase *tc);  /* test_runtime_cuda_mesh.c */
void runtime_cuda_add_encode_staging(TCase *tc); /* test_runtime_cuda_memory.c */
void runtime_cuda_add_refusals(TCase *tc);
void runtime_cuda_add_memory(TCase *tc);
void runtime_cuda_add_read(TCase *tc);
void runtime_cuda_add_kernel(TCase *tc); /* test_runtime_cuda_kernel.c */
void runtime_cuda_add_measure(TCase *tc); /* test_runtime_cuda_measure.c */

#endif
