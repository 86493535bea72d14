/* Sessions (daemon/state/sessions.c) and what ends with them in the state store and the region
 * registry; client processes named by pidfd (daemon/state/capability.c), which end a lease or a
 * session when that process exits even where its pid is unknown (another PID namespace) or now
 * names a live process. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "state/regions.h"
#include "state/sessions.h"
#include "state/store.h"

static const struct session_limits LIMITS = {
    .max_sessions = 8, .max_client_sessions = 3, .max_heartbeat_ms = 60000};

static struct session_table *make_table(void) {
  struct session_table *t = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(session_table_create(&LIMITS, &t, &e), e);
  return t;
}

/* A child that waits for a byte on its pipe, then exits; *ret_pidfd names it. */
static pid_t child(int *ret_pipe, int *ret_pidfd) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    char c;
    close(p[1]);
    (void)!read(p[0], &c, 1);
    _exit(0);
  }
  close(p[0]);
  *ret_pipe = p[1];
  *ret_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  ck_assert_msg(*ret_pidfd >= 0, "pidfd_open: this kernel has no pidfds");
  return pid;
}

static void end_child(pid_t pid, int pipe_fd) {
  close(pipe_fd); /* the child reads EOF and exits */
  ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
}

struct ended {
  int n;
  char id[SESSION_ID_LEN];
  char why[80];
};

static void on_ended(const struct session_info *s, const char *why, void *arg) {
  struct ended *e = arg;
  e->n++;
  snprintf(e->id, sizeof e->id, "%s", s->id);
  snprintf(e->why, sizeof e->why, "%s", why);
}

START_TEST(test_a_session_is_its_owners_alone) {
  struct session_table *t = make_table();
  struct qdp_error e = QDP_ERROR_INIT;
  struct session_info a, b;
  CK_OK(session_open(t, "uid:1000", getpid(), -1, 0, "train", 1000, &a, &e), e);
  ck_assert_int_eq(strlen(a.id), SESSION_ID_LEN - 1);
  ck_assert_int_eq(a.id[0], 'c');
  ck_assert_str_eq(a.label, "train");
  ck_assert_int_eq(a.pid, getpid());
  CK_OK(session_open(t, "uid:1000", getpid(), -1, 0, NULL, 1000, &b, &e), e);
  ck_assert_str_ne(a.id, b.id);
  /* Another identity's id answers as an unknown one, for a heartbeat and a close alike. */
  CK_STATUS(session_touch(t, "uid:1001", a.id, "session", 2000, NULL, &e), QDP_ERR_NOT_FOUND, e);
  ck_assert_str_eq(e.field, "session");
  CK_STATUS(session_close(t, "uid:1001", a.id, NULL, &e), QDP_ERR_NOT_FOUND, e);
  CK_STATUS(session_touch(t, "uid:1000", "c0123", "session", 2000, NULL, &e), QDP_ERR_NOT_FOUND,
            e);
  struct session_info got;
  CK_OK(session_touch(t, "uid:1000", a.id, "session", 2500, &got, &e), e);
  ck_assert_int_eq(got.seen_unix_ms, 2500);
  ck_assert_uint_eq(session_count(t), 2);
  CK_OK(session_close(t, "uid:1000", a.id, &got, &e), e);
  ck_assert_str_eq(got.id, a.id);
  /* Closed: gone for good. */
  CK_STATUS(session_close(t, "uid:1000", a.id, NULL, &e), QDP_ERR_NOT_FOUND, e);
  CK_STATUS(session_touch(t, "uid:1000", a.id, "session", 3000, NULL, &e), QDP_ERR_NOT_FOUND, e);
  ck_assert_uint_eq(session_count(t), 1);
  session_table_destroy(t);
}
END_TEST

START_TEST(test_open_refusals) {
  struct session_table *t = make_table();
  struct qdp_error e = QDP_ERROR_INIT;
  /* No process on the node and no heartbeat: nothing would ever end it. */
  CK_STATUS(session_open(t, "tcp:alice", 0, -1, 0, NULL, 0, NULL, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "heartbeat_ms");
  CK_STATUS(session_open(t, "tcp:alice", 0, -1, 60001, NULL, 0, NULL, &e),
            QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_ptr_nonnull(strstr(e.msg, "60000"));
  char label[80];
  memset(label, 'x', sizeof label - 1);
  label[sizeof label - 1] = '\0';
  CK_STATUS(session_open(t, "tcp:alice", 0, -1, 1000, label, 0, NULL, &e),
            QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "label");
  /* Per owner, then all together: the counts and the limits in the message. */
  for (int i = 0; i < 3; i++) {
    CK_OK(session_open(t, "tcp:alice", 0, -1, 1000, NULL, 0, NULL, &e), e);
  }
  CK_STATUS(session_open(t, "tcp:alice", 0, -1, 1000, NULL, 0, NULL, &e),
            QDP_ERR_RESOURCE_EXHAUSTED, e);
  ck_assert_ptr_nonnull(strstr(e.msg, "max_client_sessions = 3"));
  char owner[16];
  for (int i = 0; i < 5; i++) {
    snprintf(owner, sizeof owner, "tcp:u%d", i);
    CK_OK(session_open(t, owner, 0, -1, 1000, NULL, 0, NULL, &e), e);
  }
  CK_STATUS(session_open(t, "tcp:bob", 0, -1, 1000, NULL, 0, NULL, &e),
            QDP_ERR_RESOURCE_EXHAUSTED, e);
  ck_assert_ptr_nonnull(strstr(e.msg, "max_sessions = 8"));
  session_table_destroy(t);
}
END_TEST

START_TEST(test_a_heartbeat_session_ends_when_its_calls_stop) {
  struct session_table *t = make_table();
  struct qdp_error e = QDP_ERROR_INIT;
  struct session_info s;
  struct ended ended = {0};
  CK_OK(session_open(t, "tcp:alice", 0, -1, 500, NULL, 1000, &s, &e), e);
  ck_assert_uint_eq(session_sweep(t, 1500, on_ended, &ended), 0); /* exactly the timeout: lives */
  CK_OK(session_touch(t, "tcp:alice", s.id, "session", 1400, NULL, &e), e);
  ck_assert_uint_eq(session_sweep(t, 1900, on_ended, &ended), 0);
  ck_assert_uint_eq(session_sweep(t, 1901, on_ended, &ended), 1);
  ck_assert_int_eq(ended.n, 1);
  ck_assert_str_eq(ended.id, s.id);
  ck_assert_ptr_nonnull(strstr(ended.why, "heartbeat"));
  CK_STATUS(session_touch(t, "tcp:alice", s.id, "session", 1901, NULL, &e), QDP_ERR_NOT_FOUND, e);
  session_table_destroy(t);
}
END_TEST

START_TEST(test_a_session_ends_with_its_process) {
  struct session_table *t = make_table();
  struct qdp_error e = QDP_ERROR_INIT;
  int pipe_fd, pidfd;
  pid_t pid = child(&pipe_fd, &pidfd);
  struct session_info s, mine;
  struct ended ended = {0};
  CK_OK(session_open(t, "uid:1000", pid, pidfd, 0, NULL, 0, &s, &e), e);
  close(pidfd); /* the table keeps its own */
  CK_OK(session_open(t, "uid:1000", getpid(), -1, 0, NULL, 0, &mine, &e), e);
  ck_assert_uint_eq(session_sweep(t, 10, on_ended, &ended), 0);
  end_child(pid, pipe_fd);
  /* No grace: a process that exited does not come back. */
  ck_assert_uint_eq(session_sweep(t, 20, on_ended, &ended), 1);
  ck_assert_str_eq(ended.id, s.id);
  ck_assert_ptr_nonnull(strstr(ended.why, "process exited"));
  ck_assert_uint_eq(session_count(t), 1);
  CK_OK(session_touch(t, "uid:1000", mine.id, "session", 30, NULL, &e), e);
  session_table_destroy(t);
}
END_TEST

/* The container case and the reused pid: the process is named by its pidfd, so a pid unknown
 * here (0) or one that now names a live process (our parent's) does not keep it alive. Before
 * pidfds, such a lease or session could never end. */
START_TEST(test_a_pidfd_ends_a_process_its_pid_cannot) {
  int pipe_fd, pidfd;
  pid_t pid = child(&pipe_fd, &pidfd);
  struct client_process unknown_pid, reused_pid, by_pid;
  client_process_init(&unknown_pid, 0, pidfd);
  client_process_init(&reused_pid, (int)getppid(), pidfd);
  client_process_init(&by_pid, (int)getppid(), -1);
  close(pidfd);
  ck_assert(!client_process_gone(&unknown_pid, 100, 0));
  end_child(pid, pipe_fd);
  ck_assert(client_process_gone(&unknown_pid, 200, 0));
  ck_assert(!client_process_gone(&reused_pid, 200, 50)); /* the grace starts */
  ck_assert(client_process_gone(&reused_pid, 250, 50));
  ck_assert(!client_process_gone(&by_pid, 250, 0)); /* by pid alone, alive */
  /* The standard streams are never taken for pidfds. */
  struct client_process none;
  client_process_init(&none, 0, 0);
  ck_assert_int_eq(none.pidfd, -1);
  ck_assert(!client_process_gone(&none, 300, 0));
  client_process_end(&unknown_pid);
  client_process_end(&reused_pid);
  client_process_end(&by_pid);
  client_process_end(&by_pid); /* idempotent */
}
END_TEST

struct payload {
  int destroyed;
};

static void payload_destroy(void *p) {
  ((struct payload *)p)->destroyed++;
}

static void add_state(struct state_store *s, const char *session, struct payload *p, char *h,
                      char *t) {
  struct state_reservation *r = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(state_store_admit(s, "uid:1000", 100, &r, &e), e);
  CK_OK(state_reservation_join(r, session, &e), e);
  CK_OK(state_store_commit(s, r, p, payload_destroy, 0, NULL, h, t, &e), e);
}

START_TEST(test_the_store_releases_a_sessions_states_only) {
  struct state_store_limits lim = {0};
  struct state_store *s = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(state_store_create(&lim, &s, &e), e);
  const char *A = "caaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", *B = "cbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
  struct payload pa1 = {0}, pa2 = {0}, pb = {0}, pn = {0};
  char h[4][STATE_HANDLE_LEN], t[4][STATE_TOKEN_LEN];
  add_state(s, A, &pa1, h[0], t[0]);
  add_state(s, A, &pa2, h[1], t[1]);
  add_state(s, B, &pb, h[2], t[2]);
  add_state(s, NULL, &pn, h[3], t[3]);
  void *got = NULL;
  struct state_meta m;
  CK_OK(state_store_get(s, h[0], t[0], &got, &m, &e), e);
  ck_assert_str_eq(m.session, A);
  state_store_put(s, got);
  /* One released by hand first: the session's end skips it. */
  CK_OK(state_store_release(s, h[1], t[1], NULL, &e), e);
  uint64_t bytes = 0;
  ck_assert_uint_eq(state_store_end_session(s, A, &bytes), 1);
  ck_assert_uint_eq(bytes, 100);
  ck_assert_int_eq(pa1.destroyed, 1);
  ck_assert_int_eq(pb.destroyed + pn.destroyed, 0);
  CK_STATUS(state_store_get(s, h[0], t[0], &got, NULL, &e), QDP_ERR_NOT_FOUND, e);
  ck_assert_uint_eq(state_store_end_session(s, "", &bytes), 0); /* "" is no session */
  ck_assert_uint_eq(state_store_end_session(s, A, &bytes), 0);
  ck_assert_uint_eq(state_store_end_session(s, B, &bytes), 1);
  uint32_t states = 0;
  state_store_usage(s, NULL, &states, NULL);
  ck_assert_uint_eq(states, 1);
  /* A session id too long for the record is refused, not cut. */
  struct state_reservation *r = NULL;
  CK_OK(state_store_admit(s, "uid:1000", 1, &r, &e), e);
  CK_STATUS(state_reservation_join(r, "c0123456789012345678901234567890123", &e),
            QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "session");
  state_reservation_cancel(r);
  state_store_destroy(s);
}
END_TEST

static void region_end(void *p) {
  ((struct payload *)p)->destroyed++;
}

START_TEST(test_the_registry_ends_a_sessions_regions_only) {
  struct region_registry *r = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(region_registry_create(0, 0, &r, &e), e);
  const char *A = "caaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  struct payload pa = {0}, pn = {0};
  char h[2][REGION_HANDLE_LEN], t[2][REGION_TOKEN_LEN];
  struct region_meta m;
  CK_OK(region_registry_reserve(r, "uid:1000", &e), e);
  CK_OK(region_registry_commit(r, "uid:1000", 0, -1, A, 64, &pa, region_end, h[0], t[0], &m, &e),
        e);
  ck_assert_str_eq(m.session, A);
  CK_OK(region_registry_reserve(r, "uid:1000", &e), e);
  CK_OK(region_registry_commit(r, "uid:1000", 0, -1, NULL, 64, &pn, region_end, h[1], t[1], &m,
                               &e),
        e);
  ck_assert_str_eq(m.session, "");
  ck_assert_uint_eq(region_registry_end_session(r, A, NULL, NULL), 1);
  ck_assert_int_eq(pa.destroyed, 1);
  ck_assert_int_eq(pn.destroyed, 0);
  uint32_t n = 0;
  region_registry_usage(r, &n, NULL);
  ck_assert_uint_eq(n, 1);
  ck_assert_uint_eq(region_registry_end_session(r, A, NULL, NULL), 0);
  region_registry_destroy(r);
  ck_assert_int_eq(pn.destroyed, 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sessions");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_a_session_is_its_owners_alone);
  tcase_add_test(tc, test_open_refusals);
  tcase_add_test(tc, test_a_heartbeat_session_ends_when_its_calls_stop);
  tcase_add_test(tc, test_a_session_ends_with_its_process);
  tcase_add_test(tc, test_a_pidfd_ends_a_process_its_pid_cannot);
  tcase_add_test(tc, test_the_store_releases_a_sessions_states_only);
  tcase_add_test(tc, test_the_registry_ends_a_sessions_regions_only);
  suite_add_tcase(s, tc);
  return qdpt_run_suite(s, CK_FORK_GETENV);
}
