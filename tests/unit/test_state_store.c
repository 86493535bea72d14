/* Unit tests for daemon/state/store.c: admission, tokens, pins, expiry, concurrency.
 *
 * The suite; its tests are in test_state_store_admit.c (admission), test_state_store_states.c
 * (commit, lookups, release and pins), test_state_store_expire.c (TTLs, expiry, foreach) and
 * test_state_store_concurrency.c (scale and threads), with what they share in
 * state_store_fixture.h. */
#include <check.h>
#include <stdlib.h>

#include "state_store_fixture.h"

static Suite *store_suite(void) {
  Suite *s = suite_create("state_store");
  TCase *adm = tcase_create("admit");
  state_store_add_admit(adm);
  suite_add_tcase(s, adm);

  TCase *tok = tcase_create("commit_get");
  state_store_add_commit_get(tok);
  suite_add_tcase(s, tok);

  TCase *rel = tcase_create("release_put");
  state_store_add_release_put(rel);
  suite_add_tcase(s, rel);

  TCase *ttl = tcase_create("expire");
  state_store_add_expire(ttl);
  suite_add_tcase(s, ttl);

  TCase *fe = tcase_create("foreach");
  state_store_add_foreach(fe);
  suite_add_tcase(s, fe);

  TCase *conc = tcase_create("concurrency");
  tcase_set_timeout(conc, 60);
  state_store_add_concurrency(conc);
  suite_add_tcase(s, conc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(store_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
