/* Unit tests for daemon/state/regions.c: the region limit, tokens, pins and deferred ends. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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
  CK_OK(region_registry_create(max, &r, &e), e);
  return r;
}

static void add(struct region_registry *r, struct payload *p, uint64_t bytes, char *handle,
                char *token) {
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(region_registry_reserve(r, &e), e);
  CK_OK(region_registry_commit(r, "alice", bytes, p, payload_end, handle, token, NULL, &e), e);
}

START_TEST(test_commit_gives_a_handle_and_token_and_get_returns_the_payload) {
  struct region_registry *r = make(4);
  struct payload p = {0};
  char h[REGION_HANDLE_LEN], t[REGION_TOKEN_LEN];
  struct region_meta m;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(region_registry_reserve(r, &e), QDP_OK);
  ck_assert_int_eq(region_registry_commit(r, "alice", 4096, &p, payload_end, h, t, &m, &e), QDP_OK);
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
  ck_assert_int_eq(region_registry_remove(r, h, bad, NULL, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(atomic_load(&p.ended), 0);
  uint64_t bytes = 0;
  ck_assert_int_eq(region_registry_remove(r, h, t, &bytes, &e), QDP_OK);
  ck_assert_uint_eq(bytes, 100);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
  ck_assert_int_eq(region_registry_get(r, h, t, &got, NULL, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(region_registry_remove(r, h, t, NULL, &e), QDP_ERR_NOT_FOUND);
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
  ck_assert_int_eq(region_registry_reserve(r, &e), QDP_OK); /* the second slot, reserved */
  ck_assert_int_eq(region_registry_reserve(r, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg, "max_regions 2"));
  region_registry_cancel(r);
  add(r, &p2, 20, h2, t2);
  ck_assert_str_ne(h1, h2);
  ck_assert_int_eq(region_registry_reserve(r, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  uint32_t n = 0;
  uint64_t b = 0;
  region_registry_usage(r, &n, &b);
  ck_assert_uint_eq(n, 2);
  ck_assert_uint_eq(b, 30);
  ck_assert_int_eq(region_registry_remove(r, h1, t1, NULL, &e), QDP_OK);
  ck_assert_int_eq(region_registry_reserve(r, &e), QDP_OK);
  /* A failed commit (owner too long) gives its slot back and does not take the payload. */
  struct payload p3 = {0};
  char longname[80];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  char h3[REGION_HANDLE_LEN], t3[REGION_TOKEN_LEN];
  ck_assert_int_eq(region_registry_commit(r, longname, 5, &p3, payload_end, h3, t3, NULL, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(atomic_load(&p3.ended), 0);
  ck_assert_int_eq(region_registry_reserve(r, &e), QDP_OK);
  region_registry_cancel(r);
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
  ck_assert_int_eq(region_registry_remove(r, h, t, NULL, &e), QDP_OK);
  /* Unlinked at once: not found, not counted, and its slot is free for another region. */
  void *c = NULL;
  ck_assert_int_eq(region_registry_get(r, h, t, &c, NULL, &e), QDP_ERR_NOT_FOUND);
  uint32_t n = 9;
  region_registry_usage(r, &n, NULL);
  ck_assert_uint_eq(n, 0);
  ck_assert_int_eq(region_registry_reserve(r, &e), QDP_OK);
  region_registry_cancel(r);
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
  ck_assert_int_eq(region_registry_remove(x.r, x.h, x.t, NULL, NULL), QDP_OK);
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
  }
  ck_assert_int_eq(atomic_load(&x.bad), 0);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
  region_registry_destroy(x.r);
  ck_assert_int_eq(atomic_load(&p.ended), 1);
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
