/* An encode into the caller's own CUDA allocation (job_encode with req->out): the request's
 * checks, which need no device and so come first; the allocation's GPU among the mesh's; the
 * placement that follows from it (the state whole on that GPU); the allocation opened for the
 * job, through the runtime (job/ knows no CUDA), and the range written checked against it. */
#include <inttypes.h>
#include <string.h>

#include "internal.h"

/* The bytes of `rows` states of 2^qubits amplitudes of dtype; false past 64 bits or past the
 * planner's ceiling, where the planner then names what is wrong. */
static bool state_bytes(uint64_t rows, uint32_t qubits, qdp_dtype dtype, uint64_t *ret) {
  uint64_t esize = qdp_dtype_size(dtype);
  if (qubits > PLAN_MAX_QUBITS || (UINT64_C(1) << qubits) > UINT64_MAX / esize) {
    return false;
  }
  uint64_t per = (UINT64_C(1) << qubits) * esize;
  if (rows > UINT64_MAX / per) {
    return false;
  }
  *ret = rows * per;
  return true;
}

/* What the request alone says of out: a handle of the right length, no views (nothing is kept
 * to view), a placement that keeps the state whole, an aligned offset and enough bytes. `in` is
 * the resolved input (its rows). */
static qdp_status check_request(const struct job_encode_request *req,
                                const struct runtime_input *in, struct qdp_error *err) {
  const struct job_output *o = req->out;
  qdp_dtype dtype;
  uint64_t need = 0;
  if (o->ipc_handle_len != RUNTIME_IPC_HANDLE_BYTES) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "out.ipc_handle",
                         "out.ipc_handle has %zu bytes; a cudaIpcMemHandle_t has %d",
                         o->ipc_handle_len, RUNTIME_IPC_HANDLE_BYTES);
  }
  if (req->views) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "views",
                         "views and out exclude each other: a state written into the caller's "
                         "allocation is not kept, so there is nothing to view");
  }
  if (req->placement.policy != PLAN_AUTO && req->placement.policy != PLAN_SINGLE) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "placement.policy",
                         "placement.policy %s shards the state, but out takes it whole on the "
                         "allocation's GPU: use auto or single",
                         plan_policy_name((enum plan_policy)req->placement.policy));
  }
  if (req->placement.ndevices > 1) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "placement.devices",
                         "placement.devices names %zu devices, but out takes the state whole on "
                         "the allocation's GPU: name none, or that one",
                         req->placement.ndevices);
  }
  qdp_status rc = job_output_dtype(req->output_dtype, &dtype, err);
  if (rc != QDP_OK) {
    return rc;
  }
  unsigned esize = qdp_dtype_size(dtype);
  if (o->offset % esize != 0) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "out.offset",
                         "out.offset %" PRIu64
                         " is not a multiple of %u B, the size of a %s amplitude",
                         o->offset, esize, qdp_dtype_name(dtype));
  }
  if (state_bytes(in->rows, req->qubits, dtype, &need) && need > o->bytes) {
    rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "out.bytes",
                       "the state of %" PRIu64 " x 2^%u %s amplitudes needs %" PRIu64
                       " B but out offers %" PRIu64 " B",
                       in->rows, req->qubits, qdp_dtype_name(dtype), need, o->bytes);
    if (err) {
      err->need_bytes = need;
      err->free_bytes = o->bytes;
    }
  }
  return rc;
}

qdp_status job_sink_find(struct job_pipeline *jp, const struct job_encode_request *req,
                         const struct runtime_input *in, struct job_sink *ret,
                         struct qdp_error *err) {
  qdp_status rc = check_request(req, in, err);
  if (rc != QDP_OK) {
    return rc;
  }
  if (strcmp(runtime_mesh_backend(jp->mesh), "cpu") == 0) {
    return qdp_error_set(err, QDP_ERR_FAILED_PRECONDITION, "out",
                         "out names a CUDA allocation to write the state into, but this daemon's "
                         "mesh is cpu:%zu (host memory); leave out unset and read the state back "
                         "(Fetch, or State.numpy() and .torch() from Python)",
                         runtime_mesh_count(jp->mesh));
  }
  return runtime_mesh_find_uuid(jp->mesh, req->out->device_uuid, "out.device_uuid", &ret->device,
                                err);
}

qdp_status job_sink_place(const struct job_pipeline *jp, const struct job_sink *sink,
                          enum plan_policy *policy, size_t *subset, size_t *count,
                          struct qdp_error *err) {
  if (*count == 1 && subset[0] != sink->device) {
    const struct runtime_device_info *named = job_device(jp, subset[0]);
    const struct runtime_device_info *own = job_device(jp, sink->device);
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "placement.devices",
                         "placement.devices names %s, but out is on %s (%s): name that one or "
                         "none",
                         named ? named->name : "?", own ? own->name : "?", own ? own->uuid : "?");
  }
  *policy = PLAN_SINGLE;
  subset[0] = sink->device;
  *count = 1;
  return QDP_OK;
}

/* Whether [a, a + na) and [b, b + nb) share a byte. */
static bool overlap(uintptr_t a, uint64_t na, uintptr_t b, uint64_t nb) {
  return na && nb && a < b + nb && b < a + na;
}

/* The allocation is opened at offset 0 for no bytes, and the range checked here against the size
 * the driver reports, so that a refusal names out's fields (the backend's own check names the
 * input's). Both handles of one allocation open at one address, so an input that shares bytes
 * with the output is seen and refused: the encode would read what it overwrites. */
qdp_status job_sink_open_range(struct job_pipeline *jp, const struct job_output *o,
                               struct job_sink *sink, struct qdp_error *err) {
  qdp_status rc =
      runtime_mesh_open_ipc(jp->mesh, sink->device, o->ipc_handle, 0, 0, &sink->ipc, err);
  if (rc != QDP_OK) {
    return rc;
  }
  uint64_t size = sink->ipc.size;
  if (o->offset > size || o->bytes > size - o->offset) {
    rc = qdp_error_set(err, QDP_ERR_OUT_OF_RANGE, o->offset > size ? "out.offset" : "out.bytes",
                       "out's %" PRIu64 " B at offset %" PRIu64
                       " pass the end of the allocation of %" PRIu64 " B on %s",
                       o->bytes, o->offset, size, job_device(jp, sink->device)->name);
    if (err) {
      err->need_bytes = o->bytes;
      err->free_bytes = o->offset > size ? 0 : size - o->offset;
    }
    return rc;
  }
  sink->out = (struct runtime_output){
      .data = (char *)sink->ipc.base + o->offset, .device = sink->device, .bytes = o->bytes};
  return QDP_OK;
}

qdp_status job_sink_open(struct job_pipeline *jp, const struct job_output *o,
                         const struct runtime_input *in, const struct plan *p,
                         struct job_sink *sink, struct qdp_error *err) {
  qdp_status rc = job_sink_open_range(jp, o, sink, err);
  if (rc != QDP_OK) {
    return rc;
  }
  char *data = sink->out.data;
  uint64_t in_bytes = in->rows * in->cols * qdp_dtype_size(in->dtype);
  if (in->on_device && overlap((uintptr_t)in->data, in_bytes, (uintptr_t)data, p->total_bytes)) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "out",
                         "out's %" PRIu64 " B at offset %" PRIu64 " share bytes with the %" PRIu64
                         " B of input.cuda_ipc: the encode "
                         "would read what it overwrites; use another range",
                         p->total_bytes, o->offset, in_bytes);
  }
  return QDP_OK;
}

void job_sink_close(struct job_pipeline *jp, struct job_sink *sink) {
  runtime_mesh_close_ipc(jp->mesh, &sink->ipc);
}
