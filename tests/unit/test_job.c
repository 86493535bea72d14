/* Unit tests of the job pipeline (daemon/job) on the CPU backend, without gRPC: a world of one,
 * a mesh of host-memory devices and a store, driven through job_* as rpc/ drives it. Encodes are
 * checked against hand-computed amplitudes; ownership, budgets, data loss and the caller leaving
 * against what the store holds afterwards; and job_encode against every allocation failure
 * (alloc_shim.h): each ends in RESOURCE_EXHAUSTED with a message, leaving nothing behind.
 *
 * The suite; its tests are in test_job_encode.c (encodes, ownership, fetch, budgets, allocation
 * failures), test_job_regions.c (the caller's memory) and test_job_requests.c (what a request
 * names), with what they share in job_fixture.h. */
#include <check.h>
#include <stdlib.h>

#include "job_fixture.h"

int main(void) {
  Suite *s = suite_create("job");
  TCase *tc = tcase_create("pipeline");
  tcase_add_checked_fixture(tc, setup, teardown);
  job_add_pipeline_encode(tc);
  job_add_pipeline_leases(tc);
  job_add_pipeline_regions(tc);
  job_add_pipeline_requests(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("budget");
  tcase_add_checked_fixture(tc, setup_small_budget, teardown);
  job_add_budget(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("faults");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  job_add_faults(tc);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
