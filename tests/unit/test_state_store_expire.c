/* test_state_store_expire.c — which states are alive (daemon/state/store.c): the default TTL and
 * its cap, states that would never expire capped, expiry by time, an expired state not found
 * before the sweep, expiry of a pinned state deferring its destruction, and state_store_foreach
 * visiting every live state once. */
#include <check.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "state/store.h"
#include "state_store_fixture.h"

/* ---- TTL and expiry -------------------------------------------------------------------------- */

START_TEST(test_ttl_default_and_cap) {
  struct state_store_limits lim = {.default_ttl_ms = 60000, .max_ttl_ms = 3600000};
  struct state_store *s = NULL;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(state_store_create(&lim, &s, &err), QDP_OK);
  char h1[STATE_HANDLE_LEN], h2[STATE_HANDLE_LEN], h3[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add_state(s, "a", 1, 0, h1, t);
  struct state_meta m;
  void *p;
  ck_assert_int_eq(state_store_get(s, h1, t, &p, &m, &err), QDP_OK);
  state_store_put(s, p);
  ck_assert_int_eq(m.expires_unix_ms - m.created_unix_ms, 60000);
  ck_assert_uint_eq(m.ttl_ms, 60000);
  ck_assert(!m.ttl_capped); /* the default is not a request */
  add_state(s, "a", 1, 7200000, h2, t);
  ck_assert_int_eq(state_store_get(s, h2, t, &p, &m, &err), QDP_OK);
  state_store_put(s, p);
  ck_assert_int_eq(m.expires_unix_ms - m.created_unix_ms, 3600000);
  ck_assert_uint_eq(m.ttl_ms, 3600000);
  ck_assert(m.ttl_capped); /* asked for 2 h: the record says it got max_ttl instead */
  add_state(s, "a", 1, 1000, h3, t);
  ck_assert_int_eq(state_store_get(s, h3, t, &p, &m, &err), QDP_OK);
  state_store_put(s, p);
  ck_assert_int_eq(m.expires_unix_ms - m.created_unix_ms, 1000);
  ck_assert_uint_eq(m.ttl_ms, 1000);
  ck_assert(!m.ttl_capped);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_max_ttl_caps_states_that_would_never_expire) {
  struct state_store_limits lim = {.default_ttl_ms = 0, .max_ttl_ms = 5000};
  struct state_store *s = NULL;
  ck_assert_int_eq(state_store_create(&lim, &s, NULL), QDP_OK);
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add_state(s, "a", 1, 0, h, t);
  struct state_meta m;
  void *p;
  ck_assert_int_eq(state_store_get(s, h, t, &p, &m, NULL), QDP_OK);
  state_store_put(s, p);
  ck_assert_int_eq(m.expires_unix_ms - m.created_unix_ms, 5000);
  ck_assert_uint_eq(m.ttl_ms, 5000);
  ck_assert(!m.ttl_capped); /* 0 asks for the default, whatever max_ttl makes of it */
  state_store_destroy(s);
}
END_TEST

START_TEST(test_expire_by_time) {
  struct state_store *s = make_store(0, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  char h1[STATE_HANDLE_LEN], h2[STATE_HANDLE_LEN], h3[STATE_HANDLE_LEN];
  char t1[STATE_TOKEN_LEN], t2[STATE_TOKEN_LEN], t3[STATE_TOKEN_LEN];
  add_state(s, "a", 10, 1000, h1, t1);
  add_state(s, "a", 20, 5000, h2, t2);
  add_state(s, "a", 40, 0, h3, t3); /* never */
  struct state_meta m1, m2;
  void *p;
  ck_assert_int_eq(state_store_get(s, h1, t1, &p, &m1, &err), QDP_OK);
  state_store_put(s, p);
  ck_assert_int_eq(state_store_get(s, h2, t2, &p, &m2, &err), QDP_OK);
  state_store_put(s, p);
  /* One millisecond before the first expiry: nothing goes. */
  ck_assert_uint_eq(state_store_expire(s, m1.expires_unix_ms - 1), 0);
  ck_assert_uint_eq(usage_states(s), 3);
  /* At the expiry instant (<=): the first goes, with its bytes. */
  ck_assert_uint_eq(state_store_expire(s, m1.expires_unix_ms), 1);
  ck_assert_uint_eq(usage_states(s), 2);
  ck_assert_uint_eq(usage_bytes(s), 60);
  ck_assert_int_eq(atomic_load(&destroy_calls), 1);
  ck_assert_int_eq(state_store_get(s, h1, t1, &p, NULL, &err), QDP_ERR_NOT_FOUND);
  ck_assert_uint_eq(state_store_expire(s, INT64_MAX), 1);
  ck_assert_uint_eq(usage_states(s), 1);
  ck_assert_uint_eq(usage_bytes(s), 40);
  ck_assert_int_eq(state_store_get(s, h3, t3, &p, NULL, &err), QDP_OK);
  state_store_put(s, p);
  state_store_destroy(s);
  ck_assert_int_eq(atomic_load(&destroy_calls), 3);
}
END_TEST

START_TEST(test_expired_state_is_not_found_before_the_sweep) {
  struct state_store *s = make_store(0, 0, 0, 0);
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add_state(s, "a", 1, 1, h, t);
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  void *p = NULL;
  ck_assert_int_eq(state_store_get(s, h, t, &p, NULL, NULL), QDP_ERR_NOT_FOUND);
  /* Still listed until expire() runs, and still releasable by its holder. */
  ck_assert_uint_eq(usage_states(s), 1);
  ck_assert_int_eq(state_store_release(s, h, t, NULL, NULL), QDP_OK);
  ck_assert_uint_eq(usage_states(s), 0);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_expire_while_pinned_defers_destroy) {
  struct state_store *s = make_store(0, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *r = NULL;
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  ck_assert_int_eq(state_store_admit(s, "a", 9, &r, &err), QDP_OK);
  ck_assert_int_eq(state_store_commit(s, r, &p, payload_destroy, 100000, "x", h, t, &err), QDP_OK);
  void *g = NULL;
  ck_assert_int_eq(state_store_get(s, h, t, &g, NULL, &err), QDP_OK);
  ck_assert_uint_eq(state_store_expire(s, INT64_MAX), 1);
  ck_assert_uint_eq(usage_bytes(s), 0);
  ck_assert_int_eq(p.destroyed, 0);
  state_store_put(s, g);
  ck_assert_int_eq(p.destroyed, 1);
  state_store_destroy(s);
  ck_assert_int_eq(p.destroyed, 1);
}
END_TEST

/* ---- foreach --------------------------------------------------------------------------------- */

START_TEST(test_foreach_visits_every_live_state_once) {
  struct state_store *s = make_store(0, 0, 0, 0);
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  struct tally tl = {0};
  uint64_t want = 0;
  for (int i = 1; i <= 300; i++) {
    add_state(s, i % 2 ? "odd" : "even", (uint64_t)i, 0, h, t);
    want += (uint64_t)i;
  }
  /* Release the last one: it must not be visited. */
  ck_assert_int_eq(state_store_release(s, h, t, NULL, NULL), QDP_OK);
  want -= 300;
  memcpy(tl.released, h, sizeof h);
  state_store_foreach(s, count_fn, &tl);
  ck_assert_int_eq(tl.count, 299);
  ck_assert_uint_eq(tl.bytes, want);
  ck_assert_int_eq(tl.saw_released, 0);
  state_store_destroy(s);
}
END_TEST

void state_store_add_expire(TCase *tc) {
  tcase_add_test(tc, test_ttl_default_and_cap);
  tcase_add_test(tc, test_max_ttl_caps_states_that_would_never_expire);
  tcase_add_test(tc, test_expire_by_time);
  tcase_add_test(tc, test_expired_state_is_not_found_before_the_sweep);
  tcase_add_test(tc, test_expire_while_pinned_defers_destroy);
}

void state_store_add_foreach(TCase *tc) {
  tcase_add_test(tc, test_foreach_visits_every_live_state_once);
}
