/* The worker pool (pool.h). */
#include <stdlib.h>

#include "pool.h"

void rpc_pool_init(struct rpc_pool *p) {
  uv_mutex_init(&p->mu);
  uv_cond_init(&p->cv);
  p->inited = true;
}

static void worker_main(void *arg) {
  struct rpc_pool *p = arg;
  for (;;) {
    uv_mutex_lock(&p->mu);
    while (!p->head && !p->stop) {
      uv_cond_wait(&p->cv, &p->mu);
    }
    struct rpc_job *j = p->head;
    if (!j) {
      uv_mutex_unlock(&p->mu);
      break; /* stopping, and nothing left to run */
    }
    p->head = j->next;
    if (!p->head) {
      p->tail = NULL;
    }
    uv_mutex_unlock(&p->mu);
    j->fn(j);
  }
}

qdp_status rpc_pool_start(struct rpc_pool *p, size_t n, struct qdp_error *reterr) {
  p->threads = calloc(n, sizeof *p->threads);
  if (!p->threads) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, "workers",
                         "no memory for %zu worker threads", n);
  }
  for (size_t i = 0; i < n; i++) {
    int e = uv_thread_create(&p->threads[i], worker_main, p);
    if (e != 0) {
      return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, -e,
                              "cannot start worker thread %zu of %zu: %s", i + 1, n,
                              uv_strerror(e));
    }
    p->n++;
  }
  return QDP_OK;
}

void rpc_pool_submit(struct rpc_pool *p, struct rpc_job *j) {
  j->next = NULL;
  uv_mutex_lock(&p->mu);
  if (p->tail) {
    p->tail->next = j;
  } else {
    p->head = j;
  }
  p->tail = j;
  uv_cond_signal(&p->cv);
  uv_mutex_unlock(&p->mu);
}

void rpc_pool_stop(struct rpc_pool *p) {
  if (!p->inited) {
    return;
  }
  uv_mutex_lock(&p->mu);
  p->stop = true;
  uv_cond_broadcast(&p->cv);
  uv_mutex_unlock(&p->mu);
  for (size_t i = 0; i < p->n; i++) {
    uv_thread_join(&p->threads[i]);
  }
  p->n = 0;
}

void rpc_pool_destroy(struct rpc_pool *p) {
  free(p->threads);
  p->threads = NULL;
  if (p->inited) {
    uv_mutex_destroy(&p->mu);
    uv_cond_destroy(&p->cv);
    p->inited = false;
  }
}
