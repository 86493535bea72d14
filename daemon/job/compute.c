/* compute.c — computations on resident states whose values come back (job.h: the kernel matrix,
 * also from inputs, and measurements): into a region the caller registered writable, or host
 * memory handed back. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "internal.h"
#include "qdp_size.h"
#include "region.h"

struct kernel_write {
  struct job_pipeline *jp;
  struct runtime_state *a, *b;
  struct job_kernel_inputs *ki; /* the form from inputs */
  bool overlaps;
  const char *device;
};

static qdp_status kernel_write(void *arg, void *dst, struct qdp_error *err) {
  struct kernel_write *w = arg;
  if (w->ki) {
    return job_kernel_inputs_write(w->jp, w->ki, w->overlaps, dst, &w->device, err);
  }
  return runtime_state_kernel(w->jp->mesh, w->a, w->b, w->overlaps, RUNTIME_KERNEL_TILES, dst,
                              &w->device, err);
}

/* Where a computation's `bytes` of values go (`what` says what they are, for messages): the
 * caller's CUDA allocation `out`, the region of o, else host memory that *ret_values takes (up to
 * inline_max); write(arg, dst) makes them. *ret_ms: how long write took. */
struct compute_out {
  const char *method; /* "Kernel" */
  const char *region, *region_token;
  uint64_t region_offset;
  uint64_t inline_max;
  const struct job_output *out;
  unsigned value_bytes; /* of one value: out.offset must be a multiple */
};

/* write(arg, dst) with dst the caller's allocation o->out: checked (the refusals job_kernel
 * lists: the request's own faults before the backend's), opened for the call on its GPU, and
 * closed. */
static qdp_status deliver_out(struct job_pipeline *jp, const struct compute_out *o,
                              uint64_t bytes, const char *what,
                              qdp_status (*write)(void *arg, void *dst, struct qdp_error *err),
                              void *arg, struct qdp_error *err) {
  const struct job_output *out = o->out;
  struct job_sink sink = {0};
  qdp_status rc = QDP_OK;
  if (o->region && o->region[0]) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "region",
                         "region and out both name where the values go: give one");
  }
  if (out->ipc_handle_len != RUNTIME_IPC_HANDLE_BYTES) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "out.ipc_handle",
                         "out.ipc_handle has %zu bytes; a cudaIpcMemHandle_t has %d",
                         out->ipc_handle_len, RUNTIME_IPC_HANDLE_BYTES);
  }
  if (out->offset % o->value_bytes != 0) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "out.offset",
                         "out.offset %" PRIu64 " is not a multiple of %u B, the size of a value",
                         out->offset, o->value_bytes);
  }
  if (out->bytes < bytes) {
    rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "out.bytes",
                       "%s needs %" PRIu64 " B but out offers %" PRIu64 " B", what, bytes,
                       out->bytes);
    if (err) {
      err->need_bytes = bytes;
      err->free_bytes = out->bytes;
    }
    return rc;
  }
  if (strcmp(runtime_mesh_backend(jp->mesh), "cpu") == 0) {
    return qdp_error_set(err, QDP_ERR_FAILED_PRECONDITION, "out",
                         "out names a CUDA allocation, but this daemon's mesh is cpu:%zu (host "
                         "memory); leave out unset and take the values back",
                         runtime_mesh_count(jp->mesh));
  }
  QDP_TRY(rc, runtime_mesh_find_uuid(jp->mesh, out->device_uuid, "out.device_uuid", &sink.device,
                                     err));
  QDP_TRY(rc, job_sink_open_range(jp, out, &sink, err));
  rc = write(arg, sink.out.data, err);
out:
  job_sink_close(jp, &sink);
  return rc;
}

static qdp_status deliver(struct job_pipeline *jp, const struct job_caller *caller,
                          const struct compute_out *o, unsigned __int128 bytes, const char *what,
                          qdp_status (*write)(void *arg, void *dst, struct qdp_error *err),
                          void *arg, void **ret_values, double *ret_ms, struct qdp_error *err) {
  struct job_region *g = NULL;
  qdp_status rc;
  bool to_region = o->region && o->region[0];
  *ret_values = NULL;
  if (bytes > (to_region || o->out ? UINT64_MAX : o->inline_max)) {
    rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, "region",
                       "%s is %s, more than a reply carries (%s): pass a region registered "
                       "writable to write it into",
                       what, bytes > UINT64_MAX ? "over 16 EiB" : QDP_SIZE_STR((uint64_t)bytes),
                       QDP_SIZE_STR(o->inline_max));
    if (err) {
      err->need_bytes = bytes > UINT64_MAX ? UINT64_MAX : (uint64_t)bytes;
      err->free_bytes = o->inline_max;
    }
    return rc;
  }
  uint64_t t0 = clock_mono_ns();
  if (o->out) {
    QDP_TRY(rc, deliver_out(jp, o, (uint64_t)bytes, what, write, arg, err));
  } else if (to_region) {
    QDP_TRY(rc, job_output_region(jp, caller, o->region, o->region_token, o->method, &g, err));
    QDP_TRY(rc, job_region_fits(g, o->region, o->region_offset, (uint64_t)bytes, what, "region",
                                err));
    QDP_TRY(rc, job_region_write(g, o->region, o->region_offset, write, arg, err));
  } else {
    *ret_values = malloc(bytes ? (size_t)bytes : 1);
    if (!*ret_values) {
      rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no host memory for %s (%s)",
                         what, QDP_SIZE_STR((uint64_t)bytes));
      goto out;
    }
    QDP_TRY(rc, write(arg, *ret_values, err));
  }
  *ret_ms = (double)(clock_mono_ns() - t0) / 1e6;
out:
  if (rc != QDP_OK) {
    free(*ret_values);
    *ret_values = NULL;
  }
  if (g) {
    region_registry_put(jp->regions, g);
  }
  return rc;
}

qdp_status job_kernel(struct job_pipeline *jp, const struct job_caller *caller,
                      const struct job_kernel_request *req, uint64_t inline_max,
                      struct job_kernel_result *ret, struct qdp_error *err) {
  struct kernel_write w = {.jp = jp, .overlaps = req->overlaps};
  qdp_dtype states;
  qdp_status rc;
  memset(ret, 0, sizeof *ret);
  if (req->encode) {
    QDP_TRY(rc, job_kernel_inputs_open(jp, caller, req, &w.ki, err));
    job_kernel_inputs_shape(w.ki, &ret->rows, &ret->cols, &states);
  } else {
    QDP_TRY(rc, job_pin_state(jp, req->a, req->a_token, "a", &w.a, err));
    if (req->b && req->b[0]) {
      QDP_TRY(rc, job_pin_state(jp, req->b, req->b_token, "b", &w.b, err));
    }
    const struct plan *pa = runtime_state_plan(w.a), *pb = runtime_state_plan(w.b ? w.b : w.a);
    ret->rows = pa->batch;
    ret->cols = pb->batch;
    states = pa->out_dtype;
  }
  ret->dtype = req->overlaps                      ? states
               : states == QDP_DTYPE_COMPLEX64 ? QDP_DTYPE_FLOAT32
                                                 : QDP_DTYPE_FLOAT64;
  unsigned __int128 bytes = (unsigned __int128)ret->rows * ret->cols * qdp_dtype_size(ret->dtype);
  char what[96];
  snprintf(what, sizeof what, "a %" PRIu64 " x %" PRIu64 " %s matrix", ret->rows, ret->cols,
           qdp_dtype_name(ret->dtype));
  struct compute_out o = {.method = "Kernel",
                          .region = req->region,
                          .region_token = req->region_token,
                          .region_offset = req->region_offset,
                          .inline_max = inline_max,
                          .out = req->out,
                          .value_bytes = qdp_dtype_size(ret->dtype)};
  QDP_TRY(rc, deliver(jp, caller, &o, bytes, what, kernel_write, &w, &ret->values,
                      &ret->compute_ms, err));
  ret->bytes = (uint64_t)bytes;
  snprintf(ret->device, sizeof ret->device, "%s", w.device ? w.device : "");
out:
  job_kernel_inputs_close(jp, w.ki);
  if (w.b) {
    state_store_put(jp->store, w.b);
  }
  if (w.a) {
    state_store_put(jp->store, w.a);
  }
  return rc;
}

/* ---- measurements ---- */

/* A Pauli string of the state's n qubits: letter k on qubit k. INVALID_ARGUMENT (field "paulis")
 * naming the string and what is wrong. */
static qdp_status pauli(const char *str, size_t i, uint32_t n, struct runtime_pauli *ret,
                        struct qdp_error *err) {
  size_t len = str ? strlen(str) : 0;
  if (len != n) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "paulis",
                         "Pauli string %zu ('%.64s') has %zu letters for a %u-qubit state: one "
                         "letter per qubit, I, X, Y or Z (letter k acts on qubit k)",
                         i, str ? str : "", len, n);
  }
  *ret = (struct runtime_pauli){0, 0, 0};
  for (uint32_t k = 0; k < n; k++) {
    uint64_t bit = (uint64_t)1 << k;
    switch (str[k]) {
    case 'I':
      break;
    case 'X':
      ret->xmask |= bit;
      break;
    case 'Y':
      ret->xmask |= bit;
      ret->zmask |= bit;
      ret->ny++;
      break;
    case 'Z':
      ret->zmask |= bit;
      break;
    default:
      return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "paulis",
                           "Pauli string %zu ('%.64s') has '%c' at qubit %u: use I, X, Y or Z", i,
                           str, str[k], k);
    }
  }
  return QDP_OK;
}

struct measure_write {
  struct job_pipeline *jp;
  struct runtime_state *s;
  struct runtime_measure m;
  uint64_t shots, seed; /* SAMPLES: shots > 0 */
  const char *device;
};

static qdp_status measure_write(void *arg, void *dst, struct qdp_error *err) {
  struct measure_write *w = arg;
  if (w->shots) {
    return runtime_state_sample(w->jp->mesh, w->s, w->shots, w->seed, w->m.window_log2, dst,
                                &w->device, err);
  }
  return runtime_state_measure(w->jp->mesh, w->s, &w->m, dst, &w->device, err);
}

/* What a measurement must not carry: qubits, strings or shots of another kind. */
static qdp_status measure_fields(const struct job_measure_request *req, struct qdp_error *err) {
  const struct {
    int kind;
    bool given;
    const char *field, *what;
  } fields[] = {{JOB_MEASURE_PROBABILITIES, req->nqubits != 0, "qubits", "qubits"},
                {JOB_MEASURE_EXPECTATIONS, req->npaulis != 0, "paulis", "Pauli strings"},
                {JOB_MEASURE_SAMPLES, req->shots != 0 || req->seed != 0, "shots",
                 "shots and a seed"}};
  static const char *const names[] = {"", "PROBABILITIES", "EXPECTATIONS", "SAMPLES"};
  if (req->measurement < JOB_MEASURE_PROBABILITIES || req->measurement > JOB_MEASURE_SAMPLES) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "measurement",
                         "measurement %d: ask for PROBABILITIES, EXPECTATIONS or SAMPLES",
                         req->measurement);
  }
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    if (fields[i].given && fields[i].kind != req->measurement) {
      return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, fields[i].field,
                           "%s go with %s, not with %s", fields[i].what, names[fields[i].kind],
                           names[req->measurement]);
    }
  }
  if (req->measurement == JOB_MEASURE_EXPECTATIONS && req->npaulis == 0) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "paulis",
                         "EXPECTATIONS needs at least one Pauli string ('ZII': Z on qubit 0)");
  }
  if (req->measurement == JOB_MEASURE_SAMPLES && req->shots == 0) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "shots",
                         "SAMPLES needs shots (at least 1 a sample)");
  }
  return QDP_OK;
}

qdp_status job_measure(struct job_pipeline *jp, const struct job_caller *caller,
                       const struct job_measure_request *req, uint64_t inline_max,
                       struct job_measure_result *ret, struct qdp_error *err) {
  struct measure_write w = {.jp = jp};
  struct runtime_pauli *ps = NULL;
  qdp_status rc = QDP_OK;
  memset(ret, 0, sizeof *ret);
  QDP_TRY(rc, measure_fields(req, err));
  QDP_TRY(rc, job_pin_state(jp, req->handle, req->token, "state", &w.s, err));
  const struct plan *p = runtime_state_plan(w.s);
  bool samples = req->measurement == JOB_MEASURE_SAMPLES;
  if (samples && (req->shots > JOB_MEASURE_SHOTS_MAX / p->batch)) {
    rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "shots",
                       "%" PRIu64 " shots of each of %" PRIu64 " samples: at most %" PRIu64
                       " in all",
                       req->shots, p->batch, JOB_MEASURE_SHOTS_MAX);
    goto out;
  }
  if (req->npaulis) {
    ps = calloc(req->npaulis, sizeof *ps);
    if (!ps) {
      rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no host memory for %zu Pauli "
                         "strings", req->npaulis);
      goto out;
    }
    for (size_t i = 0; i < req->npaulis; i++) {
      QDP_TRY(rc, pauli(req->paulis[i], i, p->qubits, &ps[i], err));
    }
  }
  w.m = (struct runtime_measure){(uint32_t)req->nqubits, req->qubits, (uint32_t)req->npaulis, ps,
                                 RUNTIME_MEASURE_WINDOW_LOG2};
  w.shots = samples ? req->shots : 0;
  w.seed = req->seed;
  ret->rows = p->batch;
  ret->cols = samples ? req->shots
              : req->measurement == JOB_MEASURE_EXPECTATIONS
                  ? req->npaulis
                  : req->nqubits ? (req->nqubits < 64 ? (uint64_t)1 << req->nqubits : 0)
                                 : p->amplitudes;
  unsigned __int128 bytes = (unsigned __int128)ret->rows * ret->cols * sizeof(double);
  char what[96];
  snprintf(what, sizeof what, "%" PRIu64 " x %" PRIu64 " %s", ret->rows, ret->cols,
           samples ? "int64 samples"
           : req->measurement == JOB_MEASURE_EXPECTATIONS ? "float64 expectation values"
                                                          : "float64 probabilities");
  struct compute_out o = {.method = "Measure",
                          .region = req->region,
                          .region_token = req->region_token,
                          .region_offset = req->region_offset,
                          .inline_max = inline_max};
  QDP_TRY(rc, deliver(jp, caller, &o, bytes, what, measure_write, &w, &ret->values,
                      &ret->compute_ms, err));
  ret->bytes = (uint64_t)bytes;
  snprintf(ret->device, sizeof ret->device, "%s", w.device ? w.device : "");
out:
  free(ps);
  if (w.s) {
    state_store_put(jp->store, w.s);
  }
  return rc;
}
