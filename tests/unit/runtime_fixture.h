/* runtime_fixture.h — what the runtime's CPU tests (test_runtime*.c) share besides
 * common_runtime.h: reproducible input values (runtime_fixture.c); and the function of each part
 * that adds its tests to a tcase of test_runtime.c's suite.
 */
#ifndef QDP_TESTS_RUNTIME_FIXTURE_H
#define QDP_TESTS_RUNTIME_FIXTURE_H

#include <check.h>
#include <stdint.h>

#define GIB (UINT64_C(1) << 30)

/* `count` values in [-2, 2) from the common stream seeded with `seed` (qdpt_xmalloc'd). */
double *random_values(uint64_t count, uint64_t seed);

/* Each adds tests of the tcase its name begins with to tc. */
void runtime_add_mesh(TCase *tc); /* test_runtime_mesh.c */
void runtime_add_workers(TCase *tc);
void runtime_add_norm(TCase *tc);
void runtime_add_encode_sharding(TCase *tc); /* test_runtime_encode.c */
void runtime_add_encode_refusals(TCase *tc); /* test_runtime_refusals.c */
void runtime_add_encode_output(TCase *tc);   /* test_runtime_output.c */
void runtime_add_encode_ranks(TCase *tc);    /* test_runtime_ranks.c */
void runtime_add_kernel(TCase *tc);          /* test_runtime_kernel.c */
void runtime_add_measure(TCase *tc);         /* test_runtime_measure.c */

#endif
