/* qdpctl_top.c — top: a live view of a daemon from its Prometheus metrics (metrics_listen):
 * jobs/s and failures/s, job latency quantiles over the last interval, states, and memory per
 * device. It reads /metrics over HTTP itself (one GET per frame); no gRPC call is made. */
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "qdpctl.h"

static const char top_help[] =
    "Usage: qdpctl top [--metrics URL] [--interval SECONDS] [--once]\n"
    "\n"
    "A live view of qdpd from its metrics (qdpd's metrics_listen must be on): encode jobs/s and\n"
    "failed jobs/s, job latency p50/p90/p99 over the last interval, calls/s, states and what\n"
    "they hold, and each device's memory against its budget. Refreshes every --interval seconds\n"
    "(default 2) until Ctrl-C; --once prints one frame (two scrapes an interval apart) and exits,\n"
    "as JSON with --json.\n"
    "\n"
    "  --metrics URL     the daemon's metrics (default http://127.0.0.1:9464/metrics; HOST:PORT\n"
    "                    is enough)\n"
    "  --interval S      seconds between frames, 0.1 to 3600\n"
    "  --once            one frame, then exit\n"
    "\n"
    "Examples:\n"
    "  qdpctl top\n"
    "  qdpctl top --metrics 10.0.0.5:9464 --interval 5\n"
    "  qdpctl --json top --once | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"jobs_per_s\"])'\n";

/* One scrape: its time and its text. */
struct scrape {
  double t;
  char *text;
};

/* GET url's path from its host; the body (malloc'd) in *ret. EXIT_UNAVAILABLE, reported, when
 * it cannot be had. */
static int http_get(const char *url, char **ret) {
  char host[256], port[16] = "80", path[512] = "/metrics";
  const char *p = strncmp(url, "http://", 7) == 0 ? url + 7 : url;
  const char *slash = strchr(p, '/');
  size_t hl = slash ? (size_t)(slash - p) : strlen(p);
  if (slash) {
    snprintf(path, sizeof path, "%s", slash);
  }
  if (hl == 0 || hl >= sizeof host) {
    return usage_error("top", "--metrics: '%s' has no host", url);
  }
  snprintf(host, sizeof host, "%.*s", (int)hl, p);
  char *colon = strrchr(host, ':');
  if (colon && !strchr(colon, ']')) {
    snprintf(port, sizeof port, "%s", colon + 1);
    *colon = '\0';
  }
  if (host[0] == '[') { /* [::1] */
    memmove(host, host + 1, strlen(host));
    host[strcspn(host, "]")] = '\0';
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  int g = getaddrinfo(host, port, &hints, &ai);
  if (g != 0) {
    fprintf(stderr, "qdpctl top: %s: %s\n", host, gai_strerror(g));
    return EXIT_UNAVAILABLE;
  }
  int fd = -1;
  for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0) {
    fprintf(stderr, "qdpctl top: cannot reach %s:%s (%s): is qdpd's metrics_listen on?\n", host,
            port, strerror(errno));
    return EXIT_UNAVAILABLE;
  }
  char req[1024];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, host);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  if (!buf || write(fd, req, (size_t)n) != n) {
    free(buf);
    close(fd);
    fprintf(stderr, "qdpctl top: cannot send the request to %s:%s\n", host, port);
    return EXIT_UNAVAILABLE;
  }
  ssize_t r;
  while ((r = read(fd, buf + len, cap - 1 - len)) > 0) {
    len += (size_t)r;
    if (len + 1 == cap) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        break;
      }
      buf = nb;
      cap *= 2;
    }
  }
  close(fd);
  buf[len] = '\0';
  char *body = strstr(buf, "\r\n\r\n");
  if (strncmp(buf, "HTTP/1.", 7) != 0 || strncmp(buf + 8, " 200", 4) != 0 || !body) {
    fprintf(stderr, "qdpctl top: %s answered '%.*s', not metrics\n", url,
            (int)strcspn(buf, "\r\n"), buf);
    free(buf);
    return EXIT_UNAVAILABLE;
  }
  memmove(buf, body + 4, strlen(body + 4) + 1);
  *ret = buf;
  return EXIT_OK;
}

/* The value of label `key` in a sample's labels ("a=\"x\",b=\"y\""), as far as its closing
 * quote (*ret_len), or NULL. */
static const char *label_value(const char *labels, size_t len, const char *key, size_t *ret_len) {
  size_t kl = strlen(key);
  for (size_t i = 0; i + kl + 2 <= len; i++) {
    if ((i == 0 || labels[i - 1] == ',') && strncmp(labels + i, key, kl) == 0 &&
        labels[i + kl] == '=' && labels[i + kl + 1] == '"') {
      const char *v = labels + i + kl + 2;
      const char *q = memchr(v, '"', len - (size_t)(v - labels));
      *ret_len = q ? (size_t)(q - v) : len - (size_t)(v - labels);
      return v;
    }
  }
  return NULL;
}

/* Whether a sample's labels have key=value (want_eq) or key!=value. */
static int label_is(const char *labels, size_t len, const char *key, const char *value,
                    int want_eq) {
  size_t vl = 0;
  const char *v = label_value(labels, len, key, &vl);
  int has = v && vl == strlen(value) && strncmp(v, value, vl) == 0;
  return has == want_eq;
}

/* Calls fn for each sample of `name` (exactly, labels optional): its labels and value. */
static void each(const char *text, const char *name,
                 void (*fn)(const char *labels, size_t len, double v, void *arg), void *arg) {
  size_t nl = strlen(name);
  for (const char *p = text; *p;) {
    const char *e = strchr(p, '\n');
    size_t ll = e ? (size_t)(e - p) : strlen(p);
    if (ll > nl && strncmp(p, name, nl) == 0 && (p[nl] == '{' || p[nl] == ' ')) {
      const char *labels = "", *vp = p + nl;
      size_t len = 0;
      if (p[nl] == '{') {
        const char *close = memchr(p + nl, '}', ll - nl);
        if (close) {
          labels = p + nl + 1;
          len = (size_t)(close - labels);
          vp = close + 1;
        }
      }
      fn(labels, len, vp[0] == ' ' && strncmp(vp + 1, "+Inf", 4) == 0 ? INFINITY
                                                                     : strtod(vp, NULL),
         arg);
    }
    p = e ? e + 1 : p + ll;
  }
}

struct sum {
  const char *key, *value;
  int want_eq;
  double total;
};

static void add(const char *labels, size_t len, double v, void *arg) {
  struct sum *s = arg;
  if (!s->key || label_is(labels, len, s->key, s->value, s->want_eq)) {
    s->total += v;
  }
}

/* The sum of `name`'s samples whose `key` is (want_eq) or is not `value` (key NULL: all). */
static double sum(const char *text, const char *name, const char *key, const char *value,
                  int want_eq) {
  struct sum s = {key, value, want_eq, 0};
  each(text, name, add, &s);
  return s.total;
}

/* Cumulative bucket counts of a histogram, summed over its label sets, by bound. */
#define MAX_LE 32
struct buckets {
  double le[MAX_LE], n[MAX_LE];
  int count;
};

static void bucket(const char *labels, size_t len, double v, void *arg) {
  struct buckets *b = arg;
  size_t ll = 0;
  const char *le = label_value(labels, len, "le", &ll);
  if (!le) {
    return;
  }
  double bound = strncmp(le, "+Inf", 4) == 0 ? INFINITY : strtod(le, NULL);
  for (int i = 0; i < b->count; i++) {
    if (b->le[i] == bound) {
      b->n[i] += v;
      return;
    }
  }
  if (b->count < MAX_LE) { /* bounds come in order */
    b->le[b->count] = bound;
    b->n[b->count++] = v;
  }
}

/* The q-quantile of what the buckets gained from a to b, interpolated within its bucket as
 * Prometheus's histogram_quantile does; NAN without observations. */
static double quantile(double q, const struct buckets *a, const struct buckets *b) {
  double total = b->count ? b->n[b->count - 1] - (a->count ? a->n[a->count - 1] : 0) : 0;
  if (total <= 0) {
    return NAN;
  }
  double rank = q * total, prev_n = 0, prev_le = 0;
  for (int i = 0; i < b->count; i++) {
    double n = b->n[i] - (i < a->count ? a->n[i] : 0);
    if (n >= rank) {
      if (isinf(b->le[i])) {
        return prev_le; /* past the last finite bound: that bound, as Prometheus does */
      }
      return prev_le + (b->le[i] - prev_le) * (n > prev_n ? (rank - prev_n) / (n - prev_n) : 1);
    }
    prev_n = n;
    prev_le = b->le[i];
  }
  return prev_le;
}

struct device_row {
  char name[64];
  double total, budget, used, free;
};

struct devices {
  struct device_row row[64];
  int n;
  int field; /* 0 total, 1 budget, 2 used, 3 free */
};

static void device(const char *labels, size_t len, double v, void *arg) {
  struct devices *d = arg;
  size_t kl = 0;
  const char *k = label_value(labels, len, "device", &kl);
  if (!k) {
    return;
  }
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)kl, k);
  int i = 0;
  while (i < d->n && strcmp(d->row[i].name, name) != 0) {
    i++;
  }
  if (i == d->n) {
    if (d->n == 64) {
      return;
    }
    memset(&d->row[i], 0, sizeof d->row[i]);
    snprintf(d->row[i].name, sizeof d->row[i].name, "%s", name);
    d->n++;
  }
  double *f[] = {&d->row[i].total, &d->row[i].budget, &d->row[i].used, &d->row[i].free};
  *f[d->field] = v;
}

static void frame(const struct global *g, const struct scrape *a, const struct scrape *b,
                  int clear) {
  double dt = b->t - a->t > 0 ? b->t - a->t : 1;
  double ok = (sum(b->text, "qdp_jobs_total", "code", "OK", 1) -
               sum(a->text, "qdp_jobs_total", "code", "OK", 1)) / dt;
  double bad = (sum(b->text, "qdp_jobs_total", "code", "OK", 0) -
                sum(a->text, "qdp_jobs_total", "code", "OK", 0)) / dt;
  double calls = (sum(b->text, "qdp_rpcs_total", NULL, NULL, 1) -
                  sum(a->text, "qdp_rpcs_total", NULL, NULL, 1)) / dt;
  struct buckets ba = {0}, bb = {0};
  each(a->text, "qdp_job_duration_seconds_bucket", bucket, &ba);
  each(b->text, "qdp_job_duration_seconds_bucket", bucket, &bb);
  double qs[3] = {quantile(0.5, &ba, &bb), quantile(0.9, &ba, &bb), quantile(0.99, &ba, &bb)};
  double states = sum(b->text, "qdp_states", NULL, NULL, 1);
  double used = sum(b->text, "qdp_store_used_bytes", NULL, NULL, 1);
  struct devices d = {.n = 0};
  static const char *const fields[] = {"qdp_device_memory_total_bytes",
                                       "qdp_device_memory_budget_bytes",
                                       "qdp_device_memory_used_bytes",
                                       "qdp_device_memory_free_bytes"};
  for (d.field = 0; d.field < 4; d.field++) {
    each(b->text, fields[d.field], device, &d);
  }
  int serving = sum(b->text, "qdp_up", NULL, NULL, 1) > 0;
  if (g->json) {
    struct jw w = {stdout, 0, {0}};
    jw_open(&w, NULL, '{');
    jw_d(&w, "interval_s", dt);
    jw_d(&w, "jobs_per_s", ok);
    jw_d(&w, "failed_jobs_per_s", bad);
    jw_d(&w, "calls_per_s", calls);
    jw_d(&w, "job_p50_s", qs[0]);
    jw_d(&w, "job_p90_s", qs[1]);
    jw_d(&w, "job_p99_s", qs[2]);
    jw_u(&w, "states", (uint64_t)states);
    jw_u(&w, "used_bytes", (uint64_t)used);
    jw_b(&w, "serving", serving);
    jw_open(&w, "devices", '[');
    for (int i = 0; i < d.n; i++) {
      jw_open(&w, NULL, '{');
      jw_s(&w, "device", d.row[i].name);
      jw_u(&w, "total_bytes", (uint64_t)d.row[i].total);
      jw_u(&w, "budget_bytes", (uint64_t)d.row[i].budget);
      jw_u(&w, "used_bytes", (uint64_t)d.row[i].used);
      jw_u(&w, "free_bytes", (uint64_t)d.row[i].free);
      jw_close(&w, '}');
    }
    jw_close(&w, ']');
    jw_close(&w, '}');
    return;
  }
  if (clear) {
    fputs("\033[H\033[2J", stdout);
  }
  char lat[3][32], sz[32];
  for (int i = 0; i < 3; i++) {
    if (isnan(qs[i])) {
      snprintf(lat[i], sizeof lat[i], "-");
    } else {
      snprintf(lat[i], sizeof lat[i], "%.3g ms", qs[i] * 1e3);
    }
  }
  fmt_size(g, sz, sizeof sz, (uint64_t)used);
  printf("qdpd %s   jobs %.1f/s, failed %.1f/s   calls %.1f/s   (over %.1f s)\n",
         serving ? "serving" : "DRAINING", ok, bad, calls, dt);
  printf("job latency p50 %s  p90 %s  p99 %s\n", lat[0], lat[1], lat[2]);
  printf("states %.0f holding %s%s\n\n", states, sz, g->raw_bytes ? " bytes" : "");
  static const char *const head[] = {"DEVICE", "USED", "BUDGET", "FREE", "TOTAL", "USED%"};
  static const int right[] = {0, 1, 1, 1, 1, 1};
  struct table t;
  table_init(&t, 6, head, right);
  for (int i = 0; i < d.n; i++) {
    char u[32], bu[32], fr[32], to[32], pc[16];
    fmt_size(g, u, sizeof u, (uint64_t)d.row[i].used);
    fmt_size(g, bu, sizeof bu, (uint64_t)d.row[i].budget);
    fmt_size(g, fr, sizeof fr, (uint64_t)d.row[i].free);
    fmt_size(g, to, sizeof to, (uint64_t)d.row[i].total);
    snprintf(pc, sizeof pc, "%.1f", d.row[i].budget > 0 ? 100 * d.row[i].used / d.row[i].budget
                                                         : 0.0);
    char *row[] = {d.row[i].name, u, bu, fr, to, pc};
    table_row(&t, row);
  }
  table_print(&t, stdout);
  fflush(stdout);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleeps `s` seconds, or until Ctrl-C; whether it slept it all. */
static int nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (!interrupted && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  return !interrupted;
}

int cmd_top(struct global *g, int argc, char **argv) {
  static const struct option opts[] = {
      {"metrics", required_argument, NULL, OPT_METRICS},
      {"interval", required_argument, NULL, OPT_INTERVAL},
      {"once", no_argument, NULL, OPT_ONCE},
      COMMON_LONG_OPTS,
      {NULL, 0, NULL, 0},
  };
  const char *url = "http://127.0.0.1:9464/metrics";
  double interval = 2;
  int once = 0, opt;
  optind = 0;
  while ((opt = next_opt(g, "top", top_help, argc, argv, "", opts, 0)) > 0) {
    char *end = NULL;
    switch (opt) {
    case OPT_METRICS:
      url = optarg;
      break;
    case OPT_INTERVAL:
      interval = strtod(optarg, &end);
      if (end == optarg || *end || !(interval >= 0.1 && interval <= 3600)) {
        return usage_error("top", "--interval: '%s' is not a number of seconds in [0.1, 3600]",
                           optarg);
      }
      break;
    case OPT_ONCE:
      once = 1;
      break;
    default:
      return usage_error("top", "unknown option");
    }
  }
  if (opt != OPT_END) {
    return opt == OPT_HELPED ? EXIT_OK : EXIT_USAGE;
  }
  if (optind < argc) {
    return usage_error("top", "unexpected argument '%s'", argv[optind]);
  }
  if (g->json && !once) {
    return usage_error("top", "--json needs --once (one frame, one object)");
  }
  struct scrape prev = {now_s(), NULL}, cur = {0, NULL};
  int rc = http_get(url, &prev.text);
  while (rc == EXIT_OK && nap(interval)) {
    cur.t = now_s();
    if ((rc = http_get(url, &cur.text)) != EXIT_OK) {
      break;
    }
    frame(g, &prev, &cur, !once);
    free(prev.text);
    prev = cur;
    cur.text = NULL;
    if (once) {
      break;
    }
  }
  free(prev.text);
  free(cur.text);
  return interrupted ? (once ? EXIT_INTERRUPTED : EXIT_OK) : rc;
}
