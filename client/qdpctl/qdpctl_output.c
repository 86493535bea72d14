/* qdpctl_output.c — what qdpctl prints: the JSON writer, aligned text tables, the progress bar,
 * the error object, and a state's layout as JSON or text (encode, plan, describe, ls, gather). */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qdp_size.h"
#include "qdpctl.h"

/* ---- JSON ---- */

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

void jw_open(struct jw *w, const char *key, char ch) {
  jw_key(w, key);
  fputc(ch, w->f);
  int top = w->depth == 0 && ch == '{';
  if (w->depth < 31) {
    w->depth++;
  }
  w->count[w->depth] = 0;
  if (top) {
    jw_i(w, "schema", QDPCTL_JSON_SCHEMA);
  }
}

void jw_close(struct jw *w, char ch) {
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

void jw_s(struct jw *w, const char *key, const char *v) {
  jw_key(w, key);
  jw_str_raw(w->f, v);
}

void jw_u(struct jw *w, const char *key, uint64_t v) {
  jw_key(w, key);
  fprintf(w->f, "%" PRIu64, v);
}

void jw_i(struct jw *w, const char *key, int64_t v) {
  jw_key(w, key);
  fprintf(w->f, "%" PRId64, v);
}

void jw_d(struct jw *w, const char *key, double v) {
  jw_key(w, key);
  if (isfinite(v)) {
    fprintf(w->f, "%.17g", v);
  } else {
    fputs("null", w->f);
  }
}

void jw_b(struct jw *w, const char *key, int v) {
  jw_key(w, key);
  fputs(v ? "true" : "false", w->f);
}

/* ---- tables ---- */

void table_init(struct table *t, int ncols, const char *const *head, const int *right) {
  memset(t, 0, sizeof *t);
  t->ncols = ncols;
  for (int i = 0; i < ncols; i++) {
    t->head[i] = head[i];
    t->right[i] = right ? right[i] : 0;
  }
}

/* Appends one row of ncols already formatted cells (copied). */
void table_row(struct table *t, char *const *cells) {
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

void table_print(struct table *t, FILE *f) {
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

void fmt_u64(char *buf, size_t size, uint64_t v) {
  snprintf(buf, size, "%" PRIu64, v);
}

void fmt_size(const struct global *g, char *buf, size_t size, uint64_t v) {
  if (g->raw_bytes) {
    snprintf(buf, size, "%" PRIu64, v);
    return;
  }
  qdp_size_text(buf, size, v);
}

/* ISO-8601 UTC; `none` when the daemon sent no time (0). */
void fmt_time(char *buf, size_t size, int64_t unix_ms, const char *none) {
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

/* ---- progress ---- */

static double since(const struct timespec *a) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - a->tv_sec) + (double)(now.tv_nsec - a->tv_nsec) / 1e9;
}

static void draw_bar(struct bar *b, uint64_t done, uint64_t total, int final);

int bar_cb(void *arg, uint64_t done, uint64_t total) {
  struct bar *b = arg;
  if (interrupted) {
    return 1; /* Ctrl-C: libqdp cancels the call and cleans up (no partial .npy) */
  }
  if (!b->on) {
    return 0;
  }
  int final = total && done >= total;
  pthread_mutex_lock(&b->mu);
  b->moving = !final;
  if (final && !b->moved) {
    b->moved = 1;
    clock_gettime(CLOCK_MONOTONIC, &b->phase_start); /* what comes after starts now */
  }
  draw_bar(b, done, total, final);
  pthread_mutex_unlock(&b->mu);
  return 0;
}

/* The bar itself, under b->mu. Short transfers get none: it is drawn once a transfer has run for
 * a quarter second, then at most ten times a second, and always its final state (a line of its
 * own then, so that a waiting phase after it starts on the next). */
static void draw_bar(struct bar *b, uint64_t done, uint64_t total, int final) {
  double t = since(&b->start);
  if ((t < 0.25 && !b->drawn && !b->forced) || (since(&b->last) < 0.1 && !final && b->drawn)) {
    return;
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
  fprintf(stderr, "\r%s [%s] %5.1f%% %.1f/%.1f MiB %.1f MiB/s%s", b->label, bar, frac * 100.0,
          mib, (double)total / 1048576.0, t > 0 ? mib / t : 0.0, final ? "\n" : "");
  fflush(stderr);
  b->drawn = !final;
  b->phase_drawn = NULL;
}

/* The waiting line, under b->mu; padded, so that a shorter line covers the one before it
 * without terminal codes. */
static void draw_phase(struct bar *b, const char *phase, double seconds) {
  fprintf(stderr, "\r%s: %s, %.1f s%-12s", b->label, phase, seconds, "");
  fflush(stderr);
  b->drawn = 1;
  b->phase_drawn = phase;
}

/* The waiting line's thread: ten times a second, while no bytes move, the phase and its
 * seconds, once it has lasted a quarter second (at once with --progress). */
static void *tick(void *arg) {
  struct bar *b = arg;
  pthread_mutex_lock(&b->mu);
  while (!b->stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&b->cv, &b->mu, &until);
    const char *phase = b->moved || !b->before ? b->after : b->before;
    double t = since(b->moved ? &b->phase_start : &b->start);
    if (b->stop || b->moving || !phase || (t < 0.25 && !b->forced)) {
      continue;
    }
    draw_phase(b, phase, t);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

void bar_start(struct bar *b, const struct global *g, const char *label) {
  memset(b, 0, sizeof *b);
  b->on = g->progress > 0 || (g->progress < 0 && isatty(STDERR_FILENO));
  b->forced = g->progress > 0;
  b->label = label;
  clock_gettime(CLOCK_MONOTONIC, &b->start);
  b->last = b->phase_start = b->start;
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
}

void bar_wait(struct bar *b, const char *before, const char *after) {
  b->before = before;
  b->after = after;
  b->moved = before == NULL; /* nothing will move: the call is in its last phase already */
  if (b->on && !b->ticking) {
    b->ticking = pthread_create(&b->ticker, NULL, tick, b) == 0;
  }
}

void bar_end(struct bar *b) {
  if (b->ticking) {
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->ticker, NULL);
    b->ticking = 0;
    if (b->drawn && b->phase_drawn) { /* the phase's whole time */
      draw_phase(b, b->phase_drawn, since(b->moved ? &b->phase_start : &b->start));
    }
  }
  if (b->drawn) {
    fputc('\n', stderr);
    b->drawn = 0;
  }
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
}

/* ---- errors ---- */

/* The "error" object; rm's per-REF report leaves out the placement details (`full` 0). */
void error_json(struct jw *w, const struct qdp_errinfo *e, int full) {
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

/* ---- a state's layout ---- */

void shard_json(struct jw *w, const struct qdp_shard *s) {
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
  jw_s(w, "view_ticket", s->view_ticket ? s->view_ticket : "");
  jw_u(w, "view_bytes", s->view_bytes);
  jw_close(w, '}');
}

void state_json_fields(struct jw *w, const struct qdp_state_info *s) {
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
  jw_u(w, "ttl_seconds", s->ttl_seconds);
  jw_b(w, "ttl_capped", s->ttl_capped);
  jw_b(w, "written", s->written);
  jw_u(w, "writer_lease_id", s->writer_lease_id);
  jw_s(w, "writer", s->writer);
  jw_i(w, "writer_pid", s->writer_pid);
  jw_s(w, "session", s->session ? s->session : "");
  jw_open(w, "shards", '[');
  for (size_t i = 0; i < s->nshards; i++) {
    shard_json(w, s->shards[i]);
  }
  jw_close(w, ']');
}

void shards_table(const struct global *g, struct qdp_shard *const *shards, size_t n) {
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
    fmt_size(g, bytes, sizeof bytes, s->bytes);
    char *row[] = {idx, s->device, rank, s->host, first, count, rf, rows, bytes};
    table_row(&t, row);
  }
  table_print(&t, stdout);
}

void state_print(const struct global *g, const struct qdp_state_info *s, const char *ref) {
  const char *enc = qdp_encoding_name(s->encoding);
  const char *dt = qdp_dtype_name(s->dtype);
  char created[40], expires[40], bytes[32];
  fmt_size(g, bytes, sizeof bytes, s->bytes);
  fmt_time(created, sizeof created, s->created_unix_ms, "-");
  fmt_time(expires, sizeof expires, s->expires_unix_ms, "never");
  if (ref) {
    printf("REF        %s\n", ref);
  } else {
    printf("HANDLE     %s\n", s->handle);
  }
  printf("encoding   %s, %" PRIu32 " qubits, batch %" PRIu64 ", %s, %s%s\n",
         enc ? enc : "unspecified", s->qubits, s->batch, dt ? dt : "unspecified", bytes,
         g->raw_bytes ? " bytes" : "");
  printf("placement  %s, global bits %" PRIu32 ", collective %s, %zu shard%s\n", s->policy,
         s->global_bits, s->collective[0] ? s->collective : "none", s->nshards,
         s->nshards == 1 ? "" : "s");
  printf("created    %s by %s, encoded in %.3f ms\n", created, s->owner[0] ? s->owner : "-",
         s->encode_ms);
  if (s->expires_unix_ms) {
    printf("expires    %s (ttl %" PRIu64 " s%s)\n", expires, s->ttl_seconds,
           s->ttl_capped ? ", capped at the daemon's max_ttl" : "");
  } else {
    printf("expires    %s\n", expires);
  }
  if (s->writer_lease_id) {
    printf("writing    lease %" PRIu64 " of %s (pid %d): no read of its amplitudes until it is "
           "closed\n",
           s->writer_lease_id, s->writer[0] ? s->writer : "-", s->writer_pid);
  }
  if (s->written) {
    printf("written    through a write lease: the amplitudes are no longer necessarily the "
           "encoding's\n");
  }
  if (s->session && s->session[0]) {
    printf("session    %s: released when that session ends\n", s->session);
  }
  if (s->label[0]) {
    printf("label      %s\n", s->label);
  }
  printf("\n");
  shards_table(g, s->shards, s->nshards);
}

/* Prints a state just made (encode, gather) with the REF that names it; EXIT_LOCAL without memory.
 */
int print_new_state(const struct global *g, const struct qdp_state_info *s) {
  size_t n = strlen(s->handle) + strlen(s->token) + 2;
  char *ref = malloc(n);
  if (!ref) {
    return EXIT_LOCAL;
  }
  snprintf(ref, n, "%s:%s", s->handle, s->token);
  if (s->ttl_capped) {
    /* Said on stderr too, so a script reading REF from stdout still learns it. */
    fprintf(stderr,
            "qdpctl: warning: the ttl asked for is above the daemon's max_ttl; the state "
            "expires in %" PRIu64 " s\n",
            s->ttl_seconds);
  }
  if (g->json) {
    struct jw w = {stdout, 0, {0}};
    jw_open(&w, NULL, '{');
    jw_s(&w, "ref", ref);
    jw_s(&w, "token", s->token);
    state_json_fields(&w, s);
    jw_close(&w, '}');
  } else {
    state_print(g, s, ref);
  }
  free(ref);
  return EXIT_OK;
}

/* The views of a state as this process mapped them. */
void views_table(const struct qdp_views *v) {
  static const char *const head[] = {"SHARD", "DEVICE", "LOCAL_GPU",  "UUID", "ROWS",
                                     "COUNT", "BYTES",  "IPC_OFFSET", "LEASE", "VIA"};
  static const int right[] = {1, 0, 1, 0, 1, 1, 1, 1, 1, 0};
  struct table t;
  table_init(&t, 10, head, right);
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
    if (v->writable) {
      snprintf(lease, sizeof lease, "%" PRIu64 " (write)", v->lease_id);
    }
    /* How the shard came: a descriptor taken on the socket, or a legacy CUDA IPC handle. */
    char *via = s->view_ticket && s->view_ticket[0] ? "fd" : "ipc";
    char *row[] = {idx, s->device, gpu, s->uuid, rows, count, bytes, off, lease, via};
    table_row(&t, row);
  }
  table_print(&t, stdout);
}
