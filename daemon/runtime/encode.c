/* The executor (encode.h): one encode job on the mesh (runtime.h), in the order docs/design.md
 * gives — check the values, reserve and allocate every local shard, ingest, reduce the norm along
 * its fixed tree, encode, run the global-bit Walsh-Hadamard stages between shard pairs — and
 * reading states back. Shards of one job run concurrently on the mesh's workers
 * (runtime/workers.h); a job with one shard runs on the caller's thread. */
#include "runtime/encode.h"

static int plan_copy(const struct plan *src, struct plan *dst) {
  *dst = *src;
  dst->shards = malloc(src->nshards * sizeof *dst->shards);
  dst->needs = malloc((src->nneeds ? src->nneeds : 1) * sizeof *dst->needs);
  if (!dst->shards || !dst->needs) {
    free(dst->shards);
    free(dst->needs);
    return -1;
  }
  memcpy(dst->shards, src->shards, src->nshards * sizeof *dst->shards);
  memcpy(dst->needs, src->needs, src->nneeds * sizeof *dst->needs);
  return 0;
}

/* A closed form's parameters the output precision cannot take (qdpk_cpu_check_params), as an
 * error naming the sample, the value and what to ask for instead. */
static qdp_status bad_params(const struct plan *p, const struct runtime_input *in,
                             enum qdpk_param_fault f, uint64_t row, uint64_t col, double sum,
                             struct qdp_error *reterr) {
  const char *what = qdp_encoding_desc(p->encoding)->noun;
  int single = p->out_dtype == QDP_DTYPE_COMPLEX64;
  switch (f) {
  case QDPK_PARAM_NOT_FINITE:
    return encode_bad_value(reterr, what, row, col, encode_value_at(in, row * in->cols + col));
  case QDPK_PARAM_NOT_FLOAT32:
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input",
                         "input sample %" PRIu64 " value %" PRIu64
                         " is %g, which does not fit float32 (largest %g), the precision "
                         "complex64 output is computed in: ask for complex128 output",
                         row, col, encode_value_at(in, row * in->cols + col), (double)FLT_MAX);
  default:
    return qdp_error_set(
        reterr, QDP_ERR_INVALID_ARGUMENT, "input",
        "input sample %" PRIu64
        " has %s whose magnitudes sum to %g: theta(z), "
        "summed in %s, could overflow (its bound is %g); %s",
        row, what, sum,
        single ? "float32 (the precision complex64 output is computed in)" : "float64",
        qdpk_param_sum_limit(p->out_dtype),
        single ? "ask for complex128 output" : "scale the coefficients down");
  }
}

static qdp_status check_values(const struct plan *p, const struct runtime_input *in,
                               struct qdp_error *reterr) {
  uint64_t index = 0;
  const enum qdp_check check = qdp_encoding_desc(p->encoding)->check;
  switch (check) {
  case QDP_CHECK_FINITE:
  case QDP_CHECK_FINITE_SUM: {
    /* A window holds whole rows (the parameters of a sample are never split). Only iqp's theta
     * sums the values; angle and phase multiply per-qubit factors of magnitude at most 1. */
    uint64_t row = 0, col = 0;
    double sum = 0;
    int summed = check == QDP_CHECK_FINITE_SUM;
    enum qdpk_param_fault f = qdpk_cpu_check_params(in->data, in->dtype, in->cols, in->cols,
                                                    encode_input_count(in) / in->cols, p->out_dtype,
                                                    summed, &row, &col, &sum);
    return f == QDPK_PARAM_OK
               ? QDP_OK
               : bad_params(p, in, f, row + encode_input_first(in) / in->cols, col, sum, reterr);
  }
  case QDP_CHECK_INDEX: {
    /* Basis input is whole rows (one index each), so a window is whole rows too. */
    enum qdpk_basis_fault f = qdpk_cpu_check_basis(
        in->data, in->dtype, in->cols, encode_input_count(in) / in->cols, p->qubits, &index);
    if (f == QDPK_BASIS_OK) {
      return QDP_OK;
    }
    index += encode_input_first(in) / in->cols;
    double v = encode_value_at(in, index * in->cols);
    static const char *const why[] = {
        [QDPK_BASIS_NOT_FINITE] = "is not finite",
        [QDPK_BASIS_NOT_INTEGER] = "is not an integer",
        [QDPK_BASIS_NEGATIVE] = "is negative",
        [QDPK_BASIS_TOO_LARGE] = "is not below 2^qubits",
    };
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "input",
                         "basis index %.17g of sample %" PRIu64
                         " %s (qubits %u: valid indices are "
                         "0..%" PRIu64 ")",
                         v, index, why[f], p->qubits, (UINT64_C(1) << p->qubits) - 1);
  }
  default:
    return QDP_OK;
  }
}

/* check_values on the host: a device input's parameters (batch x values per sample, far smaller
 * than the state) are copied there for it; the input of an encoding with no check here
 * (amplitude) is never read here, its checks run on the devices' sums. */
static qdp_status check_input_values(struct runtime_mesh *m, const struct plan *p,
                                     const struct runtime_input *in, struct qdp_error *reterr) {
  if (!in->on_device || qdp_encoding_desc(p->encoding)->check == QDP_CHECK_NONE) {
    return check_values(p, in, reterr);
  }
  uint64_t bytes = in->rows * in->cols * qdp_dtype_size(in->dtype);
  void *host = malloc(bytes ? (size_t)bytes : 1);
  if (!host) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, "input",
                         "no host memory to check %" PRIu64 " B of parameters", bytes);
  }
  struct runtime_device *d = m->devs[in->device];
  qdp_status rc = d->ops->read(d, in->data, bytes, host, reterr);
  if (rc == QDP_OK) {
    struct runtime_input h = *in;
    h.data = host;
    h.on_device = false;
    rc = check_values(p, &h, reterr);
  }
  free(host);
  return rc;
}

/* A device input is this rank's only, on a device of its mesh: its pointer means nothing to
 * another rank's process (job/ refuses such placements first). */
static qdp_status check_device_input(const struct runtime_mesh *m, const struct plan *p,
                                     const struct runtime_input *in, struct qdp_error *reterr) {
  if (!in->on_device) {
    return QDP_OK;
  }
  if (in->device >= m->count || !m->devs[in->device]->ops->open_ipc || in->windowed) {
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "input.cuda_ipc",
                         "a device input needs a GPU of this mesh (%s:%zu)", m->backend, m->count);
  }
  for (size_t i = 0; i < p->nshards; i++) {
    if (p->shards[i].rank != m->rank) {
      return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "placement",
                           "the tensor is on this node only, but shard %zu is on rank %d", i,
                           p->shards[i].rank);
    }
  }
  return QDP_OK;
}

static qdp_status check_input_shape(const struct plan *p, const struct runtime_input *in,
                                    struct qdp_error *reterr) {
  if (in->rows != p->batch || in->dtype != p->in_dtype || in->cols == 0 ||
      (qdp_encoding_desc(p->encoding)->layout == QDP_LAYOUT_AMPLITUDES
           ? in->cols > p->amplitudes
           : in->cols != qdp_values_per_sample(p->encoding, p->qubits))) {
    return qdp_error_set(
        reterr, QDP_ERR_INVALID_ARGUMENT, "input",
        "input of %" PRIu64 " x %" PRIu64
        " %s values does not match the plan "
        "(%" PRIu64 " samples of %u qubits, %s input)",
        in->rows, in->cols, qdp_dtype_name(in->dtype) ? qdp_dtype_name(in->dtype) : "?", p->batch,
        p->qubits, qdp_dtype_name(p->in_dtype) ? qdp_dtype_name(p->in_dtype) : "?");
  }
  return QDP_OK;
}

/* The output of runtime_encode_into: one shard on this rank, on out's device, that fits out and
 * may be stored at its address (kernels store whole complex values, and a misaligned store
 * faults the device's context for every job). */
static qdp_status check_output(const struct runtime_mesh *m, const struct plan *p,
                               const struct runtime_output *out, struct qdp_error *reterr) {
  if (!out) {
    return QDP_OK;
  }
  const struct plan_shard *sh = &p->shards[0];
  if (p->nshards != 1 || sh->rank != m->rank || sh->device != out->device) {
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "placement",
                         "an encode into an allocation of device %zu needs one shard there, but "
                         "the plan has %zu, the first on rank %d device %zu",
                         out->device, p->nshards, sh->rank, sh->device);
  }
  if (out->bytes < p->total_bytes) {
    qdp_status rc =
        qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "out.bytes",
                      "the state needs %" PRIu64 " B but the output holds %" PRIu64 " B",
                      p->total_bytes, out->bytes);
    if (reterr) {
      reterr->need_bytes = p->total_bytes;
      reterr->free_bytes = out->bytes;
    }
    return rc;
  }
  unsigned esize = qdp_dtype_size(p->out_dtype);
  if ((uintptr_t)out->data % esize != 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "out.offset",
                         "the output at %p is not aligned to its %u B amplitudes", out->data,
                         esize);
  }
  return QDP_OK;
}

/* A plan that splits a sample of a WHT exchange (iqp) was made for devices that transform its top
 * iqp_top_bits bits alone; a device of this rank that takes another number would give another
 * state (and skip or repeat stages): refused, whichever rank planned it. */
static qdp_status check_iqp_top_bits(const struct runtime_mesh *m, const struct plan *p,
                                     struct qdp_error *reterr) {
  if (qdp_encoding_desc(p->encoding)->exchange != QDP_EXCHANGE_WHT ||
      p->shards[0].count == p->amplitudes) {
    return QDP_OK;
  }
  for (size_t i = 0; i < p->nshards; i++) {
    if (p->shards[i].rank != m->rank) {
      continue;
    }
    const struct runtime_device *d = m->devs[p->shards[i].device];
    uint32_t top = d->ops->iqp_top_bits < p->qubits ? d->ops->iqp_top_bits : p->qubits;
    if (top != p->iqp_top_bits) {
      return qdp_error_set_at(reterr, QDP_ERR_FAILED_PRECONDITION, d->info.ordinal, -1,
                              "%s transforms the top %u bits of an %s state alone, but the plan "
                              "was made for devices that take %u: the world's devices must be of "
                              "one backend to share an iqp state",
                              d->info.name, top, qdp_encoding_name(p->encoding), p->iqp_top_bits);
    }
  }
  return QDP_OK;
}

static void state_free_buffers(struct runtime_state *st) {
  for (size_t i = 0; !st->external && st->bufs && i < st->plan.nshards; i++) {
    if (st->bufs[i]) {
      struct runtime_device *d = st->mesh->devs[st->plan.shards[i].device];
      d->ops->free(d, st->bufs[i], st->plan.shards[i].bytes);
      runtime_device_unreserve(d, st->plan.shards[i].bytes);
    }
  }
  free(st->bufs);
  st->bufs = NULL;
}

void runtime_state_destroy(struct runtime_state *s) {
  if (!s) {
    return;
  }
  if (s->world_job && s->mesh->world_ops) {
    s->mesh->world_ops->release(s->mesh->world_ctx, s->world_job, &s->plan);
  }
  state_free_buffers(s);
  free(s->plan.shards);
  free(s->plan.needs);
  free(s);
}

/* Reserves and allocates one shard on its device; st->bytes counts what it holds. */
static qdp_status alloc_shard(struct runtime_state *st, size_t i, struct qdp_error *reterr) {
  const struct plan_shard *sh = &st->plan.shards[i];
  struct runtime_device *d = st->mesh->devs[sh->device];
  qdp_status rc = runtime_device_reserve(d, sh->bytes, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  rc = d->ops->alloc(d, sh->bytes, &st->bufs[i], reterr);
  if (rc != QDP_OK) {
    runtime_device_unreserve(d, sh->bytes);
    return rc;
  }
  st->bytes += sh->bytes;
  return QDP_OK;
}

/* Gives every local shard of st its memory before any work starts, each with its task (*ret_n of
 * them in t): out's when there is one (check_output proved it is the only shard), else reserved
 * and allocated on its device. */
static qdp_status take_shards(struct runtime_state *st, const struct runtime_input *in,
                              const struct runtime_output *out, struct shard_task *t, size_t *ret_n,
                              struct qdp_error *reterr) {
  struct runtime_mesh *m = st->mesh;
  qdp_status rc = QDP_OK;
  for (size_t i = 0; i < st->plan.nshards; i++) {
    const struct plan_shard *sh = &st->plan.shards[i];
    if (sh->rank != m->rank) {
      continue;
    }
    struct runtime_device *d = m->devs[sh->device];
    if (out) {
      st->bufs[i] = out->data;
      st->external = true;
    } else {
      QDP_TRY(rc, alloc_shard(st, i, reterr));
    }
    struct shard_task *k = &t[(*ret_n)++];
    k->st = st;
    k->index = i;
    k->dev = d;
    k->err = (struct qdp_error)QDP_ERROR_INIT;
    k->work = (struct runtime_shard_work){.plan = &st->plan,
                                          .shard = sh,
                                          .out = st->bufs[i],
                                          .in = in->dtype,
                                          .in_stride = in->cols,
                                          .pinned = in->pinned || in->on_device,
                                          .x_on_device = in->on_device && in->device == sh->device,
                                          .x_host = !in->on_device};
    uint64_t row0 = sh->row_first * in->cols;
    if (qdp_encoding_desc(st->plan.encoding)->layout == QDP_LAYOUT_AMPLITUDES) {
      k->work.len = encode_shard_len(sh, in->cols);
      k->work.x = k->work.len ? encode_input_at(in, row0 + sh->first) : in->data;
    } else {
      k->work.x = encode_input_at(in, row0);
    }
  }
out:
  return rc;
}

/* The job's work on its n local shards, as its encoding's row says: a NORM reduction's norm and
 * scale pass, or the encoding's kernel and, for a sharded state of a WHT exchange, its global-bit
 * stages. */
static qdp_status run_phases(struct runtime_state *st, struct shard_task *t, size_t n,
                             const struct runtime_input *in, struct qdp_error *reterr) {
  const struct qdp_encoding_desc *e = qdp_encoding_desc(st->plan.encoding);
  if (e->reduction == QDP_REDUCTION_NORM) {
    return encode_run_norm(st, t, n, in, reterr);
  }
  runtime_workers_run(st->mesh->workers, t, n, sizeof *t, encode_task_encode);
  qdp_status rc = encode_first_failure(t, n, reterr);
  uint32_t stages = 0;
  if (e->exchange == QDP_EXCHANGE_WHT) {
    /* The devices' encode took the state's top bits; the global bits below them exchange. */
    uint32_t g = st->plan.global_bits, top = st->plan.iqp_top_bits;
    stages = g > top ? g - top : 0;
  }
  uint64_t t0 = clock_mono_ns();
  if (stages && encode_spans_ranks(&st->plan)) {
    rc = encode_agree_before("the global-bit exchange", st->mesh,
                             encode_job_group(st->mesh, &st->plan), rc, reterr);
  }
  if (rc == QDP_OK && stages) {
    rc = encode_run_global_stages(st, t, n, stages, reterr);
    st->exchange_us = (double)(clock_mono_ns() - t0) / CLOCK_NS_PER_US;
  }
  return rc;
}

qdp_status runtime_encode(struct runtime_mesh *m, const struct plan *p,
                          const struct runtime_input *in, struct runtime_state **ret_state,
                          struct qdp_error *reterr) {
  return runtime_encode_into(m, p, in, NULL, ret_state, reterr);
}

qdp_status runtime_encode_into(struct runtime_mesh *m, const struct plan *p,
                               const struct runtime_input *in, const struct runtime_output *out,
                               struct runtime_state **ret_state, struct qdp_error *reterr) {
  uint64_t t0 = clock_mono_ns();
  qdp_status rc = QDP_OK;
  struct runtime_state *st = NULL;
  struct shard_task *t = NULL;
  size_t n = 0;

  if (!p->feasible || p->nshards == 0) {
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, NULL,
                         "the plan is not feasible; nothing was encoded");
  }
  if (!qdp_encoding_desc(p->encoding)) {
    return qdp_error_set(reterr, QDP_ERR_INTERNAL, "encoding",
                         "the plan's encoding %d is unknown to this daemon", (int)p->encoding);
  }
  for (size_t i = 0; i < p->nshards; i++) {
    if (p->shards[i].rank == m->rank && p->shards[i].device >= m->count) {
      return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                           "shard %zu names device %zu but the mesh has %zu", i,
                           p->shards[i].device, m->count);
    }
  }
  QDP_TRY(rc, check_input_shape(p, in, reterr));
  QDP_TRY(rc, check_device_input(m, p, in, reterr));
  QDP_TRY(rc, check_output(m, p, out, reterr));
  QDP_TRY(rc, check_iqp_top_bits(m, p, reterr));
  QDP_TRY(rc, check_input_values(m, p, in, reterr));

  st = calloc(1, sizeof *st);
  if (!st || plan_copy(p, &st->plan) != 0) {
    free(st);
    st = NULL;
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate the state");
    goto out;
  }
  st->mesh = m;
  st->collective = "none";
  st->bufs = calloc(p->nshards, sizeof *st->bufs);
  t = calloc(p->nshards, sizeof *t);
  if (!st->bufs || !t) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "cannot allocate the shard table");
    goto out;
  }

  QDP_TRY(rc, take_shards(st, in, out, t, &n, reterr));
  rc = run_phases(st, t, n, in, reterr);
  if (rc != QDP_OK) {
    goto out;
  }
  st->encode_ms = (double)(clock_mono_ns() - t0) / CLOCK_NS_PER_MS;
  *ret_state = st;
  st = NULL;
out:
  for (size_t i = 0; i < n; i++) {
    if (t[i].loaded || t[i].work.scratch) {
      t[i].dev->ops->work_done(t[i].dev, &t[i].work);
    }
  }
  free(t);
  runtime_state_destroy(st);
  return rc;
}

void runtime_state_set_world_job(struct runtime_state *s, uint64_t job) {
  s->world_job = job;
}

const struct plan *runtime_state_plan(const struct runtime_state *s) {
  return &s->plan;
}

const char *runtime_state_collective(const struct runtime_state *s) {
  return s->collective;
}

uint64_t runtime_state_bytes(const struct runtime_state *s) {
  return s->bytes;
}

double runtime_state_encode_ms(const struct runtime_state *s) {
  return s->encode_ms;
}

double runtime_state_norm_us(const struct runtime_state *s) {
  return s->norm_us;
}

double runtime_state_collective_ms(const struct runtime_state *s) {
  return (s->norm_us + s->exchange_us) / 1e3;
}

void runtime_state_mark_written(struct runtime_state *s) {
  s->written = true;
}

bool runtime_state_written(const struct runtime_state *s) {
  return s->written;
}

qdp_status runtime_state_read(struct runtime_state *s, uint64_t offset, uint64_t count, void *dst,
                              struct qdp_error *reterr) {
  const struct plan *p = &s->plan;
  uint64_t total = p->batch * p->amplitudes; /* the planner proved this does not overflow */
  if (offset > total || count > total - offset) {
    return qdp_error_set(reterr, QDP_ERR_OUT_OF_RANGE, "offset",
                         "amplitudes [%" PRIu64 ", %" PRIu64 ") are outside the state's %" PRIu64,
                         offset, offset + count, total);
  }
  unsigned esize = qdp_dtype_size(p->out_dtype);
  char *out = dst;
  while (count > 0) {
    uint64_t row = offset >> p->qubits, idx = offset & (p->amplitudes - 1);
    size_t i = 0;
    while (i < p->nshards &&
           !(row >= p->shards[i].row_first && row - p->shards[i].row_first < p->shards[i].rows &&
             idx >= p->shards[i].first && idx - p->shards[i].first < p->shards[i].count)) {
      i++;
    }
    const struct plan_shard *sh = i < p->nshards ? &p->shards[i] : NULL;
    uint64_t run = sh ? sh->first + sh->count - idx : 0;
    run = run < count ? run : count;
    if (sh && !s->bufs[i] && sh->rank != s->mesh->rank && s->world_job && s->mesh->world_ops) {
      qdp_status rc = s->mesh->world_ops->read(s->mesh->world_ctx, sh->rank, s->world_job, offset,
                                               run, out, run * esize, reterr);
      if (rc != QDP_OK) {
        return rc;
      }
      out += run * esize;
      offset += run;
      count -= run;
      continue;
    }
    if (!sh || !s->bufs[i]) {
      return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                           "amplitude %" PRIu64 " is in no local shard", offset);
    }
    uint64_t at = ((row - sh->row_first) * sh->count + (idx - sh->first)) * esize;
    struct runtime_device *d = s->mesh->devs[sh->device];
    qdp_status rc = d->ops->read(d, (const char *)s->bufs[i] + at, run * esize, out, reterr);
    if (rc != QDP_OK) {
      return rc;
    }
    out += run * esize;
    offset += run;
    count -= run;
  }
  return QDP_OK;
}
