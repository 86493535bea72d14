/* The global-bit Walsh-Hadamard stages of a sharded iqp state (encode.h). */
#include "runtime/encode.h"

/* A global-bit stage whose partner shard is on rank `peer`: the two ranks trade the shard's data
 * in chunks through host memory (the exchange buffer the planner counted) and each combines its
 * own half. Both ranks walk the same chunks in the same order. */
static qdp_status exchange_stage(struct runtime_state *st, struct shard_task *mine, int peer,
                                 int high, struct qdp_error *reterr) {
  const struct runtime_mesh *m = st->mesh;
  struct runtime_device *d = mine->dev;
  qdp_dtype out = st->plan.out_dtype;
  unsigned esize = qdp_dtype_size(out);
  uint64_t count = mine->work.shard->bytes / esize;
  uint64_t piece =
      PLAN_EXCHANGE_CHUNK_BYTES / esize < count ? PLAN_EXCHANGE_CHUNK_BYTES / esize : count;
  qdp_status rc = QDP_OK;
  char *send = malloc(piece * esize), *recv = malloc(piece * esize);
  if (!send || !recv) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "cannot allocate 2 x %" PRIu64 " B of exchange buffers", piece * esize);
    goto out;
  }
  for (uint64_t at = 0; at < count; at += piece) {
    uint64_t len = count - at < piece ? count - at : piece;
    char *chunk = (char *)mine->work.out + at * esize;
    QDP_TRY(rc, d->ops->read(d, chunk, len * esize, send, reterr));
    QDP_TRY(rc, m->world_ops->exchange(m->world_ctx, peer, send, recv, len * esize, reterr));
    QDP_TRY(rc, d->ops->combine_host(d, chunk, recv, out, len, high, reterr));
  }
out:
  free(send);
  free(recv);
  return rc;
}

/* The global-bit stages of the Walsh-Hadamard transform of a sharded iqp state: for each global
 * bit below the top ones, ascending, every shard pair differing in that bit exchanges and
 * combines. Shards of an even
 * plan are in index order, so shard i holds global index bits i. Pairs on this rank run
 * concurrently; pairs split with another rank run one after another in shard order, the same
 * order on every rank, so two ranks always meet at their lowest pending pair. */
qdp_status encode_run_global_stages(struct runtime_state *st, struct shard_task *t, size_t n,
                                    uint32_t stages, struct qdp_error *reterr) {
  const struct plan *p = &st->plan;
  size_t npairs = p->nshards / 2;
  struct device_comm *group = encode_spans_ranks(p) ? encode_job_group(st->mesh, p) : NULL;
  const char *cross = NULL;
  struct pair_task *pairs = calloc(npairs ? npairs : 1, sizeof *pairs);
  struct shard_task **local = calloc(p->nshards, sizeof *local); /* by shard index */
  qdp_status rc = QDP_OK;
  if (!pairs || !local) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate exchange pairs");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    local[t[i].index] = &t[i];
  }
  for (uint32_t bit = 0; bit < stages; bit++) {
    size_t k = 0, stride = (size_t)1 << bit;
    for (size_t i = 0; i < p->nshards; i++) {
      if (!(i & stride) && local[i] && local[i | stride]) {
        pairs[k] = (struct pair_task){
            .lo = local[i], .hi = local[i | stride], .out = p->out_dtype, .err = QDP_ERROR_INIT};
        k++;
      }
    }
    runtime_workers_run(st->mesh->workers, pairs, k, sizeof *pairs, encode_task_butterfly);
    for (size_t i = 0; i < k; i++) {
      if (pairs[i].rc != QDP_OK) {
        rc = pairs[i].rc;
        if (reterr) {
          *reterr = pairs[i].err;
        }
        goto out;
      }
      st->collective = pairs[i].how;
    }
    for (size_t i = 0; i < p->nshards; i++) {
      size_t j = i | stride;
      if ((i & stride) || !local[i] == !local[j]) {
        continue;
      }
      if (!st->mesh->world_ops) {
        rc = qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                           "shards %zu and %zu are on different ranks but the mesh has no world", i,
                           j);
        goto out;
      }
      int high = local[i] == NULL;
      struct shard_task *mine = high ? local[j] : local[i];
      const struct plan_shard *partner = &p->shards[high ? i : j];
      if (group && mine->dev->ops->combine_group) {
        QDP_TRY(rc, mine->dev->ops->combine_group(
                        mine->dev, mine->work.out, p->out_dtype, mine->work.shard->count, high,
                        group, mine->work.shard->device,
                        (int)encode_shard_member(st->mesh, group, partner), reterr));
        cross = "nccl";
      } else {
        QDP_TRY(rc, exchange_stage(st, mine, partner->rank, high, reterr));
        cross = "mpi";
      }
    }
  }
  /* A stage between ranks is what the state's collectives cost most: it names them. */
  st->collective = cross ? cross : st->collective;
out:
  free(local);
  free(pairs);
  return rc;
}
