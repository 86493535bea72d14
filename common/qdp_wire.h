/* qdp_wire.h — what qdpd and libqdp both put on the wire beyond protobuf-c itself: a message
 * packed into a gRPC byte buffer, and the FetchChunk layout that lets a fetch move its amplitudes
 * once (qdpd writes them straight into the message, libqdp copies them straight out of the
 * received slices).
 *
 * Layout: FetchChunk {offset = 1, data = 2, dtype = 3, total = 4} written as offset, dtype, total
 * (varints), then data (length-delimited) last, filling the rest of the message. Any other order
 * is still a valid FetchChunk; a reader that finds one falls back to protobuf-c.
 * Ownership: the byte buffers returned are the caller's (grpc_byte_buffer_destroy, or handed to a
 * SEND_MESSAGE op and destroyed after). A reader borrows its byte buffer until it is closed.
 * No globals, no logging; any thread.
 */
#ifndef QDP_WIRE_H
#define QDP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <protobuf-c/protobuf-c.h>

/* Serializes m into a new one-slice byte buffer. */
grpc_byte_buffer *qdp_wire_pack(const ProtobufCMessage *m);

/* Bytes of FetchChunk's fields other than data, at most: the header written before the data. */
#define QDP_WIRE_FETCH_CHUNK_HEADER_MAX 48

/* A FetchChunk {offset, dtype, total, data} laid out around data_bytes bytes of data that the
 * caller writes afterwards at *ret_data, valid until the buffer is destroyed. */
grpc_byte_buffer *qdp_wire_fetch_chunk(uint64_t offset, int dtype, uint64_t total,
                                       size_t data_bytes, uint8_t **ret_data);

/* A cursor over the slices of a received byte buffer. */
struct qdp_wire_reader {
  grpc_byte_buffer_reader r;
  int open;       /* r was initialised */
  grpc_slice cur; /* the slice being read, when `have` */
  int have;
  size_t pos;        /* in cur */
  uint64_t consumed; /* bytes read so far */
};

struct qdp_wire_chunk {
  uint64_t offset, total; /* amplitudes */
  int dtype;
  uint64_t data_len; /* bytes of data that follow */
};

/* Opens a reader on bb and reads a FetchChunk's fields if it has the layout above: then returns
 * 1 with *ret filled and the reader at the data (qdp_wire_reader_copy takes it). 0 for any other
 * layout (or a buffer that cannot be read): unpack it with protobuf-c instead. Close the reader
 * in either case. */
int qdp_wire_fetch_chunk_open(grpc_byte_buffer *bb, struct qdp_wire_reader *k,
                              struct qdp_wire_chunk *ret);

/* Copies the next n bytes (fewer if the message ends) into dst. `reader` is a struct
 * qdp_wire_reader, passed as void * so this serves as a copy callback. */
void qdp_wire_reader_copy(void *reader, void *dst, uint64_t n);

void qdp_wire_reader_close(struct qdp_wire_reader *k);

#endif /* QDP_WIRE_H */
