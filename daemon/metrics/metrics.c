/* metrics.c — the counters, the histograms and their text exposition (metrics.h). */
#include "metrics.h"

#include "qdp_encodings.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seconds: from a small job's round trip (~100 us) to a large state's encode (a minute). */
static const double bucket_le[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                   0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
#define NBUCKETS (sizeof bucket_le / sizeof bucket_le[0])

static const char *const code_names[METRICS_CODES] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};
static const char *const sink_names[METRICS_OUT_COUNT] = {"state", "cuda_ipc", "fetch",
                                                          "fetch_into", "export"};
static const char *const phase_names[METRICS_PHASE_COUNT] = {"ingest", "plan", "encode",
                                                             "collective", "commit"};

/* Counts per bucket (not cumulative: one increment per observation), the last one +Inf, and the
 * sum in nanoseconds (exact, one atomic). */
struct histogram {
  atomic_uint_fast64_t n[NBUCKETS + 1];
  atomic_uint_fast64_t sum_ns;
};

struct metrics {
  struct metrics_names names;
  atomic_uint_fast64_t *rpcs;    /* [method][code] */
  struct histogram *rpc_seconds; /* [method] */
  /* By encoding number (row 0, no encoding's, stays empty): */
  atomic_uint_fast64_t jobs[QDP_ENCODING_COUNT * METRICS_CODES]; /* [encoding][code] */
  struct histogram job_seconds[QDP_ENCODING_COUNT], encode_seconds[QDP_ENCODING_COUNT];
  const char *encodings[QDP_ENCODING_COUNT]; /* their label values: the table's names */
  struct histogram phases[METRICS_PHASE_COUNT];
  atomic_uint_fast64_t in[QDP_SOURCE_COUNT], out[METRICS_OUT_COUNT];
};

qdp_status metrics_create(const struct metrics_names *names, struct metrics **ret,
                          struct qdp_error *reterr) {
  struct metrics *m = calloc(1, sizeof *m);
  if (m) {
    m->names = *names;
    m->rpcs = calloc(names->nmethods * METRICS_CODES, sizeof *m->rpcs);
    m->rpc_seconds = calloc(names->nmethods, sizeof *m->rpc_seconds);
    for (unsigned e = 1; e < QDP_ENCODING_COUNT; e++) {
      m->encodings[e] = qdp_encoding_name((qdp_encoding)e);
    }
  }
  if (!m || !m->rpcs || !m->rpc_seconds) {
    metrics_destroy(m);
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for the metrics of %zu methods", names->nmethods);
  }
  *ret = m;
  return QDP_OK;
}

void metrics_destroy(struct metrics *m) {
  if (!m) {
    return;
  }
  free(m->rpcs);
  free(m->rpc_seconds);
  free(m);
}

static void observe(struct histogram *h, double seconds) {
  if (!(seconds >= 0)) { /* NaN too */
    seconds = 0;
  }
  size_t b = 0;
  while (b < NBUCKETS && seconds > bucket_le[b]) {
    b++;
  }
  atomic_fetch_add_explicit(&h->n[b], 1, memory_order_relaxed);
  double ns = seconds * 1e9;
  atomic_fetch_add_explicit(&h->sum_ns, ns < 1.8e19 ? (uint64_t)ns : UINT64_C(1) << 63,
                            memory_order_relaxed);
}

static unsigned code_of(unsigned code) {
  return code < METRICS_CODES ? code : 2; /* UNKNOWN */
}

void metrics_rpc(struct metrics *m, size_t method, unsigned code, double seconds) {
  if (!m || method >= m->names.nmethods) {
    return;
  }
  atomic_fetch_add_explicit(&m->rpcs[method * METRICS_CODES + code_of(code)], 1,
                            memory_order_relaxed);
  observe(&m->rpc_seconds[method], seconds);
}

void metrics_job(struct metrics *m, qdp_encoding encoding, unsigned code, double seconds,
                 double encode_seconds) {
  if (!m || (unsigned)encoding >= QDP_ENCODING_COUNT || !m->encodings[encoding]) {
    return;
  }
  atomic_fetch_add_explicit(&m->jobs[encoding * METRICS_CODES + code_of(code)], 1,
                            memory_order_relaxed);
  observe(&m->job_seconds[encoding], seconds);
  if (encode_seconds >= 0) {
    observe(&m->encode_seconds[encoding], encode_seconds);
  }
}

void metrics_phase(struct metrics *m, enum metrics_phase ph, double seconds) {
  if (m && (unsigned)ph < METRICS_PHASE_COUNT) {
    observe(&m->phases[ph], seconds);
  }
}

void metrics_input(struct metrics *m, enum qdp_source src, uint64_t bytes) {
  if (m && src != QDP_SOURCE_NONE && (unsigned)src < QDP_SOURCE_COUNT) {
    atomic_fetch_add_explicit(&m->in[src], bytes, memory_order_relaxed);
  }
}

void metrics_output(struct metrics *m, enum metrics_sink sink, uint64_t bytes) {
  if (m && (unsigned)sink < METRICS_OUT_COUNT) {
    atomic_fetch_add_explicit(&m->out[sink], bytes, memory_order_relaxed);
  }
}

/* ---- text ---- */

void metrics_text_printf(struct metrics_text *t, const char *fmt, ...) {
  if (t->failed) {
    return;
  }
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if (t->buf && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap : 4096;
    while (cap - t->len <= (size_t)n) {
      cap *= 2;
    }
    char *nb = realloc(t->buf, cap);
    if (!nb) {
      t->failed = true;
      return;
    }
    t->buf = nb;
    t->cap = cap;
  }
}

void metrics_text_free(struct metrics_text *t) {
  free(t->buf);
  *t = (struct metrics_text){0};
}

/* A label value escaped as the format asks (backslash, double quote, newline). */
static void label(struct metrics_text *t, const char *v) {
  for (const char *p = v ? v : ""; *p; p++) {
    if (*p == '\\' || *p == '"') {
      metrics_text_printf(t, "\\%c", *p);
    } else if (*p == '\n') {
      metrics_text_printf(t, "\\n");
    } else {
      metrics_text_printf(t, "%c", *p);
    }
  }
}

static void head(struct metrics_text *t, const char *name, const char *type, const char *help) {
  metrics_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void histogram(struct metrics_text *t, const char *name, const char *key, const char *value,
                      const struct histogram *h) {
  uint64_t cum = 0;
  for (size_t b = 0; b <= NBUCKETS; b++) {
    cum += atomic_load_explicit(&h->n[b], memory_order_relaxed);
    metrics_text_printf(t, "%s_bucket{%s=\"", name, key);
    label(t, value);
    if (b < NBUCKETS) {
      metrics_text_printf(t, "\",le=\"%g\"} %" PRIu64 "\n", bucket_le[b], cum);
    } else {
      metrics_text_printf(t, "\",le=\"+Inf\"} %" PRIu64 "\n", cum);
    }
  }
  double sum = (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9;
  metrics_text_printf(t, "%s_sum{%s=\"", name, key);
  label(t, value);
  metrics_text_printf(t, "\"} %.9g\n%s_count{%s=\"", sum, name, key);
  label(t, value);
  metrics_text_printf(t, "\"} %" PRIu64 "\n", cum);
}

/* A histogram family: one histogram per key that has a name (keys without one are skipped). */
static void histograms(struct metrics_text *t, const char *name, const char *help, const char *key,
                       const char *const *keys, size_t nkeys, const struct histogram *h) {
  head(t, name, "histogram", help);
  for (size_t k = 0; k < nkeys; k++) {
    if (keys[k]) {
      histogram(t, name, key, keys[k], &h[k]);
    }
  }
}

static void gauge(struct metrics_text *t, const char *name, const char *help, uint64_t v) {
  head(t, name, "gauge", help);
  metrics_text_printf(t, "%s %" PRIu64 "\n", name, v);
}

/* A counter by (key, code): every named key's OK series (so that a rate starts at zero) and the
 * other codes once they happened. */
static void by_code(struct metrics_text *t, const char *name, const char *key,
                    const char *const *keys, size_t nkeys, const atomic_uint_fast64_t *v) {
  for (size_t k = 0; k < nkeys; k++) {
    for (unsigned c = 0; keys[k] && c < METRICS_CODES; c++) {
      uint64_t n = atomic_load_explicit(&v[k * METRICS_CODES + c], memory_order_relaxed);
      if (n || c == 0) {
        metrics_text_printf(t, "%s{%s=\"", name, key);
        label(t, keys[k]);
        metrics_text_printf(t, "\",code=\"%s\"} %" PRIu64 "\n", code_names[c], n);
      }
    }
  }
}

static void device_gauge(struct metrics_text *t, const struct metrics_sample *s, const char *name,
                         const char *help, size_t field) {
  head(t, name, "gauge", help);
  for (size_t i = 0; i < s->ndevices; i++) {
    const struct metrics_device *d = &s->devices[i];
    const uint64_t v[] = {d->total_bytes, d->budget_bytes, d->used_bytes, d->free_bytes};
    metrics_text_printf(t, "%s{device=\"", name);
    label(t, d->name);
    metrics_text_printf(t, "\",rank=\"%d\"} %" PRIu64 "\n", d->rank, v[field]);
  }
}

qdp_status metrics_render(const struct metrics *m, const struct metrics_sample *s,
                          struct metrics_text *t, struct qdp_error *reterr) {
  const struct metrics_names *nm = &m->names;
  head(t, "qdp_build_info", "gauge", "Always 1; the build's version and backend as labels.");
  metrics_text_printf(t, "qdp_build_info{version=\"");
  label(t, s->version);
  metrics_text_printf(t, "\",backend=\"");
  label(t, s->backend);
  metrics_text_printf(t, "\",transport=\"");
  label(t, s->transport);
  metrics_text_printf(t, "\"} 1\n");
  head(t, "qdp_up", "gauge", "1 while the daemon serves, 0 while it drains (SIGTERM).");
  metrics_text_printf(t, "qdp_up %d\n", s->serving ? 1 : 0);
  head(t, "qdp_uptime_seconds", "gauge", "Seconds since the daemon started.");
  metrics_text_printf(t, "qdp_uptime_seconds %.3f\n", s->uptime_seconds);

  head(t, "qdp_rpcs_total", "counter", "Calls answered, by method and gRPC status code.");
  by_code(t, "qdp_rpcs_total", "method", nm->methods, nm->nmethods, m->rpcs);
  histograms(t, "qdp_rpc_duration_seconds",
             "Seconds from a call's arrival to its answer, by method.", "method", nm->methods,
             nm->nmethods, m->rpc_seconds);
  head(t, "qdp_jobs_total", "counter",
       "Encode jobs (Encode, EncodeUpload) ended, by encoding and gRPC status code.");
  by_code(t, "qdp_jobs_total", "encoding", m->encodings, QDP_ENCODING_COUNT, m->jobs);
  histograms(t, "qdp_job_duration_seconds",
             "Seconds an encode job took from its call's arrival to its end, by encoding.",
             "encoding", m->encodings, QDP_ENCODING_COUNT, m->job_seconds);
  histograms(t, "qdp_job_encode_seconds",
             "Seconds of a job's encode phase (the devices writing amplitudes), by encoding.",
             "encoding", m->encodings, QDP_ENCODING_COUNT, m->encode_seconds);
  histograms(t, "qdp_job_phase_seconds",
             "Seconds successful encode jobs spent in each phase: ingest, plan, encode, commit.",
             "phase", phase_names, METRICS_PHASE_COUNT, m->phases);
  head(t, "qdp_input_bytes_total", "counter", "Input bytes encode jobs read, by source.");
  for (unsigned k = QDP_SOURCE_NONE + 1; k < QDP_SOURCE_COUNT; k++) {
    metrics_text_printf(t, "qdp_input_bytes_total{source=\"%s\"} %" PRIu64 "\n",
                        qdp_source_name((enum qdp_source)k),
                        atomic_load_explicit(&m->in[k], memory_order_relaxed));
  }
  head(t, "qdp_output_bytes_total", "counter", "Amplitude bytes written, by sink.");
  for (unsigned k = 0; k < METRICS_OUT_COUNT; k++) {
    metrics_text_printf(t, "qdp_output_bytes_total{sink=\"%s\"} %" PRIu64 "\n", sink_names[k],
                        atomic_load_explicit(&m->out[k], memory_order_relaxed));
  }

  gauge(t, "qdp_states", "States resident now.", s->states);
  gauge(t, "qdp_leases", "Zero-copy view leases open now.", s->leases);
  gauge(t, "qdp_regions", "Shared-memory regions registered now.", s->regions);
  gauge(t, "qdp_region_bytes", "Bytes of the regions registered now.", s->region_bytes);
  gauge(t, "qdp_store_budget_bytes", "Bytes all states together may hold.", s->store_budget_bytes);
  gauge(t, "qdp_store_used_bytes", "Bytes the resident states hold.", s->store_used_bytes);
  gauge(t, "qdp_uploads", "Uploads (EncodeUpload) being received now.", s->uploads);
  gauge(t, "qdp_upload_bytes", "Host memory the uploads in flight hold.", s->upload_bytes);
  gauge(t, "qdp_upload_budget_bytes", "Host memory all uploads in flight may hold.",
        s->upload_budget_bytes);

  device_gauge(t, s, "qdp_device_memory_total_bytes", "A device's memory.", 0);
  device_gauge(t, s, "qdp_device_memory_budget_bytes", "What qdp may hold on a device.", 1);
  device_gauge(t, s, "qdp_device_memory_used_bytes",
               "What qdp's shards and reservations hold on a device now.", 2);
  device_gauge(t, s, "qdp_device_memory_free_bytes", "A device's free memory as it reports it.", 3);
  head(t, "qdp_rank_up", "gauge", "1 for each rank of the world that is live, 0 once lost.");
  for (size_t r = 0; r < s->nranks; r++) {
    metrics_text_printf(t, "qdp_rank_up{rank=\"%zu\"} %d\n", r, s->rank_lost[r] ? 0 : 1);
  }
  if (t->failed) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for the metrics text past %zu bytes", t->len);
  }
  return QDP_OK;
}
