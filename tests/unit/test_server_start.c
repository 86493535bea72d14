/* Unit test of daemon/rpc/server.c's lifecycle on a failed start: rpc_server_start fails after it
 * put handles on the loop (here: the allocation of its worker threads' table fails), and
 * rpc_server_destroy must take them off again, so the loop closes cleanly (before the fix
 * uv_loop_close saw live handles in freed memory). Links the server with calloc wrapped. */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "config.h"
#include "rpc/server.h"
#include "runtime/runtime.h"
#include "state/store.h"
#include "world/world.h"

/* The worker table is calloc(workers, sizeof(uv_thread_t)): an odd count no other allocation of
 * start uses picks it out. */
#define WORKERS 7

void *__real_calloc(size_t n, size_t size);
static bool fail_workers;

void *__wrap_calloc(size_t n, size_t size) {
  if (fail_workers && n == WORKERS && size == sizeof(uv_thread_t)) {
    return NULL;
  }
  return __real_calloc(n, size);
}

START_TEST(test_a_start_that_fails_half_way_leaves_nothing_on_the_loop) {
  char dir[] = "/tmp/qdp-start-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char sock[64];
  snprintf(sock, sizeof sock, "%s/s.sock", dir);
  struct config cfg;
  config_defaults(&cfg);
  cfg.workers = WORKERS;
  struct qdp_error err = QDP_ERROR_INIT;
  struct runtime_mesh *mesh = NULL;
  struct runtime_mesh_config mc = {.devices = "cpu:1", .device_budget_bytes = 1 << 20};
  ck_assert_int_eq(runtime_mesh_create(&mc, &mesh, &err), QDP_OK);
  struct world *w = NULL;
  ck_assert_int_eq(world_create(false, NULL, NULL, &w, &err), QDP_OK);
  ck_assert_int_eq(world_start(w, QDP_OK, NULL, mesh, 1000, false, &err), QDP_OK);
  struct state_store_limits lim = {0};
  struct state_store *store = NULL;
  ck_assert_int_eq(state_store_create(&lim, &store, &err), QDP_OK);
  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  struct rpc_server_deps deps = {
      .cfg = &cfg, .mesh = mesh, .world = w, .store = store, .loop = &loop};
  struct rpc_server *s = NULL;
  ck_assert_int_eq(rpc_server_create(&deps, sock, &s, NULL, &err), QDP_OK);
  fail_workers = true;
  ck_assert_int_eq(rpc_server_start(s, &err), QDP_ERR_RESOURCE_EXHAUSTED);
  fail_workers = false;
  ck_assert_ptr_nonnull(strstr(err.msg, "worker threads"));
  rpc_server_destroy(s);
  /* Nothing of the server is left on the loop. */
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  ck_assert_int_eq(access(sock, F_OK), -1); /* and its socket is gone */
  state_store_destroy(store);
  world_destroy(w);
  runtime_mesh_destroy(mesh);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("server_start");
  TCase *tc = tcase_create("lifecycle");
  tcase_add_test(tc, test_a_start_that_fails_half_way_leaves_nothing_on_the_loop);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK); /* gRPC's threads do not survive a fork */
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
