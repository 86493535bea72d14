/* libqdp's decoding of what the daemon sends, fed bytes directly (no daemon, no call): FetchChunk
 * streams into a caller's buffer (qdp__fetch_deliver) and the copy of replies into the public
 * structs (qdp__reply_from_pb). Inputs tests/fuzz found are kept here as regression tests too. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>

#include "libqdp_int.h"
#include "qdp.pb-c.h"

/* bytes[0..n) as one message arriving in slices of `piece` bytes. */
static grpc_byte_buffer *message(const uint8_t *bytes, size_t n, size_t piece) {
  grpc_slice parts[256];
  size_t k = 0;
  for (size_t at = 0; at < n; at += piece) {
    ck_assert_uint_lt(k, sizeof parts / sizeof parts[0]);
    parts[k++] =
        grpc_slice_from_copied_buffer((const char *)bytes + at, n - at < piece ? n - at : piece);
  }
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(parts, k);
  for (size_t i = 0; i < k; i++) {
    grpc_slice_unref(parts[i]);
  }
  return bb;
}

/* A FetchChunk as qdpd writes it (qdp_wire_fetch_chunk): offset, dtype, total, then the data. */
static size_t daemon_chunk(uint8_t *buf, uint8_t offset, uint8_t dtype, uint8_t total,
                           const void *data, uint8_t len) {
  size_t n = 0;
  buf[n++] = 0x08;
  buf[n++] = offset;
  buf[n++] = 0x18;
  buf[n++] = dtype;
  buf[n++] = 0x20;
  buf[n++] = total;
  buf[n++] = 0x12;
  buf[n++] = len;
  memcpy(buf + n, data, len);
  return n + len;
}

/* fuzz_fetch's first find: a chunk with no data field (protobuf-c gives (NULL, 0)) reached
 * memcpy with a NULL source, which is undefined even for 0 bytes. */
START_TEST(test_fetch_chunk_without_data_completes_an_empty_fetch) {
  static const uint8_t only_dtype[] = {0x18, QDP_DTYPE_COMPLEX128}; /* dtype, total 0, no data */
  grpc_byte_buffer *bb = message(only_dtype, sizeof only_dtype, sizeof only_dtype);
  unsigned char dst[16];
  memset(dst, 0xA5, sizeof dst);
  uint64_t got = 1;
  qdp_status rc =
      qdp__fetch_deliver(&bb, 1, 0, 0, QDP_DTYPE_UNSPECIFIED, dst, sizeof dst, -1, &got);
  ck_assert_int_eq(rc, QDP_OK);
  ck_assert_uint_eq(got, 0);
  for (size_t i = 0; i < sizeof dst; i++) {
    ck_assert_uint_eq(dst[i], 0xA5);
  }
  grpc_byte_buffer_destroy(bb);
}
END_TEST

/* The fast path reads the header and the data straight from the slices: one byte per slice
 * splits every varint and the data across them. */
START_TEST(test_fetch_chunks_in_one_byte_slices_land_in_place) {
  double want[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}}; /* two complex128 amplitudes per chunk */
  uint8_t buf[2][64];
  grpc_byte_buffer *bb[2];
  for (int i = 0; i < 2; i++) {
    size_t n =
        daemon_chunk(buf[i], (uint8_t)(2 * i), QDP_DTYPE_COMPLEX128, 4, want[i], sizeof want[i]);
    bb[i] = message(buf[i], n, 1);
  }
  double dst[8] = {0};
  uint64_t got = 0;
  ck_assert_int_eq(qdp__fetch_deliver(bb, 2, 0, 4, QDP_DTYPE_COMPLEX128, dst, sizeof dst, -1, &got),
                   QDP_OK);
  ck_assert_uint_eq(got, sizeof dst);
  ck_assert_int_eq(memcmp(dst, want, sizeof dst), 0);
  grpc_byte_buffer_destroy(bb[0]);
  grpc_byte_buffer_destroy(bb[1]);
}
END_TEST

START_TEST(test_fetch_announcing_more_than_the_buffer_is_refused) {
  double v[4] = {0};
  uint8_t buf[64];
  size_t n = daemon_chunk(buf, 0, QDP_DTYPE_COMPLEX128, 4, v, sizeof v); /* total 4: 64 B */
  grpc_byte_buffer *bb = message(buf, n, n);
  double dst[4];
  uint64_t got = 0;
  qdp__err_reset();
  ck_assert_int_eq(qdp__fetch_deliver(&bb, 1, 0, 0, QDP_DTYPE_UNSPECIFIED, dst, 32, -1, &got),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "dst_bytes");
  ck_assert_uint_eq(got, 0);
  grpc_byte_buffer_destroy(bb);
}
END_TEST

START_TEST(test_fetch_that_ends_short_is_data_loss) {
  double v[4] = {1, 2, 3, 4};
  uint8_t buf[64];
  size_t n = daemon_chunk(buf, 0, QDP_DTYPE_COMPLEX128, 3, v, sizeof v); /* 2 of 3 amplitudes */
  grpc_byte_buffer *bb = message(buf, n, n);
  double dst[6];
  uint64_t got = 0;
  ck_assert_int_eq(
      qdp__fetch_deliver(&bb, 1, 0, 0, QDP_DTYPE_UNSPECIFIED, dst, sizeof dst, -1, &got),
      QDP_ERR_DATA_LOSS);
  ck_assert_uint_eq(got, sizeof v);
  grpc_byte_buffer_destroy(bb);
}
END_TEST

/* Strings a reply leaves out become "", never NULL: callers print them as they are. */
START_TEST(test_reply_copy_gives_empty_strings_for_absent_ones) {
  Qdp__Shard sh = QDP__SHARD__INIT;
  sh.count = 8;
  Qdp__Shard *shards[1] = {&sh};
  Qdp__StateInfo pb = QDP__STATE_INFO__INIT;
  pb.handle = "s1";
  pb.qubits = 3;
  pb.n_shards = 1;
  pb.shards = shards;
  struct qdp_state_info *s = qdp__reply_from_pb(&pb.base);
  ck_assert_ptr_nonnull(s);
  ck_assert_str_eq(s->handle, "s1");
  ck_assert_str_eq(s->token, "");
  ck_assert_str_eq(s->label, "");
  ck_assert_uint_eq(s->nshards, 1);
  ck_assert_str_eq(s->shards[0]->device, "");
  ck_assert_uint_eq(s->shards[0]->count, 8);
  ck_assert_ptr_null(s->shards[0]->ipc_handle);
  qdp_state_info_free(s);
  Qdp__ReleaseReply rel = QDP__RELEASE_REPLY__INIT;
  ck_assert_ptr_null(qdp__reply_from_pb(&rel.base));
}
END_TEST

static Suite *decode_suite(void) {
  Suite *s = suite_create("libqdp_decode");
  TCase *tc = tcase_create("qdp__fetch_deliver");
  tcase_add_test(tc, test_fetch_chunk_without_data_completes_an_empty_fetch);
  tcase_add_test(tc, test_fetch_chunks_in_one_byte_slices_land_in_place);
  tcase_add_test(tc, test_fetch_announcing_more_than_the_buffer_is_refused);
  tcase_add_test(tc, test_fetch_that_ends_short_is_data_loss);
  suite_add_tcase(s, tc);
  tc = tcase_create("qdp__reply_from_pb");
  tcase_add_test(tc, test_reply_copy_gives_empty_strings_for_absent_ones);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(decode_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
