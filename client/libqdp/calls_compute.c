/* calls_compute.c — computations whose values come back: the kernel matrix (Kernel, of resident
 * states or of inputs' states encoded for the call, into the caller's memory or a local .npy
 * file) and measurements of resident states (Measure). Values a reply carries come in it; larger
 * ones (the daemon refuses them with field "region") are written by the daemon into a
 * shared-memory region made here for the call. Any thread. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
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
  /* Renews what the request used up before it is sent again into a region (the daemon takes a
   * descriptor's ticket once); NULL: nothing to renew. */
  qdp_status (*renew)(qdp_client *c, void *arg);
  void *renew_arg;
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
    rc = k->renew ? k->renew(c, k->renew_arg) : QDP_OK;
    if (rc == QDP_OK) {
      rc = through_region(c, k, bytes, v);
    }
  }
  return rc;
}

/* Which matrix a Kernel asks for: of resident states (a, b), or of the states of inputs (opts,
 * in_a, in_b) encoded for the call. */
struct kernel_ask {
  const char *a, *a_token, *b, *b_token;
  bool inputs;
  const struct qdp_encode_opts *opts;
  const struct qdp_input *in[2]; /* in_a, in_b (NULL: in_a with itself) */
  uint64_t max_bytes;
  unsigned flags;
};

/* The requests of a kernel's inputs, and how many of them were begun (and are to be ended). */
struct kernel_inputs {
  const struct qdp_input *in[2];
  struct qdp__encode_request r[2];
  int begun;
};

/* A failure in b's input names b's field: "input.path" becomes "input_b.path". */
static qdp_status as_input_b(qdp_status rc) {
  char *f = qdp__err()->field;
  if (rc != QDP_OK && strncmp(f, "input", 5) == 0 && (f[5] == '.' || f[5] == '\0')) {
    char rest[sizeof qdp__err()->field];
    snprintf(rest, sizeof rest, "%s", f + 5);
    snprintf(f, sizeof qdp__err()->field, "input_b%.56s", rest);
  }
  return rc;
}

static qdp_status renew_inputs(qdp_client *c, void *arg) {
  struct kernel_inputs *ki = arg;
  qdp_status rc = QDP_OK;
  for (int i = 0; rc == QDP_OK && i < ki->begun; i++) {
    rc = qdp__encode_request_renew(c, ki->in[i], &ki->r[i]);
    rc = i ? as_input_b(rc) : rc;
  }
  return rc;
}

/* The encode request of a, and b's input: each carried whole, since Kernel is one message. */
static qdp_status inputs_begin(qdp_client *c, const struct kernel_ask *ask,
                               struct kernel_inputs *ki, Qdp__KernelRequest *req) {
  const struct qdp_encode_opts *o = ask->opts;
  if (o && o->struct_size > offsetof(struct qdp_encode_opts, ipc) && o->ipc) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "ipc",
                          "A kernel of inputs keeps no state, so it has no views: leave ipc 0.");
  }
  ki->in[0] = ask->in[0];
  ki->in[1] = ask->in[1];
  qdp_status rc = QDP_OK;
  for (int i = 0; rc == QDP_OK && i < (ki->in[1] ? 2 : 1); i++) {
    ki->begun++;
    rc = qdp__encode_request_begin(c, o, ki->in[i], QDP__CARRY_WHOLE, &ki->r[i]);
    rc = i ? as_input_b(rc) : rc;
  }
  req->encode = &ki->r[0].req;
  req->input_b = ki->in[1] ? &ki->r[1].input : NULL;
  req->max_bytes = ask->max_bytes;
  return rc;
}

static void inputs_end(qdp_client *c, struct kernel_inputs *ki) {
  for (int i = 0; i < ki->begun; i++) {
    qdp__encode_request_end(c, &ki->r[i]);
  }
}

static qdp_status kernel_values(qdp_client *c, const struct kernel_ask *ask, struct values *v,
                                struct qdp_kernel_info *ret_info) {
  memset(v, 0, sizeof *v);
  v->region = (struct qdp__scratch)QDP__SCRATCH_INIT;
  if (ask->flags & ~(unsigned)QDP_KERNEL_OVERLAPS) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "flags", "Unknown kernel flags 0x%x.",
                          ask->flags & ~(unsigned)QDP_KERNEL_OVERLAPS);
  }
  Qdp__StateRef ra = qdp__state_ref(ask->a, ask->a_token);
  Qdp__StateRef rb = qdp__state_ref(ask->b, ask->b_token);
  Qdp__KernelRequest req = QDP__KERNEL_REQUEST__INIT;
  req.overlaps = (ask->flags & QDP_KERNEL_OVERLAPS) != 0;
  struct computation k = {M_KERNEL, &req.base, &req.region, &qdp__kernel_reply__descriptor, NULL,
                          NULL};
  struct kernel_inputs ki = {.begun = 0};
  qdp_status rc;
  if (ask->inputs) {
    rc = qdp__check_client(c);
    if (rc == QDP_OK) {
      rc = inputs_begin(c, ask, &ki, &req);
    }
    k.renew = renew_inputs;
    k.renew_arg = &ki;
  } else {
    rc = qdp__check_ref(c, ask->a, ask->a_token);
    if (rc == QDP_OK && ask->b) {
      rc = qdp__check_ref(c, ask->b, ask->b_token);
    }
    req.a = &ra;
    req.b = ask->b ? &rb : NULL;
  }
  if (rc == QDP_OK) {
    rc = computed(c, &k, v);
  }
  if (rc == QDP_OK && ret_info) {
    ret_info->rows = v->ans.rows;
    ret_info->cols = v->ans.cols;
    ret_info->dtype = (qdp_dtype)v->ans.dtype;
    ret_info->bytes = v->ans.bytes;
    snprintf(ret_info->device, sizeof ret_info->device, "%s", v->ans.device ? v->ans.device : "");
    ret_info->compute_ms = v->ans.compute_ms;
  }
  inputs_end(c, &ki);
  return rc;
}

/* The matrix into dst. */
static qdp_status kernel_into(qdp_client *c, const struct kernel_ask *ask, void *dst,
                              size_t dst_bytes, struct qdp_kernel_info *ret_info) {
  qdp__err_reset();
  if (!dst && dst_bytes) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "dst", "dst is NULL.");
  }
  struct values v;
  qdp_status rc = kernel_values(c, ask, &v, ret_info);
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

/* The matrix into a local .npy file. */
static qdp_status kernel_npy(qdp_client *c, const struct kernel_ask *ask, const char *path,
                             int overwrite, struct qdp_kernel_info *ret_info) {
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
  qdp_status rc = kernel_values(c, ask, &v, &info);
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

qdp_status qdp_kernel(qdp_client *c, const char *a, const char *a_token, const char *b,
                      const char *b_token, unsigned flags, void *dst, size_t dst_bytes,
                      struct qdp_kernel_info *ret_info) {
  struct kernel_ask ask = {.a = a, .a_token = a_token, .b = b, .b_token = b_token, .flags = flags};
  return kernel_into(c, &ask, dst, dst_bytes, ret_info);
}

qdp_status qdp_kernel_npy(qdp_client *c, const char *a, const char *a_token, const char *b,
                          const char *b_token, unsigned flags, const char *path, int overwrite,
                          struct qdp_kernel_info *ret_info) {
  struct kernel_ask ask = {.a = a, .a_token = a_token, .b = b, .b_token = b_token, .flags = flags};
  return kernel_npy(c, &ask, path, overwrite, ret_info);
}

qdp_status qdp_kernel_of(qdp_client *c, const struct qdp_encode_opts *opts,
                         const struct qdp_input *a, const struct qdp_input *b, uint64_t max_bytes,
                         unsigned flags, void *dst, size_t dst_bytes,
                         struct qdp_kernel_info *ret_info) {
  struct kernel_ask ask = {
      .inputs = true, .opts = opts, .in = {a, b}, .max_bytes = max_bytes, .flags = flags};
  return kernel_into(c, &ask, dst, dst_bytes, ret_info);
}

qdp_status qdp_kernel_of_npy(qdp_client *c, const struct qdp_encode_opts *opts,
                             const struct qdp_input *a, const struct qdp_input *b,
                             uint64_t max_bytes, unsigned flags, const char *path, int overwrite,
                             struct qdp_kernel_info *ret_info) {
  struct kernel_ask ask = {
      .inputs = true, .opts = opts, .in = {a, b}, .max_bytes = max_bytes, .flags = flags};
  return kernel_npy(c, &ask, path, overwrite, ret_info);
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
  struct computation k = {M_MEASURE, &req.base, &req.region, &qdp__measure_reply__descriptor,
                          NULL, NULL};
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
