/* runtime_fixture.c — the helpers of runtime_fixture.h. */
#include "common.h"
#include "runtime_fixture.h"

double *random_values(uint64_t count, uint64_t seed) {
  double *x = qdpt_xmalloc(count * sizeof *x);
  qdpt_rng_seed(seed);
  for (uint64_t i = 0; i < count; i++) {
    x[i] = qdpt_rng_uniform(-2.0, 2.0);
  }
  return x;
}
