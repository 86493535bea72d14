/* The CPU backend: host-memory devices ("cpu:N") running the reference kernels of kernels/qdpk.h,
 * each encoding's from the CPU table (qdpk_cpu_encoder); the kernel matrix's block products
 * through a CBLAS where one is found (cpu_gram.c).
 * It is both the oracle the GPU is tested against and a real backend for machines with no GPU.
 * Memory is plain host memory, so norm_load needs no copy and a butterfly between two cpu devices
 * works on both buffers in place. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdp_size.h"
#include "qdpk.h"
#include "runtime/cpu_backend.h"

/* 64-byte alignment: a cache line, and what vector loads of complex128 pairs want. */
#define CPU_ALIGN 64

static void cpu_query(struct runtime_device *d, uint64_t *ret_total, uint64_t *ret_free) {
  uint64_t used = __atomic_load_n(&d->used_bytes, __ATOMIC_RELAXED);
  *ret_total = d->info.total_bytes;
  *ret_free = used < d->info.total_bytes ? d->info.total_bytes - used : 0;
}

static qdp_status cpu_alloc(struct runtime_device *d, uint64_t bytes, void **ret_ptr,
                            struct qdp_error *reterr) {
  void *p = NULL;
  int err = bytes > SIZE_MAX ? ENOMEM : posix_memalign(&p, CPU_ALIGN, bytes ? (size_t)bytes : 1);
  if (err != 0) {
    if (reterr) {
      reterr->need_bytes = bytes;
    }
    return qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, d->info.ordinal, err,
                            "%s: cannot allocate %s of host memory: %s", d->info.name,
                            QDP_SIZE_STR(bytes), strerror(err));
  }
  *ret_ptr = p;
  return QDP_OK;
}

static void cpu_free(struct runtime_device *d, void *ptr, uint64_t bytes) {
  (void)d;
  (void)bytes;
  free(ptr);
}

static qdp_status cpu_read(struct runtime_device *d, const void *src, uint64_t bytes, void *dst,
                           struct qdp_error *reterr) {
  (void)d;
  (void)reterr;
  memcpy(dst, src, bytes);
  return QDP_OK;
}

static qdp_status cpu_write(struct runtime_device *d, void *dst, const void *src, uint64_t bytes,
                            struct qdp_error *reterr) {
  return cpu_read(d, src, bytes, dst, reterr); /* both are host memory */
}

static qdp_status cpu_norm_load(struct runtime_device *d, struct runtime_shard_work *w,
                                struct qdp_error *reterr) {
  /* The input already is in host memory, and stays valid for the whole job. */
  (void)d;
  (void)w;
  (void)reterr;
  return QDP_OK;
}

static qdp_status cpu_norm_sumsq(struct runtime_device *d, struct runtime_shard_work *w,
                                 uint64_t offset, uint64_t len, uint64_t block,
                                 const int32_t *scale_log2, double *ret_sums,
                                 struct qdp_error *reterr) {
  (void)d;
  (void)reterr;
  const char *x = (const char *)w->x + offset * qdp_dtype_size(w->in);
  qdpk_cpu_sumsq(x, w->in, w->in_stride, len, block, w->shard->rows, w->plan->out_dtype, scale_log2,
                 ret_sums);
  return QDP_OK;
}

static struct qdpk_span span_of(const struct runtime_shard_work *w) {
  return (struct qdpk_span){.qubits = w->plan->qubits,
                            .first = w->shard->first,
                            .count = w->shard->count,
                            .rows = w->shard->rows,
                            .out = w->plan->out_dtype};
}

/* A plan whose encoding this backend has no kernel for (cpu/encoders.c lacks its row). */
static qdp_status no_kernel(const struct runtime_device *d, const struct runtime_shard_work *w,
                            struct qdp_error *reterr) {
  const char *name = qdp_encoding_name(w->plan->encoding);
  return qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1,
                          "%s: the CPU backend has no kernel for encoding %s (%d)", d->info.name,
                          name ? name : "unknown", (int)w->plan->encoding);
}

static qdp_status cpu_norm_scale(struct runtime_device *d, struct runtime_shard_work *w,
                                 const double *sumsq, const int32_t *scale_log2,
                                 struct qdp_error *reterr) {
  const struct qdpk_cpu_encoder *k = qdpk_cpu_encoder(w->plan->encoding);
  if (!k || !k->scale) {
    return no_kernel(d, w, reterr);
  }
  struct qdpk_span s = span_of(w);
  k->scale(&s, w->x, w->in, w->in_stride, w->len, sumsq, scale_log2, w->out);
  return QDP_OK;
}

static qdp_status cpu_encode(struct runtime_device *d, struct runtime_shard_work *w,
                             struct qdp_error *reterr) {
  const struct qdpk_cpu_encoder *k = qdpk_cpu_encoder(w->plan->encoding);
  if (!k || !k->encode) {
    return no_kernel(d, w, reterr);
  }
  struct qdpk_span s = span_of(w);
  switch (k->encode(&s, w->x, w->in, w->in_stride, w->out)) {
  case 0:
    return QDP_OK;
  case QDPK_IQP_NO_MEMORY:
    return qdp_error_set_at(reterr, QDP_ERR_RESOURCE_EXHAUSTED, d->info.ordinal, -1,
                            "%s: no host memory for the %s kernel's scratch", d->info.name,
                            k->name);
  default:
    return qdp_error_set_at(reterr, QDP_ERR_INTERNAL, d->info.ordinal, -1,
                            "%s: %s shard [%" PRIu64 ", +%" PRIu64
                            ") is not a power-of-two range aligned to its size",
                            d->info.name, k->name, s.first, s.count);
  }
}

static qdp_status cpu_butterfly(struct runtime_device *da, void *a, struct runtime_device *db,
                                void *b, qdp_dtype out, uint64_t count, const char **ret_how,
                                struct qdp_error *reterr) {
  (void)da;
  (void)db;
  (void)reterr;
  qdpk_cpu_butterfly(a, b, out, count);
  *ret_how = "local";
  return QDP_OK;
}

static qdp_status cpu_combine_host(struct runtime_device *d, void *mine, void *partner_host,
                                   qdp_dtype out, uint64_t count, int high,
                                   struct qdp_error *reterr) {
  (void)d;
  (void)reterr;
  /* The butterfly leaves a + b in its first operand and a - b in its second. */
  if (high) {
    qdpk_cpu_butterfly(partner_host, mine, out, count);
  } else {
    qdpk_cpu_butterfly(mine, partner_host, out, count);
  }
  return QDP_OK;
}

static void cpu_work_done(struct runtime_device *d, struct runtime_shard_work *w) {
  (void)d;
  (void)w;
}

static qdp_status cpu_export_view(struct runtime_device *d, const void *ptr,
                                  struct runtime_ipc *ret, struct qdp_error *reterr) {
  (void)ptr;
  (void)ret;
  return qdp_error_set_at(reterr, QDP_ERR_FAILED_PRECONDITION, d->info.ordinal, -1,
                          "%s is host memory, which has no CUDA IPC handle: zero-copy views "
                          "need GPUs",
                          d->info.name);
}

static qdp_status cpu_copy_rows(struct runtime_device *d, void *dst, uint64_t dst_pitch,
                                struct runtime_device *src_dev, const void *src, uint64_t src_pitch,
                                uint64_t row_bytes, uint64_t rows, struct qdp_error *reterr) {
  (void)d;
  (void)src_dev;
  (void)reterr;
  for (uint64_t r = 0; r < rows; r++) {
    memcpy((char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, row_bytes);
  }
  return QDP_OK;
}

static qdp_status cpu_real_rows(struct runtime_device *d, void *dst, uint64_t dst_pitch,
                                const void *src, uint64_t src_pitch, uint64_t width, uint64_t rows,
                                qdp_dtype dt, struct qdp_error *reterr) {
  (void)d;
  (void)reterr;
  qdpk_cpu_gram_real_rows(dst, dst_pitch, src, src_pitch, width, rows, dt);
  return QDP_OK;
}

static qdp_status cpu_gram_add(struct runtime_device *d, void *g, const void *h, uint64_t n,
                               qdp_dtype dt, bool real, struct qdp_error *reterr) {
  (void)d;
  (void)reterr;
  qdpk_cpu_gram_add(g, h, n, dt, real);
  return QDP_OK;
}

static qdp_status cpu_gram_finish(struct runtime_device *d, const void *g, uint64_t rows,
                                  uint64_t cols, qdp_dtype dt, bool real, bool overlaps, bool fill,
                                  void *scratch, void *out, void *mirror, uint64_t pitch_bytes,
                                  struct qdp_error *reterr) {
  (void)d;
  (void)scratch;
  (void)reterr;
  qdpk_cpu_gram_finish(g, rows, cols, dt, real, overlaps, fill, out, mirror, pitch_bytes);
  return QDP_OK;
}

static qdp_status cpu_measure(struct runtime_device *d, const struct qdpk_measure *m, const void *x,
                              uint64_t ld, const void *partner, uint64_t pld, uint64_t rows,
                              uint64_t first, uint64_t len, void *scratch, double *out,
                              struct qdp_error *reterr) {
  (void)d;
  (void)reterr;
  qdpk_cpu_measure(m, x, ld, partner, pld, rows, first, len, scratch, out);
  return QDP_OK;
}

static qdp_status cpu_abs2(struct runtime_device *d, const void *x, uint64_t ld, uint64_t rows,
                           uint64_t count, qdp_dtype dt, void *scratch, double *out,
                           uint64_t out_ld, struct qdp_error *reterr) {
  (void)d;
  (void)scratch;
  (void)reterr;
  qdpk_cpu_abs2(x, ld, rows, count, dt, out, out_ld);
  return QDP_OK;
}

static const struct runtime_device_ops cpu_ops = {
    .backend = "cpu",
    .iqp_top_bits = QDPK_IQP_TOP_BITS,
    .query = cpu_query,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .read = cpu_read,
    .write = cpu_write,
    .norm_load = cpu_norm_load,
    .norm_sumsq = cpu_norm_sumsq,
    .norm_scale = cpu_norm_scale,
    .encode = cpu_encode,
    .butterfly = cpu_butterfly,
    .combine_host = cpu_combine_host,
    .work_done = cpu_work_done,
    .export_view = cpu_export_view,
    .copy_rows = cpu_copy_rows,
    .gram = cpu_gram,
    .real_rows = cpu_real_rows,
    .gram_add = cpu_gram_add,
    .gram_finish = cpu_gram_finish,
    .measure = cpu_measure,
    .abs2 = cpu_abs2,
};

qdp_status runtime_cpu_devices_create(unsigned count, uint64_t bytes_each,
                                      struct runtime_device **ret_devs, struct qdp_error *reterr) {
  for (unsigned i = 0; i < count; i++) {
    struct runtime_device *d = calloc(1, sizeof *d);
    if (!d) {
      for (unsigned j = 0; j < i; j++) {
        runtime_cpu_device_destroy(ret_devs[j]);
        ret_devs[j] = NULL;
      }
      return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                           "cannot allocate the description of cpu:%u", i);
    }
    d->ops = &cpu_ops;
    snprintf(d->info.name, sizeof d->info.name, "cpu:%u", i);
    d->info.kind = RUNTIME_DEVICE_CPU;
    d->info.ordinal = (int)i;
    d->info.numa_node = -1;
    snprintf(d->info.model, sizeof d->info.model, "host memory");
    d->info.total_bytes = bytes_each;
    d->info.budget_bytes = bytes_each;
    ret_devs[i] = d;
  }
  return QDP_OK;
}

void runtime_cpu_device_destroy(struct runtime_device *d) {
  free(d);
}
