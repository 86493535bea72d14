/* calls_encode.c — Encode, Plan and EncodeUpload: the request built from the public structs, the
 * input handed over or uploaded, the reply as a state or a plan; and the checks every call makes
 * of its arguments. Any thread: every call works on its own stack and its own gRPC call object. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "libqdp_int.h"
#include "qdp.pb-c.h"
#include "qdp_wire.h"

/* 1 MiB per streamed message: large enough that per-message overhead is noise, small enough to
 * stay far below any message limit and to give a progress bar frequent updates. */
#define DEFAULT_CHUNK ((size_t)1 << 20)
/* gRPC frames cap one message at 4 GiB; the daemon's own limit is lower still. */
#define MAX_CHUNK ((size_t)1 << 30)

#define M_ENCODE "/qdp.Qdp/Encode"
#define M_PLAN "/qdp.Qdp/Plan"
#define M_UPLOAD "/qdp.Qdp/EncodeUpload"

qdp_status qdp__check_client(const qdp_client *c) {
  if (!c) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "client", "The client is NULL.");
  }
  return QDP_OK;
}

/* The client, then the state reference. */
qdp_status qdp__check_ref(const qdp_client *c, const char *handle, const char *token) {
  qdp_status rc = qdp__check_client(c);
  if (rc != QDP_OK) {
    return rc;
  }
  if (!handle || !*handle) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "state.handle", "The handle is empty.");
  }
  if (!token) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "state.token", "The token is NULL.");
  }
  return QDP_OK;
}

/* rc, the checks before, then the result pointer. */
qdp_status qdp__check_ret(qdp_status rc, const void *ret) {
  if (rc == QDP_OK && !ret) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "ret", "The result pointer is NULL.");
  }
  return rc;
}

/* Points into the caller's strings: nothing allocated. */
Qdp__StateRef qdp__state_ref(const char *handle, const char *token) {
  Qdp__StateRef ref = QDP__STATE_REF__INIT;
  ref.handle = (char *)handle;
  ref.token = (char *)token;
  return ref;
}

/* Where the input comes from, as the request says it: inline data, a path, shared memory, or
 * nothing (an upload, a local file: staged later). */
static qdp_status input_source(const struct qdp_input *in, struct qdp__encode_request *r) {
  switch (in->kind) {
  case QDP_INPUT_NONE:
  case QDP_INPUT_UPLOAD:
  case QDP_INPUT_LOCAL_FILE:
    break;
  case QDP_INPUT_INLINE:
    if (!in->data && in->data_bytes) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.data",
                            "data_bytes is %zu but data is NULL.", in->data_bytes);
    }
    r->input.source_case = QDP__INPUT__SOURCE_DATA;
    r->input.data.data = (uint8_t *)in->data;
    r->input.data.len = in->data_bytes;
    break;
  case QDP_INPUT_SERVER_FILE:
    if (!in->path || !*in->path) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                            "A server-file input needs a path.");
    }
    r->input.source_case = QDP__INPUT__SOURCE_PATH;
    r->input.path = (char *)in->path;
    break;
  case QDP_INPUT_SHM:
    if (in->struct_size >= offsetof(struct qdp_input, region_token) + sizeof in->region_token &&
        in->region && *in->region) {
      r->shm.region = (char *)in->region;
      r->shm.region_token = (char *)(in->region_token ? in->region_token : "");
      r->shm.offset = in->offset;
      r->shm.length = in->length;
      r->input.source_case = QDP__INPUT__SOURCE_SHM;
      r->input.shm = &r->shm;
      break;
    }
    if ((!in->shm_name || !*in->shm_name) && (in->shm_pid < 0 || in->shm_fd < 0)) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.shm",
                            "A shared-memory input needs a name, or a pid and an fd.");
    }
    if (in->shm_name && *in->shm_name) {
      r->shm.name = (char *)in->shm_name;
    } else {
      r->shm.pid = in->shm_pid;
      r->shm.fd = in->shm_fd;
    }
    r->shm.offset = in->offset;
    r->shm.length = in->length;
    r->input.source_case = QDP__INPUT__SOURCE_SHM;
    r->input.shm = &r->shm;
    break;
  default:
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.kind",
                          "The input kind %d is not one of qdp_input_kind.", (int)in->kind);
  }
  return QDP_OK;
}

static qdp_status build_request(const struct qdp_encode_opts *opts, const struct qdp_input *in,
                                struct qdp__encode_request *r) {
  if (!opts || opts->struct_size < offsetof(struct qdp_encode_opts, ipc)) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "opts",
                          "The encode options are %s; initialise them with QDP_ENCODE_OPTS_INIT.",
                          opts ? "too short" : "NULL");
  }
  if (!in || in->struct_size < offsetof(struct qdp_input, chunk_bytes)) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input",
                          "The input is %s; initialise it with QDP_INPUT_INIT.",
                          in ? "too short" : "NULL");
  }
  if (opts->ndevices && !opts->devices) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "placement.devices",
                          "ndevices is %zu but devices is NULL.", opts->ndevices);
  }
  r->req = (Qdp__EncodeRequest)QDP__ENCODE_REQUEST__INIT;
  qdp__input__init(&r->input); /* the macro's union initializer draws -Wmissing-braces */
  r->placement = (Qdp__Placement)QDP__PLACEMENT__INIT;
  r->shm = (Qdp__SharedMemory)QDP__SHARED_MEMORY__INIT;
  r->req.encoding = (Qdp__Encoding)opts->encoding;
  r->req.qubits = opts->qubits;
  r->req.output_dtype = (Qdp__DType)opts->dtype;
  r->req.ttl_seconds = opts->ttl_seconds;
  r->req.views = opts->struct_size > offsetof(struct qdp_encode_opts, ipc) ? opts->ipc != 0 : 0;
  r->req.descriptors = r->req.views; /* qdp_shard.view_ticket: another process may take them */
  r->req.client_pid = 0; /* this process (by its pidfd at the daemon): the lease ends with it */
  if (opts->label) {
    r->req.label = (char *)opts->label;
  }
  if (opts->struct_size > offsetof(struct qdp_encode_opts, session) && opts->session) {
    r->req.session = (char *)opts->session;
  }
  r->placement.policy = (Qdp__Policy)opts->policy;
  r->placement.n_devices = opts->ndevices;
  r->placement.devices = (char **)opts->devices;
  r->req.placement = &r->placement;
  r->req.input = &r->input;
  r->input.dtype = (Qdp__DType)in->dtype;
  r->input.rows = in->rows;
  r->input.cols = in->cols;
  return input_source(in, r);
}

/* An absolute form of path into buf (PATH_MAX): the daemon names files absolutely. */
qdp_status qdp__absolute(const char *path, char *buf, const char *field) {
  int n;
  if (path[0] == '/') {
    n = snprintf(buf, PATH_MAX, "%s", path);
  } else {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) {
      return qdp__err_local(QDP_ERR_SYSTEM, errno, field,
                            "'%s' is relative and the working directory is unknown: %s.", path,
                            strerror(errno));
    }
    n = snprintf(buf, PATH_MAX, "%s/%s", strcmp(cwd, "/") == 0 ? "" : cwd, path);
  }
  if (n < 0 || n >= PATH_MAX) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, field, "'%s' is too long a path.", path);
  }
  return QDP_OK;
}

/* A file or shared memory of this node travels as a descriptor this process opened (the daemon
 * opens nothing for its callers); over TCP a file is named by path, beneath the daemon's
 * input_dir. */
static qdp_status hand_over_input(qdp_client *c, const struct qdp_input *in,
                                  struct qdp__encode_request *r) {
  char sock[PATH_MAX];
  qdp_status rc = QDP_OK;
  int fd = -1;
  if (r->input.source_case == QDP__INPUT__SOURCE_PATH) {
    rc = qdp__absolute(in->path, r->path, "input.path");
    if (rc != QDP_OK) {
      return rc;
    }
    r->input.path = r->path;
    if (!qdp__unix_path(c, sock, sizeof sock)) {
      return QDP_OK;
    }
    fd = open(r->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
      int err = errno;
      return qdp__err_local(qdp__errno_status(err, QDP_ERR_SYSTEM), err, "input.path",
                            "Cannot open '%s': %s (qdpd reads only what this process can open).",
                            r->path, strerror(err));
    }
    rc = qdp__handoff(c, fd, 1, "input.path", r->ticket, sizeof r->ticket);
    r->input.fd_ticket = r->ticket;
  } else if (r->input.source_case == QDP__INPUT__SOURCE_SHM && !*r->shm.region) {
    fd = qdp__open_shm(in->shm_name, in->shm_pid, in->shm_fd, false, &rc);
    if (fd >= 0) {
      rc = qdp__handoff(c, fd, 1, "input.shm", r->ticket, sizeof r->ticket);
      r->shm.fd_ticket = r->ticket;
    }
  }
  if (fd >= 0) {
    close(fd);
  }
  return rc;
}

static qdp_status reply_state(Qdp__EncodeReply *rep, struct qdp_state_info **ret) {
  if (!rep->state) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL, "qdpd's encode reply carries no state.");
  }
  *ret = qdp__state_from_pb(rep->state);
  return *ret ? QDP_OK : qdp__err_nomem("copying the encode reply");
}

/* Sends one upload message of n data bytes taken from buf or read from fd at off. The message is
 * an UploadChunk with only field 2 (data) set, written by hand so the bytes go from the file or
 * the caller's buffer straight into the gRPC slice, with no protobuf-c copy in between. */
static qdp_status send_data(struct qdp__call *k, const unsigned char *buf, int fd, uint64_t off,
                            size_t n, const char *path, int *ret_ok) {
  unsigned char hdr[11];
  size_t h = 0;
  hdr[h++] = 0x12; /* field 2, wire type 2 (length-delimited) */
  uint64_t v = n;
  do {
    hdr[h++] = (unsigned char)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    v >>= 7;
  } while (v);
  grpc_slice s = grpc_slice_malloc(h + n);
  unsigned char *p = GRPC_SLICE_START_PTR(s);
  memcpy(p, hdr, h);
  if (buf) {
    memcpy(p + h, buf, n);
  } else {
    qdp_status rc = qdp__read_at(fd, path, p + h, n, off);
    if (rc != QDP_OK) {
      grpc_slice_unref(s);
      return rc;
    }
  }
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = bb;
  *ret_ok = qdp__call_batch(k, &op, 1);
  grpc_byte_buffer_destroy(bb);
  return QDP_OK;
}

/* Sends the initial metadata and the first message of a streaming call; a call that sends nothing
 * more (close) also closes its side and asks for the server's initial metadata in one batch. */
int qdp__send_first(struct qdp__call *k, const ProtobufCMessage *m, int close) {
  grpc_byte_buffer *bb = qdp_wire_pack(m);
  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  ops[0] = qdp__op_send_initial(k);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &k->initial_md;
  int ok = qdp__call_batch(k, ops, close ? 4 : 2);
  grpc_byte_buffer_destroy(bb);
  return ok;
}

/* EncodeUpload: the request first, then the data in chunks, from buf or from fd at off. */
static qdp_status upload(qdp_client *c, Qdp__EncodeRequest *req, const unsigned char *buf, int fd,
                         uint64_t off, uint64_t total, const char *path, const struct qdp_input *in,
                         struct qdp_state_info **ret) {
  size_t chunk = in->chunk_bytes ? in->chunk_bytes : DEFAULT_CHUNK;
  if (chunk > MAX_CHUNK) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.chunk_bytes",
                          "chunk_bytes %zu is above the limit of %zu.", chunk, MAX_CHUNK);
  }
  struct qdp__call k;
  qdp_status rc = qdp__call_begin(c, M_UPLOAD, 1, &k);
  if (rc != QDP_OK) {
    return qdp__call_end(&k, rc);
  }
  Qdp__UploadChunk first = QDP__UPLOAD_CHUNK__INIT;
  first.request = req;
  int ok = qdp__send_first(&k, &first.base, 0);
  uint64_t done = 0;
  while (ok && done < total) {
    size_t n = total - done < chunk ? (size_t)(total - done) : chunk;
    rc = send_data(&k, buf ? buf + done : NULL, fd, off + done, n, path, &ok);
    if (rc != QDP_OK) {
      qdp__call_cancel(&k);
      return qdp__call_end(&k, rc);
    }
    if (!ok) {
      break; /* the daemon ended the call early; its status says why */
    }
    done += n;
    if (in->progress && in->progress(in->progress_arg, done, total) != 0) {
      qdp__call_cancel(&k);
      rc = qdp__err_local(QDP_ERR_CANCELLED, -1, NULL,
                          "The upload was cancelled by its progress callback after %" PRIu64
                          " of %" PRIu64 " bytes.",
                          done, total);
      return qdp__call_end(&k, rc);
    }
  }
  grpc_byte_buffer *recv = NULL;
  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  size_t nops = 0;
  /* The daemon encodes an upload only when it sees its end marked: a stream cut short by a
   * crash ends without it. */
  static const unsigned char last[] = {0x18, 0x01}; /* field 3 (last), varint 1 */
  grpc_slice ls = grpc_slice_from_static_buffer(last, sizeof last);
  grpc_byte_buffer *lbb = grpc_raw_byte_buffer_create(&ls, 1);
  if (ok) {
    ops[nops].op = GRPC_OP_SEND_MESSAGE;
    ops[nops++].data.send_message.send_message = lbb;
    ops[nops++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  }
  ops[nops].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[nops++].data.recv_initial_metadata.recv_initial_metadata = &k.initial_md;
  ops[nops].op = GRPC_OP_RECV_MESSAGE;
  ops[nops++].data.recv_message.recv_message = &recv;
  qdp__call_batch(&k, ops, nops);
  grpc_byte_buffer_destroy(lbb);
  rc = qdp__call_end(&k, QDP_OK);
  if (rc == QDP_OK) {
    Qdp__EncodeReply *rep =
        recv ? (Qdp__EncodeReply *)qdp__unpack(recv, &qdp__encode_reply__descriptor) : NULL;
    if (!rep) {
      rc = qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                          "qdpd answered EncodeUpload with no valid EncodeReply.");
    } else {
      rc = reply_state(rep, ret);
      qdp__encode_reply__free_unpacked(rep, NULL);
    }
  }
  if (recv) {
    grpc_byte_buffer_destroy(recv);
  }
  return rc;
}

/* A basis input of one .npy vector holds one index per sample, not one sample of many values. */
static void basis_reshape(const struct qdp_encode_opts *opts, const struct qdp_input *in,
                          struct qdp__npy *d) {
  if (opts->encoding == QDP_ENCODING_BASIS && !in->rows && !in->cols && d->shape[0] == 1) {
    d->shape[0] = d->shape[1];
    d->shape[1] = 1;
  }
}

/* The bytes [off, off + total) of a small input file, read into a new buffer (*ret). */
static qdp_status read_small(int fd, const char *path, uint64_t off, uint64_t total,
                             unsigned char **ret) {
  unsigned char *buf = malloc(total ? total : 1);
  if (!buf) {
    return qdp__err_nomem("reading a small input file");
  }
  qdp_status rc = qdp__read_at(fd, path, buf, (size_t)total, off);
  if (rc != QDP_OK) {
    free(buf);
    return rc;
  }
  *ret = buf;
  return QDP_OK;
}

/* Stages a local file: its values parsed (CSV) or its bytes located (.npy, raw); a small one goes
 * into the request. */
static qdp_status stage_file(const struct qdp_encode_opts *opts, const struct qdp_input *in,
                             struct qdp__encode_request *r) {
  if (!in->path || !*in->path) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                          "A local-file input needs a path.");
  }
  struct qdp__input_file f;
  qdp_status rc = qdp__input_file_open(in, &f);
  if (rc != QDP_OK) {
    return rc;
  }
  r->fd = f.fd;
  r->filebuf = f.values;
  if (!f.csv) {
    basis_reshape(opts, in, &f.d); /* a CSV file has one sample per row already */
  }
  r->input.dtype = (Qdp__DType)f.d.dtype;
  r->input.rows = f.d.shape[0];
  r->input.cols = f.d.shape[1];
  r->total = f.d.count * qdp_dtype_size(f.d.dtype);
  r->data_off = f.d.data_offset;
  r->buf = r->filebuf;
  if (r->total > in->inline_max) {
    r->stream = 1;
    return QDP_OK;
  }
  /* Small: one message is cheaper than a stream. */
  if (!f.csv) {
    rc = read_small(r->fd, in->path, r->data_off, r->total, &r->filebuf);
  }
  if (rc == QDP_OK) {
    r->input.source_case = QDP__INPUT__SOURCE_DATA;
    r->input.data.data = r->filebuf;
    r->input.data.len = r->total;
  }
  return rc;
}

/* Stages an upload or a local file: a small one goes into the request, a large one is left to
 * `carry`; a request that never streams carries small uploaded data inline too. */
static qdp_status stage_input(const struct qdp_encode_opts *opts, const struct qdp_input *in,
                              enum qdp__carry carry, struct qdp__encode_request *r) {
  if (in->kind == QDP_INPUT_LOCAL_FILE) {
    return stage_file(opts, in, r);
  }
  if (in->kind != QDP_INPUT_UPLOAD) {
    return QDP_OK;
  }
  if (!in->data && in->data_bytes) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.data",
                          "data_bytes is %zu but data is NULL.", in->data_bytes);
  }
  r->buf = in->data;
  r->total = in->data_bytes;
  r->stream = 1;
  if (carry != QDP__CARRY_STREAM && r->total <= in->inline_max) {
    r->input.source_case = QDP__INPUT__SOURCE_DATA;
    r->input.data.data = (uint8_t *)in->data;
    r->input.data.len = in->data_bytes;
  }
  return QDP_OK;
}

/* A request of one message: the staged data goes into a region made for the call, which the
 * daemon reads in place. TCP has no shared memory. */
static qdp_status carry_whole(qdp_client *c, const struct qdp_input *in,
                              struct qdp__encode_request *r) {
  char sock[PATH_MAX];
  if (!qdp__unix_path(c, sock, sizeof sock)) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.inline_max",
                          "The input's %" PRIu64
                          " bytes are above inline_max (%zu), and this call carries its inputs "
                          "in one message: over TCP there is no shared memory to pass them in; "
                          "raise inline_max (up to the daemon's max_message_bytes), or name a "
                          ".npy file beneath the daemon's input_dir (SERVER_FILE).",
                          r->total, in->inline_max);
  }
  qdp_status rc = qdp__scratch_make(c, r->total, false, &r->region);
  if (rc == QDP_OK && r->buf) {
    memcpy(r->region.map, r->buf, (size_t)r->total);
  } else if (rc == QDP_OK) {
    rc = qdp__read_at(r->fd, in->path, r->region.map, (size_t)r->total, r->data_off);
  }
  if (rc == QDP_OK) {
    r->shm.region = r->region.region.handle;
    r->shm.region_token = r->region.region.token;
    r->shm.offset = 0;
    r->shm.length = r->total;
    r->input.source_case = QDP__INPUT__SOURCE_SHM;
    r->input.shm = &r->shm;
  }
  return rc;
}

qdp_status qdp__encode_request_begin(qdp_client *c, const struct qdp_encode_opts *opts,
                                     const struct qdp_input *in, enum qdp__carry carry,
                                     struct qdp__encode_request *r) {
  r->fd = -1;
  r->filebuf = NULL;
  r->buf = NULL;
  r->total = r->data_off = 0;
  r->stream = 0;
  r->region = (struct qdp__scratch)QDP__SCRATCH_INIT;
  qdp_status rc = build_request(opts, in, r);
  if (rc == QDP_OK) {
    rc = hand_over_input(c, in, r);
  }
  if (rc == QDP_OK) {
    rc = stage_input(opts, in, carry, r);
  }
  if (rc == QDP_OK && carry == QDP__CARRY_WHOLE && r->stream &&
      r->input.source_case == QDP__INPUT__SOURCE__NOT_SET) {
    rc = carry_whole(c, in, r);
  }
  return rc;
}

qdp_status qdp__encode_request_renew(qdp_client *c, const struct qdp_input *in,
                                     struct qdp__encode_request *r) {
  return hand_over_input(c, in, r);
}

void qdp__encode_request_end(qdp_client *c, struct qdp__encode_request *r) {
  qdp__scratch_end(c, &r->region);
  free(r->filebuf);
  r->filebuf = NULL;
  if (r->fd >= 0) {
    close(r->fd);
    r->fd = -1;
  }
}

/* Encode or Plan (plan != 0) for every input kind. */
static qdp_status encode_or_plan(qdp_client *c, const struct qdp_encode_opts *opts,
                                 const struct qdp_input *in, int plan,
                                 struct qdp_state_info **ret_state,
                                 struct qdp_plan_info **ret_plan) {
  struct qdp__encode_request r;
  qdp_status rc =
      qdp__encode_request_begin(c, opts, in, plan ? QDP__CARRY_SHAPE : QDP__CARRY_STREAM, &r);
  if (rc == QDP_OK && plan) {
    /* A dry run never uploads: a streamed input is described by its shape. */
    *ret_plan = qdp__unary_copy(c, M_PLAN, &r.req.base, &qdp__plan_reply__descriptor,
                                qdp__plan_from_pb, "copying the plan reply", &rc);
  } else if (rc == QDP_OK && r.stream && r.input.source_case == QDP__INPUT__SOURCE__NOT_SET) {
    rc = upload(c, &r.req, r.buf, r.fd, r.data_off, r.total, in->path ? in->path : "", in,
                ret_state);
  } else if (rc == QDP_OK) {
    Qdp__EncodeReply *rep = NULL;
    rc = qdp__unary(c, M_ENCODE, &r.req.base, &qdp__encode_reply__descriptor,
                    (ProtobufCMessage **)&rep);
    if (rc == QDP_OK) {
      rc = reply_state(rep, ret_state);
    }
    if (rep) {
      qdp__encode_reply__free_unpacked(rep, NULL);
    }
    if (rc == QDP_OK && in->progress && (in->kind == QDP_INPUT_LOCAL_FILE)) {
      (void)in->progress(in->progress_arg, r.total, r.total);
    }
  }
  qdp__encode_request_end(c, &r);
  return rc;
}

qdp_status qdp_encode(qdp_client *c, const struct qdp_encode_opts *opts, const struct qdp_input *in,
                      struct qdp_state_info **ret) {
  qdp__err_reset();
  qdp_status rc = qdp__check_ret(qdp__check_client(c), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  *ret = NULL;
  return encode_or_plan(c, opts, in, 0, ret, NULL);
}

qdp_status qdp_plan(qdp_client *c, const struct qdp_encode_opts *opts, const struct qdp_input *in,
                    struct qdp_plan_info **ret) {
  qdp__err_reset();
  qdp_status rc = qdp__check_ret(qdp__check_client(c), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  *ret = NULL;
  return encode_or_plan(c, opts, in, 1, NULL, ret);
}
