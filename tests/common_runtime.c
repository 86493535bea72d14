/* tests/common_runtime.h: the runtime's fixtures (qdp_test_runtime). */
#include "common_runtime.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct runtime_mesh *qdpt_mesh(const char *spec, uint64_t budget, uint64_t staging) {
  struct runtime_mesh_config cfg = {
      .devices = spec, .device_budget_bytes = budget, .staging_bytes = staging};
  struct runtime_mesh *m = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK_AT(runtime_mesh_create(&cfg, &m, &e), e, "mesh '%s'", spec);
  return m;
}

struct plan *qdpt_plan_try(struct runtime_mesh *m, size_t ndev, enum plan_policy policy,
                           qdp_encoding enc, uint32_t n, uint64_t batch, uint64_t cols,
                           qdp_dtype in, qdp_dtype out) {
  size_t count = runtime_mesh_count(m);
  ck_assert_uint_le(ndev, count);
  struct plan_device *devs = qdpt_xcalloc(count, sizeof *devs);
  size_t *subset = qdpt_xcalloc(count, sizeof *subset);
  runtime_mesh_plan_devices(m, 0, devs);
  for (size_t i = 0; i < ndev; i++) {
    subset[i] = i;
  }
  struct plan_world world = {.devices = devs, .count = count, .ranks = 1};
  struct plan_request req = {.encoding = enc,
                             .qubits = n,
                             .batch = batch,
                             .values_per_sample = cols,
                             .in_dtype = in,
                             .out_dtype = out,
                             .policy = policy,
                             .device_subset = ndev ? subset : NULL,
                             .device_subset_count = ndev,
                             .staging_bytes = runtime_mesh_staging_bytes(m),
                             .iqp_top_bits = runtime_mesh_iqp_top_bits(m)};
  struct plan *p = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(plan_compute(&req, &world, NULL, &p, &e), e);
  free(subset);
  free(devs);
  return p;
}

struct plan *qdpt_plan_on(struct runtime_mesh *m, size_t ndev, enum plan_policy policy,
                          qdp_encoding enc, uint32_t n, uint64_t batch, uint64_t cols, qdp_dtype in,
                          qdp_dtype out) {
  struct plan *p = qdpt_plan_try(m, ndev, policy, enc, n, batch, cols, in, out);
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(plan_check_feasible(p, &e), e);
  return p;
}

struct runtime_state *qdpt_encode(struct runtime_mesh *m, const struct plan *p,
                                  const struct runtime_input *in) {
  struct runtime_state *s = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK_AT(runtime_encode(m, p, in, &s, &e), e, "%s backend", runtime_mesh_backend(m));
  return s;
}

struct runtime_state *qdpt_encode_f64(struct runtime_mesh *m, size_t ndev, enum plan_policy policy,
                                      qdp_encoding enc, uint32_t n, uint64_t batch, uint64_t cols,
                                      const double *x, qdp_dtype out) {
  struct plan *p = qdpt_plan_on(m, ndev, policy, enc, n, batch, cols, QDP_DTYPE_FLOAT64, out);
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = batch, .cols = cols};
  struct runtime_state *s = qdpt_encode(m, p, &in);
  plan_destroy(p);
  return s;
}

void *qdpt_read_all(struct runtime_state *s) {
  const struct plan *p = runtime_state_plan(s);
  uint64_t n = p->batch * p->amplitudes;
  size_t bytes = (size_t)(n * qdp_dtype_size(p->out_dtype));
  void *buf = qdpt_xmalloc(bytes);
  memset(buf, 0xA5, bytes); /* poison: every value must be written */
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_state_read(s, 0, n, buf, &e), e);
  return buf;
}

void *qdpt_encode_read(struct runtime_mesh *m, const struct plan *p,
                       const struct runtime_input *in) {
  struct runtime_state *s = qdpt_encode(m, p, in);
  void *buf = qdpt_read_all(s);
  runtime_state_destroy(s);
  return buf;
}

uint64_t qdpt_used_on(struct runtime_mesh *m, size_t i) {
  struct runtime_device_info info;
  runtime_mesh_device_info(m, i, &info);
  return info.used_bytes;
}

void qdpt_check_gather(struct runtime_mesh *m, struct runtime_state *s, const char *what,
                       bool layout) {
  const struct plan *p = runtime_state_plan(s);
  uint64_t n = p->batch * p->amplitudes;
  size_t bytes = (size_t)(n * qdp_dtype_size(p->out_dtype));
  unsigned char *want = qdpt_xmalloc(bytes), *got = qdpt_xmalloc(bytes);
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_state_read(s, 0, n, want, &e), e);
  for (size_t d = 0; d < runtime_mesh_count(m); d++) {
    uint64_t before = qdpt_used_on(m, d);
    struct runtime_state *g = NULL;
    CK_OK_AT(runtime_state_gather(m, s, d, &g, &e), e, "onto device %zu", d);
    ck_assert_uint_eq(qdpt_used_on(m, d), before + p->total_bytes);
    if (layout) {
      const struct plan *gp = runtime_state_plan(g);
      ck_assert_uint_eq(gp->nshards, 1);
      ck_assert_uint_eq(gp->batch, p->batch);
      ck_assert_uint_eq(gp->qubits, p->qubits);
      struct runtime_shard_layout l;
      runtime_state_shard_layout(g, 0, &l);
      ck_assert_uint_eq(l.device, d);
      ck_assert_uint_eq(l.count, p->amplitudes);
      ck_assert_uint_eq(l.rows, p->batch);
      ck_assert_uint_eq(l.bytes, p->total_bytes);
      ck_assert_uint_eq(runtime_state_bytes(g), p->total_bytes);
    }
    memset(got, 0xA5, bytes); /* poison: every value must come from the copy */
    CK_OK_AT(runtime_state_read(g, 0, n, got, &e), e, "the copy on device %zu", d);
    int same = memcmp(got, want, bytes) == 0;
    if (what) {
      printf("%s gather of %s (%zu shards, %zu B) onto device %zu\n", same ? "ok  " : "FAIL", what,
             p->nshards, bytes, d);
    }
    ck_assert_msg(same, "gather of %s onto device %zu differs", what ? what : "the state", d);
    runtime_state_destroy(g);
    ck_assert_uint_eq(qdpt_used_on(m, d), before);
  }
  free(want);
  free(got);
}

void qdpt_assert_mesh_idle(struct runtime_mesh *m, const char *what) {
  for (size_t i = 0; i < runtime_mesh_count(m); i++) {
    struct runtime_device_info info;
    runtime_mesh_device_info(m, i, &info);
    ck_assert_msg(info.used_bytes == 0, "%s: %s still holds %" PRIu64 " B", what, info.name,
                  info.used_bytes);
  }
}
