/* transport.h — the host communicator of a world of ranks (one qdpd per node): control messages
 * and scalars between the daemons, in-process (a world of one) or over MPI.
 *
 * What it owns: one communicator. Over MPI it is a duplicate of MPI_COMM_WORLD with
 * MPI_ERRORS_RETURN set, so an MPI failure comes back as QDP_ERR_MPI (cause = the MPI error
 * class, message = MPI's error string, rank = this rank) instead of aborting the process, and the
 * daemon's traffic never matches anyone else's messages.
 *
 * Memory: host memory only. Open MPI here is not CUDA-aware: never pass a device pointer (GPU
 * buffers go through NCCL). Buffers are the caller's, except where a function says it allocates
 * (transport_bcast_bytes on non-roots, transport_allgatherv); those are freed with free() and
 * transport_gathered_fini.
 *
 * Sizes are size_t. MPI counts are int, so every call is cut into pieces of at most
 * transport_chunk_bytes (default 1 GiB, never above INT_MAX); every rank must use the same value.
 *
 * Collectives: every rank of the world calls them in the same order with the same sizes and root
 * (a mismatch is an error in the caller, which MPI may or may not detect). A collective that
 * allocates agrees on the allocation first, so a rank that runs out of memory makes every rank
 * return the same failure instead of leaving the others waiting.
 *
 * Determinism: there is no reduction on floating point here on purpose. A sum of doubles must be
 * bit-identical for any sharding, which no MPI reduction promises: all-gather the partials
 * (transport_allgather_f64) and combine them in the caller's fixed order. Integer reductions are
 * exact and order-free, so transport_allreduce_u64 is offered.
 *
 * Threads: the daemon calls a transport from one thread (the MPI thread) unless
 * transport_threads() says TRANSPORT_THREADS_MULTIPLE was granted; even then, collectives on one
 * transport must not run concurrently (MPI requires them in one order on every rank), while
 * transport_send / transport_recv may come from several threads. The local transport has no shared
 * state and reports MULTIPLE.
 *
 * Statuses: QDP_OK; QDP_ERR_INVALID_ARGUMENT (bad root, peer, tag, NULL buffer, size that cannot be
 * represented); QDP_ERR_RESOURCE_EXHAUSTED (an allocation failed on some rank: every rank gets it,
 * with that rank's number); QDP_ERR_MPI; QDP_ERR_UNIMPLEMENTED (transport_mpi_create in a build
 * without MPI); QDP_ERR_FAILED_PRECONDITION (MPI already finalized). transport_agree returns the
 * status of the first failing rank, whatever it is.
 */
#ifndef QDP_TRANSPORT_H
#define QDP_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct transport; /* opaque */

enum transport_kind { TRANSPORT_LOCAL = 0, TRANSPORT_MPI = 1 };

/* What MPI granted (MPI_THREAD_SINGLE .. MPI_THREAD_MULTIPLE), in the same order. */
enum transport_threads {
  TRANSPORT_THREADS_SINGLE = 0,
  TRANSPORT_THREADS_FUNNELED = 1,
  TRANSPORT_THREADS_SERIALIZED = 2,
  TRANSPORT_THREADS_MULTIPLE = 3
};

enum transport_op { TRANSPORT_SUM = 0, TRANSPORT_MIN = 1, TRANSPORT_MAX = 2 };

/* The largest user tag: the minimum MPI guarantees for MPI_TAG_UB, so code that works over the
 * local transport works over any MPI. */
#define TRANSPORT_TAG_MAX 32767

/* The default piece of one MPI call: 1 GiB, a power of two below INT_MAX, so pieces of a large
 * buffer stay aligned. */
#define TRANSPORT_CHUNK_DEFAULT ((size_t)1 << 30)

/* A world of one rank, no MPI, no cost. Any thread. */
qdp_status transport_local_create(struct transport **ret, struct qdp_error *reterr);

/* Joins the MPI world: MPI_Init_thread asking MPI_THREAD_MULTIPLE (what was granted is recorded)
 * unless MPI is already initialized (then MPI_Query_thread); rank and size from a duplicate of
 * MPI_COMM_WORLD. argc/argv may be NULL. The thread that calls it is the MPI thread. */
qdp_status transport_mpi_create(int *argc, char ***argv, struct transport **ret,
                                struct qdp_error *reterr);

/* Frees the communicator; calls MPI_Finalize when this transport initialized MPI (MPI cannot be
 * initialized twice in a process: create the MPI transport once). Collective over MPI. NULL-safe.
 */
void transport_destroy(struct transport *t);

int transport_rank(const struct transport *t);
int transport_size(const struct transport *t);
enum transport_kind transport_kind(const struct transport *t);
const char *transport_kind_name(const struct transport *t); /* "local", "mpi" */
const char *transport_host(const struct transport *t);      /* this rank's host name */
enum transport_threads transport_threads(const struct transport *t);
/* "single", "funneled", "serialized", "multiple"; "unknown" otherwise. */
const char *transport_threads_name(enum transport_threads level);

/* The piece size of MPI calls (see above). Set it to the same value on every rank; 1..INT_MAX.
 * Small values exist for tests of the chunking; the default suits the daemon. */
size_t transport_chunk_bytes(const struct transport *t);
qdp_status transport_set_chunk_bytes(struct transport *t, size_t bytes, struct qdp_error *reterr);

/* Chunking arithmetic, pure: how many calls carry `bytes` in pieces of at most `chunk` (>= 1), and
 * the length of piece i. Zero bytes take zero pieces. Never overflows, even near SIZE_MAX. */
size_t transport_chunk_count(size_t bytes, size_t chunk);
size_t transport_chunk_len(size_t bytes, size_t chunk, size_t i);

/* Collectives: every rank calls them in the same order (see above). */
qdp_status transport_barrier(struct transport *t, struct qdp_error *reterr);

/* `bytes` (the same on every rank) from root's buf into everyone's buf. */
qdp_status transport_bcast(struct transport *t, void *buf, size_t bytes, int root,
                           struct qdp_error *reterr);

/* A variable-size message from root: root passes *buf and *bytes (unchanged); every other rank
 * gets *buf malloc'd (at least 1 byte, so a 0-byte message is a valid pointer; free() it) and
 * *bytes set. On failure non-roots get *buf = NULL, *bytes = 0. */
qdp_status transport_bcast_bytes(struct transport *t, void **buf, size_t *bytes, int root,
                                 struct qdp_error *reterr);

/* `bytes` (the same on every rank) from every rank to every rank, in rank order: ret holds
 * size * bytes; rank r's block is at ret + r * bytes. `mine` must not overlap ret. */
qdp_status transport_allgather(struct transport *t, const void *mine, size_t bytes, void *ret,
                               struct qdp_error *reterr);

/* All-gather of n doubles per rank into ret[size * n], bit for bit, rank r's at ret + r * n: the
 * way to combine floating-point partials in a fixed order (see Determinism above). */
qdp_status transport_allgather_f64(struct transport *t, const double *mine, size_t n, double *ret,
                                   struct qdp_error *reterr);

/* Element-wise exact reduction of n integers over all ranks into ret[n] (may alias mine). SUM
 * wraps modulo 2^64. */
qdp_status transport_allreduce_u64(struct transport *t, const uint64_t *mine, size_t n,
                                   enum transport_op op, uint64_t *ret, struct qdp_error *reterr);

/* The result of a variable-size all-gather: rank r's blob is data[offsets[r] .. + lengths[r]),
 * blobs packed in rank order. Caller-allocated; transport_gathered_fini frees what the gather
 * allocated and zeroes it. */
struct transport_gathered {
  int count;           /* the world size */
  size_t total;        /* the sum of lengths */
  size_t *offsets;     /* count entries */
  size_t *lengths;     /* count entries */
  unsigned char *data; /* total bytes (at least 1 allocated) */
};
void transport_gathered_fini(struct transport_gathered *g);

/* Each rank's blob of any size (`bytes` may differ per rank, 0 included) to every rank. ret is
 * filled on success and zeroed on failure. */
qdp_status transport_allgatherv(struct transport *t, const void *mine, size_t bytes,
                                struct transport_gathered *ret, struct qdp_error *reterr);

/* A decision taken together: every rank passes its status (and its error, may be NULL); every rank
 * returns the status of the first failing rank in rank order, with that rank's error in *reterr
 * (message prefixed "rank R: " in a world of more than one, rank = R), or QDP_OK when all passed.
 * Ranks that could disagree thereby reject together. A failure of the exchange
 * itself returns QDP_ERR_MPI. */
qdp_status transport_agree(struct transport *t, qdp_status mine, const struct qdp_error *my_err,
                           struct qdp_error *reterr);

/* Point to point, host memory only: streaming input slices and fetched ranges between ranks. A
 * rank never sends to itself (copy instead). tag is 0..TRANSPORT_TAG_MAX; messages between two
 * ranks with one tag arrive in the order sent. The receiver names the exact size sent: a shorter or
 * longer message is an error that names both sizes. */
qdp_status transport_send(struct transport *t, const void *buf, size_t bytes, int to, int tag,
                          struct qdp_error *reterr);
qdp_status transport_recv(struct transport *t, void *buf, size_t bytes, int from, int tag,
                          struct qdp_error *reterr);

/* Bounded point to point: the world protocol's primitive, so that a dead or hung peer can never
 * block the caller (a lost rank must fail the jobs that touch it within a bounded time, and Open
 * MPI launched with --enable-recovery leaves the survivors running but reports nothing: operations
 * towards a dead process simply never complete).
 *
 * One item per message, host memory only, sizes as in transport_send/recv (any size; cut into
 * pieces as above). transport_io_within posts every send and receive at once, then polls them until
 * all are done or timeout_ms have passed (0: wait forever). On timeout it cancels what is still
 * pending and returns QDP_ERR_UNAVAILABLE with rank = the first peer (in item order) whose message
 * did not complete, naming it and the time waited; items[i].done says which completed. A receive
 * that completed while it was being cancelled counts as done. A send that could not be cancelled
 * may still read its buffer later: the caller keeps a send buffer alive once a call timed out
 * (transport_io_within reports that with *ret_pinned = 1, may be NULL). */
struct transport_io {
  void *buf; /* const for sends */
  size_t bytes;
  int peer, tag;
  int send; /* 1: send buf to peer; 0: receive exactly bytes from peer */
  int done; /* out */
};
qdp_status transport_io_within(struct transport *t, struct transport_io *items, size_t n,
                               uint64_t timeout_ms, int *ret_pinned, struct qdp_error *reterr);

#endif /* QDP_TRANSPORT_H */
