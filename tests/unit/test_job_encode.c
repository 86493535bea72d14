/* test_job_encode.c — encodes through the job pipeline: amplitude against hand-computed values, a
 * plan that keeps nothing, states that belong to their owner, a reply that cannot be sent and a
 * state released as it is committed (--wrap=state_store_commit_pinned), fetch windows, the client
 * budget's refusal with the numbers, and job_encode under every allocation failure (alloc_shim.h):
 * each ends in RESOURCE_EXHAUSTED with a message, leaving nothing behind. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "alloc_shim.h"
#include "common.h"
#include "job_fixture.h"

START_TEST(test_amplitude_of_3_4_is_0_6_0_8) {
  const double v[2] = {3, 4};
  struct job_encode_request req = amplitude_of(v, 2, 1);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(job_encode(fx.jp, &alice, &req, &st, &e), e);
  ck_assert_str_eq(st.meta.owner, "uid:1000");
  ck_assert_uint_eq(strlen(st.token), STATE_TOKEN_LEN - 1);
  ck_assert_uint_eq(st.plan->qubits, 1);
  ck_assert_uint_eq(st.plan->total_bytes, 2 * 16);
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(fx.jp, &st, true);
  double amps[4];
  fetch_all(handle, token, amps, 2);
  ck_assert_double_eq_tol(amps[0], 0.6, 1e-12);
  ck_assert_double_eq_tol(amps[1], 0.0, 1e-12);
  ck_assert_double_eq_tol(amps[2], 0.8, 1e-12);
  ck_assert_double_eq_tol(amps[3], 0.0, 1e-12);
  /* Padded: [1, 1, 1] on 2 qubits is [1, 1, 1, 0] / sqrt(3). */
  const double w[3] = {1, 1, 1};
  req = amplitude_of(w, 3, 2);
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_OK);
  char h2[STATE_HANDLE_LEN], t2[STATE_TOKEN_LEN];
  memcpy(h2, st.meta.handle, sizeof h2);
  memcpy(t2, st.token, sizeof t2);
  job_state_info_end(fx.jp, &st, true);
  double a2[8];
  fetch_all(h2, t2, a2, 4);
  for (int i = 0; i < 3; i++) {
    ck_assert_double_eq_tol(a2[2 * i], 1 / sqrt(3.0), 1e-12);
  }
  ck_assert_double_eq_tol(a2[6], 0.0, 1e-12);
  uint64_t freed = 0;
  ck_assert_int_eq(job_release(fx.jp, &alice, handle, token, &freed, &e), QDP_OK);
  ck_assert_uint_eq(freed, 32);
  ck_assert_int_eq(job_release(fx.jp, &alice, h2, t2, &freed, &e), QDP_OK);
  assert_store_empty();
}
END_TEST

START_TEST(test_plan_only_reports_the_plan_and_keeps_nothing) {
  struct job_encode_request req = {.input = {.source = QDP_SOURCE_NONE,
                                             .dtype = QDP_DTYPE_FLOAT64,
                                             .rows = 1,
                                             .cols = 1000,
                                             .fd = -1},
                                   .encoding = QDP_ENCODING_AMPLITUDE,
                                   .qubits = 10,
                                   .placement = {.policy = PLAN_EVEN}};
  struct plan *p = NULL;
  struct qdp_error why = QDP_ERROR_INIT, e = QDP_ERROR_INIT;
  CK_OK(job_plan(fx.jp, &alice, &req, &p, &why, &e), e);
  ck_assert(p->feasible);
  ck_assert_int_eq(why.code, QDP_OK);
  ck_assert_uint_eq(p->total_bytes, 1024 * 16);
  ck_assert_uint_eq(p->nshards, 2);
  plan_destroy(p);
  /* Too large for the devices: planned, infeasible, and why says by how much. */
  req.qubits = 24;
  req.input.cols = 1 << 24;
  p = NULL;
  ck_assert_int_eq(job_plan(fx.jp, &alice, &req, &p, &why, &e), QDP_OK);
  ck_assert(!p->feasible);
  ck_assert_int_eq(why.code, QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_uint_gt(why.need_bytes, 0);
  plan_destroy(p);
  /* An encode needs values, not a shape. */
  struct job_state_info st;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "no source"));
  /* A device that is not the world's is named with the ones that are. */
  const char *names[] = {"cuda:7"};
  req.placement = (struct job_placement){.devices = names, .ndevices = 1};
  ck_assert_int_eq(job_plan(fx.jp, &alice, &req, &p, &why, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "placement.devices");
  ck_assert_ptr_nonnull(strstr(e.msg, "cpu:0, cpu:1"));
  assert_store_empty();
}
END_TEST

struct listed {
  int n;
  char owner[64];
};

static void count_listed(const struct job_state_info *st, void *arg) {
  struct listed *l = arg;
  l->n++;
  snprintf(l->owner, sizeof l->owner, "%s", st->meta.owner);
}

START_TEST(test_states_belong_to_their_owner) {
  const double v[4] = {1, 2, 3, 4};
  struct job_encode_request req = amplitude_of(v, 4, 2);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_OK);
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(fx.jp, &st, true);
  /* Listing: each identity its own; every identity's only for operators. */
  struct listed l = {0};
  ck_assert_int_eq(job_list(fx.jp, &bob, false, count_listed, &l, &e), QDP_OK);
  ck_assert_int_eq(l.n, 0);
  ck_assert_int_eq(job_list(fx.jp, &alice, false, count_listed, &l, &e), QDP_OK);
  ck_assert_int_eq(l.n, 1);
  ck_assert_str_eq(l.owner, "uid:1000");
  ck_assert_int_eq(job_list(fx.jp, &bob, true, count_listed, &l, &e), QDP_ERR_PERMISSION_DENIED);
  ck_assert_ptr_nonnull(strstr(e.msg, "uid:1001"));
  struct job_caller root = {.owner = "uid:0", .operator= true };
  l.n = 0;
  ck_assert_int_eq(job_list(fx.jp, &root, true, count_listed, &l, &e), QDP_OK);
  ck_assert_int_eq(l.n, 1);
  /* Another identity cannot release it by handle alone, nor describe it with a wrong token. */
  uint64_t freed = 0;
  ck_assert_int_eq(job_release(fx.jp, &bob, handle, NULL, &freed, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(job_describe(fx.jp, &bob, handle, "0123", JOB_VIEWS_NONE, 0, &st, &e), QDP_ERR_NOT_FOUND);
  /* Its token is a capability: whoever holds it may describe it. */
  ck_assert_int_eq(job_describe(fx.jp, &bob, handle, token, JOB_VIEWS_NONE, 0, &st, &e), QDP_OK);
  ck_assert_str_eq(st.meta.owner, "uid:1000");
  ck_assert_str_eq(st.token, "");
  job_state_info_end(fx.jp, &st, false); /* not fresh: a failed Describe reply keeps the state */
  /* The owner releases it by handle alone. */
  ck_assert_int_eq(job_release(fx.jp, &alice, handle, NULL, &freed, &e), QDP_OK);
  ck_assert_uint_eq(freed, 4 * 16);
  assert_store_empty();
  ck_assert_int_eq(job_release(fx.jp, &alice, "", NULL, &freed, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "state");
}
END_TEST

START_TEST(test_a_reply_that_cannot_be_sent_releases_the_new_state) {
  const double v[2] = {1, 1};
  struct job_encode_request req = amplitude_of(v, 2, 1);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_OK);
  job_state_info_end(fx.jp, &st, false);
  assert_store_empty();
}
END_TEST

/* Set by a test: every commit is followed at once by the state's release, as a Release with the
 * new token or an expiry sweep on another thread may land before the reply is built (linked with
 * --wrap=state_store_commit_pinned). */
static bool release_on_commit;

qdp_status __real_state_store_commit_pinned(struct state_store *s, struct state_reservation *r,
                                            void *payload, void (*payload_destroy)(void *),
                                            uint64_t ttl_ms, const char *label,
                                            struct state_meta *ret_meta, char *ret_token,
                                            struct qdp_error *reterr);
qdp_status __wrap_state_store_commit_pinned(struct state_store *s, struct state_reservation *r,
                                            void *payload, void (*payload_destroy)(void *),
                                            uint64_t ttl_ms, const char *label,
                                            struct state_meta *ret_meta, char *ret_token,
                                            struct qdp_error *reterr);

qdp_status __wrap_state_store_commit_pinned(struct state_store *s, struct state_reservation *r,
                                            void *payload, void (*payload_destroy)(void *),
                                            uint64_t ttl_ms, const char *label,
                                            struct state_meta *ret_meta, char *ret_token,
                                            struct qdp_error *reterr) {
  qdp_status rc = __real_state_store_commit_pinned(s, r, payload, payload_destroy, ttl_ms, label,
                                                   ret_meta, ret_token, reterr);
  if (rc == QDP_OK && release_on_commit) {
    ck_assert_int_eq(state_store_release(s, ret_meta->handle, ret_token, NULL, NULL), QDP_OK);
  }
  return rc;
}

/* The reply of an Encode or Gather is described from the new state: one released the moment it
 * was committed must still be readable until the reply is built, and freed once it is. */
START_TEST(test_a_state_released_as_it_is_committed_is_described_from_a_pin) {
  const double v[4] = {3, 4, 0, 0};
  struct job_encode_request req = amplitude_of(v, 4, 2);
  req.placement.policy = PLAN_EVEN;
  req.label = "raced";
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  release_on_commit = true;
  CK_OK(job_encode(fx.jp, &alice, &req, &st, &e), e);
  release_on_commit = false;
  ck_assert_uint_eq(st.plan->qubits, 2);
  ck_assert_uint_eq(st.plan->nshards, 2);
  ck_assert_uint_eq(st.plan->total_bytes, 4 * 16);
  ck_assert_ptr_nonnull(st.collective);
  ck_assert_str_eq(st.meta.owner, "uid:1000");
  ck_assert_str_eq(st.meta.label, "raced");
  ck_assert_uint_eq(st.meta.bytes, 4 * 16);
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  assert_store_empty(); /* unlinked: its bytes are no longer listed */
  job_state_info_end(fx.jp, &st, true);
  assert_devices_empty(); /* the reply's pin was the last */
  struct job_fetch f;
  ck_assert_int_eq(job_fetch_open(fx.jp, handle, token, 0, 0, &f, &e), QDP_ERR_NOT_FOUND);
  /* Gather commits through the same step. */
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_OK);
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(fx.jp, &st, true);
  release_on_commit = true;
  CK_OK(job_gather(fx.jp, &alice, handle, token, "cpu:1", 0, "whole", &st, &e), e);
  release_on_commit = false;
  ck_assert_uint_eq(st.plan->nshards, 1);
  ck_assert_uint_eq(st.plan->total_bytes, 4 * 16);
  ck_assert_str_eq(st.meta.label, "whole");
  job_state_info_end(fx.jp, &st, true);
  ck_assert_int_eq(job_release(fx.jp, &alice, handle, token, NULL, &e), QDP_OK);
  assert_store_empty();
  assert_devices_empty();
}
END_TEST

START_TEST(test_fetch_reads_a_window_and_refuses_past_the_end) {
  const double v[4] = {1, 1, 1, 1};
  struct job_encode_request req = amplitude_of(v, 4, 2);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_OK);
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(fx.jp, &st, true);
  struct job_fetch f;
  ck_assert_int_eq(job_fetch_open(fx.jp, handle, token, 1, 2, &f, &e), QDP_OK);
  double amps[4];
  ck_assert_int_eq(job_fetch_read(&f, 2, amps, &e), QDP_OK);
  ck_assert_double_eq_tol(amps[0], 0.5, 1e-12);
  ck_assert_double_eq_tol(amps[2], 0.5, 1e-12);
  job_fetch_close(fx.jp, &f);
  ck_assert_int_eq(job_fetch_open(fx.jp, handle, token, 3, 2, &f, &e), QDP_ERR_OUT_OF_RANGE);
  ck_assert_str_eq(e.field, "count");
  job_fetch_close(fx.jp, &f);
  ck_assert_int_eq(job_fetch_open(fx.jp, handle, "wrong", 0, 0, &f, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(job_release(fx.jp, &alice, handle, token, NULL, &e), QDP_OK);
  /* Released: the pin is gone with it. */
  ck_assert_int_eq(job_fetch_open(fx.jp, handle, token, 0, 0, &f, &e), QDP_ERR_NOT_FOUND);
  assert_store_empty();
}
END_TEST

START_TEST(test_the_budget_refuses_with_the_numbers) {
  /* 8 qubits of complex128: 4096 B fit the 4096 B client budget; 9 qubits do not. */
  static double v[512];
  for (int i = 0; i < 512; i++) {
    v[i] = 1;
  }
  struct job_encode_request req = amplitude_of(v, 512, 9);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_uint_eq(e.need_bytes, 8192);
  ck_assert_uint_eq(e.free_bytes, 4096);
  ck_assert_ptr_nonnull(strstr(e.msg, "state of 8 KiB refused"));
  ck_assert_ptr_nonnull(strstr(e.msg, "uid:1000"));
  assert_store_empty();
  req = amplitude_of(v, 256, 8);
  CK_OK(job_encode(fx.jp, &alice, &req, &st, &e), e);
  job_state_info_end(fx.jp, &st, false);
  assert_store_empty();
}
END_TEST

/* ---- job_encode under every allocation failure ---- */

static qdp_status op_encode(void *arg, struct qdp_error *e) {
  const struct job_encode_request *req = arg;
  struct job_state_info st;
  qdp_status rc = job_encode(fx.jp, &alice, req, &st, e);
  if (rc != QDP_OK) {
    return rc;
  }
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(fx.jp, &st, true);
  return job_release(fx.jp, &alice, handle, token, NULL, e);
}

/* Whatever the run did, nothing stays stored or reserved on a device. */
static void check_encode(void *arg, qdp_status rc) {
  (void)arg;
  (void)rc;
  assert_store_empty();
  for (size_t i = 0; i < runtime_mesh_count(fx.mesh); i++) {
    struct runtime_device_info info;
    runtime_mesh_device_info(fx.mesh, i, &info);
    ck_assert_uint_eq(info.used_bytes, 0);
  }
}

START_TEST(test_encode_survives_every_allocation_failure) {
  static double v[40];
  for (int i = 0; i < 40; i++) {
    v[i] = (double)(i % 7) - 3.0 + 0.01;
  }
  struct job_encode_request req = amplitude_of(v, 40, 6);
  req.placement.policy = PLAN_EVEN;
  ck_assert_uint_gt(shim_sweep("job_encode amplitude even", op_encode, check_encode, &req), 0);
  req.views = true; /* refused on the CPU backend before anything is encoded */
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_FAILED_PRECONDITION);
  check_encode(NULL, QDP_OK);
}
END_TEST

void job_add_pipeline_encode(TCase *tc) {
  tcase_add_test(tc, test_amplitude_of_3_4_is_0_6_0_8);
  tcase_add_test(tc, test_plan_only_reports_the_plan_and_keeps_nothing);
  tcase_add_test(tc, test_states_belong_to_their_owner);
  tcase_add_test(tc, test_a_reply_that_cannot_be_sent_releases_the_new_state);
  tcase_add_test(tc, test_a_state_released_as_it_is_committed_is_described_from_a_pin);
  tcase_add_test(tc, test_fetch_reads_a_window_and_refuses_past_the_end);
}

void job_add_budget(TCase *tc) {
  tcase_add_test(tc, test_the_budget_refuses_with_the_numbers);
}

void job_add_faults(TCase *tc) {
  tcase_add_test(tc, test_encode_survives_every_allocation_failure);
}
