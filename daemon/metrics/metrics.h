/* metrics.h — qdpd's Prometheus metrics (docs/metrics.md): counters and histograms that any
 * thread updates with relaxed atomics (no lock; nothing allocated after create), rendered with
 * what a scrape samples (states, regions, memory, ranks) in the text exposition format 0.0.4.
 *
 * Every label takes its values from a fixed list (the methods named at create, the encodings of
 * common/qdp_encodings.h's table, gRPC's 17 status codes, the input sources of qdp_source.h and
 * the output sinks below), so the number of series is bounded: nothing is labelled by handle,
 * client or request. Knows nothing of gRPC, CUDA or the store: callers pass indices and numbers.
 */
#ifndef QDP_METRICS_H
#define QDP_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "qdp_defs.h"
#include "qdp_source.h"

/* Where amplitudes went. */
enum metrics_sink {
  METRICS_OUT_STATE,      /* a resident state */
  METRICS_OUT_CUDA_IPC,   /* a client's GPU memory (encode out=) */
  METRICS_OUT_FETCH,      /* streamed to the client */
  METRICS_OUT_FETCH_INTO, /* written into a client's region */
  METRICS_OUT_EXPORT,     /* a file */
  METRICS_OUT_COUNT
};

/* The phases of a successful encode job. */
enum metrics_phase {
  METRICS_PHASE_INGEST,     /* the input resolved, mapped or read in */
  METRICS_PHASE_PLAN,       /* planned, checked and admitted */
  METRICS_PHASE_ENCODE,     /* the devices writing amplitudes (and amplitude's norm reduction) */
  METRICS_PHASE_COLLECTIVE, /* the part of encode spent between shards (sharded states only) */
  METRICS_PHASE_COMMIT,     /* the new state filed in the store */
  METRICS_PHASE_COUNT
};

#define METRICS_CODES 17 /* gRPC status codes 0 (OK) .. 16 (UNAUTHENTICATED) */

struct metrics;

/* The label values of methods, by index (kept by reference: static strings). */
struct metrics_names {
  const char *const *methods;
  size_t nmethods;
};

qdp_status metrics_create(const struct metrics_names *names, struct metrics **ret,
                          struct qdp_error *reterr);
void metrics_destroy(struct metrics *m); /* NULL-safe */

/* A call answered: its method, gRPC status code (others count as UNKNOWN) and seconds from its
 * arrival to its answer. An index out of range is not counted. */
void metrics_rpc(struct metrics *m, size_t method, unsigned code, double seconds);
/* An encode job ended: its encoding, code, seconds in all and in its encode phase (< 0: it did
 * not get there). An encoding the table does not have is not counted. */
void metrics_job(struct metrics *m, qdp_encoding encoding, unsigned code, double seconds,
                 double encode_seconds);
/* A successful job spent `seconds` in phase ph. */
void metrics_phase(struct metrics *m, enum metrics_phase ph, double seconds);
/* An encode job read `bytes` from source src (QDP_SOURCE_NONE, which holds none, is not counted).
 */
void metrics_input(struct metrics *m, enum qdp_source src, uint64_t bytes);
void metrics_output(struct metrics *m, enum metrics_sink sink, uint64_t bytes);

/* What a scrape samples, as of now. Strings are label values (escaped when rendered). */
struct metrics_device {
  const char *name; /* "cuda:0"; "r1/cuda:0" in a world */
  int rank;
  uint64_t total_bytes, budget_bytes, used_bytes, free_bytes;
};
struct metrics_sample {
  const char *version, *backend, *transport; /* build info; transport: "local" or "mpi" */
  bool serving;                              /* not draining */
  double uptime_seconds;
  uint64_t states, leases, regions, region_bytes, store_budget_bytes, store_used_bytes;
  uint64_t uploads, upload_bytes, upload_budget_bytes;
  const struct metrics_device *devices;
  size_t ndevices;
  const bool *rank_lost; /* nranks entries */
  size_t nranks;
};

/* Text that grows as it is written; a failed allocation sets `failed` and stops it. */
struct metrics_text {
  char *buf;
  size_t len, cap;
  bool failed;
};
void metrics_text_printf(struct metrics_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void metrics_text_free(struct metrics_text *t);

/* Appends every metric of m and s to t, each with its HELP and TYPE. RESOURCE_EXHAUSTED when
 * memory ran out (t holds a prefix). */
qdp_status metrics_render(const struct metrics *m, const struct metrics_sample *s,
                          struct metrics_text *t, struct qdp_error *reterr);

#endif /* QDP_METRICS_H */
