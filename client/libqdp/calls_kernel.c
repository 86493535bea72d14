/* calls_kernel.c — the kernel matrix of resident states (Kernel) into the caller's memory or a
 * local .npy file. A matrix a reply carries comes in it; a larger one (the daemon refuses it with
 * field "region") is written by the daemon into a shared-memory region made here for the call.
 * Any thread. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "libqdp_int.h"
#include "qdp.pb-c.h"
#include "qdp_npy.h"

#define M_KERNEL "/qdp.Qdp/Kernel"

/* The matrix's values: in a reply, or in a region's mapping. */
struct values {
  Qdp__KernelReply *rep;
  const void *data;
  size_t len;
  void *map;
  size_t map_len;
  int fd;
  struct qdp_region_info region;
};

static void values_end(qdp_client *c, struct values *v) {
  if (v->rep) {
    qdp__kernel_reply__free_unpacked(v->rep, NULL);
  }
  if (v->region.handle[0]) {
    (void)qdp_region_unregister(c, v->region.handle, v->region.token);
  }
  if (v->map) {
    munmap(v->map, v->map_len);
  }
  if (v->fd >= 0) {
    close(v->fd);
  }
}

static qdp_status call(qdp_client *c, Qdp__KernelRequest *req, Qdp__KernelReply **ret) {
  return qdp__unary(c, M_KERNEL, &req->base, &qdp__kernel_reply__descriptor,
                    (ProtobufCMessage **)ret);
}

/* Into a region of `bytes` made for this call: memfd, mapped here, registered writable. */
static qdp_status through_region(qdp_client *c, Qdp__KernelRequest *req, uint64_t bytes,
                                 struct values *v) {
  v->fd = memfd_create("qdp-kernel", MFD_CLOEXEC);
  if (v->fd < 0 || ftruncate(v->fd, (off_t)bytes) != 0) {
    int err = errno;
    return qdp__err_local(QDP_ERR_RESOURCE_EXHAUSTED, err, NULL,
                          "Cannot make %" PRIu64 " bytes of shared memory for the kernel matrix: "
                          "%s.",
                          bytes, strerror(err));
  }
  v->map_len = (size_t)bytes;
  v->map = mmap(NULL, v->map_len, PROT_READ, MAP_SHARED, v->fd, 0);
  if (v->map == MAP_FAILED) {
    int err = errno;
    v->map = NULL;
    return qdp__err_local(QDP_ERR_RESOURCE_EXHAUSTED, err, NULL,
                          "Cannot map the kernel matrix's %" PRIu64 " bytes: %s.", bytes,
                          strerror(err));
  }
  qdp_status rc = qdp_region_register_writable(c, NULL, getpid(), v->fd, &v->region);
  if (rc != QDP_OK) {
    v->region.handle[0] = '\0';
    return rc;
  }
  Qdp__RegionRef rr = QDP__REGION_REF__INIT;
  rr.handle = v->region.handle;
  rr.token = v->region.token;
  req->region = &rr;
  rc = call(c, req, &v->rep);
  req->region = NULL;
  if (rc == QDP_OK && v->rep->bytes != bytes) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                          "qdpd wrote %" PRIu64 " bytes of the kernel matrix where it asked for "
                          "%" PRIu64 ".",
                          v->rep->bytes, bytes);
  }
  v->data = v->map;
  v->len = v->map_len;
  return rc;
}

static qdp_status kernel_values(qdp_client *c, const char *a, const char *a_token, const char *b,
                                const char *b_token, unsigned flags, struct values *v,
                                struct qdp_kernel_info *ret_info) {
  memset(v, 0, sizeof *v);
  v->fd = -1;
  v->region = (struct qdp_region_info)QDP_REGION_INFO_INIT;
  qdp_status rc = qdp__check_ref(c, a, a_token);
  if (rc == QDP_OK && b) {
    rc = qdp__check_ref(c, b, b_token);
  }
  if (rc == QDP_OK && (flags & ~(unsigned)QDP_KERNEL_OVERLAPS)) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "flags", "Unknown kernel flags 0x%x.",
                        flags & ~(unsigned)QDP_KERNEL_OVERLAPS);
  }
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__StateRef ra = QDP__STATE_REF__INIT, rb = QDP__STATE_REF__INIT;
  ra.handle = (char *)a;
  ra.token = (char *)a_token;
  rb.handle = (char *)b;
  rb.token = (char *)b_token;
  Qdp__KernelRequest req = QDP__KERNEL_REQUEST__INIT;
  req.a = &ra;
  req.b = b ? &rb : NULL;
  req.overlaps = (flags & QDP_KERNEL_OVERLAPS) != 0;
  rc = call(c, &req, &v->rep);
  if (rc == QDP_OK) {
    v->data = v->rep->values.data;
    v->len = v->rep->values.len;
    if (v->len != v->rep->bytes) {
      rc = qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                          "qdpd's kernel reply carries %zu bytes of a %" PRIu64 "-byte matrix.",
                          v->len, v->rep->bytes);
    }
  } else if (rc == QDP_ERR_RESOURCE_EXHAUSTED &&
             strcmp(qdp_last_error()->field, "region") == 0 && qdp_last_error()->need_bytes) {
    uint64_t bytes = qdp_last_error()->need_bytes; /* more than a reply carries */
    qdp__err_reset();
    rc = through_region(c, &req, bytes, v);
  }
  if (rc == QDP_OK && ret_info) {
    ret_info->rows = v->rep->rows;
    ret_info->cols = v->rep->cols;
    ret_info->dtype = (qdp_dtype)v->rep->dtype;
    ret_info->bytes = v->rep->bytes;
    snprintf(ret_info->device, sizeof ret_info->device, "%s",
             v->rep->device ? v->rep->device : "");
    ret_info->compute_ms = v->rep->compute_ms;
  }
  return rc;
}

qdp_status qdp_kernel(qdp_client *c, const char *a, const char *a_token, const char *b,
                      const char *b_token, unsigned flags, void *dst, size_t dst_bytes,
                      struct qdp_kernel_info *ret_info) {
  qdp__err_reset();
  if (!dst && dst_bytes) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "dst", "dst is NULL.");
  }
  struct values v;
  qdp_status rc = kernel_values(c, a, a_token, b, b_token, flags, &v, ret_info);
  if (rc == QDP_OK && v.len > dst_bytes) {
    rc = qdp__err_local(QDP_ERR_OUT_OF_RANGE, -1, "dst_bytes",
                        "The kernel matrix is %zu bytes but the buffer holds %zu.", v.len,
                        dst_bytes);
    qdp__err()->need_bytes = v.len;
    qdp__err()->free_bytes = dst_bytes;
  }
  if (rc == QDP_OK && v.len) {
    memcpy(dst, v.data, v.len);
  }
  values_end(c, &v);
  return rc;
}

qdp_status qdp_kernel_npy(qdp_client *c, const char *a, const char *a_token, const char *b,
                          const char *b_token, unsigned flags, const char *path, int overwrite,
                          struct qdp_kernel_info *ret_info) {
  qdp__err_reset();
  if (!path || !*path) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "path", "The output path is empty.");
  }
  if (!overwrite && access(path, F_OK) == 0) {
    return qdp__err_local(QDP_ERR_ALREADY_EXISTS, EEXIST, "path",
                          "'%s' exists (set overwrite to replace it).", path);
  }
  struct qdp_kernel_info info = QDP_KERNEL_INFO_INIT;
  struct values v;
  qdp_status rc = kernel_values(c, a, a_token, b, b_token, flags, &v, &info);
  char hdr[QDP_NPY_HEADER_CAP];
  size_t hlen = 0;
  struct qdp_npy_error ne;
  if (rc == QDP_OK && qdp_npy_format(info.dtype, 2, info.rows, info.cols, hdr, sizeof hdr, &hlen,
                                     &ne) != QDP_OK) {
    rc = qdp__err_local(QDP_ERR_INTERNAL, -1, NULL, "The matrix has no .npy form: %s.", ne.msg);
  }
  if (rc == QDP_OK) {
    rc = qdp__write_npy_file(path, overwrite, hdr, hlen, v.data, v.len);
  }
  values_end(c, &v);
  if (rc == QDP_OK && ret_info) {
    *ret_info = info;
  }
  return rc;
}
