/* test_job_requests.c — what a request names, through the job pipeline: a CUDA IPC input refused
 * with the GPUs the daemon owns, an output refused by the request and then by the CPU backend, a
 * caller that left or is late getting nothing kept, placement names mapped to indices, and the
 * upload admission counted per identity and in all. */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "job_fixture.h"

/* A CUDA IPC input on host-memory devices: no GPU has the UUID, and the refusal names what the
 * daemon owns; nothing is opened or kept. */
START_TEST(test_cuda_ipc_input_names_the_gpus_the_daemon_owns) {
  static const unsigned char handle[64];
  struct job_encode_request req = {.input = {.source = QDP_SOURCE_CUDA_IPC,
                                             .dtype = QDP_DTYPE_FLOAT64,
                                             .rows = 1,
                                             .cols = 4,
                                             .ipc_handle = handle,
                                             .ipc_handle_len = sizeof handle,
                                             .device_uuid = "GPU-x",
                                             .fd = -1},
                                   .encoding = QDP_ENCODING_AMPLITUDE,
                                   .qubits = 2};
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_FAILED_PRECONDITION);
  ck_assert_str_eq(e.field, "input.cuda_ipc.device_uuid");
  ck_assert_ptr_nonnull(strstr(e.msg, "GPU GPU-x is not one this daemon owns (it owns cpu:0"));
  ck_assert_ptr_nonnull(strstr(e.msg, "cpu:1 (host memory)"));
  req.input.ipc_handle_len = 63;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_INVALID_ARGUMENT);
  req.input.ipc_handle_len = 64;
  req.input.cols = 0; /* the shape cannot come from the bytes: it is required */
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_INVALID_ARGUMENT);
  /* A plan is refused the same way: an empty UUID names no GPU. */
  struct plan *p = NULL;
  struct qdp_error why = QDP_ERROR_INIT;
  req.input.cols = 4;
  req.input.device_uuid = "";
  ck_assert_int_eq(job_plan(fx.jp, &alice, &req, &p, &why, &e), QDP_ERR_FAILED_PRECONDITION);
  assert_store_empty();
}
END_TEST

/* job_encode and job_plan of req both refused with `want`, field and a message fragment, and
 * nothing left stored or reserved. */
static void expect_out_refused(const struct job_encode_request *req, qdp_status want,
                               const char *field, const char *fragment) {
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT, why = QDP_ERROR_INIT;
  struct plan *p = NULL;
  CK_STATUS(job_encode(fx.jp, &alice, req, &st, &e), want, e);
  ck_assert_str_eq(e.field, field);
  ck_assert_msg(strstr(e.msg, fragment), "'%s' lacks '%s'", e.msg, fragment);
  e = (struct qdp_error)QDP_ERROR_INIT;
  CK_STATUS(job_plan(fx.jp, &alice, req, &p, &why, &e), want, e);
  ck_assert_str_eq(e.field, field);
  ck_assert_ptr_null(p);
  assert_store_empty();
  assert_devices_empty();
}

/* An encode into a caller's CUDA allocation on host-memory devices: the request's own faults
 * come first, each naming its field (a handle of the wrong length, views, a policy that shards,
 * two devices, a misaligned offset, too few bytes with both numbers), so that they are found
 * before any device is looked at; then the backend, with what to do instead. The dry run refuses
 * as the encode does; nothing is opened, stored or reserved. */
START_TEST(test_out_refuses_the_request_then_the_cpu_backend) {
  static const unsigned char handle[64];
  const double v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  struct job_encode_request req = amplitude_of(v, 8, 3);
  req.input.rows = 2; /* 2 samples of 4 values on 3 qubits: 2 x 8 x 16 = 256 B of complex128 */
  struct job_output out = {.ipc_handle = handle,
                           .ipc_handle_len = 64,
                           .offset = 256,
                           .bytes = 256,
                           .device_uuid = "GPU-x"};
  req.out = &out;
  expect_out_refused(&req, QDP_ERR_FAILED_PRECONDITION, "out",
                     "out names a CUDA allocation to write the state into, but this daemon's "
                     "mesh is cpu:2 (host memory); leave out unset and read the state back");
  out.ipc_handle_len = 63;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "out.ipc_handle",
                     "out.ipc_handle has 63 bytes; a cudaIpcMemHandle_t has 64");
  out.ipc_handle_len = 64;
  req.views = true;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "views", "views and out exclude each other");
  req.views = false;
  req.placement.policy = PLAN_EVEN;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "placement.policy",
                     "placement.policy even shards the state");
  req.placement.policy = PLAN_SINGLE;
  const char *two[] = {"cpu:0", "cpu:1"};
  req.placement.devices = two;
  req.placement.ndevices = 2;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "placement.devices", "names 2 devices");
  req.placement.ndevices = 0;
  out.offset = 8;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "out.offset",
                     "out.offset 8 is not a multiple of 16 B, the size of a complex128 amplitude");
  out.offset = 256;
  out.bytes = 255;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "out.bytes",
                     "the state of 2 x 2^3 complex128 amplitudes needs 256 B but out offers 255 B");
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_uint_eq(e.need_bytes, 256);
  ck_assert_uint_eq(e.free_bytes, 255);
  /* complex64 needs half: 128 B are enough, and the backend is what refuses. */
  req.output_dtype = QDP_DTYPE_COMPLEX64;
  out.bytes = 128;
  expect_out_refused(&req, QDP_ERR_FAILED_PRECONDITION, "out", "cpu:2 (host memory)");
}
END_TEST

static unsigned left(const void *arg) {
  return *(const unsigned *)arg;
}

START_TEST(test_a_caller_that_left_or_is_late_gets_nothing_kept) {
  const double v[2] = {3, 4};
  struct job_encode_request req = amplitude_of(v, 2, 1);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  unsigned gone = JOB_CALLER_LEFT;
  struct job_caller c = {.owner = "uid:1000", .gone = left, .arg = &gone};
  ck_assert_int_eq(job_encode(fx.jp, &c, &req, &st, &e), QDP_ERR_CANCELLED);
  ck_assert_ptr_nonnull(strstr(e.msg, "nothing was kept"));
  assert_store_empty();
  gone = JOB_CALLER_LATE;
  ck_assert_int_eq(job_encode(fx.jp, &c, &req, &st, &e), QDP_ERR_DEADLINE_EXCEEDED);
  ck_assert_ptr_nonnull(strstr(e.msg, "its job could start"));
  assert_store_empty();
}
END_TEST

START_TEST(test_placement_maps_names_to_indices_in_order) {
  struct plan_device devs[3] = {{0, 0, "cpu:0", 100}, {0, 1, "cpu:1", 100}, {0, 2, "cpu:2", 100}};
  size_t sub[3] = {9, 9, 9};
  size_t n = 99;
  enum plan_policy pol = PLAN_BATCH;
  const char *names[] = {"cpu:2", "cpu:0"};
  struct job_placement pl = {.policy = PLAN_UNEVEN, .devices = names, .ndevices = 2};
  ck_assert_int_eq(job_placement(&pl, devs, 3, &pol, sub, &n, NULL), QDP_OK);
  ck_assert_int_eq(pol, PLAN_UNEVEN);
  ck_assert_uint_eq(n, 2);
  ck_assert_uint_eq(sub[0], 2);
  ck_assert_uint_eq(sub[1], 0);
}
END_TEST

/* Upload memory: upload_budget for every identity together, client_upload_budget for each,
 * refusals with the numbers and nothing taken, and everything back once released. */
START_TEST(test_upload_admission_counts_each_identity_and_all) {
  struct qdp_error e = QDP_ERROR_INIT;
  uint64_t all = 1, mine = 1;
  job_set_upload_budgets(fx.jp, 3 * MIB, 2 * MIB);
  ck_assert_int_eq(job_upload_admit(fx.jp, alice.owner, 2 * MIB, &e), QDP_OK);
  ck_assert_int_eq(job_upload_admit(fx.jp, alice.owner, 1, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(e.field, "data");
  ck_assert_ptr_nonnull(strstr(e.msg, "client_upload_budget = 2 MiB"));
  ck_assert_ptr_nonnull(strstr(e.msg, "uid:1000"));
  ck_assert_uint_eq(e.need_bytes, 1);
  ck_assert_uint_eq(e.free_bytes, 0);
  /* Another identity has its own share, up to what all of them may hold. */
  ck_assert_int_eq(job_upload_admit(fx.jp, bob.owner, MIB, &e), QDP_OK);
  ck_assert_int_eq(job_upload_admit(fx.jp, bob.owner, 4096, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg, "hold 3 MiB of upload_budget = 3 MiB"));
  ck_assert_uint_eq(e.need_bytes, 4096);
  ck_assert_uint_eq(e.free_bytes, 0);
  job_upload_usage(fx.jp, bob.owner, &all, &mine);
  ck_assert_uint_eq(all, 3 * MIB);
  ck_assert_uint_eq(mine, MIB);
  /* A budget lowered by SIGHUP refuses more, and what is held stays held. */
  job_set_upload_budgets(fx.jp, 3 * MIB, MIB / 2);
  ck_assert_int_eq(job_upload_admit(fx.jp, bob.owner, 1, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_uint_eq(e.free_bytes, 0);
  job_upload_release(fx.jp, alice.owner, 2 * MIB);
  job_upload_release(fx.jp, bob.owner, 2 * MIB); /* more than it holds: clamped */
  job_upload_release(fx.jp, "uid:4242", 1);      /* holds nothing */
  job_upload_usage(fx.jp, alice.owner, &all, &mine);
  ck_assert_uint_eq(all, 0);
  ck_assert_uint_eq(mine, 0);
  ck_assert_int_eq(job_upload_admit(fx.jp, bob.owner, MIB / 2, &e), QDP_OK);
  job_upload_release(fx.jp, bob.owner, MIB / 2);
  char longname[80];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  ck_assert_int_eq(job_upload_admit(fx.jp, longname, 1, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "79 B"));
  job_upload_usage(fx.jp, NULL, &all, NULL);
  ck_assert_uint_eq(all, 0);
}
END_TEST

void job_add_pipeline_requests(TCase *tc) {
  tcase_add_test(tc, test_cuda_ipc_input_names_the_gpus_the_daemon_owns);
  tcase_add_test(tc, test_out_refuses_the_request_then_the_cpu_backend);
  tcase_add_test(tc, test_a_caller_that_left_or_is_late_gets_nothing_kept);
  tcase_add_test(tc, test_placement_maps_names_to_indices_in_order);
  tcase_add_test(tc, test_upload_admission_counts_each_identity_and_all);
}
