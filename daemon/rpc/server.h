/* server.h — qdpd's gRPC server: it listens, unpacks each call of proto/qdp.proto into a call of
 * the job pipeline (job/job.h) and packs its answer. Planning, admission, commits, release
 * policy and devices live in job/; here are the wire, identity and the trust boundary (who the
 * caller is, and the descriptors it handed over).
 *
 * Threads (docs/design.md, threads):
 *  - the loop thread (the caller's libuv loop) owns the server's lifecycle: create, start,
 *    shutdown, destroy, apply_config, the expiry and drain timers;
 *  - one completion-queue thread blocks in grpc_completion_queue_next and runs every completed
 *    operation's handler itself: it unpacks requests, checks identity and auth (the standard
 *    grpc.health.v1 Check needs none: a probe sends no token), answers Health, that Check and
 *    the cheap calls (Plan, Describe, List, Status, encodes of states up to 1 MiB from inline
 *    input), and hands the rest to the workers. Relaying through the loop cost a thread hop per
 *    operation, most of a small job's round trip; only the drained queue is reported to the loop
 *    (a locked list + uv_async_send);
 *  - `workers` worker threads (config) run the jobs that may block: large encodes, fetch reads,
 *    export, release (device frees), uploads' encodes, expiry. A job answers its call with
 *    grpc_call_start_batch itself; at most one batch of a call is ever being started at a time.
 *
 * Conventions on the wire (shared with the clients):
 *  - A failed call's gRPC status is its qdp_status (1..16; local causes >= 100 as INTERNAL), the
 *    details are the qdp_error message, and the trailing metadata "qdp-error-bin" carries a
 *    serialized qdp.ErrorDetail.
 *  - A caller's identity comes from the kernel, never from what it says: on the Unix socket its
 *    peer credentials (rpc/listener.h: uid, gid, pid), filed as "uid:<n>"; on TCP the principal
 *    of the bearer token it presents ("authorization: Bearer <token>", compared in constant time
 *    over its full length), filed as "tcp:<principal>". Ownership, per-client budgets and
 *    listing key on it; the "qdp-client" metadata is only a label in logs.
 *  - Node-local inputs and outputs (files, shared memory, regions, Export) of a Unix caller are
 *    descriptors it opened and handed over (state/tickets.h); a TCP caller names only files
 *    beneath input_dir / export_dir, opened beneath those folders (tcp_node_paths).
 *  - Unknown methods are UNIMPLEMENTED; malformed messages INVALID_ARGUMENT.
 */
#ifndef QDP_RPC_SERVER_H
#define QDP_RPC_SERVER_H

#include <stdint.h>

#include <uv.h>

#include "config.h"
#include "error.h"

struct io_file_id;
struct runtime_mesh;
struct state_store;
struct world;

struct rpc_server_deps {
  const struct config *cfg; /* read at create; runtime-changeable values again at apply_config */
  const struct io_file_id *own_files; /* at most QDP_OWN_FILES_MAX (qdp_limits.h) */
  size_t nown;
  struct runtime_mesh *mesh;
  struct world *world; /* the ranks this coordinator plans over (a world of one without MPI) */
  struct state_store *store;
  uv_loop_t *loop;
};

struct rpc_server;

/* Initializes gRPC, creates the server and binds `unix:<unix_path>` (when unix_path is non-empty;
 * with cfg->socket_mode and cfg->socket_group) and cfg->tcp (when set; its tokens read from
 * cfg->tcp_token and cfg->tcp_tokens_file). *ret_tcp_port (may be NULL) gets the bound TCP
 * port, 0 without TCP. UNAVAILABLE naming the address when a bind fails (in use, or no
 * permission); INVALID_ARGUMENT or NOT_FOUND for a tokens file or folder that cannot be used.
 * Loop thread. */
qdp_status rpc_server_create(const struct rpc_server_deps *deps, const char *unix_path,
                             struct rpc_server **ret_server, int *ret_tcp_port,
                             struct qdp_error *reterr);

/* The port the metrics listener (cfg->metrics_listen, bound at create) serves on; 0: off. */
int rpc_server_metrics_port(const struct rpc_server *s);

/* Starts serving: worker threads, the completion-queue thread, the expiry timer. Loop thread. */
qdp_status rpc_server_start(struct rpc_server *s, struct qdp_error *reterr);

/* Begins a graceful shutdown: no new calls; calls in flight finish (those still running after
 * cfg->shutdown_timeout seconds are cancelled); then the threads stop and done(arg) runs on the
 * loop thread, after which rpc_server_destroy may be called. When jobs are still running a
 * second after they were cancelled (an encode deep in its kernels), overdue(arg) runs instead
 * (may be NULL): the caller decides how to end without them, so shutdown_timeout bounds the
 * exit. Idempotent; a second call cancels every call in flight at once. Loop thread. */
void rpc_server_shutdown(struct rpc_server *s, void (*done)(void *arg), void (*overdue)(void *arg),
                         void *arg);

/* Frees everything; the loop must have closed the server's handles (run the loop until done
 * fires). NULL-safe; also safe on a server that was never started. Shuts gRPC down. */
void rpc_server_destroy(struct rpc_server *s);

/* Applies the runtime-changeable limits of cfg (max_qubits, max_batch, max_upload_bytes,
 * upload_budget, fetch_chunk). Loop thread. */
void rpc_server_apply_config(struct rpc_server *s, const struct config *cfg);
/* SIGHUP: re-reads the TLS files cfg names, for new handshakes (tls.h); connections made before
 * keep theirs. Logs what it did, or why the certificates in use stay. Loop thread. */
void rpc_server_reload_tls(struct rpc_server *s, const struct config *cfg);

/* Routes gRPC's own log lines into daemon/log (subsystem "grpc"); call before the first gRPC
 * call. */
void rpc_route_grpc_logs(void);

#endif /* QDP_RPC_SERVER_H */
