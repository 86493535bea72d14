/* Shard views and gather on the CPU backend (runtime/views.c): the per-shard layout of sharded
 * states, gathers that must hold the same bits as reading the sharded state back, a gather that
 * does not fit refused with the arithmetic, and views refused on host memory with the mesh named.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"

#define MIB (UINT64_C(1) << 20)

/* Encodes angle (batch 1) or amplitude (batch > 1) over the first ndev devices with policy. */
static struct runtime_state *encode_on(struct runtime_mesh *m, size_t ndev, enum plan_policy policy,
                                       uint32_t n, uint64_t batch, qdp_dtype out) {
  qdp_encoding enc = batch > 1 ? QDP_ENCODING_AMPLITUDE : QDP_ENCODING_ANGLE;
  uint64_t cols = batch > 1 ? (UINT64_C(1) << n) - 3 : n; /* amplitude: padded rows */
  double *x = qdpt_xmalloc(batch * cols * sizeof *x);
  for (uint64_t i = 0; i < batch * cols; i++) {
    x[i] = 0.1 + 0.37 * (double)(i % 17) - 0.05 * (double)(i % 5);
  }
  struct runtime_state *s = qdpt_encode_f64(m, ndev, policy, enc, n, batch, cols, x, out);
  free(x);
  return s;
}

START_TEST(test_layout_of_four_even_shards) {
  struct runtime_mesh *m = qdpt_mesh("cpu:4", 64 * MIB, 0);
  /* 2^10 complex128 amplitudes over 4 devices: 256 each, 4096 B each. */
  struct runtime_state *s = encode_on(m, 4, PLAN_EVEN, 10, 1, QDP_DTYPE_COMPLEX128);
  ck_assert_uint_eq(runtime_state_plan(s)->nshards, 4);
  for (size_t i = 0; i < 4; i++) {
    struct runtime_shard_layout l;
    runtime_state_shard_layout(s, i, &l);
    char name[8];
    snprintf(name, sizeof name, "cpu:%zu", i);
    ck_assert_str_eq(l.name, name);
    ck_assert_int_eq(l.rank, 0);
    ck_assert_uint_eq(l.device, i);
    ck_assert_int_eq(l.ordinal, (int)i);
    ck_assert_str_eq(l.uuid, "");
    ck_assert_uint_eq(l.first, 256 * i);
    ck_assert_uint_eq(l.count, 256);
    ck_assert_uint_eq(l.row_first, 0);
    ck_assert_uint_eq(l.rows, 1);
    ck_assert_uint_eq(l.bytes, 4096);
    ck_assert_int_eq(l.dtype, QDP_DTYPE_COMPLEX128);
  }
  runtime_state_destroy(s);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_gather_of_index_range_shards_is_bit_identical) {
  struct runtime_mesh *m = qdpt_mesh("cpu:4", 64 * MIB, 0);
  struct runtime_state *s = encode_on(m, 4, PLAN_EVEN, 11, 1, QDP_DTYPE_COMPLEX128);
  qdpt_check_gather(m, s, NULL, true);
  runtime_state_destroy(s);
  s = encode_on(m, 3, PLAN_UNEVEN, 9, 1, QDP_DTYPE_COMPLEX64); /* 171 + 171 + 170 */
  qdpt_check_gather(m, s, NULL, true);
  runtime_state_destroy(s);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_gather_of_a_sharded_batch_is_bit_identical) {
  struct runtime_mesh *m = qdpt_mesh("cpu:4", 64 * MIB, 0);
  /* 7 samples over 3 devices: rows 3 + 2 + 2, whole rows each. */
  struct runtime_state *s = encode_on(m, 3, PLAN_BATCH, 6, 7, QDP_DTYPE_COMPLEX128);
  ck_assert_uint_eq(runtime_state_plan(s)->nshards, 3);
  qdpt_check_gather(m, s, NULL, true);
  runtime_state_destroy(s);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_gather_that_does_not_fit_is_refused_with_numbers) {
  /* 4 devices of 20000 B; a 2^12 complex64 state (32768 B) in 4 shards of 8192 B. */
  struct runtime_mesh *m = qdpt_mesh("cpu:4", 20000, 0);
  struct runtime_state *s = encode_on(m, 4, PLAN_EVEN, 12, 1, QDP_DTYPE_COMPLEX64);
  struct runtime_state *g = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(runtime_state_gather(m, s, 2, &g, &e), QDP_ERR_RESOURCE_EXHAUSTED, e);
  ck_assert_ptr_null(g);
  ck_assert_uint_eq(e.need_bytes, 32768);
  ck_assert_uint_eq(e.free_bytes, 20000 - 8192);
  ck_assert_int_eq(e.device, 2);
  ck_assert_msg(strstr(e.msg, "gather of a state of 32 KiB (4 shards) onto cpu:2") != NULL, "%s",
                e.msg);
  ck_assert_msg(strstr(e.msg, "needs 32 KiB") && strstr(e.msg, "only 11.5 KiB of its 19.5 KiB"),
                "%s", e.msg);
  ck_assert_uint_eq(qdpt_used_on(m, 2), 8192); /* nothing stays reserved */
  e = (struct qdp_error)QDP_ERROR_INIT;
  CK_STATUS(runtime_state_gather(m, s, 4, &g, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "device");
  runtime_state_destroy(s);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_views_on_host_memory_are_refused_naming_the_mesh) {
  struct runtime_mesh *m = qdpt_mesh("cpu:4", 64 * MIB, 0);
  struct runtime_state *s = encode_on(m, 4, PLAN_EVEN, 8, 1, QDP_DTYPE_COMPLEX128);
  struct runtime_ipc ipc;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(runtime_state_export_ipc(s, 1, &ipc, &e), QDP_ERR_FAILED_PRECONDITION, e);
  ck_assert_msg(strstr(e.msg, "zero-copy views need GPUs") && strstr(e.msg, "cpu:4"), "%s", e.msg);
  ck_assert_str_eq(e.field, "views");
  e = (struct qdp_error)QDP_ERROR_INIT;
  CK_STATUS(runtime_mesh_check_views(m, &e), QDP_ERR_FAILED_PRECONDITION, e);
  ck_assert_msg(strstr(e.msg, "cpu:4 (host memory)"), "%s", e.msg);
  runtime_state_destroy(s);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_find_device_by_name_or_index) {
  struct runtime_mesh *m = qdpt_mesh("cpu:3", MIB, 0);
  size_t i = 99;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_mesh_find_device(m, "cpu:2", "device", &i, &e), e);
  ck_assert_uint_eq(i, 2);
  CK_OK(runtime_mesh_find_device(m, "1", "device", &i, &e), e);
  ck_assert_uint_eq(i, 1);
  CK_STATUS(runtime_mesh_find_device(m, "3", "device", &i, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_msg(strstr(e.msg, "'3'") && strstr(e.msg, "cpu:0 to cpu:2"), "%s", e.msg);
  CK_STATUS(runtime_mesh_find_device(m, "cuda:0", "device", &i, &e), QDP_ERR_INVALID_ARGUMENT, e);
  CK_STATUS(runtime_mesh_find_device(m, "1x", "device", &i, &e), QDP_ERR_INVALID_ARGUMENT, e);
  runtime_mesh_destroy(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("views");
  TCase *tc = tcase_create("views");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_layout_of_four_even_shards);
  tcase_add_test(tc, test_gather_of_index_range_shards_is_bit_identical);
  tcase_add_test(tc, test_gather_of_a_sharded_batch_is_bit_identical);
  tcase_add_test(tc, test_gather_that_does_not_fit_is_refused_with_numbers);
  tcase_add_test(tc, test_views_on_host_memory_are_refused_naming_the_mesh);
  tcase_add_test(tc, test_find_device_by_name_or_index);
  suite_add_tcase(s, tc);
  return qdpt_run_suite(s, CK_FORK_GETENV);
}
