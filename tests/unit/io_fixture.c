/* io_fixture.c — the helpers of io_fixture.h. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io_fixture.h"

size_t make_npy(unsigned major, const char *dict, size_t data_len, unsigned char **ret) {
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

char tmpdir[256];

void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/qdp-test-io.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

void remove_tmpdir(void) {
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

void write_file(const char *path, const void *buf, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

qdp_status map_path(const char *path, struct io_mapping *m, struct qdp_npy *h,
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
