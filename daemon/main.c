/* qdpd — the qdp node daemon: configuration, logging, the single-instance lock, the device mesh,
 * the state store, the gRPC server on a libuv loop, systemd notification, signals.
 *
 * Threads: main runs the libuv loop (signals, timers, the server's hand-over); the server adds a
 * completion-queue thread and its workers (daemon/rpc/server.h). Only main calls exit().
 *
 * Under mpirun or srun every rank runs this program: rank 0 is the coordinator and does all of the
 * above; the other ranks build their mesh, join the world and serve the coordinator's jobs
 * (daemon/world/world.h) without a socket of their own.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "config.h"
#include "error.h"
#include "io/guard.h"
#include "io/map.h"
#include "log.h"
#include "qdp_build_config.h"
#include "qdp_limits.h"
#include "rpc/server.h"
#include "runtime/runtime.h"
#include "state/store.h"
#include "world/world.h"

extern char **environ;

struct daemon {
  int argc;
  char **argv;
  struct config cfg;
  char socket_path[CONFIG_STR_MAX];
  char lock_path[CONFIG_STR_MAX + 8];
  int lock_fd;
  struct runtime_mesh *mesh;
  struct world *world;
  struct state_store *store;
  struct rpc_server *server;
  uv_loop_t *loop;
  uv_signal_t sig_term, sig_int, sig_hup;
  uv_timer_t watchdog;
  bool watchdog_on;
  bool stopping;
  bool signals_watched; /* sig_term, sig_int and sig_hup are open */
};

/* ---- systemd notification (sd_notify(3) without libsystemd)
 * -------------------------------------- */

static void notify(const char *msg) {
  const char *path = getenv("NOTIFY_SOCKET");
  if (!path || !path[0]) {
    return;
  }
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t n = strlen(path);
  if ((path[0] != '/' && path[0] != '@') || n >= sizeof sa.sun_path) {
    log_warning("main", "NOTIFY_SOCKET '%s' is not a Unix socket path; not notifying", path);
    return;
  }
  memcpy(sa.sun_path, path, n);
  if (path[0] == '@') {
    sa.sun_path[0] = '\0'; /* abstract namespace */
  }
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    log_warning("main", "cannot notify systemd: socket: %s", strerror(errno));
    return;
  }
  if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0) {
    log_warning("main", "cannot notify systemd at '%s': %s", path, strerror(errno));
  }
  close(fd);
}

/* WATCHDOG_USEC when it is meant for this process (WATCHDOG_PID unset or ours); 0 otherwise. */
static uint64_t watchdog_usec(void) {
  const char *us = getenv("WATCHDOG_USEC");
  if (!us) {
    return 0;
  }
  uint64_t v = 0;
  if (config_parse_u64(us, 1, UINT64_MAX, "WATCHDOG_USEC", &v, NULL) != QDP_OK) {
    return 0;
  }
  const char *pid = getenv("WATCHDOG_PID");
  uint64_t p = 0;
  if (pid && (config_parse_u64(pid, 1, UINT32_MAX, "WATCHDOG_PID", &p, NULL) != QDP_OK ||
              p != (uint64_t)getpid())) {
    return 0;
  }
  return v;
}

static void on_watchdog(uv_timer_t *t) {
  (void)t;
  notify("WATCHDOG=1");
}

/* ---- socket path and the single-instance lock
 * ------------------------------------------------------ */

static qdp_status default_socket(char *buf, size_t len, bool *ret_own_dir, struct qdp_error *err) {
  const char *rd = getenv("RUNTIME_DIRECTORY");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  int n;
  *ret_own_dir = true;
  if (rd && rd[0]) {
    /* systemd lists several directories separated by ':'; ours (RuntimeDirectory=qdp) is first. */
    size_t first = strcspn(rd, ":");
    n = snprintf(buf, len, "%.*s/qdpd.sock", (int)first, rd);
    *ret_own_dir = false; /* systemd made it, with the unit's mode */
  } else if (geteuid() == 0) {
    n = snprintf(buf, len, "/run/qdp/qdpd.sock");
  } else if (xdg && xdg[0]) {
    n = snprintf(buf, len, "%s/qdp/qdpd.sock", xdg);
  } else {
    n = snprintf(buf, len, "/run/user/%u/qdp/qdpd.sock", (unsigned)geteuid());
  }
  if (n < 0 || (size_t)n >= len || (size_t)n > sizeof(((struct sockaddr_un *)0)->sun_path) - 1) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "socket",
                         "the default socket path '%s' is too long for a Unix socket; set socket",
                         buf);
  }
  return QDP_OK;
}

/* Creates the socket's directory (mode 0750) when it is missing. */
static qdp_status make_socket_dir(const char *sock, struct qdp_error *err) {
  char dir[CONFIG_STR_MAX];
  snprintf(dir, sizeof dir, "%s", sock);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) {
    return QDP_OK;
  }
  *slash = '\0';
  if (mkdir(dir, 0750) != 0 && errno != EEXIST) {
    int e = errno;
    return qdp_error_set_at(err, QDP_ERR_SYSTEM, -1, e,
                            "cannot create the socket directory '%s': %s", dir, strerror(e));
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return qdp_error_set(err, QDP_ERR_FAILED_PRECONDITION, "socket",
                         "'%s' (the socket's directory) is not a directory", dir);
  }
  return QDP_OK;
}

/* Takes the lock file beside the socket for the daemon's life, or names the daemon holding it. */
static qdp_status take_lock(struct daemon *d, struct qdp_error *err) {
  snprintf(d->lock_path, sizeof d->lock_path, "%s.lock", d->socket_path);
  for (int attempt = 0; attempt < 8; attempt++) {
    int fd = open(d->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
    if (fd < 0) {
      int e = errno;
      return qdp_error_set_at(err, QDP_ERR_SYSTEM, -1, e, "cannot open the lock file '%s': %s",
                              d->lock_path, strerror(e));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int e = errno;
      char pid[32] = "";
      ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
      pid[n > 0 ? n : 0] = '\0';
      pid[strcspn(pid, "\n")] = '\0';
      close(fd);
      if (e == EWOULDBLOCK) {
        return qdp_error_set(err, QDP_ERR_ALREADY_EXISTS, "socket",
                             "another qdpd (pid %s) already serves unix:%s (it holds %s)",
                             pid[0] ? pid : "unknown", d->socket_path, d->lock_path);
      }
      return qdp_error_set_at(err, QDP_ERR_SYSTEM, -1, e, "cannot lock '%s': %s", d->lock_path,
                              strerror(e));
    }
    /* The previous holder may have unlinked the file between our open and our lock: the lock
     * then guards nothing. Only a lock on the file the path names now counts. */
    struct stat a, b;
    if (fstat(fd, &a) == 0 && stat(d->lock_path, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
      char pid[32];
      int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
      if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        log_warning("main", "cannot write the pid into '%s': %s", d->lock_path, strerror(errno));
      }
      d->lock_fd = fd;
      return QDP_OK;
    }
    close(fd);
  }
  return qdp_error_set(err, QDP_ERR_UNAVAILABLE, "socket",
                       "the lock file '%s' keeps being replaced; is another qdpd starting?",
                       d->lock_path);
}

static void release_lock(struct daemon *d) {
  if (d->lock_fd >= 0) {
    /* Unlinked while still held, so no other daemon can take a lock on a file about to vanish. */
    unlink(d->lock_path);
    close(d->lock_fd);
    d->lock_fd = -1;
  }
}

/* ---- signals
 * --------------------------------------------------------------------------------------- */

static void on_server_done(void *arg) {
  struct daemon *d = arg;
  /* From here the states and devices are released, which no signal may cut short (status 143,
   * the socket left behind). SIG_IGN replaces libuv's handler at once; closing its handles would
   * first give the signals back their default action. The handles stay open to the end, no
   * longer holding the loop (drain says why); SIGKILL still stops the daemon at once. */
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  uv_unref((uv_handle_t *)&d->sig_term);
  uv_unref((uv_handle_t *)&d->sig_int);
  uv_unref((uv_handle_t *)&d->sig_hup);
  uv_close((uv_handle_t *)&d->watchdog, NULL);
}

/* Jobs that outlived shutdown_timeout and their cancellation: the exit is bounded, so the daemon
 * goes without them. Its memory, host and device, goes back with the process. */
static void on_server_overdue(void *arg) {
  struct daemon *d = arg;
  log_warning("main",
              "exiting with jobs still running, %" PRIu64
              " s after the stop began "
              "(shutdown_timeout); their memory goes back with the process",
              d->cfg.shutdown_timeout + 1);
  notify("STATUS=stopped with jobs still running");
  unlink(d->socket_path);
  release_lock(d);
  _exit(EXIT_SUCCESS);
}

static void on_stop_signal(uv_signal_t *h, int sig) {
  struct daemon *d = h->data;
  if (!d->stopping) {
    log_notice("main", "%s: draining calls in flight, then stopping",
               sig == SIGTERM ? "SIGTERM" : "SIGINT");
    notify("STOPPING=1\nSTATUS=stopping: draining calls in flight");
    d->stopping = true;
  }
  rpc_server_shutdown(d->server, on_server_done, d->cfg.shutdown_timeout ? on_server_overdue : NULL,
                      d);
}

/* Re-reads the configuration and applies what may change at run time. */
static void on_hup(uv_signal_t *h, int sig) {
  (void)sig;
  struct daemon *d = h->data;
  struct config *c = malloc(sizeof *c);
  if (!c) {
    log_err("main", "SIGHUP: no memory to re-read the configuration");
    return;
  }
  struct qdp_error err = QDP_ERROR_INIT;
  enum config_action act;
  notify("RELOADING=1");
  if (config_load(c, d->argc, d->argv, environ, &act, &err) != QDP_OK) {
    log_err("main", "SIGHUP: configuration not reloaded: %s", err.msg);
  } else {
    for (size_t i = 0; i < config_option_count(); i++) {
      const struct config_option *o = config_option_at(i);
      char was[CONFIG_STR_MAX + 32], now[CONFIG_STR_MAX + 32];
      config_format_value(&d->cfg, o, true, was, sizeof was);
      config_format_value(c, o, true, now, sizeof now);
      if (strcmp(was, now) == 0) {
        continue;
      }
      if (o->runtime) {
        log_notice("main", "SIGHUP: %s = %s (was %s)", o->name, now, was);
        memcpy((char *)&d->cfg + o->offset, (char *)c + o->offset,
               o->type == CONFIG_STRING   ? CONFIG_STR_MAX
               : o->type == CONFIG_BOOL   ? sizeof(bool)
               : o->type == CONFIG_LEVEL  ? sizeof(int)
               : o->type == CONFIG_DOUBLE ? sizeof(double)
                                          : sizeof(uint64_t));
        d->cfg.src[i] = c->src[i];
        memcpy(d->cfg.origin[i], c->origin[i], sizeof d->cfg.origin[i]);
      } else {
        log_warning("main", "SIGHUP: %s changed to %s but takes effect only after a restart",
                    o->name, now);
      }
    }
    log_set_level(d->cfg.log_level);
    log_set_format((enum log_format)d->cfg.log_format);
    log_set_subsys(d->cfg.log_subsys);
    rpc_server_apply_config(d->server, &d->cfg);
    rpc_server_reload_tls(d->server, &d->cfg);
  }
  notify("READY=1");
  free(c);
}

/* ---- main
 * ------------------------------------------------------------------------------------------- */

static int fail(const char *what, const struct qdp_error *err) {
  log_err("main", "%s: %s", what, err->msg);
  notify("STATUS=failed to start");
  return 1;
}

/* A launcher may bind a rank to a core or two (Open MPI binds a lone rank to one core); the
 * daemon's threads (RPC, workers, one per shard of a job) then share them, which halves a
 * two-GPU ingest (measured). Said once at start, with the fix. */
static void warn_if_bound(void) {
  cpu_set_t set;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (sched_getaffinity(0, sizeof set, &set) != 0 || online <= 0) {
    return;
  }
  int mine = CPU_COUNT(&set);
  if (mine < online && mine < 4) {
    log_warning("main",
                "this qdpd may run on %d of the node's %ld CPUs (its CPU affinity, which "
                "launchers set), and its threads share them, one per GPU of a job among them: "
                "start it with `mpirun --bind-to none` or `srun --cpu-bind=none`",
                mine, online);
  }
}

static volatile sig_atomic_t rank_stop;

static void on_rank_signal(int sig) {
  (void)sig;
  rank_stop = 1;
}

/* A rank other than 0: its mesh, the world, then the coordinator's jobs until it says stop. */
static int run_rank(struct daemon *d, const struct runtime_mesh_config *mc) {
  struct qdp_error err = QDP_ERROR_INIT, start_err = QDP_ERROR_INIT;
  int rc = 1;
  qdp_status mesh_rc = runtime_mesh_create(mc, &d->mesh, &err);
  if (world_start(d->world, mesh_rc, &err, d->mesh, d->cfg.rank_timeout * 1000,
                  !d->cfg.host_collectives, &start_err) != QDP_OK) {
    rc = fail("cannot join the world", &start_err);
    goto out;
  }
  struct sigaction sa = {.sa_handler = on_rank_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  log_info("main", "qdpd %s rank %d of %d ready: %zu %s devices, pid %ld", QDP_VERSION,
           world_rank(d->world), world_size(d->world), runtime_mesh_count(d->mesh),
           runtime_mesh_backend(d->mesh), (long)getpid());
  if (world_serve(d->world, &rank_stop, &err) != QDP_OK) {
    rc = fail("serving the coordinator", &err);
    goto out;
  }
  rc = 0;
out:
  world_destroy(d->world);
  runtime_mesh_destroy(d->mesh);
  return rc;
}

/* Reads the configuration and answers --help, --version and --print-config: an exit status, or
 * -1 to go on and run. */
static int parse_args(struct daemon *d, int argc, char **argv) {
  struct qdp_error err = QDP_ERROR_INIT;
  enum config_action act = CONFIG_RUN;
  if (config_load(&d->cfg, argc, argv, environ, &act, &err) != QDP_OK) {
    fprintf(stderr, "qdpd: %s\n", err.msg);
    return 2;
  }
  switch (act) {
  case CONFIG_HELP:
    config_help(stdout, "qdpd");
    return 0;
  case CONFIG_VERSION:
    printf("qdpd %s\n", QDP_VERSION);
    return 0;
  case CONFIG_PRINT:
    config_print(&d->cfg, stdout);
    return 0;
  case CONFIG_RUN:
    break;
  }
  return -1;
}

/* Logging, the signals every rank survives, and the world (MPI first, before any thread exists;
 * a plain qdpd is a world of one without MPI). */
static qdp_status create_world(struct daemon *d, struct qdp_error *err) {
  log_init("qdpd");
  log_set_level(d->cfg.log_level);
  log_set_format((enum log_format)d->cfg.log_format);
  log_set_subsys(d->cfg.log_subsys);
  rpc_route_grpc_logs();
  /* A client vanishing mid-write must not kill the daemon, nor an input shrinking under a read
   * (io/guard.h), on any rank. */
  signal(SIGPIPE, SIG_IGN);
  qdp_status rc = io_guard_install(err);
  if (rc != QDP_OK) {
    qdp_error_prefix(err, "cannot guard mapped inputs");
    return rc;
  }
  rc = world_create(world_launched_by_mpi(), &d->argc, &d->argv, &d->world, err);
  if (rc != QDP_OK) {
    qdp_error_prefix(err, "cannot join the world");
    return rc;
  }
  if (world_size(d->world) > 1) {
    log_set_rank(world_rank(d->world));
  }
  warn_if_bound();
  return QDP_OK;
}

/* The coordinator's socket, lock and mesh, then the world's start: whatever fails here, the other
 * ranks learn it in world_start and stop with this rank. */
static int build_mesh_and_start_world(struct daemon *d, const struct runtime_mesh_config *mc) {
  struct qdp_error err = QDP_ERROR_INIT, start_err = QDP_ERROR_INIT;
  bool own_dir = true;
  const char *what = "socket";
  qdp_status src = QDP_OK;
  if (d->cfg.socket[0]) {
    snprintf(d->socket_path, sizeof d->socket_path, "%s", d->cfg.socket);
  } else {
    src = default_socket(d->socket_path, sizeof d->socket_path, &own_dir, &err);
  }
  if (src == QDP_OK && own_dir) {
    src = make_socket_dir(d->socket_path, &err);
  }
  if (src == QDP_OK) {
    what = "cannot start";
    src = take_lock(d, &err);
  }
  if (src == QDP_OK) {
    what = "devices";
    src = runtime_mesh_create(mc, &d->mesh, &err);
  }
  if (world_start(d->world, src, &err, d->mesh, d->cfg.rank_timeout * 1000,
                  !d->cfg.host_collectives, &start_err) != QDP_OK) {
    return fail(src != QDP_OK ? what : "cannot join the world", src != QDP_OK ? &err : &start_err);
  }
  return 0;
}

/* The state store and the server on the loop, serving once this returns 0. */
static int start_server(struct daemon *d, int *ret_tcp_port) {
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_store_limits lim = {
      .budget_bytes = d->cfg.store_budget,
      .client_budget_bytes = d->cfg.client_budget,
      .max_states = (uint32_t)d->cfg.max_states,
      .max_client_states = (uint32_t)d->cfg.max_client_states,
      .default_ttl_ms = d->cfg.default_ttl * 1000,
      .max_ttl_ms = d->cfg.max_ttl * 1000,
      .lease_grace_ms = d->cfg.lease_grace * 1000,
  };
  if (state_store_create(&lim, &d->store, &err) != QDP_OK) {
    return fail("state store", &err);
  }
  d->loop = uv_default_loop();
  /* The daemon's own files: no caller reads or replaces them through it. */
  struct io_file_id own[QDP_OWN_FILES_MAX];
  size_t nown = 0;
  const char *own_paths[] = {d->lock_path, d->cfg.config, d->cfg.tcp_tokens_file};
  for (size_t i = 0; i < sizeof own_paths / sizeof own_paths[0]; i++) {
    struct stat st;
    if (own_paths[i][0] && stat(own_paths[i], &st) == 0) {
      own[nown++] = (struct io_file_id){.dev = (uint64_t)st.st_dev, .ino = (uint64_t)st.st_ino};
    }
  }
  struct rpc_server_deps deps = {.cfg = &d->cfg,
                                 .own_files = own,
                                 .nown = nown,
                                 .mesh = d->mesh,
                                 .world = d->world,
                                 .store = d->store,
                                 .loop = d->loop};
  if (rpc_server_create(&deps, d->socket_path, &d->server, ret_tcp_port, &err) != QDP_OK) {
    return fail("cannot listen", &err);
  }
  if (rpc_server_start(d->server, &err) != QDP_OK) {
    return fail("cannot start", &err);
  }
  return 0;
}

/* Signals and the systemd watchdog, on the loop. */
static void watch_signals(struct daemon *d) {
  uv_signal_init(d->loop, &d->sig_term);
  uv_signal_init(d->loop, &d->sig_int);
  uv_signal_init(d->loop, &d->sig_hup);
  d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
  uv_signal_start(&d->sig_term, on_stop_signal, SIGTERM);
  uv_signal_start(&d->sig_int, on_stop_signal, SIGINT);
  uv_signal_start(&d->sig_hup, on_hup, SIGHUP);
  d->signals_watched = true;
  uv_timer_init(d->loop, &d->watchdog);
  uint64_t wd = watchdog_usec();
  if (wd && d->cfg.watchdog) {
    /* Half the period, as sd_watchdog_enabled(3) advises; from the loop, so a stuck loop shows. */
    uint64_t ms = wd / 2000 ? wd / 2000 : 1;
    uv_timer_start(&d->watchdog, on_watchdog, ms, ms);
    log_info("main", "systemd watchdog: pinging every %" PRIu64 " ms", ms);
  }
}

/* The contract with scripts and clients: these lines, verbatim, once serving (as log records
 * where every line must be one: under the journal, and with log_format = json). */
static void announce(struct daemon *d, int tcp_port, int metrics_port) {
  char tcp_addr[CONFIG_STR_MAX + 16] = "", metrics_addr[CONFIG_STR_MAX + 16] = "";
  if (d->cfg.tcp[0]) {
    const char *colon = strrchr(d->cfg.tcp, ':');
    snprintf(tcp_addr, sizeof tcp_addr, "%.*s:%d", (int)(colon - d->cfg.tcp), d->cfg.tcp, tcp_port);
  }
  if (metrics_port) {
    const char *m = d->cfg.metrics_listen, *colon = strrchr(m, ':');
    snprintf(metrics_addr, sizeof metrics_addr, "%.*s:%d", (int)(colon - m), m, metrics_port);
  }
  if (log_journal() || d->cfg.log_format == LOG_FORMAT_JSON) {
    log_notice("main", "listening on unix:%s", d->socket_path);
    if (tcp_addr[0]) {
      log_notice("main", "listening on %s", tcp_addr);
    }
    if (metrics_addr[0]) {
      log_notice("main", "serving metrics on http://%s/metrics", metrics_addr);
    }
  } else {
    fprintf(stderr, "listening on unix:%s\n", d->socket_path);
    if (tcp_addr[0]) {
      fprintf(stderr, "listening on %s\n", tcp_addr);
    }
    if (metrics_addr[0]) {
      fprintf(stderr, "serving metrics on http://%s/metrics\n", metrics_addr);
    }
    fflush(stderr);
  }
  size_t ndev = runtime_mesh_count(d->mesh);
  char ready[CONFIG_STR_MAX * 2 + 128];
  snprintf(ready, sizeof ready, "READY=1\nSTATUS=serving unix:%s%s%s on %zu %s device%s",
           d->socket_path, tcp_addr[0] ? " and " : "", tcp_addr, ndev,
           runtime_mesh_backend(d->mesh), ndev == 1 ? "" : "s");
  notify(ready);
  log_info("main", "qdpd %s ready: %zu %s device%s, %" PRIu64 " workers, pid %ld", QDP_VERSION,
           ndev, runtime_mesh_backend(d->mesh), ndev == 1 ? "" : "s", d->cfg.workers,
           (long)getpid());
  if (world_size(d->world) > 1) {
    log_info("main", "coordinator of %d ranks: %zu devices in the world", world_size(d->world),
             world_device_count(d->world));
  }
}

/* Everything the coordinator made, in the order that lets each part end cleanly. */
static void drain(struct daemon *d) {
  rpc_server_destroy(d->server);
  d->server = NULL;
  state_store_destroy(d->store);
  world_destroy(d->world); /* after the store: releasing states talks to the ranks */
  runtime_mesh_destroy(d->mesh);
  release_lock(d);
  /* Once the signal handles exist the loop stays open: closing them would give SIGTERM its
   * default action again while threads gRPC has not ended yet may still take one (status 143
   * after a clean stop). It is the default loop, reachable to the end; the process ends here. */
  if (d->loop && !d->signals_watched) {
    uv_loop_close(d->loop);
  }
}

int main(int argc, char **argv) {
  static struct daemon d;
  d.argc = argc;
  d.argv = argv;
  d.lock_fd = -1;
  struct qdp_error err = QDP_ERROR_INIT;
  int rc = parse_args(&d, argc, argv);
  if (rc >= 0) {
    return rc;
  }
  if (create_world(&d, &err) != QDP_OK) {
    log_err("main", "%s", err.msg);
    notify("STATUS=failed to start");
    return 1;
  }
  struct runtime_mesh_config mc = {
      .devices = d.cfg.devices,
      .device_budget_bytes = d.cfg.device_budget,
      .mem_fraction = d.cfg.mem_fraction,
      .staging_bytes = d.cfg.staging_bytes,
      .copy_threads = (unsigned)d.cfg.copy_threads,
      .nccl_exchange = d.cfg.nccl_exchange,
      .legacy_ipc_views = d.cfg.legacy_ipc_views,
  };
  if (world_rank(d.world) != 0) {
    return run_rank(&d, &mc); /* follow the coordinator */
  }
  int tcp_port = 0;
  rc = build_mesh_and_start_world(&d, &mc);
  if (rc == 0) {
    rc = start_server(&d, &tcp_port);
  }
  if (rc == 0) {
    watch_signals(&d);
    announce(&d, tcp_port, rpc_server_metrics_port(d.server));
    uv_run(d.loop, UV_RUN_DEFAULT);
    log_info("main",
             "stopped serving; releasing every state and device (SIGTERM, SIGINT and SIGHUP "
             "are ignored until it is done)");
  }
  drain(&d);
  if (rc == 0) {
    log_info("main", "stopped");
  }
  return rc;
}
