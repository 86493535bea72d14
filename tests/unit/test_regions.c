/* Unit tests for daemon/state/regions.c: the region limit, tokens, pins and deferred ends, and the
 * sweep of regions whose process exited. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "state/regions.h"

/* A payload that counts how often the registry ends it. */
struct payload {
  atomic_int ended;
};

static void payload_end(void *p) {
  atomic_fetch_add(&((struct payload *)p)->ended, 1);
}

static struct region_registry *make(uint32_t max) {
  struct region_registry *r = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(region_registry_create(max, 0, &r, &e), e);
  return r;
}

/* A region of process pid (0: none, never swept), registered by "alice". */
static void add_of(struct region_registry *r, int pid, struct payload *p, uint64_t bytes,
                   char *handle, char *token) {
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(region_registry_reserve(r, "alice", &e), e);
  CK_OK(region_registry_commit(r, "alice", pid, -1, NULL, bytes, p, payload_end, handle, token, NULL, &e), e);
}

static void add(struct region_registry *r, struct payload *p, uint64_t bytes, char *handle,
                char *token) {
  add_of(r, 0, p, bytes, handle, token);
}

START_TEST(test_commit_gives_a_handle_and_token_and_get_returns_the_payload) {
  struct region_registry *r = make(4);
  struct payload p = {0};
  char h[REGION_HANDLE_LEN], t[REGION_TOKEN_LEN];
  struct region_meta m;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(region_registry_reserve(r, "alice", &e), QDP_OK);
  ck_assert_int_eq(region_registry_commit(r, "alice", 0, -1, NULL, 4096, &p, payload_end, h, t, &m, &e),
                   QDP_OK);
  ck_assert_int_eq(h[0], 'r');
  ck_assert_uint_eq(strlen(h), 17);
  ck_assert_uint_eq(strlen(t), 32);
  ck_assert_str_eq(m.handle, h);
  ck_assert_str_eq(m.owner, "alice");
  ck_assert_uint_eq(m.bytes, 4096);
  void *got = NULL;
  struct region_meta m2;
  ck_assert_int_eq(region_registry_get(r, h, t, &got, &m2, &e), QDP_OK);
  ck_assert_ptr_eq(got, &p);
  ck_assert_uint_eq(m2.bytes, 4096);
  region_registry_put(r, got);
  uint32_t n = 0;
  uint64_t b = 0;
  region_registry_usage(r, &n, &b);
  ck_assert_uint_eq(n, 1);
  ck_assert_uint_eq(b, 4096);
  ck_assert_int_eq(atomic_load(&p.ended), 0);
  region_registry_destroy(r);
  ck_assert_int_eq(atomic_load(&p.ended), 1); /* destroy ends what is left */
}
END_TEST

START_TEST(test_wrong_token_and_unknown_handle_are_both_not_found) {
  struct region_registry *r = make(4);
  struct payload p = {0};
  char h[REGION_HANDLE_LEN], t[REGION_TOKEN_LEN];
  add(r, &p, 100, h, t);
  char bad[REGION_TOKEN_LEN];
  memcpy(bad, t, sizeof bad);
  bad[31] = bad[31] == '0' ? '1' : '0';
  void *got = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(region_registry_get(r, h, bad, &got, NULL, &e), QDP_ERR_NOT_FOUND);
  ck_assert_ptr_null(got);
  ck_assert_int_eq(region_registry_get(r, h, "", &got, NULL, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(region_registry_get(r, h, NULL, &got, NULL, &e), QDP_ERR_NOT_FOUND);
  char t_long[40];
  memcpy(t_long, t, 32);
  memcpy(t_long + 32, "00", 3); /* the token as a prefix is not the token */
  ck_assert_int_eq(region_registry_get(r, h, t_long, &got, NULL, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(region_registry_get(r, "r0000000000000000", t, &got, NULL, &e),
                   QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(region_registry_remove(r, h, bad, NULL, NULL, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(atomic_load(&p.ended), 0);
  uint64_t bytes = 0;
  ck_assert_int_eq(region_registry_remove(r, h, t, NULL, &bytes, &e), QDP_OK);
  ck_assert_uint_eq(bytes, 100);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
  ck_assert_int_eq(region_registry_get(r, h, t, &got, NULL, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(region_registry_remove(r, h, t, NULL, NULL, &e), QDP_ERR_NOT_FOUND);
  region_registry_destroy(r);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
}
END_TEST

START_TEST(test_max_regions_counts_reservations_and_frees_on_remove_and_cancel) {
  struct region_registry *r = make(2);
  struct payload p1 = {0}, p2 = {0};
  char h1[REGION_HANDLE_LEN], t1[REGION_TOKEN_LEN], h2[REGION_HANDLE_LEN], t2[REGION_TOKEN_LEN];
  struct qdp_error e = QDP_ERROR_INIT;
  add(r, &p1, 10, h1, t1);
  ck_assert_int_eq(region_registry_reserve(r, "alice", &e), QDP_OK); /* the second slot, reserved */
  ck_assert_int_eq(region_registry_reserve(r, "alice", &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg, "max_regions 2"));
  region_registry_cancel(r, "alice");
  add(r, &p2, 20, h2, t2);
  ck_assert_str_ne(h1, h2);
  ck_assert_int_eq(region_registry_reserve(r, "alice", &e), QDP_ERR_RESOURCE_EXHAUSTED);
  uint32_t n = 0;
  uint64_t b = 0;
  region_registry_usage(r, &n, &b);
  ck_assert_uint_eq(n, 2);
  ck_assert_uint_eq(b, 30);
  ck_assert_int_eq(region_registry_remove(r, h1, t1, NULL, NULL, &e), QDP_OK);
  ck_assert_int_eq(region_registry_reserve(r, "alice", &e), QDP_OK);
  /* A failed commit (owner too long) gives its slot back and does not take the payload. */
  struct payload p3 = {0};
  char longname[80];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  char h3[REGION_HANDLE_LEN], t3[REGION_TOKEN_LEN];
  ck_assert_int_eq(region_registry_commit(r, longname, 0, -1, NULL, 5, &p3, payload_end, h3, t3, NULL, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(atomic_load(&p3.ended), 0);
  ck_assert_int_eq(region_registry_reserve(r, "alice", &e), QDP_OK);
  region_registry_cancel(r, "alice");
  region_registry_usage(r, &n, &b);
  ck_assert_uint_eq(n, 1);
  ck_assert_uint_eq(b, 20);
  region_registry_destroy(r);
  ck_assert_int_eq(atomic_load(&p1.ended), 1);
  ck_assert_int_eq(atomic_load(&p2.ended), 1);
}
END_TEST

START_TEST(test_remove_while_pinned_defers_the_end_to_the_last_put) {
  struct region_registry *r = make(1);
  struct payload p = {0};
  char h[REGION_HANDLE_LEN], t[REGION_TOKEN_LEN];
  add(r, &p, 64, h, t);
  void *a = NULL, *b = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(region_registry_get(r, h, t, &a, NULL, &e), QDP_OK);
  ck_assert_int_eq(region_registry_get(r, h, t, &b, NULL, &e), QDP_OK);
  ck_assert_int_eq(region_registry_remove(r, h, t, NULL, NULL, &e), QDP_OK);
  /* Unlinked at once: not found, not counted, and its slot is free for another region. */
  void *c = NULL;
  ck_assert_int_eq(region_registry_get(r, h, t, &c, NULL, &e), QDP_ERR_NOT_FOUND);
  uint32_t n = 9;
  region_registry_usage(r, &n, NULL);
  ck_assert_uint_eq(n, 0);
  ck_assert_int_eq(region_registry_reserve(r, "alice", &e), QDP_OK);
  region_registry_cancel(r, "alice");
  ck_assert_int_eq(atomic_load(&p.ended), 0);
  region_registry_put(r, a);
  ck_assert_int_eq(atomic_load(&p.ended), 0);
  region_registry_put(r, b);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
  region_registry_put(r, b); /* an extra put is ignored */
  region_registry_destroy(r);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
}
END_TEST

/* Readers pin and unpin while one thread removes: the payload ends exactly once, never while a
 * reader holds it. */
struct race {
  struct region_registry *r;
  char h[REGION_HANDLE_LEN], t[REGION_TOKEN_LEN];
  struct payload *p;
  atomic_int bad;
};

static void *reader(void *arg) {
  struct race *x = arg;
  for (int i = 0; i < 20000; i++) {
    void *got = NULL;
    if (region_registry_get(x->r, x->h, x->t, &got, NULL, NULL) != QDP_OK) {
      break;
    }
    if (atomic_load(&x->p->ended)) {
      atomic_fetch_add(&x->bad, 1);
    }
    region_registry_put(x->r, got);
  }
  return NULL;
}

START_TEST(test_concurrent_readers_and_remove_end_the_payload_once) {
  struct race x = {.r = make(4), .bad = 0};
  struct payload p = {0};
  x.p = &p;
  add(x.r, &p, 1, x.h, x.t);
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(pthread_create(&th[i], NULL, reader, &x), 0);
  }
  ck_assert_int_eq(region_registry_remove(x.r, x.h, x.t, NULL, NULL, NULL), QDP_OK);
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
  }
  ck_assert_int_eq(atomic_load(&x.bad), 0);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
  region_registry_destroy(x.r);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
}
END_TEST

/* What the sweep reported, region by region. */
struct swept {
  int n;
  struct region_meta last;
  int ended_when_reported; /* the payload's end count when it was reported */
  struct payload *watch;
};

static void on_swept(const struct region_meta *m, void *arg) {
  struct swept *s = arg;
  s->n++;
  s->last = *m;
  s->ended_when_reported = s->watch ? atomic_load(&s->watch->ended) : -1;
}

static uint32_t count(struct region_registry *r, uint64_t *ret_bytes) {
  uint32_t n = 0;
  region_registry_usage(r, &n, ret_bytes);
  return n;
}

START_TEST(test_sweep_unregisters_a_dead_process_s_region_after_the_grace) {
  struct region_registry *r = make(4);
  struct payload dead = {0}, live = {0}, none = {0};
  char hd[REGION_HANDLE_LEN], td[REGION_TOKEN_LEN], hl[REGION_HANDLE_LEN], tl[REGION_TOKEN_LEN],
      hn[REGION_HANDLE_LEN], tn[REGION_TOKEN_LEN];
  int gone = qdpt_dead_pid();
  add_of(r, gone, &dead, 4096, hd, td);
  add_of(r, (int)getpid(), &live, 100, hl, tl);
  add_of(r, 0, &none, 10, hn, tn);
  struct swept sw = {.watch = &dead};
  /* The first sweep that finds the process gone starts its grace of 1000 ms. */
  ck_assert_uint_eq(region_registry_sweep(r, 50000, 1000, on_swept, &sw), 0);
  ck_assert_uint_eq(region_registry_sweep(r, 50999, 1000, on_swept, &sw), 0);
  uint64_t bytes = 0;
  ck_assert_uint_eq(count(r, &bytes), 3);
  ck_assert_uint_eq(bytes, 4206);
  ck_assert_uint_eq(region_registry_sweep(r, 51000, 1000, on_swept, &sw), 1);
  ck_assert_int_eq(sw.n, 1);
  ck_assert_str_eq(sw.last.handle, hd);
  ck_assert_str_eq(sw.last.owner, "alice");
  ck_assert_int_eq(sw.last.pid, gone);
  ck_assert_uint_eq(sw.last.bytes, 4096);
  ck_assert_int_eq(sw.ended_when_reported, 0); /* reported, then ended */
  ck_assert_int_eq(atomic_load(&dead.ended), 1);
  ck_assert_uint_eq(count(r, &bytes), 2);
  ck_assert_uint_eq(bytes, 110);
  void *got = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(region_registry_get(r, hd, td, &got, NULL, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(region_registry_remove(r, hd, td, NULL, NULL, &e), QDP_ERR_NOT_FOUND);
  /* A live process's region and one of no process stay, however long. */
  ck_assert_uint_eq(region_registry_sweep(r, INT64_MAX / 2, 0, on_swept, &sw), 0);
  ck_assert_int_eq(sw.n, 1);
  ck_assert_int_eq(region_registry_get(r, hl, tl, &got, NULL, &e), QDP_OK);
  region_registry_put(r, got);
  ck_assert_int_eq(region_registry_get(r, hn, tn, &got, NULL, &e), QDP_OK);
  region_registry_put(r, got);
  /* The swept region's slot is free: max 4, two linked, two more fit. */
  CK_OK(region_registry_reserve(r, "alice", &e), e);
  CK_OK(region_registry_reserve(r, "alice", &e), e);
  ck_assert_int_eq(region_registry_reserve(r, "alice", &e), QDP_ERR_RESOURCE_EXHAUSTED);
  region_registry_cancel(r, "alice");
  region_registry_cancel(r, "alice");
  region_registry_destroy(r);
  ck_assert_int_eq(atomic_load(&dead.ended), 1);
  ck_assert_int_eq(atomic_load(&live.ended), 1);
  ck_assert_int_eq(atomic_load(&none.ended), 1);
}
END_TEST

START_TEST(test_sweep_of_a_pinned_region_defers_the_end_to_the_last_put) {
  struct region_registry *r = make(1);
  struct payload p = {0};
  char h[REGION_HANDLE_LEN], t[REGION_TOKEN_LEN];
  add_of(r, qdpt_dead_pid(), &p, 64, h, t);
  void *job = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(region_registry_get(r, h, t, &job, NULL, &e), e); /* a job reading it */
  struct swept sw = {.watch = &p};
  ck_assert_uint_eq(region_registry_sweep(r, 1000, 0, on_swept, &sw), 1);
  ck_assert_int_eq(sw.n, 1);
  /* Gone for clients and for the counts, but mapped until the job is done with it. */
  ck_assert_uint_eq(count(r, NULL), 0);
  ck_assert_int_eq(atomic_load(&p.ended), 0);
  void *again = NULL;
  ck_assert_int_eq(region_registry_get(r, h, t, &again, NULL, &e), QDP_ERR_NOT_FOUND);
  CK_OK(region_registry_reserve(r, "alice", &e), e);
  region_registry_cancel(r, "alice");
  ck_assert_uint_eq(region_registry_sweep(r, 2000, 0, on_swept, &sw), 0); /* swept once */
  region_registry_put(r, job);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
  region_registry_destroy(r);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
}
END_TEST

START_TEST(test_a_negative_pid_is_refused_and_gives_the_slot_back) {
  struct region_registry *r = make(1);
  struct payload p = {0};
  char h[REGION_HANDLE_LEN], t[REGION_TOKEN_LEN];
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(region_registry_reserve(r, "alice", &e), e);
  CK_STATUS(region_registry_commit(r, "alice", -5, -1, NULL, 8, &p, payload_end, h, t, NULL, &e),
            QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "pid");
  ck_assert_ptr_nonnull(strstr(e.msg, "-5"));
  ck_assert_int_eq(atomic_load(&p.ended), 0);
  CK_OK(region_registry_reserve(r, "alice", &e), e);
  region_registry_cancel(r, "alice");
  region_registry_destroy(r);
  ck_assert_int_eq(atomic_load(&p.ended), 0);
}
END_TEST

/* A region of `owner` in a registry made with a per-identity limit. */
static qdp_status add_owned(struct region_registry *r, const char *owner, struct payload *p,
                            char *handle, char *token, struct qdp_error *e) {
  qdp_status rc = region_registry_reserve(r, owner, e);
  if (rc == QDP_OK) {
    rc = region_registry_commit(r, owner, 0, -1, NULL, 4096, p, payload_end, handle, token, NULL, e);
  }
  return rc;
}

/* max_client_regions counts one identity's regions and reservations; others still register
 * until max_regions; a removal, a cancel or a failed commit gives the identity its slot back. */
START_TEST(test_max_client_regions_limits_each_identity_alone) {
  struct region_registry *r = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(region_registry_create(5, 2, &r, &e), e);
  struct payload p[5] = {0};
  char h[5][REGION_HANDLE_LEN], t[5][REGION_TOKEN_LEN];
  CK_OK(add_owned(r, "uid:1000", &p[0], h[0], t[0], &e), e);
  CK_OK(region_registry_reserve(r, "uid:1000", &e), e);
  ck_assert_int_eq(region_registry_reserve(r, "uid:1000", &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg, "uid:1000 has 2 regions"));
  ck_assert_ptr_nonnull(strstr(e.msg, "max_client_regions 2"));
  ck_assert_ptr_nonnull(strstr(e.msg, "2 of max_regions 5"));
  /* Another identity is not held up by it. */
  CK_OK(add_owned(r, "uid:1001", &p[1], h[1], t[1], &e), e);
  CK_OK(add_owned(r, "uid:1001", &p[2], h[2], t[2], &e), e);
  ck_assert_int_eq(add_owned(r, "uid:1001", &p[3], h[3], t[3], &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg, "uid:1001 has 2 regions"));
  /* A cancelled reservation gives the slot back... */
  region_registry_cancel(r, "uid:1000");
  CK_OK(region_registry_reserve(r, "uid:1000", &e), e);
  /* ... and so does a commit that fails (a NULL payload), without taking anything. */
  ck_assert_int_eq(
      region_registry_commit(r, "uid:1000", 0, -1, NULL, 1, NULL, payload_end, h[3], t[3], NULL, &e),
      QDP_ERR_INTERNAL);
  CK_OK(add_owned(r, "uid:1000", &p[3], h[3], t[3], &e), e);
  ck_assert_int_eq(region_registry_reserve(r, "uid:1000", &e), QDP_ERR_RESOURCE_EXHAUSTED);
  /* The global cap still holds: 4 linked, one more for a third identity, then none. */
  CK_OK(add_owned(r, "uid:1002", &p[4], h[4], t[4], &e), e);
  ck_assert_int_eq(region_registry_reserve(r, "uid:1003", &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg, "max_regions 5"));
  /* Removing one of uid:1000's lets uid:1000 register again. */
  CK_OK(region_registry_remove(r, h[0], t[0], "uid:1000", NULL, &e), e);
  CK_OK(region_registry_reserve(r, "uid:1000", &e), e);
  region_registry_cancel(r, "uid:1000");
  region_registry_destroy(r);
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(atomic_load(&p[i].ended), 1);
  }
}
END_TEST

/* Only the identity that registered a region unregisters it: another one holding the token is
 * PERMISSION_DENIED (naming the owner) and the region stays; the owner may name it by handle
 * alone, which for anyone else reads as an unknown handle. */
START_TEST(test_only_the_owner_unregisters_a_region) {
  struct region_registry *r = make(4);
  struct payload p = {0}, q = {0};
  char h[REGION_HANDLE_LEN], t[REGION_TOKEN_LEN], h2[REGION_HANDLE_LEN], t2[REGION_TOKEN_LEN];
  struct qdp_error e = QDP_ERROR_INIT;
  add(r, &p, 4096, h, t); /* alice's */
  ck_assert_int_eq(region_registry_remove(r, h, t, "mallory", NULL, &e), QDP_ERR_PERMISSION_DENIED);
  ck_assert_str_eq(e.field, "region");
  ck_assert_ptr_nonnull(strstr(e.msg, "registered by alice, not by mallory"));
  ck_assert_int_eq(region_registry_remove(r, h, "", "mallory", NULL, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(region_registry_remove(r, h, NULL, "mallory", NULL, &e), QDP_ERR_NOT_FOUND);
  /* A wrong token is NOT_FOUND for the owner too. */
  ck_assert_int_eq(
      region_registry_remove(r, h, "0123456789abcdef0123456789abcdef", "alice", NULL, &e),
      QDP_ERR_NOT_FOUND);
  uint32_t n = 0;
  region_registry_usage(r, &n, NULL);
  ck_assert_uint_eq(n, 1);
  ck_assert_int_eq(atomic_load(&p.ended), 0);
  void *got = NULL;
  CK_OK(region_registry_get(r, h, t, &got, NULL, &e), e); /* still readable with its token */
  region_registry_put(r, got);
  uint64_t bytes = 0;
  CK_OK(region_registry_remove(r, h, t, "alice", &bytes, &e), e);
  ck_assert_uint_eq(bytes, 4096);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
  /* By handle alone, the owner's own. */
  add(r, &q, 10, h2, t2);
  CK_OK(region_registry_remove(r, h2, "", "alice", &bytes, &e), e);
  ck_assert_uint_eq(bytes, 10);
  ck_assert_int_eq(atomic_load(&q.ended), 1);
  region_registry_usage(r, &n, NULL);
  ck_assert_uint_eq(n, 0);
  region_registry_destroy(r);
}
END_TEST

static Suite *regions_suite(void) {
  Suite *s = suite_create("regions");
  TCase *tc = tcase_create("registry");
  tcase_add_test(tc, test_commit_gives_a_handle_and_token_and_get_returns_the_payload);
  tcase_add_test(tc, test_wrong_token_and_unknown_handle_are_both_not_found);
  tcase_add_test(tc, test_max_regions_counts_reservations_and_frees_on_remove_and_cancel);
  tcase_add_test(tc, test_remove_while_pinned_defers_the_end_to_the_last_put);
  tcase_add_test(tc, test_concurrent_readers_and_remove_end_the_payload_once);
  tcase_add_test(tc, test_sweep_unregisters_a_dead_process_s_region_after_the_grace);
  tcase_add_test(tc, test_sweep_of_a_pinned_region_defers_the_end_to_the_last_put);
  tcase_add_test(tc, test_a_negative_pid_is_refused_and_gives_the_slot_back);
  tcase_add_test(tc, test_max_client_regions_limits_each_identity_alone);
  tcase_add_test(tc, test_only_the_owner_unregisters_a_region);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(regions_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
