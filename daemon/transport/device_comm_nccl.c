/* Device collectives over NCCL (device_comm.h). */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "clock.h"
#include "device_comm.h"

struct device_comm {
  size_t nlocal;
  int size;
  int first_member;     /* the group member number of local member 0 */
  int ordinals[64];     /* of the local members */
  ncclComm_t comms[64]; /* one per local member */
  /* A communicator is not thread-safe, and the calls of concurrent jobs must reach every
   * member's stream in one order: each call enqueues under this lock (waits happen outside). */
  pthread_mutex_t lock;
  /* Across processes every wait on the group ends after timeout_ms (0: no bound). The
   * communicators themselves are blocking: NCCL's non-blocking mode costs 15-20 us per collective
   * (measured), so the bound comes from how qdp waits instead: joining runs on a thread of its
   * own, and streams are polled, the group aborted on a timeout. */
  uint64_t timeout_ms;
  bool aborted;
  char why[160]; /* why it was aborted */
};

/* Spins for the first stretch of a wait (a collective usually ends within microseconds), then
 * yields the core. */
static void pause_after(uint64_t start_ns) {
  if (clock_mono_ns() - start_ns > 200 * CLOCK_NS_PER_US) {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  } else {
    sched_yield();
  }
}

static void abort_group(struct device_comm *c, const char *why) {
  if (c->aborted) {
    return;
  }
  for (size_t i = 0; i < c->nlocal; i++) {
    if (c->comms[i]) {
      (void)ncclCommAbort(c->comms[i]);
      c->comms[i] = NULL;
    }
  }
  snprintf(c->why, sizeof c->why, "%.159s", why);
  __atomic_store_n(&c->aborted, true, __ATOMIC_RELEASE);
}

static qdp_status aborted_error(const struct device_comm *c, struct qdp_error *reterr) {
  return qdp_error_set_at(reterr, QDP_ERR_UNAVAILABLE, c->ordinals[0], -1,
                          "the device group across processes was aborted (%s); its collectives "
                          "run on the host from now on",
                          c->why);
}

static struct device_comm *group_new(size_t n, int size, int first_member, const int *ordinals) {
  struct device_comm *c = calloc(1, sizeof *c);
  if (!c) {
    return NULL;
  }
  c->nlocal = n;
  c->size = size;
  c->first_member = first_member;
  memcpy(c->ordinals, ordinals, n * sizeof *ordinals);
  if (pthread_mutex_init(&c->lock, NULL) != 0) {
    free(c);
    return NULL;
  }
  return c;
}

static void group_free(struct device_comm *c) {
  pthread_mutex_destroy(&c->lock);
  free(c);
}

static qdp_status nccl_failed(const struct device_comm *c, size_t local, ncclResult_t r,
                              const char *call, struct qdp_error *reterr) {
  int ordinal = c && local < c->nlocal ? c->ordinals[local] : -1;
  const char *last = c && local < c->nlocal ? ncclGetLastError(c->comms[local]) : NULL;
  return qdp_error_set_at(reterr, QDP_ERR_NCCL, ordinal, (int)r, "cuda:%d: %s failed: %s%s%s",
                          ordinal, call, ncclGetErrorString(r), last && *last ? ": " : "",
                          last ? last : "");
}

/* A failed call: its error; a group across processes is aborted, so that no member waits on it. */
static qdp_status call_failed(struct device_comm *c, ncclResult_t r, const char *call,
                              struct qdp_error *reterr) {
  qdp_status rc = nccl_failed(c, 0, r, call, reterr);
  if (c->timeout_ms) {
    abort_group(c, reterr ? reterr->msg : call);
  }
  return rc;
}

/* Takes the group's lock for one collective; a group already aborted: its error, the lock not held.
 */
static qdp_status lock_live(struct device_comm *c, struct qdp_error *reterr) {
  pthread_mutex_lock(&c->lock);
  if (c->aborted) {
    qdp_status rc = aborted_error(c, reterr);
    pthread_mutex_unlock(&c->lock);
    return rc;
  }
  return QDP_OK;
}

/* Ends a collective that lock_live began: r's outcome, the lock released. */
static qdp_status unlock_result(struct device_comm *c, ncclResult_t r, const char *call,
                                struct qdp_error *reterr) {
  qdp_status rc = r == ncclSuccess ? QDP_OK : call_failed(c, r, call, reterr);
  pthread_mutex_unlock(&c->lock);
  return rc;
}

qdp_status device_comm_create_local(const int *ordinals, size_t n, struct device_comm **ret,
                                    struct qdp_error *reterr) {
  if (n == 0 || n > 64) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "a device group holds 1 to 64 GPUs, not %zu", n);
  }
  struct device_comm *c = group_new(n, (int)n, 0, ordinals);
  if (!c) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate a device group");
  }
  ncclResult_t r = ncclCommInitAll(c->comms, (int)n, c->ordinals);
  if (r != ncclSuccess) {
    qdp_status rc =
        qdp_error_set_at(reterr, QDP_ERR_NCCL, ordinals[0], (int)r,
                         "ncclCommInitAll over %zu GPUs failed: %s", n, ncclGetErrorString(r));
    group_free(c);
    return rc;
  }
  *ret = c;
  return QDP_OK;
}

qdp_status device_comm_unique_id(unsigned char id[DEVICE_COMM_ID_BYTES], struct qdp_error *reterr) {
  ncclUniqueId u;
  _Static_assert(sizeof u == DEVICE_COMM_ID_BYTES, "ncclUniqueId is 128 bytes");
  ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess) {
    return qdp_error_set_at(reterr, QDP_ERR_NCCL, -1, (int)r, "ncclGetUniqueId failed: %s",
                            ncclGetErrorString(r));
  }
  memcpy(id, &u, sizeof u);
  return QDP_OK;
}

/* Joining a group across processes, on a thread of its own so the caller can stop waiting: NCCL
 * cannot abort a communicator before its creation returns. A join the caller gave up on is
 * finished (and its communicators destroyed) by the thread, whenever the others turn up. */
struct join {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct device_comm *c;
  ncclUniqueId id;
  ncclResult_t r;
  cudaError_t cuda;
  int failed_ordinal;
  bool done, abandoned;
};

/* Connects every pair of members now (NCCL connects them on first use, which would wait for the
 * peer inside a job): one all-gather and a one-byte exchange with every other member. */
static ncclResult_t connect_all(struct device_comm *c, void *const *bufs) {
  ncclResult_t r = ncclGroupStart();
  for (size_t i = 0; r == ncclSuccess && i < c->nlocal; i++) {
    char *b = bufs[i]; /* size + 1 doubles on member i's GPU */
    r = ncclAllGather(b, b + sizeof(double), 1, ncclDouble, c->comms[i], 0);
    for (int peer = 0; r == ncclSuccess && peer < c->size; peer++) {
      if (peer != c->first_member + (int)i) {
        r = ncclSend(b, 1, ncclChar, peer, c->comms[i], 0);
        r = r == ncclSuccess ? ncclRecv(b + 1, 1, ncclChar, peer, c->comms[i], 0) : r;
      }
    }
  }
  ncclResult_t end = ncclGroupEnd();
  return r != ncclSuccess ? r : end;
}

static void *join_main(void *arg) {
  struct join *j = arg;
  struct device_comm *c = j->c;
  ncclResult_t r = ncclGroupStart();
  cudaError_t cuda = cudaSuccess;
  void *bufs[64] = {0};
  for (size_t i = 0; r == ncclSuccess && cuda == cudaSuccess && i < c->nlocal; i++) {
    cuda = cudaSetDevice(c->ordinals[i]);
    if (cuda == cudaSuccess) {
      r = ncclCommInitRank(&c->comms[i], c->size, j->id, c->first_member + (int)i);
    } else {
      j->failed_ordinal = c->ordinals[i];
    }
  }
  ncclResult_t end = ncclGroupEnd();
  r = r != ncclSuccess ? r : end;
  /* One scratch buffer per member on its GPU; the default stream, synchronized below. */
  for (size_t i = 0; r == ncclSuccess && cuda == cudaSuccess && i < c->nlocal; i++) {
    cuda = cudaSetDevice(c->ordinals[i]);
    cuda =
        cuda == cudaSuccess ? cudaMalloc(&bufs[i], (size_t)(c->size + 1) * sizeof(double)) : cuda;
    j->failed_ordinal = c->ordinals[i];
  }
  if (r == ncclSuccess && cuda == cudaSuccess) {
    r = connect_all(c, bufs);
  }
  for (size_t i = 0; i < c->nlocal; i++) {
    if (bufs[i]) {
      cudaError_t e = cudaSetDevice(c->ordinals[i]);
      e = e == cudaSuccess ? cudaDeviceSynchronize() : e;
      cuda = cuda == cudaSuccess ? e : cuda;
      (void)cudaFree(bufs[i]);
    }
  }
  pthread_mutex_lock(&j->mu);
  j->r = r;
  j->cuda = cuda;
  j->done = true;
  bool abandoned = j->abandoned;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
  if (abandoned) {
    for (size_t i = 0; i < c->nlocal; i++) {
      if (c->comms[i]) {
        (void)ncclCommAbort(c->comms[i]);
      }
    }
    group_free(c);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
  }
  return NULL;
}

qdp_status device_comm_create_members(const unsigned char id[DEVICE_COMM_ID_BYTES], int size,
                                      int first_member, const int *ordinals, size_t n,
                                      uint64_t timeout_ms, struct device_comm **ret,
                                      struct qdp_error *reterr) {
  if (size < 1 || n == 0 || n > 64 || first_member < 0 || (size_t)first_member + n > (size_t)size) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "members %d..%d of a device group of %d do not exist", first_member,
                         first_member + (int)n - 1, size);
  }
  struct device_comm *c = group_new(n, size, first_member, ordinals);
  struct join *j = calloc(1, sizeof *j);
  if (!c || !j) {
    free(j);
    if (c) {
      group_free(c);
    }
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate a device group");
  }
  c->timeout_ms = timeout_ms;
  j->c = c;
  memcpy(&j->id, id, sizeof j->id);
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  pthread_t tid;
  if (pthread_create(&tid, NULL, join_main, j) != 0) {
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
    group_free(c);
    return qdp_error_set(reterr, QDP_ERR_SYSTEM, NULL, "cannot start a thread to join the group");
  }
  pthread_detach(tid);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  uint64_t ns = (uint64_t)until.tv_nsec + (timeout_ms % 1000) * 1000000u;
  until.tv_sec += (time_t)(timeout_ms / 1000 + ns / 1000000000u);
  until.tv_nsec = (long)(ns % 1000000000u);
  pthread_mutex_lock(&j->mu);
  while (!j->done) {
    if (timeout_ms == 0) {
      pthread_cond_wait(&j->cv, &j->mu);
    } else if (pthread_cond_timedwait(&j->cv, &j->mu, &until) != 0 && !j->done) {
      break;
    }
  }
  bool done = j->done;
  j->abandoned = !done; /* the thread finishes it and frees both */
  pthread_mutex_unlock(&j->mu);
  if (!done) {
    return qdp_error_set_at(reterr, QDP_ERR_UNAVAILABLE, ordinals[0], -1,
                            "members %d..%d of %d: joining the device group did not complete "
                            "within %llu ms: another process of the group is gone or hung",
                            first_member, first_member + (int)n - 1, size,
                            (unsigned long long)timeout_ms);
  }
  qdp_status rc = QDP_OK;
  if (j->cuda != cudaSuccess) {
    rc = qdp_error_set_at(reterr, QDP_ERR_CUDA, j->failed_ordinal, (int)j->cuda,
                          "cuda:%d: joining the device group: %s", j->failed_ordinal,
                          cudaGetErrorName(j->cuda));
  } else if (j->r != ncclSuccess) {
    rc = qdp_error_set_at(reterr, QDP_ERR_NCCL, ordinals[0], (int)j->r,
                          "members %d..%d of %d: joining the device group failed: %s", first_member,
                          first_member + (int)n - 1, size, ncclGetErrorString(j->r));
  }
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->cv);
  free(j);
  if (rc != QDP_OK) {
    abort_group(c, "");
    group_free(c);
    return rc;
  }
  *ret = c;
  return QDP_OK;
}

void device_comm_destroy(struct device_comm *c) {
  if (!c) {
    return;
  }
  for (size_t i = 0; i < c->nlocal; i++) {
    if (c->comms[i]) {
      /* A group across processes may have lost a member: destroying would wait for it. */
      (void)(c->timeout_ms ? ncclCommAbort(c->comms[i]) : ncclCommDestroy(c->comms[i]));
    }
  }
  group_free(c);
}

size_t device_comm_local_members(const struct device_comm *c) {
  return c ? c->nlocal : 0;
}

int device_comm_size(const struct device_comm *c) {
  return c ? c->size : 0;
}

int device_comm_first_member(const struct device_comm *c) {
  return c ? c->first_member : 0;
}

bool device_comm_usable(const struct device_comm *c) {
  return c && !__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE);
}

qdp_status device_comm_wait(struct device_comm *c, size_t local, void *stream,
                            struct qdp_error *reterr) {
  if (local >= c->nlocal) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "local member %zu of a group holding %zu here", local, c->nlocal);
  }
  if (!device_comm_usable(c)) {
    return aborted_error(c, reterr);
  }
  int ordinal = c->ordinals[local];
  cudaError_t err = cudaSuccess;
  if (!c->timeout_ms) {
    err = cudaStreamSynchronize((cudaStream_t)stream);
  } else {
    uint64_t start = clock_mono_ns();
    while ((err = cudaStreamQuery((cudaStream_t)stream)) == cudaErrorNotReady) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(c->comms[local], &state);
      r = r != ncclSuccess ? r : state;
      qdp_status rc = QDP_OK;
      if (r != ncclSuccess) {
        rc = nccl_failed(c, local, r, "a collective", reterr);
      } else if (clock_mono_ns() - start > c->timeout_ms * CLOCK_NS_PER_MS) {
        rc = qdp_error_set_at(
            reterr, QDP_ERR_UNAVAILABLE, ordinal, -1,
            "cuda:%d: a collective of the device group did not complete within %llu ms: "
            "another process of the group is gone or hung; the group is aborted",
            ordinal, (unsigned long long)c->timeout_ms);
      }
      if (rc != QDP_OK) {
        pthread_mutex_lock(&c->lock);
        abort_group(c, reterr ? reterr->msg : "a collective failed or timed out");
        pthread_mutex_unlock(&c->lock);
        return rc;
      }
      pause_after(start);
    }
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return qdp_error_set_at(reterr, QDP_ERR_CUDA, ordinal, (int)err,
                            "cuda:%d: waiting for a collective: %s", ordinal,
                            cudaGetErrorName(err));
  }
  return QDP_OK;
}

qdp_status device_comm_allgather_f64(struct device_comm *c, size_t local, const double *send,
                                     double *recv, size_t count, void *stream,
                                     struct qdp_error *reterr) {
  if (local >= c->nlocal) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "local member %zu of a group holding %zu here", local, c->nlocal);
  }
  qdp_status rc = lock_live(c, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  ncclResult_t r =
      ncclAllGather(send, recv, count, ncclDouble, c->comms[local], (cudaStream_t)stream);
  return unlock_result(c, r, "ncclAllGather", reterr);
}

qdp_status device_comm_allgather_f64_all(struct device_comm *c, const double *const *send,
                                         double *const *recv, size_t count, void *const *streams,
                                         struct qdp_error *reterr) {
  qdp_status rc = lock_live(c, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  ncclResult_t r = ncclGroupStart();
  for (size_t i = 0; r == ncclSuccess && i < c->nlocal; i++) {
    r = ncclAllGather(send[i], recv[i], count, ncclDouble, c->comms[i], (cudaStream_t)streams[i]);
  }
  ncclResult_t end = ncclGroupEnd();
  r = r != ncclSuccess ? r : end;
  return unlock_result(c, r, "ncclAllGather", reterr);
}

qdp_status device_comm_swap(struct device_comm *c, size_t la, const void *send_a, void *recv_a,
                            size_t lb, const void *send_b, void *recv_b, size_t bytes,
                            void *stream_a, void *stream_b, struct qdp_error *reterr) {
  if (la >= c->nlocal || lb >= c->nlocal || la == lb) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "swap between local members %zu and %zu of a group holding %zu here", la,
                         lb, c->nlocal);
  }
  qdp_status rc = lock_live(c, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  int ma = c->first_member + (int)la, mb = c->first_member + (int)lb;
  ncclResult_t r = ncclGroupStart(), s[4] = {ncclSuccess, ncclSuccess, ncclSuccess, ncclSuccess};
  if (r == ncclSuccess) {
    s[0] = ncclSend(send_a, bytes, ncclChar, mb, c->comms[la], (cudaStream_t)stream_a);
    s[1] = ncclRecv(recv_a, bytes, ncclChar, mb, c->comms[la], (cudaStream_t)stream_a);
    s[2] = ncclSend(send_b, bytes, ncclChar, ma, c->comms[lb], (cudaStream_t)stream_b);
    s[3] = ncclRecv(recv_b, bytes, ncclChar, ma, c->comms[lb], (cudaStream_t)stream_b);
    r = ncclGroupEnd();
  }
  for (int i = 0; i < 4 && r == ncclSuccess; i++) {
    r = s[i];
  }
  return unlock_result(c, r, "ncclSend/ncclRecv", reterr);
}

qdp_status device_comm_exchange(struct device_comm *c, size_t local, int peer, const void *send,
                                void *recv, size_t bytes, void *stream, struct qdp_error *reterr) {
  if (local >= c->nlocal || peer < 0 || peer >= c->size) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "exchange between local member %zu and member %d of a group of %d", local,
                         peer, c->size);
  }
  qdp_status rc = lock_live(c, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) {
    ncclResult_t s = ncclSend(send, bytes, ncclChar, peer, c->comms[local], (cudaStream_t)stream);
    ncclResult_t v = ncclRecv(recv, bytes, ncclChar, peer, c->comms[local], (cudaStream_t)stream);
    r = ncclGroupEnd();
    r = s != ncclSuccess ? s : v != ncclSuccess ? v : r;
  }
  return unlock_result(c, r, "ncclSend/ncclRecv", reterr);
}

int device_comm_nccl_version(void) {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}
