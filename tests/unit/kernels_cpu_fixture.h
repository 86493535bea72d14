/* kernels_cpu_fixture.h — what the CPU kernels' tests (test_kernels_cpu*.c) share: typed input
 * buffers, amplitudes read back, the tolerances and the assertions on states, and the span check
 * every sharded launch of a closed form goes through (kernels_cpu_fixture.c); and the function of
 * each part that adds its tests to a tcase of test_kernels_cpu.c's suite.
 *
 * Tolerances: 1e-5 (complex64) and 1e-12 (complex128) of the largest reference magnitude of the
 * state, the reference computed in long double from the exact input values the kernel read.
 */
#ifndef QDP_TESTS_KERNELS_CPU_FIXTURE_H
#define QDP_TESTS_KERNELS_CPU_FIXTURE_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "qdpk.h"

#define PI_L 3.141592653589793238462643383279502884L

/* The input and output types every test runs through. */
extern const qdp_dtype IN_TYPES[2];
extern const qdp_dtype OUT_TYPES[2];

/* An input buffer of type `in` holding v (rounded to float for float32). */
void *make_input(qdp_dtype in, const double *v, size_t n);

/* The value the kernel reads, exactly. */
long double in_at(const void *x, qdp_dtype in, uint64_t i);

/* The size of one amplitude of `out`, and its real and imaginary parts at index i. */
size_t cplx_size(qdp_dtype out);
double re_at(const void *o, qdp_dtype out, uint64_t i);
double im_at(const void *o, qdp_dtype out, uint64_t i);

/* The tolerance of `out` (above). */
double tol_of(qdp_dtype out);

/* Asserts |psi - ref| <= tol * max|ref| over `count` amplitudes of one row. */
void assert_state_close(const void *o, qdp_dtype out, const long double *ref_re,
                        const long double *ref_im, uint64_t count, const char *what);

/* Asserts sum |psi|^2 = 1 for each row. */
void assert_rows_normalized(const void *o, qdp_dtype out, uint64_t count, uint64_t rows);

/* Asserts two buffers of complex values are identical, naming the first differing value. */
void assert_bits_equal(const void *got, const void *want, qdp_dtype out, uint64_t count,
                       const char *what);

/* The span of `count` amplitudes from `first` of `rows` rows of a `qubits`-qubit state. */
struct qdpk_span span_of(uint32_t qubits, uint64_t first, uint64_t count, uint64_t rows,
                         qdp_dtype out);

/* A sharded launch of a closed form over one span (the kernels' common signature). */
typedef void (*span_kernel)(const struct qdpk_span *s, const void *x, qdp_dtype in,
                            uint64_t in_stride, void *out);

/* The same rows from the whole index, from 2, 4 and 8 even spans and from uneven spans: every
 * amplitude depends only on its global index, so the bits must match. */
void check_spans_bit_identical(span_kernel k, const void *x, qdp_dtype in, uint64_t stride,
                               uint32_t n, uint64_t rows, qdp_dtype out, const char *what);

/* Each adds the tests of one tcase (its name) to tc. */
void kernels_cpu_add_params_per_sample(TCase *tc); /* test_kernels_cpu_amplitude.c */
void kernels_cpu_add_sumsq(TCase *tc);
void kernels_cpu_add_amplitude(TCase *tc);
void kernels_cpu_add_angle(TCase *tc); /* test_kernels_cpu_closed.c */
void kernels_cpu_add_phase(TCase *tc);
void kernels_cpu_add_basis(TCase *tc);
void kernels_cpu_add_wht(TCase *tc); /* test_kernels_cpu_iqp.c */
void kernels_cpu_add_iqp(TCase *tc);
void kernels_cpu_add_checks(TCase *tc); /* test_kernels_cpu_checks.c */
void kernels_cpu_add_fallback_and_alignment(TCase *tc);

#endif
