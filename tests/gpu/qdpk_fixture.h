/* qdpk_fixture.h — what the CUDA kernels' tests (test_qdpk*.c) share: the tolerances, device
 * buffers poisoned before every launch, launches logged with the time since the start and checked,
 * random inputs from the common stream, and the comparisons with the CPU twin (qdpk_fixture.c);
 * and the function of each part that adds its tests to a tcase of test_qdpk.c's suite.
 */
#ifndef QDP_TESTS_QDPK_FIXTURE_H
#define QDP_TESTS_QDPK_FIXTURE_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "qdpk.h"

/* Of the largest reference magnitude: complex128, complex64. */
#define TOL64 1e-12
#define TOL32 1e-5

/* The bytes of one real value of t, one complex value of t, one input value of `in`. */
size_t real_size(qdp_dtype t);
size_t cplx_size(qdp_dtype t);
size_t in_size(qdp_dtype in);

/* cudaMalloc that fails the test (0 bytes gives 1); a copy of host memory on the device; a copy
 * back. */
void *dmalloc(size_t bytes);
void *to_device(const void *host, size_t bytes);
void from_device(void *host, const void *dev, size_t bytes);

/* All-ones bytes are a NaN in float and double: a value left unwritten cannot pass. */
void poison_device(void *dev, size_t bytes);

void poison_host(void *host, size_t bytes);

/* Monotonic seconds, and those at the start of the run (main sets it). */
double seconds(void);

extern double t_start;

/* Every launch is logged with the time since the start, so a log shows where a run spends it. */
void expect_launch(qdp_status rc, const char *what);

/* Random real inputs of type t: values in [lo, hi), scaled by 2^-8..2^8 when `spread` so that
 * summation order shows in the low bits. */
void *random_reals(qdp_dtype t, uint64_t n, double lo, double hi, int spread);

/* Part `part` (0 real, 1 imaginary) of complex value i of p. */
double get_re(const void *p, qdp_dtype out, uint64_t i, int part);

/* Largest |gpu - cpu| over n complex values, relative to the largest |cpu|; fails on a NaN the
 * reference does not have (an amplitude left poisoned). Plain comparisons in the loop and one
 * assertion at the end: every passing Check assertion costs a system call. */
void expect_close(const void *gpu, const void *cpu, qdp_dtype out, uint64_t n, const char *what);

/* memcmp of `bytes`, naming the first differing element of `elem` bytes. */
void expect_same_bits(const void *gpu, const void *cpu, size_t bytes, size_t elem,
                      const char *what);

/* Each adds the tests of one tcase (its name) to tc. */
void qdpk_add_sumsq(TCase *tc); /* test_qdpk_norm.c */
void qdpk_add_amplitude(TCase *tc);
void qdpk_add_angle(TCase *tc); /* test_qdpk_closed.c */
void qdpk_add_phase(TCase *tc);
void qdpk_add_basis(TCase *tc);
void qdpk_add_iqp_phases(TCase *tc);
void qdpk_add_iqp(TCase *tc);
void qdpk_add_wht(TCase *tc); /* test_qdpk_wht.c */
void qdpk_add_butterfly(TCase *tc);
void qdpk_add_find_nonfinite(TCase *tc); /* test_qdpk_checks.c */
void qdpk_add_check_basis(TCase *tc);
void qdpk_add_check_params(TCase *tc);
void qdpk_add_arguments(TCase *tc);

#endif
