/* job_fixture.c — the helpers of job_fixture.h. */
#include <check.h>
#include <stdbool.h>
#include <string.h>

#include "common.h"
#include "job_fixture.h"

struct fixture fx;

static void setup_with(uint64_t client_budget) {
  struct qdp_error e = QDP_ERROR_INIT;
  struct runtime_mesh_config mc = {.devices = "cpu:2", .device_budget_bytes = 64 * MIB};
  CK_OK(runtime_mesh_create(&mc, &fx.mesh, &e), e);
  ck_assert_int_eq(world_create(false, NULL, NULL, &fx.world, &e), QDP_OK);
  ck_assert_int_eq(world_start(fx.world, QDP_OK, NULL, fx.mesh, 1000, false, &e), QDP_OK);
  struct state_store_limits lim = {.budget_bytes = 128 * MIB, .client_budget_bytes = client_budget};
  ck_assert_int_eq(state_store_create(&lim, &fx.store, &e), QDP_OK);
  struct job_deps deps = {.mesh = fx.mesh, .world = fx.world, .store = fx.store, .max_regions = 4};
  CK_OK(job_pipeline_create(&deps, &fx.jp, &e), e);
  job_set_limits(fx.jp, 30, 1 << 20);
}

void setup(void) {
  setup_with(0);
}

void setup_small_budget(void) {
  setup_with(4096);
}

void teardown(void) {
  job_pipeline_destroy(fx.jp);
  state_store_destroy(fx.store);
  world_destroy(fx.world);
  runtime_mesh_destroy(fx.mesh);
  memset(&fx, 0, sizeof fx);
}

const struct job_caller alice = {.owner = "uid:1000", .pid = 0};

const struct job_caller bob = {.owner = "uid:1001", .pid = 0};

struct job_encode_request amplitude_of(const double *v, size_t n, uint32_t qubits) {
  return (struct job_encode_request){.input = {.source = QDP_SOURCE_VALUES,
                                               .dtype = QDP_DTYPE_FLOAT64,
                                               .values = v,
                                               .bytes = n * sizeof *v,
                                               .fd = -1},
                                     .encoding = QDP_ENCODING_AMPLITUDE,
                                     .qubits = qubits};
}

void assert_store_empty(void) {
  uint64_t bytes = 1;
  uint32_t states = 1;
  state_store_usage(fx.store, &bytes, &states, NULL);
  ck_assert_uint_eq(bytes, 0);
  ck_assert_uint_eq(states, 0);
}

void fetch_all(const char *handle, const char *token, double *out, uint64_t amps) {
  struct job_fetch f;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(job_fetch_open(fx.jp, handle, token, 0, 0, &f, &e), e);
  ck_assert_uint_eq(f.total, amps);
  ck_assert_uint_eq(f.esize, 16);
  ck_assert_int_eq(job_fetch_read(&f, amps, out, &e), QDP_OK);
  ck_assert_uint_eq(f.next, f.end);
  job_fetch_close(fx.jp, &f);
  ck_assert_ptr_null(f.state);
}

void assert_devices_empty(void) {
  for (size_t i = 0; i < runtime_mesh_count(fx.mesh); i++) {
    struct runtime_device_info info;
    runtime_mesh_device_info(fx.mesh, i, &info);
    ck_assert_uint_eq(info.used_bytes, 0);
  }
}
