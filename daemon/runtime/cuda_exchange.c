/* The CUDA backend's global-bit stages: butterflies between two shards (peer, NCCL, copy) and
 * with a partner on another rank (cuda_backend.h). */
#include "runtime/cuda_backend.h"

/* (a, b) <- (a + b, a - b) on da's stream: b read and written in place over peer access, else
 * through a bounded buffer on da, one piece at a time. */
/* The stage over NCCL, piece by piece: a's piece lands in a buffer on b's GPU and b's in one on
 * a's, then each side keeps its half of the butterfly (a + b on a's, a - b on b's). */
static qdp_status butterfly_nccl(struct cuda_device *ca, void *a, struct cuda_device *cb, void *b,
                                 qdp_dtype out, uint64_t count, struct qdp_error *reterr) {
  struct runtime_device *da = &ca->base, *db = &cb->base;
  qdp_status rc = QDP_OK;
  unsigned esize = qdp_dtype_size(out);
  uint64_t piece =
      count < PLAN_EXCHANGE_CHUNK_BYTES / esize ? count : PLAN_EXCHANGE_CHUNK_BYTES / esize;
  void *ta = NULL, *tb = NULL;
  QDP_TRY(rc, cuda_use_device(db, reterr));
  QDP_TRY(rc, cuda_dev_malloc(db, piece * esize, &tb, reterr));
  QDP_TRY(rc, cuda_use_device(da, reterr));
  QDP_TRY(rc, cuda_dev_malloc(da, piece * esize, &ta, reterr));
  for (uint64_t at = 0; at < count; at += piece) {
    uint64_t n = count - at < piece ? count - at : piece;
    char *pa = (char *)a + at * esize, *pb = (char *)b + at * esize;
    QDP_TRY(rc, device_comm_swap(ca->comm, ca->member, pa, ta, cb->member, pb, tb, n * esize,
                                 ca->stream, cb->stream, reterr));
    /* (pa, ta) <- (a + b, a - b): a's side keeps a + b. */
    K_TRY(rc, reterr, da, "qdpk_butterfly", qdpk_butterfly(pa, ta, out, n, ca->stream));
    QDP_TRY(rc, cuda_use_device(db, reterr));
    /* (tb, pb) <- (a + b, a - b): b's side keeps a - b. */
    K_TRY(rc, reterr, db, "qdpk_butterfly", qdpk_butterfly(tb, pb, out, n, cb->stream));
    QDP_TRY(rc, cuda_use_device(da, reterr));
  }
  QDP_TRY(rc, cuda_finish(cb, reterr));
  QDP_TRY(rc, cuda_finish(ca, reterr));
out:
  if (rc != QDP_OK) {
    cuda_drain(ca);
    cuda_drain(cb);
  }
  if (tb && (cudaSetDevice(db->info.ordinal) != cudaSuccess || cudaFree(tb) != cudaSuccess)) {
    (void)cudaGetLastError();
  }
  if (ta && (cudaSetDevice(da->info.ordinal) != cudaSuccess || cudaFree(ta) != cudaSuccess)) {
    (void)cudaGetLastError();
  }
  return rc;
}

qdp_status cuda_butterfly(struct runtime_device *da, void *a, struct runtime_device *db, void *b,
                          qdp_dtype out, uint64_t count, const char **ret_how,
                          struct qdp_error *reterr) {
  struct cuda_device *ca = cuda_of(da), *cb = cuda_of(db);
  qdp_status rc = QDP_OK;
  void *tmp = NULL;
  unsigned esize = qdp_dtype_size(out);
  QDP_TRY(rc, cuda_use_device(da, reterr));
  if (da != db && ca->peer[db->info.ordinal] && cb->peer[da->info.ordinal] &&
      !(ca->nccl_exchange && ca->comm)) {
    /* Both GPUs at once, each on half of the pair's range: the link carries traffic both ways
     * and neither GPU waits for the other's memory alone. */
    *ret_how = "peer";
    uint64_t h = count / 2;
    K_TRY(rc, reterr, da, "qdpk_butterfly", qdpk_butterfly(a, b, out, h, ca->stream));
    QDP_TRY(rc, cuda_use_device(db, reterr));
    K_TRY(rc, reterr, db, "qdpk_butterfly",
          qdpk_butterfly((char *)a + h * esize, (char *)b + h * esize, out, count - h, cb->stream));
    QDP_TRY(rc, cuda_finish(cb, reterr));
    QDP_TRY(rc, cuda_use_device(da, reterr));
    QDP_TRY(rc, cuda_finish(ca, reterr));
    goto out;
  }
  if (da == db || (ca->peer[db->info.ordinal] && !(ca->nccl_exchange && ca->comm))) {
    *ret_how = da == db ? "local" : "peer";
    K_TRY(rc, reterr, da, "qdpk_butterfly", qdpk_butterfly(a, b, out, count, ca->stream));
    QDP_TRY(rc, cuda_finish(ca, reterr));
    goto out;
  }
  if (ca->comm && cb->comm == ca->comm) {
    *ret_how = "nccl";
    rc = butterfly_nccl(ca, a, cb, b, out, count, reterr);
    goto out;
  }
  /* No peer access: b's piece comes over into tmp, the kernel leaves a - b there, and it goes
   * back. PLAN_EXCHANGE_CHUNK_BYTES is what the planner counted for this buffer. */
  *ret_how = "copy";
  uint64_t piece =
      count < PLAN_EXCHANGE_CHUNK_BYTES / esize ? count : PLAN_EXCHANGE_CHUNK_BYTES / esize;
  QDP_TRY(rc, cuda_dev_malloc(da, piece * esize, &tmp, reterr));
  for (uint64_t at = 0; at < count; at += piece) {
    uint64_t n = count - at < piece ? count - at : piece;
    char *pa = (char *)a + at * esize, *pb = (char *)b + at * esize;
    CU_TRY(rc, reterr, da, "cudaMemcpyPeerAsync",
           cudaMemcpyPeerAsync(tmp, da->info.ordinal, pb, db->info.ordinal, (size_t)(n * esize),
                               ca->stream));
    K_TRY(rc, reterr, da, "qdpk_butterfly", qdpk_butterfly(pa, tmp, out, n, ca->stream));
    CU_TRY(rc, reterr, da, "cudaMemcpyPeerAsync",
           cudaMemcpyPeerAsync(pb, db->info.ordinal, tmp, da->info.ordinal, (size_t)(n * esize),
                               ca->stream));
  }
  QDP_TRY(rc, cuda_finish(ca, reterr));
out:
  if (rc != QDP_OK) {
    /* Nothing either GPU still runs may touch the shards once the caller frees them. */
    cuda_drain(ca);
    cuda_drain(cb);
  }
  if (tmp && (cudaSetDevice(da->info.ordinal) != cudaSuccess || cudaFree(tmp) != cudaSuccess)) {
    (void)cudaGetLastError();
  }
  return rc;
}

/* Frees an exchange piece buffer (NULL: nothing); after a failure first waits out what the stream
 * still has queued, which may read or write it. */
static void piece_free(struct cuda_device *c, void *tmp, qdp_status rc) {
  if (!tmp) {
    return;
  }
  if (rc != QDP_OK) {
    cuda_drain(c);
  }
  if (cudaFree(tmp) != cudaSuccess) {
    (void)cudaGetLastError();
  }
}

qdp_status cuda_combine_host(struct runtime_device *d, void *mine, void *partner_host,
                             qdp_dtype out, uint64_t count, int high, struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  void *tmp = NULL;
  size_t bytes = (size_t)(count * qdp_dtype_size(out));
  QDP_TRY(rc, cuda_use_device(d, reterr));
  /* The partner's range comes up into a device buffer (count is at most one exchange chunk,
   * which the planner counted as this shard's workspace), and the butterfly kernel leaves a + b
   * in its first operand and a - b in its second. */
  QDP_TRY(rc, cuda_dev_malloc(d, bytes, &tmp, reterr));
  CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(tmp, partner_host, bytes, cudaMemcpyHostToDevice, c->stream));
  K_TRY(rc, reterr, d, "qdpk_butterfly",
        high ? qdpk_butterfly(tmp, mine, out, count, c->stream)
             : qdpk_butterfly(mine, tmp, out, count, c->stream));
  QDP_TRY(rc, cuda_finish(c, reterr));
out:
  piece_free(c, tmp, rc);
  return rc;
}

qdp_status cuda_combine_group(struct runtime_device *d, void *mine, qdp_dtype out, uint64_t count,
                              int high, struct device_comm *g, size_t local, int peer,
                              struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  void *tmp = NULL;
  unsigned esize = qdp_dtype_size(out);
  uint64_t piece =
      count < PLAN_EXCHANGE_CHUNK_BYTES / esize ? count : PLAN_EXCHANGE_CHUNK_BYTES / esize;
  QDP_TRY(rc, cuda_use_device(d, reterr));
  /* One piece buffer (the exchange workspace the planner counted); the stream orders each
   * piece's swap after the previous piece's kernel. */
  QDP_TRY(rc, cuda_dev_malloc(d, piece * esize, &tmp, reterr));
  for (uint64_t at = 0; at < count; at += piece) {
    uint64_t n = count - at < piece ? count - at : piece;
    char *pm = (char *)mine + at * esize;
    QDP_TRY(rc, device_comm_exchange(g, local, peer, pm, tmp, n * esize, c->stream, reterr));
    K_TRY(rc, reterr, d, "qdpk_butterfly",
          high ? qdpk_butterfly(tmp, pm, out, n, c->stream)
               : qdpk_butterfly(pm, tmp, out, n, c->stream));
  }
  QDP_TRY(rc, device_comm_wait(g, local, c->stream, reterr));
out:
  /* After a failure the group is aborted or the stream failed: either way nothing queued still
   * runs once drained. */
  piece_free(c, tmp, rc);
  return rc;
}
