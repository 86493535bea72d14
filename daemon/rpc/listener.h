/* listener.h — qdpd's Unix socket: the daemon accepts every connection itself, learns who is on
 * the other end from the kernel, and only then hands the connection to gRPC.
 *
 * Why: gRPC's own Unix listener tells a call nothing about its peer, and identity must come from
 * the kernel, never from what a client says (docs/trust-boundary.md). Each accepted connection's
 * peer credentials (SO_PEERCRED: uid, gid, pid) are recorded under its descriptor before
 * grpc_server_add_channel_from_fd takes it; a call's peer then reads "fd:<n>", and
 * rpc_listener_peer answers for it. A descriptor number is reused only after gRPC closed the
 * connection, which it does only after every call on it is destroyed, so a call in hand always
 * finds its own connection's record.
 *
 * The same socket also takes descriptors clients hand over (state/tickets.h): a connection whose
 * first bytes are the handoff header instead of HTTP/2's preface carries one descriptor
 * (SCM_RIGHTS), which the listener checks and files under a ticket for the sender's identity,
 * answers with one line and closes:
 *
 *   client -> daemon   16 bytes in one sendmsg: "QDPFD/1\n", u32 access (1 read, 2 write),
 *                      u32 0 (little-endian), with exactly one descriptor attached
 *   daemon -> client   "OK <ticket>\n" or "ERR <STATUS_NAME> <message>\n"
 *
 * and hands the descriptors of views back (rpc/reply.c files them under tickets of their caller):
 *
 *   client -> daemon   one sendmsg, no descriptor: "QDPFD/1\n", u32 3 (take), u32 length, then
 *                      that many bytes of the ticket
 *   daemon -> client   "OK\n" with the descriptor attached, or "ERR <STATUS_NAME> <message>\n"
 *
 * Threads: create, start, stop and destroy on the loop thread, which also accepts; peer from any
 * thread.
 */
#ifndef QDP_RPC_LISTENER_H
#define QDP_RPC_LISTENER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <grpc/grpc.h>
#include <uv.h>

#include "error.h"

struct fd_tickets;
struct rpc_listener;

/* The kernel's word on a Unix caller: its credentials and a pidfd of its process (SO_PEERPIDFD,
 * else pidfd_open(2) of SO_PEERCRED's pid right after accept; -1 where the kernel has neither).
 * The pidfd is the listener's, open while the connection is: a call borrows it and duplicates
 * what it keeps (capability.h). */
struct rpc_peer {
  uid_t uid;
  gid_t gid;
  pid_t pid;
  int pidfd;
};

/* The identity key a Unix peer's states, regions, tickets and quotas are filed under. */
void rpc_peer_key(const struct rpc_peer *p, char *buf, size_t len);

struct rpc_listener_opts {
  const char *path;  /* the socket's path */
  unsigned mode;     /* its permission bits (0660: owner and group connect) */
  const char *group; /* its group by name or number; "" keeps the daemon's */
};

/* Binds the socket (replacing a stale one: the caller holds the single-instance lock) with the
 * given mode and group. UNAVAILABLE naming the path when it cannot be bound, INVALID_ARGUMENT
 * for an unknown group or a path too long for a Unix socket. Loop thread. */
qdp_status rpc_listener_create(uv_loop_t *loop, const struct rpc_listener_opts *opts,
                               grpc_server *server, struct fd_tickets *tickets,
                               struct fd_tickets *view_tickets, struct rpc_listener **ret,
                               struct qdp_error *reterr);

/* Starts accepting (after grpc_server_start). Loop thread. */
qdp_status rpc_listener_start(struct rpc_listener *l, struct qdp_error *reterr);

/* Stops accepting and drops connections not yet handed to gRPC; done(arg) runs on the loop
 * thread once every handle is closed. Connections gRPC has keep serving until it ends them.
 * Loop thread. */
void rpc_listener_stop(struct rpc_listener *l, void (*done)(void *arg), void *arg);

/* Closes the socket and frees the listener; it must have been stopped (or never started) and the
 * loop run until done. Removes the socket file. NULL-safe. */
void rpc_listener_destroy(struct rpc_listener *l);

/* The peer of a call whose gRPC peer string is `grpc_peer` ("fd:<n>"): false when the call did
 * not come through this listener (TCP). Any thread. */
bool rpc_listener_peer(struct rpc_listener *l, const char *grpc_peer, struct rpc_peer *ret);

#endif /* QDP_RPC_LISTENER_H */
