/* tls.h — TLS on the TCP listener: the server's certificate chain and key, and under mutual TLS
 * the CAs that clients' certificates must chain to, read from the files tcp_tls_cert, tcp_tls_key
 * and tcp_tls_client_ca name.
 *
 * The credentials take their certificates through gRPC core's certificate-config fetcher, which
 * gRPC asks before each new handshake: it answers "unchanged" until rpc_tls_reload has read and
 * checked a new set, then hands that set over once. So a SIGHUP changes what new connections are
 * shown, while connections already made, and the calls on them, go on with what they agreed.
 *
 * Every file is checked before it is used: it must be readable, hold PEM the way its option says
 * (a certificate, a private key, CA certificates), and the key must be the certificate's. A
 * failure at create refuses the start; at reload it keeps the set in use and says why.
 *
 * rpc_tls_create and rpc_tls_reload run on the loop thread; the fetcher on gRPC's threads.
 */
#ifndef QDP_RPC_TLS_H
#define QDP_RPC_TLS_H

#include <stdbool.h>

#include <grpc/grpc_security.h>

#include "config.h"
#include "error.h"

struct rpc_tls;

/* Reads and checks cfg's tcp_tls_cert, tcp_tls_key and tcp_tls_client_ca (the first two must be
 * set). NOT_FOUND or PERMISSION_DENIED for a file that cannot be read, INVALID_ARGUMENT for one
 * that holds no PEM of its kind or a key that is not the certificate's; each message names the
 * option, the path and the reason. */
qdp_status rpc_tls_create(const struct config *cfg, struct rpc_tls **ret, struct qdp_error *reterr);

/* Server credentials that take their certificates from t (t must outlive the server they are
 * added to). The caller releases them after adding the port. */
grpc_server_credentials *rpc_tls_credentials(struct rpc_tls *t);

/* Whether clients must present a certificate that chains to tcp_tls_client_ca. */
bool rpc_tls_mutual(const struct rpc_tls *t);

/* Reads and checks the files cfg names now; when they are good, new handshakes use them. On
 * failure the certificates in use stay, and reterr says why (as rpc_tls_create); turning mutual
 * TLS on or off takes a restart (FAILED_PRECONDITION). */
qdp_status rpc_tls_reload(struct rpc_tls *t, const struct config *cfg, struct qdp_error *reterr);

/* After the server that used t is destroyed. NULL is allowed. */
void rpc_tls_destroy(struct rpc_tls *t);

#endif /* QDP_RPC_TLS_H */
