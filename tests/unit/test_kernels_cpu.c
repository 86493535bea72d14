/* test_kernels_cpu.c — the CPU twins of the encode kernels (kernels/cpu) against hand-computed
 * values, direct sums written out here, and their own one-span results for sharded launches.
 * Everything the sharding contract promises (sumsq for any partition, every amplitude a function
 * of its global index, wht across shards) is compared bit for bit.
 *
 * The suite; its tests are in one file per encoding family: test_kernels_cpu_amplitude.c (values
 * per sample, sumsq, amplitude), test_kernels_cpu_closed.c (angle, phase, basis),
 * test_kernels_cpu_iqp.c (wht, butterfly, iqp) and test_kernels_cpu_checks.c (the kernels' input
 * checks, the norm's scaled fallback, misaligned input), with what they share in
 * kernels_cpu_fixture.h.
 */
#include <check.h>

#include "common.h"
#include "kernels_cpu_fixture.h"

static Suite *kernels_cpu_suite(void) {
  Suite *s = suite_create("kernels_cpu");
  TCase *tc;

  tc = tcase_create("params_per_sample");
  kernels_cpu_add_params_per_sample(tc);
  suite_add_tcase(s, tc);

  tc = tcase_create("sumsq");
  tcase_set_timeout(tc, 60);
  kernels_cpu_add_sumsq(tc);
  suite_add_tcase(s, tc);

  tc = tcase_create("amplitude");
  kernels_cpu_add_amplitude(tc);
  suite_add_tcase(s, tc);

  tc = tcase_create("angle");
  tcase_set_timeout(tc, 60);
  kernels_cpu_add_angle(tc);
  suite_add_tcase(s, tc);

  tc = tcase_create("phase");
  tcase_set_timeout(tc, 60);
  kernels_cpu_add_phase(tc);
  suite_add_tcase(s, tc);

  tc = tcase_create("basis");
  kernels_cpu_add_basis(tc);
  suite_add_tcase(s, tc);

  tc = tcase_create("wht");
  kernels_cpu_add_wht(tc);
  suite_add_tcase(s, tc);

  tc = tcase_create("iqp");
  tcase_set_timeout(tc, 60);
  kernels_cpu_add_iqp(tc);
  suite_add_tcase(s, tc);

  tc = tcase_create("checks");
  kernels_cpu_add_checks(tc);
  suite_add_tcase(s, tc);

  tc = tcase_create("fallback_and_alignment");
  kernels_cpu_add_fallback_and_alignment(tc);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return qdpt_run_suite(kernels_cpu_suite(), CK_FORK_GETENV);
}
