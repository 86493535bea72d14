/* call.h — one call's life: armed (rpc_call_arm) -> its request arrives on the completion-queue
 * thread, which unpacks it and hands it to the server (rpc_calls.arrived) -> whoever serves it
 * answers with rpc_finish, whose batch completion drops the last reference and frees it.
 *
 * Owns struct rpc_call, its references and its batches; the methods' table (paths, names, kinds
 * and request types); what calls share (struct rpc_calls: the queue, the counts of live calls and
 * jobs). A call's references: one for its logic, one per batch in flight; the logic's passes to
 * the final batch. Events (struct rpc_ev) are the tags of batches, run on the completion-queue
 * thread. A call carries the state of the module that serves its method (up: upload.h, fetch:
 * handlers.h, watch_*: health.h), which that module sets up and, through `closed` and `release`,
 * hears about. rpc_finish and the batch functions from any thread, never two batches of one call
 * at once.
 */
#ifndef QDP_RPC_CALL_H
#define QDP_RPC_CALL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "error.h"
#include "job/job.h"
#include "listener.h"
#include "pool.h"
#include "qdp.pb-c.h"

struct metrics;
struct rpc_call;
struct rpc_server;

struct rpc_ev {
  struct rpc_ev *next;
  void (*fn)(struct rpc_server *s, struct rpc_ev *e); /* completion-queue thread */
  void (*prepare)(struct rpc_ev *e);                  /* the same, before fn; may be NULL */
  struct rpc_call *call;
  int ok;
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
  RPC_M_KERNEL,
  RPC_M_MEASURE,
  RPC_M_OPEN_SESSION,
  RPC_M_HEARTBEAT,
  RPC_M_CLOSE_SESSION,
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
  const ProtobufCMessageDescriptor *req; /* NULL: a stream whose messages its module reads */
};

extern const struct rpc_method rpc_methods[RPC_M_COUNT];

/* What every call of a server shares. The server fills the first fields before arming. */
struct rpc_calls {
  grpc_server *server;
  grpc_completion_queue *cq;
  void *registered[RPC_M_COUNT];
  struct rpc_server *srv; /* what its calls are calls of */
  /* A call that arrived (completion-queue thread), its request unpacked or unpack_rc set. */
  void (*arrived)(struct rpc_server *s, struct rpc_ev *e);
  struct metrics *metrics;
  atomic_int live;              /* calls that arrived and are not freed yet */
  atomic_int shutdown_notified; /* gRPC took no new calls: the queue ends with the last call */
  atomic_int cq_shut;
  /* Encode jobs (Encode, EncodeUpload) that got as far as their job, and those that failed. */
  atomic_uint_fast64_t jobs_total, jobs_failed;
};

/* EncodeUpload's receiving side (upload.c). */
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
  atomic_uint_fast64_t last_ns;  /* clock_mono_ns when its last message came */
  atomic_uint_fast64_t short_ns; /* its stream ended short then, verdict pending; 0: not */
  struct rpc_call *verdict_next; /* rpc_upload_sweep's list of verdicts to give */
};

/* Fetch's stream (handlers.c). */
struct rpc_fetch {
  struct job_fetch read; /* the state, pinned while read.state is set, and where it is */
  uint64_t chunk;        /* amplitudes per message */
  bool send_failed;
};

struct rpc_call {
  struct rpc_calls *calls;
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
  /* Its method's module hears through these (NULL: nothing to hear): the client left (any
   * thread), and the call is about to be freed (any thread; what the module holds goes back). */
  void (*closed)(struct rpc_call *c);
  void (*release)(struct rpc_call *c);
  char peer[128];
  /* Who it is (identity.h): the kernel's peer credentials on the Unix socket, the token's
   * principal on TCP. owner is the identity key its states, regions, tickets and quotas are filed
   * under; client is how logs name it (owner, pid, and the "qdp-client" metadata as a mere
   * label); operator: the daemon's own user or root on the Unix socket. */
  bool tcp, operator;
  struct rpc_peer ucred; /* Unix callers */
  char owner[64];
  char client[160];
  /* An Encode or EncodeUpload that got as far as its job (counted in Status): the job's number
   * in this daemon's life, from 1, as its log lines give it (QDP_JOB); 0 for other calls. */
  uint64_t job_no;
  bool live;         /* counted in calls->live: it arrived and is not freed yet */
  uint64_t start_ns; /* clock_mono_ns at arrival: its duration in the log and the metrics */

  /* The answer, kept until its batch completes. */
  grpc_byte_buffer *reply;
  grpc_byte_buffer *sending; /* a stream's message in flight */
  grpc_slice status_details;
  bool have_details;
  grpc_metadata trailing;
  bool have_trailing;

  struct rpc_upload up;
  struct rpc_fetch fetch;

  /* grpc.health.v1 Watch (health.c), under the server's watch_mu. */
  struct rpc_call *watch_next;
  int watch_sent; /* the status last sent; -1 none */
  bool watch_sending;
};

/* Arms one request for method `mid` (-1: any unregistered method); its arrival goes to
 * calls->arrived. Any thread (the loop at start, the completion-queue thread as calls arrive). */
void rpc_call_arm(struct rpc_calls *calls, int mid);
/* Shuts the completion queue down once (the server stopped taking calls and none is live). */
void rpc_calls_shutdown_queue(struct rpc_calls *calls);

void rpc_call_ref(struct rpc_call *c);
/* The last reference frees the call. Any thread. */
void rpc_call_unref(struct rpc_call *c);

/* Seconds since the call arrived. */
double rpc_call_seconds(const struct rpc_call *c);
const char *rpc_method_name(const struct rpc_call *c);

/* Answers the call: the reply (owned; may be NULL) when err is NULL or QDP_OK, else err's status
 * with its detail (logged as the call's failure). Consumes the caller's reference. Any thread. */
void rpc_finish(struct rpc_call *c, grpc_byte_buffer *reply, const struct qdp_error *err);
void rpc_finish_status(struct rpc_call *c, qdp_status rc, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Starts a batch that is not the last one; the batch holds a reference until `e` comes back (its
 * handler drops it). False when it could not start (the call is then cancelled and no event will
 * come). */
bool rpc_start(struct rpc_call *c, grpc_op *ops, size_t n, struct rpc_ev *e);
/* Sends one message of a stream (owned; with the initial metadata the first time), fn(ev_send)
 * when it is written; false, bb freed, when it could not start. One send of c at a time. */
bool rpc_send_message(struct rpc_call *c, grpc_byte_buffer *bb,
                      void (*fn)(struct rpc_server *s, struct rpc_ev *e));
/* Arms RECV_CLOSE_ON_SERVER now, so cancel_seen tells at once when the client leaves (a stream's
 * reader, a long job deciding whether to commit). Never concurrently with another batch of c. */
void rpc_watch_close(struct rpc_call *c);

#endif /* QDP_RPC_CALL_H */
