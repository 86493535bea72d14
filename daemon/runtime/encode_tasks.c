/* The executor's shard tasks: what runs on every device of a job at once (encode.h). */
#include "runtime/encode.h"

/* The first failure among tasks, copied to reterr. */
qdp_status encode_first_failure(const struct shard_task *t, size_t n, struct qdp_error *reterr) {
  for (size_t i = 0; i < n; i++) {
    if (t[i].rc != QDP_OK) {
      if (reterr) {
        *reterr = t[i].err;
      }
      return t[i].rc;
    }
  }
  return QDP_OK;
}

/* The shard's norm blocks, loading its slice first unless an earlier pass did; with t->scales set,
 * the fallback's scaled sums. */
void *encode_task_sumsq(void *arg) {
  struct shard_task *t = arg;
  struct runtime_shard_work *w = &t->work;
  t->rc = QDP_OK;
  if (!t->loaded) {
    t->rc = t->dev->ops->norm_load(t->dev, w, &t->err);
    t->loaded = t->rc == QDP_OK;
  }
  uint64_t rows = w->shard->rows;
  double *sums = t->rc == QDP_OK ? malloc(rows * sizeof *sums) : NULL;
  if (t->rc == QDP_OK && !sums) {
    t->rc = qdp_error_set(&t->err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                          "cannot allocate %" PRIu64 " row sums", rows);
  }
  for (size_t b = 0; t->rc == QDP_OK && b < t->nblocks; b++) {
    struct norm_block *blk = &t->blocks[b];
    uint64_t offset = blk->first - w->shard->first;
    uint64_t size = UINT64_C(1) << blk->log2;
    uint64_t len = offset >= w->len ? 0 : (w->len - offset < size ? w->len - offset : size);
    if (len == 0) {
      for (uint64_t r = 0; r < rows; r++) {
        t->blocks[r * t->nblocks + b].sum = 0.0; /* past the input: zeros */
      }
      continue;
    }
    t->rc = t->dev->ops->norm_sumsq(t->dev, w, offset, len, size, t->scales, sums, &t->err);
    for (uint64_t r = 0; t->rc == QDP_OK && r < rows; r++) {
      t->blocks[r * t->nblocks + b] = *blk;
      t->blocks[r * t->nblocks + b].sum = sums[r];
    }
  }
  free(sums);
  return NULL;
}

void *encode_task_scale(void *arg) {
  struct shard_task *t = arg;
  t->rc = t->dev->ops->norm_scale(t->dev, &t->work, t->sumsq, t->scales, &t->err);
  return NULL;
}

void *encode_task_encode(void *arg) {
  struct shard_task *t = arg;
  t->rc = t->dev->ops->encode(t->dev, &t->work, &t->err);
  return NULL;
}

void *encode_task_butterfly(void *arg) {
  struct pair_task *p = arg;
  p->rc = p->lo->dev->ops->butterfly(p->lo->dev, p->lo->work.out, p->hi->dev, p->hi->work.out,
                                     p->out, p->lo->work.shard->count, &p->how, &p->err);
  return NULL;
}

void *encode_task_partials(void *arg) {
  struct shard_task *t = arg;
  t->rc = t->dev->ops->norm_load(t->dev, &t->work, &t->err);
  t->loaded = t->rc == QDP_OK;
  if (t->rc == QDP_OK) {
    t->rc = t->dev->ops->norm_partials(t->dev, &t->work, t->parts, t->nparts, t->stride, t->members,
                                       t->all, t->nall, &t->send, &t->recv, &t->stream, &t->err);
  }
  return NULL;
}

/* A non-finite value v at column col of sample row, as an error. */
qdp_status encode_bad_value(struct qdp_error *reterr, const char *what, uint64_t row, uint64_t col,
                            double v) {
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input",
                       "input sample %" PRIu64 " value %" PRIu64 " is %g: %s must be finite", row,
                       col, v, what);
}

/* Whether the plan's shards are on more than one rank (then its collectives go through the world).
 */
bool encode_spans_ranks(const struct plan *p) {
  for (size_t i = 1; i < p->nshards; i++) {
    if (p->shards[i].rank != p->shards[0].rank) {
      return true;
    }
  }
  return false;
}
