/* qdp_wire.c — packing and the FetchChunk layout (qdp_wire.h). */
#include <string.h>

#include "qdp_wire.h"

/* FetchChunk's tags, (field number << 3) | wire type. */
enum {
  TAG_OFFSET = 0x08, /* 1, varint */
  TAG_DATA = 0x12,   /* 2, length-delimited */
  TAG_DTYPE = 0x18,  /* 3, varint */
  TAG_TOTAL = 0x20,  /* 4, varint */
};

grpc_byte_buffer *qdp_wire_pack(const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  grpc_slice s = grpc_slice_malloc(n);
  protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

grpc_byte_buffer *qdp_wire_fetch_chunk(uint64_t offset, int dtype, uint64_t total,
                                       size_t data_bytes, uint8_t **ret_data) {
  uint8_t hdr[QDP_WIRE_FETCH_CHUNK_HEADER_MAX];
  size_t h = 0;
  hdr[h++] = TAG_OFFSET;
  h += put_varint(hdr + h, offset);
  hdr[h++] = TAG_DTYPE;
  h += put_varint(hdr + h, (uint64_t)(int64_t)dtype);
  hdr[h++] = TAG_TOTAL;
  h += put_varint(hdr + h, total);
  hdr[h++] = TAG_DATA;
  h += put_varint(hdr + h, data_bytes);
  /* Never an inlined slice: its bytes would be copied into the buffer, away from *ret_data. */
  grpc_slice s = grpc_slice_malloc_large(h + data_bytes);
  memcpy(GRPC_SLICE_START_PTR(s), hdr, h);
  *ret_data = GRPC_SLICE_START_PTR(s) + h;
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  /* The buffer holds its own reference, so *ret_data stays valid until bb is destroyed. */
  grpc_slice_unref(s);
  return bb;
}

/* Makes the current slice one with bytes left; 0 at the end of the message. */
static int reader_fill(struct qdp_wire_reader *k) {
  while (!k->have || k->pos == GRPC_SLICE_LENGTH(k->cur)) {
    if (k->have) {
      grpc_slice_unref(k->cur);
      k->have = 0;
    }
    if (!grpc_byte_buffer_reader_next(&k->r, &k->cur)) {
      return 0;
    }
    k->have = 1;
    k->pos = 0;
  }
  return 1;
}

static int reader_varint(struct qdp_wire_reader *k, uint64_t *ret) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (!reader_fill(k)) {
      return 0;
    }
    uint8_t b = GRPC_SLICE_START_PTR(k->cur)[k->pos++];
    k->consumed++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *ret = v;
      return 1;
    }
  }
  return 0;
}

void qdp_wire_reader_copy(void *reader, void *dst, uint64_t n) {
  struct qdp_wire_reader *k = reader;
  uint8_t *d = dst;
  while (n > 0 && reader_fill(k)) {
    size_t avail = GRPC_SLICE_LENGTH(k->cur) - k->pos;
    size_t m = avail < n ? avail : (size_t)n;
    memcpy(d, GRPC_SLICE_START_PTR(k->cur) + k->pos, m);
    k->pos += m;
    k->consumed += m;
    d += m;
    n -= m;
  }
}

int qdp_wire_fetch_chunk_open(grpc_byte_buffer *bb, struct qdp_wire_reader *k,
                              struct qdp_wire_chunk *ret) {
  memset(k, 0, sizeof *k);
  memset(ret, 0, sizeof *ret);
  if (!grpc_byte_buffer_reader_init(&k->r, bb)) {
    return 0;
  }
  k->open = 1;
  const uint64_t size = grpc_byte_buffer_length(bb);
  uint64_t tag, v;
  while (reader_varint(k, &tag)) {
    if (tag == TAG_DATA) {
      return reader_varint(k, &ret->data_len) && ret->data_len == size - k->consumed;
    }
    if ((tag != TAG_OFFSET && tag != TAG_DTYPE && tag != TAG_TOTAL) || !reader_varint(k, &v)) {
      return 0;
    }
    if (tag == TAG_OFFSET) {
      ret->offset = v;
    } else if (tag == TAG_DTYPE) {
      ret->dtype = (int)v;
    } else {
      ret->total = v;
    }
  }
  return 0;
}

void qdp_wire_reader_close(struct qdp_wire_reader *k) {
  if (k->have) {
    grpc_slice_unref(k->cur);
    k->have = 0;
  }
  if (k->open) {
    grpc_byte_buffer_reader_destroy(&k->r);
    k->open = 0;
  }
}
