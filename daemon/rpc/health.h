/* health.h — whether the daemon serves: qdp.Qdp/Health, the standard grpc.health.v1 Check and its
 * Watch stream. The daemon ("") and its service "qdp.Qdp" serve until the drain on SIGTERM, and
 * not while a rank of the world is lost (its jobs fail until a restart). A probe needs no token:
 * it learns only whether the daemon serves.
 *
 * Owns the list of Watch streams open (the server's watch_mu and watchers, and each call's
 * watch_*). The answers and a Watch's arrival run on the completion-queue thread; the sweep on
 * any thread (the loop every second, and when a drain starts).
 */
#ifndef QDP_RPC_HEALTH_H
#define QDP_RPC_HEALTH_H

#include "call.h"

/* What Check and Watch answer for `service`: SERVING while the daemon serves and its world is
 * whole, NOT_SERVING while it drains or has lost a rank; SERVICE_UNKNOWN (Watch only: Check
 * answers NOT_FOUND) for a service other than "" and "qdp.Qdp". */
int rpc_serving_status(struct rpc_server *s, const char *service);

/* qdp.Qdp/Health: SERVING, or NOT_SERVING once the drain began. */
void rpc_health_answer(struct rpc_call *c);
/* grpc.health.v1.Health/Check; NOT_FOUND for a service not served here. */
void rpc_health_check(struct rpc_call *c);
/* grpc.health.v1.Health/Watch: sends the status now, then each change, until the client leaves
 * or the drain's NOT_SERVING went out (then the stream ends OK). */
void rpc_health_watch(struct rpc_call *c);
/* Looks at every watcher for a change to send or an end. */
void rpc_health_sweep(struct rpc_server *s);

#endif /* QDP_RPC_HEALTH_H */
