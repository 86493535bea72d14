/* tests/common.h: the helpers every C test may link (qdp_test). */
#include "common.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t rng_state;

void qdpt_rng_seed(uint64_t seed) {
  rng_state = seed;
}

uint64_t qdpt_rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double qdpt_rng_uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(qdpt_rng_next() >> 11) * 0x1.0p-53);
}

void *qdpt_xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  ck_assert_msg(p != NULL, "malloc of %zu bytes failed", bytes);
  return p;
}

void *qdpt_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  ck_assert_msg(p != NULL, "calloc of %zu x %zu bytes failed", n, size);
  return p;
}

int qdpt_dead_pid(void) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    _exit(0);
  }
  ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
  return (int)pid;
}

int qdpt_run_suite(Suite *s, enum fork_status fork) {
  SRunner *sr = srunner_create(s);
  if (fork != CK_FORK_GETENV) {
    srunner_set_fork_status(sr, fork);
  }
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
