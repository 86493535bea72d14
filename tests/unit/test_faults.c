/* The allocation-failure sweep of the encode/store path on the CPU backend, as curl's torture
 * mode: an operation is run again and again, failing its first allocation, then its second, and
 * so on until it succeeds with nothing failed. Every run must end in success or in
 * RESOURCE_EXHAUSTED with a message (never a crash, never a silently different state), and must
 * leave nothing behind: no allocation made during it still live, no bytes reserved on a device or
 * in the store.
 *
 * The allocator is wrapped at link time (alloc_shim.h): the daemon's libraries linked into this
 * program fail the one call a run was told to. pthread_create is counted as well: the executor
 * must then run the shard on the calling thread. */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_shim.h"
#include "common_runtime.h"
#include "state/store.h"

#define GIB (UINT64_C(1) << 30)

/* ---- the mesh ---- */

static qdp_status op_mesh(void *arg, struct qdp_error *e) {
  (void)arg;
  struct runtime_mesh_config cfg = {.devices = "cpu:4", .device_budget_bytes = GIB};
  struct runtime_mesh *m = NULL;
  qdp_status rc = runtime_mesh_create(&cfg, &m, e);
  if (rc == QDP_OK) {
    struct plan_device devs[4];
    runtime_mesh_plan_devices(m, 0, devs);
  }
  runtime_mesh_destroy(m);
  return rc;
}

START_TEST(test_mesh_create_survives_every_allocation_failure) {
  ck_assert_uint_gt(shim_sweep("runtime_mesh_create cpu:4", op_mesh, NULL, NULL), 0);
}
END_TEST

/* ---- the store on its own: create, admit, commit, get, put, lease, release, destroy ---- */

static void payload_free(void *p) {
  free(p);
}

static qdp_status op_store(void *arg, struct qdp_error *e) {
  (void)arg;
  struct state_store_limits lim = {.budget_bytes = GIB, .client_budget_bytes = GIB};
  struct state_store *s = NULL;
  struct state_reservation *r = NULL;
  void *payload = NULL, *got = NULL;
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  uint64_t lease = 0;
  qdp_status rc = QDP_OK;
  QDP_TRY(rc, state_store_create(&lim, &s, e));
  QDP_TRY(rc, state_store_admit(s, "uid:1000", 4096, &r, e));
  payload = malloc(64);
  if (!payload) {
    rc = qdp_error_set(e, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for the payload");
    goto out;
  }
  rc = state_store_commit(s, r, payload, payload_free, 0, "label", handle, token, e);
  r = NULL; /* consumed either way */
  if (rc != QDP_OK) {
    goto out;
  }
  payload = NULL; /* the store's now */
  struct state_meta meta;
  QDP_TRY(rc, state_store_get(s, handle, token, &got, &meta, e));
  rc = state_store_lease_open(s, got, "uid:1000", 0, -1, false, &lease, e);
  state_store_put(s, got);
  if (rc != QDP_OK) {
    goto out;
  }
  QDP_TRY(rc, state_store_release(s, handle, token, NULL, e));
  QDP_TRY(rc, state_store_lease_close(s, handle, token, lease, NULL, e));
out:
  state_reservation_cancel(r);
  free(payload);
  state_store_destroy(s);
  return rc;
}

START_TEST(test_store_survives_every_allocation_failure) {
  ck_assert_uint_gt(shim_sweep("state store round trip", op_store, NULL, NULL), 0);
}
END_TEST

/* ---- one job end to end on a mesh and store made beforehand ---- */

struct job_spec {
  const char *name;
  qdp_encoding enc;
  uint32_t qubits;
  uint64_t rows, cols;
  qdp_dtype in, out;
  enum plan_policy policy;
  size_t ndev; /* the first ndev devices of the mesh; 0 = all */
};

struct job {
  const struct job_spec *spec;
  struct runtime_mesh *mesh;
  struct state_store *store;
  const void *values;
  void *got;            /* the state read back */
  const void *expected; /* the state as encoded with nothing failing */
  size_t state_bytes;
};

static void state_destroy(void *p) {
  runtime_state_destroy(p);
}

static qdp_status op_job(void *arg, struct qdp_error *e) {
  struct job *j = arg;
  const struct job_spec *js = j->spec;
  struct plan_device devs[8];
  size_t subset[8];
  struct plan *p = NULL;
  struct state_reservation *r = NULL;
  struct runtime_state *st = NULL;
  void *payload = NULL;
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  qdp_status rc = QDP_OK;

  size_t n = runtime_mesh_count(j->mesh);
  runtime_mesh_plan_devices(j->mesh, 0, devs);
  for (size_t i = 0; i < n; i++) {
    subset[i] = i;
  }
  struct plan_world world = {
      .devices = devs, .count = n, .ranks = 1, .link_cost = runtime_mesh_link_costs(j->mesh)};
  struct plan_request req = {.encoding = js->enc,
                             .qubits = js->qubits,
                             .batch = js->rows,
                             .values_per_sample = js->cols,
                             .in_dtype = js->in,
                             .out_dtype = js->out,
                             .policy = js->policy,
                             .device_subset = js->ndev ? subset : NULL,
                             .device_subset_count = js->ndev,
                             .staging_bytes = runtime_mesh_staging_bytes(j->mesh),
                             .iqp_top_bits = runtime_mesh_iqp_top_bits(j->mesh)};
  struct runtime_input in = {
      .data = j->values, .dtype = js->in, .rows = js->rows, .cols = js->cols};
  QDP_TRY(rc, plan_compute(&req, &world, NULL, &p, e));
  QDP_TRY(rc, plan_check_feasible(p, e));
  QDP_TRY(rc, state_store_admit(j->store, "uid:1000", p->total_bytes, &r, e));
  QDP_TRY(rc, runtime_encode(j->mesh, p, &in, &st, e));
  rc = state_store_commit(j->store, r, st, state_destroy, 0, NULL, handle, token, e);
  r = NULL;
  if (rc != QDP_OK) {
    goto out;
  }
  st = NULL;
  QDP_TRY(rc, state_store_get(j->store, handle, token, &payload, NULL, e));
  memset(j->got, 0xA5, j->state_bytes);
  rc = runtime_state_read(payload, 0, p->batch * p->amplitudes, j->got, e);
  state_store_put(j->store, payload);
  if (rc != QDP_OK) {
    goto out;
  }
  QDP_TRY(rc, state_store_release(j->store, handle, token, NULL, e));
out:
  runtime_state_destroy(st);
  state_reservation_cancel(r);
  plan_destroy(p);
  return rc;
}

/* Whatever the run did, nothing stays reserved or stored; a run that succeeded read back the
 * same bits as one with nothing failing. */
static void check_job(void *arg, qdp_status rc) {
  struct job *j = arg;
  const char *name = j->spec->name;
  qdpt_assert_mesh_idle(j->mesh, name);
  uint64_t bytes = 1;
  uint32_t states = 1;
  state_store_usage(j->store, &bytes, &states, NULL);
  ck_assert_msg(bytes == 0 && states == 0, "%s: the store still holds %llu B in %u states", name,
                (unsigned long long)bytes, states);
  if (rc == QDP_OK && j->expected) {
    ck_assert_msg(memcmp(j->got, j->expected, j->state_bytes) == 0,
                  "%s: a run that succeeded read back other bits", name);
  }
}

static const struct job_spec jobs[] = {
    {"amplitude single", QDP_ENCODING_AMPLITUDE, 6, 1, 40, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128,
     PLAN_SINGLE, 0},
    {"amplitude even over 4", QDP_ENCODING_AMPLITUDE, 12, 1, 3000, QDP_DTYPE_FLOAT64,
     QDP_DTYPE_COMPLEX128, PLAN_EVEN, 4},
    {"amplitude batch of 5 over 4", QDP_ENCODING_AMPLITUDE, 5, 5, 32, QDP_DTYPE_FLOAT32,
     QDP_DTYPE_COMPLEX64, PLAN_BATCH, 0},
    {"angle even over 2", QDP_ENCODING_ANGLE, 6, 1, 6, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128,
     PLAN_EVEN, 2},
    {"basis batch of 3", QDP_ENCODING_BASIS, 4, 3, 1, QDP_DTYPE_INT64, QDP_DTYPE_COMPLEX128,
     PLAN_BATCH, 0},
    {"iqp even over 4", QDP_ENCODING_IQP, 6, 1, 6 + 15, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128,
     PLAN_EVEN, 4},
    {"iqp-z even over 2", QDP_ENCODING_IQP_Z, 5, 1, 5, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX64,
     PLAN_EVEN, 2},
    {"angle uneven over 3", QDP_ENCODING_ANGLE, 5, 1, 5, QDP_DTYPE_FLOAT32, QDP_DTYPE_COMPLEX64,
     PLAN_UNEVEN, 3},
    {"phase capacity over 4", QDP_ENCODING_PHASE, 7, 1, 7, QDP_DTYPE_FLOAT64, QDP_DTYPE_COMPLEX128,
     PLAN_CAPACITY, 4},
};

START_TEST(test_job_survives_every_allocation_failure) {
  const struct job_spec *js = &jobs[_i];
  struct job j = {.spec = js, .mesh = qdpt_mesh("cpu:4", GIB, 0)};
  struct state_store_limits lim = {.budget_bytes = 4 * GIB};
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(state_store_create(&lim, &j.store, &e), e);
  size_t nvalues = (size_t)(js->rows * js->cols);
  unsigned es = qdp_dtype_size(js->in);
  unsigned char *values = malloc(nvalues * es);
  ck_assert_ptr_nonnull(values);
  for (size_t i = 0; i < nvalues; i++) {
    if (js->in == QDP_DTYPE_INT64) {
      int64_t v = (int64_t)((i * 7 + 3) % (UINT64_C(1) << js->qubits));
      memcpy(values + i * es, &v, es);
    } else if (js->in == QDP_DTYPE_FLOAT32) {
      float v = (float)(i % 17) / 8.0f - 1.0f + 0.01f;
      memcpy(values + i * es, &v, es);
    } else {
      double v = (double)(i % 23) / 8.0 - 1.0 + 0.01;
      memcpy(values + i * es, &v, es);
    }
  }
  j.values = values;
  j.state_bytes = (size_t)(js->rows << js->qubits) * qdp_dtype_size(js->out);
  j.got = malloc(j.state_bytes);
  void *expected = malloc(j.state_bytes);
  ck_assert_ptr_nonnull(j.got);
  ck_assert_ptr_nonnull(expected);
  /* The reference: the same job with nothing failing. */
  e = (struct qdp_error)QDP_ERROR_INIT;
  CK_OK_AT(op_job(&j, &e), e, "%s", js->name);
  memcpy(expected, j.got, j.state_bytes);
  j.expected = expected;
  unsigned long calls = shim_sweep(js->name, op_job, check_job, &j);
  ck_assert_msg(calls > 0, "%s: no allocation was counted", js->name);
  free(expected);
  free(j.got);
  free(values);
  state_store_destroy(j.store);
  runtime_mesh_destroy(j.mesh);
}
END_TEST

static Suite *faults_suite(void) {
  Suite *s = suite_create("faults");
  TCase *tc = tcase_create("runtime_mesh_create");
  tcase_add_test(tc, test_mesh_create_survives_every_allocation_failure);
  suite_add_tcase(s, tc);
  tc = tcase_create("state_store");
  tcase_add_test(tc, test_store_survives_every_allocation_failure);
  suite_add_tcase(s, tc);
  tc = tcase_create("encode_job");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_job_survives_every_allocation_failure, 0,
                      (int)(sizeof jobs / sizeof jobs[0]));
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(faults_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
