/* Unit tests for daemon/state/store.c: admission, tokens, pins, expiry, concurrency. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "state/store.h"

/* A payload that counts how often the store destroys it. */
struct payload {
  int destroyed;
};

static atomic_int destroy_calls;

static void payload_destroy(void *p) {
  ((struct payload *)p)->destroyed++;
  atomic_fetch_add(&destroy_calls, 1);
}

static void payload_free(void *p) {
  atomic_fetch_add(&destroy_calls, 1);
  free(p);
}

static struct state_store *make_store(uint64_t budget, uint64_t client_budget, uint32_t max_states,
                                      uint32_t max_client_states) {
  struct state_store_limits lim = {
      .budget_bytes = budget,
      .client_budget_bytes = client_budget,
      .max_states = max_states,
      .max_client_states = max_client_states,
  };
  struct state_store *s = NULL;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(state_store_create(&lim, &s, &err), QDP_OK);
  ck_assert_ptr_nonnull(s);
  atomic_store(&destroy_calls, 0);
  return s;
}

/* Admits and commits `bytes` for `owner`; the payload is freed by the store. */
static void add_state(struct state_store *s, const char *owner, uint64_t bytes, uint64_t ttl_ms,
                      char *handle, char *token) {
  struct state_reservation *r = NULL;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(state_store_admit(s, owner, bytes, &r, &err), QDP_OK);
  void *p = malloc(1);
  ck_assert_int_eq(state_store_commit(s, r, p, payload_free, ttl_ms, "t", handle, token, &err),
                   QDP_OK);
}

static uint64_t usage_bytes(struct state_store *s) {
  uint64_t b = 0;
  state_store_usage(s, &b, NULL, NULL);
  return b;
}

static uint32_t usage_states(struct state_store *s) {
  uint32_t n = 0;
  state_store_usage(s, NULL, &n, NULL);
  return n;
}

/* ---- admission ------------------------------------------------------------------------------- */

START_TEST(test_admit_global_budget_exact_boundary) {
  struct state_store *s = make_store(1000, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *a = NULL, *b = NULL, *c = NULL;
  ck_assert_int_eq(state_store_admit(s, "alice", 600, &a, &err), QDP_OK);
  /* 600 + 400 = 1000: exactly the budget fits. */
  ck_assert_int_eq(state_store_admit(s, "bob", 400, &b, &err), QDP_OK);
  ck_assert_uint_eq(usage_bytes(s), 1000);
  state_reservation_cancel(b);
  /* 600 + 401 is one byte over. */
  ck_assert_int_eq(state_store_admit(s, "bob", 401, &c, &err), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_null(c);
  ck_assert_str_eq(err.msg,
                   "state of 401 B refused: the store holds 600 B of its 1000 B budget "
                   "(budget_bytes); release states or raise it");
  ck_assert_uint_eq(err.need_bytes, 401);
  ck_assert_uint_eq(err.free_bytes, 400);
  ck_assert_uint_eq(usage_bytes(s), 600);
  state_reservation_cancel(a);
  ck_assert_uint_eq(usage_bytes(s), 0);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_admit_client_budget_exact_boundary) {
  struct state_store *s = make_store(0, 4294967296ULL, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  ck_assert_int_eq(state_store_admit(s, "alice@h:12", 3221225472ULL, &a, &err), QDP_OK);
  ck_assert_int_eq(state_store_admit(s, "alice@h:12", 1073741825ULL, &b, &err),
                   QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(err.msg,
                   "state of 1 GiB refused: client 'alice@h:12' holds 3 GiB of its 4 GiB budget "
                   "(client_budget_bytes)");
  ck_assert_uint_eq(err.need_bytes, 1073741825ULL);
  ck_assert_uint_eq(err.free_bytes, 1073741824ULL);
  /* Another client has its own budget. */
  ck_assert_int_eq(state_store_admit(s, "carol", 4294967296ULL, &c, &err), QDP_OK);
  /* Exactly the rest of alice's budget fits. */
  ck_assert_int_eq(state_store_admit(s, "alice@h:12", 1073741824ULL, &d, &err), QDP_OK);
  ck_assert_uint_eq(usage_bytes(s), 3221225472ULL + 4294967296ULL + 1073741824ULL);
  state_reservation_cancel(a);
  state_reservation_cancel(c);
  state_reservation_cancel(d);
  ck_assert_uint_eq(usage_bytes(s), 0);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_admit_refuses_byte_count_overflow_when_unlimited) {
  struct state_store *s = make_store(0, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *a = NULL, *b = NULL;
  ck_assert_int_eq(state_store_admit(s, "x", UINT64_MAX - 10, &a, &err), QDP_OK);
  ck_assert_int_eq(state_store_admit(s, "y", 11, &b, &err), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_null(b);
  state_reservation_cancel(a);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_admit_max_states_counts_states_and_reservations) {
  struct state_store *s = make_store(0, 0, 3, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add_state(s, "a", 1, 0, h, t);
  add_state(s, "b", 1, 0, h, t);
  struct state_reservation *r = NULL, *x = NULL;
  ck_assert_int_eq(state_store_admit(s, "c", 1, &r, &err), QDP_OK);
  ck_assert_int_eq(state_store_admit(s, "d", 1, &x, &err), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(err.msg, "max_states 3"));
  state_reservation_cancel(r);
  ck_assert_int_eq(state_store_admit(s, "d", 1, &x, &err), QDP_OK);
  state_reservation_cancel(x);
  ck_assert_uint_eq(usage_states(s), 2);
  state_store_destroy(s);
  ck_assert_int_eq(atomic_load(&destroy_calls), 2);
}
END_TEST

START_TEST(test_admit_max_client_states_per_owner) {
  struct state_store *s = make_store(0, 0, 0, 2);
  struct qdp_error err = QDP_ERROR_INIT;
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add_state(s, "a", 1, 0, h, t);
  add_state(s, "a", 1, 0, h, t);
  struct state_reservation *r = NULL;
  ck_assert_int_eq(state_store_admit(s, "a", 1, &r, &err), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(err.msg, "client 'a' holds 2 states"));
  ck_assert_int_eq(state_store_admit(s, "b", 1, &r, &err), QDP_OK);
  state_reservation_cancel(r);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_admit_refuses_overlong_owner) {
  struct state_store *s = make_store(0, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  char owner[65];
  memset(owner, 'o', 64);
  owner[64] = '\0';
  struct state_reservation *r = NULL;
  ck_assert_int_eq(state_store_admit(s, owner, 1, &r, &err), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "64 B"));
  owner[63] = '\0';
  ck_assert_int_eq(state_store_admit(s, owner, 1, &r, &err), QDP_OK);
  state_reservation_cancel(r);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_cancel_returns_reserved_bytes) {
  struct state_store *s = make_store(100, 100, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *r = NULL;
  ck_assert_int_eq(state_store_admit(s, "a", 100, &r, &err), QDP_OK);
  ck_assert_uint_eq(usage_bytes(s), 100);
  state_reservation_cancel(r);
  state_reservation_cancel(NULL);
  ck_assert_uint_eq(usage_bytes(s), 0);
  /* The whole budget is available again, globally and for the owner. */
  ck_assert_int_eq(state_store_admit(s, "a", 100, &r, &err), QDP_OK);
  state_reservation_cancel(r);
  state_store_destroy(s);
}
END_TEST

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

struct tally {
  int count;
  uint64_t bytes;
  int saw_released;
  char released[STATE_HANDLE_LEN];
};

static void count_fn(const struct state_meta *m, void *payload, void *arg) {
  struct tally *t = arg;
  t->count++;
  t->bytes += m->bytes;
  if (strcmp(m->handle, t->released) == 0) {
    t->saw_released = 1;
  }
  ck_assert_ptr_nonnull(payload);
}

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

/* ---- scale and concurrency ------------------------------------------------------------------- */

/* Seconds for `lookups` get/put pairs cycling over the n states of a fresh store. */
static double lookup_seconds(int n, int lookups) {
  struct state_store *s = make_store(0, 0, 0, 0);
  char(*h)[STATE_HANDLE_LEN] = calloc((size_t)n, STATE_HANDLE_LEN);
  char(*t)[STATE_TOKEN_LEN] = calloc((size_t)n, STATE_TOKEN_LEN);
  for (int i = 0; i < n; i++) {
    add_state(s, "a", 1, 0, h[i], t[i]);
  }
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int k = 0; k < lookups; k++) {
    void *p;
    int i = (int)(((unsigned)k * 7919u) % (unsigned)n);
    ck_assert_int_eq(state_store_get(s, h[i], t[i], &p, NULL, NULL), QDP_OK);
    state_store_put(s, p);
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  for (int i = 0; i < n; i += 2) {
    ck_assert_int_eq(state_store_release(s, h[i], t[i], NULL, NULL), QDP_OK);
  }
  ck_assert_uint_eq(usage_states(s), (uint32_t)(n / 2));
  free(h);
  free(t);
  state_store_destroy(s);
  ck_assert_int_eq(atomic_load(&destroy_calls), n);
  return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
}

START_TEST(test_ten_thousand_states_stay_fast) {
  /* The same number of lookups among 100 and among 10000 states: a hash table costs about the
   * same per lookup, a list scan 100 times more. The ratio, unlike a wall-clock bound, holds
   * under valgrind and on a loaded machine. */
  enum { LOOKUPS = 200000 };
  double small = lookup_seconds(100, LOOKUPS);
  double large = lookup_seconds(10000, LOOKUPS);
  ck_assert_double_lt(large, 8.0 * small + 0.05);
}
END_TEST

enum { THREADS = 8, ROUNDS = 2000 };

struct worker {
  struct state_store *s;
  int id;
  int kept; /* states this worker left committed */
  uint64_t kept_bytes;
  int refused;
};

static void *worker_main(void *arg) {
  struct worker *w = arg;
  char owner[16];
  snprintf(owner, sizeof owner, "w%d", w->id % 3);
  unsigned seed = (unsigned)w->id * 2654435761u;
  for (int i = 0; i < ROUNDS; i++) {
    seed = seed * 1103515245u + 12345u;
    uint64_t bytes = 1 + (seed >> 16) % 1000;
    struct state_reservation *r = NULL;
    if (state_store_admit(w->s, owner, bytes, &r, NULL) != QDP_OK) {
      w->refused++;
      continue;
    }
    char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
    switch (i % 4) {
    case 0:
      state_reservation_cancel(r);
      break;
    case 1:
    case 2: {
      void *p = malloc(8);
      if (state_store_commit(w->s, r, p, payload_free, 0, "c", h, t, NULL) != QDP_OK) {
        free(p);
        break;
      }
      void *g = NULL;
      if (state_store_get(w->s, h, t, &g, NULL, NULL) == QDP_OK) {
        if (i % 4 == 1) {
          /* Release while pinned: destroy happens at the put below. */
          state_store_release(w->s, h, t, NULL, NULL);
        }
        state_store_put(w->s, g);
      }
      if (i % 4 == 2) {
        state_store_release(w->s, h, t, NULL, NULL);
      }
      break;
    }
    default: {
      void *p = malloc(8);
      if (state_store_commit(w->s, r, p, payload_free, 0, "k", h, t, NULL) == QDP_OK) {
        w->kept++;
        w->kept_bytes += bytes;
      } else {
        free(p);
      }
      break;
    }
    }
  }
  return NULL;
}

START_TEST(test_concurrent_admit_commit_release_keeps_totals) {
  struct state_store *s = make_store(0, 0, 0, 0);
  pthread_t th[THREADS];
  struct worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (struct worker){.s = s, .id = i};
    ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  int kept = 0;
  uint64_t kept_bytes = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    kept += w[i].kept;
    kept_bytes += w[i].kept_bytes;
    ck_assert_int_eq(w[i].refused, 0);
  }
  ck_assert_int_eq(kept, THREADS * ROUNDS / 4);
  ck_assert_uint_eq(usage_states(s), (uint32_t)kept);
  ck_assert_uint_eq(usage_bytes(s), kept_bytes);
  /* Every released state (cases 1 and 2) was destroyed exactly once. */
  ck_assert_int_eq(atomic_load(&destroy_calls), THREADS * ROUNDS / 2);
  struct tally tl = {0};
  state_store_foreach(s, count_fn, &tl);
  ck_assert_int_eq(tl.count, kept);
  ck_assert_uint_eq(tl.bytes, kept_bytes);
  state_store_destroy(s);
  ck_assert_int_eq(atomic_load(&destroy_calls), THREADS * ROUNDS / 2 + kept);
}
END_TEST

struct holder {
  struct state_store *s;
  int got;
  struct state_reservation *res[100];
};

static void *holder_main(void *arg) {
  struct holder *hd = arg;
  for (int i = 0; i < 100; i++) {
    if (state_store_admit(hd->s, "shared", 10, &hd->res[hd->got], NULL) == QDP_OK) {
      hd->got++;
    }
  }
  return NULL;
}

START_TEST(test_concurrent_admission_never_exceeds_budget) {
  /* 8 threads each try to hold 100 reservations of 10 B against a 2000 B budget: exactly 200
   * fit, whatever the interleaving. */
  struct state_store *s = make_store(2000, 0, 0, 0);
  pthread_t th[THREADS];
  struct holder *hd = calloc(THREADS, sizeof *hd);
  for (int i = 0; i < THREADS; i++) {
    hd[i].s = s;
    ck_assert_int_eq(pthread_create(&th[i], NULL, holder_main, &hd[i]), 0);
  }
  int got = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    got += hd[i].got;
  }
  ck_assert_int_eq(got, 200);
  ck_assert_uint_eq(usage_bytes(s), 2000);
  for (int i = 0; i < THREADS; i++) {
    for (int k = 0; k < hd[i].got; k++) {
      state_reservation_cancel(hd[i].res[k]);
    }
  }
  ck_assert_uint_eq(usage_bytes(s), 0);
  free(hd);
  state_store_destroy(s);
}
END_TEST

static Suite *store_suite(void) {
  Suite *s = suite_create("state_store");
  TCase *adm = tcase_create("admit");
  tcase_add_test(adm, test_admit_global_budget_exact_boundary);
  tcase_add_test(adm, test_admit_client_budget_exact_boundary);
  tcase_add_test(adm, test_admit_refuses_byte_count_overflow_when_unlimited);
  tcase_add_test(adm, test_admit_max_states_counts_states_and_reservations);
  tcase_add_test(adm, test_admit_max_client_states_per_owner);
  tcase_add_test(adm, test_admit_refuses_overlong_owner);
  tcase_add_test(adm, test_cancel_returns_reserved_bytes);
  suite_add_tcase(s, adm);

  TCase *tok = tcase_create("commit_get");
  tcase_add_test(tok, test_tokens_and_handles_are_unique_and_hex);
  tcase_add_test(tok, test_get_returns_payload_and_meta);
  tcase_add_test(tok, test_commit_pinned_outlives_a_release_until_put);
  tcase_add_test(tok, test_wrong_token_and_unknown_handle_are_both_not_found);
  tcase_add_test(tok, test_commit_failure_returns_bytes_and_keeps_payload);
  tcase_add_test(tok, test_commit_fails_cleanly_without_randomness);
  suite_add_tcase(s, tok);

  TCase *rel = tcase_create("release_put");
  tcase_add_test(rel, test_release_frees_bytes_and_destroys_payload);
  tcase_add_test(rel, test_owner_releases_its_own_by_handle_and_no_one_elses);
  tcase_add_test(rel, test_release_while_pinned_destroys_on_last_put_exactly_once);
  tcase_add_test(rel, test_put_without_release_keeps_state);
  suite_add_tcase(s, rel);

  TCase *ttl = tcase_create("expire");
  tcase_add_test(ttl, test_ttl_default_and_cap);
  tcase_add_test(ttl, test_max_ttl_caps_states_that_would_never_expire);
  tcase_add_test(ttl, test_expire_by_time);
  tcase_add_test(ttl, test_expired_state_is_not_found_before_the_sweep);
  tcase_add_test(ttl, test_expire_while_pinned_defers_destroy);
  suite_add_tcase(s, ttl);

  TCase *fe = tcase_create("foreach");
  tcase_add_test(fe, test_foreach_visits_every_live_state_once);
  suite_add_tcase(s, fe);

  TCase *conc = tcase_create("concurrency");
  tcase_set_timeout(conc, 60);
  tcase_add_test(conc, test_ten_thousand_states_stay_fast);
  tcase_add_test(conc, test_concurrent_admit_commit_release_keeps_totals);
  tcase_add_test(conc, test_concurrent_admission_never_exceeds_budget);
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
