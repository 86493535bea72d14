/* fuzz_request.c — a request's way through the daemon, from the bytes gRPC hands over to a checked
 * plan: rpc_codec_unpack (as the completion-queue thread decodes every method's request), the
 * request checks of job/shape.c in the order job/encode.c and rpc/upload.c make them, then
 * plan_compute and plan_check_feasible against fixed fake worlds. Each stage sees only what the
 * stage before accepted. Nothing here does I/O: an input by path stops before its file is opened,
 * one in shared memory after its shape check.
 *
 * Checked beyond memory safety and undefined behaviour: every refusal has a status its contract
 * names and a message (and, for INVALID_ARGUMENT, the request field); every plan keeps the
 * invariants plan.h promises (the shards tile the state, the needs add up, feasibility agrees).
 */
#include <stdbool.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>

#include "codec.h"
#include "fuzz.h"
#include "plan/plan.h"
#include "qdp.pb-c.h"
#include "job/job.h"

#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

/* max_upload_bytes as the daemon's configuration table defaults it. */
#define MAX_UPLOAD_BYTES GIB

struct world {
  const struct plan_device *devs;
  size_t n;
  int ranks;
  const uint8_t *link_cost;
  const struct plan_limits *lim;
  uint64_t staging_bytes;
  uint32_t iqp_top_bits; /* the runtime's: 3 for CPU devices, 0 for CUDA ones */
};

/* The daemon's default limits (max_qubits 40, max_batch 2^20). */
static const struct plan_limits default_limits = {40, UINT64_C(1) << 20, 0};
/* Past every configurable limit: the planner's own ceiling (60 qubits) and a state-size cap. */
static const struct plan_limits wide_limits = {0, 0, UINT64_C(1) << 50};

/* cpu:4 with some bytes in use, as runtime_mesh_plan_devices reports it (no staging). */
static const struct plan_device one_rank[] = {
    {0, 0, "cpu:0", GIB},
    {0, 1, "cpu:1", GIB},
    {0, 2, "cpu:2", 512 * MIB},
    {0, 3, "cpu:3", 16 * MIB},
};

/* Two ranks of two devices, listed out of (rank, ordinal) order, one of them full. */
static const struct plan_device two_ranks[] = {
    {1, 1, "r1/cpu:1", 0},
    {0, 0, "r0/cpu:0", 64 * GIB},
    {1, 0, "r1/cpu:0", 32 * GIB},
    {0, 1, "r0/cpu:1", 64 * GIB},
};

/* Eight GPU-like devices in two NVLink islands of four joined over PCIe, with staging: even
 * plans over 4..8 of them take the link-ordering path. */
static const struct plan_device eight[] = {
    {0, 0, "cuda:0", 128 * GIB}, {0, 1, "cuda:1", 128 * GIB}, {0, 2, "cuda:2", 96 * GIB},
    {0, 3, "cuda:3", 128 * GIB}, {0, 4, "cuda:4", 64 * GIB},  {0, 5, "cuda:5", 128 * GIB},
    {0, 6, "cuda:6", 1 * GIB},   {0, 7, "cuda:7", 128 * GIB},
};
static uint8_t eight_links[8 * 8];

static struct world worlds[] = {
    {one_rank, 4, 1, NULL, &default_limits, 0, 3},
    {two_ranks, 4, 2, NULL, NULL, 0, 3},
    {eight, 8, 1, eight_links, &wide_limits, 256 * MIB, 0},
};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  for (size_t i = 0; i < 8; i++) {
    for (size_t j = 0; j < 8; j++) {
      eight_links[i * 8 + j] = i == j ? 0 : (i / 4 == j / 4 ? 1 : 2);
    }
  }
  return 0;
}

/* A refusal: one of the statuses allowed here, the record filled to match, a message. */
static void check_refusal(qdp_status rc, const struct qdp_error *e, qdp_status a, qdp_status b,
                          const char *stage) {
  FUZZ_CHECK(rc == a || rc == b, "%s: status %d (%s)", stage, (int)rc, e->msg);
  FUZZ_CHECK(e->code == rc, "%s: status %d but the record says %d", stage, (int)rc, (int)e->code);
  FUZZ_CHECK(e->msg[0] != '\0', "%s: status %d without a message", stage, (int)rc);
  FUZZ_CHECK(memchr(e->msg, '\0', sizeof e->msg) != NULL, "%s: unterminated message", stage);
  FUZZ_CHECK(memchr(e->field, '\0', sizeof e->field) != NULL, "%s: unterminated field", stage);
  if (rc == QDP_ERR_INVALID_ARGUMENT) {
    FUZZ_CHECK(e->field[0] != '\0', "%s: INVALID_ARGUMENT names no field: %s", stage, e->msg);
  }
}

/* The invariants plan.h states for every plan of request r in world w. */
static void check_plan(const struct plan *p, const struct plan_request *r, const struct world *w) {
  FUZZ_CHECK(p->policy >= PLAN_SINGLE && p->policy <= PLAN_BATCH, "policy %d", (int)p->policy);
  FUZZ_CHECK(r->policy == PLAN_AUTO || p->policy == r->policy ||
                 (r->policy == PLAN_BATCH && r->batch == 1 && p->policy == PLAN_SINGLE),
             "asked for policy %d, got %d", (int)r->policy, (int)p->policy);
  FUZZ_CHECK(p->qubits == r->qubits && p->qubits <= PLAN_MAX_QUBITS, "qubits %u", p->qubits);
  FUZZ_CHECK(p->amplitudes == UINT64_C(1) << p->qubits, "amplitudes %llu",
             (unsigned long long)p->amplitudes);
  FUZZ_CHECK(p->batch == r->batch && p->batch >= 1, "batch %llu", (unsigned long long)p->batch);
  unsigned es = qdp_dtype_size(p->out_dtype);
  FUZZ_CHECK(es == 8 || es == 16, "out dtype %d", (int)p->out_dtype);
  FUZZ_CHECK(p->amplitudes <= UINT64_MAX / es / p->batch &&
                 p->total_bytes == p->batch * p->amplitudes * es,
             "total_bytes %llu", (unsigned long long)p->total_bytes);
  FUZZ_CHECK(p->nshards >= 1 && p->nshards <= w->n && p->nneeds == p->nshards, "%zu shards",
             p->nshards);
  /* global_bits is g exactly when the shards are 2^g equal ranges of the index in order; an even
   * plan always is, and an iqp plan that splits a sample must be (its stages exchange pairs)
   * unless every shard holds whole blocks of the top bits its devices transform alone. */
  bool iqp = p->encoding == QDP_ENCODING_IQP || p->encoding == QDP_ENCODING_IQP_Z;
  uint32_t top = r->iqp_top_bits < p->qubits ? r->iqp_top_bits : p->qubits;
  FUZZ_CHECK(p->iqp_top_bits == (iqp ? top : 0), "%u top bits for a request of %u", p->iqp_top_bits,
             r->iqp_top_bits);
  uint64_t block = p->amplitudes >> top;
  bool whole_blocks = top > 0;
  uint32_t g = 0;
  bool split = false;
  if (p->nshards >= 2 && (p->nshards & (p->nshards - 1)) == 0) {
    uint32_t k = (uint32_t)__builtin_ctzll(p->nshards);
    uint64_t size = p->amplitudes >> k;
    bool equal = true;
    for (size_t i = 0; i < p->nshards; i++) {
      equal = equal && p->shards[i].first == i * size && p->shards[i].count == size;
    }
    g = equal ? k : 0;
  }
  for (size_t i = 0; i < p->nshards; i++) {
    split = split || p->shards[i].count < p->amplitudes;
    whole_blocks =
        whole_blocks && p->shards[i].first % block == 0 && p->shards[i].count % block == 0;
  }
  FUZZ_CHECK(p->global_bits == g, "%u global bits for %zu shards (expected %u)", p->global_bits,
             p->nshards, g);
  FUZZ_CHECK(p->policy != PLAN_EVEN || p->nshards == (size_t)1 << g, "even: %zu shards, %u bits",
             p->nshards, g);
  FUZZ_CHECK(!split || g > 0 || !iqp || whole_blocks,
             "an iqp state split into %zu unequal ranges that are not whole blocks of 2^%u",
             p->nshards, p->qubits - top);

  /* The shards tile [0, batch) x [0, 2^n) in (row_first, first) order: bands of rows, each cut
   * into consecutive amplitude ranges that all span the band's rows. */
  uint64_t row = 0, first = 0, band_rows = 0, bytes = 0;
  bool used[8] = {false};
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *s = &p->shards[i];
    FUZZ_CHECK(s->count >= 1 && s->rows >= 1, "shard %zu: %llu x %llu", i,
               (unsigned long long)s->rows, (unsigned long long)s->count);
    if (first == 0) {
      band_rows = s->rows;
    }
    FUZZ_CHECK(s->row_first == row && s->first == first && s->rows == band_rows,
               "shard %zu at rows %llu+%llu amplitudes %llu+%llu; expected rows %llu+%llu at "
               "amplitude %llu",
               i, (unsigned long long)s->row_first, (unsigned long long)s->rows,
               (unsigned long long)s->first, (unsigned long long)s->count, (unsigned long long)row,
               (unsigned long long)band_rows, (unsigned long long)first);
    FUZZ_CHECK(s->count <= p->amplitudes - s->first && s->rows <= p->batch - s->row_first,
               "shard %zu passes the state's end", i);
    FUZZ_CHECK(s->bytes == s->count * s->rows * es, "shard %zu: %llu B", i,
               (unsigned long long)s->bytes);
    bytes += s->bytes;
    first += s->count;
    if (first == p->amplitudes) {
      first = 0;
      row += band_rows;
    }
    FUZZ_CHECK(s->device < w->n && !used[s->device], "shard %zu on device %zu (twice?)", i,
               s->device);
    used[s->device] = true;
    const struct plan_device *d = &w->devs[s->device];
    FUZZ_CHECK(s->rank == d->rank && s->ordinal == d->ordinal, "shard %zu: r%d/%d on %s", i,
               s->rank, s->ordinal, d->name);
    if (r->device_subset_count) {
      bool in = false;
      for (size_t k = 0; k < r->device_subset_count; k++) {
        in = in || r->device_subset[k] == s->device;
      }
      FUZZ_CHECK(in, "shard %zu on %s, outside the placement's devices", i, d->name);
    }

    const struct plan_need *n = &p->needs[i];
    uint64_t ws = plan_workspace_bytes(p, s);
    uint64_t sum = s->bytes + r->staging_bytes;
    sum = sum < s->bytes || sum + ws < sum ? UINT64_MAX : sum + ws;
    FUZZ_CHECK(n->device == s->device && n->rank == s->rank && n->ordinal == s->ordinal &&
                   n->shard_bytes == s->bytes && n->staging_bytes == r->staging_bytes &&
                   n->workspace_bytes == ws && n->need_bytes == sum &&
                   n->budget_bytes == d->budget_bytes &&
                   (n->fits != 0) == (n->need_bytes <= n->budget_bytes),
               "need %zu does not match shard %zu on %s", i, i, d->name);
    FUZZ_CHECK(memchr(n->name, '\0', sizeof n->name) != NULL && n->name[0], "need %zu: name", i);
    FUZZ_CHECK(n->fits || !p->feasible, "need %zu does not fit in a feasible plan", i);
  }
  FUZZ_CHECK(row == p->batch && first == 0, "the shards end at row %llu amplitude %llu",
             (unsigned long long)row, (unsigned long long)first);
  FUZZ_CHECK(bytes == p->total_bytes, "shards hold %llu of %llu B", (unsigned long long)bytes,
             (unsigned long long)p->total_bytes);

  size_t owned = 0;
  for (int rk = 0; rk < w->ranks; rk++) {
    owned += plan_rank_shards(p, rk, NULL, 0);
  }
  FUZZ_CHECK(owned == p->nshards, "ranks own %zu of %zu shards", owned, p->nshards);
}

/* The input as run_encode hands it to the planner. */
struct input {
  int dtype;
  uint64_t rows, cols;
};

/* run_encode from the output dtype on: placement, plan, feasibility. */
static void plan_stage(const Qdp__EncodeRequest *r, const struct input *in, const struct world *w) {
  struct qdp_error e = QDP_ERROR_INIT;
  qdp_dtype out;
  qdp_status rc = job_output_dtype(r->output_dtype, &out, &e);
  if (rc != QDP_OK) {
    check_refusal(rc, &e, QDP_ERR_INVALID_ARGUMENT, QDP_ERR_INVALID_ARGUMENT, "output dtype");
    return;
  }
  FUZZ_CHECK(out == QDP_DTYPE_COMPLEX64 || out == QDP_DTYPE_COMPLEX128, "output dtype %d",
             (int)out);
  enum plan_policy policy;
  size_t subset[8];
  size_t nsub = 0;
  e = (struct qdp_error)QDP_ERROR_INIT;
  const Qdp__Placement *pl = r->placement;
  struct job_placement jpl = {.policy = pl ? (int)pl->policy : 0,
                              .devices = pl ? (const char *const *)pl->devices : NULL,
                              .ndevices = pl ? pl->n_devices : 0};
  rc = job_placement(&jpl, w->devs, w->n, &policy, subset, &nsub, &e);
  if (rc != QDP_OK) {
    check_refusal(rc, &e, QDP_ERR_INVALID_ARGUMENT, QDP_ERR_INVALID_ARGUMENT, "placement");
    return;
  }
  FUZZ_CHECK(policy >= PLAN_AUTO && policy <= PLAN_BATCH && nsub <= w->n, "policy %d, %zu devices",
             (int)policy, nsub);
  for (size_t i = 0; i < nsub; i++) {
    FUZZ_CHECK(subset[i] < w->n, "placement device %zu", subset[i]);
  }
  struct plan_request pr = {
      .encoding = (qdp_encoding)r->encoding,
      .qubits = r->qubits,
      .batch = in->rows,
      .values_per_sample = in->cols,
      .in_dtype = (qdp_dtype)in->dtype,
      .out_dtype = out,
      .policy = policy,
      .device_subset = nsub ? subset : NULL,
      .device_subset_count = nsub,
      .staging_bytes = w->staging_bytes,
      .iqp_top_bits = w->iqp_top_bits,
  };
  struct plan_world world = {
      .devices = w->devs, .count = w->n, .ranks = w->ranks, .link_cost = w->link_cost};
  struct plan *p = NULL;
  e = (struct qdp_error)QDP_ERROR_INIT;
  rc = plan_compute(&pr, &world, w->lim, &p, &e);
  if (rc != QDP_OK) {
    /* The world is consistent and host memory plentiful: only the request can be wrong. */
    check_refusal(rc, &e, QDP_ERR_INVALID_ARGUMENT, QDP_ERR_INVALID_ARGUMENT, "plan");
    FUZZ_CHECK(p == NULL, "a refused plan was returned");
    return;
  }
  check_plan(p, &pr, w);
  e = (struct qdp_error)QDP_ERROR_INIT;
  rc = plan_check_feasible(p, &e);
  FUZZ_CHECK((rc == QDP_OK) == (p->feasible != 0), "feasible %d but the check says %d", p->feasible,
             (int)rc);
  if (rc != QDP_OK) {
    check_refusal(rc, &e, QDP_ERR_RESOURCE_EXHAUSTED, QDP_ERR_RESOURCE_EXHAUSTED, "feasibility");
    FUZZ_CHECK(e.need_bytes > e.free_bytes, "the worst device needs %llu B of %llu B",
               (unsigned long long)e.need_bytes, (unsigned long long)e.free_bytes);
  }
  plan_destroy(p);
}

static void plan_everywhere(const Qdp__EncodeRequest *r, const struct input *in) {
  for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
    plan_stage(r, in, &worlds[i]);
  }
}

/* job_input_shape for nbytes of values, and on to the planner when it accepts. */
static void shaped(const Qdp__EncodeRequest *r, const Qdp__Input *in, uint64_t nbytes,
                   const char *field) {
  struct qdp_error e = QDP_ERROR_INIT;
  struct input shape = {in->dtype, 0, 0};
  qdp_status rc =
      job_input_shape(in->dtype, in->rows, in->cols, nbytes, field, &shape.rows, &shape.cols, &e);
  if (rc != QDP_OK) {
    check_refusal(rc, &e, QDP_ERR_INVALID_ARGUMENT, QDP_ERR_INVALID_ARGUMENT, "input shape");
    return;
  }
  FUZZ_CHECK(shape.rows >= 1 && shape.cols >= 1 && shape.rows <= UINT64_MAX / shape.cols &&
                 shape.rows * shape.cols * qdp_dtype_size((qdp_dtype)in->dtype) == nbytes,
             "%llu bytes shaped as %llu x %llu", (unsigned long long)nbytes,
             (unsigned long long)shape.rows, (unsigned long long)shape.cols);
  plan_everywhere(r, &shape);
}

/* Encode and Plan (job/encode.c job_encode and source_open). */
static void encode_request(const Qdp__EncodeRequest *r) {
  const Qdp__Input *in = r->input;
  if (!in) {
    return; /* "input is missing" */
  }
  switch (in->source_case) {
  case QDP__INPUT__SOURCE__NOT_SET: {
    /* A Plan of data still to be streamed: the declared shape. */
    struct qdp_error e = QDP_ERROR_INIT;
    struct input shape = {in->dtype, 0, 0};
    qdp_status rc =
        job_declared_shape(in->dtype, in->rows, in->cols, "input", &shape.rows, &shape.cols, &e);
    if (rc != QDP_OK) {
      check_refusal(rc, &e, QDP_ERR_INVALID_ARGUMENT, QDP_ERR_INVALID_ARGUMENT, "declared shape");
      return;
    }
    FUZZ_CHECK(shape.rows >= 1 && shape.cols == in->cols, "declared %llu x %llu",
               (unsigned long long)shape.rows, (unsigned long long)shape.cols);
    plan_everywhere(r, &shape);
    return;
  }
  case QDP__INPUT__SOURCE_DATA:
    shaped(r, in, in->data.len, "input");
    return;
  case QDP__INPUT__SOURCE_SHM:
    /* Checked before the object is mapped (a region: once it is looked up). */
    if (in->shm) {
      shaped(r, in, in->shm->length, "input.shm");
    }
    return;
  default:
    return; /* a path: the file decides its shape (fuzz_npy covers its header) */
  }
}

/* EncodeUpload (rpc/upload.c declare, then its handler in rpc/handlers.c): the first message's
 * declared limit, then the bytes an upload could have sent within it, taken here as the length of
 * the message's own data field. */
static void upload_first(const Qdp__UploadChunk *ch) {
  if (!ch->request || !ch->request->input ||
      ch->request->input->source_case != QDP__INPUT__SOURCE__NOT_SET) {
    return;
  }
  const Qdp__Input *in = ch->request->input;
  struct qdp_error e = QDP_ERROR_INIT;
  uint64_t limit = 0;
  bool exact = false;
  qdp_status rc =
      job_upload_limit(in->dtype, in->rows, in->cols, MAX_UPLOAD_BYTES, &limit, &exact, &e);
  if (rc != QDP_OK) {
    check_refusal(rc, &e, QDP_ERR_INVALID_ARGUMENT, QDP_ERR_RESOURCE_EXHAUSTED, "upload limit");
    if (rc == QDP_ERR_RESOURCE_EXHAUSTED) {
      FUZZ_CHECK(e.need_bytes > e.free_bytes && e.free_bytes == MAX_UPLOAD_BYTES,
                 "upload refusal: %llu B of %llu B", (unsigned long long)e.need_bytes,
                 (unsigned long long)e.free_bytes);
    }
    return;
  }
  FUZZ_CHECK(limit <= MAX_UPLOAD_BYTES && (exact || limit == MAX_UPLOAD_BYTES) &&
                 (exact == (in->cols != 0)),
             "upload limit %llu, exact %d", (unsigned long long)limit, exact);
  uint64_t sent = exact ? limit : (ch->data.len < limit ? ch->data.len : limit);
  shaped(ch->request, in, sent, "request.input");
}

/* Every request message the server decodes (rpc/call.c rpc_methods). */
static const ProtobufCMessageDescriptor *const requests[] = {
    &qdp__encode_request__descriptor,   &qdp__upload_chunk__descriptor,
    &qdp__describe_request__descriptor, &qdp__list_request__descriptor,
    &qdp__state_ref__descriptor,        &qdp__fetch_request__descriptor,
    &qdp__export_request__descriptor,   &qdp__status_request__descriptor,
    &qdp__health_request__descriptor,   &qdp__register_region_request__descriptor,
    &qdp__region_ref__descriptor,       &qdp__close_view_request__descriptor,
    &qdp__gather_request__descriptor,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* Two slices, as a message may arrive in pieces: the codec must join them. */
  grpc_slice parts[2] = {
      grpc_slice_from_copied_buffer((const char *)data, size / 2),
      grpc_slice_from_copied_buffer((const char *)data + size / 2, size - size / 2)};
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(parts, 2);
  grpc_slice_unref(parts[0]);
  grpc_slice_unref(parts[1]);
  for (size_t i = 0; i < sizeof requests / sizeof requests[0]; i++) {
    ProtobufCMessage *m = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    qdp_status rc = rpc_codec_unpack(bb, requests[i], &m, &e);
    if (rc != QDP_OK) {
      /* The field is "request", or the string field that holds a NUL byte. */
      check_refusal(rc, &e, QDP_ERR_INVALID_ARGUMENT, QDP_ERR_INVALID_ARGUMENT, "unpack");
      continue;
    }
    FUZZ_CHECK(m != NULL && m->descriptor == requests[i], "unpack returned no %s",
               requests[i]->name);
    if (requests[i] == &qdp__encode_request__descriptor) {
      encode_request((const Qdp__EncodeRequest *)m);
    } else if (requests[i] == &qdp__upload_chunk__descriptor) {
      upload_first((const Qdp__UploadChunk *)m);
    }
    rpc_codec_free(m);
  }
  grpc_byte_buffer_destroy(bb);
  return 0;
}
