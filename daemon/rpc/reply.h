/* reply.h — packing what job/ answers into the messages of qdp.proto: a state's StateInfo (its
 * shards, views and lifetime), a plan with each device's arithmetic, a list of states, the
 * daemon's Status. Everything a message points to lives in an arena, freed at once after
 * packing. Owns nothing past a call; whatever thread serves it.
 */
#ifndef QDP_RPC_REPLY_H
#define QDP_RPC_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "error.h"
#include "job/job.h"
#include "qdp.pb-c.h"

struct rpc_call;
struct rpc_server;

/* A reply's memory: blocks freed together. A failed allocation sets `failed` (and gives NULL). */
struct rpc_arena {
  struct arena_blk *head;
  bool failed;
};
void *rpc_arena_alloc(struct rpc_arena *a, size_t n);
char *rpc_arena_str(struct rpc_arena *a, const char *s); /* "" when it failed */
void rpc_arena_free(struct rpc_arena *a);
/* RESOURCE_EXHAUSTED when an allocation failed. */
qdp_status rpc_arena_check(const struct rpc_arena *a, struct qdp_error *reterr);

/* A StateInfo of a live state, its token and views when the info has them; NULL without memory. */
Qdp__StateInfo *rpc_state_info(struct rpc_server *s, struct rpc_arena *a,
                               const struct job_state_info *st);
/* Packs a state's info as a StateInfo (Describe) or inside an EncodeReply (Encode, Gather) for
 * call c, its views' descriptors filed under tickets of the caller (Shard.view_ticket), then ends
 * the info: a new state whose reply could not be built is released. NULL with *reterr set when
 * it could not be built. */
grpc_byte_buffer *rpc_state_reply(struct rpc_call *c, struct job_state_info *st, bool encode,
                                  struct qdp_error *reterr);
/* The most a reply of EncodeRequest.reply_amplitudes carries. */
#define RPC_REPLY_AMPLITUDES_MAX (UINT64_C(64) << 20)
/* An EncodeReply carrying every amplitude of st's new state (and its layout, no handle or token),
 * then ends the info, which releases the state: nothing names it. NULL with *reterr set above
 * RPC_REPLY_AMPLITUDES_MAX (INVALID_ARGUMENT "reply_amplitudes") or when it could not be read. */
grpc_byte_buffer *rpc_amplitudes_reply(struct rpc_server *s, struct job_state_info *st,
                                       struct qdp_error *reterr);
/* A PlanReply: the shards, every device's need, and why it does not fit (why->code not OK). */
grpc_byte_buffer *rpc_plan_reply(struct rpc_server *s, struct rpc_arena *a, const struct plan *p,
                                 const struct qdp_error *why);

/* The states of a List, one StateInfo each (rpc_list_one is job_list's callback, called under
 * the store's lock: it only copies). */
struct rpc_list {
  struct rpc_server *s;
  struct rpc_arena *a;
  Qdp__StateInfo **items;
  size_t n, cap;
  bool failed;
};
void rpc_list_one(const struct job_state_info *st, void *arg);

/* The StatusReply of st and the server's own figures (version, uptime, budget, jobs). */
grpc_byte_buffer *rpc_status_reply(struct rpc_server *s, const struct job_status *st,
                                   struct qdp_error *reterr);

#endif /* QDP_RPC_REPLY_H */
