/* Unit tests of daemon/rpc/codec.{c,h}: protobuf-c <-> grpc_byte_buffer, status mapping, the
 * error detail, and the hand-built FetchChunk checked against protobuf-c's own parser; and of
 * the checks of requests' fields (daemon/job/shape.c): input shapes, upload limits, output dtype,
 * placement, path confinement. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "codec.h"
#include "qdp_size.h"
#include "qdp_wire.h"
#include "qdp.pb-c.h"
#include "job/job.h"

/* Joins a byte buffer's slices, for comparisons. */
static size_t flatten(grpc_byte_buffer *bb, uint8_t *out, size_t cap) {
  grpc_byte_buffer_reader r;
  ck_assert(grpc_byte_buffer_reader_init(&r, bb));
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  size_t n = GRPC_SLICE_LENGTH(s);
  ck_assert_uint_le(n, cap);
  memcpy(out, GRPC_SLICE_START_PTR(s), n);
  grpc_slice_unref(s);
  return n;
}

START_TEST(test_pack_then_unpack_across_slices_gives_the_same_request) {
  double values[5] = {0.5, -1.25, 3.0, 1e-300, 7.0};
  Qdp__Input in = QDP__INPUT__INIT;
  in.dtype = QDP__DTYPE__DTYPE_FLOAT64;
  in.rows = 1;
  in.cols = 5;
  in.source_case = QDP__INPUT__SOURCE_DATA;
  in.data.data = (uint8_t *)values;
  in.data.len = sizeof values;
  Qdp__Placement pl = QDP__PLACEMENT__INIT;
  char *devs[] = {"cpu:0", "cpu:1"};
  pl.policy = QDP__POLICY__POLICY_EVEN;
  pl.n_devices = 2;
  pl.devices = devs;
  Qdp__EncodeRequest req = QDP__ENCODE_REQUEST__INIT;
  req.encoding = QDP__ENCODING__ENCODING_AMPLITUDE;
  req.qubits = 3;
  req.output_dtype = QDP__DTYPE__DTYPE_COMPLEX64;
  req.input = &in;
  req.placement = &pl;
  req.ttl_seconds = 600;
  req.label = "unit";

  grpc_byte_buffer *one = qdp_wire_pack(&req.base);
  ck_assert_ptr_nonnull(one);
  uint8_t flat[4096];
  size_t n = flatten(one, flat, sizeof flat);
  ck_assert_uint_eq(n, qdp__encode_request__get_packed_size(&req));
  grpc_byte_buffer_destroy(one);

  /* The same bytes cut into three slices at odd places, as gRPC may deliver them. */
  grpc_slice parts[3] = {grpc_slice_from_copied_buffer((const char *)flat, 7),
                         grpc_slice_from_copied_buffer((const char *)flat + 7, 30),
                         grpc_slice_from_copied_buffer((const char *)flat + 37, n - 37)};
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(parts, 3);
  for (int i = 0; i < 3; i++) {
    grpc_slice_unref(parts[i]);
  }
  ProtobufCMessage *m = NULL;
  ck_assert_int_eq(rpc_codec_unpack(bb, &qdp__encode_request__descriptor, &m, NULL), QDP_OK);
  grpc_byte_buffer_destroy(bb);
  Qdp__EncodeRequest *got = (Qdp__EncodeRequest *)m;
  ck_assert_int_eq(got->encoding, QDP__ENCODING__ENCODING_AMPLITUDE);
  ck_assert_uint_eq(got->qubits, 3);
  ck_assert_int_eq(got->output_dtype, QDP__DTYPE__DTYPE_COMPLEX64);
  ck_assert_uint_eq(got->ttl_seconds, 600);
  ck_assert_str_eq(got->label, "unit");
  ck_assert_ptr_nonnull(got->input);
  ck_assert_int_eq(got->input->source_case, QDP__INPUT__SOURCE_DATA);
  ck_assert_uint_eq(got->input->data.len, sizeof values);
  ck_assert_mem_eq(got->input->data.data, values, sizeof values);
  ck_assert_uint_eq(got->placement->n_devices, 2);
  ck_assert_str_eq(got->placement->devices[1], "cpu:1");
  rpc_codec_free(m);
}
END_TEST

START_TEST(test_unpack_refuses_garbage_and_a_missing_message) {
  /* 0x0a 0x10: field 1, length-delimited, 16 bytes follow, but only 2 do. */
  const uint8_t garbage[] = {0x0a, 0x10, 0x01, 0x02};
  grpc_slice s = grpc_slice_from_copied_buffer((const char *)garbage, sizeof garbage);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  ProtobufCMessage *m = (ProtobufCMessage *)0x1;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(rpc_codec_unpack(bb, &qdp__encode_request__descriptor, &m, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "request");
  ck_assert_ptr_nonnull(strstr(e.msg, "qdp.EncodeRequest"));
  ck_assert_ptr_eq(m, (ProtobufCMessage *)0x1); /* untouched on failure */
  grpc_byte_buffer_destroy(bb);
  ck_assert_int_eq(rpc_codec_unpack(NULL, &qdp__state_ref__descriptor, &m, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "no qdp.StateRef"));
  /* An empty message is a valid proto3 message with every field at its default. */
  grpc_byte_buffer *empty = grpc_raw_byte_buffer_create(NULL, 0);
  ck_assert_int_eq(rpc_codec_unpack(empty, &qdp__state_ref__descriptor, &m, NULL), QDP_OK);
  ck_assert_str_eq(((Qdp__StateRef *)m)->handle, "");
  rpc_codec_free(m);
  grpc_byte_buffer_destroy(empty);
  rpc_codec_free(NULL);
}
END_TEST

START_TEST(test_status_maps_grpc_codes_and_sends_local_causes_as_internal) {
  for (int i = 0; i <= 16; i++) {
    ck_assert_int_eq(rpc_codec_grpc_status((qdp_status)i), i);
  }
  ck_assert_int_eq(rpc_codec_grpc_status(QDP_ERR_RESOURCE_EXHAUSTED),
                   GRPC_STATUS_RESOURCE_EXHAUSTED);
  ck_assert_int_eq(rpc_codec_grpc_status(QDP_ERR_UNAUTHENTICATED), GRPC_STATUS_UNAUTHENTICATED);
  ck_assert_int_eq(rpc_codec_grpc_status(QDP_ERR_CUDA), GRPC_STATUS_INTERNAL);
  ck_assert_int_eq(rpc_codec_grpc_status(QDP_ERR_SYSTEM), GRPC_STATUS_INTERNAL);
  ck_assert_int_eq(rpc_codec_grpc_status((qdp_status)17), GRPC_STATUS_INTERNAL);
  ck_assert_int_eq(rpc_codec_grpc_status((qdp_status)-1), GRPC_STATUS_INTERNAL);
}
END_TEST

START_TEST(test_error_detail_carries_every_number) {
  struct qdp_error e = QDP_ERROR_INIT;
  qdp_error_set(&e, QDP_ERR_RESOURCE_EXHAUSTED, "qubits", "cpu:1 needs %d B", 5);
  e.rank = 2;
  e.device = 1;
  e.cause = 12;
  e.need_bytes = 36507222016ull;
  e.free_bytes = 30923764531ull;
  grpc_slice s = rpc_codec_error_detail(&e);
  Qdp__ErrorDetail *d =
      qdp__error_detail__unpack(NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
  ck_assert_ptr_nonnull(d);
  ck_assert_str_eq(d->code_name, "QDP_ERR_RESOURCE_EXHAUSTED");
  ck_assert_str_eq(d->field, "qubits");
  ck_assert_int_eq(d->rank, 2);
  ck_assert_int_eq(d->device, 1);
  ck_assert_int_eq(d->cause, 12);
  ck_assert_uint_eq(d->need_bytes, 36507222016ull);
  ck_assert_uint_eq(d->free_bytes, 30923764531ull);
  qdp__error_detail__free_unpacked(d, NULL);
  grpc_slice_unref(s);

  /* A field that fills its whole array (no NUL) is cut at the array, not read past it. */
  struct qdp_error f = QDP_ERROR_INIT;
  f.code = QDP_ERR_CUDA;
  memset(f.field, 'x', sizeof f.field);
  s = rpc_codec_error_detail(&f);
  d = qdp__error_detail__unpack(NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
  ck_assert_ptr_nonnull(d);
  ck_assert_uint_eq(strlen(d->field), sizeof f.field);
  ck_assert_str_eq(d->code_name, "QDP_ERR_CUDA");
  ck_assert_int_eq(d->rank, -1);
  qdp__error_detail__free_unpacked(d, NULL);
  grpc_slice_unref(s);
}
END_TEST

/* Builds a chunk, fills its data through the returned pointer, and parses it with protobuf-c. */
static void check_chunk(uint64_t offset, int dtype, uint64_t total, size_t nbytes) {
  uint8_t *data = NULL;
  grpc_byte_buffer *bb = qdp_wire_fetch_chunk(offset, dtype, total, nbytes, &data);
  ck_assert_ptr_nonnull(bb);
  ck_assert_ptr_nonnull(data);
  for (size_t i = 0; i < nbytes; i++) {
    data[i] = (uint8_t)(i * 7 + 3);
  }
  ProtobufCMessage *m = NULL;
  ck_assert_int_eq(rpc_codec_unpack(bb, &qdp__fetch_chunk__descriptor, &m, NULL), QDP_OK);
  Qdp__FetchChunk *c = (Qdp__FetchChunk *)m;
  ck_assert_uint_eq(c->offset, offset);
  ck_assert_int_eq(c->dtype, dtype);
  ck_assert_uint_eq(c->total, total);
  ck_assert_uint_eq(c->data.len, nbytes);
  for (size_t i = 0; i < nbytes; i++) {
    if (c->data.data[i] != (uint8_t)(i * 7 + 3)) {
      ck_abort_msg("data byte %zu is %u, expected %u", i, c->data.data[i], (uint8_t)(i * 7 + 3));
    }
  }
  rpc_codec_free(m);
  /* libqdp's reader (common/qdp_wire.c) takes the same bytes on its direct path. */
  struct qdp_wire_reader k;
  struct qdp_wire_chunk h;
  ck_assert_int_eq(qdp_wire_fetch_chunk_open(bb, &k, &h), 1);
  ck_assert_uint_eq(h.offset, offset);
  ck_assert_int_eq(h.dtype, dtype);
  ck_assert_uint_eq(h.total, total);
  ck_assert_uint_eq(h.data_len, nbytes);
  uint8_t *back = malloc(nbytes + 1);
  ck_assert_ptr_nonnull(back);
  qdp_wire_reader_copy(&k, back, nbytes);
  for (size_t i = 0; i < nbytes; i++) {
    if (back[i] != (uint8_t)(i * 7 + 3)) {
      ck_abort_msg("read back byte %zu is %u, expected %u", i, back[i], (uint8_t)(i * 7 + 3));
    }
  }
  free(back);
  qdp_wire_reader_close(&k);
  grpc_byte_buffer_destroy(bb);
}

/* protobuf-c writes fields in number order, so data (2) comes before dtype and total: a valid
 * FetchChunk that the direct reader leaves to protobuf-c. */
START_TEST(test_fetch_chunk_reader_leaves_other_layouts_to_protobuf) {
  Qdp__FetchChunk c = QDP__FETCH_CHUNK__INIT;
  uint8_t two[2] = {1, 2};
  c.offset = 1;
  c.dtype = QDP__DTYPE__DTYPE_COMPLEX64;
  c.total = 3;
  c.data.data = two;
  c.data.len = sizeof two;
  grpc_byte_buffer *bb = qdp_wire_pack(&c.base);
  struct qdp_wire_reader k;
  struct qdp_wire_chunk h;
  ck_assert_int_eq(qdp_wire_fetch_chunk_open(bb, &k, &h), 0);
  qdp_wire_reader_close(&k);
  qdp_wire_reader_close(&k); /* closing twice is harmless */
  grpc_byte_buffer_destroy(bb);
}
END_TEST

START_TEST(test_fetch_chunk_parses_as_a_fetch_chunk_at_any_size) {
  /* 1 and 8 bytes would fit an inlined slice: the data must still land in the message. */
  check_chunk(0, QDP__DTYPE__DTYPE_COMPLEX64, 1, 8);
  check_chunk(5, QDP__DTYPE__DTYPE_COMPLEX128, 6, 1);
  check_chunk(0, QDP__DTYPE__DTYPE_COMPLEX128, 0, 0);
  /* Offsets and totals whose varints take 5 and 10 bytes, and a 1 MiB + 3 payload. */
  check_chunk(UINT64_C(1) << 33, QDP__DTYPE__DTYPE_COMPLEX64, UINT64_MAX, 1048579);
}
END_TEST

/* ---- request translation ----------------------------------------------------------------------
 */

START_TEST(test_input_shape_derives_rows_and_cols_and_refuses_mismatch) {
  uint64_t r = 0, c = 0;
  struct qdp_error e = QDP_ERROR_INIT;
  /* 6 float64 = 48 bytes: rows 0 -> 1, cols 0 -> 6. */
  ck_assert_int_eq(job_input_shape(QDP_DTYPE_FLOAT64, 0, 0, 48, "input", &r, &c, NULL), QDP_OK);
  ck_assert_uint_eq(r, 1);
  ck_assert_uint_eq(c, 6);
  ck_assert_int_eq(job_input_shape(QDP_DTYPE_FLOAT64, 3, 0, 48, "input", &r, &c, NULL), QDP_OK);
  ck_assert_uint_eq(r, 3);
  ck_assert_uint_eq(c, 2);
  ck_assert_int_eq(job_input_shape(QDP_DTYPE_FLOAT32, 2, 6, 48, "input", &r, &c, NULL), QDP_OK);
  ck_assert_uint_eq(r, 2);
  ck_assert_uint_eq(c, 6);
  ck_assert_int_eq(job_input_shape(QDP_DTYPE_INT64, 0, 0, 8, "input", &r, &c, NULL), QDP_OK);
  ck_assert_uint_eq(c, 1);
  /* 5 rows do not divide 6 values. */
  ck_assert_int_eq(job_input_shape(QDP_DTYPE_FLOAT64, 5, 0, 48, "input", &r, &c, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "6 values"));
  /* rows * cols = 2 * 4 = 8, but 6 values came. */
  ck_assert_int_eq(job_input_shape(QDP_DTYPE_FLOAT64, 2, 4, 48, "input", &r, &c, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "input.cols");
  /* rows * cols overflows 64 bits: refused, not wrapped to a match. */
  ck_assert_int_eq(job_input_shape(QDP_DTYPE_FLOAT64, UINT64_C(1) << 33, UINT64_C(1) << 31, 0x10,
                                   "input", &r, &c, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(job_input_shape(QDP_DTYPE_FLOAT64, 0, 0, 0, "input", &r, &c, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "no values"));
  ck_assert_int_eq(job_input_shape(QDP_DTYPE_FLOAT64, 0, 0, 12, "input", &r, &c, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "12 bytes"));
  ck_assert_int_eq(job_input_shape(QDP_DTYPE_UNSPECIFIED, 0, 0, 8, "input", &r, &c, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "input.dtype");
  ck_assert_int_eq(job_input_shape(QDP_DTYPE_COMPLEX64, 0, 0, 8, "input", &r, &c, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "complex64"));
}
END_TEST

START_TEST(test_declared_shape_needs_cols_and_a_64_bit_size) {
  uint64_t r = 0, c = 0;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_declared_shape(QDP_DTYPE_FLOAT32, 0, 1 << 20, "input", &r, &c, NULL),
                   QDP_OK);
  ck_assert_uint_eq(r, 1);
  ck_assert_uint_eq(c, 1 << 20);
  ck_assert_int_eq(job_declared_shape(QDP_DTYPE_FLOAT64, 3, 5, "input", &r, &c, NULL), QDP_OK);
  ck_assert_uint_eq(r, 3);
  ck_assert_uint_eq(c, 5);
  ck_assert_int_eq(job_declared_shape(QDP_DTYPE_FLOAT64, 3, 0, "input", &r, &c, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "input.cols");
  /* 2^61 values of 8 bytes: 2^64 bytes. */
  ck_assert_int_eq(job_declared_shape(QDP_DTYPE_FLOAT64, UINT64_C(1) << 31, UINT64_C(1) << 30,
                                      "input", &r, &c, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(job_declared_shape(QDP_DTYPE_UNSPECIFIED, 1, 1, "input", &r, &c, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "input.dtype");
}
END_TEST

START_TEST(test_upload_limit_is_the_declared_size_or_the_configured_cap) {
  uint64_t lim = 0;
  bool exact = false;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_upload_limit(QDP_DTYPE_FLOAT32, 4, 1000, 1 << 20, &lim, &exact, NULL),
                   QDP_OK);
  ck_assert_uint_eq(lim, 16000);
  ck_assert(exact);
  ck_assert_int_eq(job_upload_limit(QDP_DTYPE_FLOAT64, 0, 7, 1 << 20, &lim, &exact, NULL), QDP_OK);
  ck_assert_uint_eq(lim, 56);
  ck_assert_int_eq(job_upload_limit(QDP_DTYPE_FLOAT64, 9, 0, 1 << 20, &lim, &exact, NULL), QDP_OK);
  ck_assert_uint_eq(lim, 1 << 20);
  ck_assert(!exact);
  /* 1000 x 1000 float64 = 8000000 B > 1 MiB. */
  ck_assert_int_eq(job_upload_limit(QDP_DTYPE_FLOAT64, 1000, 1000, 1 << 20, &lim, &exact, &e),
                   QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_uint_eq(e.need_bytes, 8000000);
  ck_assert_uint_eq(e.free_bytes, 1 << 20);
  ck_assert_ptr_nonnull(strstr(e.msg, "declares 7.6 MiB (1000 x 1000 float64)"));
  ck_assert_ptr_nonnull(strstr(e.msg, "max_upload_bytes is 1 MiB"));
  ck_assert_int_eq(job_upload_limit(QDP_DTYPE_FLOAT64, UINT64_MAX, 3, UINT64_MAX, &lim, &exact, &e),
                   QDP_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_output_dtype_defaults_to_complex128_and_refuses_real_types) {
  qdp_dtype t = QDP_DTYPE_UNSPECIFIED;
  ck_assert_int_eq(job_output_dtype(QDP_DTYPE_UNSPECIFIED, &t, NULL), QDP_OK);
  ck_assert_int_eq(t, QDP_DTYPE_COMPLEX128);
  ck_assert_int_eq(job_output_dtype(QDP_DTYPE_COMPLEX64, &t, NULL), QDP_OK);
  ck_assert_int_eq(t, QDP_DTYPE_COMPLEX64);
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_output_dtype(QDP_DTYPE_FLOAT64, &t, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "output_dtype");
  ck_assert_int_eq(job_output_dtype(99, &t, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "99"));
}
END_TEST

/* A request's placement as job/ takes it. */
#define PLACEMENT(pl) \
  (&(struct job_placement){(int)(pl).policy, (const char *const *)(pl).devices, (pl).n_devices})

START_TEST(test_placement_maps_names_to_indices_in_order) {
  struct plan_device devs[3] = {{0, 0, "cpu:0", 100}, {0, 1, "cpu:1", 100}, {0, 2, "cpu:2", 100}};
  size_t sub[3] = {9, 9, 9};
  size_t n = 99;
  enum plan_policy pol = PLAN_BATCH;
  ck_assert_int_eq(job_placement(NULL, devs, 3, &pol, sub, &n, NULL), QDP_OK);
  ck_assert_int_eq(pol, PLAN_AUTO);
  ck_assert_uint_eq(n, 0);
  Qdp__Placement pl = QDP__PLACEMENT__INIT;
  char *names[] = {"cpu:2", "cpu:0"};
  pl.policy = QDP__POLICY__POLICY_UNEVEN;
  pl.devices = names;
  pl.n_devices = 2;
  ck_assert_int_eq(job_placement(PLACEMENT(pl), devs, 3, &pol, sub, &n, NULL), QDP_OK);
  ck_assert_int_eq(pol, PLAN_UNEVEN);
  ck_assert_uint_eq(n, 2);
  ck_assert_uint_eq(sub[0], 2);
  ck_assert_uint_eq(sub[1], 0);
  struct qdp_error e = QDP_ERROR_INIT;
  char *bad[] = {"cuda:0"};
  pl.devices = bad;
  pl.n_devices = 1;
  ck_assert_int_eq(job_placement(PLACEMENT(pl), devs, 3, &pol, sub, &n, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "placement.devices");
  ck_assert_ptr_nonnull(strstr(e.msg, "'cuda:0'"));
  ck_assert_ptr_nonnull(strstr(e.msg, "cpu:0, cpu:1, cpu:2"));
  char *twice[] = {"cpu:1", "cpu:1"};
  pl.devices = twice;
  pl.n_devices = 2;
  ck_assert_int_eq(job_placement(PLACEMENT(pl), devs, 3, &pol, sub, &n, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "twice"));
  pl.n_devices = 0;
  pl.policy = (Qdp__Policy)7;
  ck_assert_int_eq(job_placement(PLACEMENT(pl), devs, 3, &pol, sub, &n, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "placement.policy");
  ck_assert_uint_eq(job_ttl_ms(0), 0);
  ck_assert_uint_eq(job_ttl_ms(90), 90000);
  ck_assert_uint_eq(job_ttl_ms(UINT64_MAX / 999), UINT64_MAX);
}
END_TEST

START_TEST(test_unpack_refuses_a_nul_inside_a_string_at_any_depth) {
  /* StateRef{handle: "s1", token: "TOKEN\0junk"}: protobuf-c would hand the token over as
   * "TOKEN", and a token compare would see only that much. */
  const uint8_t ref[] = {0x0a, 2,   's', '1', 0x12, 10,  'T', 'O',
                         'K',  'E', 'N', 0,   'j',  'u', 'n', 'k'};
  ProtobufCMessage *m = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(rpc_codec_unpack_bytes(ref, sizeof ref, &qdp__state_ref__descriptor, &m, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "token");
  ck_assert_ptr_nonnull(strstr(e.msg, "NUL"));
  ck_assert_ptr_null(m);
  /* The same inside a nested message: FetchRequest{state: StateRef{...}}. */
  uint8_t fetch[2 + sizeof ref];
  fetch[0] = 0x0a;
  fetch[1] = (uint8_t)sizeof ref;
  memcpy(fetch + 2, ref, sizeof ref);
  ck_assert_int_eq(
      rpc_codec_unpack_bytes(fetch, sizeof fetch, &qdp__fetch_request__descriptor, &m, &e),
      QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "token");
  /* A NUL in bytes is data, not a cut: Input{data: "\0\0..."} parses. */
  const uint8_t in[] = {0x22, 8, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
  ck_assert_int_eq(rpc_codec_unpack_bytes(in, sizeof in, &qdp__input__descriptor, &m, &e), QDP_OK);
  ck_assert_uint_eq(((Qdp__Input *)m)->data.len, 8);
  rpc_codec_free(m);
}
END_TEST

START_TEST(test_sizes_read_as_a_person_reads_them) {
  char b[QDP_SIZE_TEXT], c[QDP_SIZE_TEXT];
  const struct {
    uint64_t bytes;
    const char *text;
  } cases[] = {
      {0, "0 B"},
      {1023, "1023 B"},
      {1024, "1 KiB"},
      {1536, "1.5 KiB"},          /* 1.5 x 1024 */
      {1048575, "1024 KiB"},      /* 1023.999 KiB, rounded as printed */
      {5583457484ull, "5.2 GiB"}, /* 5.19999 GiB */
      {1ull << 44, "16 TiB"},
      {UINT64_MAX, "16 EiB"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ck_assert_str_eq(qdp_size_text(b, sizeof b, cases[i].bytes), cases[i].text);
  }
  /* A pair that would read the same reads exactly; one that differs stays short. */
  qdp_size_text_pair(b, c, sizeof b, 8397808, 8397807);
  ck_assert_str_eq(b, "8397808 B");
  ck_assert_str_eq(c, "8397807 B");
  qdp_size_text_pair(b, c, sizeof b, 2048, 1024);
  ck_assert_str_eq(b, "2 KiB");
  ck_assert_str_eq(c, "1 KiB");
  qdp_size_text_pair(b, c, sizeof b, 4096, 4096);
  ck_assert_str_eq(b, "4 KiB");
  ck_assert_str_eq(c, "4 KiB");
}
END_TEST

static Suite *codec_suite(void) {
  Suite *s = suite_create("codec");
  TCase *tc = tcase_create("messages");
  tcase_add_test(tc, test_pack_then_unpack_across_slices_gives_the_same_request);
  tcase_add_test(tc, test_unpack_refuses_garbage_and_a_missing_message);
  tcase_add_test(tc, test_unpack_refuses_a_nul_inside_a_string_at_any_depth);
  tcase_add_test(tc, test_fetch_chunk_parses_as_a_fetch_chunk_at_any_size);
  tcase_add_test(tc, test_fetch_chunk_reader_leaves_other_layouts_to_protobuf);
  suite_add_tcase(s, tc);
  tc = tcase_create("status");
  tcase_add_test(tc, test_status_maps_grpc_codes_and_sends_local_causes_as_internal);
  tcase_add_test(tc, test_error_detail_carries_every_number);
  tcase_add_test(tc, test_sizes_read_as_a_person_reads_them);
  suite_add_tcase(s, tc);
  tc = tcase_create("request");
  tcase_add_test(tc, test_input_shape_derives_rows_and_cols_and_refuses_mismatch);
  tcase_add_test(tc, test_declared_shape_needs_cols_and_a_64_bit_size);
  tcase_add_test(tc, test_upload_limit_is_the_declared_size_or_the_configured_cap);
  tcase_add_test(tc, test_output_dtype_defaults_to_complex128_and_refuses_real_types);
  tcase_add_test(tc, test_placement_maps_names_to_indices_in_order);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(codec_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
