/* fuzz_npy.c — the two .npy readers on the same bytes: the daemon's (io_npy_parse, which reads a
 * mapped file whole) and libqdp's (qdp__npy_parse on the bytes, and qdp__input_file_open on the
 * same bytes as a file, the way qdpctl and qdp_encode open a local input).
 *
 * Checked beyond memory safety: a refusal has INVALID_ARGUMENT (or SYSTEM for the file) and a
 * message; an accepted header describes data inside the input; and where both readers accept the
 * same bytes they agree on the element type, the element count and where the data starts.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "io/npy.h"
#include "libqdp_int.h"

static int memfd = -1;
static char memfd_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* One memory file for every input, rewritten each time: no file system is touched. */
  memfd = memfd_create("fuzz_npy", MFD_CLOEXEC);
  FUZZ_CHECK(memfd >= 0, "memfd_create failed");
  snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
  return 0;
}

static bool daemon_parse(const uint8_t *data, size_t size, struct io_npy *ret) {
  struct qdp_error e = QDP_ERROR_INIT;
  qdp_status rc = io_npy_parse(data, size, ret, &e);
  if (rc != QDP_OK) {
    FUZZ_CHECK(rc == QDP_ERR_INVALID_ARGUMENT && e.code == rc && e.msg[0], "daemon: %d (%s)",
               (int)rc, e.msg);
    return false;
  }
  unsigned es = qdp_dtype_size(ret->dtype);
  FUZZ_CHECK(es && (ret->ndim == 1 || ret->ndim == 2) && (ret->ndim == 2 || ret->rows == 1),
             "daemon: dtype %d, %d dimensions, %llu rows", (int)ret->dtype, ret->ndim,
             (unsigned long long)ret->rows);
  FUZZ_CHECK((ret->cols == 0 || ret->rows <= UINT64_MAX / ret->cols) &&
                 ret->data_bytes == ret->rows * ret->cols * es,
             "daemon: %llu x %llu elements in %llu B", (unsigned long long)ret->rows,
             (unsigned long long)ret->cols, (unsigned long long)ret->data_bytes);
  FUZZ_CHECK(ret->data_offset <= size && ret->data_bytes <= size - ret->data_offset,
             "daemon: data [%llu, +%llu) past the %zu B input",
             (unsigned long long)ret->data_offset, (unsigned long long)ret->data_bytes, size);
  return true;
}

static bool client_parse(const uint8_t *data, size_t size, struct qdp__npy *ret) {
  qdp_status rc = qdp__npy_parse(data, size, ret);
  const struct qdp_errinfo *e = qdp_last_error();
  if (rc != QDP_OK) {
    FUZZ_CHECK(rc == QDP_ERR_INVALID_ARGUMENT && e->code == rc && e->msg[0], "client: %d (%s)",
               (int)rc, e->msg);
    return false;
  }
  FUZZ_CHECK(qdp_dtype_size(ret->dtype) && (ret->ndim == 1 || ret->ndim == 2) &&
                 (ret->ndim == 2 || ret->shape[1] == 1),
             "client: dtype %d, %d dimensions", (int)ret->dtype, ret->ndim);
  FUZZ_CHECK(ret->count == ret->shape[0] * ret->shape[1] &&
                 (ret->shape[1] == 0 || ret->shape[0] <= UINT64_MAX / 16 / ret->shape[1]),
             "client: %llu elements of %llu x %llu", (unsigned long long)ret->count,
             (unsigned long long)ret->shape[0], (unsigned long long)ret->shape[1]);
  FUZZ_CHECK(ret->data_offset <= size, "client: data at %llu past the %zu B input",
             (unsigned long long)ret->data_offset, size);
  return true;
}

/* qdp__input_file_open on the input as a file, with the reshape and the raw-file dtype taken from
 * the last byte (so one input explores the reshapes as well as the header). */
static void client_file(const uint8_t *data, size_t size) {
  FUZZ_CHECK(ftruncate(memfd, 0) == 0, "ftruncate");
  FUZZ_CHECK(size == 0 || pwrite(memfd, data, size, 0) == (ssize_t)size, "pwrite");
  uint8_t last = size ? data[size - 1] : 0;
  static const qdp_dtype raw[4] = {QDP_DTYPE_UNSPECIFIED, QDP_DTYPE_FLOAT32, QDP_DTYPE_FLOAT64,
                                   QDP_DTYPE_INT64};
  uint64_t rows = last & 7, cols = (last >> 3) & 7, offset = (last >> 6) * 8;
  int fd = -1;
  struct qdp__npy d;
  qdp_status rc =
      qdp__input_file_open(memfd_path, raw[(last >> 4) & 3], rows, cols, offset, &fd, &d);
  if (rc != QDP_OK) {
    const struct qdp_errinfo *e = qdp_last_error();
    FUZZ_CHECK(fd == -1 && (rc == QDP_ERR_INVALID_ARGUMENT || rc == QDP_ERR_SYSTEM) && e->msg[0],
               "client file: %d (%s)", (int)rc, e->msg);
    return;
  }
  unsigned es = qdp_dtype_size(d.dtype);
  FUZZ_CHECK(fd >= 0 && es && d.data_offset <= size && d.count <= (size - d.data_offset) / es,
             "client file: %llu elements at %llu in %zu B", (unsigned long long)d.count,
             (unsigned long long)d.data_offset, size);
  FUZZ_CHECK(d.shape[0] * d.shape[1] == d.count, "client file: %llu x %llu for %llu elements",
             (unsigned long long)d.shape[0], (unsigned long long)d.shape[1],
             (unsigned long long)d.count);
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct io_npy dn;
  struct qdp__npy cn;
  bool daemon_ok = daemon_parse(data, size, &dn);
  bool client_ok = client_parse(data, size, &cn);
  if (daemon_ok && client_ok) {
    /* The same file must not be read two ways: a state encoded from a path on the node and from
     * the same file uploaded by libqdp must see the same values. */
    FUZZ_CHECK(
        dn.dtype == cn.dtype && dn.data_offset == cn.data_offset && dn.rows * dn.cols == cn.count,
        "daemon: %d, %llu x %llu at %llu; client: %d, %llu elements at %llu", (int)dn.dtype,
        (unsigned long long)dn.rows, (unsigned long long)dn.cols,
        (unsigned long long)dn.data_offset, (int)cn.dtype, (unsigned long long)cn.count,
        (unsigned long long)cn.data_offset);
  }
  client_file(data, size);
  return 0;
}
