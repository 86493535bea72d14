/* codec.c — protobuf-c <-> gRPC translation for the server (codec.h). */
#include <stdbool.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

#include "codec.h"
#include "qdp.pb-c.h"

/* Reads a varint at *p (below end); false past end or past 10 bytes. */
static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *ret) {
  uint64_t v = 0;
  for (unsigned shift = 0; *p < end && shift < 70; shift += 7) {
    uint8_t b = *(*p)++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *ret = v;
      return true;
    }
  }
  return false;
}

/* The first string field of d's wire form in [p, end) (nested messages too) whose bytes hold a
 * NUL, or NULL. protobuf-c hands strings over NUL-terminated, so such a field would be read as
 * a shorter one: "TOKEN\0junk" as "TOKEN". Only called on bytes protobuf-c accepted. */
static const ProtobufCFieldDescriptor *string_with_nul(const ProtobufCMessageDescriptor *d,
                                                       const uint8_t *p, const uint8_t *end,
                                                       unsigned depth) {
  while (p < end) {
    uint64_t key, n;
    if (!varint(&p, end, &key)) {
      return NULL;
    }
    unsigned wire = (unsigned)(key & 7);
    const ProtobufCFieldDescriptor *f =
        key >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3))
                               : NULL;
    switch (wire) {
    case 0:
      if (!varint(&p, end, &n)) {
        return NULL;
      }
      break;
    case 1:
      p += (size_t)(end - p) < 8 ? (size_t)(end - p) : 8;
      break;
    case 5:
      p += (size_t)(end - p) < 4 ? (size_t)(end - p) : 4;
      break;
    case 2:
      if (!varint(&p, end, &n) || n > (uint64_t)(end - p)) {
        return NULL;
      }
      if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(p, 0, (size_t)n)) {
        return f;
      }
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE && depth < 32) {
        const ProtobufCFieldDescriptor *g = string_with_nul(f->descriptor, p, p + n, depth + 1);
        if (g) {
          return g;
        }
      }
      p += n;
      break;
    default:
      return NULL; /* groups: not in qdp's messages */
    }
  }
  return NULL;
}

qdp_status rpc_codec_unpack_bytes(const uint8_t *data, size_t len,
                                  const ProtobufCMessageDescriptor *d, ProtobufCMessage **ret,
                                  struct qdp_error *reterr) {
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, data);
  if (!m) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "request",
                         "the %zu-byte message is not a valid %s", len, d->name);
  }
  const ProtobufCFieldDescriptor *f = string_with_nul(d, data, data + len, 0);
  if (f) {
    protobuf_c_message_free_unpacked(m, NULL);
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, f->name,
                         "string field '%s' of the %s holds a NUL byte; strings are text", f->name,
                         d->name);
  }
  *ret = m;
  return QDP_OK;
}

qdp_status rpc_codec_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
                            ProtobufCMessage **ret, struct qdp_error *reterr) {
  if (!bb) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "request",
                         "the call carried no %s message", d->name);
  }
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb)) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "request",
                         "the %s message could not be decompressed", d->name);
  }
  /* readall joins the slices (one copy only when there are several). */
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  qdp_status rc =
      rpc_codec_unpack_bytes(GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s), d, ret, reterr);
  grpc_slice_unref(s);
  return rc;
}

void rpc_codec_free(ProtobufCMessage *m) {
  if (m) {
    protobuf_c_message_free_unpacked(m, NULL);
  }
}

grpc_status_code rpc_codec_grpc_status(qdp_status s) {
  if ((int)s >= 0 && (int)s <= 16) {
    return (grpc_status_code)s;
  }
  return GRPC_STATUS_INTERNAL;
}

grpc_slice rpc_codec_error_detail(const struct qdp_error *e) {
  Qdp__ErrorDetail d = QDP__ERROR_DETAIL__INIT;
  d.code_name = (char *)qdp_status_name(e->code);
  char field[sizeof e->field + 1];
  memcpy(field, e->field, sizeof e->field);
  field[sizeof e->field] = '\0';
  d.field = field;
  d.rank = e->rank;
  d.device = e->device;
  d.cause = e->cause;
  d.need_bytes = e->need_bytes;
  d.free_bytes = e->free_bytes;
  size_t n = qdp__error_detail__get_packed_size(&d);
  grpc_slice s = grpc_slice_malloc(n);
  qdp__error_detail__pack(&d, GRPC_SLICE_START_PTR(s));
  return s;
}
