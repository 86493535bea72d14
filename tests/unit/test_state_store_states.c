/* test_state_store_states.c — a committed state (daemon/state/store.c): unique hex handles and
 * tokens, lookups by handle and token, pins that outlive a release, a commit that fails (no bytes
 * kept, the payload the caller's) or has no randomness to draw from (seccomp in a child), and
 * release: bytes back, the payload destroyed once, after the last put when pinned, and only by
 * its owner. */
#include <check.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "state/store.h"
#include "state_store_fixture.h"

/* ---- handles and tokens ---------------------------------------------------------------------- */

static int is_lower_hex(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) {
      return 0;
    }
  }
  return 1;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

START_TEST(test_tokens_and_handles_are_unique_and_hex) {
  enum { N = 2000 };
  struct state_store *s = make_store(0, 0, 0, 0);
  char(*h)[STATE_HANDLE_LEN] = calloc(N, STATE_HANDLE_LEN);
  char(*t)[STATE_TOKEN_LEN] = calloc(N, STATE_TOKEN_LEN);
  for (int i = 0; i < N; i++) {
    add_state(s, "a", 1, 0, h[i], t[i]);
    ck_assert_uint_eq(strlen(t[i]), 32);
    ck_assert(is_lower_hex(t[i], 32));
    ck_assert_uint_eq(strlen(h[i]), 17);
    ck_assert_int_eq(h[i][0], 's');
    ck_assert(is_lower_hex(h[i] + 1, 16));
  }
  qsort(h, N, STATE_HANDLE_LEN, cmp_str);
  qsort(t, N, STATE_TOKEN_LEN, cmp_str);
  for (int i = 1; i < N; i++) {
    ck_assert_str_ne(h[i - 1], h[i]);
    ck_assert_str_ne(t[i - 1], t[i]);
  }
  ck_assert_uint_eq(usage_states(s), N);
  free(h);
  free(t);
  state_store_destroy(s);
  ck_assert_int_eq(atomic_load(&destroy_calls), N);
}
END_TEST

/* A pinned commit: released at once, the state is gone from every lookup and budget, but its
 * payload lives until the commit's pin is put. */
START_TEST(test_commit_pinned_outlives_a_release_until_put) {
  struct state_store *s = make_store(8192, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *r = NULL;
  struct payload p = {0};
  struct state_meta m;
  char t[STATE_TOKEN_LEN];
  ck_assert_int_eq(state_store_admit(s, "bob", 4096, &r, &err), QDP_OK);
  ck_assert_int_eq(state_store_commit_pinned(s, r, &p, payload_destroy, 0, "iris", &m, t, &err),
                   QDP_OK);
  ck_assert_str_eq(m.owner, "bob");
  ck_assert_str_eq(m.label, "iris");
  ck_assert_uint_eq(m.bytes, 4096);
  ck_assert_int_eq(m.handle[0], 's');
  uint64_t freed = 0;
  ck_assert_int_eq(state_store_release(s, m.handle, t, &freed, &err), QDP_OK);
  ck_assert_uint_eq(freed, 4096);
  ck_assert_uint_eq(usage_states(s), 0);
  void *got = NULL;
  ck_assert_int_eq(state_store_get(s, m.handle, t, &got, NULL, &err), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(p.destroyed, 0);
  state_store_put(s, &p);
  ck_assert_int_eq(p.destroyed, 1);
  state_store_destroy(s);
  ck_assert_int_eq(p.destroyed, 1);
}
END_TEST

START_TEST(test_get_returns_payload_and_meta) {
  struct state_store *s = make_store(0, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *r = NULL;
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  ck_assert_int_eq(state_store_admit(s, "bob@node:7", 4096, &r, &err), QDP_OK);
  ck_assert_int_eq(state_store_commit(s, r, &p, payload_destroy, 0, "iris", h, t, &err), QDP_OK);
  void *got = NULL;
  struct state_meta m;
  ck_assert_int_eq(state_store_get(s, h, t, &got, &m, &err), QDP_OK);
  ck_assert_ptr_eq(got, &p);
  ck_assert_str_eq(m.handle, h);
  ck_assert_str_eq(m.owner, "bob@node:7");
  ck_assert_str_eq(m.label, "iris");
  ck_assert_uint_eq(m.bytes, 4096);
  ck_assert_int_eq(m.expires_unix_ms, 0);
  ck_assert_int_gt(m.created_unix_ms, 1600000000000LL);
  state_store_put(s, got);
  state_store_destroy(s);
  ck_assert_int_eq(p.destroyed, 1);
}
END_TEST

START_TEST(test_wrong_token_and_unknown_handle_are_both_not_found) {
  struct state_store *s = make_store(0, 0, 0, 0);
  struct qdp_error e1 = QDP_ERROR_INIT, e2 = QDP_ERROR_INIT, e3 = QDP_ERROR_INIT;
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add_state(s, "a", 8, 0, h, t);
  char bad[STATE_TOKEN_LEN];
  memcpy(bad, t, sizeof bad);
  bad[31] = bad[31] == '0' ? '1' : '0';
  void *p = NULL;
  ck_assert_int_eq(state_store_get(s, h, bad, &p, NULL, &e1), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(state_store_get(s, "s0123456789abcdef", t, &p, NULL, &e2), QDP_ERR_NOT_FOUND);
  /* A prefix of the right token is wrong too. */
  char prefix[32];
  memcpy(prefix, t, 31);
  prefix[31] = '\0';
  ck_assert_int_eq(state_store_get(s, h, prefix, &p, NULL, &e3), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(state_store_get(s, h, NULL, &p, NULL, NULL), QDP_ERR_NOT_FOUND);
  ck_assert_ptr_null(p);
  /* The two refusals read the same apart from the handle quoted. */
  ck_assert_ptr_nonnull(strstr(e1.msg, "not found: unknown handle or wrong token"));
  ck_assert_ptr_nonnull(strstr(e2.msg, "not found: unknown handle or wrong token"));
  ck_assert_int_eq(state_store_release(s, h, bad, NULL, &e1), QDP_ERR_NOT_FOUND);
  ck_assert_uint_eq(usage_states(s), 1);
  ck_assert_int_eq(state_store_get(s, h, t, &p, NULL, &e1), QDP_OK);
  state_store_put(s, p);
  state_store_destroy(s);
}
END_TEST

/* Makes getrandom(2) fail with ENOSYS in this process from now on (seccomp), or returns -1. */
static int break_getrandom(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getrandom, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return -1;
  }
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0 ? 0 : -1;
}

/* In a child: with getrandom broken, commit fails with SYSTEM (cause ENOSYS), returns the bytes
 * and leaves the payload to the caller. Exit codes name the first failed check. */
static int commit_without_randomness(void) {
  struct state_store *s = NULL;
  struct state_store_limits lim = {.budget_bytes = 100};
  if (state_store_create(&lim, &s, NULL) != QDP_OK) {
    return 10;
  }
  struct state_reservation *r = NULL;
  if (state_store_admit(s, "a", 100, &r, NULL) != QDP_OK) {
    return 11;
  }
  if (break_getrandom() != 0) {
    return 77;
  }
  struct payload p = {0};
  struct qdp_error err = QDP_ERROR_INIT;
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  if (state_store_commit(s, r, &p, payload_destroy, 0, "x", h, t, &err) != QDP_ERR_SYSTEM) {
    return 12;
  }
  if (err.cause != ENOSYS || !strstr(err.msg, "getrandom(16 B) failed")) {
    return 13;
  }
  if (usage_bytes(s) != 0 || usage_states(s) != 0 || p.destroyed != 0) {
    return 14;
  }
  state_store_destroy(s);
  return p.destroyed == 0 ? 0 : 15;
}

START_TEST(test_commit_fails_cleanly_without_randomness) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    _exit(commit_without_randomness());
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) {
    return; /* seccomp unavailable here: nothing to check */
  }
  ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

/* ---- release and pins ------------------------------------------------------------------------ */

START_TEST(test_release_frees_bytes_and_destroys_payload) {
  struct state_store *s = make_store(100, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *r = NULL;
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  ck_assert_int_eq(state_store_admit(s, "a", 70, &r, &err), QDP_OK);
  ck_assert_int_eq(state_store_commit(s, r, &p, payload_destroy, 0, NULL, h, t, &err), QDP_OK);
  ck_assert_uint_eq(usage_bytes(s), 70);
  ck_assert_int_eq(state_store_admit(s, "a", 31, &r, &err), QDP_ERR_RESOURCE_EXHAUSTED);
  uint64_t freed = 0;
  ck_assert_int_eq(state_store_release(s, h, t, &freed, &err), QDP_OK);
  ck_assert_uint_eq(freed, 70);
  ck_assert_int_eq(p.destroyed, 1);
  ck_assert_uint_eq(usage_bytes(s), 0);
  ck_assert_uint_eq(usage_states(s), 0);
  ck_assert_int_eq(state_store_release(s, h, t, &freed, &err), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(state_store_admit(s, "a", 100, &r, &err), QDP_OK);
  state_reservation_cancel(r);
  state_store_destroy(s);
  ck_assert_int_eq(p.destroyed, 1);
}
END_TEST

START_TEST(test_owner_releases_its_own_by_handle_and_no_one_elses) {
  struct state_store *s = make_store(0, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN], h2[STATE_HANDLE_LEN], t2[STATE_TOKEN_LEN];
  add_state(s, "uid:1000", 40, 0, h, t);
  add_state(s, "uid:1001", 60, 0, h2, t2);
  uint64_t freed = 0;
  /* Another identity's handle reads as unknown, and so does an empty owner. */
  ck_assert_int_eq(state_store_release_owned(s, h2, "uid:1000", &freed, &err), QDP_ERR_NOT_FOUND);
  ck_assert_ptr_nonnull(strstr(err.msg, "not found"));
  ck_assert_int_eq(state_store_release_owned(s, h, "", &freed, &err), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(state_store_release_owned(s, "s0", "uid:1000", &freed, &err), QDP_ERR_NOT_FOUND);
  ck_assert_uint_eq(usage_states(s), 2);
  ck_assert_int_eq(state_store_release_owned(s, h, "uid:1000", &freed, &err), QDP_OK);
  ck_assert_uint_eq(freed, 40);
  ck_assert_uint_eq(usage_bytes(s), 60);
  ck_assert_int_eq(state_store_release_owned(s, h, "uid:1000", &freed, &err), QDP_ERR_NOT_FOUND);
  /* The token still works for whoever holds it. */
  ck_assert_int_eq(state_store_release(s, h2, t2, &freed, &err), QDP_OK);
  ck_assert_uint_eq(usage_states(s), 0);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_release_while_pinned_destroys_on_last_put_exactly_once) {
  struct state_store *s = make_store(0, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *r = NULL;
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  ck_assert_int_eq(state_store_admit(s, "a", 50, &r, &err), QDP_OK);
  ck_assert_int_eq(state_store_commit(s, r, &p, payload_destroy, 0, "x", h, t, &err), QDP_OK);
  void *g1 = NULL, *g2 = NULL;
  ck_assert_int_eq(state_store_get(s, h, t, &g1, NULL, &err), QDP_OK);
  ck_assert_int_eq(state_store_get(s, h, t, &g2, NULL, &err), QDP_OK);
  ck_assert_int_eq(state_store_release(s, h, t, NULL, &err), QDP_OK);
  /* Unlinked at once: not listed, bytes returned, not found again. */
  ck_assert_uint_eq(usage_bytes(s), 0);
  ck_assert_uint_eq(usage_states(s), 0);
  void *g3 = NULL;
  ck_assert_int_eq(state_store_get(s, h, t, &g3, NULL, &err), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(p.destroyed, 0);
  state_store_put(s, g1);
  ck_assert_int_eq(p.destroyed, 0);
  state_store_put(s, g2);
  ck_assert_int_eq(p.destroyed, 1);
  /* A stray put after destruction is ignored. */
  state_store_put(s, g2);
  state_store_destroy(s);
  ck_assert_int_eq(p.destroyed, 1);
  ck_assert_int_eq(atomic_load(&destroy_calls), 1);
}
END_TEST

START_TEST(test_put_without_release_keeps_state) {
  struct state_store *s = make_store(0, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *r = NULL;
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  ck_assert_int_eq(state_store_admit(s, "a", 5, &r, &err), QDP_OK);
  ck_assert_int_eq(state_store_commit(s, r, &p, payload_destroy, 0, "x", h, t, &err), QDP_OK);
  void *g = NULL;
  ck_assert_int_eq(state_store_get(s, h, t, &g, NULL, &err), QDP_OK);
  state_store_put(s, g);
  ck_assert_int_eq(p.destroyed, 0);
  ck_assert_uint_eq(usage_states(s), 1);
  ck_assert_int_eq(state_store_release(s, h, t, NULL, &err), QDP_OK);
  ck_assert_int_eq(p.destroyed, 1);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_commit_failure_returns_bytes_and_keeps_payload) {
  struct state_store *s = make_store(100, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *r = NULL;
  struct payload p = {0};
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  char label[200];
  memset(label, 'l', sizeof label - 1);
  label[sizeof label - 1] = '\0';
  /* An owner that its record cannot hold is refused before anything is reserved. */
  char owner[65];
  memset(owner, 'o', sizeof owner - 1);
  owner[sizeof owner - 1] = '\0';
  ck_assert_int_eq(state_store_admit(s, owner, 60, &r, &err), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(err.field, "owner");
  ck_assert_ptr_nonnull(strstr(err.msg, "owner name of 64 B is too long; at most 63 B"));
  ck_assert_uint_eq(usage_bytes(s), 0);
  ck_assert_int_eq(state_store_admit(s, "a", 60, &r, &err), QDP_OK);
  ck_assert_int_eq(state_store_commit(s, r, &p, payload_destroy, 0, label, h, t, &err),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(err.field, "label");
  ck_assert_ptr_nonnull(strstr(err.msg, "199 B"));
  ck_assert_int_eq(p.destroyed, 0);
  ck_assert_uint_eq(usage_bytes(s), 0);
  ck_assert_uint_eq(usage_states(s), 0);
  /* A committed payload cannot be committed twice. */
  ck_assert_int_eq(state_store_admit(s, "a", 10, &r, &err), QDP_OK);
  ck_assert_int_eq(state_store_commit(s, r, &p, payload_destroy, 0, "ok", h, t, &err), QDP_OK);
  ck_assert_int_eq(state_store_admit(s, "a", 10, &r, &err), QDP_OK);
  ck_assert_int_eq(state_store_commit(s, r, &p, payload_destroy, 0, "dup", h, t, &err),
                   QDP_ERR_INTERNAL);
  ck_assert_uint_eq(usage_bytes(s), 10);
  state_store_destroy(s);
  ck_assert_int_eq(p.destroyed, 1);
}
END_TEST

void state_store_add_commit_get(TCase *tc) {
  tcase_add_test(tc, test_tokens_and_handles_are_unique_and_hex);
  tcase_add_test(tc, test_get_returns_payload_and_meta);
  tcase_add_test(tc, test_commit_pinned_outlives_a_release_until_put);
  tcase_add_test(tc, test_wrong_token_and_unknown_handle_are_both_not_found);
  tcase_add_test(tc, test_commit_failure_returns_bytes_and_keeps_payload);
  tcase_add_test(tc, test_commit_fails_cleanly_without_randomness);
}

void state_store_add_release_put(TCase *tc) {
  tcase_add_test(tc, test_release_frees_bytes_and_destroys_payload);
  tcase_add_test(tc, test_owner_releases_its_own_by_handle_and_no_one_elses);
  tcase_add_test(tc, test_release_while_pinned_destroys_on_last_put_exactly_once);
  tcase_add_test(tc, test_put_without_release_keeps_state);
}
