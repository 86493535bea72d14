/* Shard views and gather (runtime.h): the layout of a state's shards, zero-copy IPC handles to
 * them through the backend's export_ipc, and the copy of a sharded state onto one device through
 * the backend's copy_rows (peer copies between GPUs, memcpy between host-memory devices); and the
 * other direction, a client's allocation opened as an input (open_ipc). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdp_size.h"
#include "runtime/mesh.h"
#include "runtime/state.h"

void runtime_state_shard_layout(const struct runtime_state *s, size_t i,
                                struct runtime_shard_layout *ret) {
  const struct plan_shard *sh = &s->plan.shards[i];
  memset(ret, 0, sizeof *ret);
  ret->rank = sh->rank;
  ret->device = sh->device;
  ret->ordinal = sh->ordinal;
  ret->row_first = sh->row_first;
  ret->rows = sh->rows;
  ret->first = sh->first;
  ret->count = sh->count;
  ret->bytes = sh->bytes;
  ret->dtype = s->plan.out_dtype;
  /* Device indices name this rank's mesh only for this rank's shards. */
  if (sh->rank == 0 && sh->device < s->mesh->count) {
    const struct runtime_device_info *d = &s->mesh->devs[sh->device]->info;
    snprintf(ret->name, sizeof ret->name, "%s", d->name);
    snprintf(ret->uuid, sizeof ret->uuid, "%s", d->uuid);
  }
}

qdp_status runtime_mesh_check_views(const struct runtime_mesh *m, struct qdp_error *reterr) {
  if (strcmp(m->backend, "cpu") != 0) {
    return QDP_OK;
  }
  return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "views",
                       "zero-copy views need GPUs (CUDA IPC), but this daemon's mesh is cpu:%zu "
                       "(host memory); read the state with Fetch or Export instead",
                       m->count);
}

qdp_status runtime_state_export_ipc(struct runtime_state *s, size_t i, struct runtime_ipc *ret,
                                    struct qdp_error *reterr) {
  const struct runtime_mesh *m = s->mesh;
  if (i < s->plan.nshards && !s->bufs[i] && s->plan.shards[i].rank != m->rank && s->world_job &&
      m->world_ops && m->world_ops->export_ipc) {
    /* Another rank's shard: its process exports it (a rank on this node shares its GPUs). A
     * descriptor it made is a number in that process, meaningless here: it says so instead. */
    qdp_status rc = m->world_ops->export_ipc(m->world_ctx, s->plan.shards[i].rank, s->world_job,
                                             i, ret, reterr);
    ret->fd = -1;
    return rc;
  }
  qdp_status rc = runtime_mesh_check_views(m, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  if (i >= s->plan.nshards || !s->bufs[i]) {
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "views",
                         "shard %zu of %zu is not held by this rank, so it has no view here", i,
                         s->plan.nshards);
  }
  struct runtime_device *d = s->mesh->devs[s->plan.shards[i].device];
  return d->ops->export_view(d, s->bufs[i], ret, reterr);
}

qdp_status runtime_mesh_find_device(struct runtime_mesh *m, const char *name, const char *field,
                                    size_t *ret_index, struct qdp_error *reterr) {
  struct runtime_device_token t;
  if (name && runtime_device_token(name, &t) == 0 && *t.end == '\0') {
    /* A bare number is the device's index in the mesh, a prefixed one its name. */
    enum runtime_device_kind kind =
        t.kind == RUNTIME_TOKEN_CUDA ? RUNTIME_DEVICE_CUDA : RUNTIME_DEVICE_CPU;
    for (size_t i = 0; i < m->count; i++) {
      const struct runtime_device_info *info = &m->devs[i]->info;
      bool named = info->kind == kind && (unsigned long)info->ordinal == t.n;
      if (t.kind == RUNTIME_TOKEN_INDEX ? t.n == i : named) {
        *ret_index = i;
        return QDP_OK;
      }
    }
  }
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                       "%s '%.64s' is not a device of this daemon: give a name from %s to %s, or "
                       "an index below %zu",
                       field, name ? name : "", m->count ? m->devs[0]->info.name : "(none)",
                       m->count ? m->devs[m->count - 1]->info.name : "(none)", m->count);
}

/* The one-shard plan of a state gathered onto device d: src's job, every row and amplitude in one
 * shard. Returns -1 when the arrays cannot be allocated. */
static int gathered_plan(const struct plan *src, size_t device, const struct runtime_device *d,
                         struct plan *ret) {
  *ret = *src;
  ret->policy = PLAN_SINGLE;
  ret->global_bits = 0;
  ret->nshards = 1;
  ret->nneeds = 1;
  ret->shards = calloc(1, sizeof *ret->shards);
  ret->needs = calloc(1, sizeof *ret->needs);
  if (!ret->shards || !ret->needs) {
    free(ret->shards);
    free(ret->needs);
    ret->shards = NULL;
    ret->needs = NULL;
    return -1;
  }
  ret->shards[0] = (struct plan_shard){.device = device,
                                       .rank = 0,
                                       .ordinal = d->info.ordinal,
                                       .first = 0,
                                       .count = src->amplitudes,
                                       .row_first = 0,
                                       .rows = src->batch,
                                       .bytes = src->total_bytes};
  struct plan_need *n = &ret->needs[0];
  n->device = device;
  n->ordinal = d->info.ordinal;
  snprintf(n->name, sizeof n->name, "%s", d->info.name);
  n->shard_bytes = src->total_bytes;
  n->need_bytes = src->total_bytes;
  n->budget_bytes = d->info.budget_bytes;
  n->fits = 1;
  return 0;
}

qdp_status runtime_state_gather(struct runtime_mesh *m, const struct runtime_state *s,
                                size_t device, struct runtime_state **ret_state,
                                struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct runtime_state *g = NULL;
  if (device >= m->count) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "device",
                         "device index %zu is outside the mesh of %zu devices", device, m->count);
  }
  const struct plan *p = &s->plan;
  for (size_t i = 0; i < p->nshards; i++) {
    if (!s->bufs[i]) {
      return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "state",
                           "shard %zu of the state is on rank %d: gather assembles states of "
                           "this rank only",
                           i, p->shards[i].rank);
    }
  }
  struct runtime_device *dst = m->devs[device];
  /* The budget first: nothing is allocated for a gather that cannot fit. */
  rc = runtime_device_reserve(dst, p->total_bytes, reterr);
  if (rc != QDP_OK) {
    qdp_error_prefix(reterr, "gather of a state of %s (%zu shard%s) onto %s",
                     QDP_SIZE_STR(p->total_bytes), p->nshards, p->nshards == 1 ? "" : "s", dst->info.name);
    return rc;
  }
  g = calloc(1, sizeof *g);
  if (!g || gathered_plan(p, device, dst, &g->plan) != 0) {
    free(g);
    runtime_device_unreserve(dst, p->total_bytes);
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for the gathered state's record");
  }
  g->mesh = m;
  g->collective = s->collective;
  g->encode_ms = s->encode_ms;
  g->written = s->written; /* a copy of what was written keeps no promise of the encoding */
  g->bufs = calloc(1, sizeof *g->bufs);
  if (!g->bufs) {
    runtime_device_unreserve(dst, p->total_bytes);
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "no host memory for the gathered state's shard table");
    goto out;
  }
  rc = dst->ops->alloc(dst, p->total_bytes, &g->bufs[0], reterr);
  if (rc != QDP_OK) {
    runtime_device_unreserve(dst, p->total_bytes);
    goto out;
  }
  g->bytes = p->total_bytes; /* from here runtime_state_destroy gives the bytes back */

  /* Each shard is [rows][count] contiguous; in the gathered [batch][2^n] array its rows are 2^n
   * amplitudes apart, so a shard of whole rows is one run and any other one run per row. */
  unsigned esize = qdp_dtype_size(p->out_dtype);
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *sh = &p->shards[i];
    struct runtime_device *src = m->devs[sh->device];
    uint64_t row_bytes = sh->count * esize, pitch = p->amplitudes * esize;
    char *at = (char *)g->bufs[0] + (sh->row_first * p->amplitudes + sh->first) * esize;
    bool whole_rows = sh->count == p->amplitudes;
    QDP_TRY(rc, dst->ops->copy_rows(dst, at, pitch, src, s->bufs[i], row_bytes,
                                    whole_rows ? sh->bytes : row_bytes, whole_rows ? 1 : sh->rows,
                                    reterr));
  }
  *ret_state = g;
  g = NULL;
out:
  runtime_state_destroy(g);
  return rc;
}

qdp_status runtime_mesh_find_uuid(const struct runtime_mesh *m, const char *uuid, const char *field,
                                  size_t *ret_index, struct qdp_error *reterr) {
  char owned[256] = "";
  size_t len = 0;
  for (size_t i = 0; i < m->count; i++) {
    const struct runtime_device_info *info = &m->devs[i]->info;
    if (uuid && info->uuid[0] && strcmp(info->uuid, uuid) == 0) {
      *ret_index = i;
      return QDP_OK;
    }
    int w = snprintf(owned + len, sizeof owned - len, "%s%s %s", i ? ", " : "", info->name,
                     info->uuid[0] ? info->uuid : "(host memory)");
    len = w < 0 || (size_t)w >= sizeof owned - len ? sizeof owned - 1 : len + (size_t)w;
  }
  return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, field,
                       "GPU %.64s is not one this daemon owns (it owns %s)%s",
                       uuid && uuid[0] ? uuid : "(none given)", m->count ? owned : "nothing",
                       strcmp(m->backend, "cpu") == 0
                           ? ": a CUDA IPC input needs a daemon on GPUs; send the values instead"
                           : "");
}

qdp_status runtime_mesh_open_ipc(struct runtime_mesh *m, size_t device, const unsigned char *handle,
                                 uint64_t offset, uint64_t bytes, struct runtime_ipc_input *ret,
                                 struct qdp_error *reterr) {
  memset(ret, 0, sizeof *ret);
  struct runtime_device *d = device < m->count ? m->devs[device] : NULL;
  if (!d || !d->ops->open_ipc) {
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "input.cuda_ipc",
                         "CUDA IPC input needs a GPU of this daemon's mesh (%s:%zu)", m->backend,
                         m->count);
  }
  qdp_status rc = d->ops->open_ipc(d, handle, offset, bytes, &ret->base, &ret->size, reterr);
  ret->device = device;
  return rc;
}

void runtime_mesh_close_ipc(struct runtime_mesh *m, struct runtime_ipc_input *in) {
  if (in->base) {
    struct runtime_device *d = m->devs[in->device];
    d->ops->close_ipc(d, in->base);
    in->base = NULL;
  }
}

/* Received rows of a remote piece pass through host memory in runs of at most this much. */
#define REMOTE_RUN_BYTES (64ull << 20)

/* Rows [k0, k0 + n) of piece pc of remote shard i, read from its rank through the world and
 * written to dst on d (rows dst_pitch apart). */
static qdp_status remote_rows(const struct runtime_state *s, size_t i,
                              const struct runtime_piece *pc, uint64_t k0, uint64_t n,
                              struct runtime_device *d, char *dst, uint64_t dst_pitch,
                              struct qdp_error *err) {
  const struct runtime_mesh *m = s->mesh;
  const struct plan *p = &s->plan;
  unsigned es = qdp_dtype_size(p->out_dtype);
  uint64_t row = pc->width * es;
  /* Whole states are one flat range: many rows a read; otherwise a row a read. */
  bool whole = pc->width == p->amplitudes && dst_pitch == row;
  uint64_t run = whole ? (REMOTE_RUN_BYTES / row ? REMOTE_RUN_BYTES / row : 1) : 1;
  char *buf = malloc((size_t)(run * row));
  if (!buf) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory to receive rank %d's amplitudes (%s)", p->shards[i].rank,
                         QDP_SIZE_STR(run * row));
  }
  qdp_status rc = QDP_OK;
  for (uint64_t k = k0; k < k0 + n && rc == QDP_OK; k += run) {
    uint64_t nk = k0 + n - k < run ? k0 + n - k : run;
    uint64_t flat = (pc->row + k) * p->amplitudes + pc->amp;
    rc = m->world_ops->read(m->world_ctx, p->shards[i].rank, s->world_job, flat,
                            nk * pc->width, buf, (size_t)(nk * row), err);
    if (rc == QDP_OK) {
      rc = d->ops->write(d, dst + (k - k0) * dst_pitch, buf, nk * row, err);
    }
  }
  free(buf);
  return rc;
}

qdp_status runtime_state_piece_rows(const struct runtime_state *s, size_t i,
                                    const struct runtime_piece *pc, uint64_t k0, uint64_t n,
                                    struct runtime_device *d, void *dst, uint64_t dst_pitch,
                                    struct qdp_error *err) {
  if (!s->bufs[i]) {
    return remote_rows(s, i, pc, k0, n, d, dst, dst_pitch, err);
  }
  unsigned es = qdp_dtype_size(s->plan.out_dtype);
  return d->ops->copy_rows(d, dst, dst_pitch, s->mesh->devs[s->plan.shards[i].device],
                           pc->src + k0 * pc->pitch, pc->pitch, pc->width * es, n, err);
}

qdp_status runtime_state_check_reachable(const struct runtime_state *s, const char *which,
                                         struct qdp_error *err) {
  const struct runtime_mesh *m = s->mesh;
  for (size_t i = 0; i < s->plan.nshards; i++) {
    if (!s->bufs[i] && !(s->world_job && m->world_ops && m->world_ops->read &&
                         s->plan.shards[i].rank != m->rank)) {
      return qdp_error_set(err, QDP_ERR_INTERNAL, which,
                           "shard %zu of %s is on rank %d, which this rank cannot read", i, which,
                           s->plan.shards[i].rank);
    }
  }
  return QDP_OK;
}

struct runtime_device *runtime_state_home(const struct runtime_state *s) {
  const struct runtime_mesh *m = s->mesh;
  for (size_t i = 0; i < s->plan.nshards; i++) {
    if (s->bufs[i]) {
      return m->devs[s->plan.shards[i].device];
    }
  }
  return m->devs[0];
}

qdp_status runtime_state_gather_block(const struct runtime_state *s, struct runtime_device *d,
                                      uint64_t r0, uint64_t nr, uint64_t a, uint64_t len,
                                      void *dst, struct qdp_error *reterr) {
  unsigned es = qdp_dtype_size(s->plan.out_dtype);
  struct runtime_piece pc;
  for (size_t i = 0; i < s->plan.nshards; i++) {
    if (!runtime_state_piece(s, i, r0, nr, a, len, &pc)) {
      continue;
    }
    char *at = (char *)dst + ((pc.row - r0) * len + (pc.amp - a)) * es;
    qdp_status rc = runtime_state_piece_rows(s, i, &pc, 0, pc.rows, d, at, len * es, reterr);
    if (rc != QDP_OK) {
      return rc;
    }
  }
  return QDP_OK;
}
