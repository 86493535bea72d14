/* The parallel host copy (host_copy.h): helpers wait for a new generation of work, each copies
 * its slice of the destination's bytes, and the last one done wakes the caller. */
#include "runtime/host_copy.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct copy_job {
  char *dst;
  const char *src;
  uint64_t src_stride, row_bytes, total; /* total: bytes of dst */
  unsigned ways;                         /* the slices: way 0 is the caller's */
};

struct host_copy {
  pthread_mutex_t lock;
  pthread_cond_t work, done;
  struct copy_job job;
  uint64_t generation; /* bumped per copy; a helper runs each generation once */
  unsigned pending;    /* helpers still copying this generation */
  int stop;
  unsigned nthreads;
  pthread_t threads[HOST_COPY_THREADS_MAX];
};

/* Way k of ways copies the bytes [total * k / ways, total * (k + 1) / ways) of dst, row by row. */
static void copy_slice(const struct copy_job *j, unsigned k) {
  uint64_t at = j->total / j->ways * k + (k < j->total % j->ways ? k : j->total % j->ways);
  uint64_t end = at + j->total / j->ways + (k < j->total % j->ways ? 1 : 0);
  while (at < end) {
    uint64_t r = at / j->row_bytes, off = at % j->row_bytes;
    uint64_t n = j->row_bytes - off < end - at ? j->row_bytes - off : end - at;
    memcpy(j->dst + at, j->src + r * j->src_stride + off, (size_t)n);
    at += n;
  }
}

struct helper_arg {
  struct host_copy *pool;
  unsigned index; /* helper `index` copies way index + 1 */
};

static void *helper_main(void *arg) {
  struct host_copy *p = ((struct helper_arg *)arg)->pool;
  unsigned way = ((struct helper_arg *)arg)->index + 1;
  free(arg);
  uint64_t seen = 0;
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (!p->stop && p->generation == seen) {
      pthread_cond_wait(&p->work, &p->lock);
    }
    if (p->stop) {
      break;
    }
    seen = p->generation;
    struct copy_job j = p->job;
    if (way >= j.ways) {
      continue; /* a small copy: not this helper's */
    }
    pthread_mutex_unlock(&p->lock);
    copy_slice(&j, way);
    pthread_mutex_lock(&p->lock);
    if (--p->pending == 0) {
      pthread_cond_signal(&p->done);
    }
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

static void stop_helpers(struct host_copy *p) {
  pthread_mutex_lock(&p->lock);
  p->stop = 1;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->lock);
  for (unsigned i = 0; i < p->nthreads; i++) {
    pthread_join(p->threads[i], NULL);
  }
}

qdp_status host_copy_create(unsigned threads, struct host_copy **ret_pool,
                            struct qdp_error *reterr) {
  *ret_pool = NULL;
  if (threads > HOST_COPY_THREADS_MAX) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "copy_threads",
                         "copy_threads = %u is above the most a device takes, %u", threads,
                         HOST_COPY_THREADS_MAX);
  }
  struct host_copy *p = calloc(1, sizeof *p);
  if (!p) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate a host copy pool");
  }
  int err = pthread_mutex_init(&p->lock, NULL);
  if (err == 0 && (err = pthread_cond_init(&p->work, NULL)) != 0) {
    pthread_mutex_destroy(&p->lock);
  }
  if (err == 0 && (err = pthread_cond_init(&p->done, NULL)) != 0) {
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
  }
  if (err != 0) {
    free(p);
    return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, err,
                            "cannot create the host copy pool's lock: %s", strerror(err));
  }
  for (unsigned i = 0; i < threads; i++) {
    struct helper_arg *a = malloc(sizeof *a);
    err = a ? 0 : ENOMEM;
    if (a) {
      *a = (struct helper_arg){p, i};
      err = pthread_create(&p->threads[i], NULL, helper_main, a);
      if (err != 0) {
        free(a);
      }
    }
    if (err != 0) {
      host_copy_destroy(p);
      return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, err,
                              "cannot start host copy thread %u of %u: %s", i + 1, threads,
                              strerror(err));
    }
    p->nthreads = i + 1;
  }
  *ret_pool = p;
  return QDP_OK;
}

void host_copy_destroy(struct host_copy *p) {
  if (!p) {
    return;
  }
  stop_helpers(p);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

unsigned host_copy_ways(const struct host_copy *p) {
  return p ? p->nthreads + 1 : 1;
}

void host_copy_rows(struct host_copy *p, void *dst, const void *src, uint64_t src_stride,
                    uint64_t row_bytes, uint64_t nrows) {
  struct copy_job j = {(char *)dst, (const char *)src, src_stride, row_bytes, row_bytes * nrows, 1};
  if (j.total == 0) {
    return;
  }
  uint64_t ways = j.total / HOST_COPY_MIN_SLICE;
  ways = ways < host_copy_ways(p) ? ways : host_copy_ways(p);
  j.ways = ways > 1 ? (unsigned)ways : 1;
  if (j.ways == 1) {
    copy_slice(&j, 0);
    return;
  }
  pthread_mutex_lock(&p->lock);
  p->job = j;
  p->pending = j.ways - 1;
  p->generation++;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->lock);
  copy_slice(&j, 0);
  pthread_mutex_lock(&p->lock);
  while (p->pending > 0) {
    pthread_cond_wait(&p->done, &p->lock);
  }
  pthread_mutex_unlock(&p->lock);
}
