/* test_io_npy.c — .npy headers (daemon/io/npy.c): versions 1 to 3, 1-D and 2-D shapes, complex
 * dtypes and loose syntax parsed; every bad header, bad magic and truncation refused by name; and
 * the headers written, byte for byte as NumPy writes them, round-tripping through the parser. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io_fixture.h"

/* Parses a hand-written header; returns the status and fills *hdr / *err. */
static qdp_status parse_dict(unsigned major, const char *dict, size_t data_len, struct qdp_npy *hdr,
                             struct qdp_error *err) {
  unsigned char *b;
  size_t n = make_npy(major, dict, data_len, &b);
  qdp_error_clear(err);
  qdp_status rc = io_npy_parse(b, n, hdr, err);
  free(b);
  return rc;
}

static void assert_refused(const char *dict, size_t data_len, const char *substr) {
  struct qdp_npy h;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(parse_dict(1, dict, data_len, &h, &err), QDP_ERR_INVALID_ARGUMENT);
  if (!strstr(err.msg, substr)) {
    ck_abort_msg("message '%s' lacks '%s'", err.msg, substr);
  }
}

/* ---- parsing --------------------------------------------------------------------------------- */

START_TEST(test_parse_v1_2d_float64) {
  const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }          \n";
  struct qdp_npy h;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(parse_dict(1, dict, 96, &h, &err), QDP_OK);
  ck_assert_int_eq(h.dtype, QDP_DTYPE_FLOAT64);
  ck_assert_int_eq(h.ndim, 2);
  ck_assert_uint_eq(h.rows, 3);
  ck_assert_uint_eq(h.cols, 4);
  ck_assert_uint_eq(h.data_offset, 10 + strlen(dict));
  ck_assert_uint_eq(h.data_bytes, 96);
}
END_TEST

START_TEST(test_parse_1d_is_one_row) {
  struct qdp_npy h;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(
      parse_dict(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }\n", 20, &h, &err),
      QDP_OK);
  ck_assert_int_eq(h.dtype, QDP_DTYPE_FLOAT32);
  ck_assert_int_eq(h.ndim, 1);
  ck_assert_uint_eq(h.rows, 1);
  ck_assert_uint_eq(h.cols, 5);
  ck_assert_uint_eq(h.data_bytes, 20);
}
END_TEST

START_TEST(test_parse_versions_2_and_3) {
  const char *dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }\n";
  struct qdp_npy h;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(parse_dict(2, dict, 32, &h, &err), QDP_OK);
  ck_assert_int_eq(h.dtype, QDP_DTYPE_INT64);
  ck_assert_uint_eq(h.data_offset, 12 + strlen(dict));
  ck_assert_int_eq(parse_dict(3, dict, 32, &h, &err), QDP_OK);
  ck_assert_uint_eq(h.rows, 2);
  ck_assert_int_eq(parse_dict(4, dict, 32, &h, &err), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "version 4.0 is not supported"));
}
END_TEST

START_TEST(test_parse_complex_dtypes_and_loose_syntax) {
  struct qdp_npy h;
  struct qdp_error err = QDP_ERROR_INIT;
  /* Double quotes, another key order, no trailing comma, extra spaces, a Python 2 long. */
  ck_assert_int_eq(parse_dict(1,
                              "{ \"shape\" : ( 7 , 3L ) ,\"fortran_order\":False,"
                              "\"descr\":\"<c16\"}  \n",
                              7 * 3 * 16, &h, &err),
                   QDP_OK);
  ck_assert_int_eq(h.dtype, QDP_DTYPE_COMPLEX128);
  ck_assert_uint_eq(h.rows, 7);
  ck_assert_uint_eq(h.cols, 3);
  ck_assert_int_eq(
      parse_dict(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (4,)}", 32, &h, &err),
      QDP_OK);
  ck_assert_int_eq(h.dtype, QDP_DTYPE_COMPLEX64);
  ck_assert_uint_eq(h.data_bytes, 32);
  /* An empty array is well formed; what to do with it is the caller's choice. */
  ck_assert_int_eq(
      parse_dict(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 5)}", 0, &h, &err),
      QDP_OK);
  ck_assert_uint_eq(h.data_bytes, 0);
}
END_TEST

START_TEST(test_parse_refuses_each_bad_header_by_name) {
  assert_refused("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", 16,
                 "dtype '>f8' is not supported; use little-endian float32 or float64");
  assert_refused("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16,
                 "dtype '|O' is not supported");
  assert_refused("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 16,
                 "dtype '<i4' is not supported");
  assert_refused("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2,), }", 16,
                 "structured");
  assert_refused("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2), }", 32,
                 "fortran_order is True");
  assert_refused("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2, 2), }", 64,
                 "3 dimensions");
  assert_refused("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 8, "0 dimensions");
  assert_refused("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 0,
                 "overflows 64 bits");
  assert_refused("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0,
                 "is over 18446744073709551615");
  /* 2 x 3 float64 needs 48 B; 47 are there. */
  assert_refused("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 47,
                 "data is 47 B but shape 2 x 3 of '<f8' needs 48 B");
  assert_refused("{'descr': '<f8', 'shape': (2,), }", 16, "'fortran_order' key is missing");
  assert_refused("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'x': 1}", 16,
                 "key 'x' is unknown or repeated");
  assert_refused("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", 16,
                 "key 'descr' is unknown or repeated");
  assert_refused("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)} junk", 16,
                 "text after the closing '}'");
  assert_refused("{'descr': '<f8', 'fortran_order': False, 'shape': (2,", 16, "malformed");
}
END_TEST

START_TEST(test_parse_refuses_bad_magic_and_truncation) {
  struct qdp_npy h;
  struct qdp_error err = QDP_ERROR_INIT;
  unsigned char *b;
  size_t n = make_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n", 8, &b);
  b[1] = 'X';
  ck_assert_int_eq(io_npy_parse(b, n, &h, &err), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "bad magic"));
  b[1] = 'N';
  ck_assert_int_eq(io_npy_parse(b, n, &h, &err), QDP_OK);
  /* Cut inside the header text. */
  ck_assert_int_eq(io_npy_parse(b, 30, &h, &err), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "truncated .npy header: it ends at byte 68"));
  ck_assert_ptr_nonnull(strstr(err.msg, "the file has 30 B"));
  /* Cut before the length field. */
  ck_assert_int_eq(io_npy_parse(b, 9, &h, &err), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "the file has 9 B"));
  /* A length field that claims more than the accepted maximum. */
  b[8] = 0xff;
  b[9] = 0xff;
  b[6] = 2;
  ck_assert_int_eq(io_npy_parse(b, n, &h, &err), QDP_ERR_INVALID_ARGUMENT);
  free(b);
}
END_TEST

/* ---- header writing -------------------------------------------------------------------------- */

START_TEST(test_header_matches_numpy_byte_for_byte) {
  /* numpy.save(np.zeros((3, 4))) writes this: magic, version 1.0, length 118 (0x76), the dict,
   * spaces to byte 127 and a newline, so the data starts 64-byte aligned at 128. */
  char want[128];
  const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }";
  memcpy(want, "\x93NUMPY\x01\x00\x76\x00", 10);
  memcpy(want + 10, dict, strlen(dict));
  memset(want + 10 + strlen(dict), ' ', 128 - 10 - strlen(dict) - 1);
  want[127] = '\n';
  char buf[IO_NPY_HEADER_CAP];
  size_t len = 0;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(io_npy_header(QDP_DTYPE_FLOAT64, 2, 3, 4, buf, sizeof buf, &len, &err), QDP_OK);
  ck_assert_uint_eq(len, 128);
  ck_assert_int_eq(memcmp(buf, want, 128), 0);
  /* A buffer one byte short is refused with both numbers. */
  ck_assert_int_eq(io_npy_header(QDP_DTYPE_FLOAT64, 2, 3, 4, buf, 127, &len, &err),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "needs 128 B but the buffer has 127 B"));
}
END_TEST

START_TEST(test_header_round_trips_through_parse) {
  static const struct {
    qdp_dtype t;
    int ndim;
    uint64_t rows, cols;
  } cases[] = {
      {QDP_DTYPE_FLOAT32, 1, 1, 7},
      {QDP_DTYPE_FLOAT64, 2, 5, 3},
      {QDP_DTYPE_INT64, 1, 1, 0},
      {QDP_DTYPE_COMPLEX64, 2, 1, 1024},
      {QDP_DTYPE_COMPLEX128, 2, 65536, 65536},
      {QDP_DTYPE_FLOAT64, 2, UINT64_MAX / 8, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char buf[IO_NPY_HEADER_CAP];
    size_t len = 0;
    struct qdp_error err = QDP_ERROR_INIT;
    ck_assert_int_eq(io_npy_header(cases[i].t, cases[i].ndim, cases[i].rows, cases[i].cols, buf,
                                   sizeof buf, &len, &err),
                     QDP_OK);
    ck_assert_uint_eq(len % 64, 0);
    ck_assert_int_eq(buf[len - 1], '\n');
    /* Parse the header alone; the data check needs the elements, so only the small cases get
     * them. */
    uint64_t data = cases[i].rows * cases[i].cols * qdp_dtype_size(cases[i].t);
    size_t n = len + (data < 100000 ? (size_t)data : 0);
    char *img = calloc(1, n);
    memcpy(img, buf, len);
    struct qdp_npy h;
    qdp_status rc = io_npy_parse(img, n, &h, &err);
    if (data < 100000) {
      ck_assert_int_eq(rc, QDP_OK);
      ck_assert_int_eq(h.dtype, cases[i].t);
      ck_assert_int_eq(h.ndim, cases[i].ndim);
      ck_assert_uint_eq(h.rows, cases[i].rows);
      ck_assert_uint_eq(h.cols, cases[i].cols);
      ck_assert_uint_eq(h.data_offset, len);
      ck_assert_uint_eq(h.data_bytes, data);
    } else {
      /* Everything but the data was accepted: the refusal is about the data's length. */
      ck_assert_int_eq(rc, QDP_ERR_INVALID_ARGUMENT);
      ck_assert_ptr_nonnull(strstr(err.msg, "data is 0 B"));
      ck_assert_uint_eq(err.need_bytes, data);
    }
    free(img);
  }
  char buf[IO_NPY_HEADER_CAP];
  size_t len;
  ck_assert_int_eq(io_npy_header(QDP_DTYPE_FLOAT64, 1, 2, 3, buf, sizeof buf, &len, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(io_npy_header(QDP_DTYPE_FLOAT64, 3, 2, 3, buf, sizeof buf, &len, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(io_npy_header(QDP_DTYPE_UNSPECIFIED, 1, 1, 3, buf, sizeof buf, &len, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(
      io_npy_header(QDP_DTYPE_FLOAT64, 2, UINT64_MAX / 8 + 1, 1, buf, sizeof buf, &len, NULL),
      QDP_ERR_INVALID_ARGUMENT);
}
END_TEST

void io_add_npy_parse(TCase *tc) {
  tcase_add_test(tc, test_parse_v1_2d_float64);
  tcase_add_test(tc, test_parse_1d_is_one_row);
  tcase_add_test(tc, test_parse_versions_2_and_3);
  tcase_add_test(tc, test_parse_complex_dtypes_and_loose_syntax);
  tcase_add_test(tc, test_parse_refuses_each_bad_header_by_name);
  tcase_add_test(tc, test_parse_refuses_bad_magic_and_truncation);
}

void io_add_npy_header(TCase *tc) {
  tcase_add_test(tc, test_header_matches_numpy_byte_for_byte);
  tcase_add_test(tc, test_header_round_trips_through_parse);
}
