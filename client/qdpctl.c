/* qdpctl — the command-line client of qdpd, built on libqdp's public API only.
 *
 * One process per command: parse the options (usage errors exit 2 before any connection), make a
 * client, run one or a few calls, print a table or JSON, and map the outcome onto an exit code
 * (0 ok, 1 local error, 2 usage, 3 cannot connect, 4 refused by the server). Single-threaded.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qdp.h"

enum {
  EXIT_OK = 0,
  EXIT_LOCAL = 1,
  EXIT_USAGE = 2,
  EXIT_UNAVAILABLE = 3,
  EXIT_REFUSED = 4,
};

/* Options every subcommand accepts, before or after its name. */
struct global {
  const char *target;
  const char *token;
  const char *client_name;
  int64_t timeout_ms;
  int json;
  int progress; /* -1 auto (a terminal on stderr), 0 off, 1 on */
};

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

/* ---- parsing and exit codes ---- */

static int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "qdpctl%s%s: ", cmd ? " " : "", cmd ? cmd : "");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry 'qdpctl %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
  return EXIT_USAGE;
}

/* Parses an unsigned decimal (or 0x hex) integer in [min, max]; the whole string must be used. */
static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret) {
  if (!s || !*s || *s == '-' || *s == '+' || *s == ' ') {
    return 0;
  }
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || !end || *end || v < min || v > max) {
    return 0;
  }
  *ret = v;
  return 1;
}

static int parse_i32(const char *s, int32_t min, int32_t max, int *ret) {
  if (!s || !*s) {
    return 0;
  }
  errno = 0;
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (errno || !end || *end || v < min || v > max) {
    return 0;
  }
  *ret = (int)v;
  return 1;
}

/* A REF is HANDLE:TOKEN, as encode prints it. The pieces point into buf; anything else is a usage
 * error of cmd. */
static int split_ref(const char *cmd, const char *ref, char *buf, size_t size, const char **handle,
                     const char **token) {
  char *colon = NULL;
  if (ref && strlen(ref) < size) {
    memcpy(buf, ref, strlen(ref) + 1);
    colon = strchr(buf, ':');
  }
  if (!colon || colon == buf || !colon[1]) {
    return usage_error(cmd, "'%s' is not a REF (HANDLE:TOKEN)", ref);
  }
  *colon = '\0';
  *handle = buf;
  *token = colon + 1;
  return EXIT_OK;
}

static int exit_code_for(const struct qdp_errinfo *e) {
  if (!e->remote) {
    return EXIT_LOCAL;
  }
  return e->code == QDP_ERR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_REFUSED;
}

/* ---- JSON output ---- */

struct jw {
  FILE *f;
  int depth;
  int count[32]; /* members written at each depth */
};

static void jw_str_raw(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    switch (*p) {
    case '"':
      fputs("\\\"", f);
      break;
    case '\\':
      fputs("\\\\", f);
      break;
    case '\n':
      fputs("\\n", f);
      break;
    case '\r':
      fputs("\\r", f);
      break;
    case '\t':
      fputs("\\t", f);
      break;
    default:
      if (*p < 0x20) {
        fprintf(f, "\\u%04x", *p);
      } else {
        fputc(*p, f);
      }
    }
  }
  fputc('"', f);
}

static void jw_key(struct jw *w, const char *key) {
  if (w->depth > 0) {
    fputs(w->count[w->depth]++ ? ",\n" : "\n", w->f);
    for (int i = 0; i < w->depth; i++) {
      fputs("  ", w->f);
    }
  }
  if (key) {
    jw_str_raw(w->f, key);
    fputs(": ", w->f);
  }
}

static void jw_open(struct jw *w, const char *key, char ch) {
  jw_key(w, key);
  fputc(ch, w->f);
  if (w->depth < 31) {
    w->depth++;
  }
  w->count[w->depth] = 0;
}

static void jw_close(struct jw *w, char ch) {
  int had = w->count[w->depth];
  w->depth--;
  if (had) {
    fputc('\n', w->f);
    for (int i = 0; i < w->depth; i++) {
      fputs("  ", w->f);
    }
  }
  fputc(ch, w->f);
  if (w->depth == 0) {
    fputc('\n', w->f);
  }
}

static void jw_s(struct jw *w, const char *key, const char *v) {
  jw_key(w, key);
  jw_str_raw(w->f, v);
}

static void jw_u(struct jw *w, const char *key, uint64_t v) {
  jw_key(w, key);
  fprintf(w->f, "%" PRIu64, v);
}

static void jw_i(struct jw *w, const char *key, int64_t v) {
  jw_key(w, key);
  fprintf(w->f, "%" PRId64, v);
}

static void jw_d(struct jw *w, const char *key, double v) {
  jw_key(w, key);
  if (isfinite(v)) {
    fprintf(w->f, "%.17g", v);
  } else {
    fputs("null", w->f);
  }
}

static void jw_b(struct jw *w, const char *key, int v) {
  jw_key(w, key);
  fputs(v ? "true" : "false", w->f);
}

/* ---- tables ---- */

#define TABLE_MAX_COLS 12

struct table {
  int ncols;
  const char *head[TABLE_MAX_COLS];
  int right[TABLE_MAX_COLS]; /* numbers align right */
  char **cells;              /* rows * ncols, malloc'd strings */
  size_t rows, cap;
};

static void table_init(struct table *t, int ncols, const char *const *head, const int *right) {
  memset(t, 0, sizeof *t);
  t->ncols = ncols;
  for (int i = 0; i < ncols; i++) {
    t->head[i] = head[i];
    t->right[i] = right ? right[i] : 0;
  }
}

/* Appends one row of ncols already formatted cells (copied). */
static void table_row(struct table *t, char *const *cells) {
  if (t->rows == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 16;
    char **n = realloc(t->cells, cap * (size_t)t->ncols * sizeof *n);
    if (!n) {
      return; /* out of memory: the row is dropped, the table still prints */
    }
    t->cells = n;
    t->cap = cap;
  }
  for (int i = 0; i < t->ncols; i++) {
    t->cells[t->rows * (size_t)t->ncols + (size_t)i] = strdup(cells[i] ? cells[i] : "");
  }
  t->rows++;
}

static void table_print(struct table *t, FILE *f) {
  size_t w[TABLE_MAX_COLS];
  for (int i = 0; i < t->ncols; i++) {
    w[i] = strlen(t->head[i]);
    for (size_t r = 0; r < t->rows; r++) {
      const char *c = t->cells[r * (size_t)t->ncols + (size_t)i];
      size_t n = c ? strlen(c) : 0;
      w[i] = n > w[i] ? n : w[i];
    }
  }
  for (size_t r = 0; r <= t->rows; r++) {
    for (int i = 0; i < t->ncols; i++) {
      const char *c = r == 0 ? t->head[i] : t->cells[(r - 1) * (size_t)t->ncols + (size_t)i];
      c = c ? c : "";
      int last = i == t->ncols - 1;
      if (t->right[i]) {
        fprintf(f, "%*s%s", (int)w[i], c, last ? "" : "  ");
      } else if (last) {
        fputs(c, f);
      } else {
        fprintf(f, "%-*s  ", (int)w[i], c);
      }
    }
    fputc('\n', f);
  }
  for (size_t i = 0; i < t->rows * (size_t)t->ncols; i++) {
    free(t->cells[i]);
  }
  free(t->cells);
  t->cells = NULL;
  t->rows = t->cap = 0;
}

/* ---- progress bar (stderr, terminals only) ---- */

struct bar {
  int on;
  int forced; /* --progress: draw from the first chunk, even for short transfers */
  const char *label;
  struct timespec start, last;
  int drawn;
};

static double since(const struct timespec *a) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - a->tv_sec) + (double)(now.tv_nsec - a->tv_nsec) / 1e9;
}

static int bar_cb(void *arg, uint64_t done, uint64_t total) {
  struct bar *b = arg;
  if (interrupted) {
    return 1; /* Ctrl-C: libqdp cancels the call and cleans up (no partial .npy) */
  }
  if (!b->on) {
    return 0;
  }
  /* Short transfers get no bar: draw once a transfer has run for a quarter second, then at
   * most ten times a second, and always the final state. */
  double t = since(&b->start);
  int final = total && done >= total;
  if ((t < 0.25 && !b->drawn && !b->forced) || (since(&b->last) < 0.1 && !final && b->drawn)) {
    return 0;
  }
  clock_gettime(CLOCK_MONOTONIC, &b->last);
  const int width = 30;
  double frac = total ? (double)done / (double)total : 0.0;
  int fill = (int)(frac * width);
  char bar[64];
  for (int i = 0; i < width; i++) {
    bar[i] = i < fill ? '#' : '.';
  }
  bar[width] = '\0';
  double mib = (double)done / 1048576.0;
  fprintf(stderr, "\r%s [%s] %5.1f%% %.1f/%.1f MiB %.1f MiB/s", b->label, bar, frac * 100.0, mib,
          (double)total / 1048576.0, t > 0 ? mib / t : 0.0);
  fflush(stderr);
  b->drawn = 1;
  return 0;
}

static void bar_start(struct bar *b, const struct global *g, const char *label) {
  memset(b, 0, sizeof *b);
  b->on = g->progress > 0 || (g->progress < 0 && isatty(STDERR_FILENO));
  b->forced = g->progress > 0;
  b->label = label;
  clock_gettime(CLOCK_MONOTONIC, &b->start);
  b->last = b->start;
}

static void bar_end(struct bar *b) {
  if (b->drawn) {
    fputc('\n', stderr);
  }
}

/* ---- errors ---- */

/* The "error" object; rm's per-REF report leaves out the placement details (`full` 0). */
static void error_json(struct jw *w, const struct qdp_errinfo *e, int full) {
  jw_open(w, "error", '{');
  jw_s(w, "code", e->code_name);
  jw_i(w, "status", e->code);
  jw_s(w, "message", e->msg);
  jw_s(w, "field", e->field);
  jw_b(w, "remote", e->remote);
  if (full) {
    jw_i(w, "rank", e->rank);
    jw_i(w, "device", e->device);
    jw_i(w, "cause", e->cause);
    jw_u(w, "need_bytes", e->need_bytes);
    jw_u(w, "free_bytes", e->free_bytes);
  }
  jw_close(w, '}');
}

static int fail(const struct global *g, const char *cmd) {
  const struct qdp_errinfo *e = qdp_last_error();
  fprintf(stderr, "qdpctl %s: %s (%s)\n", cmd, e->msg[0] ? e->msg : qdp_strerror(e->code),
          e->code_name);
  if (g->json) {
    struct jw w = {stdout, 0, {0}};
    jw_open(&w, NULL, '{');
    error_json(&w, e, 1);
    jw_close(&w, '}');
  }
  return exit_code_for(e);
}

static int connect_client(const struct global *g, const char *cmd, qdp_client **ret) {
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.target = g->target;
  o.token = g->token;
  o.client_name = g->client_name;
  if (g->timeout_ms >= 0) {
    o.timeout_ms = g->timeout_ms;
  }
  if (qdp_client_create(&o, ret) != QDP_OK) {
    return fail(g, cmd);
  }
  return EXIT_OK;
}

/* ---- common options ---- */

enum {
  OPT_TARGET = 1000,
  OPT_SOCKET,
  OPT_TOKEN,
  OPT_NAME,
  OPT_TIMEOUT,
  OPT_JSON,
  OPT_NO_PROGRESS,
  OPT_PROGRESS,
  OPT_HELP,
  /* subcommand options */
  OPT_ENCODING,
  OPT_QUBITS,
  OPT_DTYPE,
  OPT_POLICY,
  OPT_DEVICES,
  OPT_TTL,
  OPT_LABEL,
  OPT_VALUES,
  OPT_INPUT,
  OPT_SERVER_FILE,
  OPT_SHM,
  OPT_SHM_FD,
  OPT_SHM_PID,
  OPT_OFFSET,
  OPT_LENGTH,
  OPT_COUNT,
  OPT_ROWS,
  OPT_COLS,
  OPT_INPUT_DTYPE,
  OPT_UPLOAD,
  OPT_CHUNK_BYTES,
  OPT_IPC,
  OPT_FORCE,
  OPT_OUTPUT,
  OPT_REGION,
  OPT_PID,
  OPT_FD,
  OPT_VIEWS,
  OPT_DEVICE,
  OPT_MINE,
  OPT_ALL,
};

/* clang-format off */
#define COMMON_LONG_OPTS \
  {"target", required_argument, NULL, OPT_TARGET}, \
  {"socket", required_argument, NULL, OPT_SOCKET}, \
  {"token", required_argument, NULL, OPT_TOKEN}, \
  {"client-name", required_argument, NULL, OPT_NAME}, \
  {"timeout", required_argument, NULL, OPT_TIMEOUT}, \
  {"json", no_argument, NULL, OPT_JSON}, \
  {"no-progress", no_argument, NULL, OPT_NO_PROGRESS}, \
  {"progress", no_argument, NULL, OPT_PROGRESS}, \
  {"help", no_argument, NULL, OPT_HELP}
/* clang-format on */

static char socket_target[PATH_MAX + 8];

/* Handles a common option; returns 1 if it was one, -1 on a bad value, 0 otherwise. */
static int common_opt(struct global *g, int opt, const char *arg) {
  uint64_t v;
  switch (opt) {
  case OPT_TARGET:
    g->target = arg;
    return 1;
  case OPT_SOCKET:
    if (snprintf(socket_target, sizeof socket_target, "unix:%s", arg) >=
        (int)sizeof socket_target) {
      return -1;
    }
    g->target = socket_target;
    return 1;
  case OPT_TOKEN:
    g->token = arg;
    return 1;
  case OPT_NAME:
    g->client_name = arg;
    return 1;
  case OPT_TIMEOUT:
    if (!parse_u64(arg, 0, INT64_MAX / 1000, &v)) {
      return -1;
    }
    g->timeout_ms = (int64_t)v;
    return 1;
  case OPT_JSON:
    g->json = 1;
    return 1;
  case OPT_NO_PROGRESS:
    g->progress = 0;
    return 1;
  case OPT_PROGRESS:
    g->progress = 1;
    return 1;
  default:
    return 0;
  }
}

static const char common_help[] =
    "Common options (before or after the subcommand):\n"
    "  --target T        gRPC target of qdpd: unix:/path or host:port\n"
    "                    (default: $QDP_TARGET, unix:$QDP_SOCKET, unix:/run/qdp/qdpd.sock for\n"
    "                    root, unix:$XDG_RUNTIME_DIR/qdp/qdpd.sock otherwise)\n"
    "  --socket PATH     same as --target unix:PATH\n"
    "  --token TOKEN     bearer token for a TCP daemon (default: $QDP_TOKEN)\n"
    "  --client-name N   identity per-client budgets count against (default user@host:pid)\n"
    "  --timeout MS      deadline of each request in milliseconds, 0 = none (default 60000;\n"
    "                    uploads and fetches have none)\n"
    "  --json            print the result (or the error) as JSON on stdout\n"
    "  --progress, --no-progress\n"
    "                    force the progress bar on or off (default: on when stderr is a terminal)\n"
    "  --help            this help\n";

static const char exit_help[] =
    "Exit status:\n"
    "  0  success\n"
    "  1  local error (a file that cannot be read or written, out of memory, a reply qdpctl\n"
    "     cannot use, Ctrl-C)\n"
    "  2  usage error (unknown option, missing or malformed argument)\n"
    "  3  cannot connect: qdpd is not running or not reachable (UNAVAILABLE)\n"
    "  4  refused by qdpd: any other gRPC status (INVALID_ARGUMENT, NOT_FOUND,\n"
    "     RESOURCE_EXHAUSTED, ...); the message names the field and the numbers\n";

/* A command's own help (followed by `gap`), then the common options and the exit codes. */
static void print_help(const char *help, const char *gap) {
  fputs(help, stdout);
  fputs(gap, stdout);
  fputs(common_help, stdout);
  fputs("\n", stdout);
  fputs(exit_help, stdout);
}

/* ---- status, health ---- */

static void fmt_u64(char *buf, size_t size, uint64_t v) {
  snprintf(buf, size, "%" PRIu64, v);
}

/* The link matrix, in the spirit of nvidia-smi topo -m: NV<n> for n direct NVLink links, NV
 * through a switch, PCIe, P2P (a peer path NVML did not name), HOST (one memory), '-' none. */
static void print_topology(const struct qdp_server_status *s) {
  size_t n = 0; /* the links cover this node's devices, the first of the list */
  while ((n + 1) * (n + 1) <= s->nlinks) {
    n++;
  }
  if (n < 2 || n > s->ndevices || s->nlinks != n * n) {
    return;
  }
  int w = 6;
  for (size_t i = 0; i < n; i++) {
    int len = (int)strlen(s->devices[i]->name);
    w = len > w ? len : w;
  }
  printf("\ntopology (%s; ! = peer access off):\n%-*s", s->topology_source, w, "");
  for (size_t j = 0; j < n; j++) {
    printf("  %-*s", w, s->devices[j]->name);
  }
  for (size_t i = 0; i < n; i++) {
    printf("\n%-*s", w, s->devices[i]->name);
    for (size_t j = 0; j < n; j++) {
      const struct qdp_link_info *l = s->links[i * n + j];
      char c[24];
      if (strcmp(l->kind, "self") == 0) {
        snprintf(c, sizeof c, "X");
      } else if (strcmp(l->kind, "nvlink") == 0 && l->nvlinks > 0) {
        snprintf(c, sizeof c, "NV%d%s", l->nvlinks, l->peer ? "" : "!");
      } else {
        const char *k = strcmp(l->kind, "nvlink") == 0 ? "NV"
                        : strcmp(l->kind, "pcie") == 0 ? "PCIe"
                        : strcmp(l->kind, "peer") == 0 ? "P2P"
                        : strcmp(l->kind, "host") == 0 ? "HOST"
                                                       : "-";
        snprintf(c, sizeof c, "%s%s", k, l->peer || k[0] == '-' ? "" : "!");
      }
      printf("  %-*s", w, c);
    }
  }
  printf("\n");
}

/* The ranks of a multi-rank world: how they talk, then one line each. */
static void print_world(const struct qdp_server_status *s) {
  printf("world: %d ranks over %s (MPI threads %s), host collectives %s, rank timeout %" PRIu64
         " ms\ndevice collectives across ranks: %s\n",
         s->ranks, s->transport, s->mpi_threads, s->host_collectives, s->rank_timeout_ms,
         s->device_collectives);
  static const char *const head[] = {"RANK", "HOST", "DEVICES", "STATE"};
  static const int right[] = {1, 0, 1, 0};
  struct table t;
  table_init(&t, 4, head, right);
  for (size_t i = 0; i < s->nrank_info; i++) {
    const struct qdp_rank_info *r = s->rank_info[i];
    char rank[16], devs[16], state[192];
    snprintf(rank, sizeof rank, "%d", r->rank);
    snprintf(devs, sizeof devs, "%" PRIu32, r->devices);
    snprintf(state, sizeof state, "%s%s%.170s", r->lost ? "lost" : "live", r->lost ? ": " : "",
             r->reason);
    char *row[] = {rank, r->host, devs, state};
    table_row(&t, row);
  }
  table_print(&t, stdout);
  putchar('\n');
}

static int cmd_status(struct global *g, qdp_client *c) {
  struct qdp_server_status *s = NULL;
  if (qdp_get_status(c, &s) != QDP_OK) {
    return fail(g, "status");
  }
  if (g->json) {
    struct jw w = {stdout, 0, {0}};
    jw_open(&w, NULL, '{');
    jw_s(&w, "target", qdp_client_target(c));
    jw_s(&w, "version", s->version);
    jw_u(&w, "uptime_ms", s->uptime_ms);
    jw_s(&w, "backend", s->backend);
    jw_i(&w, "ranks", s->ranks);
    jw_u(&w, "budget_bytes", s->budget_bytes);
    jw_u(&w, "used_bytes", s->used_bytes);
    jw_u(&w, "states", s->states);
    jw_u(&w, "jobs_total", s->jobs_total);
    jw_u(&w, "jobs_failed", s->jobs_failed);
    jw_u(&w, "max_qubits", s->max_qubits);
    jw_s(&w, "transport", s->transport);
    jw_s(&w, "host_collectives", s->host_collectives);
    jw_s(&w, "device_collectives", s->device_collectives);
    jw_s(&w, "mpi_threads", s->mpi_threads);
    jw_u(&w, "rank_timeout_ms", s->rank_timeout_ms);
    jw_open(&w, "rank_info", '[');
    for (size_t i = 0; i < s->nrank_info; i++) {
      const struct qdp_rank_info *r = s->rank_info[i];
      jw_open(&w, NULL, '{');
      jw_i(&w, "rank", r->rank);
      jw_s(&w, "host", r->host);
      jw_u(&w, "devices", r->devices);
      jw_b(&w, "lost", r->lost);
      jw_s(&w, "reason", r->reason);
      jw_close(&w, '}');
    }
    jw_close(&w, ']');
    jw_open(&w, "devices", '[');
    for (size_t i = 0; i < s->ndevices; i++) {
      const struct qdp_device_info *d = s->devices[i];
      jw_open(&w, NULL, '{');
      jw_s(&w, "name", d->name);
      jw_s(&w, "kind", d->kind);
      jw_i(&w, "rank", d->rank);
      jw_i(&w, "ordinal", d->ordinal);
      jw_s(&w, "uuid", d->uuid);
      jw_s(&w, "model", d->model);
      jw_s(&w, "host", d->host);
      jw_u(&w, "total_bytes", d->total_bytes);
      jw_u(&w, "free_bytes", d->free_bytes);
      jw_u(&w, "budget_bytes", d->budget_bytes);
      jw_u(&w, "used_bytes", d->used_bytes);
      jw_i(&w, "cc_major", d->cc_major);
      jw_i(&w, "cc_minor", d->cc_minor);
      jw_i(&w, "numa_node", d->numa_node);
      jw_close(&w, '}');
    }
    jw_close(&w, ']');
    jw_u(&w, "regions", s->regions);
    jw_u(&w, "region_bytes", s->region_bytes);
    jw_s(&w, "topology_source", s->topology_source);
    jw_s(&w, "collectives", s->collectives);
    jw_open(&w, "links", '[');
    for (size_t i = 0; i < s->nlinks; i++) {
      const struct qdp_link_info *l = s->links[i];
      jw_open(&w, NULL, '{');
      jw_u(&w, "from", l->from);
      jw_u(&w, "to", l->to);
      jw_s(&w, "kind", l->kind);
      jw_i(&w, "nvlinks", l->nvlinks);
      jw_b(&w, "peer", l->peer);
      jw_i(&w, "perf_rank", l->perf_rank);
      jw_close(&w, '}');
    }
    jw_close(&w, ']');
    jw_close(&w, '}');
  } else {
    printf("qdpd %s at %s: backend %s, %d rank%s, up %.1f s\n", s->version, qdp_client_target(c),
           s->backend, s->ranks, s->ranks == 1 ? "" : "s", (double)s->uptime_ms / 1000.0);
    /* A store budget of 0 means only the device budgets apply. */
    char budget[48] = "no store budget";
    if (s->budget_bytes) {
      snprintf(budget, sizeof budget, "store budget %" PRIu64, s->budget_bytes);
    }
    printf("states %" PRIu32 ", %" PRIu64 " bytes used (%s); jobs %" PRIu64 " (%" PRIu64
           " failed); max qubits %" PRIu32 "; regions %" PRIu32 " (%" PRIu64 " bytes)\n",
           s->states, s->used_bytes, budget, s->jobs_total, s->jobs_failed, s->max_qubits,
           s->regions, s->region_bytes);
    printf("collectives: %s\n\n", s->collectives);
    if (s->ranks > 1) {
      print_world(s);
    }
    static const char *const head[] = {"DEVICE", "KIND",  "RANK", "HOST",   "MODEL",
                                       "NUMA",   "TOTAL", "FREE", "BUDGET", "USED"};
    static const int right[] = {0, 0, 1, 0, 0, 1, 1, 1, 1, 1};
    struct table t;
    table_init(&t, 10, head, right);
    for (size_t i = 0; i < s->ndevices; i++) {
      const struct qdp_device_info *d = s->devices[i];
      char rank[16], numa[16], tot[24], fr[24], bud[24], used[24];
      snprintf(rank, sizeof rank, "%d", d->rank);
      snprintf(numa, sizeof numa, d->numa_node < 0 ? "-" : "%d", d->numa_node);
      fmt_u64(tot, sizeof tot, d->total_bytes);
      fmt_u64(fr, sizeof fr, d->free_bytes);
      fmt_u64(bud, sizeof bud, d->budget_bytes);
      fmt_u64(used, sizeof used, d->used_bytes);
      char *row[] = {d->name, d->kind, rank, d->host, d->model, numa, tot, fr, bud, used};
      table_row(&t, row);
    }
    table_print(&t, stdout);
    print_topology(s);
  }
  qdp_server_status_free(s);
  return EXIT_OK;
}

static int cmd_health(struct global *g, qdp_client *c) {
  qdp_health h;
  if (qdp_get_health(c, &h) != QDP_OK) {
    return fail(g, "health");
  }
  const char *name = h == QDP_HEALTH_SERVING       ? "SERVING"
                     : h == QDP_HEALTH_NOT_SERVING ? "NOT_SERVING"
                                                   : "UNKNOWN";
  if (g->json) {
    struct jw w = {stdout, 0, {0}};
    jw_open(&w, NULL, '{');
    jw_s(&w, "status", name);
    jw_close(&w, '}');
  } else {
    printf("%s\n", name);
  }
  return h == QDP_HEALTH_SERVING ? EXIT_OK : EXIT_REFUSED;
}

/* ---- state layout output (encode, describe, ls) ---- */

static void shard_json(struct jw *w, const struct qdp_shard *s) {
  jw_open(w, NULL, '{');
  jw_i(w, "rank", s->rank);
  jw_s(w, "device", s->device);
  jw_i(w, "ordinal", s->ordinal);
  jw_s(w, "uuid", s->uuid);
  jw_s(w, "host", s->host);
  jw_u(w, "first", s->first);
  jw_u(w, "count", s->count);
  jw_u(w, "row_first", s->row_first);
  jw_u(w, "rows", s->rows);
  jw_u(w, "bytes", s->bytes);
  jw_b(w, "ipc", s->ipc_handle_bytes > 0);
  jw_u(w, "ipc_offset", s->ipc_offset);
  jw_u(w, "lease_id", s->lease_id);
  jw_close(w, '}');
}

static void state_json_fields(struct jw *w, const struct qdp_state_info *s) {
  const char *enc = qdp_encoding_name(s->encoding);
  const char *dt = qdp_dtype_name(s->dtype);
  jw_s(w, "handle", s->handle);
  jw_s(w, "encoding", enc ? enc : "unspecified");
  jw_u(w, "qubits", s->qubits);
  jw_u(w, "batch", s->batch);
  jw_s(w, "dtype", dt ? dt : "unspecified");
  jw_u(w, "bytes", s->bytes);
  jw_s(w, "policy", s->policy);
  jw_u(w, "global_bits", s->global_bits);
  jw_s(w, "collective", s->collective);
  jw_i(w, "created_unix_ms", s->created_unix_ms);
  jw_i(w, "expires_unix_ms", s->expires_unix_ms);
  jw_s(w, "label", s->label);
  jw_s(w, "owner", s->owner);
  jw_d(w, "encode_ms", s->encode_ms);
  jw_u(w, "leases", s->leases);
  jw_open(w, "shards", '[');
  for (size_t i = 0; i < s->nshards; i++) {
    shard_json(w, s->shards[i]);
  }
  jw_close(w, ']');
}

/* ISO-8601 UTC; `none` when the daemon sent no time (0). */
static void fmt_time(char *buf, size_t size, int64_t unix_ms, const char *none) {
  if (unix_ms <= 0) {
    snprintf(buf, size, "%s", none);
    return;
  }
  time_t t = (time_t)(unix_ms / 1000);
  struct tm tm;
  if (!gmtime_r(&t, &tm) || !strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm)) {
    snprintf(buf, size, "%" PRId64, unix_ms);
  }
}

static void shards_table(struct qdp_shard *const *shards, size_t n) {
  static const char *const head[] = {"SHARD", "DEVICE",    "RANK", "HOST", "FIRST",
                                     "COUNT", "ROW_FIRST", "ROWS", "BYTES"};
  static const int right[] = {1, 0, 1, 0, 1, 1, 1, 1, 1};
  struct table t;
  table_init(&t, 9, head, right);
  for (size_t i = 0; i < n; i++) {
    const struct qdp_shard *s = shards[i];
    char idx[24], rank[16], first[24], count[24], rf[24], rows[24], bytes[24];
    snprintf(idx, sizeof idx, "%zu", i);
    snprintf(rank, sizeof rank, "%d", s->rank);
    fmt_u64(first, sizeof first, s->first);
    fmt_u64(count, sizeof count, s->count);
    fmt_u64(rf, sizeof rf, s->row_first);
    fmt_u64(rows, sizeof rows, s->rows);
    fmt_u64(bytes, sizeof bytes, s->bytes);
    char *row[] = {idx, s->device, rank, s->host, first, count, rf, rows, bytes};
    table_row(&t, row);
  }
  table_print(&t, stdout);
}

static void state_print(const struct qdp_state_info *s, const char *ref) {
  const char *enc = qdp_encoding_name(s->encoding);
  const char *dt = qdp_dtype_name(s->dtype);
  char created[40], expires[40];
  fmt_time(created, sizeof created, s->created_unix_ms, "-");
  fmt_time(expires, sizeof expires, s->expires_unix_ms, "never");
  if (ref) {
    printf("REF        %s\n", ref);
  } else {
    printf("HANDLE     %s\n", s->handle);
  }
  printf("encoding   %s, %" PRIu32 " qubits, batch %" PRIu64 ", %s, %" PRIu64 " bytes\n",
         enc ? enc : "unspecified", s->qubits, s->batch, dt ? dt : "unspecified", s->bytes);
  printf("placement  %s, global bits %" PRIu32 ", collective %s, %zu shard%s\n", s->policy,
         s->global_bits, s->collective[0] ? s->collective : "none", s->nshards,
         s->nshards == 1 ? "" : "s");
  printf("created    %s by %s, encoded in %.3f ms\n", created, s->owner[0] ? s->owner : "-",
         s->encode_ms);
  printf("expires    %s\n", expires);
  if (s->label[0]) {
    printf("label      %s\n", s->label);
  }
  printf("\n");
  shards_table(s->shards, s->nshards);
}

/* ---- encode and plan ---- */

struct encode_args {
  struct qdp_encode_opts eo;
  struct qdp_input in;
  const char **devices;
  size_t ndevices;
  char *devbuf;
  void *values;
  int have_input;
  int force_upload;
  qdp_dtype input_dtype;
  const char *values_arg;
  char regbuf[256]; /* --region REF, split into in.region and in.region_token */
};

static const char encode_help[] =
    "Usage: qdpctl encode --encoding E --qubits N INPUT [options]\n"
    "       qdpctl plan   --encoding E --qubits N [INPUT] [options]\n"
    "\n"
    "encode materializes a state on qdpd's devices and prints its REF (HANDLE:TOKEN, the\n"
    "capability every later command needs) and its layout. plan asks the same question as a dry\n"
    "run: the shards and the per-device arithmetic (shard + staging + workspace vs budget);\n"
    "nothing is allocated, and plan exits 0 whether or not the plan is feasible.\n"
    "\n"
    "Request:\n"
    "  --encoding E      amplitude, angle, basis, iqp, iqp-z or phase\n"
    "  --qubits N        qubits per sample (the state has 2^N amplitudes)\n"
    "  --dtype T         complex64 or complex128 (default complex128)\n"
    "  --policy P        auto, single, even, uneven, capacity or batch (default auto)\n"
    "  --devices LIST    devices to use, e.g. cpu:0,cpu:1 (default: all)\n"
    "  --ttl SECONDS     lifetime of the state; 0 = the daemon's default\n"
    "  --label TEXT      free text kept with the state\n"
    "  --ipc             also ask for zero-copy views (CUDA IPC handles per shard, under a lease\n"
    "                    that view-close ends; GPU daemons only)\n"
    "\n"
    "Input (exactly one; plan also takes none, with --rows/--cols/--input-dtype):\n"
    "  --values V,V,...  inline values (float64 unless --input-dtype says otherwise)\n"
    "  --input FILE      a local .npy (or raw, with --input-dtype) file: sent inline when it is\n"
    "                    at most 1 MiB, streamed in 1 MiB chunks otherwise\n"
    "  --server-file P   a .npy file on qdpd's node, read in place: qdpctl opens it (with your\n"
    "                    rights) and hands it to qdpd; over TCP, a path beneath qdpd's input_dir\n"
    "  --shm NAME        a POSIX shared-memory region on qdpd's node (shm_open name), likewise\n"
    "  --shm-fd FD       ... or an open fd of process --shm-pid PID (default: qdpctl itself)\n"
    "  --region REF      a region registered with 'qdpctl region add' (mapped once)\n"
    "    --offset N      bytes into the region\n"
    "    --length N      bytes to read (rows x cols x element size)\n"
    "Shape and type of inputs without a header (values, raw files, shared memory):\n"
    "  --rows N          samples (default 1); with several, the state is a batch [rows, 2^N]\n"
    "  --cols N          values per sample (default: all values / rows)\n"
    "  --input-dtype T   float32, float64 or int64 (basis indices)\n"
    "  --upload          stream --input even when it is small\n"
    "  --chunk-bytes N   bytes per uploaded message (default 1048576)\n"
    "\n"
    "Inputs per sample: amplitude L <= 2^N values; angle, phase, iqp-z N values; iqp\n"
    "N + N(N-1)/2 values; basis one index.\n"
    "\n"
    "Examples:\n"
    "  qdpctl encode --encoding amplitude --qubits 2 --values 1,2,3,4\n"
    "  qdpctl encode --encoding angle --qubits 3 --values 0.1,0.2,0.3,0.4,0.5,0.6 --rows 2\n"
    "  qdpctl encode --encoding amplitude --qubits 20 --input data.npy --dtype complex64\n"
    "  qdpctl encode --encoding phase --qubits 8 --server-file /data/x.npy --devices cpu:0,cpu:1\n"
    "  qdpctl encode --encoding amplitude --qubits 10 --shm /features --offset 0 --length 8192 \\\n"
    "                --input-dtype float64\n"
    "  qdpctl plan --encoding amplitude --qubits 30 --rows 1 --cols 1073741824 \\\n"
    "              --input-dtype float32 --policy even\n";

static int parse_values(const char *cmd, const char *s, qdp_dtype dt, void **ret, size_t *ret_n) {
  size_t n = 1;
  for (const char *p = s; *p; p++) {
    n += *p == ',';
  }
  unsigned es = qdp_dtype_size(dt);
  unsigned char *buf = malloc(n * es);
  if (!buf) {
    fprintf(stderr, "qdpctl %s: out of memory for %zu values\n", cmd, n);
    return EXIT_LOCAL;
  }
  const char *p = s;
  for (size_t i = 0; i < n; i++) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char tok[128];
    if (len == 0 || len >= sizeof tok) {
      free(buf);
      return usage_error(cmd, "--values: value %zu is %s", i + 1, len ? "too long" : "empty");
    }
    memcpy(tok, p, len);
    tok[len] = '\0';
    char *end = NULL;
    errno = 0;
    if (dt == QDP_DTYPE_INT64) {
      long long v = strtoll(tok, &end, 10);
      if (errno || *end) {
        free(buf);
        return usage_error(cmd, "--values: '%s' is not a 64-bit integer", tok);
      }
      int64_t x = v;
      memcpy(buf + i * es, &x, es);
    } else {
      /* NaN and Inf parse on purpose: judging them is the daemon's job, and it names them. */
      double v = strtod(tok, &end);
      if (*end || end == tok) {
        free(buf);
        return usage_error(cmd, "--values: '%s' is not a number", tok);
      }
      if (dt == QDP_DTYPE_FLOAT32) {
        float f = (float)v;
        memcpy(buf + i * es, &f, es);
      } else {
        memcpy(buf + i * es, &v, es);
      }
    }
    p = comma ? comma + 1 : p + len;
  }
  *ret = buf;
  *ret_n = n;
  return EXIT_OK;
}

static int set_input(struct encode_args *a, const char *cmd, qdp_input_kind kind) {
  if (a->have_input && a->in.kind != kind) {
    return usage_error(cmd, "give exactly one input: --values, --input, --server-file or --shm");
  }
  a->have_input = 1;
  a->in.kind = kind;
  return EXIT_OK;
}

static int parse_encode(struct global *g, const char *cmd, int argc, char **argv,
                        struct encode_args *a) {
  static const struct option opts[] = {
      {"encoding", required_argument, NULL, OPT_ENCODING},
      {"qubits", required_argument, NULL, OPT_QUBITS},
      {"dtype", required_argument, NULL, OPT_DTYPE},
      {"policy", required_argument, NULL, OPT_POLICY},
      {"devices", required_argument, NULL, OPT_DEVICES},
      {"ttl", required_argument, NULL, OPT_TTL},
      {"label", required_argument, NULL, OPT_LABEL},
      {"ipc", no_argument, NULL, OPT_IPC},
      {"values", required_argument, NULL, OPT_VALUES},
      {"input", required_argument, NULL, OPT_INPUT},
      {"server-file", required_argument, NULL, OPT_SERVER_FILE},
      {"shm", required_argument, NULL, OPT_SHM},
      {"shm-fd", required_argument, NULL, OPT_SHM_FD},
      {"shm-pid", required_argument, NULL, OPT_SHM_PID},
      {"region", required_argument, NULL, OPT_REGION},
      {"offset", required_argument, NULL, OPT_OFFSET},
      {"length", required_argument, NULL, OPT_LENGTH},
      {"rows", required_argument, NULL, OPT_ROWS},
      {"cols", required_argument, NULL, OPT_COLS},
      {"input-dtype", required_argument, NULL, OPT_INPUT_DTYPE},
      {"upload", no_argument, NULL, OPT_UPLOAD},
      {"chunk-bytes", required_argument, NULL, OPT_CHUNK_BYTES},
      COMMON_LONG_OPTS,
      {NULL, 0, NULL, 0},
  };
  a->eo = (struct qdp_encode_opts)QDP_ENCODE_OPTS_INIT;
  a->in = (struct qdp_input)QDP_INPUT_INIT;
  int have_offset = 0, have_length = 0;
  /* Options that take any unsigned 64-bit value. */
  const struct {
    int opt;
    const char *name, *what;
    uint64_t *dst;
    int *seen;
  } nums[] = {
      {OPT_TTL, "--ttl", "a number of seconds", &a->eo.ttl_seconds, NULL},
      {OPT_OFFSET, "--offset", "a byte offset", &a->in.offset, &have_offset},
      {OPT_LENGTH, "--length", "a byte count", &a->in.length, &have_length},
      {OPT_ROWS, "--rows", "a count", &a->in.rows, NULL},
      {OPT_COLS, "--cols", "a count", &a->in.cols, NULL},
  };
  optind = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    uint64_t v;
    int r = common_opt(g, opt, optarg);
    if (r < 0) {
      return usage_error(cmd, "bad value '%s' for %s", optarg, argv[optind - 1]);
    }
    for (size_t i = 0; !r && i < sizeof nums / sizeof nums[0]; i++) {
      if (nums[i].opt != opt) {
        continue;
      }
      if (!parse_u64(optarg, 0, UINT64_MAX, nums[i].dst)) {
        return usage_error(cmd, "%s: '%s' is not %s", nums[i].name, optarg, nums[i].what);
      }
      if (nums[i].seen) {
        *nums[i].seen = 1;
      }
      r = 1;
    }
    if (r > 0) {
      continue;
    }
    switch (opt) {
    case OPT_HELP:
      print_help(encode_help, "\n");
      return -1;
    case OPT_ENCODING:
      a->eo.encoding = qdp_encoding_from_name(optarg);
      if (a->eo.encoding == QDP_ENCODING_UNSPECIFIED) {
        return usage_error(cmd,
                           "unknown encoding '%s' (amplitude, angle, basis, iqp, iqp-z, "
                           "phase)",
                           optarg);
      }
      break;
    case OPT_QUBITS:
      if (!parse_u64(optarg, 0, UINT32_MAX, &v)) {
        return usage_error(cmd, "--qubits: '%s' is not a count of qubits", optarg);
      }
      a->eo.qubits = (uint32_t)v;
      break;
    case OPT_DTYPE:
      a->eo.dtype = qdp_dtype_from_name(optarg);
      if (a->eo.dtype != QDP_DTYPE_COMPLEX64 && a->eo.dtype != QDP_DTYPE_COMPLEX128) {
        return usage_error(cmd, "--dtype: '%s' is not complex64 or complex128", optarg);
      }
      break;
    case OPT_POLICY: {
      int p = qdp_policy_from_name(optarg);
      if (p < 0) {
        return usage_error(cmd,
                           "--policy: unknown policy '%s' (auto, single, even, uneven, "
                           "capacity, batch)",
                           optarg);
      }
      a->eo.policy = (qdp_policy)p;
      break;
    }
    case OPT_DEVICES: {
      free(a->devbuf);
      free(a->devices);
      a->devbuf = strdup(optarg);
      size_t n = 1;
      for (const char *p = optarg; *p; p++) {
        n += *p == ',';
      }
      a->devices = calloc(n, sizeof *a->devices);
      if (!a->devbuf || !a->devices) {
        fprintf(stderr, "qdpctl %s: out of memory\n", cmd);
        return EXIT_LOCAL;
      }
      a->ndevices = 0;
      char *p = a->devbuf;
      for (;;) {
        char *comma = strchr(p, ',');
        if (comma) {
          *comma = '\0';
        }
        if (!*p) {
          return usage_error(cmd, "--devices: empty device name in '%s'", optarg);
        }
        a->devices[a->ndevices++] = p;
        if (!comma) {
          break;
        }
        p = comma + 1;
      }
      break;
    }
    case OPT_LABEL:
      a->eo.label = optarg;
      break;
    case OPT_IPC:
      a->eo.ipc = 1;
      break;
    case OPT_VALUES:
      if (set_input(a, cmd, QDP_INPUT_INLINE) != EXIT_OK) {
        return EXIT_USAGE;
      }
      a->values_arg = optarg;
      break;
    case OPT_INPUT:
      if (set_input(a, cmd, QDP_INPUT_LOCAL_FILE) != EXIT_OK) {
        return EXIT_USAGE;
      }
      a->in.path = optarg;
      break;
    case OPT_SERVER_FILE:
      if (set_input(a, cmd, QDP_INPUT_SERVER_FILE) != EXIT_OK) {
        return EXIT_USAGE;
      }
      a->in.path = optarg;
      break;
    case OPT_SHM:
      if (set_input(a, cmd, QDP_INPUT_SHM) != EXIT_OK) {
        return EXIT_USAGE;
      }
      a->in.shm_name = optarg;
      break;
    case OPT_REGION:
      if (set_input(a, cmd, QDP_INPUT_SHM) != EXIT_OK ||
          split_ref(cmd, optarg, a->regbuf, sizeof a->regbuf, &a->in.region, &a->in.region_token) !=
              EXIT_OK) {
        return EXIT_USAGE;
      }
      break;
    case OPT_SHM_FD:
      if (set_input(a, cmd, QDP_INPUT_SHM) != EXIT_OK) {
        return EXIT_USAGE;
      }
      if (!parse_i32(optarg, 0, INT32_MAX, &a->in.shm_fd)) {
        return usage_error(cmd, "--shm-fd: '%s' is not a file descriptor", optarg);
      }
      break;
    case OPT_SHM_PID:
      if (!parse_i32(optarg, 1, INT32_MAX, &a->in.shm_pid)) {
        return usage_error(cmd, "--shm-pid: '%s' is not a process id", optarg);
      }
      break;
    case OPT_INPUT_DTYPE:
      a->input_dtype = qdp_dtype_from_name(optarg);
      if (a->input_dtype != QDP_DTYPE_FLOAT32 && a->input_dtype != QDP_DTYPE_FLOAT64 &&
          a->input_dtype != QDP_DTYPE_INT64) {
        return usage_error(cmd, "--input-dtype: '%s' is not float32, float64 or int64", optarg);
      }
      break;
    case OPT_UPLOAD:
      a->force_upload = 1;
      break;
    case OPT_CHUNK_BYTES:
      if (!parse_u64(optarg, 1, (uint64_t)1 << 30, &v)) {
        return usage_error(cmd, "--chunk-bytes: '%s' is not in [1, 1073741824]", optarg);
      }
      a->in.chunk_bytes = (size_t)v;
      break;
    default:
      return usage_error(cmd, "unknown option");
    }
  }
  if (optind < argc) {
    return usage_error(cmd, "unexpected argument '%s'", argv[optind]);
  }
  if (a->eo.encoding == QDP_ENCODING_UNSPECIFIED) {
    return usage_error(cmd, "--encoding is required");
  }
  if (!a->have_input && strcmp(cmd, "encode") == 0) {
    return usage_error(cmd, "an input is required: --values, --input, --server-file or --shm");
  }
  if (a->in.kind == QDP_INPUT_SHM && (!have_offset || !have_length)) {
    return usage_error(cmd, "--shm and --region need --offset and --length");
  }
  if (a->in.kind != QDP_INPUT_SHM && (have_length || a->in.shm_pid >= 0)) {
    return usage_error(cmd, "--length and --shm-pid go with --shm or --shm-fd");
  }
  if (have_offset && a->in.kind != QDP_INPUT_SHM && a->in.kind != QDP_INPUT_LOCAL_FILE) {
    return usage_error(cmd, "--offset goes with --shm or a raw --input file");
  }
  if (a->in.kind == QDP_INPUT_SHM && !a->in.shm_name && !a->in.region && a->in.shm_pid < 0) {
    a->in.shm_pid = (int)getpid(); /* our own fd: valid while qdpctl waits for the reply */
  }
  a->in.dtype = a->input_dtype;
  if (a->in.kind == QDP_INPUT_INLINE) {
    if (a->in.dtype == QDP_DTYPE_UNSPECIFIED) {
      a->in.dtype = QDP_DTYPE_FLOAT64;
    }
    size_t n = 0;
    int rc = parse_values(cmd, a->values_arg, a->in.dtype, &a->values, &n);
    if (rc != EXIT_OK) {
      return rc;
    }
    a->in.data = a->values;
    a->in.data_bytes = n * qdp_dtype_size(a->in.dtype);
  }
  if ((a->in.kind == QDP_INPUT_SHM || a->in.kind == QDP_INPUT_NONE) &&
      a->in.dtype == QDP_DTYPE_UNSPECIFIED) {
    a->in.dtype = QDP_DTYPE_FLOAT64;
  }
  if (a->force_upload) {
    if (a->in.kind != QDP_INPUT_LOCAL_FILE) {
      return usage_error(cmd, "--upload goes with --input");
    }
    a->in.inline_max = 0;
  }
  a->eo.devices = a->devices;
  a->eo.ndevices = a->ndevices;
  return EXIT_OK;
}

static void encode_args_free(struct encode_args *a) {
  free(a->values);
  free(a->devices);
  free(a->devbuf);
}

/* Prints a state just made (encode, gather) with the REF that names it; EXIT_LOCAL without memory.
 */
static int print_new_state(const struct global *g, const struct qdp_state_info *s) {
  size_t n = strlen(s->handle) + strlen(s->token) + 2;
  char *ref = malloc(n);
  if (!ref) {
    return EXIT_LOCAL;
  }
  snprintf(ref, n, "%s:%s", s->handle, s->token);
  if (g->json) {
    struct jw w = {stdout, 0, {0}};
    jw_open(&w, NULL, '{');
    jw_s(&w, "ref", ref);
    jw_s(&w, "token", s->token);
    state_json_fields(&w, s);
    jw_close(&w, '}');
  } else {
    state_print(s, ref);
  }
  free(ref);
  return EXIT_OK;
}

static int cmd_encode(struct global *g, int argc, char **argv) {
  struct encode_args a;
  memset(&a, 0, sizeof a);
  int rc = parse_encode(g, "encode", argc, argv, &a);
  if (rc != EXIT_OK) {
    encode_args_free(&a);
    return rc < 0 ? EXIT_OK : rc;
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "encode", &c);
  struct bar b;
  bar_start(&b, g, "upload");
  if (a.in.kind == QDP_INPUT_LOCAL_FILE) {
    a.in.progress = bar_cb;
    a.in.progress_arg = &b;
  }
  struct qdp_state_info *s = NULL;
  if (rc == EXIT_OK && qdp_encode(c, &a.eo, &a.in, &s) != QDP_OK) {
    bar_end(&b);
    rc = fail(g, "encode");
  } else if (rc == EXIT_OK) {
    bar_end(&b);
    rc = print_new_state(g, s);
  }
  qdp_state_info_free(s);
  qdp_client_destroy(c);
  encode_args_free(&a);
  return rc;
}

static int cmd_plan(struct global *g, int argc, char **argv) {
  struct encode_args a;
  memset(&a, 0, sizeof a);
  int rc = parse_encode(g, "plan", argc, argv, &a);
  if (rc != EXIT_OK) {
    encode_args_free(&a);
    return rc < 0 ? EXIT_OK : rc;
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "plan", &c);
  struct qdp_plan_info *p = NULL;
  if (rc == EXIT_OK && qdp_plan(c, &a.eo, &a.in, &p) != QDP_OK) {
    rc = fail(g, "plan");
  } else if (rc == EXIT_OK) {
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_b(&w, "feasible", p->feasible);
      jw_s(&w, "policy", p->policy);
      jw_u(&w, "global_bits", p->global_bits);
      jw_u(&w, "total_bytes", p->total_bytes);
      jw_s(&w, "message", p->message);
      jw_open(&w, "needs", '[');
      for (size_t i = 0; i < p->nneeds; i++) {
        const struct qdp_device_need *d = p->needs[i];
        jw_open(&w, NULL, '{');
        jw_i(&w, "rank", d->rank);
        jw_s(&w, "device", d->device);
        jw_u(&w, "shard_bytes", d->shard_bytes);
        jw_u(&w, "staging_bytes", d->staging_bytes);
        jw_u(&w, "workspace_bytes", d->workspace_bytes);
        jw_u(&w, "need_bytes", d->need_bytes);
        jw_u(&w, "budget_bytes", d->budget_bytes);
        jw_b(&w, "fits", d->fits);
        jw_close(&w, '}');
      }
      jw_close(&w, ']');
      jw_open(&w, "shards", '[');
      for (size_t i = 0; i < p->nshards; i++) {
        shard_json(&w, p->shards[i]);
      }
      jw_close(&w, ']');
      jw_close(&w, '}');
    } else {
      printf("%s: policy %s, global bits %" PRIu32 ", %" PRIu64 " bytes in %zu shard%s\n",
             p->feasible ? "feasible" : "NOT FEASIBLE", p->policy, p->global_bits, p->total_bytes,
             p->nshards, p->nshards == 1 ? "" : "s");
      if (p->message[0]) {
        printf("%s\n", p->message);
      }
      printf("\n");
      static const char *const head[] = {"DEVICE",    "RANK", "SHARD",  "STAGING",
                                         "WORKSPACE", "NEED", "BUDGET", "FITS"};
      static const int right[] = {0, 1, 1, 1, 1, 1, 1, 0};
      struct table t;
      table_init(&t, 8, head, right);
      for (size_t i = 0; i < p->nneeds; i++) {
        const struct qdp_device_need *d = p->needs[i];
        char rank[16], sh[24], st[24], ws[24], need[24], bud[24];
        snprintf(rank, sizeof rank, "%d", d->rank);
        fmt_u64(sh, sizeof sh, d->shard_bytes);
        fmt_u64(st, sizeof st, d->staging_bytes);
        fmt_u64(ws, sizeof ws, d->workspace_bytes);
        fmt_u64(need, sizeof need, d->need_bytes);
        fmt_u64(bud, sizeof bud, d->budget_bytes);
        char *row[] = {d->device, rank, sh, st, ws, need, bud, d->fits ? "yes" : "NO"};
        table_row(&t, row);
      }
      table_print(&t, stdout);
      if (p->nshards) {
        printf("\n");
        shards_table(p->shards, p->nshards);
      }
    }
  }
  qdp_plan_info_free(p);
  qdp_client_destroy(c);
  encode_args_free(&a);
  return rc;
}

/* ---- commands on one state ---- */

static const char describe_help[] =
    "Usage: qdpctl describe REF [--views]\n"
    "\n"
    "Prints the layout of a state: encoding, qubits, batch, dtype, bytes, the plan's policy and\n"
    "every shard (rank, device, amplitude and sample ranges, bytes). REF is HANDLE:TOKEN as\n"
    "encode printed it.\n"
    "\n"
    "Options:\n"
    "  --views  also open a zero-copy view of every shard in this process (CUDA IPC; needs a GPU\n"
    "           daemon on this node) and print the view table: the shard's GPU as this process\n"
    "           numbers it, its UUID, its byte offset in the exported allocation and the lease.\n"
    "           The views are closed (and their lease with them) when qdpctl exits.\n"
    "\n"
    "Examples:\n"
    "  qdpctl describe 4f1c2a...:9b0e...\n"
    "  qdpctl describe --views 4f1c2a...:9b0e...\n";

static const char gather_help[] =
    "Usage: qdpctl gather REF --device DEVICE [--ttl SECONDS]\n"
    "\n"
    "Copies a (sharded) state onto one device, device to device, as a new state; prints its REF\n"
    "and layout (one shard). The source state is left as it was. Refused with the numbers (bytes\n"
    "needed, bytes the device's budget has left) when the state does not fit there.\n"
    "\n"
    "Options:\n"
    "  --device DEVICE  a device name as status lists it (cuda:0, cpu:1) or its index (0)\n"
    "\n"
    "Example:\n"
    "  qdpctl gather 4f1c2a...:9b0e... --device cuda:0\n";

static const char view_close_help[] =
    "Usage: qdpctl view-close REF LEASE_ID\n"
    "\n"
    "Closes a view lease (from an encode with --ipc, or a process that cannot close its own).\n"
    "A state released while the lease was open is freed now if this was its last lease.\n"
    "\n"
    "Example:\n"
    "  qdpctl view-close 4f1c2a...:9b0e... 7\n";

static const char ls_help[] =
    "Usage: qdpctl ls [--mine | --all]\n"
    "\n"
    "Lists your states (handles only: tokens are never listed): encoding, qubits, batch, dtype,\n"
    "bytes, policy, shards, owner, expiry and label. You are who the daemon finds you to be: your\n"
    "uid on its socket, your token's principal over TCP. --mine (the default) says so; --all\n"
    "lists every identity's states, for the daemon's own user and root.\n"
    "\n"
    "Examples:\n"
    "  qdpctl ls\n"
    "  sudo qdpctl ls --all\n"
    "  qdpctl --json ls | python3 -c 'import json,sys; "
    "print(len(json.load(sys.stdin)[\"states\"]))'\n";

static const char fetch_help[] =
    "Usage: qdpctl fetch REF -o OUT.npy [--offset N] [--count N] [--force]\n"
    "\n"
    "Streams a state (or an amplitude range of it) into a local .npy file in the state's dtype:\n"
    "shape (batch, 2^n) for a whole batch, (2^n,) for a whole state, (count,) for a range. The\n"
    "file appears complete or not at all.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE  the .npy file to write (required)\n"
    "  --offset N         first amplitude over the flattened [batch, 2^n] array (default 0)\n"
    "  --count N          amplitudes (default: to the end)\n"
    "  --chunk-bytes N    bytes per streamed message (default: the daemon's, 1 MiB)\n"
    "  --force            replace an existing file\n"
    "\n"
    "Example:\n"
    "  qdpctl fetch 4f1c2a...:9b0e... -o state.npy\n"
    "  python3 -c 'import numpy; print(numpy.load(\"state.npy\")[:4])'\n";

static const char export_help[] =
    "Usage: qdpctl export REF PATH [--force]\n"
    "\n"
    "Has qdpd write the state as a .npy file at PATH on the daemon's node. qdpctl creates\n"
    "the file beside PATH with your rights and hands it to qdpd, which fills it; it then gets\n"
    "its name, complete or not at all. Over TCP, PATH is absolute and must lie beneath qdpd's\n"
    "export_dir.\n"
    "An existing file is refused unless --force. (To get the file on this machine instead, use\n"
    "fetch.)\n"
    "\n"
    "Example:\n"
    "  qdpctl export 4f1c2a...:9b0e... /data/states/psi.npy\n";

static const char rm_help[] =
    "Usage: qdpctl rm REF [REF...]\n"
    "       qdpctl rm --mine HANDLE [HANDLE...]\n"
    "       qdpctl rm --mine --all\n"
    "\n"
    "Releases states and frees their memory on the devices. Stops at the first one that fails\n"
    "(and exits with its code); the ones before it are released. With --mine, your own states\n"
    "are released by handle alone, no token needed (a lost token strands no memory); --mine --all\n"
    "releases every state of yours.\n"
    "\n"
    "Examples:\n"
    "  qdpctl rm 4f1c2a...:9b0e... 77d0e1...:c4a2...\n"
    "  qdpctl rm --mine s4f1c2a0b9e8d7c6\n"
    "  qdpctl rm --mine --all\n";

static const char status_help[] =
    "Usage: qdpctl status\n"
    "\n"
    "Prints qdpd's version, backend, budgets, counters, registered regions, what reductions over\n"
    "sharded states use (NCCL or the host), the world's ranks when there are several, one line\n"
    "per device (NUMA node, total, free, budget and used bytes), and the link matrix of this\n"
    "node's devices: NV<n> (NVLink, n links), PCIe, P2P (a peer path of unknown kind), HOST (one\n"
    "memory), '-' (none); '!' marks a pair whose peer access is off.\n"
    "\n"
    "Examples:\n"
    "  qdpctl status\n"
    "  qdpctl --target 127.0.0.1:7777 --token \"$TOKEN\" --json status\n";

static const char health_help[] =
    "Usage: qdpctl health\n"
    "\n"
    "Prints SERVING, NOT_SERVING or UNKNOWN; exits 0 only for SERVING (4 otherwise, 3 when\n"
    "qdpd cannot be reached), so it serves as a readiness probe.\n"
    "\n"
    "Example:\n"
    "  until qdpctl health >/dev/null 2>&1; do sleep 0.2; done\n";

/* Parses the options of a command without request options; fills positional args. The optional
 * outputs (NULL: the command has no such option) take --offset/--count/--chunk-bytes (fo),
 * -o/--output, --force, --views and --device. */
static int parse_simple(struct global *g, const char *cmd, const char *help, int argc, char **argv,
                        int min_pos, int max_pos, const char **pos, int *npos,
                        struct qdp_fetch_opts *fo, const char **output, int *force, int *views,
                        const char **device) {
  static const struct option opts[] = {
      {"views", no_argument, NULL, OPT_VIEWS},
      {"device", required_argument, NULL, OPT_DEVICE},
      {"offset", required_argument, NULL, OPT_OFFSET},
      {"count", required_argument, NULL, OPT_COUNT},
      {"chunk-bytes", required_argument, NULL, OPT_CHUNK_BYTES},
      {"output", required_argument, NULL, OPT_OUTPUT},
      {"force", no_argument, NULL, OPT_FORCE},
      COMMON_LONG_OPTS,
      {NULL, 0, NULL, 0},
  };
  optind = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, fo ? "o:" : "", opts, NULL)) != -1) {
    int r = common_opt(g, opt, optarg);
    if (r < 0) {
      return usage_error(cmd, "bad value '%s'", optarg);
    }
    if (r > 0) {
      continue;
    }
    uint64_t v;
    switch (opt) {
    case OPT_HELP:
      print_help(help, "\n");
      return -1;
    case OPT_OFFSET:
    case OPT_COUNT:
    case OPT_CHUNK_BYTES:
      if (!fo) {
        return usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
      }
      if (!parse_u64(optarg, 0, opt == OPT_CHUNK_BYTES ? (uint64_t)1 << 30 : UINT64_MAX, &v)) {
        return usage_error(cmd, "'%s' is not a valid number for %s", optarg, argv[optind - 1]);
      }
      if (opt == OPT_OFFSET) {
        fo->offset = v;
      } else if (opt == OPT_COUNT) {
        fo->count = v;
      } else {
        fo->chunk_bytes = (uint32_t)v;
      }
      break;
    case 'o':
    case OPT_OUTPUT:
      if (!output) {
        return usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
      }
      *output = optarg;
      break;
    case OPT_FORCE:
      if (!force) {
        return usage_error(cmd, "unknown option '--force'");
      }
      *force = 1;
      break;
    case OPT_VIEWS:
      if (!views) {
        return usage_error(cmd, "unknown option '--views'");
      }
      *views = 1;
      break;
    case OPT_DEVICE:
      if (!device) {
        return usage_error(cmd, "unknown option '--device'");
      }
      *device = optarg;
      break;
    default:
      return usage_error(cmd, "unknown option");
    }
  }
  *npos = 0;
  for (int i = optind; i < argc; i++) {
    if (*npos >= max_pos) {
      return usage_error(cmd, "unexpected argument '%s'", argv[i]);
    }
    pos[(*npos)++] = argv[i];
  }
  if (*npos < min_pos) {
    return usage_error(cmd, "missing %s", min_pos == 1 ? "REF" : "arguments");
  }
  return EXIT_OK;
}

/* The views of a state as this process mapped them. */
static void views_table(const struct qdp_views *v) {
  static const char *const head[] = {"SHARD", "DEVICE", "LOCAL_GPU",  "UUID", "ROWS",
                                     "COUNT", "BYTES",  "IPC_OFFSET", "LEASE"};
  static const int right[] = {1, 0, 1, 0, 1, 1, 1, 1, 1};
  struct table t;
  table_init(&t, 9, head, right);
  for (size_t i = 0; i < v->count; i++) {
    const struct qdp_shard *s = v->views[i].shard;
    char idx[24], gpu[16], rows[24], count[24], bytes[24], off[24], lease[24];
    snprintf(idx, sizeof idx, "%zu", i);
    snprintf(gpu, sizeof gpu, "%d", v->views[i].device_id);
    fmt_u64(rows, sizeof rows, s->rows);
    fmt_u64(count, sizeof count, s->count);
    fmt_u64(bytes, sizeof bytes, s->bytes);
    fmt_u64(off, sizeof off, s->ipc_offset);
    fmt_u64(lease, sizeof lease, v->lease_id);
    char *row[] = {idx, s->device, gpu, s->uuid, rows, count, bytes, off, lease};
    table_row(&t, row);
  }
  table_print(&t, stdout);
}

static int cmd_describe(struct global *g, int argc, char **argv) {
  const char *pos[1];
  int npos;
  int views = 0;
  int rc = parse_simple(g, "describe", describe_help, argc, argv, 1, 1, pos, &npos, NULL, NULL,
                        NULL, &views, NULL);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  char buf[1024];
  const char *handle, *token;
  if (split_ref("describe", pos[0], buf, sizeof buf, &handle, &token) != EXIT_OK) {
    return EXIT_USAGE;
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "describe", &c);
  struct qdp_state_info *s = NULL;
  const struct qdp_views *v = NULL;
  if (rc == EXIT_OK && views && qdp_views_open(c, handle, token, &v) != QDP_OK) {
    rc = fail(g, "describe");
  } else if (rc == EXIT_OK && !views && qdp_describe(c, handle, token, &s) != QDP_OK) {
    rc = fail(g, "describe");
  } else if (rc == EXIT_OK) {
    const struct qdp_state_info *info = v ? v->state : s;
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_s(&w, "ref", pos[0]);
      state_json_fields(&w, info);
      if (v) {
        jw_open(&w, "views", '[');
        for (size_t i = 0; i < v->count; i++) {
          jw_open(&w, NULL, '{');
          jw_i(&w, "local_gpu", v->views[i].device_id);
          jw_close(&w, '}');
        }
        jw_close(&w, ']');
      }
      jw_close(&w, '}');
    } else {
      state_print(info, pos[0]);
      if (v) {
        views_table(v);
      }
    }
  }
  qdp_state_info_free(s);
  qdp_client_destroy(c); /* closes the views and their lease */
  return rc;
}

static int cmd_gather(struct global *g, int argc, char **argv) {
  const char *pos[1];
  int npos;
  const char *device = NULL;
  int rc = parse_simple(g, "gather", gather_help, argc, argv, 1, 1, pos, &npos, NULL, NULL, NULL,
                        NULL, &device);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  if (!device) {
    return usage_error("gather", "--device is required");
  }
  char buf[1024];
  const char *handle, *token;
  if (split_ref("gather", pos[0], buf, sizeof buf, &handle, &token) != EXIT_OK) {
    return EXIT_USAGE;
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "gather", &c);
  struct qdp_state_info *s = NULL;
  if (rc == EXIT_OK && qdp_gather(c, handle, token, device, 0, &s) != QDP_OK) {
    rc = fail(g, "gather");
  } else if (rc == EXIT_OK) {
    rc = print_new_state(g, s);
  }
  qdp_state_info_free(s);
  qdp_client_destroy(c);
  return rc;
}

static int cmd_view_close(struct global *g, int argc, char **argv) {
  const char *pos[2];
  int npos;
  int rc = parse_simple(g, "view-close", view_close_help, argc, argv, 2, 2, pos, &npos, NULL, NULL,
                        NULL, NULL, NULL);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  char buf[1024];
  const char *handle, *token;
  uint64_t lease = 0;
  if (split_ref("view-close", pos[0], buf, sizeof buf, &handle, &token) != EXIT_OK) {
    return EXIT_USAGE;
  }
  if (!parse_u64(pos[1], 1, UINT64_MAX, &lease)) {
    return usage_error("view-close", "'%s' is not a lease id", pos[1]);
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "view-close", &c);
  uint64_t freed = 0;
  if (rc == EXIT_OK && qdp_close_view(c, handle, token, lease, &freed) != QDP_OK) {
    rc = fail(g, "view-close");
  } else if (rc == EXIT_OK) {
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_u(&w, "freed_bytes", freed);
      jw_close(&w, '}');
    } else {
      printf("closed lease %" PRIu64 " (%" PRIu64 " bytes freed)\n", lease, freed);
    }
  }
  qdp_client_destroy(c);
  return rc;
}

/* The options of ls and rm: --mine, --all, and up to max_pos positional arguments. */
static int parse_owned(struct global *g, const char *cmd, const char *help, int argc, char **argv,
                       int max_pos, const char **pos, int *npos, int *mine, int *all) {
  static const struct option opts[] = {
      {"mine", no_argument, NULL, OPT_MINE},
      {"all", no_argument, NULL, OPT_ALL},
      COMMON_LONG_OPTS,
      {NULL, 0, NULL, 0},
  };
  optind = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    int r = common_opt(g, opt, optarg);
    if (r < 0) {
      return usage_error(cmd, "bad value '%s'", optarg);
    }
    if (r > 0) {
      continue;
    }
    switch (opt) {
    case OPT_HELP:
      print_help(help, "\n");
      return -1;
    case OPT_MINE:
      *mine = 1;
      break;
    case OPT_ALL:
      *all = 1;
      break;
    default:
      return usage_error(cmd, "unknown option");
    }
  }
  *npos = 0;
  for (int i = optind; i < argc; i++) {
    if (*npos >= max_pos) {
      return usage_error(cmd, "unexpected argument '%s'", argv[i]);
    }
    pos[(*npos)++] = argv[i];
  }
  return EXIT_OK;
}

static int cmd_ls(struct global *g, int argc, char **argv) {
  const char *pos[1];
  int npos, mine = 0, all = 0;
  int rc = parse_owned(g, "ls", ls_help, argc, argv, 0, pos, &npos, &mine, &all);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  if (mine && all) {
    return usage_error("ls", "--mine and --all contradict each other");
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "ls", &c);
  struct qdp_state_list *l = NULL;
  if (rc == EXIT_OK && (all ? qdp_list_all(c, &l) : qdp_list(c, &l)) != QDP_OK) {
    rc = fail(g, "ls");
  } else if (rc == EXIT_OK) {
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_open(&w, "states", '[');
      for (size_t i = 0; i < l->count; i++) {
        jw_open(&w, NULL, '{');
        state_json_fields(&w, l->states[i]);
        jw_close(&w, '}');
      }
      jw_close(&w, ']');
      jw_close(&w, '}');
    } else {
      static const char *const head[] = {"HANDLE", "ENCODING", "QUBITS", "BATCH",
                                         "DTYPE",  "BYTES",    "POLICY", "SHARDS",
                                         "OWNER",  "EXPIRES",  "LABEL"};
      static const int right[] = {0, 0, 1, 1, 0, 1, 0, 1, 0, 0, 0};
      struct table t;
      table_init(&t, 11, head, right);
      for (size_t i = 0; i < l->count; i++) {
        const struct qdp_state_info *s = l->states[i];
        char q[16], batch[24], bytes[24], shards[24], exp[40];
        const char *enc = qdp_encoding_name(s->encoding);
        const char *dt = qdp_dtype_name(s->dtype);
        snprintf(q, sizeof q, "%" PRIu32, s->qubits);
        fmt_u64(batch, sizeof batch, s->batch);
        fmt_u64(bytes, sizeof bytes, s->bytes);
        snprintf(shards, sizeof shards, "%zu", s->nshards);
        fmt_time(exp, sizeof exp, s->expires_unix_ms, "never");
        char *row[] = {s->handle,
                       (char *)(enc ? enc : "?"),
                       q,
                       batch,
                       (char *)(dt ? dt : "?"),
                       bytes,
                       s->policy,
                       shards,
                       s->owner,
                       exp,
                       s->label};
        table_row(&t, row);
      }
      table_print(&t, stdout);
    }
  }
  qdp_state_list_free(l);
  qdp_client_destroy(c);
  return rc;
}

static int cmd_fetch(struct global *g, int argc, char **argv) {
  const char *pos[1];
  int npos;
  struct qdp_fetch_opts fo = QDP_FETCH_OPTS_INIT;
  const char *out = NULL;
  int force = 0;
  int rc = parse_simple(g, "fetch", fetch_help, argc, argv, 1, 1, pos, &npos, &fo, &out, &force,
                        NULL, NULL);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  if (!out) {
    return usage_error("fetch", "-o OUT.npy is required");
  }
  char buf[1024];
  const char *handle, *token;
  if (split_ref("fetch", pos[0], buf, sizeof buf, &handle, &token) != EXIT_OK) {
    return EXIT_USAGE;
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "fetch", &c);
  struct bar b;
  bar_start(&b, g, "fetch");
  fo.progress = bar_cb;
  fo.progress_arg = &b;
  if (rc == EXIT_OK && qdp_fetch_npy(c, handle, token, &fo, out, force) != QDP_OK) {
    bar_end(&b);
    rc = fail(g, "fetch");
    if (qdp_last_error()->code == QDP_ERR_ALREADY_EXISTS && !qdp_last_error()->remote) {
      fprintf(stderr, "qdpctl fetch: pass --force to replace '%s'\n", out);
    }
  } else if (rc == EXIT_OK) {
    bar_end(&b);
    struct stat st;
    uint64_t size = stat(out, &st) == 0 ? (uint64_t)st.st_size : 0;
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_s(&w, "path", out);
      jw_u(&w, "offset", fo.offset);
      jw_u(&w, "count", fo.count);
      jw_u(&w, "file_bytes", size);
      jw_close(&w, '}');
    } else {
      printf("wrote %s (%" PRIu64 " bytes)\n", out, size);
    }
  }
  qdp_client_destroy(c);
  return rc;
}

static int cmd_export(struct global *g, int argc, char **argv) {
  const char *pos[2];
  int npos;
  int force = 0;
  int rc = parse_simple(g, "export", export_help, argc, argv, 2, 2, pos, &npos, NULL, NULL, &force,
                        NULL, NULL);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  char buf[1024];
  const char *handle, *token;
  if (split_ref("export", pos[0], buf, sizeof buf, &handle, &token) != EXIT_OK) {
    return EXIT_USAGE;
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "export", &c);
  char *path = NULL;
  uint64_t bytes = 0;
  if (rc == EXIT_OK && qdp_export(c, handle, token, pos[1], force, &path, &bytes) != QDP_OK) {
    rc = fail(g, "export");
  } else if (rc == EXIT_OK) {
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_s(&w, "path", path);
      jw_u(&w, "bytes", bytes);
      jw_close(&w, '}');
    } else {
      printf("exported %s (%" PRIu64 " bytes)\n", path, bytes);
    }
  }
  qdp_free(path);
  qdp_client_destroy(c);
  return rc;
}

static int cmd_rm(struct global *g, int argc, char **argv) {
  const char *pos[256];
  int npos, mine = 0, all = 0;
  int rc = parse_owned(g, "rm", rm_help, argc, argv, 256, pos, &npos, &mine, &all);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  if (all && (!mine || npos > 0)) {
    return usage_error("rm",
                       "--all releases every state of yours: give it with --mine and no "
                       "handles");
  }
  if (!all && npos == 0) {
    return usage_error("rm", "missing REF");
  }
  static char bufs[256][256];
  const char *handles[256], *tokens[256];
  for (int i = 0; i < npos; i++) {
    if (mine && !strchr(pos[i], ':')) {
      handles[i] = pos[i]; /* your own, by handle: no token */
      tokens[i] = "";
    } else if (split_ref("rm", pos[i], bufs[i], sizeof bufs[i], &handles[i], &tokens[i]) !=
               EXIT_OK) {
      return EXIT_USAGE;
    }
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "rm", &c);
  struct qdp_state_list *l = NULL;
  if (rc == EXIT_OK && all) {
    if (qdp_list(c, &l) != QDP_OK) {
      rc = fail(g, "rm");
    } else {
      for (size_t k = 0; k < l->count && k < 256; k++) {
        handles[npos] = l->states[k]->handle;
        tokens[npos++] = "";
      }
    }
  }
  struct jw w = {stdout, 0, {0}};
  if (rc == EXIT_OK && g->json) {
    jw_open(&w, NULL, '{');
    jw_open(&w, "released", '[');
  }
  int i = 0;
  for (; rc == EXIT_OK && i < npos; i++) {
    uint64_t freed = 0;
    if (qdp_release(c, handles[i], tokens[i], &freed) != QDP_OK) {
      break;
    }
    if (g->json) {
      jw_open(&w, NULL, '{');
      jw_s(&w, "handle", handles[i]);
      jw_u(&w, "freed_bytes", freed);
      jw_close(&w, '}');
    } else {
      printf("released %s (%" PRIu64 " bytes freed)\n", handles[i], freed);
    }
  }
  if (rc == EXIT_OK) {
    const struct qdp_errinfo *e = qdp_last_error();
    int failed = i < npos;
    if (g->json) {
      jw_close(&w, ']');
      if (failed) {
        error_json(&w, e, 0);
      }
      jw_close(&w, '}');
    }
    if (failed) {
      fprintf(stderr, "qdpctl rm: %s (%s)\n", e->msg, e->code_name);
      rc = exit_code_for(e);
    }
  }
  qdp_state_list_free(l);
  qdp_client_destroy(c);
  return rc;
}

static const char region_help[] =
    "Usage: qdpctl region add NAME | --pid PID --fd FD\n"
    "       qdpctl region rm REF\n"
    "\n"
    "add has qdpd map a POSIX shared-memory region of its node once (and page-lock it for its\n"
    "GPUs) and prints the region's REF (HANDLE:TOKEN); 'encode --region REF --offset N --length "
    "N'\n"
    "then reads it in place, as many times as needed, without mapping it again. The region is\n"
    "named by its shm_open NAME, or by an open fd of a process (/proc/PID/fd/FD); qdpctl opens it\n"
    "with your rights and hands the descriptor to qdpd (so it must run on qdpd's node).\n"
    "rm unregisters it; an encode reading it finishes first.\n"
    "\n"
    "Examples:\n"
    "  ref=$(qdpctl --json region add /features |\n"
    "        python3 -c 'import json,sys; print(json.load(sys.stdin)[\"ref\"])')\n"
    "  qdpctl encode --encoding amplitude --qubits 10 --region \"$ref\" --offset 0 --length 8192\n"
    "  qdpctl region rm \"$ref\"\n";

static int cmd_region(struct global *g, int argc, char **argv) {
  static const struct option opts[] = {
      {"pid", required_argument, NULL, OPT_PID},
      {"fd", required_argument, NULL, OPT_FD},
      COMMON_LONG_OPTS,
      {NULL, 0, NULL, 0},
  };
  const char *cmd = "region";
  int pid = -1, fd = -1;
  optind = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    int r = common_opt(g, opt, optarg);
    if (r < 0) {
      return usage_error(cmd, "bad value '%s'", optarg);
    }
    if (r > 0) {
      continue;
    }
    switch (opt) {
    case OPT_HELP:
      print_help(region_help, "\n");
      return EXIT_OK;
    case OPT_PID:
      if (!parse_i32(optarg, 1, INT32_MAX, &pid)) {
        return usage_error(cmd, "--pid: '%s' is not a process id", optarg);
      }
      break;
    case OPT_FD:
      if (!parse_i32(optarg, 0, INT32_MAX, &fd)) {
        return usage_error(cmd, "--fd: '%s' is not a file descriptor", optarg);
      }
      break;
    default:
      return usage_error(cmd, "unknown option");
    }
  }
  int npos = argc - optind;
  const char *sub = npos > 0 ? argv[optind] : NULL;
  const char *arg = npos > 1 ? argv[optind + 1] : NULL;
  if (!sub || (strcmp(sub, "add") != 0 && strcmp(sub, "rm") != 0)) {
    return usage_error(cmd, "give 'add NAME', 'add --pid PID --fd FD' or 'rm REF'");
  }
  if (npos > 2) {
    return usage_error(cmd, "unexpected argument '%s'", argv[optind + 2]);
  }
  int is_add = strcmp(sub, "add") == 0;
  char buf[256];
  const char *handle = NULL, *token = NULL;
  if (is_add) {
    if ((arg != NULL) == (pid > 0 || fd >= 0) || (!arg && (pid <= 0 || fd < 0))) {
      return usage_error(cmd, "add takes a NAME, or --pid and --fd");
    }
  } else {
    if (!arg) {
      return usage_error(cmd, "missing REF");
    }
    if (pid > 0 || fd >= 0) {
      return usage_error(cmd, "--pid and --fd go with add");
    }
    if (split_ref(cmd, arg, buf, sizeof buf, &handle, &token) != EXIT_OK) {
      return EXIT_USAGE;
    }
  }
  qdp_client *c = NULL;
  int rc = connect_client(g, cmd, &c);
  if (rc != EXIT_OK) {
    return rc;
  }
  struct jw w = {stdout, 0, {0}};
  if (is_add) {
    struct qdp_region_info ri = QDP_REGION_INFO_INIT;
    if (qdp_region_register(c, arg, pid, fd, &ri) != QDP_OK) {
      rc = fail(g, cmd);
    } else if (g->json) {
      char ref[160];
      snprintf(ref, sizeof ref, "%s:%s", ri.handle, ri.token);
      jw_open(&w, NULL, '{');
      jw_s(&w, "ref", ref);
      jw_s(&w, "handle", ri.handle);
      jw_u(&w, "bytes", ri.bytes);
      jw_s(&w, "owner", ri.owner);
      jw_b(&w, "sealed", ri.sealed);
      jw_b(&w, "pinned", ri.pinned);
      jw_i(&w, "created_unix_ms", ri.created_unix_ms);
      jw_close(&w, '}');
    } else {
      printf("%s:%s\n", ri.handle, ri.token);
      printf("region     %" PRIu64 " bytes%s%s\n", ri.bytes, ri.sealed ? ", sealed" : "",
             ri.pinned ? ", pinned" : "");
    }
  } else {
    if (qdp_region_unregister(c, handle, token) != QDP_OK) {
      rc = fail(g, cmd);
    } else if (g->json) {
      jw_open(&w, NULL, '{');
      jw_s(&w, "unregistered", handle);
      jw_close(&w, '}');
    } else {
      printf("unregistered %s\n", handle);
    }
  }
  qdp_client_destroy(c);
  return rc;
}

static int cmd_noargs(struct global *g, int argc, char **argv, const char *cmd, const char *help,
                      int (*fn)(struct global *, qdp_client *)) {
  const char *pos[1];
  int npos;
  int rc = parse_simple(g, cmd, help, argc, argv, 0, 0, pos, &npos, NULL, NULL, NULL, NULL, NULL);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  qdp_client *c = NULL;
  rc = connect_client(g, cmd, &c);
  if (rc == EXIT_OK) {
    rc = fn(g, c);
  }
  qdp_client_destroy(c);
  return rc;
}

/* ---- main ---- */

static const char main_help[] =
    "Usage: qdpctl [OPTIONS] COMMAND [ARGS]\n"
    "\n"
    "qdpctl talks to qdpd, the qdp node daemon that encodes classical data into quantum state\n"
    "vectors on its devices and keeps them resident.\n"
    "\n"
    "Commands:\n"
    "  status                 daemon version, backend, budgets and devices\n"
    "  health                 SERVING or not\n"
    "  encode                 encode an input into a state; prints its REF and layout\n"
    "  plan                   the same request as a dry run: shards and per-device arithmetic\n"
    "  describe REF [--views] a state's layout (and zero-copy views of its shards)\n"
    "  ls                     the states qdpd holds\n"
    "  fetch REF -o OUT.npy   stream a state (or a range) into a local .npy file\n"
    "  export REF PATH        have qdpd write the state as .npy on its node\n"
    "  rm REF [REF...]        release states\n"
    "  gather REF --device D  copy a state onto one device as a new state\n"
    "  view-close REF LEASE   close a zero-copy view lease\n"
    "  region add|rm          register a shared-memory region once for many encodes\n"
    "\n"
    "A REF is HANDLE:TOKEN, as encode prints it; the token is the capability to use the state.\n"
    "Inputs (encode, plan): --values (inline), --input FILE (local .npy or raw: inline when\n"
    "small, streamed otherwise), --server-file PATH (on the node), --shm NAME (shared memory).\n"
    "'qdpctl COMMAND --help' describes each command.\n"
    "\n"
    "Examples:\n"
    "  qdpctl status\n"
    "  ref=$(qdpctl --json encode --encoding amplitude --qubits 2 --values 1,2,3,4 |\n"
    "        python3 -c 'import json,sys; print(json.load(sys.stdin)[\"ref\"])')\n"
    "  qdpctl fetch \"$ref\" -o psi.npy && qdpctl rm \"$ref\"\n"
    "\n"
    "Environment: QDP_TARGET, QDP_SOCKET, QDP_TOKEN, XDG_RUNTIME_DIR.\n"
    "\n";

int main(int argc, char **argv) {
  struct global g = {NULL, NULL, NULL, -1, 0, -1};
  static const struct option opts[] = {
      COMMON_LONG_OPTS,
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0},
  };
  int opt;
  /* '+': stop at the subcommand, whose own parser takes the rest. */
  while ((opt = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
    int r = common_opt(&g, opt, optarg);
    if (r < 0) {
      return usage_error(NULL, "bad value '%s'", optarg);
    }
    if (r > 0) {
      continue;
    }
    if (opt == OPT_HELP || opt == 'h') {
      print_help(main_help, "");
      return EXIT_OK;
    }
    if (opt == 'V') {
      printf("qdpctl (libqdp %s)\n", qdp_version_string());
      return EXIT_OK;
    }
    return usage_error(NULL, "unknown option");
  }
  if (optind >= argc) {
    return usage_error(NULL,
                       "a command is required (status, health, encode, plan, describe, ls, "
                       "fetch, export, rm, gather, view-close, region)");
  }
  const char *cmd = argv[optind];
  int sub_argc = argc - optind;
  char **sub_argv = argv + optind;

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  (void)sigaction(SIGINT, &sa, NULL);

  if (strcmp(cmd, "help") == 0) {
    print_help(main_help, "");
    return EXIT_OK;
  }
  if (strcmp(cmd, "status") == 0) {
    return cmd_noargs(&g, sub_argc, sub_argv, cmd, status_help, cmd_status);
  }
  if (strcmp(cmd, "health") == 0) {
    return cmd_noargs(&g, sub_argc, sub_argv, cmd, health_help, cmd_health);
  }
  if (strcmp(cmd, "encode") == 0) {
    return cmd_encode(&g, sub_argc, sub_argv);
  }
  if (strcmp(cmd, "plan") == 0) {
    return cmd_plan(&g, sub_argc, sub_argv);
  }
  if (strcmp(cmd, "describe") == 0) {
    return cmd_describe(&g, sub_argc, sub_argv);
  }
  if (strcmp(cmd, "ls") == 0) {
    return cmd_ls(&g, sub_argc, sub_argv);
  }
  if (strcmp(cmd, "fetch") == 0) {
    return cmd_fetch(&g, sub_argc, sub_argv);
  }
  if (strcmp(cmd, "export") == 0) {
    return cmd_export(&g, sub_argc, sub_argv);
  }
  if (strcmp(cmd, "rm") == 0) {
    return cmd_rm(&g, sub_argc, sub_argv);
  }
  if (strcmp(cmd, "region") == 0) {
    return cmd_region(&g, sub_argc, sub_argv);
  }
  if (strcmp(cmd, "gather") == 0) {
    return cmd_gather(&g, sub_argc, sub_argv);
  }
  if (strcmp(cmd, "view-close") == 0) {
    return cmd_view_close(&g, sub_argc, sub_argv);
  }
  return usage_error(NULL, "unknown command '%s'", cmd);
}
