/* The RPCs of proto/qdp.proto as libqdp calls: request building from the public structs, the
 * streaming calls (EncodeUpload, Fetch) and the conversion of replies into libqdp-owned structs.
 * Any thread: every call works on its own stack and its own gRPC call object. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "libqdp_int.h"
#include "qdp.pb-c.h"
#include "qdp_npy.h"
#include "qdp_wire.h"

#define M_ENCODE "/qdp.Qdp/Encode"
#define M_PLAN "/qdp.Qdp/Plan"
#define M_UPLOAD "/qdp.Qdp/EncodeUpload"
#define M_DESCRIBE "/qdp.Qdp/Describe"
#define M_LIST "/qdp.Qdp/List"
#define M_RELEASE "/qdp.Qdp/Release"
#define M_FETCH "/qdp.Qdp/Fetch"
#define M_EXPORT "/qdp.Qdp/Export"
#define M_STATUS "/qdp.Qdp/Status"
#define M_HEALTH "/qdp.Qdp/Health"
#define M_REGISTER_REGION "/qdp.Qdp/RegisterRegion"
#define M_UNREGISTER_REGION "/qdp.Qdp/UnregisterRegion"
#define M_CLOSE_VIEW "/qdp.Qdp/CloseView"
#define M_GATHER "/qdp.Qdp/Gather"

/* 1 MiB per streamed message: large enough that per-message overhead is noise, small enough to
 * stay far below any message limit and to give a progress bar frequent updates. */
#define DEFAULT_CHUNK ((size_t)1 << 20)
/* gRPC frames cap one message at 4 GiB; the daemon's own limit is lower still. */
#define MAX_CHUNK ((size_t)1 << 30)

/* ---- replies: protobuf-c -> libqdp structs ---- */

void qdp_free(void *p) {
  free(p);
}

static char *dup0(const char *s) {
  return strdup(s ? s : "");
}

/* The public arrays are arrays of pointers to structs, each freed on its own; one pair of helpers
 * makes and frees them all. `from` copies one protobuf message (NULL when out of memory). */
typedef void *(*from_pb_fn)(const void *pb);
typedef void (*drop_fn)(void *item);

static void array_free(void *array, size_t n, drop_fn drop) {
  void **v = array;
  for (size_t i = 0; v && i < n; i++) {
    drop(v[i]);
  }
  free(v);
}

/* n items (NULL when n is 0); when one copy fails, those made are freed and NULL is returned. */
static void *array_from_pb(const void *pb, size_t n, from_pb_fn from, drop_fn drop) {
  void *const *src = pb;
  if (!n) {
    return NULL;
  }
  void **v = calloc(n, sizeof *v);
  if (!v) {
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    v[i] = from(src[i]);
    if (!v[i]) {
      array_free(v, n, drop);
      return NULL;
    }
  }
  return v;
}

static void shard_free(void *item) {
  struct qdp_shard *s = item;
  if (!s) {
    return;
  }
  free(s->device);
  free(s->uuid);
  free(s->host);
  free(s);
}

static void *shard_from_pb(const void *pb) {
  const Qdp__Shard *p = pb;
  /* The IPC handle's bytes live in the same allocation, so one free releases both. */
  struct qdp_shard *s = calloc(1, sizeof *s + p->ipc_handle.len);
  if (!s) {
    return NULL;
  }
  s->struct_size = sizeof *s;
  s->rank = p->rank;
  s->ordinal = p->ordinal;
  s->first = p->first;
  s->count = p->count;
  s->row_first = p->row_first;
  s->rows = p->rows;
  s->bytes = p->bytes;
  s->ipc_offset = p->ipc_offset;
  s->lease_id = p->lease_id;
  if (p->ipc_handle.len) {
    memcpy(s + 1, p->ipc_handle.data, p->ipc_handle.len);
    s->ipc_handle = s + 1;
    s->ipc_handle_bytes = p->ipc_handle.len;
  }
  s->device = dup0(p->device);
  s->uuid = dup0(p->uuid);
  s->host = dup0(p->host);
  if (!s->device || !s->uuid || !s->host) {
    shard_free(s);
    return NULL;
  }
  return s;
}

void qdp_state_info_free(struct qdp_state_info *s) {
  if (!s) {
    return;
  }
  free(s->handle);
  free(s->token);
  free(s->policy);
  free(s->collective);
  free(s->label);
  free(s->owner);
  array_free(s->shards, s->nshards, shard_free);
  free(s);
}

static void state_free(void *item) {
  qdp_state_info_free(item);
}

static void *state_from_pb(const void *pb) {
  const Qdp__StateInfo *p = pb;
  struct qdp_state_info *s = calloc(1, sizeof *s);
  if (!s) {
    return NULL;
  }
  s->struct_size = sizeof *s;
  s->encoding = (qdp_encoding)p->encoding;
  s->qubits = p->qubits;
  s->batch = p->batch;
  s->dtype = (qdp_dtype)p->dtype;
  s->bytes = p->bytes;
  s->global_bits = p->global_bits;
  s->created_unix_ms = p->created_unix_ms;
  s->expires_unix_ms = p->expires_unix_ms;
  s->encode_ms = p->encode_ms;
  s->leases = p->leases;
  s->handle = dup0(p->handle);
  s->token = dup0(p->token);
  s->policy = dup0(p->policy);
  s->collective = dup0(p->collective);
  s->label = dup0(p->label);
  s->owner = dup0(p->owner);
  s->shards = array_from_pb(p->shards, p->n_shards, shard_from_pb, shard_free);
  s->nshards = s->shards ? p->n_shards : 0;
  if (!s->handle || !s->token || !s->policy || !s->collective || !s->label || !s->owner ||
      (p->n_shards && !s->shards)) {
    qdp_state_info_free(s);
    return NULL;
  }
  return s;
}

static void need_free(void *item) {
  struct qdp_device_need *d = item;
  if (d) {
    free(d->device);
    free(d);
  }
}

static void *need_from_pb(const void *pb) {
  const Qdp__DeviceNeed *n = pb;
  struct qdp_device_need *d = calloc(1, sizeof *d);
  if (!d) {
    return NULL;
  }
  d->struct_size = sizeof *d;
  d->rank = n->rank;
  d->shard_bytes = n->shard_bytes;
  d->staging_bytes = n->staging_bytes;
  d->workspace_bytes = n->workspace_bytes;
  d->need_bytes = n->need_bytes;
  d->budget_bytes = n->budget_bytes;
  d->fits = n->fits;
  d->device = dup0(n->device);
  if (!d->device) {
    need_free(d);
    return NULL;
  }
  return d;
}

void qdp_plan_info_free(struct qdp_plan_info *p) {
  if (!p) {
    return;
  }
  free(p->policy);
  free(p->message);
  array_free(p->shards, p->nshards, shard_free);
  array_free(p->needs, p->nneeds, need_free);
  free(p);
}

static void *plan_from_pb(const void *pb) {
  const Qdp__PlanReply *r = pb;
  struct qdp_plan_info *p = calloc(1, sizeof *p);
  if (!p) {
    return NULL;
  }
  p->struct_size = sizeof *p;
  p->feasible = r->feasible;
  p->global_bits = r->global_bits;
  p->total_bytes = r->total_bytes;
  p->policy = dup0(r->policy);
  p->message = dup0(r->message);
  p->shards = array_from_pb(r->shards, r->n_shards, shard_from_pb, shard_free);
  p->nshards = p->shards ? r->n_shards : 0;
  p->needs = array_from_pb(r->needs, r->n_needs, need_from_pb, need_free);
  p->nneeds = p->needs ? r->n_needs : 0;
  if (!p->policy || !p->message || (r->n_shards && !p->shards) || (r->n_needs && !p->needs)) {
    qdp_plan_info_free(p);
    return NULL;
  }
  return p;
}

void qdp_state_list_free(struct qdp_state_list *l) {
  if (!l) {
    return;
  }
  array_free(l->states, l->count, state_free);
  free(l);
}

static void *list_from_pb(const void *pb) {
  const Qdp__ListReply *r = pb;
  struct qdp_state_list *l = calloc(1, sizeof *l);
  if (!l) {
    return NULL;
  }
  l->struct_size = sizeof *l;
  l->states = array_from_pb(r->states, r->n_states, state_from_pb, state_free);
  if (r->n_states && !l->states) {
    free(l);
    return NULL;
  }
  l->count = r->n_states;
  return l;
}

static void device_free(void *item) {
  struct qdp_device_info *d = item;
  if (!d) {
    return;
  }
  free(d->name);
  free(d->kind);
  free(d->uuid);
  free(d->model);
  free(d->host);
  free(d);
}

static void *device_from_pb(const void *pb) {
  const Qdp__Device *p = pb;
  struct qdp_device_info *d = calloc(1, sizeof *d);
  if (!d) {
    return NULL;
  }
  d->struct_size = sizeof *d;
  d->rank = p->rank;
  d->ordinal = p->ordinal;
  d->total_bytes = p->total_bytes;
  d->free_bytes = p->free_bytes;
  d->budget_bytes = p->budget_bytes;
  d->used_bytes = p->used_bytes;
  d->cc_major = p->cc_major;
  d->cc_minor = p->cc_minor;
  d->numa_node = p->numa_node;
  d->name = dup0(p->name);
  d->kind = dup0(p->kind);
  d->uuid = dup0(p->uuid);
  d->model = dup0(p->model);
  d->host = dup0(p->host);
  if (!d->name || !d->kind || !d->uuid || !d->model || !d->host) {
    device_free(d);
    return NULL;
  }
  return d;
}

static void link_free(void *item) {
  struct qdp_link_info *l = item;
  if (l) {
    free(l->kind);
    free(l);
  }
}

static void *link_from_pb(const void *pb) {
  const Qdp__Link *p = pb;
  struct qdp_link_info *l = calloc(1, sizeof *l);
  if (!l) {
    return NULL;
  }
  l->struct_size = sizeof *l;
  l->from = p->from;
  l->to = p->to;
  l->nvlinks = p->nvlinks;
  l->peer = p->peer;
  l->perf_rank = p->perf_rank;
  l->kind = dup0(p->kind);
  if (!l->kind) {
    link_free(l);
    return NULL;
  }
  return l;
}

static void rank_info_free(void *item) {
  struct qdp_rank_info *r = item;
  if (!r) {
    return;
  }
  free(r->host);
  free(r->reason);
  free(r);
}

static void *rank_info_from_pb(const void *pb) {
  const Qdp__RankInfo *p = pb;
  struct qdp_rank_info *r = calloc(1, sizeof *r);
  if (!r) {
    return NULL;
  }
  r->struct_size = sizeof *r;
  r->rank = p->rank;
  r->devices = p->devices;
  r->lost = p->lost;
  r->host = dup0(p->host);
  r->reason = dup0(p->reason);
  if (!r->host || !r->reason) {
    rank_info_free(r);
    return NULL;
  }
  return r;
}

void qdp_server_status_free(struct qdp_server_status *s) {
  if (!s) {
    return;
  }
  free(s->version);
  free(s->backend);
  free(s->topology_source);
  free(s->collectives);
  free(s->transport);
  free(s->host_collectives);
  free(s->device_collectives);
  free(s->mpi_threads);
  array_free(s->devices, s->ndevices, device_free);
  array_free(s->links, s->nlinks, link_free);
  array_free(s->rank_info, s->nrank_info, rank_info_free);
  free(s);
}

static void *status_from_pb(const void *pb) {
  const Qdp__StatusReply *r = pb;
  struct qdp_server_status *s = calloc(1, sizeof *s);
  if (!s) {
    return NULL;
  }
  s->struct_size = sizeof *s;
  s->uptime_ms = r->uptime_ms;
  s->ranks = r->ranks;
  s->budget_bytes = r->budget_bytes;
  s->used_bytes = r->used_bytes;
  s->states = r->states;
  s->jobs_total = r->jobs_total;
  s->jobs_failed = r->jobs_failed;
  s->max_qubits = r->max_qubits;
  s->version = dup0(r->version);
  s->backend = dup0(r->backend);
  s->regions = r->regions;
  s->region_bytes = r->region_bytes;
  s->topology_source = dup0(r->topology_source);
  s->collectives = dup0(r->collectives);
  s->devices = array_from_pb(r->devices, r->n_devices, device_from_pb, device_free);
  s->ndevices = s->devices ? r->n_devices : 0;
  s->links = array_from_pb(r->links, r->n_links, link_from_pb, link_free);
  s->nlinks = s->links ? r->n_links : 0;
  s->transport = dup0(r->transport);
  s->host_collectives = dup0(r->host_collectives);
  s->device_collectives = dup0(r->device_collectives);
  s->mpi_threads = dup0(r->mpi_threads);
  s->rank_timeout_ms = r->rank_timeout_ms;
  s->rank_info = array_from_pb(r->rank_info, r->n_rank_info, rank_info_from_pb, rank_info_free);
  s->nrank_info = s->rank_info ? r->n_rank_info : 0;
  if (!s->version || !s->backend || !s->topology_source || !s->collectives ||
      (r->n_devices && !s->devices) || (r->n_links && !s->links) || !s->transport ||
      !s->host_collectives || !s->device_collectives || !s->mpi_threads ||
      (r->n_rank_info && !s->rank_info)) {
    qdp_server_status_free(s);
    return NULL;
  }
  return s;
}

/* A unary call whose reply is copied by `from` into a libqdp struct, returned (NULL on failure,
 * with *ret_rc saying why); `what` names the copy in the out-of-memory message. */
static void *unary_copy(qdp_client *c, const char *method, const ProtobufCMessage *req,
                        const ProtobufCMessageDescriptor *desc, from_pb_fn from, const char *what,
                        qdp_status *ret_rc) {
  ProtobufCMessage *rep = NULL;
  void *out = NULL;
  qdp_status rc = qdp__unary(c, method, req, desc, &rep);
  if (rc == QDP_OK) {
    out = from(rep);
    if (!out) {
      rc = qdp__err_nomem(what);
    }
  }
  if (rep) {
    protobuf_c_message_free_unpacked(rep, NULL);
  }
  *ret_rc = rc;
  return out;
}

/* ---- requests ---- */

static qdp_status check_client(const qdp_client *c) {
  if (!c) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "client", "The client is NULL.");
  }
  return QDP_OK;
}

/* The client, then the state reference. */
static qdp_status check_ref(const qdp_client *c, const char *handle, const char *token) {
  qdp_status rc = check_client(c);
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
static qdp_status check_ret(qdp_status rc, const void *ret) {
  if (rc == QDP_OK && !ret) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "ret", "The result pointer is NULL.");
  }
  return rc;
}

/* Points into the caller's strings: nothing allocated. */
static Qdp__StateRef state_ref(const char *handle, const char *token) {
  Qdp__StateRef ref = QDP__STATE_REF__INIT;
  ref.handle = (char *)handle;
  ref.token = (char *)token;
  return ref;
}

/* The protobuf request for opts + in, pointing into the caller's storage (nothing allocated).
 * Inputs that travel by upload are described by shape only. */
struct request {
  Qdp__EncodeRequest req;
  Qdp__Input input;
  Qdp__Placement placement;
  Qdp__SharedMemory shm;
  char path[PATH_MAX];
  char ticket[64];
};

static qdp_status build_request(const struct qdp_encode_opts *opts, const struct qdp_input *in,
                                struct request *r) {
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
  r->req.client_pid = r->req.views ? (int32_t)getpid() : 0; /* the lease ends when we exit */
  if (opts->label) {
    r->req.label = (char *)opts->label;
  }
  r->placement.policy = (Qdp__Policy)opts->policy;
  r->placement.n_devices = opts->ndevices;
  r->placement.devices = (char **)opts->devices;
  r->req.placement = &r->placement;
  r->req.input = &r->input;
  r->input.dtype = (Qdp__DType)in->dtype;
  r->input.rows = in->rows;
  r->input.cols = in->cols;
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

/* An absolute form of path into buf (PATH_MAX): the daemon names files absolutely. */
static qdp_status absolute(const char *path, char *buf, const char *field) {
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
static qdp_status hand_over_input(qdp_client *c, const struct qdp_input *in, struct request *r) {
  char sock[PATH_MAX];
  qdp_status rc = QDP_OK;
  int fd = -1;
  if (r->input.source_case == QDP__INPUT__SOURCE_PATH) {
    rc = absolute(in->path, r->path, "input.path");
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
    fd = qdp__open_shm(in->shm_name, in->shm_pid, in->shm_fd, &rc);
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
  *ret = state_from_pb(rep->state);
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
    size_t done = 0;
    while (done < n) {
      ssize_t r = pread(fd, p + h + done, n - done, (off_t)(off + done));
      if (r < 0 && errno == EINTR) {
        continue;
      }
      if (r <= 0) {
        int err = r < 0 ? errno : 0;
        grpc_slice_unref(s);
        return qdp__err_local(QDP_ERR_SYSTEM, err, "input.path",
                              "Reading '%s' at byte %" PRIu64 " failed: %s.", path, off + done,
                              r < 0 ? strerror(err) : "the file became shorter during the upload");
      }
      done += (size_t)r;
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
static int send_first(struct qdp__call *k, const ProtobufCMessage *m, int close) {
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
  int ok = send_first(&k, &first.base, 0);
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

/* Encode or Plan (plan != 0) for every input kind. */
static qdp_status encode_or_plan(qdp_client *c, const struct qdp_encode_opts *opts,
                                 const struct qdp_input *in, int plan,
                                 struct qdp_state_info **ret_state,
                                 struct qdp_plan_info **ret_plan) {
  struct request r;
  qdp_status rc = build_request(opts, in, &r);
  if (rc == QDP_OK) {
    rc = hand_over_input(c, in, &r);
  }
  if (rc != QDP_OK) {
    return rc;
  }
  int fd = -1;
  unsigned char *filebuf = NULL;
  uint64_t total = 0, data_off = 0;
  int stream = 0;
  const char *path = in->path;
  if (in->kind == QDP_INPUT_UPLOAD) {
    if (!in->data && in->data_bytes) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.data",
                            "data_bytes is %zu but data is NULL.", in->data_bytes);
    }
    total = in->data_bytes;
    stream = 1;
    if (plan && total <= in->inline_max) {
      r.input.source_case = QDP__INPUT__SOURCE_DATA;
      r.input.data.data = (uint8_t *)in->data;
      r.input.data.len = in->data_bytes;
    }
  } else if (in->kind == QDP_INPUT_LOCAL_FILE) {
    if (!path || !*path) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                            "A local-file input needs a path.");
    }
    struct qdp__npy d;
    rc = qdp__input_file_open(path, in->dtype, in->rows, in->cols, in->offset, &fd, &d);
    if (rc != QDP_OK) {
      return rc;
    }
    basis_reshape(opts, in, &d);
    r.input.dtype = (Qdp__DType)d.dtype;
    r.input.rows = d.shape[0];
    r.input.cols = d.shape[1];
    total = d.count * qdp_dtype_size(d.dtype);
    data_off = d.data_offset;
    if (total <= in->inline_max) {
      /* Small: one message is cheaper than a stream. */
      filebuf = malloc(total ? total : 1);
      if (!filebuf) {
        close(fd);
        return qdp__err_nomem("reading a small input file");
      }
      size_t got = 0;
      while (got < total) {
        ssize_t n = pread(fd, filebuf + got, (size_t)(total - got), (off_t)(data_off + got));
        if (n < 0 && errno == EINTR) {
          continue;
        }
        if (n <= 0) {
          int err = n < 0 ? errno : 0;
          free(filebuf);
          close(fd);
          return qdp__err_local(QDP_ERR_SYSTEM, err, "input.path", "Reading '%s' failed: %s.", path,
                                n < 0 ? strerror(err) : "it became shorter");
        }
        got += (size_t)n;
      }
      r.input.source_case = QDP__INPUT__SOURCE_DATA;
      r.input.data.data = filebuf;
      r.input.data.len = total;
    } else {
      stream = 1;
    }
  }

  if (plan) {
    /* A dry run never uploads: a streamed input is described by its shape. */
    *ret_plan = unary_copy(c, M_PLAN, &r.req.base, &qdp__plan_reply__descriptor, plan_from_pb,
                           "copying the plan reply", &rc);
  } else if (stream && r.input.source_case == QDP__INPUT__SOURCE__NOT_SET) {
    rc = upload(c, &r.req, in->kind == QDP_INPUT_UPLOAD ? in->data : NULL, fd, data_off, total,
                path ? path : "", in, ret_state);
  } else {
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
      (void)in->progress(in->progress_arg, total, total);
    }
  }
  free(filebuf);
  if (fd >= 0) {
    close(fd);
  }
  return rc;
}

qdp_status qdp_encode(qdp_client *c, const struct qdp_encode_opts *opts, const struct qdp_input *in,
                      struct qdp_state_info **ret) {
  qdp__err_reset();
  qdp_status rc = check_ret(check_client(c), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  *ret = NULL;
  return encode_or_plan(c, opts, in, 0, ret, NULL);
}

qdp_status qdp_plan(qdp_client *c, const struct qdp_encode_opts *opts, const struct qdp_input *in,
                    struct qdp_plan_info **ret) {
  qdp__err_reset();
  qdp_status rc = check_ret(check_client(c), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  *ret = NULL;
  return encode_or_plan(c, opts, in, 1, NULL, ret);
}

qdp_status qdp__describe(qdp_client *c, const char *handle, const char *token, int views,
                         struct qdp_state_info **ret) {
  qdp_status rc = check_ret(check_ref(c, handle, token), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__DescribeRequest req = QDP__DESCRIBE_REQUEST__INIT;
  req.handle = (char *)handle;
  req.token = (char *)token;
  req.views = views != 0;
  req.client_pid = views ? (int32_t)getpid() : 0; /* the lease ends when we exit */
  *ret = unary_copy(c, M_DESCRIBE, &req.base, &qdp__state_info__descriptor, state_from_pb,
                    "copying the describe reply", &rc);
  return rc;
}

qdp_status qdp_describe(qdp_client *c, const char *handle, const char *token,
                        struct qdp_state_info **ret) {
  qdp__err_reset();
  return qdp__describe(c, handle, token, 0, ret);
}

qdp_status qdp__close_view(qdp_client *c, const char *handle, const char *token, uint64_t lease_id,
                           uint64_t *ret_freed_bytes) {
  qdp_status rc = check_ref(c, handle, token);
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__CloseViewRequest req = QDP__CLOSE_VIEW_REQUEST__INIT;
  req.handle = (char *)handle;
  req.token = (char *)token;
  req.lease_id = lease_id;
  Qdp__CloseViewReply *rep = NULL;
  rc = qdp__unary(c, M_CLOSE_VIEW, &req.base, &qdp__close_view_reply__descriptor,
                  (ProtobufCMessage **)&rep);
  if (rc == QDP_OK && ret_freed_bytes) {
    *ret_freed_bytes = rep->freed_bytes;
  }
  if (rep) {
    qdp__close_view_reply__free_unpacked(rep, NULL);
  }
  return rc;
}

qdp_status qdp_close_view(qdp_client *c, const char *handle, const char *token, uint64_t lease_id,
                          uint64_t *ret_freed_bytes) {
  qdp__err_reset();
  return qdp__close_view(c, handle, token, lease_id, ret_freed_bytes);
}

qdp_status qdp_gather(qdp_client *c, const char *handle, const char *token, const char *device,
                      uint64_t ttl_seconds, struct qdp_state_info **ret) {
  qdp__err_reset();
  qdp_status rc = check_ret(check_ref(c, handle, token), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  if (!device || !*device) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "device",
                          "The device is empty: give a name as status lists it, or an index.");
  }
  Qdp__StateRef ref = state_ref(handle, token);
  Qdp__GatherRequest req = QDP__GATHER_REQUEST__INIT;
  req.state = &ref;
  req.device = (char *)device;
  req.ttl_seconds = ttl_seconds;
  Qdp__EncodeReply *rep = NULL;
  rc =
      qdp__unary(c, M_GATHER, &req.base, &qdp__encode_reply__descriptor, (ProtobufCMessage **)&rep);
  if (rc == QDP_OK) {
    *ret = rep->state ? state_from_pb(rep->state) : NULL;
    if (!*ret) {
      rc = rep->state ? qdp__err_nomem("copying the gather reply")
                      : qdp__err_local(QDP_ERR_INTERNAL, -1, "state",
                                       "The daemon's Gather reply holds no state.");
    }
  }
  if (rep) {
    qdp__encode_reply__free_unpacked(rep, NULL);
  }
  return rc;
}

static qdp_status list(qdp_client *c, int all, struct qdp_state_list **ret) {
  qdp__err_reset();
  qdp_status rc = check_ret(check_client(c), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__ListRequest req = QDP__LIST_REQUEST__INIT;
  req.all = all != 0;
  *ret = unary_copy(c, M_LIST, &req.base, &qdp__list_reply__descriptor, list_from_pb,
                    "copying the list reply", &rc);
  return rc;
}

qdp_status qdp_list(qdp_client *c, struct qdp_state_list **ret) {
  return list(c, 0, ret);
}

qdp_status qdp_list_all(qdp_client *c, struct qdp_state_list **ret) {
  return list(c, 1, ret);
}

qdp_status qdp_release(qdp_client *c, const char *handle, const char *token,
                       uint64_t *ret_freed_bytes) {
  qdp__err_reset();
  qdp_status rc = check_ref(c, handle, token);
  if (rc != QDP_OK) {
    return rc;
  }
  /* This client's own views of the state end with it. */
  qdp__views_forget(c, handle);
  Qdp__StateRef ref = state_ref(handle, token);
  Qdp__ReleaseReply *rep = NULL;
  rc = qdp__unary(c, M_RELEASE, &ref.base, &qdp__release_reply__descriptor,
                  (ProtobufCMessage **)&rep);
  if (rc == QDP_OK && ret_freed_bytes) {
    *ret_freed_bytes = rep->freed_bytes;
  }
  if (rep) {
    qdp__release_reply__free_unpacked(rep, NULL);
  }
  return rc;
}

/* ---- Fetch ---- */

/* Where fetched chunks go: the caller's buffer or a file descriptor (after a header). */
struct sink {
  unsigned char *dst;
  size_t dst_bytes;
  int fd;
  uint64_t fd_base;
  const char *path;
  qdp_dtype want_dtype; /* UNSPECIFIED: take the first chunk's */
  qdp_dtype dtype;
  uint64_t offset;   /* of the request */
  uint64_t total;    /* amplitudes, from the first chunk */
  uint64_t expect;   /* amplitudes the caller expects; 0 = any */
  uint64_t received; /* bytes */
};

/* One chunk's fields; its data is copied out by `copy` (from a parsed message or straight from the
 * received slices), so the bytes are moved once. */
struct chunk {
  uint64_t offset, total, len;
  int dtype;
  void (*copy)(void *arg, void *dst, uint64_t n);
  void *arg;
};

static qdp_status sink_put(struct sink *s, const struct chunk *ch) {
  if (s->dtype == QDP_DTYPE_UNSPECIFIED) {
    s->dtype = (qdp_dtype)ch->dtype;
    s->total = ch->total;
    unsigned es = qdp_dtype_size(s->dtype);
    if (!es) {
      return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                            "qdpd's fetch stream has an unknown dtype %d.", (int)ch->dtype);
    }
    if (s->want_dtype != QDP_DTYPE_UNSPECIFIED && s->dtype != s->want_dtype) {
      return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL, "qdpd streamed %s values for a %s state.",
                            qdp_dtype_name(s->dtype), qdp_dtype_name(s->want_dtype));
    }
    if (s->expect && s->total != s->expect) {
      return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                            "qdpd is streaming %" PRIu64 " amplitudes where %" PRIu64
                            " were asked for.",
                            s->total, s->expect);
    }
    if (s->dst && s->total > s->dst_bytes / es) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "dst_bytes",
                            "The fetch returns %" PRIu64 " amplitudes (%" PRIu64
                            " bytes) but the buffer holds %zu bytes.",
                            s->total, s->total * es, s->dst_bytes);
    }
  }
  unsigned es = qdp_dtype_size(s->dtype);
  uint64_t len = ch->len;
  if ((qdp_dtype)ch->dtype != s->dtype || ch->offset < s->offset || len % es != 0 ||
      ch->offset - s->offset > s->total || len / es > s->total - (ch->offset - s->offset)) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                          "qdpd sent a chunk outside the fetch: offset %" PRIu64 ", %" PRIu64
                          " bytes, for amplitudes [%" PRIu64 ", %" PRIu64 ").",
                          ch->offset, len, s->offset, s->offset + s->total);
  }
  uint64_t at = (ch->offset - s->offset) * es;
  if (s->dst) {
    ch->copy(ch->arg, s->dst + at, len);
  } else {
    /* A file: through a bounded buffer, pwrite'd in place. */
    uint8_t *bytes = malloc(len ? len : 1);
    if (!bytes) {
      return qdp__err_local(QDP_ERR_RESOURCE_EXHAUSTED, ENOMEM, NULL,
                            "No memory for a fetch chunk of %" PRIu64 " bytes.", len);
    }
    ch->copy(ch->arg, bytes, len);
    size_t done = 0;
    while (done < len) {
      ssize_t n = pwrite(s->fd, bytes + done, len - done, (off_t)(s->fd_base + at + done));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        int err = n < 0 ? errno : ENOSPC;
        free(bytes);
        return qdp__err_local(QDP_ERR_SYSTEM, err, "path", "Writing '%s' failed: %s.", s->path,
                              strerror(err));
      }
      done += (size_t)n;
    }
    free(bytes);
  }
  s->received += len;
  return QDP_OK;
}

/* A read cursor over a received message's slices, so that a chunk's data is copied once, straight
 * to where it belongs, instead of joined, unpacked and copied again. */
static void binary_copy(void *arg, void *dst, uint64_t n) {
  /* A chunk without data has (NULL, 0) there, and memcpy wants valid pointers even for 0 bytes. */
  if (n) {
    memcpy(dst, ((const ProtobufCBinaryData *)arg)->data, n);
  }
}

/* Delivers one received FetchChunk to the sink. In qdpd's layout (common/qdp_wire.h) the data is
 * copied straight from the slices; any other layout, still valid protobuf, goes through the
 * generic unpack. */
static qdp_status read_chunk(grpc_byte_buffer *bb, struct sink *s) {
  struct qdp_wire_reader k;
  struct qdp_wire_chunk h;
  if (qdp_wire_fetch_chunk_open(bb, &k, &h)) {
    struct chunk ch = {.offset = h.offset,
                       .total = h.total,
                       .len = h.data_len,
                       .dtype = h.dtype,
                       .copy = qdp_wire_reader_copy,
                       .arg = &k};
    qdp_status rc = sink_put(s, &ch);
    qdp_wire_reader_close(&k);
    return rc;
  }
  qdp_wire_reader_close(&k);
  Qdp__FetchChunk *m = (Qdp__FetchChunk *)qdp__unpack(bb, &qdp__fetch_chunk__descriptor);
  if (!m) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                          "qdpd sent a fetch chunk that is not a valid FetchChunk message.");
  }
  struct chunk ch = {.offset = m->offset,
                     .total = m->total,
                     .len = m->data.len,
                     .dtype = m->dtype,
                     .copy = binary_copy,
                     .arg = &m->data};
  qdp_status rc = sink_put(s, &ch);
  qdp__fetch_chunk__free_unpacked(m, NULL);
  return rc;
}

/* A stream that ended with OK must have delivered every amplitude it announced. */
static qdp_status sink_end(const struct sink *s) {
  uint64_t want = s->total * qdp_dtype_size(s->dtype);
  if (s->dtype == QDP_DTYPE_UNSPECIFIED || s->received != want) {
    return qdp__err_local(QDP_ERR_DATA_LOSS, -1, NULL,
                          "The fetch stream ended after %" PRIu64 " of %" PRIu64 " bytes.",
                          s->received, want);
  }
  return QDP_OK;
}

static qdp_status fetch_stream(qdp_client *c, const char *handle, const char *token,
                               const struct qdp_fetch_opts *o, struct sink *s) {
  Qdp__StateRef ref = state_ref(handle, token);
  Qdp__FetchRequest req = QDP__FETCH_REQUEST__INIT;
  req.state = &ref;
  req.offset = o->offset;
  req.count = o->count;
  req.chunk_bytes = o->chunk_bytes;
  s->offset = o->offset;
  struct qdp__call k;
  qdp_status rc = qdp__call_begin(c, M_FETCH, 1, &k);
  if (rc != QDP_OK) {
    return qdp__call_end(&k, rc);
  }
  int ok = send_first(&k, &req.base, 1);
  while (ok) {
    grpc_byte_buffer *recv = NULL;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &recv;
    ok = qdp__call_batch(&k, &op, 1);
    if (!ok || !recv) {
      break; /* end of stream: the status says whether it is complete */
    }
    rc = read_chunk(recv, s);
    grpc_byte_buffer_destroy(recv);
    if (rc == QDP_OK && o->progress &&
        o->progress(o->progress_arg, s->received, s->total * qdp_dtype_size(s->dtype)) != 0) {
      rc = qdp__err_local(
          QDP_ERR_CANCELLED, -1, NULL,
          "The fetch was cancelled by its progress callback after %" PRIu64 " bytes.", s->received);
    }
    if (rc != QDP_OK) {
      qdp__call_cancel(&k);
      break;
    }
  }
  rc = qdp__call_end(&k, rc);
  return rc == QDP_OK ? sink_end(s) : rc;
}

static qdp_status fetch_opts(const struct qdp_fetch_opts *opts, struct qdp_fetch_opts *o) {
  *o = (struct qdp_fetch_opts)QDP_FETCH_OPTS_INIT;
  if (opts) {
    if (opts->struct_size < offsetof(struct qdp_fetch_opts, chunk_bytes)) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "opts",
                            "The fetch options are too short; initialise them with "
                            "QDP_FETCH_OPTS_INIT.");
    }
    memcpy(o, opts, opts->struct_size < sizeof *o ? opts->struct_size : sizeof *o);
  }
  return QDP_OK;
}

qdp_status qdp_fetch(qdp_client *c, const char *handle, const char *token,
                     const struct qdp_fetch_opts *opts, void *dst, size_t dst_bytes,
                     size_t *ret_bytes) {
  qdp__err_reset();
  struct qdp_fetch_opts o;
  qdp_status rc = check_ref(c, handle, token);
  if (rc == QDP_OK) {
    rc = fetch_opts(opts, &o);
  }
  if (rc == QDP_OK && !dst) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "dst", "The destination buffer is NULL.");
  }
  if (rc != QDP_OK) {
    return rc;
  }
  struct sink s;
  memset(&s, 0, sizeof s);
  s.dst = dst;
  s.dst_bytes = dst_bytes;
  s.fd = -1;
  s.expect = o.count;
  rc = fetch_stream(c, handle, token, &o, &s);
  if (ret_bytes) {
    *ret_bytes = rc == QDP_OK ? (size_t)s.received : 0;
  }
  return rc;
}

/* A fresh name beside path for the partial file. */
static int open_temp(const char *path, char *tmp, size_t size) {
  static unsigned counter;
  for (int attempt = 0; attempt < 100; attempt++) {
    unsigned n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    int w = snprintf(tmp, size, "%s.part-%ld-%u", path, (long)getpid(), n);
    if (w < 0 || (size_t)w >= size) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) {
      return fd;
    }
  }
  return -1;
}

qdp_status qdp_fetch_npy(qdp_client *c, const char *handle, const char *token,
                         const struct qdp_fetch_opts *opts, const char *path, int overwrite) {
  qdp__err_reset();
  struct qdp_fetch_opts o;
  qdp_status rc = check_ref(c, handle, token);
  if (rc == QDP_OK) {
    rc = fetch_opts(opts, &o);
  }
  if (rc == QDP_OK && (!path || !*path)) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "path", "The output path is empty.");
  }
  if (rc != QDP_OK) {
    return rc;
  }
  if (!overwrite && access(path, F_OK) == 0) {
    return qdp__err_local(QDP_ERR_ALREADY_EXISTS, EEXIST, "path",
                          "'%s' exists (set overwrite to replace it).", path);
  }
  /* The shape needs the state's layout, and the header must be written before the data. */
  struct qdp_state_info *st = NULL;
  rc = qdp_describe(c, handle, token, &st);
  if (rc != QDP_OK) {
    return rc;
  }
  uint64_t per = st->qubits < 64 ? (uint64_t)1 << st->qubits : 0;
  uint64_t batch = st->batch ? st->batch : 1;
  uint64_t all = per && batch <= UINT64_MAX / per ? per * batch : 0;
  qdp_dtype dtype = st->dtype;
  qdp_state_info_free(st);
  if (!all || o.offset >= all || o.count > all - o.offset) {
    return qdp__err_local(QDP_ERR_OUT_OF_RANGE, -1, "offset",
                          "Amplitudes [%" PRIu64 ", %" PRIu64 ") are outside the state's %" PRIu64
                          ".",
                          o.offset, o.offset + (o.count ? o.count : all - o.offset), all);
  }
  uint64_t count = o.count ? o.count : all - o.offset;
  /* The whole of a batch is (batch, 2^n); anything else one vector. */
  const int whole = o.offset == 0 && count == all && batch > 1;
  char hdr[QDP_NPY_HEADER_CAP];
  size_t hlen;
  struct qdp_npy_error ne;
  if (qdp_npy_format(dtype, whole ? 2 : 1, whole ? batch : 1, whole ? per : count, hdr, sizeof hdr,
                     &hlen, &ne) != QDP_OK) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL, "The state has no .npy form: %s.", ne.msg);
  }
  char tmp[4096];
  int fd = open_temp(path, tmp, sizeof tmp);
  if (fd < 0) {
    return qdp__err_local(QDP_ERR_SYSTEM, errno, "path", "Cannot create a file beside '%s': %s.",
                          path, strerror(errno));
  }
  struct sink s;
  memset(&s, 0, sizeof s);
  s.fd = fd;
  s.fd_base = hlen;
  s.path = tmp;
  s.want_dtype = dtype;
  s.expect = count;
  if (pwrite(fd, hdr, hlen, 0) != (ssize_t)hlen) {
    rc = qdp__err_local(QDP_ERR_SYSTEM, errno, "path", "Writing '%s' failed: %s.", tmp,
                        strerror(errno));
  }
  if (rc == QDP_OK) {
    o.count = count;
    rc = fetch_stream(c, handle, token, &o, &s);
  }
  if (rc == QDP_OK && fsync(fd) != 0) {
    rc = qdp__err_local(QDP_ERR_SYSTEM, errno, "path", "Flushing '%s' failed: %s.", tmp,
                        strerror(errno));
  }
  if (close(fd) != 0 && rc == QDP_OK) {
    rc = qdp__err_local(QDP_ERR_SYSTEM, errno, "path", "Closing '%s' failed: %s.", tmp,
                        strerror(errno));
  }
  if (rc == QDP_OK) {
    /* link() refuses an existing name atomically; rename() replaces it. */
    int r = overwrite ? rename(tmp, path) : link(tmp, path);
    if (r != 0) {
      rc = qdp__err_local(errno == EEXIST ? QDP_ERR_ALREADY_EXISTS : QDP_ERR_SYSTEM, errno, "path",
                          "Cannot create '%s': %s.", path, strerror(errno));
    }
  }
  if (rc != QDP_OK || !overwrite) {
    (void)unlink(tmp);
  }
  return rc;
}

/* Export from a client on the daemon's node: this process creates the file beside its target
 * with its own rights, hands it over for the daemon to fill, and names it once it is complete,
 * so the daemon writes nowhere this process could not and a failure leaves no partial file. */
static qdp_status export_local(qdp_client *c, Qdp__ExportRequest *req, const char *path,
                               int overwrite, Qdp__ExportReply **rep) {
  char tmp[PATH_MAX], ticket[64];
  const char *slash = strrchr(path, '/');
  const char *base = slash + 1;
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "path", "'%s' does not name a file.", path);
  }
  struct stat st;
  if (!overwrite && lstat(path, &st) == 0) {
    return qdp__err_local(QDP_ERR_ALREADY_EXISTS, -1, "path",
                          "'%s' exists; choose another path or ask to overwrite it.", path);
  }
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) {
      r ^= (uint32_t)getpid() * 2654435761u + (uint32_t)attempt;
    }
    if (snprintf(tmp, sizeof tmp, "%.*s.%s.%08x", (int)(base - path), path, base, r) >=
        (int)sizeof tmp) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "path",
                            "'%s' is too long for a temporary name beside it.", path);
    }
    fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0 && errno != EEXIST) {
      int err = errno;
      return qdp__err_local(qdp__errno_status(err, QDP_ERR_SYSTEM), err, "path",
                            "Cannot create a file beside '%s': %s.", path, strerror(err));
    }
  }
  if (fd < 0) {
    return qdp__err_local(QDP_ERR_SYSTEM, EEXIST, "path",
                          "Cannot find a free temporary name beside '%s'.", path);
  }
  qdp_status rc = qdp__handoff(c, fd, 2, "path", ticket, sizeof ticket);
  close(fd);
  if (rc == QDP_OK) {
    req->path = tmp;
    req->fd_ticket = ticket;
    rc = qdp__unary(c, M_EXPORT, &req->base, &qdp__export_reply__descriptor,
                    (ProtobufCMessage **)rep);
  }
  if (rc == QDP_OK && renameat2(AT_FDCWD, tmp, AT_FDCWD, path, overwrite ? 0 : RENAME_NOREPLACE)) {
    int err = errno;
    rc = qdp__err_local(err == EEXIST ? QDP_ERR_ALREADY_EXISTS : QDP_ERR_SYSTEM, err, "path",
                        "Cannot name the exported file '%s': %s.", path, strerror(err));
  }
  if (rc != QDP_OK) {
    unlink(tmp);
  }
  return rc;
}

qdp_status qdp_export(qdp_client *c, const char *handle, const char *token, const char *path,
                      int overwrite, char **ret_path, uint64_t *ret_bytes) {
  qdp__err_reset();
  qdp_status rc = check_ref(c, handle, token);
  if (rc == QDP_OK && (!path || !*path)) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "path", "The export path is empty.");
  }
  char abs[PATH_MAX];
  if (rc == QDP_OK) {
    rc = absolute(path, abs, "path");
  }
  if (rc != QDP_OK) {
    return rc;
  }
  if (ret_path) {
    *ret_path = NULL;
  }
  Qdp__StateRef ref = state_ref(handle, token);
  Qdp__ExportRequest req = QDP__EXPORT_REQUEST__INIT;
  req.state = &ref;
  req.path = abs;
  req.overwrite = overwrite != 0;
  Qdp__ExportReply *rep = NULL;
  char sock[PATH_MAX];
  if (qdp__unix_path(c, sock, sizeof sock)) {
    rc = export_local(c, &req, abs, overwrite, &rep);
  } else {
    rc = qdp__unary(c, M_EXPORT, &req.base, &qdp__export_reply__descriptor,
                    (ProtobufCMessage **)&rep);
  }
  if (rc == QDP_OK) {
    if (ret_bytes) {
      *ret_bytes = rep->bytes;
    }
    if (ret_path) {
      *ret_path = strdup(abs);
      if (!*ret_path) {
        rc = qdp__err_nomem("copying the export reply");
      }
    }
  }
  if (rep) {
    qdp__export_reply__free_unpacked(rep, NULL);
  }
  return rc;
}

qdp_status qdp_get_status(qdp_client *c, struct qdp_server_status **ret) {
  qdp__err_reset();
  qdp_status rc = check_ret(check_client(c), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__StatusRequest req = QDP__STATUS_REQUEST__INIT;
  *ret = unary_copy(c, M_STATUS, &req.base, &qdp__status_reply__descriptor, status_from_pb,
                    "copying the status reply", &rc);
  return rc;
}

qdp_status qdp_get_health(qdp_client *c, qdp_health *ret) {
  qdp__err_reset();
  qdp_status rc = check_ret(check_client(c), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__HealthRequest req = QDP__HEALTH_REQUEST__INIT;
  Qdp__HealthReply *rep = NULL;
  rc =
      qdp__unary(c, M_HEALTH, &req.base, &qdp__health_reply__descriptor, (ProtobufCMessage **)&rep);
  *ret = rc == QDP_OK ? (qdp_health)rep->status : QDP_HEALTH_UNKNOWN;
  if (rep) {
    qdp__health_reply__free_unpacked(rep, NULL);
  }
  return rc;
}

/* ---- Registered regions ---- */

qdp_status qdp_region_register(qdp_client *c, const char *name, int pid, int fd,
                               struct qdp_region_info *ret_info) {
  qdp__err_reset();
  qdp_status rc = check_ret(check_client(c), ret_info);
  if (rc != QDP_OK) {
    return rc;
  }
  if (ret_info->struct_size < sizeof *ret_info) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "ret_info",
                          "The region info is too short; initialise it with QDP_REGION_INFO_INIT.");
  }
  if ((!name || !*name) && (pid <= 0 || fd < 0)) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "region",
                          "A region needs a name, or a pid > 0 and an fd >= 0 (got %d and %d).",
                          pid, fd);
  }
  Qdp__RegisterRegionRequest req = QDP__REGISTER_REGION_REQUEST__INIT;
  if (name && *name) {
    req.name = (char *)name;
  } else {
    req.pid = pid;
    req.fd = fd;
  }
  /* The daemon maps what this process opened, with this process's rights. */
  char ticket[64];
  int f = qdp__open_shm(name, pid, fd, &rc);
  if (f < 0) {
    return rc;
  }
  rc = qdp__handoff(c, f, 1, "region", ticket, sizeof ticket);
  close(f);
  if (rc != QDP_OK) {
    return rc;
  }
  req.fd_ticket = ticket;
  Qdp__RegionInfo *rep = NULL;
  rc = qdp__unary(c, M_REGISTER_REGION, &req.base, &qdp__region_info__descriptor,
                  (ProtobufCMessage **)&rep);
  if (rc == QDP_OK) {
    snprintf(ret_info->handle, sizeof ret_info->handle, "%s", rep->handle ? rep->handle : "");
    snprintf(ret_info->token, sizeof ret_info->token, "%s", rep->token ? rep->token : "");
    snprintf(ret_info->owner, sizeof ret_info->owner, "%s", rep->owner ? rep->owner : "");
    ret_info->bytes = rep->bytes;
    ret_info->sealed = rep->sealed;
    ret_info->pinned = rep->pinned;
    ret_info->created_unix_ms = rep->created_unix_ms;
  }
  if (rep) {
    qdp__region_info__free_unpacked(rep, NULL);
  }
  return rc;
}

qdp_status qdp_region_unregister(qdp_client *c, const char *handle, const char *token) {
  qdp__err_reset();
  qdp_status rc = check_client(c);
  if (rc != QDP_OK) {
    return rc;
  }
  if (!handle || !*handle || !token) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, !handle || !*handle ? "handle" : "token",
                          "The region's %s is missing.", !handle || !*handle ? "handle" : "token");
  }
  Qdp__RegionRef ref = QDP__REGION_REF__INIT;
  ref.handle = (char *)handle;
  ref.token = (char *)token;
  Qdp__UnregisterRegionReply *rep = NULL;
  rc = qdp__unary(c, M_UNREGISTER_REGION, &ref.base, &qdp__unregister_region_reply__descriptor,
                  (ProtobufCMessage **)&rep);
  if (rep) {
    qdp__unregister_region_reply__free_unpacked(rep, NULL);
  }
  return rc;
}

/* ---- Decoding without a call (libqdp_int.h) ---- */

void *qdp__reply_from_pb(const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  if (d == &qdp__state_info__descriptor) {
    return state_from_pb(m);
  }
  if (d == &qdp__plan_reply__descriptor) {
    return plan_from_pb(m);
  }
  if (d == &qdp__list_reply__descriptor) {
    return list_from_pb(m);
  }
  if (d == &qdp__status_reply__descriptor) {
    return status_from_pb(m);
  }
  return NULL;
}

qdp_status qdp__fetch_deliver(grpc_byte_buffer *const *msgs, size_t n, uint64_t offset,
                              uint64_t count, qdp_dtype want_dtype, void *dst, size_t dst_bytes,
                              int fd, uint64_t *ret_bytes) {
  struct sink s;
  memset(&s, 0, sizeof s);
  s.dst = dst;
  s.dst_bytes = dst_bytes;
  s.fd = dst ? -1 : fd;
  s.path = "the fetch's file";
  s.want_dtype = want_dtype;
  s.offset = offset;
  s.expect = count;
  qdp_status rc = QDP_OK;
  for (size_t i = 0; i < n && rc == QDP_OK; i++) {
    rc = read_chunk(msgs[i], &s);
  }
  if (rc == QDP_OK) {
    rc = sink_end(&s);
  }
  *ret_bytes = s.received;
  return rc;
}
