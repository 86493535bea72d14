/* A mesh's persistent worker threads (workers.h). */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/workers.h"

/* The items of one run: the caller waits on `done` until every queued item has returned. */
struct batch {
  pthread_mutex_t mu;
  pthread_cond_t done;
  size_t pending; /* queued items not yet returned */
};

struct item {
  void *(*fn)(void *);
  void *arg;
  struct batch *batch;
  struct item *next;
};

struct worker {
  pthread_t tid;
  pthread_mutex_t mu;
  pthread_cond_t ready;
  struct item *head, *tail; /* under mu */
  bool stop;                /* under mu: no more items will come */
};

struct runtime_workers {
  size_t count;
  struct worker *w;
};

static void *worker_main(void *arg) {
  struct worker *wk = arg;
  pthread_mutex_lock(&wk->mu);
  for (;;) {
    while (!wk->head && !wk->stop) {
      pthread_cond_wait(&wk->ready, &wk->mu);
    }
    struct item *it = wk->head;
    if (!it) {
      break; /* stopped and drained */
    }
    wk->head = it->next;
    wk->tail = wk->head ? wk->tail : NULL;
    pthread_mutex_unlock(&wk->mu);
    it->fn(it->arg);
    /* The last touch of the item and its batch: the caller frees both once pending is 0. */
    struct batch *b = it->batch;
    pthread_mutex_lock(&b->mu);
    if (--b->pending == 0) {
      pthread_cond_signal(&b->done);
    }
    pthread_mutex_unlock(&b->mu);
    pthread_mutex_lock(&wk->mu);
  }
  pthread_mutex_unlock(&wk->mu);
  return NULL;
}

/* Stops and joins workers [0, n). */
static void stop_workers(struct runtime_workers *w, size_t n) {
  for (size_t i = 0; i < n; i++) {
    pthread_mutex_lock(&w->w[i].mu);
    w->w[i].stop = true;
    pthread_cond_signal(&w->w[i].ready);
    pthread_mutex_unlock(&w->w[i].mu);
  }
  for (size_t i = 0; i < n; i++) {
    pthread_join(w->w[i].tid, NULL);
    pthread_cond_destroy(&w->w[i].ready);
    pthread_mutex_destroy(&w->w[i].mu);
  }
}

qdp_status runtime_workers_create(size_t count, struct runtime_workers **ret,
                                  struct qdp_error *reterr) {
  struct runtime_workers *w = calloc(1, sizeof *w);
  struct worker *wk = calloc(count ? count : 1, sizeof *wk);
  if (!w || !wk) {
    free(w);
    free(wk);
    return qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, -1, ENOMEM,
                            "cannot allocate the mesh's %zu workers", count);
  }
  w->w = wk;
  for (size_t i = 0; i < count; i++) {
    pthread_mutex_init(&wk[i].mu, NULL);
    pthread_cond_init(&wk[i].ready, NULL);
    int e = pthread_create(&wk[i].tid, NULL, worker_main, &wk[i]);
    if (e != 0) {
      pthread_cond_destroy(&wk[i].ready);
      pthread_mutex_destroy(&wk[i].mu);
      stop_workers(w, i);
      free(wk);
      free(w);
      /* EAGAIN: the system lacked the resources for another thread. */
      qdp_status st = e == EAGAIN || e == ENOMEM ? QDP_ERR_RESOURCE_EXHAUSTED : QDP_ERR_SYSTEM;
      return qdp_error_set_at(reterr, st, -1, e,
                              "cannot start worker %zu of the mesh's %zu: %s", i, count,
                              strerror(e));
    }
  }
  w->count = count;
  *ret = w;
  return QDP_OK;
}

void runtime_workers_destroy(struct runtime_workers *w) {
  if (!w) {
    return;
  }
  stop_workers(w, w->count);
  free(w->w);
  free(w);
}

static void enqueue(struct worker *wk, struct item *it) {
  pthread_mutex_lock(&wk->mu);
  if (wk->tail) {
    wk->tail->next = it;
  } else {
    wk->head = it;
  }
  wk->tail = it;
  pthread_cond_signal(&wk->ready);
  pthread_mutex_unlock(&wk->mu);
}

void runtime_workers_run(struct runtime_workers *w, void *base, size_t n, size_t size,
                         void *(*fn)(void *)) {
  char *at = base;
  size_t slots = w->count + 1;
  struct item *items = n > 1 && w->count ? calloc(n, sizeof *items) : NULL;
  struct batch b = {.pending = 0};
  if (items) {
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.done, NULL);
    for (size_t i = 0; i < n; i++) {
      b.pending += i % slots != 0;
    }
    for (size_t i = 0; i < n; i++) {
      if (i % slots != 0) {
        items[i] = (struct item){.fn = fn, .arg = at + i * size, .batch = &b};
        enqueue(&w->w[i % slots - 1], &items[i]);
      }
    }
  }
  /* The caller's slot, and every item when there is no queue. */
  for (size_t i = 0; i < n; i++) {
    if (!items || i % slots == 0) {
      fn(at + i * size);
    }
  }
  if (items) {
    pthread_mutex_lock(&b.mu);
    while (b.pending > 0) {
      pthread_cond_wait(&b.done, &b.mu);
    }
    pthread_mutex_unlock(&b.mu);
    pthread_cond_destroy(&b.done);
    pthread_mutex_destroy(&b.mu);
    free(items);
  }
}
