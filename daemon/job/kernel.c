/* kernel.c — the kernel matrix of two resident states (job.h, "the kernel matrix"). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "internal.h"
#include "qdp_size.h"
#include "region.h"

/* Pins (handle, token) into *ret; NOT_FOUND and the rest name `field`. */
static qdp_status pin(struct job_pipeline *jp, const char *handle, const char *token,
                      const char *field, struct runtime_state **ret, struct qdp_error *err) {
  void *payload = NULL;
  qdp_status rc = job_check_handle(handle, field, err);
  if (rc == QDP_OK) {
    rc = state_store_get(jp->store, handle, token, &payload, NULL, err);
  }
  if (rc != QDP_OK) {
    if (err && !err->field[0]) {
      snprintf(err->field, sizeof err->field, "%s", field);
    }
    return rc;
  }
  *ret = payload;
  return QDP_OK;
}

struct kernel_write {
  struct job_pipeline *jp;
  struct runtime_state *a, *b;
  bool overlaps;
  const char *device;
};

static qdp_status kernel_write(void *arg, void *dst, struct qdp_error *err) {
  struct kernel_write *w = arg;
  return runtime_state_kernel(w->jp->mesh, w->a, w->b, w->overlaps, RUNTIME_KERNEL_TILES, dst,
                              &w->device, err);
}

qdp_status job_kernel(struct job_pipeline *jp, const struct job_caller *caller,
                      const struct job_kernel_request *req, uint64_t inline_max,
                      struct job_kernel_result *ret, struct qdp_error *err) {
  struct kernel_write w = {.jp = jp, .overlaps = req->overlaps};
  struct job_region *g = NULL;
  qdp_status rc;
  memset(ret, 0, sizeof *ret);
  bool to_region = req->region && req->region[0];
  QDP_TRY(rc, pin(jp, req->a, req->a_token, "a", &w.a, err));
  if (req->b && req->b[0]) {
    QDP_TRY(rc, pin(jp, req->b, req->b_token, "b", &w.b, err));
  }
  const struct plan *pa = runtime_state_plan(w.a), *pb = runtime_state_plan(w.b ? w.b : w.a);
  ret->rows = pa->batch;
  ret->cols = pb->batch;
  ret->dtype = req->overlaps ? pa->out_dtype
               : pa->out_dtype == QDP_DTYPE_COMPLEX64 ? QDP_DTYPE_FLOAT32
                                                      : QDP_DTYPE_FLOAT64;
  unsigned __int128 bytes = (unsigned __int128)ret->rows * ret->cols * qdp_dtype_size(ret->dtype);
  char what[96];
  snprintf(what, sizeof what, "a %" PRIu64 " x %" PRIu64 " %s matrix", ret->rows, ret->cols,
           qdp_dtype_name(ret->dtype));
  if (bytes > (to_region ? UINT64_MAX : inline_max)) {
    rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, "region",
                       "%s is %s, more than a reply carries (%s): pass a region registered "
                       "writable to write it into",
                       what, bytes > UINT64_MAX ? "over 16 EiB" : QDP_SIZE_STR((uint64_t)bytes),
                       QDP_SIZE_STR(inline_max));
    if (err) {
      err->need_bytes = bytes > UINT64_MAX ? UINT64_MAX : (uint64_t)bytes;
      err->free_bytes = inline_max;
    }
    goto out;
  }
  ret->bytes = (uint64_t)bytes;
  uint64_t t0 = clock_mono_ns();
  if (to_region) {
    QDP_TRY(rc, job_output_region(jp, caller, req->region, req->region_token, "Kernel", &g, err));
    QDP_TRY(rc, job_region_fits(g, req->region, req->region_offset, ret->bytes, what, "region",
                                err));
    QDP_TRY(rc, job_region_write(g, req->region, req->region_offset, kernel_write, &w, err));
  } else {
    ret->values = malloc(ret->bytes ? ret->bytes : 1);
    if (!ret->values) {
      rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for %s (%s)", what, QDP_SIZE_STR(ret->bytes));
      goto out;
    }
    QDP_TRY(rc, kernel_write(&w, ret->values, err));
  }
  ret->compute_ms = (double)(clock_mono_ns() - t0) / 1e6;
  snprintf(ret->device, sizeof ret->device, "%s", w.device ? w.device : "");
out:
  if (rc != QDP_OK) {
    free(ret->values);
    ret->values = NULL;
  }
  if (g) {
    region_registry_put(jp->regions, g);
  }
  if (w.b) {
    state_store_put(jp->store, w.b);
  }
  if (w.a) {
    state_store_put(jp->store, w.a);
  }
  return rc;
}
