/* calls_reply.c — replies as libqdp-owned structs: the protobuf-c messages copied into the
 * public structs (and their free functions), and the unary call that returns one. */
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "libqdp_int.h"
#include "qdp.pb-c.h"

/* ---- replies: protobuf-c -> libqdp structs ---- */

void qdp_free(void *p) {
  free(p);
}

static char *dup0(const char *s) {
  return strdup(s ? s : "");
}

/* The public arrays are arrays of pointers to structs, each freed on its own; one pair of helpers
 * makes and frees them all. `from` (qdp__from_pb_fn) copies one protobuf message. */
typedef void (*drop_fn)(void *item);

static void array_free(void *array, size_t n, drop_fn drop) {
  void **v = array;
  for (size_t i = 0; v && i < n; i++) {
    drop(v[i]);
  }
  free(v);
}

/* n items (NULL when n is 0); when one copy fails, those made are freed and NULL is returned. */
static void *array_from_pb(const void *pb, size_t n, qdp__from_pb_fn from, drop_fn drop) {
  void *const *src = pb;
  if (!n) {
    return NULL;
  }
  void **v = calloc(n, sizeof *v);
  if (!v) {
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    v[i] = from(src[i]);
    if (!v[i]) {
      array_free(v, n, drop);
      return NULL;
    }
  }
  return v;
}

static void shard_free(void *item) {
  struct qdp_shard *s = item;
  if (!s) {
    return;
  }
  free(s->device);
  free(s->uuid);
  free(s->host);
  free(s->view_ticket);
  free(s);
}

static void *shard_from_pb(const void *pb) {
  const Qdp__Shard *p = pb;
  /* The IPC handle's bytes live in the same allocation, so one free releases both. */
  struct qdp_shard *s = calloc(1, sizeof *s + p->ipc_handle.len);
  if (!s) {
    return NULL;
  }
  s->struct_size = sizeof *s;
  s->rank = p->rank;
  s->ordinal = p->ordinal;
  s->first = p->first;
  s->count = p->count;
  s->row_first = p->row_first;
  s->rows = p->rows;
  s->bytes = p->bytes;
  s->ipc_offset = p->ipc_offset;
  s->lease_id = p->lease_id;
  if (p->ipc_handle.len) {
    memcpy(s + 1, p->ipc_handle.data, p->ipc_handle.len);
    s->ipc_handle = s + 1;
    s->ipc_handle_bytes = p->ipc_handle.len;
  }
  s->device = dup0(p->device);
  s->uuid = dup0(p->uuid);
  s->host = dup0(p->host);
  s->view_ticket = dup0(p->view_ticket);
  s->view_bytes = p->view_bytes;
  if (!s->device || !s->uuid || !s->host || !s->view_ticket) {
    shard_free(s);
    return NULL;
  }
  return s;
}

void qdp_state_info_free(struct qdp_state_info *s) {
  if (!s) {
    return;
  }
  free(s->handle);
  free(s->token);
  free(s->policy);
  free(s->collective);
  free(s->label);
  free(s->owner);
  free(s->writer);
  free(s->session);
  array_free(s->shards, s->nshards, shard_free);
  free(s);
}

static void state_free(void *item) {
  qdp_state_info_free(item);
}

void *qdp__state_from_pb(const void *pb) {
  const Qdp__StateInfo *p = pb;
  struct qdp_state_info *s = calloc(1, sizeof *s);
  if (!s) {
    return NULL;
  }
  s->struct_size = sizeof *s;
  s->encoding = (qdp_encoding)p->encoding;
  s->qubits = p->qubits;
  s->batch = p->batch;
  s->dtype = (qdp_dtype)p->dtype;
  s->bytes = p->bytes;
  s->global_bits = p->global_bits;
  s->created_unix_ms = p->created_unix_ms;
  s->expires_unix_ms = p->expires_unix_ms;
  s->encode_ms = p->encode_ms;
  s->leases = p->leases;
  s->ttl_seconds = p->ttl_seconds;
  s->ttl_capped = p->ttl_capped;
  s->written = p->written;
  s->writer_lease_id = p->writer_lease_id;
  s->writer_pid = p->writer_pid;
  s->writer = dup0(p->writer);
  s->session = dup0(p->session);
  s->handle = dup0(p->handle);
  s->token = dup0(p->token);
  s->policy = dup0(p->policy);
  s->collective = dup0(p->collective);
  s->label = dup0(p->label);
  s->owner = dup0(p->owner);
  s->shards = array_from_pb(p->shards, p->n_shards, shard_from_pb, shard_free);
  s->nshards = s->shards ? p->n_shards : 0;
  if (!s->handle || !s->token || !s->policy || !s->collective || !s->label || !s->owner ||
      !s->writer || !s->session || (p->n_shards && !s->shards)) {
    qdp_state_info_free(s);
    return NULL;
  }
  return s;
}

static void need_free(void *item) {
  struct qdp_device_need *d = item;
  if (d) {
    free(d->device);
    free(d);
  }
}

static void *need_from_pb(const void *pb) {
  const Qdp__DeviceNeed *n = pb;
  struct qdp_device_need *d = calloc(1, sizeof *d);
  if (!d) {
    return NULL;
  }
  d->struct_size = sizeof *d;
  d->rank = n->rank;
  d->shard_bytes = n->shard_bytes;
  d->staging_bytes = n->staging_bytes;
  d->workspace_bytes = n->workspace_bytes;
  d->need_bytes = n->need_bytes;
  d->budget_bytes = n->budget_bytes;
  d->fits = n->fits;
  d->device = dup0(n->device);
  if (!d->device) {
    need_free(d);
    return NULL;
  }
  return d;
}

void qdp_plan_info_free(struct qdp_plan_info *p) {
  if (!p) {
    return;
  }
  free(p->policy);
  free(p->message);
  array_free(p->shards, p->nshards, shard_free);
  array_free(p->needs, p->nneeds, need_free);
  free(p);
}

void *qdp__plan_from_pb(const void *pb) {
  const Qdp__PlanReply *r = pb;
  struct qdp_plan_info *p = calloc(1, sizeof *p);
  if (!p) {
    return NULL;
  }
  p->struct_size = sizeof *p;
  p->feasible = r->feasible;
  p->global_bits = r->global_bits;
  p->total_bytes = r->total_bytes;
  p->policy = dup0(r->policy);
  p->message = dup0(r->message);
  p->shards = array_from_pb(r->shards, r->n_shards, shard_from_pb, shard_free);
  p->nshards = p->shards ? r->n_shards : 0;
  p->needs = array_from_pb(r->needs, r->n_needs, need_from_pb, need_free);
  p->nneeds = p->needs ? r->n_needs : 0;
  if (!p->policy || !p->message || (r->n_shards && !p->shards) || (r->n_needs && !p->needs)) {
    qdp_plan_info_free(p);
    return NULL;
  }
  return p;
}

void qdp_state_list_free(struct qdp_state_list *l) {
  if (!l) {
    return;
  }
  array_free(l->states, l->count, state_free);
  free(l);
}

void *qdp__list_from_pb(const void *pb) {
  const Qdp__ListReply *r = pb;
  struct qdp_state_list *l = calloc(1, sizeof *l);
  if (!l) {
    return NULL;
  }
  l->struct_size = sizeof *l;
  l->states = array_from_pb(r->states, r->n_states, qdp__state_from_pb, state_free);
  if (r->n_states && !l->states) {
    free(l);
    return NULL;
  }
  l->count = r->n_states;
  return l;
}

static void device_free(void *item) {
  struct qdp_device_info *d = item;
  if (!d) {
    return;
  }
  free(d->name);
  free(d->kind);
  free(d->uuid);
  free(d->model);
  free(d->host);
  free(d);
}

static void *device_from_pb(const void *pb) {
  const Qdp__Device *p = pb;
  struct qdp_device_info *d = calloc(1, sizeof *d);
  if (!d) {
    return NULL;
  }
  d->struct_size = sizeof *d;
  d->rank = p->rank;
  d->ordinal = p->ordinal;
  d->total_bytes = p->total_bytes;
  d->free_bytes = p->free_bytes;
  d->budget_bytes = p->budget_bytes;
  d->used_bytes = p->used_bytes;
  d->cc_major = p->cc_major;
  d->cc_minor = p->cc_minor;
  d->numa_node = p->numa_node;
  d->name = dup0(p->name);
  d->kind = dup0(p->kind);
  d->uuid = dup0(p->uuid);
  d->model = dup0(p->model);
  d->host = dup0(p->host);
  if (!d->name || !d->kind || !d->uuid || !d->model || !d->host) {
    device_free(d);
    return NULL;
  }
  return d;
}

static void link_free(void *item) {
  struct qdp_link_info *l = item;
  if (l) {
    free(l->kind);
    free(l);
  }
}

static void *link_from_pb(const void *pb) {
  const Qdp__Link *p = pb;
  struct qdp_link_info *l = calloc(1, sizeof *l);
  if (!l) {
    return NULL;
  }
  l->struct_size = sizeof *l;
  l->from = p->from;
  l->to = p->to;
  l->nvlinks = p->nvlinks;
  l->peer = p->peer;
  l->perf_rank = p->perf_rank;
  l->kind = dup0(p->kind);
  if (!l->kind) {
    link_free(l);
    return NULL;
  }
  return l;
}

static void rank_info_free(void *item) {
  struct qdp_rank_info *r = item;
  if (!r) {
    return;
  }
  free(r->host);
  free(r->reason);
  free(r);
}

static void *rank_info_from_pb(const void *pb) {
  const Qdp__RankInfo *p = pb;
  struct qdp_rank_info *r = calloc(1, sizeof *r);
  if (!r) {
    return NULL;
  }
  r->struct_size = sizeof *r;
  r->rank = p->rank;
  r->devices = p->devices;
  r->lost = p->lost;
  r->host = dup0(p->host);
  r->reason = dup0(p->reason);
  if (!r->host || !r->reason) {
    rank_info_free(r);
    return NULL;
  }
  return r;
}

void qdp_server_status_free(struct qdp_server_status *s) {
  if (!s) {
    return;
  }
  free(s->version);
  free(s->backend);
  free(s->topology_source);
  free(s->collectives);
  free(s->transport);
  free(s->host_collectives);
  free(s->device_collectives);
  free(s->mpi_threads);
  array_free(s->devices, s->ndevices, device_free);
  array_free(s->links, s->nlinks, link_free);
  array_free(s->rank_info, s->nrank_info, rank_info_free);
  free(s);
}

void *qdp__status_from_pb(const void *pb) {
  const Qdp__StatusReply *r = pb;
  struct qdp_server_status *s = calloc(1, sizeof *s);
  if (!s) {
    return NULL;
  }
  s->struct_size = sizeof *s;
  s->uptime_ms = r->uptime_ms;
  s->ranks = r->ranks;
  s->budget_bytes = r->budget_bytes;
  s->used_bytes = r->used_bytes;
  s->states = r->states;
  s->jobs_total = r->jobs_total;
  s->jobs_failed = r->jobs_failed;
  s->max_qubits = r->max_qubits;
  s->version = dup0(r->version);
  s->backend = dup0(r->backend);
  s->regions = r->regions;
  s->region_bytes = r->region_bytes;
  s->topology_source = dup0(r->topology_source);
  s->collectives = dup0(r->collectives);
  s->devices = array_from_pb(r->devices, r->n_devices, device_from_pb, device_free);
  s->ndevices = s->devices ? r->n_devices : 0;
  s->links = array_from_pb(r->links, r->n_links, link_from_pb, link_free);
  s->nlinks = s->links ? r->n_links : 0;
  s->transport = dup0(r->transport);
  s->host_collectives = dup0(r->host_collectives);
  s->device_collectives = dup0(r->device_collectives);
  s->mpi_threads = dup0(r->mpi_threads);
  s->rank_timeout_ms = r->rank_timeout_ms;
  s->rank_info = array_from_pb(r->rank_info, r->n_rank_info, rank_info_from_pb, rank_info_free);
  s->nrank_info = s->rank_info ? r->n_rank_info : 0;
  if (!s->version || !s->backend || !s->topology_source || !s->collectives ||
      (r->n_devices && !s->devices) || (r->n_links && !s->links) || !s->transport ||
      !s->host_collectives || !s->device_collectives || !s->mpi_threads ||
      (r->n_rank_info && !s->rank_info)) {
    qdp_server_status_free(s);
    return NULL;
  }
  return s;
}

/* A unary call whose reply is copied by `from` into a libqdp struct, returned (NULL on failure,
 * with *ret_rc saying why); `what` names the copy in the out-of-memory message. */
void *qdp__unary_copy(qdp_client *c, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *desc, qdp__from_pb_fn from,
                      const char *what, qdp_status *ret_rc) {
  ProtobufCMessage *rep = NULL;
  void *out = NULL;
  qdp_status rc = qdp__unary(c, method, req, desc, &rep);
  if (rc == QDP_OK) {
    out = from(rep);
    if (!out) {
      rc = qdp__err_nomem(what);
    }
  }
  if (rep) {
    protobuf_c_message_free_unpacked(rep, NULL);
  }
  *ret_rc = rc;
  return out;
}

void *qdp__reply_from_pb(const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  if (d == &qdp__state_info__descriptor) {
    return qdp__state_from_pb(m);
  }
  if (d == &qdp__plan_reply__descriptor) {
    return qdp__plan_from_pb(m);
  }
  if (d == &qdp__list_reply__descriptor) {
    return qdp__list_from_pb(m);
  }
  if (d == &qdp__status_reply__descriptor) {
    return qdp__status_from_pb(m);
  }
  return NULL;
}
