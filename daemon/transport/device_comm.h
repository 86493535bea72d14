/* device_comm.h — device collectives over NCCL: one communicator per GPU of a group (the GPUs of
 * one process: ncclCommInitAll; or the GPUs of several processes: a unique id every process gets
 * from the coordinator, each joining with all of its GPUs), created once and reused by every job.
 *
 * Buffers are device memory of the member's GPU; calls enqueue work on the caller's CUDA stream
 * (a cudaStream_t passed as void *) and return without waiting for it. Every member of a group
 * must make the same calls in the same order, each from the thread driving that member's GPU
 * (members of one process may be driven by different threads at once).
 *
 * No floating-point reduction is offered on purpose: qdp's sums must be bit-identical whatever
 * the sharding, which no NCCL reduction promises. All-gather the partials and combine them in a
 * fixed order (runtime/norm.h).
 *
 * A group across processes is bounded in time: no call waits for another process longer than the
 * group's timeout. A member that does not join, or a collective that does not complete in time
 * (device_comm_wait), aborts the group here (ncclCommAbort): every later call fails at once with
 * QDP_ERR_UNAVAILABLE, and device_comm_usable says so. A group of one process never times out.
 *
 * Statuses: QDP_OK; QDP_ERR_NCCL (cause = the ncclResult_t, message = NCCL's error string and the
 * member's GPU); QDP_ERR_UNAVAILABLE (timed out, or aborted earlier); QDP_ERR_CUDA (the stream
 * failed); QDP_ERR_INVALID_ARGUMENT (bad member or peer); QDP_ERR_UNIMPLEMENTED (built without
 * CUDA/NCCL).
 */
#ifndef QDP_DEVICE_COMM_H
#define QDP_DEVICE_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct device_comm; /* opaque */

#define DEVICE_COMM_ID_BYTES 128 /* ncclUniqueId */

/* A group of the GPUs `ordinals[0..n)` of this process; member i drives ordinals[i]. */
qdp_status device_comm_create_local(const int *ordinals, size_t n, struct device_comm **ret,
                                    struct qdp_error *reterr);
/* The id a coordinator makes and sends (over MPI) to every member of a cross-process group. */
qdp_status device_comm_unique_id(unsigned char id[DEVICE_COMM_ID_BYTES], struct qdp_error *reterr);
/* This process's members first_member .. first_member + n - 1 of a group of `size`, member
 * first_member + i on GPU ordinals[i]. Returns once every member of every process has joined and
 * every pair of members is connected (so that no later call waits for a peer on the host), or
 * after timeout_ms with QDP_ERR_UNAVAILABLE (the join goes on in a thread of its own, which drops
 * it whenever it ends). timeout_ms 0: no bound on joining or on device_comm_wait. */
qdp_status device_comm_create_members(const unsigned char id[DEVICE_COMM_ID_BYTES], int size,
                                      int first_member, const int *ordinals, size_t n,
                                      uint64_t timeout_ms, struct device_comm **ret,
                                      struct qdp_error *reterr);
void device_comm_destroy(struct device_comm *c); /* NULL-safe; no call may be in flight */

/* Members held by this process, the group's size, and the group number of local member 0. */
size_t device_comm_local_members(const struct device_comm *c);
int device_comm_size(const struct device_comm *c);
int device_comm_first_member(const struct device_comm *c);

/* Waits until everything queued on `stream` (local member `local`'s) is done. In a group across
 * processes the wait is bounded by the group's timeout and watches NCCL's error state: a timeout
 * or an error aborts the group (see above). */
qdp_status device_comm_wait(struct device_comm *c, size_t local, void *stream,
                            struct qdp_error *reterr);
/* False once the group was aborted. */
bool device_comm_usable(const struct device_comm *c);

/* Local member `local` contributes `count` doubles at send; recv receives size * count doubles in
 * member order. */
qdp_status device_comm_allgather_f64(struct device_comm *c, size_t local, const double *send,
                                     double *recv, size_t count, void *stream,
                                     struct qdp_error *reterr);

/* The same for every local member at once, from one thread (NCCL group): member i sends send[i]
 * and receives into recv[i] on streams[i]. */
qdp_status device_comm_allgather_f64_all(struct device_comm *c, const double *const *send,
                                         double *const *recv, size_t count, void *const *streams,
                                         struct qdp_error *reterr);

/* Local members la and lb swap `bytes`: la's send_a lands in lb's recv_b and lb's send_b in la's
 * recv_a, each on its member's stream, from one thread (NCCL group). */
qdp_status device_comm_swap(struct device_comm *c, size_t la, const void *send_a, void *recv_a,
                            size_t lb, const void *send_b, void *recv_b, size_t bytes,
                            void *stream_a, void *stream_b, struct qdp_error *reterr);

/* Local member `local` sends `bytes` at send to member `peer` and receives as many from it into
 * recv, as one step (no deadlock whoever calls first). */
qdp_status device_comm_exchange(struct device_comm *c, size_t local, int peer, const void *send,
                                void *recv, size_t bytes, void *stream, struct qdp_error *reterr);

/* NCCL's version as NCCL encodes it (22803 for 2.28.3); 0 without NCCL. */
int device_comm_nccl_version(void);

#endif /* QDP_DEVICE_COMM_H */
