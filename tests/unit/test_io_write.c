/* test_io_write.c — where the daemon opens and writes files (daemon/io): confinement folders that
 * keep every path beneath them, also while a link is swapped in and out; and .npy export written
 * in chunks and read back, refusing an existing file unless asked to overwrite, leaving no partial
 * file when the reader fails, and filling a descriptor handed over. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io_fixture.h"

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

/* tmpdir as a confinement folder. */
static struct io_folder tmp_folder(void) {
  struct io_folder f;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(io_folder_open(tmpdir, "export_dir", &f, &err), QDP_OK);
  return f;
}

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

void io_add_folders(TCase *tc) {
  tcase_add_test(tc, test_folder_keeps_every_path_beneath_it);
  tcase_add_test(tc, test_folder_holds_while_a_link_is_swapped_in_and_out);
}

void io_add_write_npy(TCase *tc) {
  tcase_add_test(tc, test_write_npy_then_read_back_in_several_chunks);
  tcase_add_test(tc, test_write_npy_refuses_existing_file_unless_overwrite);
  tcase_add_test(tc, test_write_npy_leaves_no_partial_file_when_reader_fails);
  tcase_add_test(tc, test_write_npy_fd_fills_a_handed_over_file_and_refuses_read_only_ones);
}
