/* world_harness.c — ranks as threads (world_harness.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "world_harness.h"

#define HARNESS_MAX_RANKS 16

struct shared {
  int ranks;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* All-gather: every rank's contribution, then every rank's copy of all of them. */
  void *slot[HARNESS_MAX_RANKS];
  size_t len[HARNESS_MAX_RANKS];
  int arrived, departed;
  unsigned gen_in, gen_out;
  /* Exchange: box[from][to] holds what `from` sent `to` until `to` takes it. */
  void *box[HARNESS_MAX_RANKS][HARNESS_MAX_RANKS];
};

struct rank {
  struct shared *w;
  int rank;
  struct runtime_mesh *mesh;
  struct plan plan; /* this rank's copy: its shards' devices index its own mesh */
  struct runtime_input in;
  struct runtime_state *st;
  struct device_comm *group;
  qdp_status rc;
  struct qdp_error err;
};

static qdp_status h_allgather(void *ctx, const void *mine, size_t bytes, void **ret,
                              size_t *ret_bytes, struct qdp_error *reterr) {
  struct rank *r = ctx;
  struct shared *w = r->w;
  void *copy = malloc(bytes ? bytes : 1);
  if (!copy) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "harness: no memory");
  }
  memcpy(copy, mine, bytes);
  pthread_mutex_lock(&w->mu);
  w->slot[r->rank] = copy;
  w->len[r->rank] = bytes;
  unsigned g = w->gen_in;
  if (++w->arrived == w->ranks) {
    w->arrived = 0;
    w->gen_in++;
    pthread_cond_broadcast(&w->cv);
  }
  while (w->gen_in == g) {
    pthread_cond_wait(&w->cv, &w->mu);
  }
  size_t total = 0;
  for (int i = 0; i < w->ranks; i++) {
    total += w->len[i];
  }
  unsigned char *all = malloc(total ? total : 1);
  for (int i = 0, at = 0; all && i < w->ranks; at += (int)w->len[i], i++) {
    memcpy(all + at, w->slot[i], w->len[i]);
  }
  unsigned g2 = w->gen_out;
  if (++w->departed == w->ranks) {
    for (int i = 0; i < w->ranks; i++) {
      free(w->slot[i]);
      w->slot[i] = NULL;
    }
    w->departed = 0;
    w->gen_out++;
    pthread_cond_broadcast(&w->cv);
  }
  while (w->gen_out == g2) {
    pthread_cond_wait(&w->cv, &w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  if (!all) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "harness: no memory");
  }
  *ret = all;
  *ret_bytes = total;
  return QDP_OK;
}

static qdp_status h_exchange(void *ctx, int peer, const void *mine, void *ret, size_t bytes,
                             struct qdp_error *reterr) {
  struct rank *r = ctx;
  struct shared *w = r->w;
  void *copy = malloc(bytes ? bytes : 1);
  if (!copy) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "harness: no memory");
  }
  memcpy(copy, mine, bytes);
  pthread_mutex_lock(&w->mu);
  while (w->box[r->rank][peer]) {
    pthread_cond_wait(&w->cv, &w->mu);
  }
  w->box[r->rank][peer] = copy;
  pthread_cond_broadcast(&w->cv);
  while (!w->box[peer][r->rank]) {
    pthread_cond_wait(&w->cv, &w->mu);
  }
  memcpy(ret, w->box[peer][r->rank], bytes);
  free(w->box[peer][r->rank]);
  w->box[peer][r->rank] = NULL;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return QDP_OK;
}

static qdp_status h_read(void *ctx, int rank, uint64_t job, uint64_t offset, uint64_t count,
                         void *dst, size_t bytes, struct qdp_error *reterr) {
  (void)ctx, (void)rank, (void)job, (void)offset, (void)count, (void)dst, (void)bytes;
  return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL, "harness: no remote reads");
}

static void h_release(void *ctx, uint64_t job, const struct plan *p) {
  (void)ctx, (void)job, (void)p;
}

static struct device_comm *h_device_group(void *ctx) {
  return ((struct rank *)ctx)->group;
}

static const struct runtime_world_ops harness_ops = {.allgather = h_allgather,
                                                     .allgather_fixed = h_allgather,
                                                     .exchange = h_exchange,
                                                     .read = h_read,
                                                     .release = h_release,
                                                     .device_group = h_device_group};

void harness_plan_devices(struct runtime_mesh **meshes, int ranks, size_t per_rank,
                          struct plan_device *ret) {
  for (int r = 0; r < ranks; r++) {
    runtime_mesh_plan_devices(meshes[r], r, ret + (size_t)r * per_rank);
  }
}

/* The flattened input values rank's shards read, as [first, end); empty when it reads none. */
static void window_of(const struct plan *p, uint64_t cols, int rank, uint64_t *first,
                      uint64_t *end) {
  *first = UINT64_MAX;
  *end = 0;
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *s = &p->shards[i];
    if (s->rank != rank) {
      continue;
    }
    uint64_t lo = s->row_first * cols, hi = (s->row_first + s->rows) * cols;
    if (p->encoding == QDP_ENCODING_AMPLITUDE) {
      if (s->first >= cols) {
        continue;
      }
      lo += s->first;
      hi = (s->row_first + s->rows - 1) * cols +
           (s->first + s->count < cols ? s->first + s->count : cols);
    }
    *first = lo < *first ? lo : *first;
    *end = hi > *end ? hi : *end;
  }
  if (*first >= *end) {
    *first = *end = 0;
  }
}

static void *run_rank(void *arg) {
  struct rank *r = arg;
  r->rc = runtime_encode(r->mesh, &r->plan, &r->in, &r->st, &r->err);
  return NULL;
}

qdp_status harness_encode(struct runtime_mesh **meshes, int ranks, size_t per_rank,
                          const struct plan *p, const struct runtime_input *in, void **ret_amps,
                          struct qdp_error *reterr) {
  return harness_encode_grouped(meshes, ranks, per_rank, NULL, p, in, ret_amps, NULL, reterr);
}

qdp_status harness_encode_grouped(struct runtime_mesh **meshes, int ranks, size_t per_rank,
                                  struct device_comm *const *groups, const struct plan *p,
                                  const struct runtime_input *in, void **ret_amps,
                                  const char **ret_collective, struct qdp_error *reterr) {
  struct shared w = {.ranks = ranks};
  struct rank rk[HARNESS_MAX_RANKS];
  pthread_t tid[HARNESS_MAX_RANKS];
  unsigned esize = qdp_dtype_size(in->dtype), osize = qdp_dtype_size(p->out_dtype);
  qdp_status rc = QDP_OK;
  *ret_amps = NULL;
  if (ranks < 1 || ranks > HARNESS_MAX_RANKS) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "ranks", "harness: 1..8 ranks");
  }
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  memset(rk, 0, sizeof rk);
  for (int r = 0; r < ranks; r++) {
    struct rank *k = &rk[r];
    k->w = &w;
    k->rank = r;
    k->mesh = meshes[r];
    k->group = groups ? groups[r] : NULL;
    k->err = (struct qdp_error)QDP_ERROR_INIT;
    k->plan = *p;
    k->plan.shards = malloc(p->nshards * sizeof *p->shards);
    memcpy(k->plan.shards, p->shards, p->nshards * sizeof *p->shards);
    for (size_t i = 0; i < p->nshards; i++) {
      if (k->plan.shards[i].rank == r) {
        k->plan.shards[i].device -= (size_t)r * per_rank;
      }
    }
    uint64_t first, end;
    window_of(p, in->cols, r, &first, &end);
    /* Only the window is handed over: a copy, so a read outside it would be caught by ASan. */
    void *slice = malloc(end > first ? (end - first) * esize : 1);
    memcpy(slice, (const char *)in->data + first * esize, (end - first) * esize);
    k->in = (struct runtime_input){.data = slice,
                                   .dtype = in->dtype,
                                   .rows = in->rows,
                                   .cols = in->cols,
                                   .windowed = true,
                                   .window_first = first,
                                   .window_count = end - first};
    runtime_mesh_set_world(meshes[r], r, &harness_ops, k);
  }
  for (int r = 0; r < ranks; r++) {
    pthread_create(&tid[r], NULL, run_rank, &rk[r]);
  }
  for (int r = 0; r < ranks; r++) {
    pthread_join(tid[r], NULL);
  }
  for (int r = 0; r < ranks && rc == QDP_OK; r++) {
    if (rk[r].rc != QDP_OK) {
      rc = rk[r].rc;
      if (reterr) {
        *reterr = rk[r].err;
      }
    }
  }
  char *amps = rc == QDP_OK ? malloc(p->batch * p->amplitudes * osize) : NULL;
  for (size_t i = 0; amps && i < p->nshards && rc == QDP_OK; i++) {
    const struct plan_shard *s = &p->shards[i];
    for (uint64_t row = s->row_first; row < s->row_first + s->rows && rc == QDP_OK; row++) {
      uint64_t at = row * p->amplitudes + s->first;
      rc = runtime_state_read(rk[s->rank].st, at, s->count, amps + at * osize, reterr);
    }
  }
  if (ret_collective) {
    *ret_collective = rk[0].st ? runtime_state_collective(rk[0].st) : "";
  }
  for (int r = 0; r < ranks; r++) {
    runtime_state_destroy(rk[r].st);
    runtime_mesh_set_world(meshes[r], 0, NULL, NULL);
    free(rk[r].plan.shards);
    free((void *)rk[r].in.data);
  }
  pthread_cond_destroy(&w.cv);
  pthread_mutex_destroy(&w.mu);
  if (rc == QDP_OK) {
    *ret_amps = amps;
  } else {
    free(amps);
  }
  return rc;
}
