/* identity.h — who a call is from, as the kernel or a bearer token says (never as the caller says):
 * on the Unix socket the peer credentials the listener recorded (rpc/listener.h), filed as
 * "uid:<n>"; on TCP the principal of the token in "authorization: Bearer <token>", compared in
 * constant time over its full length, filed as "tcp:<principal>". The "qdp-client" metadata is
 * only a label in logs.
 *
 * Owns the table of TCP principals and tokens (read at create from tcp_token and
 * tcp_tokens_file, constant after). rpc_identify and rpc_authorize run on the completion-queue
 * thread as a call arrives; rpc_caller on whatever thread serves it.
 */
#ifndef QDP_RPC_IDENTITY_H
#define QDP_RPC_IDENTITY_H

#include <stddef.h>
#include <sys/types.h>

#include "call.h"
#include "config.h"
#include "error.h"
#include "job/job.h"
#include "listener.h"

/* A TCP principal and its bearer token. */
struct rpc_token {
  char principal[49];
  char *token;
};

struct rpc_tokens {
  struct rpc_token *v;
  size_t n;
  /* Mutual TLS: a caller without a token is the subject of its verified client certificate. */
  bool x509;
};

/* tcp_token (principal "tcp") and every "PRINCIPAL TOKEN" line of tcp_tokens_file ('#' comments
 * and blank lines skipped) into t (empty first; freed with rpc_tokens_free, also on failure).
 * PERMISSION_DENIED for a file others may write or nobody may read, NOT_FOUND for one that is
 * not there, INVALID_ARGUMENT naming the line for one that is not 'PRINCIPAL TOKEN' or repeats a
 * principal. */
qdp_status rpc_tokens_load(const struct config *cfg, struct rpc_tokens *t,
                           struct qdp_error *reterr);
void rpc_tokens_free(struct rpc_tokens *t);

/* The call's peer, and for a Unix caller its identity: c->peer, tcp, ucred, owner, operator (the
 * daemon's own uid `euid` or root) and its label for logs (c->client). */
void rpc_identify(struct rpc_call *c, struct rpc_listener *l, uid_t euid);
/* A TCP call's identity from its token: owner "tcp:PRINCIPAL" and its label; UNAUTHENTICATED
 * naming the method when it has no token t knows. QDP_OK at once for a Unix caller. */
qdp_status rpc_authorize(struct rpc_call *c, const struct rpc_tokens *t, struct qdp_error *reterr);

/* The caller as job/ takes it: its identity, its process, the session its request names for what
 * it makes (Encode, EncodeUpload, Gather, RegisterRegion), and whether it still waits (it left,
 * or its deadline passed). */
struct job_caller rpc_caller(const struct rpc_call *c);

#endif /* QDP_RPC_IDENTITY_H */
