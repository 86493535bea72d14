/* server_state.h — the server's state, which the parts of the shell read through their calls
 * (c->srv): the job pipeline, the settings, the listener and tickets, and the lists two of them
 * keep. Types only; server.c creates, starts and frees it; the groups below say who writes what.
 */
#ifndef QDP_RPC_SERVER_STATE_H
#define QDP_RPC_SERVER_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <grpc/grpc.h>
#include <uv.h>

#include "call.h"
#include "identity.h"
#include "io/map.h"
#include "job/job.h"
#include "pool.h"
#include "qdp_limits.h"

struct fd_tickets;
struct metrics_http;
struct rpc_listener;

struct rpc_server {
  struct rpc_calls calls; /* what its calls share (call.h) */
  struct rpc_pool pool;   /* the worker threads (pool.h) */
  uv_loop_t *loop;
  struct job_pipeline *jobs; /* the server's own: every job runs through it */

  /* server.c: its lifecycle, on the loop thread. */
  bool grpc_inited, started, sync_inited, async_inited, timers_inited, cq_thread_started;
  bool listener_started, handles_closing;
  bool cq_drained;
  uv_thread_t cq_thread;
  uv_async_t async;
  uv_mutex_t inbox_mu;
  struct rpc_ev *inbox_head, *inbox_tail;
  struct rpc_ev ev_shutdown, ev_cq_done;
  uv_timer_t expire_timer, drain_timer, upload_timer;
  struct rpc_job expire_job;
  atomic_int expire_busy;
  uint64_t expire_interval_ms, shutdown_timeout_ms;
  atomic_bool shutting_down; /* set on the loop, read by every thread */
  void (*done)(void *arg);
  void (*overdue)(void *arg);
  void *done_arg;
  bool drain_cancelled;
  int open_handles;
  struct metrics_http *metrics_http;
  int metrics_port;
  const char *method_names[RPC_M_COUNT];

  /* Fixed settings, set at create. */
  struct rpc_listener *listener; /* the Unix socket; NULL without one */
  struct fd_tickets *tickets;      /* descriptors Unix callers handed over */
  struct fd_tickets *view_tickets; /* views' descriptors waiting for their callers to take */
  struct rpc_tokens tokens;      /* TCP bearer tokens and their principals (identity.h) */
  struct rpc_tls *tls;           /* TLS on TCP (tls.h); NULL: no TCP, or clear text */
  struct io_folder input_folder, export_folder;
  struct io_file_id own[QDP_OWN_FILES_MAX]; /* the daemon's own files: never read or written */
  size_t nown;
  uid_t euid;
  size_t nworkers;
  bool tcp_node_paths;
  uint64_t store_budget, max_message_bytes;
  uint64_t start_ns; /* clock_mono_ns at start: the uptime */

  /* Settings SIGHUP may change (server.c writes them on the loop, workers read them). */
  atomic_uint_fast64_t max_upload_bytes, fetch_chunk, upload_idle_ms, upload_budget;

  /* health.c: the Watch streams open, and each one's watch_* (under watch_mu). */
  uv_mutex_t watch_mu;
  struct rpc_call *watchers;
  /* upload.c: the uploads being received, watched for idleness, and each one's `reserved`
   * (under uploads_mu). */
  uv_mutex_t uploads_mu;
  struct rpc_call *uploads;
};

#endif /* QDP_RPC_SERVER_STATE_H */
