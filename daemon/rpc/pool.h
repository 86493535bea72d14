/* pool.h — the worker pool: `workers` threads (configuration) that run the jobs which may block
 * (large encodes, uploads' encodes, fetch reads, export, release, expiry), first come first run.
 *
 * Owns its threads and its queue; knows nothing of calls: a job is a function and its argument.
 * rpc_pool_submit from any thread; start, stop and destroy from the loop thread.
 */
#ifndef QDP_RPC_POOL_H
#define QDP_RPC_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

#include "error.h"

struct rpc_call;
struct rpc_server;

/* One job; its memory is the submitter's until fn runs (a call's own, the server's expiry). */
struct rpc_job {
  struct rpc_job *next;
  void (*fn)(struct rpc_job *j); /* a worker thread */
  struct rpc_call *call;
  struct rpc_server *srv;
};

struct rpc_pool {
  uv_mutex_t mu;
  uv_cond_t cv;
  struct rpc_job *head, *tail;
  bool stop, inited;
  uv_thread_t *threads;
  size_t n;
};

void rpc_pool_init(struct rpc_pool *p);
/* Starts n threads. RESOURCE_EXHAUSTED (field "workers") when their table cannot be allocated,
 * SYSTEM when a thread does not start (those started run until rpc_pool_stop). */
qdp_status rpc_pool_start(struct rpc_pool *p, size_t n, struct qdp_error *reterr);
void rpc_pool_submit(struct rpc_pool *p, struct rpc_job *j);
/* Lets the threads run what is queued, then joins them. Idempotent. */
void rpc_pool_stop(struct rpc_pool *p);
/* After rpc_pool_stop (or a pool never started). */
void rpc_pool_destroy(struct rpc_pool *p);

#endif /* QDP_RPC_POOL_H */
