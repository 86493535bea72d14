/* The ranks of the job running here: faults, and the runtime's collectives among them
 * (runtime_world_ops). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "world/internal.h"

/* ---- faults ---- */

void world_mark_lost(struct world *w, int rank, const char *why) {
  if (rank <= 0 || rank >= w->nranks) {
    return;
  }
  pthread_mutex_lock(&w->info_mu);
  bool was = w->ranks[rank].lost;
  if (!was) {
    w->ranks[rank].lost = true;
    snprintf(w->ranks[rank].reason, sizeof w->ranks[rank].reason, "%.150s", why);
    w->any_lost = true;
  }
  pthread_mutex_unlock(&w->info_mu);
  if (!was) {
    log_warning("world",
                "rank %d (%s) is lost: %s; jobs that need it fail until the world is "
                "restarted",
                rank, w->ranks[rank].host, why);
  }
}

bool world_is_lost(struct world *w, int rank) {
  pthread_mutex_lock(&w->info_mu);
  bool lost = w->ranks[rank].lost;
  pthread_mutex_unlock(&w->info_mu);
  return lost;
}

qdp_status world_lost_error(struct world *w, int rank, struct qdp_error *reterr) {
  struct world_rank_info ri;
  world_rank_info(w, rank, &ri);
  qdp_status rc = qdp_error_set(reterr, QDP_ERR_UNAVAILABLE, NULL,
                                "rank %d (%s) is lost (%s); jobs and reads that need it fail until "
                                "the world is restarted",
                                rank, ri.host, ri.reason);
  if (reterr) {
    reterr->rank = rank;
  }
  return rc;
}

/* Bounded messages with other ranks. On the coordinator a peer that does not answer is marked
 * lost (mark: the caller knows the peer itself was due to answer, not a third rank). */
qdp_status world_exchange(struct world *w, struct transport_io *items, size_t n, bool mark,
                          struct qdp_error *reterr) {
  int pinned = 0;
  qdp_status rc = transport_io_within(w->t, items, n, w->timeout_ms, &pinned, reterr);
  if (pinned) {
    log_warning("world",
                "a message to or from a rank that stopped answering could not be "
                "cancelled; its buffer may still be read");
  }
  if (rc == QDP_ERR_UNAVAILABLE && mark && world_rank(w) == 0) {
    for (size_t i = 0; i < n; i++) {
      if (!items[i].done) {
        world_mark_lost(w, items[i].peer, reterr ? reterr->msg : "it did not answer in time");
      }
    }
  }
  return rc;
}

/* ---- the runtime's collectives, on the ranks of the job running here ---- */

/* fixed: every rank contributes `bytes`, so the sizes need not travel. */
qdp_status world_allgather(struct world *w, const void *mine, size_t bytes, bool fixed, void **ret,
                           size_t *ret_bytes, struct qdp_error *reterr) {
  int me = world_rank(w);
  size_t n = w->nparts;
  qdp_status rc = QDP_OK;
  uint64_t *sizes = calloc(n, sizeof *sizes);
  struct transport_io *items = calloc(2 * n, sizeof *items);
  unsigned char *all = NULL;
  uint64_t my_size = bytes;
  if (!sizes || !items) {
    rc = world_no_memory(reterr, "the all-gather tables", n * (sizeof *sizes + 2 * sizeof *items));
    goto out;
  }
  /* Sizes first, then the blobs: both sides post sends and receives together each time, so large
   * blobs (rendezvous) never wait on each other. */
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (w->parts[i] == me || fixed) {
      sizes[i] = bytes;
      continue;
    }
    items[k++] = (struct transport_io){.buf = &my_size,
                                       .bytes = sizeof my_size,
                                       .peer = w->parts[i],
                                       .tag = peer_tag(w->job),
                                       .send = 1};
    items[k++] = (struct transport_io){
        .buf = &sizes[i], .bytes = sizeof sizes[i], .peer = w->parts[i], .tag = peer_tag(w->job)};
  }
  if (k) {
    QDP_TRY(rc, world_exchange(w, items, k, false, reterr));
  }
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    total += sizes[i];
  }
  all = malloc(total ? total : 1);
  if (!all) {
    rc = world_no_memory(reterr, "the gathered blocks", total);
    goto out;
  }
  k = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (w->parts[i] == me) {
      memcpy(all + at, mine, bytes);
    } else {
      items[k++] = (struct transport_io){.buf = (void *)mine,
                                         .bytes = bytes,
                                         .peer = w->parts[i],
                                         .tag = peer_tag(w->job),
                                         .send = 1};
      items[k++] = (struct transport_io){
          .buf = all + at, .bytes = sizes[i], .peer = w->parts[i], .tag = peer_tag(w->job)};
    }
    at += sizes[i];
  }
  QDP_TRY(rc, world_exchange(w, items, k, false, reterr));
  *ret = all;
  *ret_bytes = total;
  all = NULL;
out:
  free(all);
  free(items);
  free(sizes);
  return rc;
}

static qdp_status op_allgather(void *ctx, const void *mine, size_t bytes, void **ret,
                               size_t *ret_bytes, struct qdp_error *reterr) {
  return world_allgather(ctx, mine, bytes, false, ret, ret_bytes, reterr);
}

static qdp_status op_allgather_fixed(void *ctx, const void *mine, size_t bytes, void **ret,
                                     size_t *ret_bytes, struct qdp_error *reterr) {
  return world_allgather(ctx, mine, bytes, true, ret, ret_bytes, reterr);
}

static qdp_status op_exchange(void *ctx, int peer, const void *mine, void *ret, size_t bytes,
                              struct qdp_error *reterr) {
  struct world *w = ctx;
  struct transport_io items[2] = {
      {.buf = (void *)mine, .bytes = bytes, .peer = peer, .tag = peer_tag(w->job), .send = 1},
      {.buf = ret, .bytes = bytes, .peer = peer, .tag = peer_tag(w->job)},
  };
  return world_exchange(w, items, 2, false, reterr);
}

/* The ranks taking part in a job: rank 0 (it coordinates) and every rank holding a shard. */
qdp_status world_set_job(struct world *w, const struct plan *p, uint64_t job,
                         struct qdp_error *reterr) {
  free(w->parts);
  w->parts = calloc((size_t)w->nranks, sizeof *w->parts);
  w->nparts = 0;
  if (!w->parts) {
    return world_no_memory(reterr, "the job's rank list", (size_t)w->nranks * sizeof *w->parts);
  }
  for (int r = 0; r < w->nranks; r++) {
    bool in = r == 0;
    for (size_t i = 0; !in && i < p->nshards; i++) {
      in = p->shards[i].rank == r;
    }
    if (in) {
      w->parts[w->nparts++] = r;
    }
  }
  w->job = job;
  return QDP_OK;
}

/* A job whose ranks open its input file themselves: before anything else every rank of the job
 * says whether it could, so that one that could not (another file at the path, a short file)
 * fails the job on every rank at once instead of leaving the others in its first exchange until
 * the rank timeout. A rank that failed keeps its own error; the others fail with UNAVAILABLE
 * naming it, which the coordinator ranks below it. */
qdp_status world_agree_input(struct world *w, qdp_status mine, struct qdp_error *reterr) {
  struct {
    int32_t rank, status;
  } me = {world_rank(w), mine}, *all = NULL;
  size_t bytes = 0;
  struct qdp_error own = QDP_ERROR_INIT;
  if (reterr) {
    own = *reterr;
  }
  qdp_status rc = world_allgather(w, &me, sizeof me, true, (void **)&all, &bytes, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  if (mine != QDP_OK) {
    free(all);
    if (reterr) {
      *reterr = own;
    }
    return mine;
  }
  for (size_t i = 0; i < bytes / sizeof *all; i++) {
    if (all[i].status != QDP_OK) {
      rc = qdp_error_set(reterr, QDP_ERR_UNAVAILABLE, "input.path",
                         "rank %d could not read its part of the input file", (int)all[i].rank);
      if (reterr) {
        reterr->rank = all[i].rank;
      }
      break;
    }
  }
  free(all);
  return rc;
}

static struct device_comm *op_device_group(void *ctx) {
  struct world *w = ctx;
  return w->job_group ? w->group.comm : NULL;
}

const struct runtime_world_ops world_runtime_ops = {
    .allgather = op_allgather,
    .allgather_fixed = op_allgather_fixed,
    .exchange = op_exchange,
    .read = coordinator_read,
    .release = coordinator_release,
    .export_ipc = coordinator_export_ipc,
    .device_group = op_device_group,
};
