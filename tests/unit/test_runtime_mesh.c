/* test_runtime_mesh.c — the runtime's parts below an encode, on the CPU backend: meshes from a
 * device spec (names, refusals, the launcher's local rank), the norm's split into aligned blocks
 * and its pairwise combination, and the mesh's workers (every item once, in parallel, runs taken
 * from many threads). */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common_runtime.h"
#include "launcher.h"
#include "runtime/norm.h"
#include "runtime/runtime.h"
#include "runtime/workers.h"
#include "runtime_fixture.h"

START_TEST(test_mesh_cpu_spec_gives_named_devices) {
  struct runtime_mesh *m = qdpt_mesh("cpu:3", GIB, 0);
  ck_assert_str_eq(runtime_mesh_backend(m), "cpu");
  ck_assert_uint_eq(runtime_mesh_count(m), 3);
  struct runtime_device_info info;
  runtime_mesh_device_info(m, 2, &info);
  ck_assert_str_eq(info.name, "cpu:2");
  ck_assert_uint_eq(info.budget_bytes, GIB);
  ck_assert_uint_eq(info.free_bytes, GIB);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_mesh_refuses_bad_specs) {
  const char *bad[] = {"cpu:0", "cpu:x", "cpu:65", "cpu:"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct runtime_mesh_config cfg = {.devices = bad[i], .device_budget_bytes = GIB};
    struct runtime_mesh *m = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    CK_STATUS(runtime_mesh_create(&cfg, &m, &e), QDP_ERR_INVALID_ARGUMENT, e);
    ck_assert_str_eq(e.field, "devices");
    ck_assert_ptr_null(m);
  }
}
END_TEST

/* 'local-rank' needs the launcher's local index; given one, it asks for that GPU (cuda:999, which
 * no machine has, so the refusal names it). */
START_TEST(test_mesh_local_rank_takes_the_launchers_index) {
  for (size_t i = 0; launcher_var_name(i); i++) {
    unsetenv(launcher_var_name(i));
  }
  struct runtime_mesh_config cfg = {.devices = "local-rank", .device_budget_bytes = GIB};
  struct runtime_mesh *m = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(runtime_mesh_create(&cfg, &m, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "devices");
  ck_assert_ptr_nonnull(strstr(e.msg, "OMPI_COMM_WORLD_LOCAL_RANK"));
  setenv("SLURM_LOCALID", "999", 1);
  e = (struct qdp_error)QDP_ERROR_INIT;
  qdp_status rc = runtime_mesh_create(&cfg, &m, &e);
  ck_assert_msg(rc != QDP_OK, "mesh 'local-rank' at SLURM_LOCALID=999 returned %s",
                qdp_status_name(rc));
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(e.msg, "cuda:999") != NULL, "message: %s", e.msg);
  unsetenv("SLURM_LOCALID");
}
END_TEST

START_TEST(test_norm_split_covers_range_with_aligned_blocks) {
  struct norm_block b[NORM_BLOCKS_MAX];
  /* [0, 2863311531): the first shard of 34 qubits over 6 devices. */
  uint64_t lo = 5, hi = 2863311531;
  size_t n = norm_split(lo, hi, b);
  uint64_t at = lo;
  for (size_t i = 0; i < n; i++) {
    ck_assert_uint_eq(b[i].first, at);
    ck_assert_uint_eq(b[i].first % (UINT64_C(1) << b[i].log2), 0);
    at += UINT64_C(1) << b[i].log2;
  }
  ck_assert_uint_eq(at, hi);
  ck_assert_uint_eq(norm_split(0, UINT64_C(1) << 40, b), 1);
  ck_assert_uint_eq(b[0].log2, 40);
}
END_TEST

START_TEST(test_norm_combine_follows_the_pairwise_tree) {
  /* Leaves 1, 2, 3, 4 of [0, 4) as four blocks, as two, and as one give ((1+2)+(3+4)). */
  struct norm_block four[4] = {{0, 0, 1e16}, {1, 0, 1.0}, {2, 0, -1e16}, {3, 0, 1.0}};
  /* Pairwise: (1e16 + 1) + (-1e16 + 1) = 1e16 + -1e16 = 0 in double; a running sum gives 1. */
  ck_assert(norm_combine(four, 4, 2, 0) == 0.0);
  struct norm_block gap[1] = {{2, 1, 5.0}}; /* only [2, 4) given: the rest is zero */
  ck_assert(norm_combine(gap, 1, 3, 0) == 5.0);
}
END_TEST

/* ---- the mesh's workers ---- */

struct work_item {
  pthread_t ran_on;
  int runs;
  int *arrived; /* items of the run that have started */
  int expect;   /* how many to wait for (in parallel they all arrive) */
  int saw_all;
};

static void *work_rendezvous(void *arg) {
  struct work_item *it = arg;
  it->ran_on = pthread_self();
  it->runs++;
  __atomic_add_fetch(it->arrived, 1, __ATOMIC_SEQ_CST);
  for (int spins = 0; spins < 5000; spins++) {
    if (__atomic_load_n(it->arrived, __ATOMIC_SEQ_CST) >= it->expect) {
      it->saw_all = 1;
      break;
    }
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  return NULL;
}

/* One item per slot runs in parallel, slot 0 on the caller; more items than slots wrap around. */
START_TEST(test_workers_run_every_item_once_and_in_parallel) {
  struct runtime_workers *w = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_workers_create(3, &w, &e), e);
  int arrived = 0;
  struct work_item items[4] = {{0}};
  for (int i = 0; i < 4; i++) {
    items[i] = (struct work_item){.arrived = &arrived, .expect = 4};
  }
  runtime_workers_run(w, items, 4, sizeof items[0], work_rendezvous);
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(items[i].runs, 1);
    ck_assert_msg(items[i].saw_all, "item %d did not run alongside the others", i);
    for (int j = 0; j < i; j++) {
      ck_assert(!pthread_equal(items[i].ran_on, items[j].ran_on));
    }
  }
  ck_assert(pthread_equal(items[0].ran_on, pthread_self()));
  /* Ten items over four slots: each runs once, slot by slot in order. */
  struct work_item many[10];
  int none = 0;
  for (int i = 0; i < 10; i++) {
    many[i] = (struct work_item){.arrived = &none, .expect = 0};
  }
  runtime_workers_run(w, many, 10, sizeof many[0], work_rendezvous);
  for (int i = 0; i < 10; i++) {
    ck_assert_int_eq(many[i].runs, 1);
    ck_assert(pthread_equal(many[i].ran_on, many[i % 4].ran_on));
  }
  runtime_workers_destroy(w);
  /* No workers: everything on the caller. */
  CK_OK(runtime_workers_create(0, &w, &e), e);
  runtime_workers_run(w, many, 3, sizeof many[0], work_rendezvous);
  ck_assert(pthread_equal(many[2].ran_on, pthread_self()));
  runtime_workers_destroy(w);
}
END_TEST

struct runner {
  struct runtime_workers *w;
  struct work_item items[6];
  int arrived;
};

static void *run_from_thread(void *arg) {
  struct runner *r = arg;
  for (int i = 0; i < 6; i++) {
    r->items[i] = (struct work_item){.arrived = &r->arrived, .expect = 0};
  }
  for (int round = 0; round < 200; round++) {
    runtime_workers_run(r->w, r->items, 6, sizeof r->items[0], work_rendezvous);
  }
  return NULL;
}

/* Runs from several threads at once share the workers and each waits for its own items only. */
START_TEST(test_workers_take_runs_from_many_threads) {
  struct runtime_workers *w = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_workers_create(2, &w, &e), e);
  struct runner r[3];
  pthread_t tid[3];
  for (int i = 0; i < 3; i++) {
    r[i] = (struct runner){.w = w};
    ck_assert_int_eq(pthread_create(&tid[i], NULL, run_from_thread, &r[i]), 0);
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(tid[i], NULL);
    for (int k = 0; k < 6; k++) {
      ck_assert_int_eq(r[i].items[k].runs, 200);
    }
  }
  runtime_workers_destroy(w);
}
END_TEST

void runtime_add_mesh(TCase *tc) {
  tcase_add_test(tc, test_mesh_cpu_spec_gives_named_devices);
  tcase_add_test(tc, test_mesh_refuses_bad_specs);
  tcase_add_test(tc, test_mesh_local_rank_takes_the_launchers_index);
}

void runtime_add_workers(TCase *tc) {
  tcase_add_test(tc, test_workers_run_every_item_once_and_in_parallel);
  tcase_add_test(tc, test_workers_take_runs_from_many_threads);
}

void runtime_add_norm(TCase *tc) {
  tcase_add_test(tc, test_norm_split_covers_range_with_aligned_blocks);
  tcase_add_test(tc, test_norm_combine_follows_the_pairwise_tree);
}
