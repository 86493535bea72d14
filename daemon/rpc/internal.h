/* internal.h — what server.c, handlers.c and upload.c share: the server, a call, events, jobs.
 * The jobs themselves run in job/: handlers only unpack, call job_* and pack.
 *
 * A call's life: armed (arm) -> its request arrives on the completion-queue thread, which unpacks
 * it, checks identity and auth (on_new) and either answers it there (Health, and small jobs that
 * touch no large memory: see rpc_runs_inline) or hands it to a worker job or a stream step -> the
 * job answers with rpc_finish, whose batch completion (on_done) drops the last reference.
 * References: one for the call's logic, one per batch in flight; the logic's reference passes to
 * the final batch. Events (struct rpc_ev) are tags of gRPC batches, run on the completion-queue
 * thread. Every hop between threads costs tens of microseconds on a small VM, a large share of a
 * small job's round trip, so events are not relayed through the loop, which keeps only the
 * lifecycle: signals, timers, shutdown.
 */
#ifndef QDP_RPC_INTERNAL_H
#define QDP_RPC_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <uv.h>

#include "config.h"
#include "error.h"
#include "io/map.h"
#include "job/job.h"
#include "listener.h"
#include "health.pb-c.h"
#include "metrics.h"
#include "qdp.pb-c.h"
#include "server.h"

struct rpc_server;
struct rpc_call;

/* Handed-over descriptors (state/tickets.h): a ticket waits this long to be named, and a caller
 * may have this many waiting (the table this many in all). */
#define RPC_TICKET_TTL_MS 60000
#define RPC_TICKETS_PER_CALLER 64
#define RPC_TICKETS_MAX 1024

/* A TCP principal and its bearer token. */
struct rpc_token {
  char principal[49];
  char *token;
};

struct rpc_ev {
  struct rpc_ev *next;
  void (*fn)(struct rpc_server *s, struct rpc_ev *e); /* completion-queue thread */
  void (*prepare)(struct rpc_ev *e);                  /* the same, before fn; may be NULL */
  struct rpc_call *call;
  int ok;
};

struct rpc_job {
  struct rpc_job *next;
  void (*fn)(struct rpc_job *j); /* a worker thread */
  struct rpc_call *call;
  struct rpc_server *srv;
};

enum rpc_kind { RPC_UNARY, RPC_SERVER_STREAM, RPC_CLIENT_STREAM, RPC_BIDI_STREAM };

enum rpc_method_id {
  RPC_M_ENCODE,
  RPC_M_PLAN,
  RPC_M_UPLOAD,
  RPC_M_DESCRIBE,
  RPC_M_LIST,
  RPC_M_RELEASE,
  RPC_M_FETCH,
  RPC_M_EXPORT,
  RPC_M_STATUS,
  RPC_M_HEALTH,
  RPC_M_REGISTER_REGION,
  RPC_M_UNREGISTER_REGION,
  RPC_M_CLOSE_VIEW,
  RPC_M_GATHER,
  RPC_M_FETCH_INTO,
  RPC_M_GRPC_HEALTH_CHECK, /* grpc.health.v1.Health/Check, the standard probe */
  RPC_M_GRPC_HEALTH_WATCH, /* grpc.health.v1.Health/Watch: the status, then each change */
  RPC_M_REFLECTION,        /* grpc.reflection.v1.ServerReflection/ServerReflectionInfo */
  RPC_M_REFLECTION_ALPHA,  /* the same under grpc.reflection.v1alpha */
  RPC_M_COUNT
};

struct rpc_method {
  const char *path;
  const char *name;
  enum rpc_kind kind;
  const ProtobufCMessageDescriptor *req;
  void (*run)(struct rpc_job *j); /* the worker job that serves it */
};

extern const struct rpc_method rpc_methods[RPC_M_COUNT];

struct rpc_upload {
  Qdp__EncodeRequest *req; /* from the first message */
  uint8_t *buf;
  uint64_t len, cap;
  uint64_t limit;    /* bytes it may send in all */
  bool exact;        /* it must send exactly `limit` */
  bool last;         /* the message marked last came */
  uint64_t reserved; /* bytes of the budgets this call holds (== cap) */
  /* In the server's list of uploads in flight (under uploads_mu). */
  bool tracked, idle;
  struct rpc_call *next, **prev_next;
  atomic_uint_fast64_t last_ms;  /* when its last message came (monotonic) */
  atomic_uint_fast64_t short_ms; /* its stream ended short then, verdict pending; 0: not */
  struct rpc_call *verdict_next; /* rpc_upload_sweep's list of verdicts to give */
};

struct rpc_fetch {
  struct job_fetch read; /* the state, pinned while read.state is set, and where it is */
  uint64_t chunk;        /* amplitudes per message */
  bool send_failed;
};

struct rpc_call {
  struct rpc_server *srv;
  int method; /* enum rpc_method_id, or -1 for an unregistered method */
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_call_details details;
  grpc_byte_buffer *payload; /* the received message until unpacked */
  ProtobufCMessage *req;     /* the request */
  ProtobufCMessage *chunk;   /* EncodeUpload: the message just received */
  qdp_status unpack_rc;
  struct qdp_error err; /* unpack failure */
  atomic_int refs;
  atomic_int cancel_seen; /* RECV_CLOSE_ON_SERVER reported a cancelled call */
  int cancelled;          /* written by gRPC at RECV_CLOSE_ON_SERVER */
  bool md_sent, close_armed;
  struct rpc_ev ev_new, ev_recv, ev_send, ev_close, ev_done;
  struct rpc_job job;
  char peer[128];
  /* Who it is: the kernel's peer credentials on the Unix socket, the token's principal on TCP.
   * owner is the identity key its states, regions, tickets and quotas are filed under; client
   * is how logs name it (owner, pid, and the "qdp-client" metadata as a mere label). */
  bool tcp;
  struct rpc_peer ucred; /* Unix callers */
  char owner[64];
  char client[160];
  /* An Encode or EncodeUpload that got as far as its job (counted in Status): the job's number
   * in this daemon's life, from 1, as its log lines give it (QDP_JOB); 0 for other calls. */
  uint64_t job_no;
  bool live;        /* counted in live_calls: it arrived and is not freed yet */
  uint64_t start_ms;
  uint64_t start_ns; /* uv_hrtime at arrival: the metrics' latencies */

  /* The answer, kept until its batch completes. */
  grpc_byte_buffer *reply;
  grpc_byte_buffer *sending; /* Fetch: the chunk in flight */
  grpc_slice status_details;
  bool have_details;
  grpc_metadata trailing;
  bool have_trailing;

  struct rpc_upload up;
  struct rpc_fetch fetch;

  /* grpc.health.v1 Watch (watch.c), under the server's watch_mu. */
  struct rpc_call *watch_next;
  int watch_sent; /* the status last sent; -1 none */
  bool watch_sending;
};

struct rpc_server {
  uv_loop_t *loop;
  struct job_pipeline *jobs; /* the server's own: every job runs through it */
  grpc_server *server;
  grpc_completion_queue *cq;
  void *registered[RPC_M_COUNT];
  bool grpc_inited, started, sync_inited, async_inited, timers_inited, cq_thread_started;
  bool listener_started, handles_closing;
  bool cq_drained;

  uv_thread_t cq_thread;
  uv_async_t async;
  uv_mutex_t inbox_mu;
  struct rpc_ev *inbox_head, *inbox_tail;
  struct rpc_ev ev_shutdown, ev_cq_done;

  uv_mutex_t pool_mu;
  uv_cond_t pool_cv;
  struct rpc_job *pool_head, *pool_tail;
  bool pool_stop;
  uv_thread_t *workers;
  size_t nworkers, nworkers_cfg;

  uv_timer_t expire_timer, drain_timer;
  struct rpc_job expire_job;
  atomic_int expire_busy;
  uint64_t expire_interval_ms, shutdown_timeout_ms;

  atomic_bool shutting_down; /* set on the loop, read by the completion-queue thread */
  void (*done)(void *arg);
  void (*overdue)(void *arg);
  void *done_arg;
  bool drain_cancelled;
  int open_handles;

  struct rpc_listener *listener; /* the Unix socket; NULL without one */
  struct fd_tickets *tickets;    /* descriptors Unix callers handed over */

  /* Fixed settings. */
  struct rpc_token *tokens; /* TCP bearer tokens and their principals */
  size_t ntokens;
  struct io_folder input_folder, export_folder;
  struct io_file_id own[RPC_OWN_FILES_MAX]; /* the daemon's own files: never read or written */
  size_t nown;
  uid_t euid;
  bool tcp_node_paths;
  uint64_t store_budget, max_message_bytes;
  int64_t start_unix_ms;
  uint64_t start_mono_ms;

  /* Settings SIGHUP may change (read by workers). */
  atomic_uint_fast64_t max_upload_bytes, fetch_chunk, upload_idle_ms, upload_budget;

  atomic_uint_fast64_t jobs_total, jobs_failed;
  /* Counted always (relaxed atomics); served over HTTP only with metrics_listen. */
  struct metrics *metrics;
  struct metrics_http *metrics_http;
  int metrics_port;
  const char *method_names[RPC_M_COUNT];
  uv_mutex_t watch_mu;      /* watchers, and each one's watch_* */
  struct rpc_call *watchers; /* Health/Watch streams open */
  uv_mutex_t uploads_mu;    /* uploads, and each one's `reserved` */
  struct rpc_call *uploads; /* receiving, watched for idleness */
  uv_timer_t upload_timer;
  atomic_int live_calls; /* calls that arrived and are not freed yet */
  atomic_int shutdown_notified, cq_shut;
};

int64_t rpc_now_unix_ms(void);
/* Seconds since the call arrived. */
double rpc_call_seconds(const struct rpc_call *c);
const char *rpc_method_name(const struct rpc_call *c);

void rpc_submit(struct rpc_server *s, struct rpc_job *j);
void rpc_call_ref(struct rpc_call *c);
void rpc_call_unref(struct rpc_call *c);

/* Answers the call: the reply (owned; may be NULL) when err is NULL or QDP_OK, else err's status
 * with its detail. Consumes the caller's reference. Any thread. */
void rpc_finish(struct rpc_call *c, grpc_byte_buffer *reply, const struct qdp_error *err);
void rpc_finish_status(struct rpc_call *c, qdp_status rc, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
bool rpc_start(struct rpc_call *c, grpc_op *ops, size_t n, struct rpc_ev *e);
/* Sends one message of a stream (owned; with the initial metadata the first time), fn(ev_send)
 * when it is written; false, bb freed, when it could not start. One send of c at a time. */
bool rpc_send_message(struct rpc_call *c, grpc_byte_buffer *bb,
                      void (*fn)(struct rpc_server *s, struct rpc_ev *e));
/* Arms RECV_CLOSE_ON_SERVER now, so cancel_seen tells at once when the client leaves (a stream's
 * reader, a long job deciding whether to commit). Never concurrently with another batch of c. */
void rpc_watch_close(struct rpc_call *c);

/* Worker jobs, one per method (handlers.c). */
void rpc_h_encode(struct rpc_job *j);
void rpc_h_plan(struct rpc_job *j);
void rpc_h_upload_encode(struct rpc_job *j);
void rpc_h_describe(struct rpc_job *j);
void rpc_h_list(struct rpc_job *j);
void rpc_h_release(struct rpc_job *j);
void rpc_h_fetch(struct rpc_job *j);
void rpc_h_export(struct rpc_job *j);
void rpc_h_status(struct rpc_job *j);
void rpc_h_register_region(struct rpc_job *j);
void rpc_h_unregister_region(struct rpc_job *j);
void rpc_h_close_view(struct rpc_job *j);
void rpc_h_gather(struct rpc_job *j);
void rpc_h_fetch_into(struct rpc_job *j);

/* grpc.health.v1 (watch.c). The serving status of service (Check, Watch); a Watch that arrived
 * (completion-queue thread); a look at every watcher for a change or an end (any thread: the
 * loop every second, and when a drain starts). */
int rpc_serving_status(struct rpc_server *s, const char *service);
void rpc_watch_begin(struct rpc_call *c);
void rpc_watch_sweep(struct rpc_server *s);

/* Server reflection (reflection.c): a stream that arrived; completion-queue thread. */
void rpc_reflection_begin(struct rpc_call *c);

/* EncodeUpload's receiving side (upload.c): completion-queue thread. */
void rpc_upload_begin(struct rpc_call *c);
void rpc_upload_free(struct rpc_call *c);    /* any thread; idempotent */
void rpc_upload_sweep(struct rpc_server *s); /* loop thread: cancels idle uploads */
void rpc_upload_closed(struct rpc_call *c);  /* its client left: any verdict pending is CANCELLED */

#endif /* QDP_RPC_INTERNAL_H */
