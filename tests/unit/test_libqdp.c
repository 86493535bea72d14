/* Unit tests of libqdp without a daemon: the .npy reader (the shared codec as libqdp reports
 * it), local input files (.npy, CSV, raw), the text sniffer and the CSV reader, target resolution,
 * client creation, the per-thread error record, and a call that cannot connect. Runs without
 * forking (gRPC threads do not survive fork). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qdp_build_config.h"
#include "libqdp_int.h"
#include "qdp_dlpack.h"

static char tmpdir[256];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/test_libqdp.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

/* A header exactly as numpy 1.x writes it for np.save(f, np.zeros(5, np.float32)). */
static size_t numpy_header(unsigned char *buf, int major, const char *dict) {
  size_t pre = major == 1 ? 10 : 12;
  size_t n = strlen(dict);
  size_t total = (pre + n + 1 + 63) / 64 * 64;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  size_t hl = total - pre;
  buf[8] = (unsigned char)(hl & 0xff);
  buf[9] = (unsigned char)(hl >> 8);
  if (major != 1) {
    buf[10] = 0;
    buf[11] = 0;
  }
  memcpy(buf + pre, dict, n);
  memset(buf + pre + n, ' ', total - pre - n - 1);
  buf[total - 1] = '\n';
  return total;
}

/* ---- npy ---- */

START_TEST(test_npy_parse_reads_numpy_v1_and_v2_headers) {
  unsigned char buf[256];
  struct qdp__npy d;
  size_t n = numpy_header(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }");
  ck_assert_int_eq(qdp__npy_parse(buf, n, &d), QDP_OK);
  ck_assert_int_eq(d.dtype, QDP_DTYPE_FLOAT32);
  ck_assert_int_eq(d.ndim, 1);
  ck_assert_uint_eq(d.count, 5);
  ck_assert_uint_eq(d.data_offset, 128);
  n = numpy_header(buf, 2, "{\"descr\": \"<i8\", \"shape\": (2, 3), \"fortran_order\": False}");
  ck_assert_int_eq(qdp__npy_parse(buf, n, &d), QDP_OK);
  ck_assert_int_eq(d.dtype, QDP_DTYPE_INT64);
  ck_assert_uint_eq(d.shape[0], 2);
  ck_assert_uint_eq(d.shape[1], 3);
  ck_assert_uint_eq(d.data_offset, n);
}
END_TEST

START_TEST(test_npy_parse_refuses_what_qdp_cannot_read) {
  unsigned char buf[256];
  struct qdp__npy d;
  static const char *const bad[] = {
      "{'descr': '>f8', 'fortran_order': False, 'shape': (5,), }",       /* big-endian */
      "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }",      /* Fortran order */
      "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 4), }",  /* 3-D */
      "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",         /* scalar */
      "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }",       /* bytes */
      "{'descr': '<f8', 'shape': (5,), }",                               /* no fortran_order */
      "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), 'x': 1}", /* unknown key */
      "['descr']",                                                       /* not a dict */
      /* Accepted by libqdp's own reader before the shared codec; the daemon refused them. */
      "{'descr': '=f8', 'fortran_order': False, 'shape': (5,), }",               /* native order */
      "{'descr': '<f8', 'fortran_order': True, 'shape': (5,), }",                /* 1-D Fortran */
      "{'descr': '<f8', 'descr': '<f4', 'fortran_order': False, 'shape': (5,)}", /* repeated */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t n = numpy_header(buf, 1, bad[i]);
    ck_assert_int_eq(qdp__npy_parse(buf, n, &d), QDP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(qdp_last_error()->field, "npy");
    ck_assert_int_eq(qdp_last_error()->remote, 0);
  }
  size_t n = numpy_header(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }");
  ck_assert_int_eq(qdp__npy_parse(buf, n - 5, &d), QDP_ERR_INVALID_ARGUMENT); /* truncated */
  buf[0] = 'X';
  ck_assert_int_eq(qdp__npy_parse(buf, n, &d), QDP_ERR_INVALID_ARGUMENT); /* no magic */
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "not a .npy file"));
}
END_TEST

/* ---- local input files ---- */

/* qdp__input_file_open of path as a LOCAL_FILE input of dtype, reshaped by rows/cols. */
static qdp_status open_input(const char *path, qdp_dtype dtype, uint64_t rows, uint64_t cols,
                             uint64_t offset, int raw, struct qdp__input_file *f) {
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_LOCAL_FILE;
  in.path = path;
  in.dtype = dtype;
  in.rows = rows;
  in.cols = cols;
  in.offset = offset;
  in.raw = raw;
  return qdp__input_file_open(&in, f);
}

static void close_input(struct qdp__input_file *f) {
  if (f->fd >= 0) {
    close(f->fd);
  }
  free(f->values);
}

START_TEST(test_input_file_npy_gives_shape_dtype_and_data_offset) {
  make_tmpdir();
  unsigned char buf[256 + 6 * 8];
  size_t n = numpy_header(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }");
  double v[6] = {1, 2, 3, 4, 5, 6};
  memcpy(buf + n, v, sizeof v);
  char path[300];
  snprintf(path, sizeof path, "%s/a.npy", tmpdir);
  write_file(path, buf, n + sizeof v);
  struct qdp__input_file f;
  ck_assert_int_eq(open_input(path, QDP_DTYPE_UNSPECIFIED, 0, 0, 0, 0, &f), QDP_OK);
  ck_assert_int_ge(f.fd, 0);
  ck_assert(!f.csv);
  ck_assert_int_eq(f.d.dtype, QDP_DTYPE_FLOAT64);
  ck_assert_uint_eq(f.d.shape[0], 2);
  ck_assert_uint_eq(f.d.shape[1], 3);
  ck_assert_uint_eq(f.d.data_offset, n);
  double back[6];
  ck_assert_int_eq(pread(f.fd, back, sizeof back, (off_t)f.d.data_offset), (ssize_t)sizeof back);
  ck_assert_double_eq(back[5], 6.0);
  close_input(&f);
  /* Reshaped by cols: 6 values as 3 rows of 2. */
  ck_assert_int_eq(open_input(path, QDP_DTYPE_UNSPECIFIED, 0, 2, 0, 0, &f), QDP_OK);
  ck_assert_uint_eq(f.d.shape[0], 3);
  ck_assert_uint_eq(f.d.shape[1], 2);
  close_input(&f);
  /* 6 values are not 4 rows. */
  ck_assert_int_eq(open_input(path, QDP_DTYPE_UNSPECIFIED, 4, 0, 0, 0, &f),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.rows");
  ck_assert_int_eq(f.fd, -1);
  /* The header says float64; asking for float32 is refused. */
  ck_assert_int_eq(open_input(path, QDP_DTYPE_FLOAT32, 0, 0, 0, 0, &f), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.dtype");
  /* A .npy says where its data start: an offset is refused, not ignored. */
  ck_assert_int_eq(open_input(path, QDP_DTYPE_UNSPECIFIED, 0, 0, 8, 0, &f),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.offset");
  /* Truncated: the header promises 6 values, 5 follow. */
  write_file(path, buf, n + 5 * 8);
  ck_assert_int_eq(open_input(path, QDP_DTYPE_UNSPECIFIED, 0, 0, 0, 0, &f),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "truncated"));
  remove_tmpdir();
}
END_TEST

START_TEST(test_input_file_raw_needs_a_dtype_and_whole_values) {
  make_tmpdir();
  char path[300];
  snprintf(path, sizeof path, "%s/raw.bin", tmpdir);
  float v[5] = {1, 2, 3, 4, 5};
  write_file(path, v, sizeof v);
  struct qdp__input_file f;
  ck_assert_int_eq(open_input(path, QDP_DTYPE_UNSPECIFIED, 0, 0, 0, 0, &f),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.dtype");
  ck_assert_int_eq(open_input(path, QDP_DTYPE_FLOAT32, 0, 0, 4, 0, &f), QDP_OK);
  ck_assert(!f.csv);
  ck_assert_uint_eq(f.d.count, 4); /* 20 bytes - 4 of offset */
  ck_assert_uint_eq(f.d.shape[0], 1);
  ck_assert_uint_eq(f.d.shape[1], 4);
  ck_assert_uint_eq(f.d.data_offset, 4);
  close_input(&f);
  /* 20 bytes are not a whole number of float64 values. */
  ck_assert_int_eq(open_input(path, QDP_DTYPE_FLOAT64, 0, 0, 0, 0, &f), QDP_ERR_INVALID_ARGUMENT);
  /* A file that is not there is NOT_FOUND, as a server file's is. */
  ck_assert_int_eq(open_input("/nonexistent/x.npy", QDP_DTYPE_FLOAT64, 0, 0, 0, 0, &f),
                   QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(qdp_last_error()->cause, ENOENT);
  ck_assert_int_eq(qdp_last_error()->remote, 0);
  remove_tmpdir();
}
END_TEST

/* The file: two rows of two numbers. As CSV it is a batch of 2 samples of 2 values; its
 * 16 bytes as raw float64 would be 2 values of garbage. */
static const char two_rows[] = "0.1,0.2\n0.3,0.4\n";

START_TEST(test_input_file_text_is_csv_unless_raw_says_otherwise) {
  make_tmpdir();
  char csv[300], txt[300], notes[300], bin[300];
  snprintf(csv, sizeof csv, "%s/data.csv", tmpdir);
  snprintf(txt, sizeof txt, "%s/data.txt", tmpdir);
  snprintf(notes, sizeof notes, "%s/notes.txt", tmpdir);
  snprintf(bin, sizeof bin, "%s/data.CSV", tmpdir);
  write_file(csv, two_rows, strlen(two_rows));
  write_file(txt, two_rows, strlen(two_rows));
  const double want[4] = {0.1, 0.2, 0.3, 0.4};
  struct qdp__input_file f;
  /* By its name, and by its text whatever its name; float64 by default, and when asked. */
  const char *const paths[] = {csv, txt};
  const qdp_dtype dtypes[] = {QDP_DTYPE_UNSPECIFIED, QDP_DTYPE_FLOAT64};
  for (int i = 0; i < 2; i++) {
    for (int k = 0; k < 2; k++) {
      ck_assert_int_eq(open_input(paths[i], dtypes[k], 0, 0, 0, 0, &f), QDP_OK);
      ck_assert(f.csv);
      ck_assert_int_eq(f.fd, -1);
      ck_assert_int_eq(f.d.dtype, QDP_DTYPE_FLOAT64);
      ck_assert_uint_eq(f.d.shape[0], 2);
      ck_assert_uint_eq(f.d.shape[1], 2);
      ck_assert_uint_eq(f.d.count, 4);
      ck_assert_mem_eq(f.values, want, sizeof want);
      close_input(&f);
    }
  }
  /* Reshaped as a .npy is: 4 values as one sample. */
  ck_assert_int_eq(open_input(csv, QDP_DTYPE_FLOAT32, 1, 0, 0, 0, &f), QDP_OK);
  const float want32[4] = {0.1f, 0.2f, 0.3f, 0.4f};
  ck_assert_uint_eq(f.d.shape[0], 1);
  ck_assert_uint_eq(f.d.shape[1], 4);
  ck_assert_mem_eq(f.values, want32, sizeof want32);
  close_input(&f);
  /* raw: the bytes as values, only when asked; an offset goes with raw alone. */
  ck_assert_int_eq(open_input(txt, QDP_DTYPE_FLOAT64, 0, 0, 0, 1, &f), QDP_OK);
  ck_assert(!f.csv);
  ck_assert_int_ge(f.fd, 0);
  ck_assert_uint_eq(f.d.count, strlen(two_rows) / 8);
  ck_assert_uint_eq(f.d.data_offset, 0);
  close_input(&f);
  ck_assert_int_eq(open_input(csv, QDP_DTYPE_FLOAT64, 0, 0, 8, 0, &f), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.offset");
  /* A caller built before raw existed (a shorter struct) gets CSV too, never raw bytes. */
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_LOCAL_FILE;
  in.path = txt;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.raw = 1;
  in.struct_size = offsetof(struct qdp_input, raw);
  ck_assert_int_eq(qdp__input_file_open(&in, &f), QDP_OK);
  ck_assert(f.csv);
  close_input(&f);
  /* Text that is not CSV is refused, naming raw and saying what to do; never read as bytes. */
  static const char prose[] = "Dear reader,\nthese are notes, not numbers.\n";
  write_file(notes, prose, strlen(prose));
  ck_assert_int_eq(open_input(notes, QDP_DTYPE_FLOAT64, 0, 0, 0, 0, &f), QDP_ERR_INVALID_ARGUMENT);
  const struct qdp_errinfo *e = qdp_last_error();
  ck_assert_str_eq(e->field, "input.raw");
  ck_assert_ptr_nonnull(strstr(e->msg, "notes.txt"));
  ck_assert_ptr_nonnull(strstr(e->msg, "has no numeric column"));
  ck_assert_ptr_nonnull(strstr(e->msg, "numpy.save"));
  ck_assert_ptr_nonnull(strstr(e->msg, "set raw"));
  ck_assert_int_eq(f.fd, -1);
  ck_assert_ptr_null(f.values);
  /* A .csv name is CSV even when the bytes are not text: refused, not read as raw. */
  double raw_vals[2] = {1.0, 2.0};
  write_file(bin, raw_vals, sizeof raw_vals);
  ck_assert_int_eq(open_input(bin, QDP_DTYPE_FLOAT64, 0, 0, 0, 0, &f), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.path");
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "NUL byte at byte 0"));
  /* Binary without a .csv name stays raw, as before. */
  snprintf(bin, sizeof bin, "%s/data.f64", tmpdir);
  write_file(bin, raw_vals, sizeof raw_vals);
  ck_assert_int_eq(open_input(bin, QDP_DTYPE_FLOAT64, 0, 0, 0, 0, &f), QDP_OK);
  ck_assert(!f.csv);
  ck_assert_uint_eq(f.d.count, 2);
  close_input(&f);
  remove_tmpdir();
}
END_TEST

START_TEST(test_read_at_says_data_loss_when_the_file_is_shorter) {
  make_tmpdir();
  char path[300];
  snprintf(path, sizeof path, "%s/short.bin", tmpdir);
  write_file(path, "12345678", 8);
  int fd = open(path, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  char buf[16];
  ck_assert_int_eq(qdp__read_at(fd, path, buf, 8, 0), QDP_OK);
  ck_assert_mem_eq(buf, "12345678", 8);
  ck_assert_int_eq(qdp__read_at(fd, path, buf, 16, 0), QDP_ERR_DATA_LOSS);
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "byte 8"));
  close(fd);
  remove_tmpdir();
}
END_TEST

/* ---- text and CSV ---- */

START_TEST(test_text_is_printable_utf8_and_whitespace) {
  static const struct {
    const char *bytes;
    size_t n;
    bool whole, text;
  } cases[] = {
      {"0.1,0.2\n0.3,0.4\r\n", 17, true, true},
      {"\tx, y\f\v\n", 8, true, true},
      {"caf\xc3\xa9,1\n", 8, true, true},               /* é */
      {"\xe2\x82\xac,\xf0\x9f\x98\x80", 8, true, true}, /* €, an emoji */
      {"", 0, true, true},
      {"1,2\0", 4, true, false},                            /* NUL */
      {"1,\x01", 3, true, false},                           /* a control character */
      {"1,\x7f", 3, true, false},                           /* DEL */
      {"\xff\xfe", 2, true, false},                         /* not UTF-8 */
      {"\xc0\x80", 2, true, false},                         /* an overlong NUL */
      {"\xed\xa0\x80", 3, true, false},                     /* a surrogate */
      {"\x9a\x99\x99\x99\x99\x99\xb9\x3f", 8, true, false}, /* the double 0.1 */
      {"1,\xc3", 3, true, false},                           /* é cut: the file ends there */
      {"1,\xc3", 3, false, true},                           /* é cut: the read ends there */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ck_assert_msg(qdp__looks_like_text((const unsigned char *)cases[i].bytes, cases[i].n,
                                       cases[i].whole) == cases[i].text,
                  "case %zu", i);
  }
}
END_TEST

/* Parses text as CSV into t, values of dtype. */
static qdp_status csv(const char *text, qdp_dtype dtype, struct qdp__csv *t) {
  memset(t, 0, sizeof *t);
  return qdp__csv_parse("t.csv", text, strlen(text), dtype, t);
}

START_TEST(test_csv_reads_tables_as_the_python_reader_does) {
  struct qdp__csv t;
  /* A header (a field that is not a number), its text column left out; spaces trimmed. */
  ck_assert_int_eq(csv("name, x ,y\nA, 1,2\nB,3 , 4\n", QDP_DTYPE_UNSPECIFIED, &t), QDP_OK);
  const double a[] = {1, 2, 3, 4};
  ck_assert_uint_eq(t.rows, 2);
  ck_assert_uint_eq(t.cols, 2);
  ck_assert_int_eq(t.dtype, QDP_DTYPE_FLOAT64);
  ck_assert_mem_eq(t.values, a, sizeof a);
  free(t.values);
  /* No header; a byte-order mark, quotes, CRLF and lone CR, blank lines, Python's number forms. */
  ck_assert_int_eq(
      csv("\xef\xbb\xbf\"1.5\",2e3\r\n\r\n-.5,\"1_000\"\r7.,+1E-2\n", QDP_DTYPE_FLOAT64, &t),
      QDP_OK);
  const double b[] = {1.5, 2000, -0.5, 1000, 7.0, 0.01};
  ck_assert_uint_eq(t.rows, 3);
  ck_assert_uint_eq(t.cols, 2);
  ck_assert_mem_eq(t.values, b, sizeof b);
  free(t.values);
  /* inf and nan are numbers (the daemon judges them); a quoted field may hold commas and
   * newlines, and a doubled quote; the last line needs no line end. */
  ck_assert_int_eq(csv("\"a,\"\"b\"\"\nc\",v\nx,-Infinity\ny,NaN", QDP_DTYPE_FLOAT64, &t), QDP_OK);
  ck_assert_uint_eq(t.rows, 2);
  ck_assert_uint_eq(t.cols, 1);
  ck_assert(isinf(((double *)t.values)[0]) && ((double *)t.values)[0] < 0);
  ck_assert(isnan(((double *)t.values)[1]));
  free(t.values);
  /* float32 is the float64 value rounded; int64 takes integers (basis indices), one per row. */
  ck_assert_int_eq(csv("0.1\n1e39\n", QDP_DTYPE_FLOAT32, &t), QDP_OK);
  const float c[] = {(float)0.1, (float)1e39};
  ck_assert_mem_eq(t.values, c, sizeof c);
  free(t.values);
  ck_assert_int_eq(csv("index\n3\n+7\n-0\n9223372036854775807\n", QDP_DTYPE_INT64, &t), QDP_OK);
  const int64_t d[] = {3, 7, 0, INT64_MAX};
  ck_assert_uint_eq(t.rows, 4);
  ck_assert_uint_eq(t.cols, 1);
  ck_assert_mem_eq(t.values, d, sizeof d);
  free(t.values);
}
END_TEST

START_TEST(test_csv_refusals_name_row_line_column_and_text) {
  static const struct {
    const char *text;
    qdp_dtype dtype;
    const char *field, *says;
  } cases[] = {
      {"", QDP_DTYPE_FLOAT64, "input.path", "'t.csv' is empty"},
      {"\n\r\n", QDP_DTYPE_FLOAT64, "input.path", "'t.csv' is empty"},
      {"x,y\n", QDP_DTYPE_FLOAT64, "input.path", "header row and no rows"},
      {"x,y\n1,\n", QDP_DTYPE_FLOAT64, "input.path",
       "Row 0 (line 2), column 1 ('y') of 't.csv' is empty"},
      {"1,2\n\n3,4\n5,,\n", QDP_DTYPE_FLOAT64, "input.path",
       "Row 2 (line 4) of 't.csv' has 3 fields; row 0 has 2"},
      {"x,y\n1,2\n3\n", QDP_DTYPE_FLOAT64, "input.path",
       "Row 1 (line 3) of 't.csv' has 1 field; the header has 2"},
      {"1,2\n3,4\n5,six\n", QDP_DTYPE_FLOAT64, "input.path",
       "Row 2 (line 3), column 1 of 't.csv' is 'six', not a number"},
      {"x,y\n1,2\n3,4x\n", QDP_DTYPE_FLOAT64, "input.path",
       "Row 1 (line 3), column 1 ('y') of 't.csv' is '4x', not a number; the column holds numbers "
       "elsewhere"},
      {"1,2\n1,0x10\n", QDP_DTYPE_FLOAT64, "input.path", "is '0x10', not a number"},
      {"1,2\n1,nan(1)\n", QDP_DTYPE_FLOAT64, "input.path", "is 'nan(1)', not a number"},
      {"1,2\n1,1__0\n", QDP_DTYPE_FLOAT64, "input.path", "is '1__0', not a number"},
      {"i\n3\n1.5\n", QDP_DTYPE_INT64, "input.dtype",
       "Row 1 (line 3), column 0 ('i') of 't.csv' is '1.5', not an integer"},
      {"9223372036854775808\n", QDP_DTYPE_INT64, "input.dtype", "outside int64's range"},
      {"name,tag\nA,b\n", QDP_DTYPE_FLOAT64, "input.path",
       "has no numeric column; its columns: name, tag"},
      {"1,\"2\n3,4\n", QDP_DTYPE_FLOAT64, "input.path",
       "Line 1 of 't.csv' opens a quoted field that is never closed"},
      {"1,2\n3,\x01\n", QDP_DTYPE_FLOAT64, "input.path", "is '\\x01', not a number"},
      {"1,2\n3,\xc3\n", QDP_DTYPE_FLOAT64, "input.path", "is '\\xc3', not a number"},
      {"1,2\n3,caf\xc3\xa9\n", QDP_DTYPE_FLOAT64, "input.path", "is 'caf\xc3\xa9', not a number"},
      {"1,2\n3,a123456789b123456789c123456789d123456789e123456789\n", QDP_DTYPE_FLOAT64,
       "input.path", "is 'a123456789b123456789c123456789d123456789e...', not a number"},
      {"1,2\n", QDP_DTYPE_COMPLEX64, "input.dtype", "not complex64"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct qdp__csv t;
    ck_assert_msg(csv(cases[i].text, cases[i].dtype, &t) == QDP_ERR_INVALID_ARGUMENT, "case %zu",
                  i);
    const struct qdp_errinfo *e = qdp_last_error();
    ck_assert_msg(strcmp(e->field, cases[i].field) == 0, "case %zu: field %s", i, e->field);
    ck_assert_msg(strstr(e->msg, cases[i].says), "case %zu: %s", i, e->msg);
    ck_assert_ptr_null(t.values);
  }
  /* A NUL byte: the text ends before the file does. */
  struct qdp__csv t;
  ck_assert_int_eq(qdp__csv_parse("t.csv", "1,2\n3\0", 6, QDP_DTYPE_FLOAT64, &t),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "NUL byte at byte 5 (line 2)"));
}
END_TEST

/* ---- target, client, errors ---- */

START_TEST(test_default_target_follows_the_environment) {
  char buf[512];
  setenv("QDP_TARGET", "127.0.0.1:7777", 1);
  setenv("QDP_SOCKET", "/tmp/s.sock", 1);
  ck_assert_int_eq(qdp_default_target(buf, sizeof buf), QDP_OK);
  ck_assert_str_eq(buf, "127.0.0.1:7777");
  unsetenv("QDP_TARGET");
  ck_assert_int_eq(qdp_default_target(buf, sizeof buf), QDP_OK);
  ck_assert_str_eq(buf, "unix:/tmp/s.sock");
  unsetenv("QDP_SOCKET");
  setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
  ck_assert_int_eq(qdp_default_target(buf, sizeof buf), QDP_OK);
  ck_assert_str_eq(
      buf, geteuid() == 0 ? "unix:/run/qdp/qdpd.sock" : "unix:/run/user/1234/qdp/qdpd.sock");
  ck_assert_int_eq(qdp_default_target(buf, 5), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(buf, "");
}
END_TEST

START_TEST(test_client_create_refuses_an_uninitialised_opts_struct) {
  struct qdp_client_opts o;
  memset(&o, 0, sizeof o);
  qdp_client *c = (qdp_client *)&o;
  ck_assert_int_eq(qdp_client_create(&o, &c), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(c);
  ck_assert_str_eq(qdp_last_error()->field, "struct_size");
  o = (struct qdp_client_opts)QDP_CLIENT_OPTS_INIT;
  o.timeout_ms = -1;
  ck_assert_int_eq(qdp_client_create(&o, &c), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "timeout_ms");
}
END_TEST

/* TLS options: refused for a Unix socket when given, the environment's ignored there; checked
 * together; a file that cannot be read named with the reason. No daemon needed. */
static qdp_status create_with(const char *target, const char *ca, const char *cert,
                              const char *key, size_t struct_size) {
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.target = target;
  o.tls_ca = ca;
  o.tls_cert = cert;
  o.tls_key = key;
  o.struct_size = struct_size ? struct_size : sizeof o;
  qdp_client *c = NULL;
  qdp_status rc = qdp_client_create(&o, &c);
  ck_assert(rc == QDP_OK ? c != NULL : c == NULL);
  qdp_client_destroy(c);
  return rc;
}

START_TEST(test_client_tls_options_are_checked_before_any_connection) {
  unsetenv("QDP_TLS_CA");
  unsetenv("QDP_TLS_CERT");
  unsetenv("QDP_TLS_KEY");
  unsetenv("QDP_TLS_SERVER_NAME");
  ck_assert_int_eq(create_with("unix:/nonexistent/q.sock", "/etc/ca.pem", NULL, NULL, 0),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "tls_ca");
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "Unix socket"));
  ck_assert_int_eq(create_with("unix:/nonexistent/q.sock", NULL, "/c.pem", "/c.key", 0),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "tls_cert");
  ck_assert_int_eq(create_with("127.0.0.1:9", "/nonexistent/ca.pem", NULL, NULL, 0),
                   QDP_ERR_NOT_FOUND);
  ck_assert_str_eq(qdp_last_error()->field, "tls_ca");
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "/nonexistent/ca.pem"));
  ck_assert_int_eq(qdp_last_error()->cause, ENOENT);
  ck_assert_int_eq(create_with("127.0.0.1:9", "/dev/null", NULL, NULL, 0),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "no PEM"));
  ck_assert_int_eq(create_with("127.0.0.1:9", "/etc/ca.pem", "/c.pem", NULL, 0),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "tls_key");
  ck_assert_int_eq(create_with("127.0.0.1:9", NULL, "/c.pem", "/c.key", 0),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "tls_ca");
  ck_assert_int_eq(create_with("127.0.0.1:9", "", NULL, NULL, 0), QDP_OK); /* "": none */
  /* The environment's: for TCP targets only. */
  setenv("QDP_TLS_CA", "/nonexistent/env-ca.pem", 1);
  ck_assert_int_eq(create_with("unix:/nonexistent/q.sock", NULL, NULL, NULL, 0), QDP_OK);
  ck_assert_int_eq(create_with("127.0.0.1:9", NULL, NULL, NULL, 0), QDP_ERR_NOT_FOUND);
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "env-ca.pem"));
  ck_assert_int_eq(create_with("127.0.0.1:9", "", NULL, NULL, 0), QDP_OK);
  /* An older caller's struct, which ends before the TLS fields, reads them as NULL: the
   * environment's. */
  ck_assert_int_eq(create_with("127.0.0.1:9", "", NULL, NULL,
                               offsetof(struct qdp_client_opts, tls_ca)),
                   QDP_ERR_NOT_FOUND);
  unsetenv("QDP_TLS_CA");
}
END_TEST

START_TEST(test_call_without_daemon_is_unavailable_and_names_the_target) {
  make_tmpdir();
  char target[300];
  snprintf(target, sizeof target, "unix:%s/none.sock", tmpdir);
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.target = target;
  qdp_client *c = NULL;
  ck_assert_int_eq(qdp_client_create(&o, &c), QDP_OK);
  ck_assert_int_eq(qdp_last_error()->code, QDP_OK);
  ck_assert_str_eq(qdp_client_target(c), target);
  qdp_health h = QDP_HEALTH_SERVING;
  ck_assert_int_eq(qdp_get_health(c, &h), QDP_ERR_UNAVAILABLE);
  ck_assert_int_eq(h, QDP_HEALTH_UNKNOWN);
  const struct qdp_errinfo *e = qdp_last_error();
  ck_assert_int_eq(e->remote, 1);
  ck_assert_str_eq(e->code_name, "QDP_ERR_UNAVAILABLE");
  ck_assert_ptr_nonnull(strstr(e->msg, target));
  /* A later successful local step resets the record. */
  char buf[64];
  ck_assert_int_eq(qdp_default_target(buf, sizeof buf), QDP_OK);
  ck_assert_int_eq(qdp_last_error()->code, QDP_OK);
  ck_assert_str_eq(qdp_last_error()->msg, "");
  qdp_client_destroy(c);
  remove_tmpdir();
}
END_TEST

START_TEST(test_calls_check_their_arguments_before_any_rpc) {
  qdp_client *c = NULL;
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.target = "unix:/nonexistent/qdp.sock";
  ck_assert_int_eq(qdp_client_create(&o, &c), QDP_OK);
  char dst[16];
  ck_assert_int_eq(qdp_fetch(c, "h", "t", NULL, NULL, 0, NULL), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "dst");
  ck_assert_int_eq(qdp_fetch(c, "", "t", NULL, dst, sizeof dst, NULL), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "state.handle");
  struct qdp_state_info *s = (struct qdp_state_info *)dst;
  struct qdp_encode_opts eo;
  memset(&eo, 0, sizeof eo);
  struct qdp_input in = QDP_INPUT_INIT;
  ck_assert_int_eq(qdp_encode(c, &eo, &in, &s), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(s);
  ck_assert_str_eq(qdp_last_error()->field, "opts");
  eo = (struct qdp_encode_opts)QDP_ENCODE_OPTS_INIT;
  in.kind = QDP_INPUT_SHM;
  ck_assert_int_eq(qdp_encode(c, &eo, &in, &s), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.shm");
  in.kind = QDP_INPUT_LOCAL_FILE;
  in.path = "/nonexistent/in.npy";
  ck_assert_int_eq(qdp_encode(c, &eo, &in, &s), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(qdp_last_error()->remote, 0);
  ck_assert_int_eq(qdp_fetch_npy(c, "h", "t", NULL, "", 0), QDP_ERR_INVALID_ARGUMENT);
  struct qdp_region_info ri = QDP_REGION_INFO_INIT;
  ck_assert_int_eq(qdp_region_register_flags(c, "/x", 0, -1, 8u, &ri), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "flags");
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "0x8"));
  qdp_client_destroy(c);
  /* Destructors take NULL. */
  qdp_client_destroy(NULL);
  qdp_state_info_free(NULL);
  qdp_plan_info_free(NULL);
  qdp_state_list_free(NULL);
  qdp_server_status_free(NULL);
  qdp_free(NULL);
}
END_TEST

struct thread_arg {
  int fail;
  qdp_status got;
  char field[64];
};

static void *thread_main(void *p) {
  struct thread_arg *a = p;
  char buf[8];
  for (int i = 0; i < 1000; i++) {
    /* One thread fails (buffer too small), the other succeeds, over and over. */
    qdp_status rc = qdp_default_target(buf, a->fail ? 2 : sizeof buf);
    (void)rc;
  }
  a->got = qdp_last_error()->code;
  snprintf(a->field, sizeof a->field, "%s", qdp_last_error()->field);
  return NULL;
}

START_TEST(test_last_error_is_kept_per_thread) {
  setenv("QDP_TARGET", "a:1", 1);
  struct thread_arg a = {1, QDP_OK, ""}, b = {0, QDP_ERR_UNKNOWN, "x"};
  pthread_t ta, tb;
  ck_assert_int_eq(pthread_create(&ta, NULL, thread_main, &a), 0);
  ck_assert_int_eq(pthread_create(&tb, NULL, thread_main, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  ck_assert_int_eq(a.got, QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(a.field, "target");
  ck_assert_int_eq(b.got, QDP_OK);
  ck_assert_str_eq(b.field, "");
  unsetenv("QDP_TARGET");
}
END_TEST

START_TEST(test_versions_and_names) {
  /* One version: meson.build's (QDP_VERSION, the daemon's too), in the header and the library. */
  ck_assert_str_eq(qdp_version_string(), QDP_VERSION);
  ck_assert_str_eq(QDP_VERSION_STRING, QDP_VERSION);
  unsigned major = 0, minor = 0, patch = 0;
  ck_assert_int_eq(sscanf(QDP_VERSION, "%u.%u.%u", &major, &minor, &patch), 3);
  ck_assert_uint_eq(qdp_version(), (major << 16) | (minor << 8) | patch);
  ck_assert_uint_eq(qdp_version(), QDP_VERSION_HEX);
  for (int p = QDP_POLICY_AUTO; p <= QDP_POLICY_BATCH; p++) {
    ck_assert_int_eq(qdp_policy_from_name(qdp_policy_name((qdp_policy)p)), p);
  }
  ck_assert_str_eq(qdp_policy_name(QDP_POLICY_CAPACITY), "capacity");
  ck_assert_ptr_null(qdp_policy_name((qdp_policy)6));
  ck_assert_int_eq(qdp_policy_from_name("fastest"), -1);
}
END_TEST

/* Views as qdp_views_open leaves them, built by hand: two shards of a 3-qubit complex64 state on
 * this process's GPUs 0 and 1 (fake device pointers: nothing dereferences them). A DLPack tensor
 * must carry each shard's own device id, not 0 for all (a bug that hit an earlier library). */
START_TEST(test_dlpack_tensors_carry_each_shards_device_shape_and_dtype) {
  struct qdp_shard sh[2] = {{.struct_size = sizeof sh[0], .first = 0, .count = 4, .rows = 1},
                            {.struct_size = sizeof sh[1], .first = 4, .count = 4, .rows = 1}};
  struct qdp_shard *shp[2] = {&sh[0], &sh[1]};
  struct qdp_state_info st = {.struct_size = sizeof st,
                              .qubits = 3,
                              .batch = 1,
                              .dtype = QDP_DTYPE_COMPLEX64,
                              .nshards = 2,
                              .shards = shp};
  char mem[2][64];
  struct qdp_view views[2] = {{sizeof views[0], mem[0], 0, &sh[0]},
                              {sizeof views[1], mem[1] + 16, 1, &sh[1]}};
  struct qdp_views v = {sizeof v, &st, 7, 2, views, 0};
  for (size_t i = 0; i < 2; i++) {
    struct DLManagedTensor *t = NULL;
    ck_assert_int_eq(qdp_view_dlpack(&v, i, &t), QDP_OK);
    ck_assert_int_eq(t->dl_tensor.device.device_type, kDLCUDA);
    ck_assert_int_eq(t->dl_tensor.device.device_id, (int)i);
    ck_assert_ptr_eq(t->dl_tensor.data, views[i].data);
    ck_assert_int_eq(t->dl_tensor.ndim, 2);
    ck_assert_int_eq(t->dl_tensor.shape[0], 1);
    ck_assert_int_eq(t->dl_tensor.shape[1], 4);
    ck_assert_ptr_null(t->dl_tensor.strides);
    ck_assert_uint_eq(t->dl_tensor.byte_offset, 0);
    ck_assert_uint_eq(t->dl_tensor.dtype.code, 5);
    ck_assert_uint_eq(t->dl_tensor.dtype.bits, 64);
    ck_assert_uint_eq(t->dl_tensor.dtype.lanes, 1);
    t->deleter(t);
  }
  /* complex128 and a batch shard of 3 rows. */
  st.dtype = QDP_DTYPE_COMPLEX128;
  sh[1].rows = 3;
  struct DLManagedTensor *t = NULL;
  ck_assert_int_eq(qdp_view_dlpack(&v, 1, &t), QDP_OK);
  ck_assert_uint_eq(t->dl_tensor.dtype.bits, 128);
  ck_assert_int_eq(t->dl_tensor.shape[0], 3);
  t->deleter(t);
  ck_assert_int_eq(qdp_view_dlpack(&v, 2, &t), QDP_ERR_OUT_OF_RANGE);
  ck_assert_int_eq(qdp_view_dlpack(NULL, 0, &t), QDP_ERR_INVALID_ARGUMENT);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("libqdp");
  TCase *t = tcase_create("npy");
  tcase_add_test(t, test_npy_parse_reads_numpy_v1_and_v2_headers);
  tcase_add_test(t, test_npy_parse_refuses_what_qdp_cannot_read);
  suite_add_tcase(s, t);
  t = tcase_create("input_file");
  tcase_add_test(t, test_input_file_npy_gives_shape_dtype_and_data_offset);
  tcase_add_test(t, test_input_file_raw_needs_a_dtype_and_whole_values);
  tcase_add_test(t, test_input_file_text_is_csv_unless_raw_says_otherwise);
  tcase_add_test(t, test_read_at_says_data_loss_when_the_file_is_shorter);
  suite_add_tcase(s, t);
  t = tcase_create("csv");
  tcase_add_test(t, test_text_is_printable_utf8_and_whitespace);
  tcase_add_test(t, test_csv_reads_tables_as_the_python_reader_does);
  tcase_add_test(t, test_csv_refusals_name_row_line_column_and_text);
  suite_add_tcase(s, t);
  t = tcase_create("client");
  tcase_add_test(t, test_default_target_follows_the_environment);
  tcase_add_test(t, test_client_create_refuses_an_uninitialised_opts_struct);
  tcase_add_test(t, test_client_tls_options_are_checked_before_any_connection);
  tcase_add_test(t, test_call_without_daemon_is_unavailable_and_names_the_target);
  tcase_add_test(t, test_calls_check_their_arguments_before_any_rpc);
  tcase_add_test(t, test_last_error_is_kept_per_thread);
  tcase_add_test(t, test_versions_and_names);
  tcase_add_test(t, test_dlpack_tensors_carry_each_shards_device_shape_and_dtype);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
