/* Unit tests of the placement planner (daemon/plan): validation, each policy's placement, AUTO's
 * choices, per-device feasibility and its message, multi-rank worlds, and the tiling invariant over
 * many random requests. Expected values are computed by hand or by an independent formula here.
 *
 * The suite; its tests are in one file per part of the planner: test_plan_validate.c (validate.c),
 * test_plan_policies.c (the policies of plan.c), test_plan_feasible.c (feasible.c) and
 * test_plan_worlds.c (AUTO, several ranks, random worlds), with what they share in
 * plan_fixture.h. */
#include <check.h>
#include <stdlib.h>

#include "plan_fixture.h"

static Suite *plan_suite(void) {
  Suite *s = suite_create("plan");
  TCase *t = tcase_create("policies");
  plan_add_policies(t);
  suite_add_tcase(s, t);

  t = tcase_create("batch");
  plan_add_batch(t);
  suite_add_tcase(s, t);

  t = tcase_create("feasibility");
  plan_add_feasibility(t);
  suite_add_tcase(s, t);

  t = tcase_create("validation");
  plan_add_validation(t);
  suite_add_tcase(s, t);

  t = tcase_create("ranks");
  plan_add_ranks(t);
  suite_add_tcase(s, t);

  t = tcase_create("auto");
  plan_add_auto(t);
  suite_add_tcase(s, t);

  t = tcase_create("invariants");
  plan_add_invariants(t);
  tcase_set_timeout(t, 60);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(plan_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
