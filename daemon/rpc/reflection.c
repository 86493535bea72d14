/* reflection.c — gRPC server reflection (grpc.reflection.v1 and v1alpha, whose messages are the
 * same), so that grpcurl and other generic clients find qdpd's services and types without the
 * proto files. Answers come from the descriptor set of qdp.proto, health.proto and
 * reflection.proto built into qdpd (proto/embed.py): list_services, file_by_filename and
 * file_containing_symbol; the extension queries are NOT_FOUND (no file has extensions).
 *
 * A stream is a conversation on the completion-queue thread: receive a request, answer it,
 * receive the next, until the client closes its side (then OK). One batch of the call is in
 * flight at a time; each holds its own reference, the logic's passes to rpc_finish.
 */
#include <stdio.h>
#include <string.h>

#include "codec.h"
#include "qdp_wire.h"
#include "reflection.h"
#include "reflection.pb-c.h"

extern const unsigned char qdp_reflection_set[];
extern const size_t qdp_reflection_set_len;

/* The services qdpd serves, as list_services names them. */
static const char *const services[] = {"qdp.Qdp", "grpc.health.v1.Health",
                                       "grpc.reflection.v1.ServerReflection"};

/* ---- the protobuf wire format, as far as descriptors need it ---- */

struct field {
  uint32_t num;
  const uint8_t *data; /* length-delimited fields */
  size_t len;
};

static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      return true;
    }
  }
  return false;
}

/* The next field of [*p, end): true with *f set (data NULL unless length-delimited); false at
 * the end or on bytes that are not a message. */
static bool next_field(const uint8_t **p, const uint8_t *end, struct field *f) {
  uint64_t key, v;
  if (*p >= end || !varint(p, end, &key)) {
    return false;
  }
  f->num = (uint32_t)(key >> 3);
  f->data = NULL;
  f->len = 0;
  switch (key & 7) {
  case 0:
    return varint(p, end, &v);
  case 1:
    *p += 8;
    return *p <= end;
  case 5:
    *p += 4;
    return *p <= end;
  case 2:
    if (!varint(p, end, &v) || v > (uint64_t)(end - *p)) {
      return false;
    }
    f->data = *p;
    f->len = (size_t)v;
    *p += v;
    return true;
  default:
    return false;
  }
}

/* Field `num` of a message, the first, as a string into buf ("" when absent). */
static void string_field(const uint8_t *data, size_t len, uint32_t num, char *buf, size_t size) {
  const uint8_t *p = data;
  struct field f;
  buf[0] = '\0';
  while (next_field(&p, data + len, &f)) {
    if (f.num == num && f.data) {
      snprintf(buf, size, "%.*s", (int)f.len, (const char *)f.data);
      return;
    }
  }
}

/* Whether `sym` names `prefix.NAME` of one of the elements in field `num` of message
 * [data, len) or, for messages (nested 3, enums 4) and services (methods 2), what they hold. */
static bool has_symbol(const uint8_t *data, size_t len, const char *prefix, const char *sym,
                       int kind);

enum { K_FILE, K_MESSAGE, K_SERVICE, K_LEAF };

static bool element_has(const struct field *f, const char *prefix, const char *sym, int kind) {
  char name[128], full[512];
  string_field(f->data, f->len, 1, name, sizeof name);
  snprintf(full, sizeof full, "%s%s%s", prefix, prefix[0] ? "." : "", name);
  if (strcmp(full, sym) == 0) {
    return true;
  }
  size_t n = strlen(full);
  return kind != K_LEAF && strncmp(sym, full, n) == 0 && sym[n] == '.' &&
         has_symbol(f->data, f->len, full, sym, kind);
}

static bool has_symbol(const uint8_t *data, size_t len, const char *prefix, const char *sym,
                       int kind) {
  const uint8_t *p = data;
  struct field f;
  while (next_field(&p, data + len, &f)) {
    if (!f.data) {
      continue;
    }
    bool hit = false;
    if (kind == K_FILE) { /* messages 4, enums 5, services 6 */
      hit = (f.num == 4 && element_has(&f, prefix, sym, K_MESSAGE)) ||
            (f.num == 5 && element_has(&f, prefix, sym, K_LEAF)) ||
            (f.num == 6 && element_has(&f, prefix, sym, K_SERVICE));
    } else if (kind == K_MESSAGE) { /* fields 2, nested messages 3, enums 4 */
      hit = ((f.num == 2 || f.num == 4) && element_has(&f, prefix, sym, K_LEAF)) ||
            (f.num == 3 && element_has(&f, prefix, sym, K_MESSAGE));
    } else if (kind == K_SERVICE) { /* methods 2 */
      hit = f.num == 2 && element_has(&f, prefix, sym, K_LEAF);
    }
    if (hit) {
      return true;
    }
  }
  return false;
}

/* The FileDescriptorProto of the built-in set that `filename` names or that defines `symbol`
 * (one of them NULL). The files import nothing, so it is the whole answer. */
static bool find_file(const char *filename, const char *symbol, ProtobufCBinaryData *ret) {
  const uint8_t *p = qdp_reflection_set, *end = p + qdp_reflection_set_len;
  struct field f;
  while (next_field(&p, end, &f)) {
    if (f.num != 1 || !f.data) {
      continue;
    }
    char name[128], pkg[128];
    string_field(f.data, f.len, 1, name, sizeof name);
    string_field(f.data, f.len, 2, pkg, sizeof pkg);
    size_t n = strlen(pkg);
    if (filename ? strcmp(filename, name) == 0
                 : strncmp(symbol, pkg, n) == 0 && symbol[n] == '.' &&
                       has_symbol(f.data, f.len, pkg, symbol, K_FILE)) {
      *ret = (ProtobufCBinaryData){.len = f.len, .data = (uint8_t *)f.data};
      return true;
    }
  }
  return false;
}

/* ---- the stream ---- */

static void on_recv(struct rpc_server *s, struct rpc_ev *e);
static void on_sent(struct rpc_server *s, struct rpc_ev *e);

static bool recv_next(struct rpc_call *c) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->payload;
  c->ev_recv = (struct rpc_ev){.fn = on_recv, .call = c};
  return rpc_start(c, &op, 1, &c->ev_recv);
}

/* The answer to one request, packed; NULL without memory. */
static grpc_byte_buffer *answer(Grpc__Reflection__V1__ServerReflectionRequest *req) {
  Grpc__Reflection__V1__ServerReflectionResponse r =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
  r.valid_host = req->host;
  r.original_request = req;
  Grpc__Reflection__V1__ListServiceResponse list =
      GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
  Grpc__Reflection__V1__ServiceResponse svc[sizeof services / sizeof services[0]];
  Grpc__Reflection__V1__ServiceResponse *svcp[sizeof services / sizeof services[0]];
  Grpc__Reflection__V1__FileDescriptorResponse files =
      GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
  ProtobufCBinaryData file;
  Grpc__Reflection__V1__ErrorResponse error = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
  char message[512];
  const char *asked = NULL;
  bool found = false;
  switch (req->message_request_case) {
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
    for (size_t i = 0; i < sizeof services / sizeof services[0]; i++) {
      grpc__reflection__v1__service_response__init(&svc[i]);
      svc[i].name = (char *)services[i];
      svcp[i] = &svc[i];
    }
    list.n_service = sizeof services / sizeof services[0];
    list.service = svcp;
    r.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
    r.list_services_response = &list;
    return qdp_wire_pack(&r.base);
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
    asked = req->file_by_filename;
    found = find_file(asked, NULL, &file);
    break;
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
    asked = req->file_containing_symbol;
    found = find_file(NULL, asked, &file);
    break;
  default:
    break;
  }
  if (found) {
    files.n_file_descriptor_proto = 1;
    files.file_descriptor_proto = &file;
    r.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
    r.file_descriptor_response = &files;
    return qdp_wire_pack(&r.base);
  }
  if (asked) {
    snprintf(
        message, sizeof message,
        "no %s '%.200s' here: qdpd has qdp.proto, health.proto and reflection.proto",
        req->message_request_case ==
                GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME
            ? "file"
            : "symbol",
        asked);
  } else {
    snprintf(message, sizeof message,
             "no file here has extensions; ask list_services, file_by_filename or "
             "file_containing_symbol");
  }
  error.error_code = GRPC_STATUS_NOT_FOUND;
  error.error_message = message;
  r.message_response_case =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
  r.error_response = &error;
  return qdp_wire_pack(&r.base);
}

static void on_recv(struct rpc_server *s, struct rpc_ev *e) {
  (void)s;
  struct rpc_call *c = e->call;
  if (!e->ok || !c->payload) { /* the client closed its side (or left): the stream is over */
    rpc_finish(c, NULL, NULL);
    rpc_call_unref(c);
    return;
  }
  ProtobufCMessage *m = NULL;
  struct qdp_error err = QDP_ERROR_INIT;
  qdp_status rc = rpc_codec_unpack(
      c->payload, &grpc__reflection__v1__server_reflection_request__descriptor, &m, &err);
  grpc_byte_buffer_destroy(c->payload);
  c->payload = NULL;
  grpc_byte_buffer *bb =
      rc == QDP_OK ? answer((Grpc__Reflection__V1__ServerReflectionRequest *)m) : NULL;
  rpc_codec_free(m);
  if (!bb) {
    if (rc == QDP_OK) {
      qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for a reflection answer");
    }
    rpc_finish(c, NULL, &err);
    rpc_call_unref(c);
    return;
  }
  if (!rpc_send_message(c, bb, on_sent)) {
    rpc_finish(c, NULL, NULL);
  }
  rpc_call_unref(c); /* the receive's */
}

static void on_sent(struct rpc_server *s, struct rpc_ev *e) {
  (void)s;
  struct rpc_call *c = e->call;
  grpc_byte_buffer_destroy(c->sending);
  c->sending = NULL;
  if (!e->ok || !recv_next(c)) {
    rpc_finish(c, NULL, NULL);
  }
  rpc_call_unref(c); /* the send's */
}

void rpc_reflection_begin(struct rpc_call *c) {
  if (!recv_next(c)) {
    rpc_finish_status(c, QDP_ERR_INTERNAL, NULL, "reflection could not start receiving");
  }
}
