/* fuzz_reply.c — libqdp's decoding of unary replies: arbitrary bytes as each reply message a call
 * receives (qdp__unpack, as qdp__unary does), then the copy into the public structs
 * (qdp__reply_from_pb) and their free functions.
 *
 * Checked beyond memory safety: a message that decodes is copied whole (no out-of-memory here, so
 * no NULL), with every count, number and string as the message has them ("" for an absent one).
 */
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>

#include "fuzz.h"
#include "libqdp_int.h"
#include "qdp.pb-c.h"

static void same_str(const char *copy, const char *pb, const char *what) {
  FUZZ_CHECK(copy && strcmp(copy, pb ? pb : "") == 0, "%s copied as '%s'", what,
             copy ? copy : "(null)");
}

static void check_shards(struct qdp_shard *const *c, size_t nc, Qdp__Shard *const *pb, size_t n) {
  FUZZ_CHECK(nc == n && (n == 0 || c), "%zu of %zu shards", nc, n);
  for (size_t i = 0; i < n; i++) {
    const struct qdp_shard *s = c[i];
    const Qdp__Shard *p = pb[i];
    FUZZ_CHECK(s && s->struct_size == sizeof *s && s->rank == p->rank && s->ordinal == p->ordinal &&
                   s->first == p->first && s->count == p->count && s->row_first == p->row_first &&
                   s->rows == p->rows && s->bytes == p->bytes && s->ipc_offset == p->ipc_offset &&
                   s->lease_id == p->lease_id,
               "shard %zu", i);
    FUZZ_CHECK(s->ipc_handle_bytes == p->ipc_handle.len &&
                   (p->ipc_handle.len == 0
                        ? s->ipc_handle == NULL
                        : memcmp(s->ipc_handle, p->ipc_handle.data, p->ipc_handle.len) == 0),
               "shard %zu: %zu-byte IPC handle", i, s->ipc_handle_bytes);
    same_str(s->device, p->device, "shard device");
    same_str(s->uuid, p->uuid, "shard uuid");
    same_str(s->host, p->host, "shard host");
  }
}

static void check_state(const struct qdp_state_info *s, const Qdp__StateInfo *p) {
  FUZZ_CHECK(s && s->struct_size == sizeof *s && s->encoding == (qdp_encoding)p->encoding &&
                 s->qubits == p->qubits && s->batch == p->batch &&
                 s->dtype == (qdp_dtype)p->dtype && s->bytes == p->bytes &&
                 s->global_bits == p->global_bits && s->created_unix_ms == p->created_unix_ms &&
                 s->expires_unix_ms == p->expires_unix_ms && s->leases == p->leases &&
                 memcmp(&s->encode_ms, &p->encode_ms, sizeof s->encode_ms) == 0,
             "state info");
  same_str(s->handle, p->handle, "handle");
  same_str(s->token, p->token, "token");
  same_str(s->policy, p->policy, "policy");
  same_str(s->collective, p->collective, "collective");
  same_str(s->label, p->label, "label");
  same_str(s->owner, p->owner, "owner");
  check_shards(s->shards, s->nshards, p->shards, p->n_shards);
}

static void check_plan(const struct qdp_plan_info *c, const Qdp__PlanReply *p) {
  FUZZ_CHECK(c && c->struct_size == sizeof *c && c->feasible == p->feasible &&
                 c->global_bits == p->global_bits && c->total_bytes == p->total_bytes &&
                 c->nneeds == p->n_needs && (p->n_needs == 0 || c->needs),
             "plan info");
  same_str(c->policy, p->policy, "plan policy");
  same_str(c->message, p->message, "plan message");
  check_shards(c->shards, c->nshards, p->shards, p->n_shards);
  for (size_t i = 0; i < p->n_needs; i++) {
    const struct qdp_device_need *d = c->needs[i];
    const Qdp__DeviceNeed *n = p->needs[i];
    FUZZ_CHECK(d && d->rank == n->rank && d->shard_bytes == n->shard_bytes &&
                   d->staging_bytes == n->staging_bytes &&
                   d->workspace_bytes == n->workspace_bytes && d->need_bytes == n->need_bytes &&
                   d->budget_bytes == n->budget_bytes && d->fits == n->fits,
               "need %zu", i);
    same_str(d->device, n->device, "need device");
  }
}

static void check_list(const struct qdp_state_list *c, const Qdp__ListReply *p) {
  FUZZ_CHECK(c && c->count == p->n_states && (p->n_states == 0 || c->states), "%zu of %zu states",
             c ? c->count : 0, p->n_states);
  for (size_t i = 0; i < p->n_states; i++) {
    check_state(c->states[i], p->states[i]);
  }
}

static void check_status(const struct qdp_server_status *c, const Qdp__StatusReply *p) {
  FUZZ_CHECK(c && c->uptime_ms == p->uptime_ms && c->ranks == p->ranks &&
                 c->budget_bytes == p->budget_bytes && c->used_bytes == p->used_bytes &&
                 c->states == p->states && c->jobs_total == p->jobs_total &&
                 c->jobs_failed == p->jobs_failed && c->max_qubits == p->max_qubits &&
                 c->regions == p->regions && c->region_bytes == p->region_bytes &&
                 c->rank_timeout_ms == p->rank_timeout_ms && c->ndevices == p->n_devices &&
                 c->nlinks == p->n_links && c->nrank_info == p->n_rank_info,
             "status");
  same_str(c->version, p->version, "version");
  same_str(c->backend, p->backend, "backend");
  same_str(c->topology_source, p->topology_source, "topology source");
  same_str(c->collectives, p->collectives, "collectives");
  same_str(c->transport, p->transport, "transport");
  same_str(c->host_collectives, p->host_collectives, "host collectives");
  same_str(c->device_collectives, p->device_collectives, "device collectives");
  same_str(c->mpi_threads, p->mpi_threads, "mpi threads");
  for (size_t i = 0; i < p->n_devices; i++) {
    const struct qdp_device_info *d = c->devices[i];
    const Qdp__Device *q = p->devices[i];
    FUZZ_CHECK(d && d->rank == q->rank && d->ordinal == q->ordinal &&
                   d->total_bytes == q->total_bytes && d->free_bytes == q->free_bytes &&
                   d->budget_bytes == q->budget_bytes && d->used_bytes == q->used_bytes &&
                   d->cc_major == q->cc_major && d->cc_minor == q->cc_minor &&
                   d->numa_node == q->numa_node,
               "device %zu", i);
    same_str(d->name, q->name, "device name");
    same_str(d->kind, q->kind, "device kind");
    same_str(d->uuid, q->uuid, "device uuid");
    same_str(d->model, q->model, "device model");
    same_str(d->host, q->host, "device host");
  }
  for (size_t i = 0; i < p->n_links; i++) {
    const struct qdp_link_info *l = c->links[i];
    const Qdp__Link *q = p->links[i];
    FUZZ_CHECK(l && l->from == q->from && l->to == q->to && l->nvlinks == q->nvlinks &&
                   l->peer == q->peer && l->perf_rank == q->perf_rank,
               "link %zu", i);
    same_str(l->kind, q->kind, "link kind");
  }
  for (size_t i = 0; i < p->n_rank_info; i++) {
    const struct qdp_rank_info *r = c->rank_info[i];
    const Qdp__RankInfo *q = p->rank_info[i];
    FUZZ_CHECK(r && r->rank == q->rank && r->devices == q->devices && r->lost == q->lost,
               "rank %zu", i);
    same_str(r->host, q->host, "rank host");
    same_str(r->reason, q->reason, "rank reason");
  }
}

/* Every reply message a unary call unpacks (client/libqdp/calls_reply.c). */
static const ProtobufCMessageDescriptor *const replies[] = {
    &qdp__state_info__descriptor,       &qdp__encode_reply__descriptor,
    &qdp__plan_reply__descriptor,       &qdp__list_reply__descriptor,
    &qdp__status_reply__descriptor,     &qdp__release_reply__descriptor,
    &qdp__export_reply__descriptor,     &qdp__health_reply__descriptor,
    &qdp__region_info__descriptor,      &qdp__unregister_region_reply__descriptor,
    &qdp__close_view_reply__descriptor,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* Three slices, as a reply may arrive in pieces. */
  size_t cut1 = size / 3, cut2 = 2 * size / 3;
  grpc_slice parts[3] = {
      grpc_slice_from_copied_buffer((const char *)data, cut1),
      grpc_slice_from_copied_buffer((const char *)data + cut1, cut2 - cut1),
      grpc_slice_from_copied_buffer((const char *)data + cut2, size - cut2),
  };
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(parts, 3);
  for (size_t i = 0; i < 3; i++) {
    grpc_slice_unref(parts[i]);
  }
  for (size_t i = 0; i < sizeof replies / sizeof replies[0]; i++) {
    ProtobufCMessage *m = qdp__unpack(bb, replies[i]);
    if (!m) {
      continue;
    }
    const ProtobufCMessageDescriptor *d = replies[i];
    if (d == &qdp__encode_reply__descriptor) {
      /* Encode and Gather take the state out of their reply. */
      const Qdp__StateInfo *st = ((const Qdp__EncodeReply *)m)->state;
      if (st) {
        struct qdp_state_info *s = qdp__reply_from_pb(&st->base);
        check_state(s, st);
        qdp_state_info_free(s);
      }
    } else if (d == &qdp__state_info__descriptor) {
      struct qdp_state_info *s = qdp__reply_from_pb(m);
      check_state(s, (const Qdp__StateInfo *)m);
      qdp_state_info_free(s);
    } else if (d == &qdp__plan_reply__descriptor) {
      struct qdp_plan_info *p = qdp__reply_from_pb(m);
      check_plan(p, (const Qdp__PlanReply *)m);
      qdp_plan_info_free(p);
    } else if (d == &qdp__list_reply__descriptor) {
      struct qdp_state_list *l = qdp__reply_from_pb(m);
      check_list(l, (const Qdp__ListReply *)m);
      qdp_state_list_free(l);
    } else if (d == &qdp__status_reply__descriptor) {
      struct qdp_server_status *s = qdp__reply_from_pb(m);
      check_status(s, (const Qdp__StatusReply *)m);
      qdp_server_status_free(s);
    } else {
      /* The calls read these replies' scalars and strings in place. */
      FUZZ_CHECK(qdp__reply_from_pb(m) == NULL, "%s has no libqdp struct", d->name);
    }
    protobuf_c_message_free_unpacked(m, NULL);
  }
  grpc_byte_buffer_destroy(bb);
  return 0;
}
