/* The allocator shim of the allocation-failure sweeps (alloc_shim.h). */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_shim.h"
#include "common.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
int __real_posix_memalign(void **ret, size_t align, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);
int __wrap_posix_memalign(void **ret, size_t align, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

/* Allocations made while armed that are still live; one operation makes a few hundred at most. */
#define LIVE_MAX 4096

static pthread_mutex_t shim_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  bool armed;
  unsigned long calls;   /* counted calls since arming */
  unsigned long fail_at; /* the call that fails (1-based); 0 none */
  bool failed;           /* it was reached */
  void *live[LIVE_MAX];
  size_t nlive;
  bool overflow; /* more live allocations than LIVE_MAX: the count is no longer exact */
} shim;

/* Whether this counted call is the one to fail. */
static bool inject(void) {
  pthread_mutex_lock(&shim_mu);
  bool fail = false;
  if (shim.armed) {
    shim.calls++;
    fail = shim.calls == shim.fail_at;
    shim.failed = shim.failed || fail;
  }
  pthread_mutex_unlock(&shim_mu);
  return fail;
}

static void track(void *p) {
  if (!p) {
    return;
  }
  pthread_mutex_lock(&shim_mu);
  if (shim.armed) {
    if (shim.nlive < LIVE_MAX) {
      shim.live[shim.nlive++] = p;
    } else {
      shim.overflow = true;
    }
  }
  pthread_mutex_unlock(&shim_mu);
}

/* Forgets p if it was made while armed (freed after disarming counts too). */
static void untrack(void *p) {
  if (!p) {
    return;
  }
  pthread_mutex_lock(&shim_mu);
  for (size_t i = 0; i < shim.nlive; i++) {
    if (shim.live[i] == p) {
      shim.live[i] = shim.live[--shim.nlive];
      break;
    }
  }
  pthread_mutex_unlock(&shim_mu);
}

void *__wrap_malloc(size_t n) {
  if (inject()) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = __real_malloc(n);
  track(p);
  return p;
}

void *__wrap_calloc(size_t k, size_t n) {
  if (inject()) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = __real_calloc(k, n);
  track(p);
  return p;
}

void *__wrap_realloc(void *p, size_t n) {
  if (inject()) {
    errno = ENOMEM;
    return NULL; /* p stays as it was, and live */
  }
  void *q = __real_realloc(p, n);
  if (q) {
    untrack(p);
    track(q);
  }
  return q;
}

void __wrap_free(void *p) {
  untrack(p);
  __real_free(p);
}

int __wrap_posix_memalign(void **ret, size_t align, size_t n) {
  if (inject()) {
    return ENOMEM;
  }
  int err = __real_posix_memalign(ret, align, n);
  if (err == 0) {
    track(*ret);
  }
  return err;
}

void *__wrap_aligned_alloc(size_t align, size_t n) {
  if (inject()) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = __real_aligned_alloc(align, n);
  track(p);
  return p;
}

char *__wrap_strdup(const char *s) {
  if (inject()) {
    errno = ENOMEM;
    return NULL;
  }
  char *p = __real_strdup(s);
  track(p);
  return p;
}

char *__wrap_strndup(const char *s, size_t n) {
  if (inject()) {
    errno = ENOMEM;
    return NULL;
  }
  char *p = __real_strndup(s, n);
  track(p);
  return p;
}

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg) {
  if (inject()) {
    return EAGAIN;
  }
  return __real_pthread_create(t, attr, fn, arg);
}

void shim_arm(unsigned long fail_at) {
  pthread_mutex_lock(&shim_mu);
  shim.armed = true;
  shim.calls = 0;
  shim.fail_at = fail_at;
  shim.failed = false;
  shim.nlive = 0;
  shim.overflow = false;
  pthread_mutex_unlock(&shim_mu);
}

/* Stops counting; returns whether the call to fail was reached. */
bool shim_disarm(void) {
  pthread_mutex_lock(&shim_mu);
  shim.armed = false;
  bool failed = shim.failed;
  pthread_mutex_unlock(&shim_mu);
  return failed;
}

size_t shim_live_count(void) {
  pthread_mutex_lock(&shim_mu);
  size_t n = shim.nlive;
  bool over = shim.overflow;
  pthread_mutex_unlock(&shim_mu);
  ck_assert_msg(!over, "more than %d allocations live at once: raise LIVE_MAX", LIVE_MAX);
  return n;
}

/* More calls than any operation here makes: a sweep that reaches it has lost its way. */
#define SWEEP_MAX 20000

unsigned long shim_sweep(const char *what, op_fn op, check_fn check, void *arg) {
  for (unsigned long n = 1; n <= SWEEP_MAX; n++) {
    struct qdp_error e = QDP_ERROR_INIT;
    shim_arm(n);
    qdp_status rc = op(arg, &e);
    bool failed = shim_disarm();
    ck_assert_msg(shim_live_count() == 0,
                  "%s, call %lu failed: %zu allocations left live (status %d)",
                  what, n, shim_live_count(), (int)rc);
    if (check) {
      check(arg, rc);
    }
    if (!failed) {
      CK_OK_AT(rc, e, "%s, with no failure injected", what);
      return n - 1;
    }
    if (rc != QDP_OK) {
      ck_assert_msg(rc == QDP_ERR_RESOURCE_EXHAUSTED,
                    "%s, call %lu failed: status %d (%s), not RESOURCE_EXHAUSTED", what, n, (int)rc,
                    e.msg);
      ck_assert_msg(e.code == rc && e.msg[0] != '\0', "%s, call %lu failed: no message", what, n);
    }
  }
  ck_abort_msg("%s: still injecting after %d calls", what, SWEEP_MAX);
  return 0;
}

