/* codec.h — protobuf-c messages <-> gRPC byte buffers, qdp statuses <-> gRPC statuses, and the
 * error detail of a failed call.
 *
 * Pure translation: no server state, no logging. Any thread.
 * Packing a message and writing a FetchChunk are common/qdp_wire.h's (qdp_wire_pack,
 * qdp_wire_fetch_chunk), shared with libqdp, which reads chunks with the same codec.
 * Ownership: rpc_codec_unpack returns a message the caller frees with rpc_codec_free.
 */
#ifndef QDP_RPC_CODEC_H
#define QDP_RPC_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#include "error.h"

/* The trailing-metadata key that carries a serialized qdp.ErrorDetail on a failed call. */
#define RPC_ERROR_DETAIL_KEY "qdp-error-bin"

/* Parses bb (any number of slices, compressed or not) as a message of descriptor d.
 * INVALID_ARGUMENT (field "request") when bb is NULL or not a valid message of that type, and
 * (field: its name) when a string field, at any depth, holds a NUL byte: C strings would read it
 * cut short (a token "TOKEN\0junk" as "TOKEN"). */
qdp_status rpc_codec_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
                            ProtobufCMessage **ret, struct qdp_error *reterr);
/* Parses raw bytes; as rpc_codec_unpack. */
qdp_status rpc_codec_unpack_bytes(const uint8_t *data, size_t len,
                                  const ProtobufCMessageDescriptor *d, ProtobufCMessage **ret,
                                  struct qdp_error *reterr);
void rpc_codec_free(ProtobufCMessage *m); /* NULL-safe */

/* The gRPC status of a qdp status: the same number for 0..16, INTERNAL for the local causes
 * (>= 100) and for anything unknown. */
grpc_status_code rpc_codec_grpc_status(qdp_status s);

/* e as a serialized qdp.ErrorDetail (code name, field, rank, device, cause, bytes), in a new slice
 * the caller unrefs. */
grpc_slice rpc_codec_error_detail(const struct qdp_error *e);

#endif /* QDP_RPC_CODEC_H */
