/* Leases of the state store (daemon/state/store.c) with fake payloads: a released or expired state
 * with open leases is gone for clients but destroyed only at its last close or sweep; leases of
 * processes that exited end after the grace period, those of live processes and pid 0 never. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "state/store.h"

struct payload {
  int destroyed;
};

static void payload_destroy(void *p) {
  ((struct payload *)p)->destroyed++;
}

static struct state_store *make_store(uint64_t grace_ms) {
  struct state_store_limits lim = {.lease_grace_ms = grace_ms};
  struct state_store *s = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(state_store_create(&lim, &s, &e), QDP_OK);
  return s;
}

static void add(struct state_store *s, struct payload *p, uint64_t bytes, uint64_t ttl_ms,
                char *handle, char *token) {
  struct state_reservation *r = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(state_store_admit(s, "alice", bytes, &r, &e), QDP_OK);
  ck_assert_int_eq(state_store_commit(s, r, p, payload_destroy, ttl_ms, NULL, handle, token, &e),
                   QDP_OK);
}

/* Opens a lease the way the RPC layer does: pin, lease, unpin. */
static uint64_t lease(struct state_store *s, const char *handle, const char *token, int pid) {
  void *got = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  uint64_t id = 0;
  ck_assert_int_eq(state_store_get(s, handle, token, &got, NULL, &e), QDP_OK);
  CK_OK(state_store_lease_open(s, got, "alice@host:1", pid, &id, &e), e);
  ck_assert_uint_ne(id, 0);
  state_store_put(s, got);
  return id;
}

static uint32_t leases_of(struct state_store *s, const char *handle, const char *token) {
  void *got = NULL;
  struct state_meta meta;
  ck_assert_int_eq(state_store_get(s, handle, token, &got, &meta, NULL), QDP_OK);
  state_store_put(s, got);
  return meta.leases;
}

START_TEST(test_release_with_open_lease_defers_the_free) {
  struct state_store *s = make_store(30000);
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add(s, &p, 4096, 0, h, t);
  uint64_t id = lease(s, h, t, getpid());
  ck_assert_uint_eq(leases_of(s, h, t), 1);
  uint64_t freed = 99;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(state_store_release(s, h, t, &freed, &e), QDP_OK);
  ck_assert_int_eq(p.destroyed, 0); /* the view still points at it */
  /* Gone for clients: no lookup, no second release, and the bytes left the budgets. */
  void *got = NULL;
  ck_assert_int_eq(state_store_get(s, h, t, &got, NULL, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(state_store_release(s, h, t, NULL, &e), QDP_ERR_NOT_FOUND);
  uint64_t bytes = 1;
  uint32_t states = 1, open = 0;
  state_store_usage(s, &bytes, &states, &open);
  ck_assert_uint_eq(bytes, 0);
  ck_assert_uint_eq(states, 0);
  ck_assert_uint_eq(open, 1); /* the view's lease outlives the release */
  /* Wrong token, wrong handle, wrong lease: refused alike, nothing freed. */
  char bad[STATE_TOKEN_LEN];
  memcpy(bad, t, sizeof bad);
  bad[0] = bad[0] == 'a' ? 'b' : 'a';
  ck_assert_int_eq(state_store_lease_close(s, h, bad, id, &freed, &e), QDP_ERR_NOT_FOUND);
  ck_assert_str_eq(e.field, "lease_id");
  ck_assert_int_eq(state_store_lease_close(s, "s0", t, id, &freed, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(state_store_lease_close(s, h, t, id + 1, &freed, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(p.destroyed, 0);
  /* The last close frees, and says how much. */
  ck_assert_int_eq(state_store_lease_close(s, h, t, id, &freed, &e), QDP_OK);
  ck_assert_int_eq(p.destroyed, 1);
  ck_assert_uint_eq(freed, 4096);
  state_store_usage(s, NULL, NULL, &open);
  ck_assert_uint_eq(open, 0);
  ck_assert_int_eq(state_store_lease_close(s, h, t, id, &freed, &e), QDP_ERR_NOT_FOUND);
  state_store_destroy(s);
  ck_assert_int_eq(p.destroyed, 1);
}
END_TEST

START_TEST(test_close_on_a_live_state_frees_nothing) {
  struct state_store *s = make_store(30000);
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add(s, &p, 64, 0, h, t);
  uint64_t a = lease(s, h, t, getpid()), b = lease(s, h, t, 0);
  ck_assert_uint_ne(a, b);
  ck_assert_uint_eq(leases_of(s, h, t), 2);
  uint32_t open = 0;
  state_store_usage(s, NULL, NULL, &open);
  ck_assert_uint_eq(open, 2); /* the store's count of every entry's leases */
  uint64_t freed = 99;
  ck_assert_int_eq(state_store_lease_close(s, h, t, a, &freed, NULL), QDP_OK);
  ck_assert_uint_eq(freed, 0);
  ck_assert_uint_eq(leases_of(s, h, t), 1);
  /* Release with one lease left: the free waits for it. */
  ck_assert_int_eq(state_store_release(s, h, t, NULL, NULL), QDP_OK);
  ck_assert_int_eq(p.destroyed, 0);
  ck_assert_int_eq(state_store_lease_close(s, h, t, b, &freed, NULL), QDP_OK);
  ck_assert_uint_eq(freed, 64);
  ck_assert_int_eq(p.destroyed, 1);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_pin_and_lease_both_hold_the_payload) {
  struct state_store *s = make_store(30000);
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add(s, &p, 64, 0, h, t);
  uint64_t id = lease(s, h, t, getpid());
  void *pinned = NULL;
  ck_assert_int_eq(state_store_get(s, h, t, &pinned, NULL, NULL), QDP_OK);
  ck_assert_int_eq(state_store_release(s, h, t, NULL, NULL), QDP_OK);
  uint64_t freed = 99;
  ck_assert_int_eq(state_store_lease_close(s, h, t, id, &freed, NULL), QDP_OK);
  ck_assert_uint_eq(freed, 0); /* a Fetch still reads it */
  ck_assert_int_eq(p.destroyed, 0);
  state_store_put(s, pinned);
  ck_assert_int_eq(p.destroyed, 1);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_ttl_expiry_with_open_lease_defers_the_free) {
  struct state_store *s = make_store(30000);
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add(s, &p, 128, 1000, h, t);
  uint64_t id = lease(s, h, t, getpid());
  ck_assert_uint_eq(state_store_expire(s, INT64_MAX), 1);
  ck_assert_int_eq(p.destroyed, 0);
  ck_assert_int_eq(state_store_get(s, h, t, &(void *){NULL}, NULL, NULL), QDP_ERR_NOT_FOUND);
  /* A sweep does not end the lease of a live process, however late. */
  ck_assert_uint_eq(state_store_sweep_leases(s, INT64_MAX / 2), 0);
  ck_assert_int_eq(p.destroyed, 0);
  uint64_t freed = 0;
  ck_assert_int_eq(state_store_lease_close(s, h, t, id, &freed, NULL), QDP_OK);
  ck_assert_uint_eq(freed, 128);
  ck_assert_int_eq(p.destroyed, 1);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_lease_of_an_exited_client_ends_after_the_grace) {
  struct state_store *s = make_store(100);
  struct payload p = {0}, q = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN], h2[STATE_HANDLE_LEN], t2[STATE_TOKEN_LEN];
  add(s, &p, 256, 0, h, t);
  add(s, &q, 512, 0, h2, t2);
  int gone = qdpt_dead_pid();
  lease(s, h, t, gone);
  lease(s, h, t, getpid()); /* alive: stays */
  lease(s, h, t, 0);        /* no pid: stays until closed */
  lease(s, h2, t2, gone);
  ck_assert_int_eq(state_store_release(s, h2, t2, NULL, NULL), QDP_OK);
  int64_t t0 = 1000000;
  ck_assert_uint_eq(state_store_sweep_leases(s, t0), 0); /* the grace starts */
  ck_assert_uint_eq(state_store_sweep_leases(s, t0 + 99), 0);
  ck_assert_int_eq(q.destroyed, 0);
  ck_assert_uint_eq(state_store_sweep_leases(s, t0 + 100), 2);
  /* The released state lost its only lease and goes; the live one keeps its two others. */
  ck_assert_int_eq(q.destroyed, 1);
  ck_assert_int_eq(p.destroyed, 0);
  ck_assert_uint_eq(leases_of(s, h, t), 2);
  ck_assert_uint_eq(state_store_sweep_leases(s, t0 + 1000000), 0);
  state_store_destroy(s); /* frees the state and its open leases */
  ck_assert_int_eq(p.destroyed, 1);
}
END_TEST

START_TEST(test_lease_open_refusals) {
  struct state_store *s = make_store(30000);
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add(s, &p, 64, 0, h, t);
  void *got = NULL;
  uint64_t id = 0;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(state_store_get(s, h, t, &got, NULL, NULL), QDP_OK);
  ck_assert_int_eq(state_store_lease_open(s, got, "c", -5, &id, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "client_pid");
  char longname[80];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  ck_assert_int_eq(state_store_lease_open(s, got, longname, 1, &id, &e), QDP_ERR_INVALID_ARGUMENT);
  for (int i = 0; i < STATE_LEASES_MAX; i++) {
    ck_assert_int_eq(state_store_lease_open(s, got, "c", 0, &id, &e), QDP_OK);
  }
  ck_assert_int_eq(state_store_lease_open(s, got, "c", 0, &id, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_msg(strstr(e.msg, "256 open view leases"), "%s", e.msg);
  /* Released between the pin and the lease: refused, nothing leased. */
  ck_assert_int_eq(state_store_release(s, h, t, NULL, NULL), QDP_OK);
  ck_assert_int_eq(state_store_lease_open(s, got, "c", 0, &id, &e), QDP_ERR_NOT_FOUND);
  state_store_put(s, got);
  ck_assert_int_eq(p.destroyed, 0); /* 256 leases still open */
  state_store_destroy(s);
  ck_assert_int_eq(p.destroyed, 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("leases");
  TCase *tc = tcase_create("leases");
  tcase_add_test(tc, test_release_with_open_lease_defers_the_free);
  tcase_add_test(tc, test_close_on_a_live_state_frees_nothing);
  tcase_add_test(tc, test_pin_and_lease_both_hold_the_payload);
  tcase_add_test(tc, test_ttl_expiry_with_open_lease_defers_the_free);
  tcase_add_test(tc, test_lease_of_an_exited_client_ends_after_the_grace);
  tcase_add_test(tc, test_lease_open_refusals);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
