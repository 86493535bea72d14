/* calls_compute.c — computations on resident states whose values come back: the kernel matrix
 * (Kernel, into the caller's memory or a local .npy file) and measurements (Measure). Values a
 * reply carries come in it; larger ones (the daemon refuses them with field "region") are written
 * by the daemon into a shared-memory region made here for the call. Any thread. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libqdp_int.h"
#include "qdp.pb-c.h"
#include "qdp_npy.h"

#define M_KERNEL "/qdp.Qdp/Kernel"
#define M_MEASURE "/qdp.Qdp/Measure"

/* A call's request and what its reply says (KernelReply and MeasureReply have the same fields). */
struct computation {
  const char *method;
  ProtobufCMessage *req;
  Qdp__RegionRef **region; /* the request's region field */
  const ProtobufCMessageDescriptor *reply;
};

struct answer {
  uint64_t rows, cols, bytes;
  int dtype;
  ProtobufCBinaryData values;
  const char *device;
  double compute_ms;
};

static void answer_of(const ProtobufCMessage *m, struct answer *a) {
  if (m->descriptor == &qdp__kernel_reply__descriptor) {
    const Qdp__KernelReply *r = (const Qdp__KernelReply *)m;
    *a = (struct answer){r->rows, r->cols, r->bytes, r->dtype, r->values, r->device,
                         r->compute_ms};
  } else {
    const Qdp__MeasureReply *r = (const Qdp__MeasureReply *)m;
    *a = (struct answer){r->rows, r->cols, r->bytes, r->dtype, r->values, r->device,
                         r->compute_ms};
  }
}

/* The values: in a reply, or in a region's mapping. */
struct values {
  ProtobufCMessage *rep;
  struct answer ans;
  const void *data;
  size_t len;
  struct qdp__scratch region;
};

static void values_end(qdp_client *c, struct values *v) {
  if (v->rep) {
    protobuf_c_message_free_unpacked(v->rep, NULL);
  }
  qdp__scratch_end(c, &v->region);
}

static qdp_status call(qdp_client *c, const struct computation *k, struct values *v) {
  qdp_status rc = qdp__unary(c, k->method, k->req, k->reply, &v->rep);
  if (rc == QDP_OK) {
    answer_of(v->rep, &v->ans);
  }
  return rc;
}

/* Into a region of `bytes` made for this call. */
static qdp_status through_region(qdp_client *c, const struct computation *k, uint64_t bytes,
                                 struct values *v) {
  qdp_status rc = qdp__scratch_make(c, bytes, true, &v->region);
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__RegionRef rr = QDP__REGION_REF__INIT;
  rr.handle = v->region.region.handle;
  rr.token = v->region.region.token;
  *k->region = &rr;
  rc = call(c, k, v);
  *k->region = NULL;
  if (rc == QDP_OK && v->ans.bytes != bytes) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                          "qdpd wrote %" PRIu64 " bytes of values where it asked for %" PRIu64 ".",
                          v->ans.bytes, bytes);
  }
  v->data = v->region.map;
  v->len = v->region.len;
  return rc;
}

/* The values of computation k, in the reply or through a region. */
static qdp_status computed(qdp_client *c, const struct computation *k, struct values *v) {
  memset(v, 0, sizeof *v);
  v->region = (struct qdp__scratch)QDP__SCRATCH_INIT;
  qdp_status rc = call(c, k, v);
  if (rc == QDP_OK) {
    v->data = v->ans.values.data;
    v->len = v->ans.values.len;
    if (v->len != v->ans.bytes) {
      rc = qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                          "qdpd's reply carries %zu bytes of %" PRIu64 " bytes of values.", v->len,
                          v->ans.bytes);
    }
  } else if (rc == QDP_ERR_RESOURCE_EXHAUSTED &&
             strcmp(qdp_last_error()->field, "region") == 0 && qdp_last_error()->need_bytes) {
    uint64_t bytes = qdp_last_error()->need_bytes; /* more than a reply carries */
    qdp__err_reset();
    rc = through_region(c, k, bytes, v);
  }
  return rc;
}

static qdp_status kernel_values(qdp_client *c, const char *a, const char *a_token, const char *b,
                                const char *b_token, unsigned flags, struct values *v,
                                struct qdp_kernel_info *ret_info) {
  memset(v, 0, sizeof *v);
  v->region = (struct qdp__scratch)QDP__SCRATCH_INIT;
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
  struct computation k = {M_KERNEL, &req.base, &req.region, &qdp__kernel_reply__descriptor};
  rc = computed(c, &k, v);
  if (rc == QDP_OK && ret_info) {
    ret_info->rows = v->ans.rows;
    ret_info->cols = v->ans.cols;
    ret_info->dtype = (qdp_dtype)v->ans.dtype;
    ret_info->bytes = v->ans.bytes;
    snprintf(ret_info->device, sizeof ret_info->device, "%s", v->ans.device ? v->ans.device : "");
    ret_info->compute_ms = v->ans.compute_ms;
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

/* What a Measure asks for beyond the state. */
struct measurement {
  const uint32_t *qubits; /* probabilities: nqubits of them; 0: every basis state */
  size_t nqubits;
  const char *const *paulis; /* expectation values */
  size_t npaulis;
  uint64_t shots, seed; /* samples: shots > 0 */
};

/* A Measure into dst. */
static qdp_status measure(qdp_client *c, const char *handle, const char *token,
                          const struct measurement *ms, void *dst, size_t dst_bytes,
                          struct qdp_measure_info *ret_info) {
  const uint32_t *qubits = ms->qubits;
  size_t nqubits = ms->nqubits, npaulis = ms->npaulis;
  const char *const *paulis = ms->paulis;
  qdp__err_reset();
  qdp_status rc = qdp__check_ref(c, handle, token);
  if (rc == QDP_OK && ((!qubits && nqubits) || (!paulis && npaulis) || (!dst && dst_bytes))) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, NULL,
                        "A NULL array with a nonzero count (qubits, paulis or dst).");
  }
  if (rc != QDP_OK) {
    return rc;
  }
  Qdp__StateRef ref = QDP__STATE_REF__INIT;
  ref.handle = (char *)handle;
  ref.token = (char *)token;
  Qdp__MeasureRequest req = QDP__MEASURE_REQUEST__INIT;
  req.state = &ref;
  req.measurement = ms->shots  ? QDP__MEASUREMENT__MEASUREMENT_SAMPLES
                    : paulis ? QDP__MEASUREMENT__MEASUREMENT_EXPECTATIONS
                             : QDP__MEASUREMENT__MEASUREMENT_PROBABILITIES;
  req.shots = ms->shots;
  req.seed = ms->seed;
  req.n_qubits = nqubits;
  req.qubits = (uint32_t *)qubits;
  req.n_paulis = npaulis;
  req.paulis = (char **)paulis;
  struct computation k = {M_MEASURE, &req.base, &req.region, &qdp__measure_reply__descriptor};
  struct values v;
  rc = computed(c, &k, &v);
  if (rc == QDP_OK && v.len > dst_bytes) {
    rc = qdp__err_local(QDP_ERR_OUT_OF_RANGE, -1, "dst_bytes",
                        "The values are %zu bytes but the buffer holds %zu.", v.len, dst_bytes);
    qdp__err()->need_bytes = v.len;
    qdp__err()->free_bytes = dst_bytes;
  }
  if (rc == QDP_OK && v.len) {
    memcpy(dst, v.data, v.len);
  }
  if (rc == QDP_OK && ret_info) {
    ret_info->rows = v.ans.rows;
    ret_info->cols = v.ans.cols;
    ret_info->bytes = v.ans.bytes;
    snprintf(ret_info->device, sizeof ret_info->device, "%s", v.ans.device ? v.ans.device : "");
    ret_info->compute_ms = v.ans.compute_ms;
  }
  values_end(c, &v);
  return rc;
}

qdp_status qdp_probabilities(qdp_client *c, const char *handle, const char *token,
                             const uint32_t *qubits, size_t nqubits, double *dst,
                             size_t dst_bytes, struct qdp_measure_info *ret_info) {
  struct measurement ms = {qubits, nqubits, NULL, 0, 0, 0};
  return measure(c, handle, token, &ms, dst, dst_bytes, ret_info);
}

qdp_status qdp_sample(qdp_client *c, const char *handle, const char *token, uint64_t shots,
                      uint64_t seed, int64_t *dst, size_t dst_bytes,
                      struct qdp_measure_info *ret_info) {
  if (shots == 0) {
    qdp__err_reset();
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "shots",
                          "qdp_sample needs at least one shot.");
  }
  struct measurement ms = {NULL, 0, NULL, 0, shots, seed};
  return measure(c, handle, token, &ms, dst, dst_bytes, ret_info);
}

qdp_status qdp_expectations(qdp_client *c, const char *handle, const char *token,
                            const char *const *paulis, size_t npaulis, double *dst,
                            size_t dst_bytes, struct qdp_measure_info *ret_info) {
  if (!paulis || !npaulis) {
    qdp__err_reset();
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "paulis",
                          "qdp_expectations needs at least one Pauli string.");
  }
  struct measurement ms = {NULL, 0, paulis, npaulis, 0, 0};
  return measure(c, handle, token, &ms, dst, dst_bytes, ret_info);
}
