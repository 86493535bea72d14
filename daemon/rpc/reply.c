/* Packing job/'s answers into replies (reply.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "qdp_build_config.h"
#include "qdp_wire.h"
#include "reply.h"
#include "server_state.h"
#include "state/tickets.h"

/* ---- a reply's memory: everything a reply message points to, freed at once after packing ---- */

struct arena_blk {
  struct arena_blk *next;
  max_align_t data[];
};

void *rpc_arena_alloc(struct rpc_arena *a, size_t n) {
  struct arena_blk *b = calloc(1, sizeof *b + (n ? n : 1));
  if (!b) {
    a->failed = true;
    return NULL;
  }
  b->next = a->head;
  a->head = b;
  return b->data;
}

char *rpc_arena_str(struct rpc_arena *a, const char *s) {
  size_t n = strlen(s);
  char *p = rpc_arena_alloc(a, n + 1);
  if (p) {
    memcpy(p, s, n + 1);
  }
  return p ? p : (char *)"";
}

void rpc_arena_free(struct rpc_arena *a) {
  while (a->head) {
    struct arena_blk *b = a->head;
    a->head = b->next;
    free(b);
  }
}

qdp_status rpc_arena_check(const struct rpc_arena *a, struct qdp_error *err) {
  if (a->failed) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory to build the reply");
  }
  return QDP_OK;
}

static void fill_shards(struct rpc_server *s, struct rpc_arena *a, const struct plan *p,
                        size_t *ret_n, Qdp__Shard ***ret) {
  Qdp__Shard **arr = rpc_arena_alloc(a, p->nshards * sizeof *arr);
  Qdp__Shard *sh = rpc_arena_alloc(a, p->nshards * sizeof *sh);
  if (!arr || !sh) {
    *ret_n = 0;
    *ret = NULL;
    return;
  }
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *ps = &p->shards[i];
    qdp__shard__init(&sh[i]);
    const struct runtime_device_info *d = job_device(s->jobs, ps->device);
    sh[i].rank = ps->rank;
    sh[i].device = d ? (char *)d->name : (char *)"";
    sh[i].ordinal = ps->ordinal;
    sh[i].uuid = d ? (char *)d->uuid : (char *)"";
    sh[i].first = ps->first;
    sh[i].count = ps->count;
    sh[i].row_first = ps->row_first;
    sh[i].rows = ps->rows;
    sh[i].bytes = ps->bytes;
    sh[i].host = (char *)job_rank_host(s->jobs, ps->rank);
    arr[i] = &sh[i];
  }
  *ret_n = p->nshards;
  *ret = arr;
}

/* A StateInfo of a live state, its token and views when the info has them. */
Qdp__StateInfo *rpc_state_info(struct rpc_server *s, struct rpc_arena *a,
                               const struct job_state_info *st) {
  Qdp__StateInfo *info = rpc_arena_alloc(a, sizeof *info);
  if (!info) {
    return NULL;
  }
  qdp__state_info__init(info);
  const struct plan *p = st->plan;
  info->handle = rpc_arena_str(a, st->meta.handle);
  info->token = rpc_arena_str(a, st->token);
  info->encoding = (Qdp__Encoding)p->encoding;
  info->qubits = p->qubits;
  info->batch = p->batch;
  info->dtype = (Qdp__DType)p->out_dtype;
  info->bytes = p->total_bytes;
  info->policy = (char *)plan_policy_name(p->policy);
  info->global_bits = p->global_bits;
  fill_shards(s, a, p, &info->n_shards, &info->shards);
  info->collective = (char *)st->collective;
  info->created_unix_ms = st->meta.created_unix_ms;
  info->expires_unix_ms = st->meta.expires_unix_ms;
  info->ttl_seconds = st->meta.ttl_ms / 1000; /* ttls are asked for in whole seconds */
  info->ttl_capped = st->meta.ttl_capped;
  info->label = rpc_arena_str(a, st->meta.label);
  info->owner = rpc_arena_str(a, st->meta.owner);
  info->encode_ms = st->encode_ms;
  info->leases = st->meta.leases;
  info->written = st->overwritten;
  info->writer_lease_id = st->meta.writer_lease;
  info->writer = rpc_arena_str(a, st->meta.writer);
  info->writer_pid = st->meta.writer_pid;
  info->session = rpc_arena_str(a, st->meta.session);
  for (size_t i = 0; st->ipc && i < info->n_shards; i++) {
    info->shards[i]->ipc_offset = st->ipc[i].offset;
    info->shards[i]->lease_id = st->lease;
    if (st->tickets && st->tickets[i][0]) { /* a descriptor handed out (hand_out_views) */
      info->shards[i]->view_ticket = rpc_arena_str(a, st->tickets[i]);
      info->shards[i]->view_bytes = st->ipc[i].map_bytes;
      continue;
    }
    uint8_t *h = rpc_arena_alloc(a, sizeof st->ipc[i].handle);
    if (h) {
      memcpy(h, st->ipc[i].handle, sizeof st->ipc[i].handle);
      info->shards[i]->ipc_handle = (ProtobufCBinaryData){sizeof st->ipc[i].handle, h};
    }
  }
  return info;
}

/* The views' descriptors go to the caller under tickets (st->tickets), which it takes on the
 * socket (listener.h); each one is the table's from then on, whatever it answers. */
static qdp_status hand_out_views(struct rpc_call *c, struct job_state_info *st,
                                 struct qdp_error *err) {
  size_t n = st->ipc ? st->plan->nshards : 0;
  for (size_t i = 0; i < n; i++) {
    int fd = st->ipc[i].fd;
    if (fd < 0) {
      continue;
    }
    if (!st->tickets && !(st->tickets = calloc(n, sizeof *st->tickets))) {
      return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                           "no host memory for %zu view tickets", n);
    }
    st->ipc[i].fd = -1;
    int64_t now = (int64_t)(clock_mono_ns() / CLOCK_NS_PER_MS);
    qdp_status rc = fd_tickets_add(c->srv->view_tickets, c->owner, fd, FD_ACCESS_READ, now,
                                   st->tickets[i], err);
    if (rc != QDP_OK) {
      return rc;
    }
  }
  return QDP_OK;
}

/* Packs a state's info as a StateInfo (Describe) or inside an EncodeReply (Encode, Gather), then
 * ends the info: a new state whose reply could not be built is released. */
grpc_byte_buffer *rpc_state_reply(struct rpc_call *c, struct job_state_info *st, bool encode,
                                  struct qdp_error *err) {
  struct rpc_server *s = c->srv;
  struct rpc_arena a = {0};
  grpc_byte_buffer *reply = NULL;
  if (hand_out_views(c, st, err) != QDP_OK) {
    job_state_info_end(s->jobs, st, false);
    return NULL;
  }
  Qdp__StateInfo *info = rpc_state_info(s, &a, st);
  if (rpc_arena_check(&a, err) == QDP_OK) {
    Qdp__EncodeReply er = QDP__ENCODE_REPLY__INIT;
    er.state = info;
    reply = qdp_wire_pack(encode ? &er.base : &info->base);
  }
  job_state_info_end(s->jobs, st, !a.failed);
  rpc_arena_free(&a);
  return reply;
}

grpc_byte_buffer *rpc_amplitudes_reply(struct rpc_server *s, struct job_state_info *st,
                                       struct qdp_error *err) {
  struct rpc_arena a = {0};
  struct job_fetch f = {0};
  grpc_byte_buffer *reply = NULL;
  void *buf = NULL;
  uint64_t bytes = st->plan->total_bytes;
  if (bytes > RPC_REPLY_AMPLITUDES_MAX) {
    qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "reply_amplitudes",
                  "the state has %" PRIu64 " B, above the %" PRIu64
                  " B a reply carries: leave reply_amplitudes unset and fetch it (Fetch, "
                  "FetchInto)",
                  bytes, (uint64_t)RPC_REPLY_AMPLITUDES_MAX);
    if (err) {
      err->need_bytes = bytes;
      err->free_bytes = RPC_REPLY_AMPLITUDES_MAX;
    }
    goto out;
  }
  buf = malloc(bytes ? bytes : 1);
  if (!buf) {
    qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                  "cannot allocate %" PRIu64 " B for the amplitudes of the reply", bytes);
    goto out;
  }
  if (job_fetch_open(s->jobs, st->meta.handle, st->token, 0, 0, &f, err) != QDP_OK ||
      job_fetch_read(&f, f.total, buf, err) != QDP_OK) {
    goto out;
  }
  Qdp__StateInfo *info = rpc_state_info(s, &a, st);
  if (rpc_arena_check(&a, err) != QDP_OK) {
    goto out;
  }
  info->handle = (char *)""; /* released below: nothing names it */
  info->token = (char *)"";
  Qdp__EncodeReply er = QDP__ENCODE_REPLY__INIT;
  er.state = info;
  er.amplitudes = (ProtobufCBinaryData){(size_t)bytes, buf};
  reply = qdp_wire_pack(&er.base);
out:
  job_fetch_close(s->jobs, &f);
  job_state_info_end(s->jobs, st, false); /* the fresh state is released */
  rpc_arena_free(&a);
  free(buf);
  return reply;
}

grpc_byte_buffer *rpc_plan_reply(struct rpc_server *s, struct rpc_arena *a, const struct plan *p,
                                 const struct qdp_error *why) {
  Qdp__PlanReply r = QDP__PLAN_REPLY__INIT;
  r.feasible = p->feasible != 0;
  r.policy = (char *)plan_policy_name(p->policy);
  r.global_bits = p->global_bits;
  r.total_bytes = p->total_bytes;
  fill_shards(s, a, p, &r.n_shards, &r.shards);
  Qdp__DeviceNeed **needs = rpc_arena_alloc(a, p->nneeds * sizeof *needs);
  Qdp__DeviceNeed *nd = rpc_arena_alloc(a, p->nneeds * sizeof *nd);
  if (needs && nd) {
    for (size_t i = 0; i < p->nneeds; i++) {
      const struct plan_need *pn = &p->needs[i];
      qdp__device_need__init(&nd[i]);
      nd[i].rank = pn->rank;
      nd[i].device = rpc_arena_str(a, pn->name);
      nd[i].shard_bytes = pn->shard_bytes;
      nd[i].staging_bytes = pn->staging_bytes;
      nd[i].workspace_bytes = pn->workspace_bytes;
      nd[i].need_bytes = pn->need_bytes;
      nd[i].budget_bytes = pn->budget_bytes;
      nd[i].fits = pn->fits != 0;
      needs[i] = &nd[i];
    }
    r.n_needs = p->nneeds;
    r.needs = needs;
  }
  if (why->code != QDP_OK) {
    r.message = (char *)why->msg;
  }
  return a->failed ? NULL : qdp_wire_pack(&r.base);
}

void rpc_list_one(const struct job_state_info *st, void *arg) {
  struct rpc_list *l = arg;
  if (l->failed) {
    return;
  }
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    Qdp__StateInfo **items = realloc(l->items, cap * sizeof *items);
    if (!items) {
      l->failed = true;
      return;
    }
    l->items = items;
    l->cap = cap;
  }
  Qdp__StateInfo *info = rpc_state_info(l->s, l->a, st);
  if (!info) {
    l->failed = true;
    return;
  }
  l->items[l->n++] = info;
}

/* The world's part of Status: every rank, whether it is lost, and how the ranks talk. */
static void status_world(const struct job_status *st, struct rpc_arena *a, Qdp__StatusReply *r) {
  bool mpi = strcmp(st->transport, "mpi") == 0;
  r->transport = mpi ? "mpi" : "local";
  r->host_collectives = mpi ? "mpi (point to point, host memory)" : "in-process";
  r->mpi_threads = mpi ? (char *)st->threads : "";
  r->rank_timeout_ms = st->rank_timeout_ms;
  r->device_collectives = (char *)st->device_collectives;
  Qdp__RankInfo **arr = rpc_arena_alloc(a, (size_t)st->ranks * sizeof *arr);
  Qdp__RankInfo *ri = rpc_arena_alloc(a, (size_t)st->ranks * sizeof *ri);
  if (!arr || !ri) {
    return;
  }
  for (int i = 0; i < st->ranks; i++) {
    qdp__rank_info__init(&ri[i]);
    ri[i].rank = i;
    ri[i].host = (char *)st->rank_info[i].host;
    ri[i].devices = st->rank_info[i].devices;
    ri[i].lost = st->rank_info[i].lost;
    ri[i].reason = (char *)st->rank_info[i].reason;
    arr[i] = &ri[i];
  }
  r->n_rank_info = (size_t)st->ranks;
  r->rank_info = arr;
}

static void status_devices(const struct job_status *st, struct rpc_arena *a, Qdp__StatusReply *r) {
  Qdp__Device **devs = rpc_arena_alloc(a, st->ndevices * sizeof *devs);
  Qdp__Device *d = rpc_arena_alloc(a, st->ndevices * sizeof *d);
  if (!devs || !d) {
    return;
  }
  for (size_t i = 0; i < st->ndevices; i++) {
    const struct runtime_device_info *info = &st->devices[i].info;
    qdp__device__init(&d[i]);
    d[i].name = (char *)info->name;
    d[i].kind = info->kind == RUNTIME_DEVICE_CUDA ? "cuda" : "cpu";
    d[i].rank = st->devices[i].rank;
    d[i].ordinal = info->ordinal;
    d[i].uuid = (char *)info->uuid;
    d[i].model = (char *)info->model;
    d[i].total_bytes = info->total_bytes;
    d[i].free_bytes = info->free_bytes;
    d[i].budget_bytes = info->budget_bytes;
    d[i].used_bytes = info->used_bytes;
    d[i].cc_major = info->cc_major;
    d[i].cc_minor = info->cc_minor;
    d[i].host = (char *)st->devices[i].host;
    d[i].numa_node = info->numa_node;
    devs[i] = &d[i];
  }
  r->n_devices = st->ndevices;
  r->devices = devs;
}

static void status_links(const struct job_status *st, struct rpc_arena *a, Qdp__StatusReply *r) {
  size_t nl = st->nlocal * st->nlocal;
  Qdp__Link **links = rpc_arena_alloc(a, nl * sizeof *links);
  Qdp__Link *l = rpc_arena_alloc(a, nl * sizeof *l);
  if (!links || !l) {
    return;
  }
  for (size_t k = 0; k < nl; k++) {
    const struct runtime_link *rl = &st->links[k];
    qdp__link__init(&l[k]);
    l[k].from = (uint32_t)(k / st->nlocal);
    l[k].to = (uint32_t)(k % st->nlocal);
    l[k].kind = (char *)runtime_link_kind_name(rl->kind);
    l[k].nvlinks = rl->nvlinks;
    l[k].peer = rl->peer;
    l[k].perf_rank = rl->perf_rank;
    links[k] = &l[k];
  }
  r->n_links = nl;
  r->links = links;
}

grpc_byte_buffer *rpc_status_reply(struct rpc_server *s, const struct job_status *st,
                                   struct qdp_error *err) {
  struct rpc_arena a = {0};
  grpc_byte_buffer *reply = NULL;
  Qdp__StatusReply r = QDP__STATUS_REPLY__INIT;
  r.version = QDP_VERSION;
  r.uptime_ms = (clock_mono_ns() - s->start_ns) / CLOCK_NS_PER_MS;
  r.backend = (char *)st->backend;
  r.ranks = st->ranks;
  status_devices(st, &a, &r);
  r.topology_source = (char *)st->topology_source;
  r.collectives = (char *)st->collectives;
  status_links(st, &a, &r);
  r.budget_bytes = s->store_budget;
  r.used_bytes = st->used_bytes;
  r.states = st->states;
  r.jobs_total = atomic_load(&s->calls.jobs_total);
  r.jobs_failed = atomic_load(&s->calls.jobs_failed);
  r.max_qubits = st->max_qubits;
  r.regions = st->regions;
  r.region_bytes = st->region_bytes;
  status_world(st, &a, &r);
  if (rpc_arena_check(&a, err) == QDP_OK) {
    reply = qdp_wire_pack(&r.base);
  }
  rpc_arena_free(&a);
  return reply;
}
