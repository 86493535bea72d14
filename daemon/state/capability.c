#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "state/capability.h"

#define RANDOM_BYTES_MAX 32

qdp_status capability_random_hex(char *out, size_t nbytes, struct qdp_error *reterr) {
  unsigned char buf[RANDOM_BYTES_MAX];
  if (nbytes > sizeof buf) {
    return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                         "%zu random bytes asked for a name; at most %zu", nbytes, sizeof buf);
  }
  size_t got = 0;
  while (got < nbytes) {
    ssize_t n = getrandom(buf + got, nbytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      int err = errno;
      return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, err,
                              "getrandom(%zu B) failed: %s; no handle or token could be made",
                              nbytes, strerror(err));
    }
    got += (size_t)n;
  }
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < nbytes; i++) {
    out[2 * i] = digits[buf[i] >> 4];
    out[2 * i + 1] = digits[buf[i] & 15];
  }
  out[2 * nbytes] = '\0';
  return QDP_OK;
}

bool capability_equal(const char *want, const char *given, size_t len) {
  if (!given || strnlen(given, len + 1) != len) {
    return false;
  }
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < len; i++) {
    diff |= (unsigned char)(want[i] ^ given[i]);
  }
  return diff == 0;
}

qdp_status capability_text_len(const char **text, size_t cap, const char *field, const char *what,
                               size_t *ret_len, struct qdp_error *reterr) {
  if (!*text) {
    *text = "";
  }
  size_t n = strlen(*text);
  if (n >= cap) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s of %zu B is too long; at most %zu B", what, n, cap - 1);
  }
  *ret_len = n;
  return QDP_OK;
}

void client_process_init(struct client_process *p, int pid, int pidfd) {
  *p = (struct client_process){.pid = pid > 0 ? pid : 0, .pidfd = -1};
  if (pidfd > STDERR_FILENO) {
    p->pidfd = fcntl(pidfd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  }
}

void client_process_end(struct client_process *p) {
  if (p->pidfd >= 0) {
    close(p->pidfd);
    p->pidfd = -1;
  }
}

/* Whether the process is gone now: a pidfd polls readable once its process exited. */
static bool process_gone_now(const struct client_process *p) {
  if (p->pidfd >= 0) {
    struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
    return poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
  }
  return p->pid != 0 && kill(p->pid, 0) != 0 && errno == ESRCH;
}

bool client_process_gone(struct client_process *p, int64_t now, uint64_t grace_ms) {
  if (!process_gone_now(p)) {
    p->gone_since_ms = 0;
    return false;
  }
  if (p->gone_since_ms == 0) {
    p->gone_since_ms = now;
  }
  return now - p->gone_since_ms >= (int64_t)grace_ms;
}
