/* calls_state.c — the calls on states and on the daemon: Describe, CloseView, Gather, List,
 * Release, Status, Health, RegisterRegion and UnregisterRegion, and the regions made for one
 * call. Any thread. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "libqdp_int.h"
#include "qdp.pb-c.h"

#define M_CLOSE_VIEW "/qdp.Qdp/CloseView"
#define M_DESCRIBE "/qdp.Qdp/Describe"
#define M_GATHER "/qdp.Qdp/Gather"
#define M_HEALTH "/qdp.Qdp/Health"
#define M_LIST "/qdp.Qdp/List"
#define M_REGISTER_REGION "/qdp.Qdp/RegisterRegion"
#define M_RELEASE "/qdp.Qdp/Release"
#define M_STATUS "/qdp.Qdp/Status"
#define M_UNREGISTER_REGION "/qdp.Qdp/UnregisterRegion"

qdp_status qdp__describe(qdp_client *c, const char *handle, const char *token, int views,
                         int writable, struct qdp_state_info **ret) {
  qdp_status rc = qdp__check_ret(qdp__check_ref(c, handle, token), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__DescribeRequest req = QDP__DESCRIBE_REQUEST__INIT;
  req.handle = (char *)handle;
  req.token = (char *)token;
  req.views = views != 0;
  req.writable = views && writable;
  req.descriptors = views != 0; /* views_open takes them (views.c) */
  req.client_pid = 0; /* this process, which the daemon names by its pidfd: the lease ends with it */
  *ret = qdp__unary_copy(c, M_DESCRIBE, &req.base, &qdp__state_info__descriptor, qdp__state_from_pb,
                         "copying the describe reply", &rc);
  return rc;
}

qdp_status qdp_describe(qdp_client *c, const char *handle, const char *token,
                        struct qdp_state_info **ret) {
  qdp__err_reset();
  return qdp__describe(c, handle, token, 0, 0, ret);
}

qdp_status qdp__close_view(qdp_client *c, const char *handle, const char *token, uint64_t lease_id,
                           uint64_t *ret_freed_bytes) {
  qdp_status rc = qdp__check_ref(c, handle, token);
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
  qdp_status rc = qdp__check_ret(qdp__check_ref(c, handle, token), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  if (!device || !*device) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "device",
                          "The device is empty: give a name as status lists it, or an index.");
  }
  Qdp__StateRef ref = qdp__state_ref(handle, token);
  Qdp__GatherRequest req = QDP__GATHER_REQUEST__INIT;
  req.state = &ref;
  req.device = (char *)device;
  req.ttl_seconds = ttl_seconds;
  Qdp__EncodeReply *rep = NULL;
  rc =
      qdp__unary(c, M_GATHER, &req.base, &qdp__encode_reply__descriptor, (ProtobufCMessage **)&rep);
  if (rc == QDP_OK) {
    *ret = rep->state ? qdp__state_from_pb(rep->state) : NULL;
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
  qdp_status rc = qdp__check_ret(qdp__check_client(c), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__ListRequest req = QDP__LIST_REQUEST__INIT;
  req.all = all != 0;
  *ret = qdp__unary_copy(c, M_LIST, &req.base, &qdp__list_reply__descriptor, qdp__list_from_pb,
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
  qdp_status rc = qdp__check_ref(c, handle, token);
  if (rc != QDP_OK) {
    return rc;
  }
  /* This client's own views of the state end with it. */
  qdp__views_forget(c, handle);
  Qdp__StateRef ref = qdp__state_ref(handle, token);
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

qdp_status qdp_get_status(qdp_client *c, struct qdp_server_status **ret) {
  qdp__err_reset();
  qdp_status rc = qdp__check_ret(qdp__check_client(c), ret);
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__StatusRequest req = QDP__STATUS_REQUEST__INIT;
  *ret = qdp__unary_copy(c, M_STATUS, &req.base, &qdp__status_reply__descriptor,
                         qdp__status_from_pb, "copying the status reply", &rc);
  return rc;
}

qdp_status qdp_get_health(qdp_client *c, qdp_health *ret) {
  qdp__err_reset();
  qdp_status rc = qdp__check_ret(qdp__check_client(c), ret);
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

qdp_status qdp_region_register_flags(qdp_client *c, const char *name, int pid, int fd,
                                     unsigned flags, struct qdp_region_info *ret_info) {
  qdp__err_reset();
  qdp_status rc = qdp__check_ret(qdp__check_client(c), ret_info);
  if (rc != QDP_OK) {
    return rc;
  }
  if (flags & ~(unsigned)(QDP_REGION_WRITABLE | QDP_REGION_KEEP)) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "flags",
                          "Unknown region flags 0x%x (known: QDP_REGION_WRITABLE 0x%x, "
                          "QDP_REGION_KEEP 0x%x).",
                          flags, (unsigned)QDP_REGION_WRITABLE, (unsigned)QDP_REGION_KEEP);
  }
  bool writable = (flags & QDP_REGION_WRITABLE) != 0;
  /* A caller built before `frozen` passes the size up to it. */
  if (ret_info->struct_size < offsetof(struct qdp_region_info, frozen)) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "ret_info",
                          "The region info is too short; initialise it with QDP_REGION_INFO_INIT.");
  }
  if ((!name || !*name) && (pid <= 0 || fd < 0)) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "region",
                          "A region needs a name, or a pid > 0 and an fd >= 0 (got %d and %d).",
                          pid, fd);
  }
  Qdp__RegisterRegionRequest req = QDP__REGISTER_REGION_REQUEST__INIT;
  req.writable = writable;
  req.keep = (flags & QDP_REGION_KEEP) != 0;
  if (name && *name) {
    req.name = (char *)name;
  } else {
    req.pid = pid;
    req.fd = fd;
  }
  /* The daemon maps what this process opened, with this process's rights. */
  char ticket[64];
  int f = qdp__open_shm(name, pid, fd, writable, &rc);
  if (f < 0) {
    return rc;
  }
  rc = qdp__handoff(c, f, writable ? 2 : 1, "region", ticket, sizeof ticket);
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
    if (ret_info->struct_size >= sizeof *ret_info) {
      ret_info->frozen = rep->frozen;
    }
  }
  if (rep) {
    qdp__region_info__free_unpacked(rep, NULL);
  }
  return rc;
}

qdp_status qdp_region_register(qdp_client *c, const char *name, int pid, int fd,
                               struct qdp_region_info *ret_info) {
  return qdp_region_register_flags(c, name, pid, fd, 0, ret_info);
}

qdp_status qdp_region_register_writable(qdp_client *c, const char *name, int pid, int fd,
                                        struct qdp_region_info *ret_info) {
  return qdp_region_register_flags(c, name, pid, fd, QDP_REGION_WRITABLE, ret_info);
}

qdp_status qdp_region_unregister(qdp_client *c, const char *handle, const char *token) {
  qdp__err_reset();
  qdp_status rc = qdp__check_client(c);
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

qdp_status qdp__scratch_make(qdp_client *c, uint64_t bytes, bool daemon_writes,
                             struct qdp__scratch *s) {
  s->fd = memfd_create("qdp-call", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (s->fd < 0 || ftruncate(s->fd, (off_t)bytes) != 0) {
    int err = errno;
    return qdp__err_local(QDP_ERR_RESOURCE_EXHAUSTED, err, NULL,
                          "Cannot make %" PRIu64 " bytes of shared memory for the call: %s.", bytes,
                          strerror(err));
  }
  /* Its size is final: sealed, the daemon need not watch it for a cut (a region that cannot
   * seal is still a region: the daemon checks an unsealed one's reads). */
  (void)fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
  /* Each side writes only what the other reads. */
  void *map = mmap(NULL, (size_t)bytes, daemon_writes ? PROT_READ : PROT_READ | PROT_WRITE,
                   MAP_SHARED, s->fd, 0);
  if (map == MAP_FAILED) {
    int err = errno;
    return qdp__err_local(QDP_ERR_RESOURCE_EXHAUSTED, err, NULL,
                          "Cannot map the call's %" PRIu64 " bytes of shared memory: %s.", bytes,
                          strerror(err));
  }
  s->map = map;
  s->len = (size_t)bytes;
  qdp_status rc = qdp_region_register_flags(c, NULL, getpid(), s->fd,
                                            daemon_writes ? QDP_REGION_WRITABLE : 0, &s->region);
  if (rc != QDP_OK) {
    s->region.handle[0] = '\0';
  }
  return rc;
}

void qdp__scratch_end(qdp_client *c, struct qdp__scratch *s) {
  struct qdp_errinfo kept = *qdp__err();
  if (s->region.handle[0]) {
    (void)qdp_region_unregister(c, s->region.handle, s->region.token);
    s->region.handle[0] = '\0';
  }
  *qdp__err() = kept;
  if (s->map) {
    munmap(s->map, s->len);
    s->map = NULL;
  }
  if (s->fd >= 0) {
    close(s->fd);
    s->fd = -1;
  }
}
