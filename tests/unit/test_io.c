/* Unit tests for daemon/io/: .npy headers, mapping files and shared memory, atomic export. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/map.h"
#include "io/npy.h"

/* ---- helpers --------------------------------------------------------------------------------- */

/* A .npy image: magic, version major.0, the length field and `dict` verbatim, then `data_len`
 * bytes of data (0x11 each). The caller frees *ret. */
static size_t make_npy(unsigned major, const char *dict, size_t data_len, unsigned char **ret) {
  size_t dlen = strlen(dict);
  size_t pre = major == 1 ? 10 : 12;
  size_t total = pre + dlen + data_len;
  unsigned char *b = malloc(total ? total : 1);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)major;
  b[7] = 0;
  if (major == 1) {
    b[8] = (unsigned char)(dlen & 0xff);
    b[9] = (unsigned char)(dlen >> 8);
  } else {
    b[8] = (unsigned char)(dlen & 0xff);
    b[9] = (unsigned char)(dlen >> 8);
    b[10] = (unsigned char)(dlen >> 16);
    b[11] = (unsigned char)(dlen >> 24);
  }
  memcpy(b + pre, dict, dlen);
  memset(b + pre + dlen, 0x11, data_len);
  *ret = b;
  return total;
}

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

static char tmpdir[256];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/qdp-test-io.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
  DIR *d = opendir(tmpdir);
  if (!d) {
    return;
  }
  struct dirent *e;
  char p[512];
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
      unlink(p);
    }
  }
  closedir(d);
  rmdir(tmpdir);
}

static int dir_entries(void) {
  DIR *d = opendir(tmpdir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      n++;
    }
  }
  closedir(d);
  return n;
}

static void write_file(const char *path, const void *buf, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
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

/* Maps the .npy file at path as the daemon maps a file handed to it: opened here, then mapped
 * from its descriptor. A file that cannot be opened gives the status open(2) means. */
static qdp_status map_path(const char *path, struct io_mapping *m, struct qdp_npy *h,
                           struct qdp_error *err) {
  *m = (struct io_mapping)IO_MAPPING_INIT;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return qdp_error_set_at(err, errno == ENOENT ? QDP_ERR_NOT_FOUND : QDP_ERR_SYSTEM, -1, errno,
                            "open failed");
  }
  char what[600];
  snprintf(what, sizeof what, "'%s'", path);
  return io_map_npy_fd(fd, what, m, h, err);
}

/* tmpdir as a confinement folder. */
static struct io_folder tmp_folder(void) {
  struct io_folder f;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(io_folder_open(tmpdir, "export_dir", &f, &err), QDP_OK);
  return f;
}

/* ---- mapping .npy files ---------------------------------------------------------------------- */

START_TEST(test_map_npy_reads_values_written_by_hand) {
  make_tmpdir();
  char path[512];
  snprintf(path, sizeof path, "%s/a.npy", tmpdir);
  /* A 2 x 3 float64 file as numpy writes it: 128-byte header, then the values row-major. */
  const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
  unsigned char img[128 + 48];
  memcpy(img, "\x93NUMPY\x01\x00\x76\x00", 10);
  memcpy(img + 10, dict, strlen(dict));
  memset(img + 10 + strlen(dict), ' ', 128 - 10 - strlen(dict) - 1);
  img[127] = '\n';
  const double vals[6] = {1.5, -2.25, 3.0, 1e-300, -0.0, 6.02214076e23};
  memcpy(img + 128, vals, sizeof vals);
  write_file(path, img, sizeof img);

  struct io_mapping m;
  struct qdp_npy h;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(map_path(path, &m, &h, &err), QDP_OK);
  ck_assert_uint_eq(h.rows, 2);
  ck_assert_uint_eq(h.cols, 3);
  ck_assert_uint_eq(m.bytes, 48);
  ck_assert_uint_eq((uintptr_t)m.data % 64, 0);
  const double *d = m.data;
  for (int i = 0; i < 6; i++) {
    ck_assert_double_eq(d[i], vals[i]);
  }
  ck_assert_int_eq(memcmp(d, vals, sizeof vals), 0);
  io_unmap(&m);
  ck_assert_ptr_null(m.data);
  io_unmap(&m); /* twice is harmless */
  io_unmap(NULL);
  remove_tmpdir();
}
END_TEST

START_TEST(test_map_npy_refusals_name_the_path) {
  make_tmpdir();
  struct io_mapping m;
  struct qdp_npy h;
  struct qdp_error err = QDP_ERROR_INIT;
  char path[512];
  snprintf(path, sizeof path, "%s/missing.npy", tmpdir);
  ck_assert_int_eq(map_path(path, &m, &h, &err), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(err.cause, ENOENT);

  snprintf(path, sizeof path, "%s/be.npy", tmpdir);
  unsigned char *b;
  size_t n = make_npy(1, "{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }\n", 8, &b);
  write_file(path, b, n);
  free(b);
  ck_assert_int_eq(map_path(path, &m, &h, &err), QDP_ERR_INVALID_ARGUMENT);
  char want[600];
  snprintf(want, sizeof want,
           "'%s': dtype '>f8' is not supported; use little-endian float32 or float64", path);
  ck_assert_ptr_nonnull(strstr(err.msg, want));
  ck_assert_ptr_null(m.data);

  snprintf(path, sizeof path, "%s/empty.npy", tmpdir);
  write_file(path, "", 0);
  ck_assert_int_eq(map_path(path, &m, &h, &err), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "the file has 0 B"));

  ck_assert_int_eq(map_path(tmpdir, &m, &h, &err), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "is not a regular file"));
  remove_tmpdir();
}
END_TEST

/* ---- shared memory --------------------------------------------------------------------------- */

/* Fills n bytes with a position-dependent pattern. */
static void pattern(unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    p[i] = (unsigned char)(i * 131 + (i >> 8));
  }
}

START_TEST(test_map_fd_maps_the_asked_range_of_shared_memory) {
  char name[64];
  snprintf(name, sizeof name, "/qdp-test-io-%d", (int)getpid());
  shm_unlink(name);
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  ck_assert_int_ge(fd, 0);
  const size_t size = 3 * 4096 + 100;
  ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
  unsigned char *w = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne(w, MAP_FAILED);
  pattern(w, size);
  const char *what = "shared memory '/x'";

  struct io_mapping m;
  struct qdp_error err = QDP_ERROR_INIT;
  /* An offset that is not page aligned, running to the very last byte. */
  ck_assert_int_eq(io_map_fd(shm_open(name, O_RDONLY, 0), what, 5000, size - 5000, false, &m, &err),
                   QDP_OK);
  ck_assert_uint_eq(m.bytes, size - 5000);
  ck_assert_int_eq(memcmp(m.data, w + 5000, size - 5000), 0);
  ck_assert_int_eq(m.sealed, 0);
  ck_assert(!io_mapping_shrunk(&m));
  io_unmap(&m);

  /* One byte past the end, an offset past the end, and an offset + length that wraps. */
  ck_assert_int_eq(io_map_fd(dup(fd), what, 5000, size - 4999, false, &m, &err),
                   QDP_ERR_OUT_OF_RANGE);
  char want[256];
  snprintf(want, sizeof want,
           "offset 5000 B + length %zu B passes the end of the region, which has %zu B",
           size - 4999, size);
  ck_assert_ptr_nonnull(strstr(err.msg, want));
  ck_assert_ptr_nonnull(strstr(err.msg, what));
  ck_assert_str_eq(err.field, "shm.length");
  ck_assert_int_eq(io_map_fd(dup(fd), what, size + 1, 1, false, &m, &err), QDP_ERR_OUT_OF_RANGE);
  ck_assert_str_eq(err.field, "shm.offset");
  ck_assert_int_eq(io_map_fd(dup(fd), what, UINT64_MAX - 1, 4, false, &m, &err),
                   QDP_ERR_OUT_OF_RANGE);
  ck_assert_int_eq(io_map_fd(dup(fd), what, 8, UINT64_MAX, false, &m, &err), QDP_ERR_OUT_OF_RANGE);
  ck_assert_int_eq(io_map_fd(dup(fd), what, 0, 0, false, &m, &err), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(err.field, "shm.length");
  ck_assert_ptr_null(m.data);

  /* The whole object; then it shrinks under the mapping, and the mapping says so. */
  ck_assert_int_eq(io_map_fd(dup(fd), what, 0, 0, true, &m, &err), QDP_OK);
  ck_assert_uint_eq(m.bytes, size);
  ck_assert(!io_mapping_shrunk(&m));
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  ck_assert(io_mapping_shrunk(&m));
  io_unmap(&m);
  ck_assert(!io_mapping_shrunk(&m));

  munmap(w, size);
  close(fd);
  shm_unlink(name);
}
END_TEST

START_TEST(test_map_fd_of_memfd_reports_seals_and_refuses_what_is_not_a_file) {
  int fd = memfd_create("qdp-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_ge(fd, 0);
  const size_t size = 10000;
  unsigned char *src = malloc(size);
  pattern(src, size);
  ck_assert_int_eq(write(fd, src, size), (ssize_t)size);
  char what[64];
  snprintf(what, sizeof what, "fd %d of process %d", fd, (int)getpid());

  struct io_mapping m;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(io_map_fd(dup(fd), what, 4095, 2, false, &m, &err), QDP_OK);
  ck_assert_uint_eq(m.bytes, 2);
  ck_assert_int_eq(memcmp(m.data, src + 4095, 2), 0);
  ck_assert_int_eq(m.sealed, 0);
  io_unmap(&m);

  ck_assert_int_eq(io_map_fd(dup(fd), what, 9999, 2, false, &m, &err), QDP_ERR_OUT_OF_RANGE);
  ck_assert_ptr_nonnull(strstr(err.msg, what));
  ck_assert_ptr_nonnull(strstr(err.msg, "which has 10000 B"));
  ck_assert_uint_eq(err.free_bytes, 1);

  /* Sealed against shrinking: reported so callers may trust the mapping. */
  ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  ck_assert_int_eq(io_map_fd(dup(fd), what, 0, size, false, &m, &err), QDP_OK);
  ck_assert_int_eq(m.sealed, 1);
  ck_assert_int_eq(memcmp(m.data, src, size), 0);
  io_unmap(&m);

  /* A pipe is refused (and its descriptor closed: the mapping takes it either way). */
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(io_map_fd(p[0], what, 0, 1, false, &m, &err), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "is not shared memory or a regular file"));
  ck_assert_int_eq(fcntl(p[0], F_GETFD), -1);
  close(p[1]);
  /* A write-only descriptor cannot be mapped for reading. */
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ck_assert_int_eq(io_map_fd(open(path, O_WRONLY), what, 0, 1, false, &m, &err),
                   QDP_ERR_PERMISSION_DENIED);
  close(fd);
  free(src);
}
END_TEST

/* ---- folders --------------------------------------------------------------------------------- */

START_TEST(test_folder_keeps_every_path_beneath_it) {
  make_tmpdir();
  char allowed[512], other[512], p[700];
  snprintf(allowed, sizeof allowed, "%s/allowed", tmpdir);
  snprintf(other, sizeof other, "%s/other", tmpdir);
  ck_assert_int_eq(mkdir(allowed, 0700), 0);
  ck_assert_int_eq(mkdir(other, 0700), 0);
  snprintf(p, sizeof p, "%s/secret", other);
  write_file(p, "secret", 6);
  snprintf(p, sizeof p, "%s/x.npy", allowed);
  write_file(p, "x", 1);
  snprintf(p, sizeof p, "%s/escape", allowed);
  ck_assert_int_eq(symlink(other, p), 0);
  snprintf(p, sizeof p, "%s/abs", allowed);
  ck_assert_int_eq(symlink("/etc/passwd", p), 0);
  snprintf(p, sizeof p, "%s/inner", allowed);
  ck_assert_int_eq(symlink("x.npy", p), 0);

  struct io_folder f;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(io_folder_open(allowed, "input_dir", &f, &e), QDP_OK);
  int fd = -1;
  /* Inside, directly and through a link that stays inside. */
  snprintf(p, sizeof p, "%s/x.npy", allowed);
  ck_assert_int_eq(io_folder_open_file(&f, p, O_RDONLY, "input.path", &fd, &e), QDP_OK);
  ck_assert_int_eq(io_folder_check_fd(&f, p, fd, "input.path", &e), QDP_OK);
  snprintf(p, sizeof p, "%s/inner", allowed);
  ck_assert_int_eq(io_folder_check_fd(&f, p, fd, "input.path", &e), QDP_OK);
  close(fd);
  /* Out through a link, an absolute link, and '..'. */
  snprintf(p, sizeof p, "%s/escape/secret", allowed);
  ck_assert_int_eq(io_folder_open_file(&f, p, O_RDONLY, "input.path", &fd, &e),
                   QDP_ERR_PERMISSION_DENIED);
  ck_assert_str_eq(e.field, "input.path");
  snprintf(p, sizeof p, "%s/abs", allowed);
  ck_assert_int_eq(io_folder_open_file(&f, p, O_RDONLY, "input.path", &fd, &e),
                   QDP_ERR_PERMISSION_DENIED);
  snprintf(p, sizeof p, "%s/../other/secret", allowed);
  ck_assert_int_eq(io_folder_open_file(&f, p, O_RDONLY, "input.path", &fd, &e),
                   QDP_ERR_PERMISSION_DENIED);
  /* A sibling whose name starts with the folder's, the folder itself, a relative path. */
  snprintf(p, sizeof p, "%s2/x.npy", allowed);
  ck_assert_int_eq(io_folder_open_file(&f, p, O_RDONLY, "input.path", &fd, &e),
                   QDP_ERR_PERMISSION_DENIED);
  ck_assert_ptr_nonnull(strstr(e.msg, "is outside"));
  ck_assert_int_eq(io_folder_open_file(&f, allowed, O_RDONLY, "input.path", &fd, &e),
                   QDP_ERR_PERMISSION_DENIED);
  ck_assert_int_eq(io_folder_open_file(&f, "x.npy", O_RDONLY, "input.path", &fd, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  snprintf(p, sizeof p, "%s/missing.npy", allowed);
  ck_assert_int_eq(io_folder_open_file(&f, p, O_RDONLY, "input.path", &fd, &e), QDP_ERR_NOT_FOUND);
  /* A descriptor of another file is not the file a path in the folder names. */
  snprintf(p, sizeof p, "%s/secret", other);
  int outside = open(p, O_RDONLY);
  snprintf(p, sizeof p, "%s/x.npy", allowed);
  ck_assert_int_eq(io_folder_check_fd(&f, p, outside, "input.path", &e), QDP_ERR_PERMISSION_DENIED);
  close(outside);
  io_folder_close(&f);
  io_folder_close(&f);
  snprintf(p, sizeof p, "rm -rf '%s'", tmpdir);
  ck_assert_int_eq(system(p), 0);
}
END_TEST

struct swapper {
  const char *link, *inside, *outside;
  volatile int stop;
};

/* Points link at inside and outside in turn, as fast as it can. */
static void *swap_links(void *arg) {
  struct swapper *w = arg;
  char tmp[700];
  snprintf(tmp, sizeof tmp, "%s.tmp", w->link);
  for (unsigned i = 0; !w->stop; i++) {
    unlink(tmp);
    if (symlink(i % 2 ? w->outside : w->inside, tmp) == 0) {
      rename(tmp, w->link);
    }
  }
  return NULL;
}

START_TEST(test_folder_holds_while_a_link_is_swapped_in_and_out) {
  make_tmpdir();
  char allowed[512], outside[512], inside[512], link[600], p[700];
  snprintf(allowed, sizeof allowed, "%s/allowed", tmpdir);
  snprintf(outside, sizeof outside, "%s/outside", tmpdir);
  snprintf(inside, sizeof inside, "%s/allowed/in", tmpdir);
  ck_assert_int_eq(mkdir(allowed, 0700), 0);
  ck_assert_int_eq(mkdir(outside, 0700), 0);
  ck_assert_int_eq(mkdir(inside, 0700), 0);
  snprintf(p, sizeof p, "%s/f", outside);
  write_file(p, "OUT", 3);
  snprintf(p, sizeof p, "%s/f", inside);
  write_file(p, "in!", 3);
  snprintf(link, sizeof link, "%s/d", allowed);
  /* Relative links, as a user would make them: one stays inside, one leads out. */
  struct swapper w = {link, "in", "../outside", 0};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, swap_links, &w), 0);
  struct io_folder f = IO_FOLDER_INIT;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(io_folder_open(allowed, "input_dir", &f, &e), QDP_OK);
  snprintf(p, sizeof p, "%s/d/f", allowed);
  int opened = 0;
  /* Until enough opens landed inside (or 20 s on a loaded machine): each one that succeeds must
   * have read the inside file, never the outside one. */
  time_t end = time(NULL) + 20;
  for (int i = 0; (i < 2000 || opened == 0) && opened < 200 && time(NULL) < end; i++) {
    int fd = -1;
    if (io_folder_open_file(&f, p, O_RDONLY, "input.path", &fd, &e) == QDP_OK) {
      char got[4] = "";
      ck_assert_int_eq(pread(fd, got, 3, 0), 3);
      ck_assert_msg(memcmp(got, "in!", 3) == 0, "read '%.3s' from outside the folder", got);
      close(fd);
      opened++;
    }
  }
  w.stop = 1;
  pthread_join(t, NULL);
  io_folder_close(&f);
  ck_assert_int_gt(opened, 0); /* the swap did let some opens land inside */
  snprintf(p, sizeof p, "rm -rf '%s'", tmpdir);
  ck_assert_int_eq(system(p), 0);
}
END_TEST

/* ---- writing --------------------------------------------------------------------------------- */

struct gen {
  unsigned elem; /* element size: the reader writes elem / 8 doubles per element */
  uint64_t next; /* the offset the next call must ask for */
  uint64_t calls;
  uint64_t fail_at; /* fail the call that starts at or after this offset; UINT64_MAX never */
};

/* Double number k of the file holds k * 0.5 - 7. */
static qdp_status gen_read(void *arg, uint64_t offset, uint64_t n, void *dst,
                           struct qdp_error *reterr) {
  struct gen *g = arg;
  ck_assert_uint_eq(offset, g->next);
  ck_assert_uint_le(n * g->elem, IO_WRITE_CHUNK_BYTES);
  if (offset >= g->fail_at) {
    return qdp_error_set(reterr, QDP_ERR_DATA_LOSS, NULL, "shard 1 lost at element %" PRIu64,
                         offset);
  }
  double *d = dst;
  uint64_t per = g->elem / 8, first = offset * per;
  for (uint64_t i = 0; i < n * per; i++) {
    d[i] = (double)(first + i) * 0.5 - 7.0;
  }
  g->next = offset + n;
  g->calls++;
  return QDP_OK;
}

START_TEST(test_write_npy_then_read_back_in_several_chunks) {
  make_tmpdir();
  char path[512];
  snprintf(path, sizeof path, "%s/out.npy", tmpdir);
  /* 3 x 700000 float64 = 16.8 MB: five 4 MiB chunks (the last partial). */
  const uint64_t rows = 3, cols = 700000;
  struct gen g = {8, 0, 0, UINT64_MAX};
  struct qdp_error err = QDP_ERROR_INIT;
  struct io_folder f = tmp_folder();
  ck_assert_int_eq(io_write_npy_beneath(&f, path, 0, NULL, 0, QDP_DTYPE_FLOAT64, 2, rows, cols,
                                        gen_read, &g, &err),
                   QDP_OK);
  ck_assert_uint_eq(g.next, rows * cols);
  ck_assert_uint_eq(g.calls, (rows * cols * 8 + IO_WRITE_CHUNK_BYTES - 1) / IO_WRITE_CHUNK_BYTES);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_uint_eq((uint64_t)st.st_size, 128 + rows * cols * 8);
  ck_assert_uint_eq(st.st_mode & 0777, 0644);
  ck_assert_int_eq(dir_entries(), 1); /* no temporary left beside it */

  struct io_mapping m;
  struct qdp_npy h;
  ck_assert_int_eq(map_path(path, &m, &h, &err), QDP_OK);
  ck_assert_int_eq(h.dtype, QDP_DTYPE_FLOAT64);
  ck_assert_uint_eq(h.rows, rows);
  ck_assert_uint_eq(h.cols, cols);
  const double *d = m.data;
  for (uint64_t i = 0; i < rows * cols; i++) {
    if (d[i] != (double)i * 0.5 - 7.0) {
      ck_abort_msg("element %" PRIu64 " is %g, want %g", i, d[i], (double)i * 0.5 - 7.0);
    }
  }
  io_unmap(&m);

  /* A 1-D complex128 file of 4 elements (8 doubles, one chunk). */
  snprintf(path, sizeof path, "%s/c.npy", tmpdir);
  struct gen g2 = {16, 0, 0, UINT64_MAX};
  ck_assert_int_eq(io_write_npy_beneath(&f, path, 0, NULL, 0, QDP_DTYPE_COMPLEX128, 1, 1, 4,
                                        gen_read, &g2, &err),
                   QDP_OK);
  ck_assert_int_eq(map_path(path, &m, &h, &err), QDP_OK);
  ck_assert_int_eq(h.dtype, QDP_DTYPE_COMPLEX128);
  ck_assert_int_eq(h.ndim, 1);
  ck_assert_uint_eq(h.cols, 4);
  ck_assert_uint_eq(m.bytes, 64);
  d = m.data;
  for (int i = 0; i < 8; i++) {
    ck_assert_double_eq(d[i], i * 0.5 - 7.0);
  }
  io_unmap(&m);
  io_folder_close(&f);
  remove_tmpdir();
}
END_TEST

START_TEST(test_write_npy_refuses_existing_file_unless_overwrite) {
  make_tmpdir();
  char path[512];
  snprintf(path, sizeof path, "%s/keep.npy", tmpdir);
  write_file(path, "precious", 8);
  struct gen g = {8, 0, 0, UINT64_MAX};
  struct qdp_error err = QDP_ERROR_INIT;
  struct io_folder f = tmp_folder();
  ck_assert_int_eq(
      io_write_npy_beneath(&f, path, 0, NULL, 0, QDP_DTYPE_FLOAT64, 1, 1, 10, gen_read, &g, &err),
      QDP_ERR_ALREADY_EXISTS);
  char want[600];
  snprintf(want, sizeof want, "'%s' exists", path);
  ck_assert_ptr_nonnull(strstr(err.msg, want));
  ck_assert_uint_eq(g.calls, 0);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_size, 8);
  ck_assert_int_eq(dir_entries(), 1);

  /* One of the daemon's own files is never replaced, overwrite or not. */
  struct io_file_id own = {(uint64_t)st.st_dev, (uint64_t)st.st_ino};
  ck_assert_int_eq(
      io_write_npy_beneath(&f, path, 1, &own, 1, QDP_DTYPE_FLOAT64, 1, 1, 10, gen_read, &g, &err),
      QDP_ERR_PERMISSION_DENIED);
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_size, 8);

  ck_assert_int_eq(
      io_write_npy_beneath(&f, path, 1, NULL, 0, QDP_DTYPE_FLOAT64, 1, 1, 10, gen_read, &g, &err),
      QDP_OK);
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_size, 128 + 80);
  ck_assert_int_eq(dir_entries(), 1);

  ck_assert_int_eq(io_write_npy_beneath(&f, "rel.npy", 1, NULL, 0, QDP_DTYPE_FLOAT64, 1, 1, 10,
                                        gen_read, &g, &err),
                   QDP_ERR_INVALID_ARGUMENT);
  snprintf(path, sizeof path, "%s/no/such/dir.npy", tmpdir);
  ck_assert_int_eq(
      io_write_npy_beneath(&f, path, 0, NULL, 0, QDP_DTYPE_FLOAT64, 1, 1, 10, gen_read, &g, &err),
      QDP_ERR_NOT_FOUND);
  /* Outside the folder, however named. */
  ck_assert_int_eq(io_write_npy_beneath(&f, "/tmp/qdp-outside.npy", 0, NULL, 0, QDP_DTYPE_FLOAT64,
                                        1, 1, 10, gen_read, &g, &err),
                   QDP_ERR_PERMISSION_DENIED);
  io_folder_close(&f);
  remove_tmpdir();
}
END_TEST

START_TEST(test_write_npy_leaves_no_partial_file_when_reader_fails) {
  make_tmpdir();
  char path[512];
  snprintf(path, sizeof path, "%s/part.npy", tmpdir);
  /* Fails on the second chunk, after 4 MiB were written to the temporary file. */
  struct gen g = {8, 0, 0, IO_WRITE_CHUNK_BYTES / 8};
  struct qdp_error err = QDP_ERROR_INIT;
  struct io_folder f = tmp_folder();
  ck_assert_int_eq(io_write_npy_beneath(&f, path, 0, NULL, 0, QDP_DTYPE_FLOAT64, 2, 2, 600000,
                                        gen_read, &g, &err),
                   QDP_ERR_DATA_LOSS);
  ck_assert_str_eq(err.msg, "shard 1 lost at element 524288");
  ck_assert_uint_eq(g.calls, 1);
  ck_assert_int_eq(access(path, F_OK), -1);
  ck_assert_int_eq(dir_entries(), 0);

  /* With overwrite, a failure leaves the old file as it was. */
  write_file(path, "old", 3);
  struct gen g2 = {8, 0, 0, IO_WRITE_CHUNK_BYTES / 8};
  ck_assert_int_eq(io_write_npy_beneath(&f, path, 1, NULL, 0, QDP_DTYPE_FLOAT64, 2, 2, 600000,
                                        gen_read, &g2, &err),
                   QDP_ERR_DATA_LOSS);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_size, 3);
  ck_assert_int_eq(dir_entries(), 1);
  io_folder_close(&f);
  remove_tmpdir();
}
END_TEST

START_TEST(test_write_npy_fd_fills_a_handed_over_file_and_refuses_read_only_ones) {
  make_tmpdir();
  char path[512];
  snprintf(path, sizeof path, "%s/handed.npy", tmpdir);
  static const char before[] = "whatever was there before, to be replaced";
  write_file(path, before, sizeof before - 1);
  int fd = open(path, O_RDWR);
  struct gen g = {8, 0, 0, UINT64_MAX};
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(io_write_npy_fd(fd, "'handed'", QDP_DTYPE_FLOAT64, 1, 1, 3, gen_read, &g, &err),
                   QDP_OK);
  close(fd);
  struct io_mapping m;
  struct qdp_npy h;
  ck_assert_int_eq(map_path(path, &m, &h, &err), QDP_OK);
  ck_assert_uint_eq(h.cols, 3);
  ck_assert_double_eq(((const double *)m.data)[2], 2 * 0.5 - 7.0);
  io_unmap(&m);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_size, 128 + 24);

  fd = open(path, O_RDONLY);
  struct gen g2 = {8, 0, 0, UINT64_MAX};
  ck_assert_int_eq(io_write_npy_fd(fd, "'handed'", QDP_DTYPE_FLOAT64, 1, 1, 3, gen_read, &g2, &err),
                   QDP_ERR_PERMISSION_DENIED);
  close(fd);
  fd = open(path, O_WRONLY | O_APPEND);
  ck_assert_int_eq(io_write_npy_fd(fd, "'handed'", QDP_DTYPE_FLOAT64, 1, 1, 3, gen_read, &g2, &err),
                   QDP_ERR_PERMISSION_DENIED);
  close(fd);
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_size, 128 + 24);
  remove_tmpdir();
}
END_TEST

static Suite *io_suite(void) {
  Suite *s = suite_create("io");
  TCase *parse = tcase_create("npy_parse");
  tcase_add_test(parse, test_parse_v1_2d_float64);
  tcase_add_test(parse, test_parse_1d_is_one_row);
  tcase_add_test(parse, test_parse_versions_2_and_3);
  tcase_add_test(parse, test_parse_complex_dtypes_and_loose_syntax);
  tcase_add_test(parse, test_parse_refuses_each_bad_header_by_name);
  tcase_add_test(parse, test_parse_refuses_bad_magic_and_truncation);
  suite_add_tcase(s, parse);

  TCase *hdr = tcase_create("npy_header");
  tcase_add_test(hdr, test_header_matches_numpy_byte_for_byte);
  tcase_add_test(hdr, test_header_round_trips_through_parse);
  suite_add_tcase(s, hdr);

  TCase *map = tcase_create("map_npy");
  tcase_add_test(map, test_map_npy_reads_values_written_by_hand);
  tcase_add_test(map, test_map_npy_refusals_name_the_path);
  suite_add_tcase(s, map);

  TCase *shm = tcase_create("map_fd");
  tcase_add_test(shm, test_map_fd_maps_the_asked_range_of_shared_memory);
  tcase_add_test(shm, test_map_fd_of_memfd_reports_seals_and_refuses_what_is_not_a_file);
  suite_add_tcase(s, shm);

  TCase *fold = tcase_create("folders");
  tcase_set_timeout(fold, 60);
  tcase_add_test(fold, test_folder_keeps_every_path_beneath_it);
  tcase_add_test(fold, test_folder_holds_while_a_link_is_swapped_in_and_out);
  suite_add_tcase(s, fold);

  TCase *wr = tcase_create("write_npy");
  tcase_set_timeout(wr, 60);
  tcase_add_test(wr, test_write_npy_then_read_back_in_several_chunks);
  tcase_add_test(wr, test_write_npy_refuses_existing_file_unless_overwrite);
  tcase_add_test(wr, test_write_npy_leaves_no_partial_file_when_reader_fails);
  tcase_add_test(wr, test_write_npy_fd_fills_a_handed_over_file_and_refuses_read_only_ones);
  suite_add_tcase(s, wr);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(io_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
