/* The trust boundary of a request (access.h). */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "access.h"
#include "clock.h"
#include "server_state.h"

qdp_status rpc_check_tcp_path(const struct rpc_call *c, const struct io_folder *folder,
                              const char *option, const char *field, struct qdp_error *err) {
  if (!c->srv->tcp_node_paths) {
    return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, field,
                         "%s names a file on the daemon's node, which TCP clients may not do "
                         "(tcp_node_paths = no); use inline data or EncodeUpload",
                         field);
  }
  if (folder->fd < 0) {
    return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, field,
                         "%s names a file on the daemon's node, but TCP clients may name files "
                         "only beneath %s, which is not set",
                         field, option);
  }
  return QDP_OK;
}

qdp_status rpc_take_fd(const struct rpc_call *c, const char *ticket, enum fd_access access,
                       const char *what, const char *field, int *ret_fd, struct qdp_error *err) {
  struct rpc_server *s = c->srv;
  qdp_status rc = QDP_OK;
  if (c->tcp) {
    return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, field,
                         "%s is for callers on the daemon's node (its Unix socket), which hand "
                         "over what they opened; TCP callers send their data inline or upload it",
                         what);
  }
  if (!ticket || !ticket[0]) {
    return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, field,
                         "%s is on the daemon's node, which never opens it for a caller: open it "
                         "yourself, hand the descriptor over on the socket and name the ticket "
                         "in %s (libqdp, qdpctl and the Python package do this)",
                         what, field);
  }
  int fd = -1;
  QDP_TRY(rc, fd_tickets_take(s->tickets, c->owner, ticket, access,
                              (int64_t)(clock_mono_ns() / CLOCK_NS_PER_MS), field, &fd, err));
  rc = io_check_not_own(fd, s->own, s->nown, field, err);
  if (rc != QDP_OK) {
    close(fd);
    return rc;
  }
  *ret_fd = fd;
out:
  return rc;
}

void rpc_shm_what(const char *name, int pid, int fd, char *buf, size_t len) {
  if (name && name[0]) {
    snprintf(buf, len, "shared memory '%.200s'", name);
  } else if (pid > 0) {
    snprintf(buf, len, "fd %d of process %d", fd, pid);
  } else {
    snprintf(buf, len, "the handed-over shared memory");
  }
  for (char *p = buf; *p; p++) {
    if ((unsigned char)*p < 0x20) {
      *p = '?';
    }
  }
}

#define FIELD_MAX sizeof(((struct qdp_error *)0)->field)

/* "<field>.<leaf>" in buf (the field names of an input that is not the request's `input`). */
static const char *subfield(char buf[FIELD_MAX], const char *field, const char *leaf) {
  snprintf(buf, FIELD_MAX, "%s.%s", field, leaf);
  return buf;
}

/* The .npy file a request names: for a Unix caller the descriptor it handed over (which must also
 * be the file beneath input_dir, when set); for a TCP caller the file opened beneath input_dir. */
static qdp_status input_file_fd(const struct rpc_call *c, const Qdp__Input *in, const char *field,
                                int *ret_fd, struct qdp_error *err) {
  struct rpc_server *s = c->srv;
  int fd = -1;
  qdp_status rc;
  char path[FIELD_MAX], ticket[FIELD_MAX];
  subfield(path, field, "path");
  QDP_TRY(rc, io_check_path(in->path, path, err));
  if (c->tcp) {
    QDP_TRY(rc, rpc_check_tcp_path(c, &s->input_folder, "input_dir", path, err));
    QDP_TRY(rc, io_folder_open_file(&s->input_folder, in->path, O_RDONLY | O_NONBLOCK, path, &fd,
                                    err));
    rc = io_check_not_own(fd, s->own, s->nown, path, err);
  } else {
    char what[CONFIG_STR_MAX + 16];
    snprintf(what, sizeof what, "%s '%.200s'", path, in->path);
    QDP_TRY(rc, rpc_take_fd(c, in->fd_ticket, FD_ACCESS_READ, what,
                            subfield(ticket, field, "fd_ticket"), &fd, err));
    if (s->input_folder.fd >= 0) {
      rc = io_folder_check_fd(&s->input_folder, in->path, fd, path, err);
    }
  }
  if (rc != QDP_OK) {
    close(fd);
    goto out;
  }
  *ret_fd = fd;
out:
  return rc;
}

qdp_status rpc_input_of(const struct rpc_call *c, const Qdp__Input *in, const char *field,
                        struct job_input *ret, char *what, size_t what_len,
                        struct qdp_error *err) {
  char sub[FIELD_MAX];
  if (!in) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, field, "%s is missing", field);
  }
  *ret = (struct job_input){
      .field = field, .dtype = in->dtype, .rows = in->rows, .cols = in->cols, .fd = -1};
  const Qdp__SharedMemory *sh = in->shm;
  switch (in->source_case) {
  case QDP__INPUT__SOURCE_DATA:
    ret->source = QDP_SOURCE_VALUES;
    ret->values = in->data.data;
    ret->bytes = in->data.len;
    return QDP_OK;
  case QDP__INPUT__SOURCE_PATH:
    ret->source = QDP_SOURCE_FILE;
    ret->path = in->path;
    return input_file_fd(c, in, field, &ret->fd, err);
  case QDP__INPUT__SOURCE_SHM:
    if (!sh) {
      return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, subfield(sub, field, "shm"),
                           "%s is empty", sub);
    }
    ret->offset = sh->offset;
    ret->length = sh->length;
    if (sh->region && sh->region[0]) {
      ret->source = QDP_SOURCE_REGION;
      ret->region = sh->region;
      ret->region_token = sh->region_token;
      return QDP_OK;
    }
    ret->source = QDP_SOURCE_SHM;
    rpc_shm_what(sh->name, sh->pid, sh->fd, what, what_len);
    ret->what = what;
    return rpc_take_fd(c, sh->fd_ticket, FD_ACCESS_READ, what,
                       subfield(sub, field, "shm.fd_ticket"), &ret->fd, err);
  case QDP__INPUT__SOURCE_CUDA_IPC:
    if (c->tcp) {
      /* An IPC handle opens only on the node it came from, for a process of that node. */
      return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, subfield(sub, field, "cuda_ipc"),
                           "%s is for callers on the daemon's node (its Unix socket); TCP "
                           "callers send their data inline or upload it",
                           sub);
    }
    ret->source = QDP_SOURCE_CUDA_IPC;
    ret->offset = in->cuda_ipc ? in->cuda_ipc->offset : 0;
    ret->ipc_handle = in->cuda_ipc ? in->cuda_ipc->ipc_handle.data : NULL;
    ret->ipc_handle_len = in->cuda_ipc ? in->cuda_ipc->ipc_handle.len : 0;
    ret->device_uuid = in->cuda_ipc ? in->cuda_ipc->device_uuid : NULL;
    return QDP_OK;
  default:
    ret->source = QDP_SOURCE_NONE; /* a plan of data still to be uploaded; an encode refuses it */
    return QDP_OK;
  }
}

qdp_status rpc_output_of(const struct rpc_call *c, const Qdp__CudaIpcOutput *o,
                         struct job_output *ret, const struct job_output **ret_ptr,
                         struct qdp_error *err) {
  if (!o) {
    return QDP_OK;
  }
  if (c->tcp) {
    /* An IPC handle opens only on the node it came from, for a process of that node. */
    return qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, "out",
                         "out is for callers on the daemon's node (its Unix socket); TCP callers "
                         "take the values back instead");
  }
  *ret = (struct job_output){.ipc_handle = o->ipc_handle.data,
                             .ipc_handle_len = o->ipc_handle.len,
                             .offset = o->offset,
                             .bytes = o->bytes,
                             .device_uuid = o->device_uuid};
  *ret_ptr = ret;
  return QDP_OK;
}

qdp_status rpc_encode_request_of(const struct rpc_call *c, const Qdp__EncodeRequest *r,
                                 struct job_encode_request *ret, struct job_output *out,
                                 struct qdp_error *err) {
  const Qdp__Placement *pl = r->placement;
  *ret = (struct job_encode_request){
      .encoding = (int)r->encoding,
      .qubits = r->qubits,
      .output_dtype = (int)r->output_dtype,
      .placement = {.policy = pl ? (int)pl->policy : 0,
                    .devices = pl ? (const char *const *)pl->devices : NULL,
                    .ndevices = pl ? pl->n_devices : 0},
      .ttl_seconds = r->ttl_seconds,
      .label = r->label,
      .views = r->views,
      .descriptors = r->descriptors,
      .client_pid = r->client_pid};
  if (r->reply_amplitudes && (r->out || r->views)) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "reply_amplitudes",
                         "reply_amplitudes sends the state back and keeps nothing, so %s has "
                         "nothing to act on: ask for one or the other",
                         r->out ? "out" : "views");
  }
  return rpc_output_of(c, r->out, out, &ret->out, err);
}
