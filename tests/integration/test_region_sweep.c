/* Integration: a process killed while it holds registered regions leaves nothing registered. A
 * real qdpd (with_qdpd.sh, --expire-interval 1 --lease-grace 1) finds the registering process
 * gone at a sweep and unregisters its regions a grace later, as UnregisterRegion would: Status
 * counts neither them nor their bytes, and the log names each one. A live process's region is
 * never swept, however many sweeps pass, nor one registered with QDP_REGION_KEEP.
 *
 * The killed process is this program again (`test_region_sweep hold`), started with posix_spawn:
 * a forked copy of a process with gRPC's threads would not survive, and its own connection makes
 * the kernel name its own pid as the regions' process.
 * Usage: test_region_sweep             (QDP_TARGET, QDPD_LOG set by with_qdpd.sh)
 *        test_region_sweep hold [keep] (registers two regions, kept or not, prints their handles
 *                                       and tokens, waits to be killed) */
#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "qdp.h"

extern char **environ;

/* The holder's regions: one read-only of 1 MiB, one writable of three pages. */
#define HOLD_RO_BYTES (UINT64_C(1) << 20)
#define HOLD_RW_BYTES (UINT64_C(3) * 4096)
/* A sweep every second and a grace of one: the regions go within about 2 s of the kill; 20 s is
 * the patience of a loaded machine. */
#define SWEEP_WAIT_MS 20000

static char self[4096];
static qdp_client *cl;

static void setup(void) {
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.client_name = "region-sweep@test:1";
  CK_QDP(qdp_client_create(&o, &cl));
}

static void teardown(void) {
  qdp_client_destroy(cl);
  cl = NULL;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Regions registered on the daemon now, and their bytes. */
static uint32_t registered(uint64_t *ret_bytes) {
  struct qdp_server_status *st = NULL;
  CK_QDP(qdp_get_status(cl, &st));
  uint32_t n = st->regions;
  *ret_bytes = st->region_bytes;
  qdp_server_status_free(st);
  return n;
}

/* Waits until `want` regions are registered; returns how many are. */
static uint32_t wait_registered(uint32_t want, uint64_t *ret_bytes) {
  int64_t deadline = now_ms() + SWEEP_WAIT_MS;
  uint32_t n;
  while ((n = registered(ret_bytes)) != want && now_ms() < deadline) {
    sleep_ms(100);
  }
  return n;
}

/* A memfd of `bytes` whose first values are 0.6 and 0.8, or -1; no Check here, as the holder
 * runs outside a test. */
static int memfd_of(uint64_t bytes) {
  int fd = memfd_create("qdp-sweep", MFD_CLOEXEC);
  double v[2] = {0.6, 0.8};
  if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0 ||
      pwrite(fd, v, sizeof v, 0) != (ssize_t)sizeof v) {
    perror("memfd");
    if (fd >= 0) {
      close(fd);
    }
    return -1;
  }
  return fd;
}

/* `hold`: registers the two regions from a connection of its own (with `flags`), tells the
 * parent their handles and tokens, and waits to be killed without unregistering them. */
static int hold(unsigned flags) {
  qdp_client *c = NULL;
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.client_name = "region-sweep-holder@test:1";
  if (qdp_client_create(&o, &c) != QDP_OK) {
    fprintf(stderr, "holder: %s\n", qdp_last_error()->msg);
    return 1;
  }
  struct qdp_region_info ro = QDP_REGION_INFO_INIT, rw = QDP_REGION_INFO_INIT;
  int fro = memfd_of(HOLD_RO_BYTES), frw = memfd_of(HOLD_RW_BYTES);
  if (fro < 0 || frw < 0) {
    return 1;
  }
  if (qdp_region_register_flags(c, NULL, (int)getpid(), fro, flags, &ro) != QDP_OK ||
      qdp_region_register_flags(c, NULL, (int)getpid(), frw, flags | QDP_REGION_WRITABLE, &rw) !=
          QDP_OK) {
    fprintf(stderr, "holder: %s\n", qdp_last_error()->msg);
    return 1;
  }
  printf("%s %s %s %s %d\n", ro.handle, ro.token, rw.handle, rw.token, (int)getpid());
  fflush(stdout);
  for (;;) {
    pause();
  }
}

struct holder {
  pid_t pid;
  char ro[64], ro_token[64], rw[64], rw_token[64];
};

/* Starts `test_region_sweep hold [keep]` and reads its line once its regions are registered. */
static void start_holder(struct holder *h, bool keep) {
  int p[2];
  ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
  char *argv[] = {self, (char *)"hold", keep ? (char *)"keep" : NULL, NULL};
  ck_assert_int_eq(posix_spawn(&h->pid, self, &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  FILE *f = fdopen(p[0], "r");
  ck_assert_ptr_nonnull(f);
  int pid = 0;
  int got = fscanf(f, "%63s %63s %63s %63s %d", h->ro, h->ro_token, h->rw, h->rw_token, &pid);
  fclose(f);
  ck_assert_msg(got == 5 && pid == h->pid, "the holder (pid %d) printed %d fields", (int)h->pid,
                got);
}

/* SIGKILL, and reaped: a zombie's pid still exists. */
static void kill_holder(struct holder *h) {
  ck_assert_int_eq(kill(h->pid, SIGKILL), 0);
  int st = 0;
  ck_assert_int_eq(waitpid(h->pid, &st, 0), h->pid);
  ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

/* Whether the daemon's log has the sweep's line for region `handle` of process pid. */
static bool logged_swept(const char *handle, pid_t pid, uint64_t bytes) {
  const char *path = getenv("QDPD_LOG");
  ck_assert_ptr_nonnull(path);
  char want[256];
  snprintf(want, sizeof want,
           "unregistered region %s of uid:%d (%" PRIu64 " B): its process %d has exited", handle,
           (int)getuid(), bytes, (int)pid);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char line[1024];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    found = strstr(line, want) != NULL;
  }
  fclose(f);
  return found;
}

START_TEST(test_a_killed_process_s_regions_are_unregistered) {
  uint64_t bytes = 1;
  ck_assert_uint_eq(registered(&bytes), 0);
  struct holder h;
  start_holder(&h, false);
  ck_assert_uint_eq(registered(&bytes), 2);
  ck_assert_uint_eq(bytes, HOLD_RO_BYTES + HOLD_RW_BYTES);
  kill_holder(&h);
  ck_assert_uint_eq(wait_registered(0, &bytes), 0);
  ck_assert_uint_eq(bytes, 0);
  ck_assert_msg(logged_swept(h.ro, h.pid, HOLD_RO_BYTES), "no log line for %s", h.ro);
  ck_assert_msg(logged_swept(h.rw, h.pid, HOLD_RW_BYTES), "no log line for %s", h.rw);
}
END_TEST

START_TEST(test_a_live_process_s_region_outlasts_the_sweeps) {
  enum { MINE = 8192 };
  int fd = memfd_of(MINE);
  ck_assert_int_ge(fd, 0);
  struct qdp_region_info mine = QDP_REGION_INFO_INIT;
  CK_QDP(qdp_region_register(cl, NULL, (int)getpid(), fd, &mine));
  struct holder h;
  start_holder(&h, false);
  kill_holder(&h);
  uint64_t bytes = 0;
  ck_assert_uint_eq(wait_registered(1, &bytes), 1);
  ck_assert_uint_eq(bytes, MINE);
  /* Three more sweeps, each past the grace: this process is alive, its region stays. */
  sleep_ms(3500);
  ck_assert_uint_eq(registered(&bytes), 1);
  ck_assert_uint_eq(bytes, MINE);
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_AMPLITUDE;
  eo.qubits = 1;
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_SHM;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.cols = 2;
  in.region = mine.handle;
  in.region_token = mine.token;
  in.length = 2 * sizeof(double);
  struct qdp_state_info *s = NULL;
  CK_QDP(qdp_encode(cl, &eo, &in, &s));
  double amp[4];
  CK_QDP(qdp_fetch(cl, s->handle, s->token, NULL, amp, sizeof amp, NULL));
  ck_assert_double_eq_tol(amp[0], 0.6, 1e-15);
  ck_assert_double_eq_tol(amp[2], 0.8, 1e-15);
  CK_QDP(qdp_release(cl, s->handle, s->token, NULL));
  qdp_state_info_free(s);
  CK_QDP(qdp_region_unregister(cl, mine.handle, mine.token));
  ck_assert_uint_eq(registered(&bytes), 0);
  close(fd);
}
END_TEST

START_TEST(test_kept_regions_outlive_their_killed_process) {
  struct holder h;
  start_holder(&h, true);
  kill_holder(&h);
  /* Three sweeps, each past the grace: kept, they stay, and this identity may still use them. */
  sleep_ms(3500);
  uint64_t bytes = 0;
  ck_assert_uint_eq(registered(&bytes), 2);
  ck_assert_uint_eq(bytes, HOLD_RO_BYTES + HOLD_RW_BYTES);
  CK_QDP(qdp_region_unregister(cl, h.ro, h.ro_token));
  CK_QDP(qdp_region_unregister(cl, h.rw, h.rw_token));
  ck_assert_uint_eq(registered(&bytes), 0);
  ck_assert_uint_eq(bytes, 0);
}
END_TEST

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "hold") == 0) {
    return hold(argc == 3 && strcmp(argv[2], "keep") == 0 ? QDP_REGION_KEEP : 0);
  }
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    perror("readlink /proc/self/exe");
    return 1;
  }
  self[n] = '\0';
  Suite *s = suite_create("region-sweep");
  TCase *t = tcase_create("sweep");
  tcase_set_timeout(t, 60);
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_a_killed_process_s_regions_are_unregistered);
  tcase_add_test(t, test_a_live_process_s_region_outlasts_the_sweeps);
  tcase_add_test(t, test_kept_regions_outlive_their_killed_process);
  suite_add_tcase(s, t);
  return qdpt_run_suite(s, CK_NOFORK);
}
