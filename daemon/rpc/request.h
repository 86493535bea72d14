/* request.h — the pure part of translating requests: input shapes, output dtype, placement,
 * lifetimes, each refused with INVALID_ARGUMENT naming the request field. No server state and no
 * I/O. Any thread.
 */
#ifndef QDP_RPC_REQUEST_H
#define QDP_RPC_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "plan/plan.h"
#include "qdp.pb-c.h"

/* The shape of `nbytes` of input values: rows 0 means 1; cols 0 means nbytes / (rows * size).
 * INVALID_ARGUMENT ("<field>.dtype", ".rows", ".cols" or "<field>") for an unknown or unsupported
 * dtype, an empty input, a size that is not rows * cols * size, or an overflowing product. */
qdp_status rpc_input_shape(int dtype, uint64_t rows, uint64_t cols, uint64_t nbytes,
                           const char *field, uint64_t *ret_rows, uint64_t *ret_cols,
                           struct qdp_error *reterr);

/* The shape an input declares without its values (a Plan of data still to be streamed, or
 * EncodeUpload's first message): rows 0 means 1; cols is required. INVALID_ARGUMENT for an
 * unsupported dtype, cols 0, or a byte count past 64 bits. */
qdp_status rpc_declared_shape(int dtype, uint64_t rows, uint64_t cols, const char *field,
                              uint64_t *ret_rows, uint64_t *ret_cols, struct qdp_error *reterr);

/* The most bytes an upload declared as (dtype, rows, cols) may send: rows * cols * size when cols
 * is given (*ret_exact = true: it must send exactly that), else max_upload_bytes.
 * RESOURCE_EXHAUSTED when the declared size passes max_upload_bytes. */
qdp_status rpc_upload_limit(int dtype, uint64_t rows, uint64_t cols, uint64_t max_upload_bytes,
                            uint64_t *ret_limit, bool *ret_exact, struct qdp_error *reterr);

/* The state's dtype: COMPLEX64 or COMPLEX128; UNSPECIFIED means COMPLEX128. */
qdp_status rpc_output_dtype(int proto_dtype, qdp_dtype *ret, struct qdp_error *reterr);

/* The policy and the device subset of a placement (NULL = AUTO over every device). Device names
 * are matched against devs[].name; ret_subset must hold n entries; *ret_count 0 = every device. */
qdp_status rpc_placement(const Qdp__Placement *pl, const struct plan_device *devs, size_t n,
                         enum plan_policy *ret_policy, size_t *ret_subset, size_t *ret_count,
                         struct qdp_error *reterr);

/* A request's ttl in milliseconds (0 stays 0: the store's default), saturating. */
uint64_t rpc_ttl_ms(uint64_t ttl_seconds);

#endif /* QDP_RPC_REQUEST_H */
