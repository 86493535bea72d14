/* handlers.h — the worker jobs that serve qdp.Qdp's methods: each unpacks its request (access.h),
 * calls job/ and answers with what reply.h packs. Owns each Fetch stream's `fetch` while it
 * runs. A worker thread runs them, or the completion-queue thread the calls the server runs
 * inline (cheap reads and small encodes).
 */
#ifndef QDP_RPC_HANDLERS_H
#define QDP_RPC_HANDLERS_H

#include "call.h"
#include "pool.h"

/* The job that serves each method, by enum rpc_method_id (its call in j->call); NULL for those
 * answered elsewhere (Health, grpc.health.v1: health.h; reflection: reflection.h). */
extern void (*const rpc_handlers[RPC_M_COUNT])(struct rpc_job *j);

#endif /* QDP_RPC_HANDLERS_H */
