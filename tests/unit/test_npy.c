/* Unit tests for common/qdp_npy.c, the .npy header codec the daemon and libqdp share: headers
 * byte for byte as numpy.save writes them, round trips, the data check, and the cases where the
 * daemon's and libqdp's former readers disagreed (each now refused, or accepted, by both). The
 * daemon's wording of every refusal is tested through io_npy_parse in test_io.c.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qdp_npy.h"

/* A version `major`.0 image of `dict` padded to 64 bytes with a final '\n'; returns its length. */
static size_t image(unsigned char *buf, size_t cap, unsigned major, const char *dict) {
  size_t pre = major == 1 ? 10 : 12;
  size_t n = strlen(dict);
  size_t total = (pre + n + 1 + 63) / 64 * 64;
  ck_assert_uint_le(total, cap);
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  size_t hl = total - pre;
  for (size_t i = 0; i < pre - 8; i++) {
    buf[8 + i] = (unsigned char)(hl >> (8 * i));
  }
  memcpy(buf + pre, dict, n);
  memset(buf + pre + n, ' ', total - pre - n - 1);
  buf[total - 1] = '\n';
  return total;
}

static void assert_refused(const char *dict, const char *substr) {
  unsigned char buf[512];
  size_t n = image(buf, sizeof buf, 1, dict);
  struct qdp_npy h;
  struct qdp_npy_error e;
  ck_assert_int_eq(qdp_npy_parse(buf, n, &h, &e), QDP_ERR_INVALID_ARGUMENT);
  if (!strstr(e.msg, substr)) {
    ck_abort_msg("message '%s' lacks '%s'", e.msg, substr);
  }
}

START_TEST(test_format_is_byte_identical_to_numpy_save) {
  /* np.save(f, np.zeros(8, np.complex64)) and np.zeros((3, 1024), np.complex128), numpy 1.24. */
  static const char want1[] =
      "\x93NUMPY\x01\x00v\x00{'descr': '<c8', 'fortran_order': False, 'shape': (8,), }";
  static const char want2[] =
      "\x93NUMPY\x01\x00v\x00{'descr': '<c16', 'fortran_order': False, 'shape': (3, 1024), }";
  char buf[QDP_NPY_HEADER_CAP];
  size_t n;
  struct qdp_npy_error e;
  ck_assert_int_eq(qdp_npy_format(QDP_DTYPE_COMPLEX64, 1, 1, 8, buf, sizeof buf, &n, &e), QDP_OK);
  ck_assert_uint_eq(n, 128);
  ck_assert_int_eq(memcmp(buf, want1, sizeof want1 - 1), 0);
  for (size_t i = sizeof want1 - 1; i < 127; i++) {
    ck_assert_int_eq(buf[i], ' ');
  }
  ck_assert_int_eq(buf[127], '\n');
  ck_assert_int_eq(qdp_npy_format(QDP_DTYPE_COMPLEX128, 2, 3, 1024, buf, sizeof buf, &n, &e),
                   QDP_OK);
  ck_assert_uint_eq(n, 128);
  ck_assert_int_eq(memcmp(buf, want2, sizeof want2 - 1), 0);
}
END_TEST

START_TEST(test_format_refuses_what_has_no_npy_form) {
  char buf[QDP_NPY_HEADER_CAP];
  size_t n;
  struct qdp_npy_error e;
  ck_assert_int_eq(qdp_npy_format(QDP_DTYPE_UNSPECIFIED, 1, 1, 3, buf, sizeof buf, &n, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "dtype");
  ck_assert_int_eq(qdp_npy_format(QDP_DTYPE_FLOAT64, 1, 2, 3, buf, sizeof buf, &n, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "has 1 row, not 2"));
  ck_assert_int_eq(qdp_npy_format(QDP_DTYPE_FLOAT64, 3, 1, 3, buf, sizeof buf, &n, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(
      qdp_npy_format(QDP_DTYPE_FLOAT64, 2, UINT64_MAX / 8 + 1, 1, buf, sizeof buf, &n, &e),
      QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "overflow 64 bits"));
  ck_assert_int_eq(qdp_npy_format(QDP_DTYPE_FLOAT64, 2, 3, 4, buf, 127, &n, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "needs 128 B but the buffer has 127 B"));
  /* reterr may be NULL. */
  ck_assert_int_eq(qdp_npy_format(QDP_DTYPE_FLOAT64, 0, 1, 1, buf, sizeof buf, &n, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_format_round_trips_through_parse) {
  static const struct {
    qdp_dtype t;
    int ndim;
    uint64_t rows, cols;
  } cases[] = {
      {QDP_DTYPE_FLOAT32, 1, 1, 0},
      {QDP_DTYPE_FLOAT64, 2, 7, 3},
      {QDP_DTYPE_INT64, 1, 1, 123456789},
      {QDP_DTYPE_COMPLEX64, 2, 1, 1},
      {QDP_DTYPE_COMPLEX128, 2, UINT64_MAX / 16, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char buf[QDP_NPY_HEADER_CAP];
    size_t n;
    ck_assert_int_eq(qdp_npy_format(cases[i].t, cases[i].ndim, cases[i].rows, cases[i].cols, buf,
                                    sizeof buf, &n, NULL),
                     QDP_OK);
    struct qdp_npy h;
    ck_assert_int_eq(qdp_npy_parse(buf, n, &h, NULL), QDP_OK);
    ck_assert_int_eq(h.dtype, cases[i].t);
    ck_assert_int_eq(h.ndim, cases[i].ndim);
    ck_assert_uint_eq(h.rows, cases[i].rows);
    ck_assert_uint_eq(h.cols, cases[i].cols);
    ck_assert_uint_eq(h.data_offset, n);
    ck_assert_uint_eq(h.data_bytes, cases[i].rows * cases[i].cols * qdp_dtype_size(cases[i].t));
  }
}
END_TEST

START_TEST(test_parse_reads_versions_and_the_whole_grammar) {
  unsigned char buf[512];
  struct qdp_npy h;
  size_t n = image(buf, sizeof buf, 3,
                   "{ \"shape\" : ( 7 , 3L ) ,\"fortran_order\":False,\"descr\":\"<c16\"}  ");
  ck_assert_int_eq(qdp_npy_parse(buf, n, &h, NULL), QDP_OK);
  ck_assert_int_eq(h.dtype, QDP_DTYPE_COMPLEX128);
  ck_assert_uint_eq(h.rows, 7);
  ck_assert_uint_eq(h.cols, 3);
  ck_assert_uint_eq(h.data_offset, n);
  /* The header alone is enough: data is the check's business. */
  n = image(buf, sizeof buf, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,)}");
  ck_assert_int_eq(qdp_npy_parse(buf, n, &h, NULL), QDP_OK);
  ck_assert_int_eq(h.ndim, 1);
  ck_assert_uint_eq(h.rows, 1);
  ck_assert_uint_eq(h.cols, 5);
  ck_assert_uint_eq(h.data_bytes, 20);
}
END_TEST

/* Where the two former readers disagreed, both sides now take the stricter, correct answer. */
START_TEST(test_parse_takes_the_stricter_answer_where_the_readers_differed) {
  /* '=' (native order): libqdp accepted it, the daemon did not; numpy.save always writes '<'. */
  assert_refused("{'descr': '=f8', 'fortran_order': False, 'shape': (2,), }",
                 "dtype '=f8' is not supported");
  /* fortran_order True on a 1-D or single-column array: libqdp accepted it (the layout is the
   * same), but numpy never writes it so. */
  assert_refused("{'descr': '<f8', 'fortran_order': True, 'shape': (4,), }",
                 "fortran_order is True");
  assert_refused("{'descr': '<f8', 'fortran_order': True, 'shape': (4, 1), }",
                 "fortran_order is True");
  /* A repeated key: libqdp let the last one win. */
  assert_refused("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'shape': (3,)}",
                 "key 'shape' is unknown or repeated at header byte 57");
  /* A dimension over 64 bits: libqdp said only "not a tuple of integers". */
  assert_refused("{'descr': '<f8', 'fortran_order': False, 'shape': (18446744073709551616,), }",
                 "is over 18446744073709551615");
  /* A key longer than libqdp's 31-byte buffer is named, cut, whatever its length. */
  assert_refused("{'a_key_much_longer_than_thirty_one_bytes_and_then_some_more_text': 1}",
                 "key 'a_key_much_longer_than_thirty_one_bytes_and_then_some_more_t...'");
  /* A header longer than 64 KiB: libqdp read up to 1 MiB. */
  unsigned char b[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0x01, 0x00, 0x01, 0x00};
  struct qdp_npy h;
  struct qdp_npy_error e;
  ck_assert_int_eq(qdp_npy_parse(b, sizeof b, &h, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, ".npy header of 65537 B is longer than the 65536 B"));
  /* The byte count is exact per element size (libqdp refused anything over 2^64 / 16 elements):
   * 2^60 float64 values are 2^63 B, 2^61 are 2^64. */
  unsigned char buf[512];
  size_t n = image(buf, sizeof buf, 1,
                   "{'descr': '<f8', 'fortran_order': False, 'shape': (1152921504606846976,), }");
  ck_assert_int_eq(qdp_npy_parse(buf, n, &h, NULL), QDP_OK);
  ck_assert_uint_eq(h.data_bytes, UINT64_C(1) << 63);
  assert_refused("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }",
                 "shape 1 x 2305843009213693952 of 8 B elements overflows 64 bits");
}
END_TEST

START_TEST(test_parse_quotes_what_it_refuses_on_one_line) {
  /* The byte at fault: the newline inside the string. */
  assert_refused("{'descr': '<f\n8', 'fortran_order': False, 'shape': (2,)}",
                 "expected a quoted 'descr' at header byte 13");
  assert_refused("{\"desc'r\": '<f8'}", "key 'desc?r' is unknown or repeated at header byte 2");
  assert_refused("{'descr': 'a\tb', 'fortran_order': False, 'shape': (2,)}", "dtype 'a?b'");
}
END_TEST

START_TEST(test_check_data_names_the_bytes_needed_and_there) {
  unsigned char buf[512];
  size_t n = image(buf, sizeof buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)}");
  struct qdp_npy h;
  struct qdp_npy_error e;
  ck_assert_int_eq(qdp_npy_parse(buf, n, &h, &e), QDP_OK);
  ck_assert_int_eq(qdp_npy_check_data(&h, n + 48, &e), QDP_OK);
  ck_assert_int_eq(qdp_npy_check_data(&h, n + 100, &e), QDP_OK); /* extra bytes are fine */
  ck_assert_int_eq(qdp_npy_check_data(&h, n + 47, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.msg, "truncated .npy file: data is 47 B but shape 2 x 3 of '<f8' needs 48 B");
  ck_assert_uint_eq(e.need_bytes, 48);
  ck_assert_uint_eq(e.have_bytes, 47);
  /* A file shorter than its own header has no data at all. */
  ck_assert_int_eq(qdp_npy_check_data(&h, 3, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(e.have_bytes, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("npy");
  TCase *t = tcase_create("codec");
  tcase_add_test(t, test_format_is_byte_identical_to_numpy_save);
  tcase_add_test(t, test_format_refuses_what_has_no_npy_form);
  tcase_add_test(t, test_format_round_trips_through_parse);
  tcase_add_test(t, test_parse_reads_versions_and_the_whole_grammar);
  tcase_add_test(t, test_parse_takes_the_stricter_answer_where_the_readers_differed);
  tcase_add_test(t, test_parse_quotes_what_it_refuses_on_one_line);
  tcase_add_test(t, test_check_data_names_the_bytes_needed_and_there);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
