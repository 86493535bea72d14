/* reflection.h — gRPC server reflection (grpc.reflection.v1 and v1alpha), so that grpcurl and
 * other generic clients find qdpd's services and types without the proto files. Answers come
 * from the descriptor set built into qdpd (proto/embed.py). Owns nothing beyond each stream's
 * batches; completion-queue thread.
 */
#ifndef QDP_RPC_REFLECTION_H
#define QDP_RPC_REFLECTION_H

#include "call.h"

/* A reflection stream that arrived: answers each request until the client closes its side. */
void rpc_reflection_begin(struct rpc_call *c);

#endif /* QDP_RPC_REFLECTION_H */
