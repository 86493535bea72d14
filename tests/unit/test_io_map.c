/* test_io_map.c — mapping (daemon/io/map.c): .npy files mapped with the values written by hand
 * and refusals that name the path; shared memory mapped in the asked range, and memfds with their
 * seals, refusing what is not a file. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io_fixture.h"

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
  ck_assert_int_eq(m.frozen, 0);
  ck_assert_int_eq(memcmp(m.data, src, size), 0);
  io_unmap(&m);
  /* Sealed against writing too: frozen, and never mapped for writing. */
  ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
  ck_assert_int_eq(io_map_fd(dup(fd), what, 0, size, false, &m, &err), QDP_OK);
  ck_assert_int_eq(m.frozen, 1);
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

/* A memfd cut and grown back keeps its size, so io_mapping_shrunk sees nothing; its change time
 * moves, so io_mapping_changed does. Rewrites through a mapping of pages it already wrote leave
 * the time alone, as do the daemon's own writes once its pages are made writable. */
START_TEST(test_mapping_changed_sees_a_cut_grown_back) {
  int fd = memfd_create("qdp-test-gen", MFD_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, 3 * 4096), 0);
  unsigned char *client = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne(client, MAP_FAILED);
  memset(client, 7, 3 * 4096);
  struct io_mapping m;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(io_map_fd(dup(fd), "gen", 0, 0, IO_MAP_WHOLE | IO_MAP_WRITABLE, &m, &err),
                   QDP_OK);
  ck_assert_int_eq(io_mapping_populate_write(&m, &err), QDP_OK);
  int64_t gen = 0;
  ck_assert(io_mapping_generation(&m, &gen));
  ck_assert_int_eq(((volatile const unsigned char *)m.data)[4096], 7);
  ck_assert_int_eq(io_mapping_resident(&m), 1); /* populated: every page in place */
  memset(client, 8, 3 * 4096);
  memset(m.base, 9, 3 * 4096);
  ck_assert(!io_mapping_changed(&m, gen));
  ck_assert_int_eq(ftruncate(fd, 0), 0);
  ck_assert_int_eq(ftruncate(fd, 3 * 4096), 0);
  ck_assert(!io_mapping_shrunk(&m));
  ck_assert(io_mapping_changed(&m, gen));
  ck_assert_int_eq(io_mapping_resident(&m), 0); /* the cut took the pages out of this mapping */
  ck_assert_int_eq(((volatile const unsigned char *)m.data)[4096], 0); /* what it reads now */
  io_unmap(&m);
  ck_assert(!io_mapping_changed(&m, gen)); /* unmapped: nothing to say */
  munmap(client, 3 * 4096);
  close(fd);
}
END_TEST

void io_add_map_npy(TCase *tc) {
  tcase_add_test(tc, test_map_npy_reads_values_written_by_hand);
  tcase_add_test(tc, test_map_npy_refusals_name_the_path);
}

void io_add_map_fd(TCase *tc) {
  tcase_add_test(tc, test_map_fd_maps_the_asked_range_of_shared_memory);
  tcase_add_test(tc, test_map_fd_of_memfd_reports_seals_and_refuses_what_is_not_a_file);
  tcase_add_test(tc, test_mapping_changed_sees_a_cut_grown_back);
}
