/* listener.c — the Unix socket: accept, peer credentials, the first bytes, then gRPC or a
 * descriptor handoff. Everything but rpc_listener_peer runs on the loop thread. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>

#include "clock.h"
#include "listener.h"
#include "log.h"
#include "state/tickets.h"

/* Connections accepted but not yet known to be gRPC or a handoff: a client that connects and
 * says nothing holds one for at most PENDING_TIMEOUT_MS. */
#define PENDING_MAX 256
#define PENDING_TIMEOUT_MS 10000
#define SWEEP_MS 1000

#define HANDOFF_MAGIC "QDPFD/1\n"
#define HANDOFF_BYTES 16
#define HANDOFF_TAKE 3     /* the access of a request for a view's descriptor */
#define HANDOFF_TICKET_MAX 64

struct pending {
  struct pending *next;
  struct rpc_listener *l;
  uv_poll_t poll;
  int fd;
  struct rpc_peer peer;
  uint64_t since_ns;
};

struct peer_slot {
  bool known;
  struct rpc_peer peer;
  ino_t ino; /* the connection's socket: a slot whose fd no longer is it lost its connection */
};

struct rpc_listener {
  uv_loop_t *loop;
  grpc_server *server;
  grpc_server_credentials *creds;
  struct fd_tickets *tickets;
  struct fd_tickets *view_tickets;
  int fd;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  bool bound;
  uv_poll_t poll;
  uv_timer_t sweep;
  bool started;
  struct pending *pending;
  unsigned npending;
  int open_handles;
  void (*done)(void *arg);
  void *done_arg;

  pthread_mutex_t mu; /* peers: written here, read by the completion-queue thread */
  struct peer_slot *peers;
  size_t npeers;
};

/* Linux 6.5's SO_PEERPIDFD, which older C headers lack; older kernels answer ENOPROTOOPT. */
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* A pidfd of the peer of connection fd whose credentials say pid, or -1. SO_PEERPIDFD names the
 * process that connected even if it has exited since; pidfd_open of its pid (kernels 5.3 to 6.4)
 * could name a process that took the pid in between, which the pidfd's own test then answers
 * for instead: a lease or session of the wrong process lives on (until closed or expired), never
 * one that ends early. */
static int peer_pidfd(int fd, pid_t pid) {
  int pidfd = -1;
  socklen_t len = sizeof pidfd;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0) {
    return pidfd;
  }
#ifdef SYS_pidfd_open
  if (pid > 0) {
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd >= 0) {
      (void)fcntl(pidfd, F_SETFD, FD_CLOEXEC);
      return pidfd;
    }
  }
#endif
  return -1;
}

static void peer_end(struct rpc_peer *p) {
  if (p->pidfd >= 0) {
    close(p->pidfd);
    p->pidfd = -1;
  }
}

void rpc_peer_key(const struct rpc_peer *p, char *buf, size_t len) {
  snprintf(buf, len, "uid:%u", (unsigned)p->uid);
}

/* ---- lifecycle --------------------------------------------------------------------------------
 */

static qdp_status resolve_group(const char *name, gid_t *ret, struct qdp_error *reterr) {
  char *end = NULL;
  errno = 0;
  unsigned long v = strtoul(name, &end, 10);
  if (*name && end && *end == '\0' && errno == 0 && v <= UINT32_MAX - 1) {
    *ret = (gid_t)v;
    return QDP_OK;
  }
  struct group gr, *found = NULL;
  char buf[4096];
  int e = getgrnam_r(name, &gr, buf, sizeof buf, &found);
  if (e != 0 || !found) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "socket_group",
                         "socket_group = '%.64s' is not a group of this host", name);
  }
  *ret = found->gr_gid;
  return QDP_OK;
}

/* sa for path, checked to fit, and its length; l keeps a copy of path. */
static qdp_status unix_address(struct rpc_listener *l, const char *path, struct sockaddr_un *sa,
                               socklen_t *ret_len, struct qdp_error *reterr) {
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof sa->sun_path) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "socket",
                         "socket = '%.200s' is %zu B long; a Unix socket path is 1 to %zu B", path,
                         n, sizeof sa->sun_path - 1);
  }
  memcpy(sa->sun_path, path, n);
  memcpy(l->path, path, n + 1);
  *ret_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
  return QDP_OK;
}

/* l's socket, bound at path with no permission at all (a stale socket there is removed first). */
static qdp_status bind_socket(struct rpc_listener *l, const char *path,
                              const struct sockaddr_un *sa, socklen_t salen,
                              struct qdp_error *reterr) {
  l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l->fd < 0) {
    int e = errno;
    return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, e, "socket(AF_UNIX) failed: %s",
                            strerror(e));
  }
  /* A stale socket of a daemon that died: the caller holds the lock, so no live one owns it. */
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
    unlink(path);
  }
  /* Created with no permission at all, then given exactly its mode: never briefly wider. */
  mode_t old = umask(0777);
  int b = bind(l->fd, (const struct sockaddr *)sa, salen);
  int be = errno;
  umask(old);
  if (b != 0) {
    qdp_status rc = qdp_error_set_at(reterr, QDP_ERR_UNAVAILABLE, -1, be,
                                     "cannot listen on unix:%s: %s (the directory is missing or "
                                     "not writable, or another file has the name)",
                                     path, strerror(be));
    if (reterr) {
      snprintf(reterr->field, sizeof reterr->field, "socket");
    }
    return rc;
  }
  l->bound = true;
  return QDP_OK;
}

/* The bound socket's group (gid, unless -1) and mode, as opts ask. */
static qdp_status set_access(const struct rpc_listener_opts *opts, gid_t gid,
                             struct qdp_error *reterr) {
  if (gid != (gid_t)-1 && chown(opts->path, (uid_t)-1, gid) != 0) {
    int e = errno;
    return qdp_error_set_at(reterr, QDP_ERR_PERMISSION_DENIED, -1, e,
                            "cannot give unix:%s the group '%.64s': %s", opts->path, opts->group,
                            strerror(e));
  }
  if (chmod(opts->path, (mode_t)opts->mode) != 0) {
    int e = errno;
    return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, e, "cannot set mode %04o on unix:%s: %s",
                            opts->mode, opts->path, strerror(e));
  }
  return QDP_OK;
}

qdp_status rpc_listener_create(uv_loop_t *loop, const struct rpc_listener_opts *opts,
                               grpc_server *server, struct fd_tickets *tickets,
                               struct fd_tickets *view_tickets, struct rpc_listener **ret,
                               struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct rpc_listener *l = calloc(1, sizeof *l);
  if (!l) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no memory for the socket's listener (%zu B)", sizeof *l);
  }
  l->loop = loop;
  l->server = server;
  l->tickets = tickets;
  l->view_tickets = view_tickets;
  l->fd = -1;
  pthread_mutex_init(&l->mu, NULL);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  socklen_t salen = 0;
  QDP_TRY(rc, unix_address(l, opts->path, &sa, &salen, reterr));
  gid_t gid = (gid_t)-1;
  if (opts->group && opts->group[0]) {
    QDP_TRY(rc, resolve_group(opts->group, &gid, reterr));
  }
  QDP_TRY(rc, bind_socket(l, opts->path, &sa, salen, reterr));
  QDP_TRY(rc, set_access(opts, gid, reterr));
  if (listen(l->fd, 128) != 0) {
    int e = errno;
    rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, e, "listen on unix:%s failed: %s", opts->path,
                          strerror(e));
    goto out;
  }
  l->creds = grpc_insecure_server_credentials_create();
  *ret = l;
  l = NULL;
out:
  rpc_listener_destroy(l);
  return rc;
}

static void on_handle_closed(uv_handle_t *h) {
  struct rpc_listener *l = h->data;
  if (--l->open_handles == 0 && l->done) {
    void (*done)(void *) = l->done;
    l->done = NULL;
    done(l->done_arg);
  }
}

static void on_pending_closed(uv_handle_t *h) {
  struct pending *p = h->data;
  struct rpc_listener *l = p->l;
  free(p);
  if (--l->open_handles == 0 && l->done) {
    void (*done)(void *) = l->done;
    l->done = NULL;
    done(l->done_arg);
  }
}

/* Unlinks p and closes its handle; closes its descriptor and pidfd unless they went to gRPC and
 * the peers' records. The handle's
 * close takes the descriptor out of the loop's poll set at once. */
static void pending_end(struct pending *p, bool close_fd) {
  struct rpc_listener *l = p->l;
  for (struct pending **q = &l->pending; *q; q = &(*q)->next) {
    if (*q == p) {
      *q = p->next;
      l->npending--;
      break;
    }
  }
  uv_close((uv_handle_t *)&p->poll, on_pending_closed);
  if (close_fd) {
    close(p->fd);
    peer_end(&p->peer); /* else the peer's record has it (remember) */
  }
}

void rpc_listener_stop(struct rpc_listener *l, void (*done)(void *arg), void *arg) {
  if (!l || !l->started) {
    if (done) {
      done(arg);
    }
    return;
  }
  l->started = false;
  l->done = done;
  l->done_arg = arg;
  while (l->pending) {
    pending_end(l->pending, true);
  }
  uv_close((uv_handle_t *)&l->poll, on_handle_closed);
  uv_close((uv_handle_t *)&l->sweep, on_handle_closed);
}

void rpc_listener_destroy(struct rpc_listener *l) {
  if (!l) {
    return;
  }
  if (l->fd >= 0) {
    close(l->fd);
  }
  if (l->bound && unlink(l->path) != 0 && errno != ENOENT) {
    log_warning("rpc", "cannot remove '%s': %s", l->path, strerror(errno));
  }
  if (l->creds) {
    grpc_server_credentials_release(l->creds);
  }
  for (size_t i = 0; i < l->npeers; i++) {
    if (l->peers[i].known) {
      peer_end(&l->peers[i].peer);
    }
  }
  free(l->peers);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

/* ---- peers ------------------------------------------------------------------------------------
 */

static bool remember(struct rpc_listener *l, int fd, const struct rpc_peer *peer) {
  bool ok = true;
  pthread_mutex_lock(&l->mu);
  if ((size_t)fd >= l->npeers) {
    size_t n = l->npeers ? l->npeers : 64;
    while (n <= (size_t)fd) {
      n *= 2;
    }
    struct peer_slot *p = realloc(l->peers, n * sizeof *p);
    if (p) {
      memset(p + l->npeers, 0, (n - l->npeers) * sizeof *p);
      l->peers = p;
      l->npeers = n;
    } else {
      ok = false;
    }
  }
  struct stat st;
  if (ok && fstat(fd, &st) == 0) {
    if (l->peers[fd].known) {
      peer_end(&l->peers[fd].peer); /* gRPC closed that connection: fd is a new one's */
    }
    l->peers[fd] = (struct peer_slot){.known = true, .peer = *peer, .ino = st.st_ino};
  } else {
    ok = false;
  }
  pthread_mutex_unlock(&l->mu);
  return ok;
}

bool rpc_listener_peer(struct rpc_listener *l, const char *grpc_peer, struct rpc_peer *ret) {
  if (!l || !grpc_peer || strncmp(grpc_peer, "fd:", 3) != 0) {
    return false;
  }
  char *end = NULL;
  long fd = strtol(grpc_peer + 3, &end, 10);
  if (end == grpc_peer + 3 || *end != '\0' || fd < 0) {
    return false;
  }
  bool found = false;
  pthread_mutex_lock(&l->mu);
  if ((size_t)fd < l->npeers && l->peers[fd].known) {
    *ret = l->peers[fd].peer;
    found = true;
  }
  pthread_mutex_unlock(&l->mu);
  return found;
}

/* ---- the descriptor handoff ------------------------------------------------------------------ */

static void answer(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void answer(int fd, const char *fmt, ...) {
  char line[1100];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) {
    return;
  }
  if ((size_t)n > sizeof line - 2) {
    n = (int)sizeof line - 2;
  }
  for (int i = 0; i < n; i++) {
    if (line[i] == '\n' || line[i] == '\r') {
      line[i] = ' ';
    }
  }
  line[n++] = '\n';
  /* A fresh socket's buffer holds far more than a line; a client that closed gets nothing. */
  (void)!send(fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Checks a handed-over descriptor: a regular file (shared memory, memfd) opened for `access`. */
static qdp_status check_handed(int fd, enum fd_access access, struct qdp_error *err) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "fd",
                         "the descriptor is not a regular file, shared memory or memfd");
  }
  int fl = fcntl(fd, F_GETFL);
  int acc = fl & O_ACCMODE;
  bool ok = fl >= 0 && !(fl & O_PATH) &&
            (access == FD_ACCESS_READ ? acc == O_RDONLY || acc == O_RDWR
                                      : (acc == O_WRONLY || acc == O_RDWR) && !(fl & O_APPEND));
  if (!ok) {
    return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, "fd", "the descriptor is not open for %s",
                         access == FD_ACCESS_READ ? "reading" : "writing in place (not append)");
  }
  return QDP_OK;
}

/* Sends "OK\n" with fd attached; false when the client is gone or the socket refuses. */
static bool send_fd(int sock, int fd) {
  char ok[] = "OK\n";
  struct iovec iov = {.iov_base = ok, .iov_len = sizeof ok - 1};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } cbuf;
  memset(&cbuf, 0, sizeof cbuf);
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof cbuf.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)iov.iov_len;
}

/* A take: the view descriptor of the ticket that follows the header, for the same identity. */
static void take(struct rpc_listener *l, struct pending *p, const char *key,
                 const unsigned char *ticket, size_t len) {
  struct qdp_error err = QDP_ERROR_INIT;
  char name[HANDOFF_TICKET_MAX + 1];
  memcpy(name, ticket, len);
  name[len] = '\0';
  int fd = -1;
  int64_t now = (int64_t)(clock_mono_ns() / CLOCK_NS_PER_MS);
  if (fd_tickets_take(l->view_tickets, key, name, FD_ACCESS_READ, now, "view_ticket", &fd,
                      &err) == QDP_OK) {
    bool sent = send_fd(p->fd, fd);
    close(fd); /* the client's copy is its own now; a lost one is the client's loss */
    if (sent) {
      log_debug("rpc", "%s (pid %ld) took a view's descriptor", key, (long)p->peer.pid);
      return;
    }
    qdp_error_set(&err, QDP_ERR_UNAVAILABLE, NULL, "the descriptor could not be sent: %s",
                  strerror(errno));
  }
  log_info("rpc", "a view descriptor take by %s (pid %ld) was refused: %s", key,
           (long)p->peer.pid, err.msg);
  const char *st = qdp_status_name(err.code);
  answer(p->fd, "ERR %s %s", strncmp(st, "QDP_ERR_", 8) == 0 ? st + 8 : st, err.msg);
}

static void handoff(struct rpc_listener *l, struct pending *p) {
  unsigned char hdr[HANDOFF_BYTES + HANDOFF_TICKET_MAX];
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(4 * sizeof(int))];
  } cbuf;
  struct iovec iov = {.iov_base = hdr, .iov_len = sizeof hdr};
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof cbuf.buf};
  ssize_t n = recvmsg(p->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  int fds[8];
  size_t nfds = 0;
  for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&msg) : NULL; c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k && nfds < sizeof fds / sizeof fds[0]; i++) {
        memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      }
    }
  }
  struct qdp_error err = QDP_ERROR_INIT;
  uint32_t access = 0, reserved = 0; /* a take's ticket length */
  if (n >= HANDOFF_BYTES) {
    memcpy(&access, hdr + 8, 4);
    memcpy(&reserved, hdr + 12, 4);
  }
  char key[64];
  rpc_peer_key(&p->peer, key, sizeof key);
  if (n >= HANDOFF_BYTES && memcmp(hdr, HANDOFF_MAGIC, 8) == 0 && access == HANDOFF_TAKE &&
      nfds == 0 && reserved <= HANDOFF_TICKET_MAX && (size_t)n == HANDOFF_BYTES + reserved) {
    take(l, p, key, hdr + HANDOFF_BYTES, reserved);
    return;
  }
  if (n != HANDOFF_BYTES || memcmp(hdr, HANDOFF_MAGIC, 8) != 0 || reserved != 0 ||
      (access != FD_ACCESS_READ && access != FD_ACCESS_WRITE)) {
    qdp_error_set(&err, QDP_ERR_INVALID_ARGUMENT, NULL,
                  "a handoff is 16 bytes: \"QDPFD/1\\n\", a little-endian u32 access (1 read, "
                  "2 write) and a u32 0, sent with one descriptor; a take is the same with "
                  "access 3 and the ticket's length, then the ticket, without a descriptor");
  } else if (nfds != 1 || (msg.msg_flags & MSG_CTRUNC)) {
    qdp_error_set(&err, QDP_ERR_INVALID_ARGUMENT, NULL,
                  "a handoff carries exactly one descriptor (SCM_RIGHTS); this one had %zu", nfds);
  } else if (check_handed(fds[0], (enum fd_access)access, &err) == QDP_OK) {
    char ticket[FD_TICKET_LEN];
    int64_t now = (int64_t)(clock_mono_ns() / CLOCK_NS_PER_MS);
    int fd = fds[0];
    nfds = 0; /* the table's now, whatever it answers */
    if (fd_tickets_add(l->tickets, key, fd, (enum fd_access)access, now, ticket, &err) == QDP_OK) {
      log_debug("rpc", "%s (pid %ld) handed over a descriptor for %s: %.9s...", key,
                (long)p->peer.pid, access == FD_ACCESS_READ ? "reading" : "writing", ticket);
      answer(p->fd, "OK %s", ticket);
      return;
    }
  }
  for (size_t i = 0; i < nfds; i++) {
    close(fds[i]);
  }
  log_info("rpc", "a descriptor handoff from %s (pid %ld) was refused: %s", key, (long)p->peer.pid,
           err.msg);
  const char *name = qdp_status_name(err.code);
  answer(p->fd, "ERR %s %s", strncmp(name, "QDP_ERR_", 8) == 0 ? name + 8 : name, err.msg);
}

/* ---- accepting --------------------------------------------------------------------------------
 */

static void on_first_bytes(uv_poll_t *h, int status, int events) {
  (void)events;
  struct pending *p = h->data;
  struct rpc_listener *l = p->l;
  char c = 0;
  ssize_t n = status < 0 ? -1 : recv(p->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR) && status >= 0) {
    return;
  }
  if (n == 1 && c == HANDOFF_MAGIC[0]) {
    handoff(l, p);
    pending_end(p, true);
    return;
  }
  if (n != 1 || !remember(l, p->fd, &p->peer)) {
    pending_end(p, true);
    return;
  }
  int fd = p->fd;
  pending_end(p, false); /* out of the loop's poll set before gRPC polls it */
  grpc_server_add_channel_from_fd(l->server, fd, l->creds);
}

static void on_accept(uv_poll_t *h, int status, int events) {
  (void)events;
  struct rpc_listener *l = h->data;
  if (status < 0) {
    log_warning("rpc", "polling unix:%s failed: %s", l->path, uv_strerror(status));
    return;
  }
  for (;;) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        log_warning("rpc", "accept on unix:%s failed: %s", l->path, strerror(errno));
      }
      if (errno == EINTR || errno == ECONNABORTED) {
        continue;
      }
      return;
    }
    struct ucred cred;
    socklen_t len = sizeof cred;
    struct pending *p = NULL;
    if (l->npending >= PENDING_MAX) {
      log_warning("rpc", "%u connections on unix:%s have said nothing yet; refusing another",
                  l->npending, l->path);
    } else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      log_warning("rpc", "SO_PEERCRED on a new connection failed: %s", strerror(errno));
    } else {
      p = calloc(1, sizeof *p);
    }
    if (!p || uv_poll_init(l->loop, &p->poll, fd) != 0) {
      free(p);
      close(fd);
      continue;
    }
    p->l = l;
    p->fd = fd;
    p->peer = (struct rpc_peer){
        .uid = cred.uid, .gid = cred.gid, .pid = cred.pid, .pidfd = peer_pidfd(fd, cred.pid)};
    p->since_ns = clock_mono_ns();
    p->poll.data = p;
    p->next = l->pending;
    l->pending = p;
    l->npending++;
    l->open_handles++;
    uv_poll_start(&p->poll, UV_READABLE | UV_DISCONNECT, on_first_bytes);
  }
}

/* Closes the pidfds of connections gRPC has closed since (their descriptor is gone, or now another
 * file's): a connection's record lasts until its descriptor is reused, its pidfd no longer. No
 * call of a closed connection is left to borrow it (listener.h). */
static void forget_closed(struct rpc_listener *l) {
  pthread_mutex_lock(&l->mu);
  for (size_t fd = 0; fd < l->npeers; fd++) {
    struct peer_slot *p = &l->peers[fd];
    struct stat st;
    if (p->known && p->peer.pidfd >= 0 && (fstat((int)fd, &st) != 0 || st.st_ino != p->ino)) {
      peer_end(&p->peer);
      p->known = false;
    }
  }
  pthread_mutex_unlock(&l->mu);
}

static void on_sweep(uv_timer_t *t) {
  struct rpc_listener *l = t->data;
  uint64_t now = clock_mono_ns();
  forget_closed(l);
  for (struct pending *p = l->pending, *next; p; p = next) {
    next = p->next;
    if (now - p->since_ns >= PENDING_TIMEOUT_MS * CLOCK_NS_PER_MS) {
      pending_end(p, true);
    }
  }
  uint32_t n = fd_tickets_expire(l->tickets, (int64_t)(now / CLOCK_NS_PER_MS));
  uint32_t views = fd_tickets_expire(l->view_tickets, (int64_t)(now / CLOCK_NS_PER_MS));
  if (views) {
    log_info("rpc", "closed %" PRIu32 " view descriptor%s that no client took in time", views,
             views == 1 ? "" : "s");
  }
  if (n) {
    log_info("rpc", "closed %" PRIu32 " handed-over descriptor%s that no call named in time", n,
             n == 1 ? "" : "s");
  }
}

qdp_status rpc_listener_start(struct rpc_listener *l, struct qdp_error *reterr) {
  int e = uv_poll_init(l->loop, &l->poll, l->fd);
  if (e != 0) {
    return qdp_error_set(reterr, QDP_ERR_SYSTEM, NULL, "cannot poll unix:%s: %s", l->path,
                         uv_strerror(e));
  }
  l->poll.data = l;
  uv_timer_init(l->loop, &l->sweep);
  l->sweep.data = l;
  l->open_handles += 2;
  l->started = true;
  uv_poll_start(&l->poll, UV_READABLE, on_accept);
  uv_timer_start(&l->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
  return QDP_OK;
}
