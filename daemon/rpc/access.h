/* access.h — the trust boundary of a request (docs/trust-boundary.md): what it names on the
 * daemon's node (files, shared memory, regions, a GPU allocation), resolved to what the caller
 * may reach, and its fields as job/ takes them. A Unix caller's node-local objects are
 * descriptors it opened and handed over (state/tickets.h): the daemon opens nothing for it. A
 * TCP caller names only files beneath input_dir / export_dir with tcp_node_paths on, and no
 * shared memory or GPU memory at all.
 *
 * Owns nothing: a descriptor it returns is the caller's to close. Whatever thread serves the
 * call.
 */
#ifndef QDP_RPC_ACCESS_H
#define QDP_RPC_ACCESS_H

#include <stddef.h>

#include "call.h"
#include "error.h"
#include "io/map.h"
#include "job/job.h"
#include "state/tickets.h"

/* The descriptor a Unix caller handed over under `ticket` for `access`, which must not be one of
 * the daemon's own files; PERMISSION_DENIED (`field`) for a TCP caller and for none handed over.
 * `what` names the object in messages. */
qdp_status rpc_take_fd(const struct rpc_call *c, const char *ticket, enum fd_access access,
                       const char *what, const char *field, int *ret_fd, struct qdp_error *reterr);
/* Whether a TCP caller may name a file beneath `folder` (the option `option` set, tcp_node_paths
 * on); PERMISSION_DENIED naming `field` if not. */
qdp_status rpc_check_tcp_path(const struct rpc_call *c, const struct io_folder *folder,
                              const char *option, const char *field, struct qdp_error *reterr);
/* How messages name a client's shared memory: by what the caller says it opened. */
void rpc_shm_what(const char *name, int pid, int fd, char *buf, size_t len);

/* A request's input as job/ takes it, a descriptor taken for a file or shared memory; `field`
 * names it in refusals ("input", "input_b": a string that outlives the job), `what` (what_len
 * bytes) holds how messages name shared memory. An input with no source is a declared shape
 * (QDP_SOURCE_NONE). */
qdp_status rpc_input_of(const struct rpc_call *c, const Qdp__Input *in, const char *field,
                        struct job_input *ret, char *what, size_t what_len,
                        struct qdp_error *reterr);
/* Where a request asks its values written instead of sent or kept, into *ret (*ret_ptr then
 * points to it; left as it is when o is absent): a CUDA allocation of a caller on this node, like
 * input.cuda_ipc. PERMISSION_DENIED (field "out") over TCP. */
qdp_status rpc_output_of(const struct rpc_call *c, const Qdp__CudaIpcOutput *o,
                         struct job_output *ret, const struct job_output **ret_ptr,
                         struct qdp_error *reterr);
/* The request's fields as job/ takes them but its input; an `out` into *out (ret->out then
 * points to it). */
qdp_status rpc_encode_request_of(const struct rpc_call *c, const Qdp__EncodeRequest *r,
                                 struct job_encode_request *ret, struct job_output *out,
                                 struct qdp_error *reterr);

#endif /* QDP_RPC_ACCESS_H */
