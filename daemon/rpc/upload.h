/* upload.h — EncodeUpload's receiving side: the first message declares the request, the later
 * ones append data into one host buffer, bounded by the declared size, max_upload_bytes and the
 * upload budgets (job/'s admission); a complete upload goes to the call's worker job (the
 * encode), a short or idle one is answered and never encoded.
 *
 * Owns the server's list of uploads in flight (uploads_mu, uploads) and each call's `up`.
 * Completion-queue thread but where a function says otherwise.
 */
#ifndef QDP_RPC_UPLOAD_H
#define QDP_RPC_UPLOAD_H

#include <stddef.h>

#include "call.h"

/* An EncodeUpload that arrived: starts receiving (its job, c->job, set). */
void rpc_upload_begin(struct rpc_call *c);
/* Gives back the upload's buffer, request and budget. Any thread; idempotent. */
void rpc_upload_free(struct rpc_call *c);
/* Its client left: a verdict pending is CANCELLED. Any thread. */
void rpc_upload_closed(struct rpc_call *c);
/* Cancels the uploads idle past upload_idle_timeout and gives the pending verdicts. Loop
 * thread, every second. */
void rpc_upload_sweep(struct rpc_server *s);
/* Uploads being received now. Any thread. */
size_t rpc_upload_receiving(struct rpc_server *s);

#endif /* QDP_RPC_UPLOAD_H */
