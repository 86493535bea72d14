#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "io/guard.h"

/* One slot per job that can hold a mapping at once: at most one input per job and at most 256
 * worker threads (the config's ceiling). */
#define GUARD_SLOTS 256

struct slot {
  atomic_int state; /* 0 free, 1 taken (being filled), 2 guarding */
  atomic_uintptr_t base;
  atomic_size_t len;
  atomic_int faulted;
};

static struct slot slots[GUARD_SLOTS];
static atomic_int installed;

static void on_sigbus(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  uintptr_t addr = (uintptr_t)si->si_addr;
  bool ours = false;
  /* Every job guarding the faulting range learns of the loss (jobs reading one registered
   * region share its mapping), and the range is replaced once for all of them. */
  for (int i = 0; i < GUARD_SLOTS; i++) {
    if (atomic_load(&slots[i].state) != 2) {
      continue;
    }
    uintptr_t b = atomic_load(&slots[i].base);
    size_t n = atomic_load(&slots[i].len);
    if (addr >= b && addr - b < n) {
      /* Zero pages over the whole range: the read (or the write into an output region) resumes,
       * and the job learns of the loss. Writable, since a faulting write must not fault again;
       * what lands there is private to the daemon and dropped with the mapping. */
      if (!ours && mmap((void *)b, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
                       MAP_FAILED) {
        break;
      }
      ours = true;
      atomic_store(&slots[i].faulted, 1);
    }
  }
  if (ours) {
    return;
  }
  /* Not ours: the default action, as if no handler were installed. */
  signal(sig, SIG_DFL);
  raise(sig);
}

qdp_status io_guard_install(struct qdp_error *reterr) {
  if (atomic_exchange(&installed, 1)) {
    return QDP_OK;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, NULL) != 0) {
    int e = errno;
    atomic_store(&installed, 0);
    return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, e, "cannot install the SIGBUS guard: %s",
                            strerror(e));
  }
  return QDP_OK;
}

int io_guard_add(void *base, size_t len) {
  for (int i = 0; i < GUARD_SLOTS; i++) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&slots[i].state, &expect, 1)) {
      atomic_store(&slots[i].base, (uintptr_t)base);
      atomic_store(&slots[i].len, len);
      atomic_store(&slots[i].faulted, 0);
      atomic_store(&slots[i].state, 2);
      return i;
    }
  }
  return -1;
}

bool io_guard_remove(int slot) {
  if (slot < 0 || slot >= GUARD_SLOTS) {
    return false;
  }
  bool faulted = atomic_load(&slots[slot].faulted) != 0;
  atomic_store(&slots[slot].state, 0);
  return faulted;
}
