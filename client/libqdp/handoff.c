/* handoff.c — handing qdpd a descriptor this process opened, so that the daemon reads or writes
 * exactly what this process could itself (the wire is in proto/qdp.proto's header). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "libqdp_int.h"

#define HANDOFF_MAGIC "QDPFD/1\n"

int qdp__unix_path(const qdp_client *c, char *buf, size_t len) {
  const char *t = c->target;
  if (strncmp(t, "unix:", 5) != 0) {
    return 0;
  }
  t += 5;
  if (strncmp(t, "//", 2) == 0) {
    t += 2; /* unix:///abs/path */
  }
  return snprintf(buf, len, "%s", t) < (int)len;
}

/* The status an answer names ("PERMISSION_DENIED"); INTERNAL for a name libqdp does not know. */
static qdp_status status_named(const char *name) {
  for (int i = 1; i < 256; i++) {
    const char *n = qdp_status_name((qdp_status)i);
    if (n && strncmp(n, "QDP_ERR_", 8) == 0 && strcmp(n + 8, name) == 0) {
      return (qdp_status)i;
    }
  }
  return QDP_ERR_INTERNAL;
}

/* Reads the daemon's one-line answer, waiting at most the client's unary deadline. */
static qdp_status read_answer(const qdp_client *c, int s, char *line, size_t len) {
  size_t got = 0;
  struct timeval tv = {.tv_sec = c->timeout_ms > 0 ? c->timeout_ms / 1000 : 60,
                       .tv_usec = c->timeout_ms > 0 ? (c->timeout_ms % 1000) * 1000 : 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  while (got < len - 1) {
    ssize_t n = recv(s, line + got, len - 1 - got, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      int err = n < 0 ? errno : 0;
      return qdp__err_local(err == EAGAIN ? QDP_ERR_DEADLINE_EXCEEDED : QDP_ERR_UNAVAILABLE, err,
                            NULL, "qdpd at '%s' did not answer a descriptor handoff%s%s.",
                            c->target, err ? ": " : "", err ? strerror(err) : "");
    }
    got += (size_t)n;
    if (memchr(line, '\n', got)) {
      break;
    }
  }
  line[got] = '\0';
  line[strcspn(line, "\n")] = '\0';
  return QDP_OK;
}

/* A new connection to the daemon's socket for one handoff or take, in *ret_s. */
static qdp_status connect_daemon(const qdp_client *c, const char *field, const char *what,
                                 int *ret_s) {
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  if (!qdp__unix_path(c, path, sizeof path)) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, field,
                          "'%s' is not a Unix socket target; only a client on the daemon's node "
                          "can %s.",
                          c->target, what);
  }
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, path, strlen(path) + 1);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    return qdp__err_local(QDP_ERR_SYSTEM, errno, NULL, "socket(AF_UNIX) failed: %s.",
                          strerror(errno));
  }
  if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
    int err = errno;
    close(s);
    return qdp__err_local(err == EACCES ? QDP_ERR_PERMISSION_DENIED : QDP_ERR_UNAVAILABLE, err,
                          NULL, "cannot reach qdpd at '%s' to %s: %s.", c->target, what,
                          strerror(err));
  }
  *ret_s = s;
  return QDP_OK;
}

/* The daemon's "ERR <STATUS> <message>" line as an error of field, or INTERNAL for anything else
 * that is not the answer expected. */
static qdp_status refused(const qdp_client *c, const char *line, const char *field,
                          const char *what) {
  if (strncmp(line, "ERR ", 4) != 0) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL, "qdpd at '%s' answered %s with '%.64s'.",
                          c->target, what, line);
  }
  char code[48] = "";
  const char *msgp = line + 4 + strcspn(line + 4, " ");
  snprintf(code, sizeof code, "%.*s", (int)strcspn(line + 4, " "), line + 4);
  qdp_status rc = qdp__err_local(status_named(code), -1, field, "qdpd refused %s: %s", what,
                                 *msgp ? msgp + 1 : code);
  qdp__err()->remote = 1;
  return rc;
}

qdp_status qdp__take_fd(qdp_client *c, const char *ticket, int *ret_fd) {
  int s = -1;
  *ret_fd = -1;
  size_t len = strlen(ticket);
  qdp_status rc = QDP_OK;
  unsigned char req[16 + 64];
  if (len > 64) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, "view_ticket",
                          "qdpd sent a view ticket of %zu B; at most 64 B expected.", len);
  }
  if ((rc = connect_daemon(c, "view_ticket", "take a view's descriptor", &s)) != QDP_OK) {
    return rc;
  }
  uint32_t take = 3, n32 = (uint32_t)len;
  memcpy(req, HANDOFF_MAGIC, 8);
  memcpy(req + 8, &take, 4);
  memcpy(req + 12, &n32, 4);
  memcpy(req + 16, ticket, len);
  ssize_t n;
  do {
    n = send(s, req, 16 + len, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != (ssize_t)(16 + len)) {
    int err = n < 0 ? errno : EIO;
    rc = qdp__err_local(QDP_ERR_UNAVAILABLE, err, NULL,
                        "asking qdpd at '%s' for a view's descriptor failed: %s.", c->target,
                        strerror(err));
    goto out;
  }
  /* The answer line, with the descriptor attached to its first bytes. */
  struct timeval tv = {.tv_sec = c->timeout_ms > 0 ? c->timeout_ms / 1000 : 60,
                       .tv_usec = c->timeout_ms > 0 ? (c->timeout_ms % 1000) * 1000 : 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char line[1200];
  size_t got = 0;
  while (got < sizeof line - 1 && !memchr(line, '\n', got)) {
    union {
      struct cmsghdr align;
      char buf[CMSG_SPACE(4 * sizeof(int))];
    } cbuf;
    struct iovec iov = {.iov_base = line + got, .iov_len = sizeof line - 1 - got};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof cbuf.buf};
    n = recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    for (struct cmsghdr *cm = n > 0 ? CMSG_FIRSTHDR(&msg) : NULL; cm; cm = CMSG_NXTHDR(&msg, cm)) {
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
          int fd;
          memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
          if (*ret_fd < 0) {
            *ret_fd = fd;
          } else {
            close(fd); /* one is all a take gives */
          }
        }
      }
    }
    if (n <= 0) {
      int err = n < 0 ? errno : 0;
      rc = qdp__err_local(err == EAGAIN ? QDP_ERR_DEADLINE_EXCEEDED : QDP_ERR_UNAVAILABLE, err,
                          NULL, "qdpd at '%s' did not answer a view descriptor's take%s%s.",
                          c->target, err ? ": " : "", err ? strerror(err) : "");
      goto out;
    }
    got += (size_t)n;
  }
  line[got] = '\0';
  line[strcspn(line, "\n")] = '\0';
  if (strcmp(line, "OK") != 0 || *ret_fd < 0) {
    rc = strcmp(line, "OK") == 0
             ? qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                              "qdpd at '%s' answered a take without a descriptor.", c->target)
             : refused(c, line, "view_ticket", "a view's descriptor");
  }
out:
  if (rc != QDP_OK && *ret_fd >= 0) {
    close(*ret_fd);
    *ret_fd = -1;
  }
  close(s);
  return rc;
}

qdp_status qdp__handoff(qdp_client *c, int fd, int access, const char *field, char *ticket,
                        size_t len) {
  int s = -1;
  qdp_status rc = connect_daemon(c, field, "hand it what it opened", &s);
  if (rc != QDP_OK) {
    return rc;
  }
  unsigned char hdr[16];
  uint32_t acc = (uint32_t)access, zero = 0;
  memcpy(hdr, HANDOFF_MAGIC, 8);
  memcpy(hdr + 8, &acc, 4);
  memcpy(hdr + 12, &zero, 4);
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } cbuf;
  memset(&cbuf, 0, sizeof cbuf);
  struct iovec iov = {.iov_base = hdr, .iov_len = sizeof hdr};
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof cbuf.buf};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  ssize_t n;
  do {
    n = sendmsg(s, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof hdr) {
    int err = n < 0 ? errno : EIO;
    rc = qdp__err_local(QDP_ERR_UNAVAILABLE, err, NULL,
                        "handing a descriptor to qdpd at '%s' failed: %s.", c->target,
                        strerror(err));
    goto out;
  }
  char line[1200];
  rc = read_answer(c, s, line, sizeof line);
  if (rc != QDP_OK) {
    goto out;
  }
  if (strncmp(line, "OK ", 3) == 0 && strlen(line + 3) < len) {
    snprintf(ticket, len, "%s", line + 3);
  } else {
    rc = refused(c, line, field, "the descriptor");
  }
out:
  close(s);
  return rc;
}

int qdp__open_shm(const char *name, int pid, int fd, bool writable, qdp_status *rc) {
  int f = -1;
  int mode = writable ? O_RDWR : O_RDONLY;
  if (name && *name) {
    f = shm_open(name, mode, 0);
    if (f < 0) {
      int err = errno;
      *rc = qdp__err_local(qdp__errno_status(err, QDP_ERR_INVALID_ARGUMENT), err, "shm.name",
                           "Cannot open shared memory '%s': %s.", name, strerror(err));
    }
    return f;
  }
  if (pid <= 0 || fd < 0) {
    *rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "shm",
                         "Shared memory needs a name, or a pid > 0 and an fd >= 0 (got %d, %d).",
                         pid, fd);
    return -1;
  }
  if (pid == (int)getpid()) {
    /* Our own descriptor, with the access it was opened with: the daemon checks it. */
    f = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  } else {
    /* Another process's descriptor, with this process's own rights (it must be one we could
     * trace). stat first: opening a FIFO would block, a device may have side effects. */
    char p[64];
    struct stat st;
    snprintf(p, sizeof p, "/proc/%d/fd/%d", pid, fd);
    if (stat(p, &st) == 0 && !S_ISREG(st.st_mode)) {
      errno = EINVAL;
    } else {
      f = open(p, mode | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    }
  }
  if (f < 0) {
    int err = errno;
    *rc = qdp__err_local(qdp__errno_status(err, QDP_ERR_INVALID_ARGUMENT), err, "shm.fd",
                         "Cannot open fd %d of process %d: %s%s.", fd, pid, strerror(err),
                         err == EINVAL ? " (not shared memory or a regular file)" : "");
  }
  return f;
}
