/* Leases of the state store (daemon/state/store.c) with fake payloads: a released or expired state
 * with open leases is gone for clients but destroyed only at its last close or sweep; leases of
 * processes that exited end after the grace period, those of live processes and pid 0 never. */
#include <check.h>
#include <stdio.h>
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

/* Opens a lease the way the job layer does (pin the record, lease, unpin); its status. */
static qdp_status try_lease(struct state_store *s, const char *handle, const char *token, int pid,
                            bool write, uint64_t *id, struct qdp_error *e) {
  void *got = NULL;
  *id = 0;
  ck_assert_int_eq(state_store_get_record(s, handle, token, &got, NULL, e), QDP_OK);
  qdp_status rc = state_store_lease_open(s, got, "alice@host:1", pid, -1, write, id, e);
  state_store_put(s, got);
  return rc;
}

static uint64_t lease(struct state_store *s, const char *handle, const char *token, int pid) {
  struct qdp_error e = QDP_ERROR_INIT;
  uint64_t id = 0;
  CK_OK(try_lease(s, handle, token, pid, false, &id, &e), e);
  ck_assert_uint_ne(id, 0);
  return id;
}

static uint32_t leases_of_record(struct state_store *s, const char *handle, const char *token) {
  void *got = NULL;
  struct state_meta meta;
  ck_assert_int_eq(state_store_get_record(s, handle, token, &got, &meta, NULL), QDP_OK);
  state_store_put(s, got);
  return meta.leases;
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
  ck_assert_int_eq(state_store_lease_open(s, got, "c", -5, -1, false, &id, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "client_pid");
  char longname[80];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  ck_assert_int_eq(state_store_lease_open(s, got, longname, 1, -1, false, &id, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  for (int i = 0; i < STATE_LEASES_MAX; i++) {
    ck_assert_int_eq(state_store_lease_open(s, got, "c", 0, -1, false, &id, &e), QDP_OK);
  }
  ck_assert_int_eq(state_store_lease_open(s, got, "c", 0, -1, false, &id, &e),
                   QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_msg(strstr(e.msg, "256 open view leases"), "%s", e.msg);
  /* Released between the pin and the lease: refused, nothing leased. */
  ck_assert_int_eq(state_store_release(s, h, t, NULL, NULL), QDP_OK);
  ck_assert_int_eq(state_store_lease_open(s, got, "c", 0, -1, false, &id, &e), QDP_ERR_NOT_FOUND);
  state_store_put(s, got);
  ck_assert_int_eq(p.destroyed, 0); /* 256 leases still open */
  state_store_destroy(s);
  ck_assert_int_eq(p.destroyed, 1);
}
END_TEST

/* The write lease: while it is open every read pin (state_store_get) and every other lease is
 * refused naming its holder, the record stays readable and names it too; closed, reads resume. */
START_TEST(test_a_write_lease_excludes_reads_and_other_leases) {
  struct state_store *s = make_store(30000);
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add(s, &p, 4096, 0, h, t);
  struct qdp_error e = QDP_ERROR_INIT;
  uint64_t w = 0, other = 0;
  CK_OK(try_lease(s, h, t, 4242, true, &w, &e), e);
  void *got = NULL;
  struct state_meta meta;
  ck_assert_int_eq(state_store_get(s, h, t, &got, NULL, &e), QDP_ERR_FAILED_PRECONDITION);
  ck_assert_ptr_null(got);
  ck_assert_str_eq(e.field, "handle");
  char want[64];
  snprintf(want, sizeof want, "lease %llu", (unsigned long long)w);
  ck_assert_msg(strstr(e.msg, "leased for writing by alice@host:1 (pid 4242") && strstr(e.msg, want),
                "%s", e.msg);
  /* The record: pinned, and it names the holder. */
  CK_OK(state_store_get_record(s, h, t, &got, &meta, &e), e);
  ck_assert_uint_eq(meta.writer_lease, w);
  ck_assert_str_eq(meta.writer, "alice@host:1");
  ck_assert_int_eq(meta.writer_pid, 4242);
  ck_assert_uint_eq(meta.leases, 1);
  state_store_put(s, got);
  /* No second lease of either kind. */
  ck_assert_int_eq(try_lease(s, h, t, getpid(), false, &other, &e), QDP_ERR_FAILED_PRECONDITION);
  ck_assert_msg(strstr(e.msg, "no other view of it opens"), "%s", e.msg);
  ck_assert_int_eq(try_lease(s, h, t, getpid(), true, &other, &e), QDP_ERR_FAILED_PRECONDITION);
  ck_assert_uint_eq(leases_of_record(s, h, t), 1);
  /* Closed: reads and leases come back, and the record no longer names a writer. */
  CK_OK(state_store_lease_close(s, h, t, w, NULL, &e), e);
  CK_OK(state_store_get(s, h, t, &got, &meta, &e), e);
  ck_assert_uint_eq(meta.writer_lease, 0);
  ck_assert_str_eq(meta.writer, "");
  ck_assert_int_eq(meta.writer_pid, 0);
  state_store_put(s, got);
  lease(s, h, t, getpid());
  ck_assert_int_eq(p.destroyed, 0);
  state_store_destroy(s);
  ck_assert_int_eq(p.destroyed, 1);
}
END_TEST

/* A write lease opens only alone: not beside a read lease (the count in the message), not while
 * another call holds a pin; once those end it opens. */
START_TEST(test_a_write_lease_waits_for_no_reader) {
  struct state_store *s = make_store(30000);
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add(s, &p, 4096, 0, h, t);
  struct qdp_error e = QDP_ERROR_INIT;
  uint64_t r1 = lease(s, h, t, getpid()), r2 = lease(s, h, t, getpid()), w = 0;
  ck_assert_int_eq(try_lease(s, h, t, getpid(), true, &w, &e), QDP_ERR_FAILED_PRECONDITION);
  ck_assert_msg(strstr(e.msg, "has 2 open view leases"), "%s", e.msg);
  ck_assert_uint_eq(w, 0);
  CK_OK(state_store_lease_close(s, h, t, r1, NULL, &e), e);
  CK_OK(state_store_lease_close(s, h, t, r2, NULL, &e), e);
  void *reading = NULL; /* a Fetch in flight */
  CK_OK(state_store_get(s, h, t, &reading, NULL, &e), e);
  ck_assert_int_eq(try_lease(s, h, t, getpid(), true, &w, &e), QDP_ERR_FAILED_PRECONDITION);
  ck_assert_msg(strstr(e.msg, "being read by 1 call in flight"), "%s", e.msg);
  state_store_put(s, reading);
  CK_OK(try_lease(s, h, t, getpid(), true, &w, &e), e);
  ck_assert_uint_ne(w, 0);
  state_store_destroy(s);
}
END_TEST

/* A write lease ends like any lease: swept once its process is gone (reads resume), and a state
 * released under it keeps its memory until the lease is closed. */
START_TEST(test_a_write_lease_ends_with_its_process_or_after_release) {
  struct state_store *s = make_store(100);
  struct payload p = {0}, q = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN], h2[STATE_HANDLE_LEN], t2[STATE_TOKEN_LEN];
  add(s, &p, 256, 0, h, t);
  add(s, &q, 256, 0, h2, t2);
  struct qdp_error e = QDP_ERROR_INIT;
  uint64_t w = 0, w2 = 0;
  CK_OK(try_lease(s, h, t, qdpt_dead_pid(), true, &w, &e), e);
  ck_assert_uint_eq(state_store_sweep_leases(s, 5000), 0); /* the grace starts */
  ck_assert_uint_eq(state_store_sweep_leases(s, 5100), 1);
  void *got = NULL;
  CK_OK(state_store_get(s, h, t, &got, NULL, &e), e);
  state_store_put(s, got);
  CK_OK(try_lease(s, h2, t2, getpid(), true, &w2, &e), e);
  ck_assert_int_eq(state_store_release(s, h2, t2, NULL, &e), QDP_OK);
  ck_assert_int_eq(q.destroyed, 0); /* its holder may still be writing */
  ck_assert_int_eq(state_store_get_record(s, h2, t2, &got, NULL, &e), QDP_ERR_NOT_FOUND);
  uint64_t freed = 0;
  CK_OK(state_store_lease_close(s, h2, t2, w2, &freed, &e), e);
  ck_assert_uint_eq(freed, 256);
  ck_assert_int_eq(q.destroyed, 1);
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
  tcase_add_test(tc, test_a_write_lease_excludes_reads_and_other_leases);
  tcase_add_test(tc, test_a_write_lease_waits_for_no_reader);
  tcase_add_test(tc, test_a_write_lease_ends_with_its_process_or_after_release);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
