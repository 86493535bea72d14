/* fuzz_npy.c — the shared .npy codec (common/qdp_npy.c) and its two users on the same bytes: the
 * daemon's (io_npy_parse, which reads a mapped file whole) and libqdp's (qdp__npy_parse on the
 * bytes, and qdp__input_file_open on the same bytes as a file, the way qdpctl and qdp_encode open
 * a local input: .npy, CSV when the bytes are text, raw).
 *
 * Checked beyond memory safety: a refusal has INVALID_ARGUMENT (or SYSTEM for the file) and a
 * message; an accepted header describes data inside the input and formats back to a header that
 * parses the same; the daemon accepts exactly what the codec accepts with its data present, and
 * libqdp exactly what the codec accepts, both with the codec's element type, shape and offset.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "io/npy.h"
#include "libqdp_int.h"
#include "qdp_npy.h"

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

/* The codec itself: what it accepts is self-consistent and formats back to the same header. */
static bool codec_parse(const uint8_t *data, size_t size, struct qdp_npy *ret) {
  struct qdp_npy_error e;
  qdp_status rc = qdp_npy_parse(data, size, ret, &e);
  if (rc != QDP_OK) {
    FUZZ_CHECK(rc == QDP_ERR_INVALID_ARGUMENT && e.msg[0] && !strchr(e.msg, '\n'), "codec: %d (%s)",
               (int)rc, e.msg);
    return false;
  }
  unsigned es = qdp_dtype_size(ret->dtype);
  FUZZ_CHECK(es && (ret->ndim == 1 || ret->ndim == 2) && (ret->ndim == 2 || ret->rows == 1),
             "codec: dtype %d, %d dimensions, %llu rows", (int)ret->dtype, ret->ndim,
             (unsigned long long)ret->rows);
  FUZZ_CHECK((ret->cols == 0 || ret->rows <= UINT64_MAX / ret->cols) &&
                 ret->data_bytes == ret->rows * ret->cols * es && ret->data_offset <= size,
             "codec: %llu x %llu elements in %llu B at %llu", (unsigned long long)ret->rows,
             (unsigned long long)ret->cols, (unsigned long long)ret->data_bytes,
             (unsigned long long)ret->data_offset);
  char buf[QDP_NPY_HEADER_CAP];
  size_t n;
  struct qdp_npy back;
  FUZZ_CHECK(qdp_npy_format(ret->dtype, ret->ndim, ret->rows, ret->cols, buf, sizeof buf, &n, &e) ==
                     QDP_OK &&
                 qdp_npy_parse(buf, n, &back, &e) == QDP_OK && back.dtype == ret->dtype &&
                 back.ndim == ret->ndim && back.rows == ret->rows && back.cols == ret->cols &&
                 back.data_offset == n && n % 64 == 0,
             "codec: the header of %llu x %llu does not round-trip (%s)",
             (unsigned long long)ret->rows, (unsigned long long)ret->cols, e.msg);
  return true;
}

static void daemon_parse(const uint8_t *data, size_t size, const struct qdp_npy *codec,
                         bool codec_ok) {
  struct qdp_npy d;
  struct qdp_error e = QDP_ERROR_INIT;
  qdp_status rc = io_npy_parse(data, size, &d, &e);
  bool want = codec_ok && qdp_npy_check_data(codec, size, NULL) == QDP_OK;
  FUZZ_CHECK((rc == QDP_OK) == want, "daemon: %d (%s) where the codec says %d", (int)rc, e.msg,
             (int)want);
  if (rc != QDP_OK) {
    FUZZ_CHECK(rc == QDP_ERR_INVALID_ARGUMENT && e.code == rc && e.msg[0], "daemon: %d (%s)",
               (int)rc, e.msg);
    return;
  }
  FUZZ_CHECK(d.dtype == codec->dtype && d.ndim == codec->ndim && d.rows == codec->rows &&
                 d.cols == codec->cols && d.data_offset == codec->data_offset &&
                 d.data_bytes <= size - d.data_offset,
             "daemon: %d, %llu x %llu at %llu", (int)d.dtype, (unsigned long long)d.rows,
             (unsigned long long)d.cols, (unsigned long long)d.data_offset);
}

static void client_parse(const uint8_t *data, size_t size, const struct qdp_npy *codec,
                         bool codec_ok) {
  struct qdp__npy d;
  qdp_status rc = qdp__npy_parse(data, size, &d);
  const struct qdp_errinfo *e = qdp_last_error();
  FUZZ_CHECK((rc == QDP_OK) == codec_ok, "client: %d (%s) where the codec says %d", (int)rc, e->msg,
             (int)codec_ok);
  if (rc != QDP_OK) {
    FUZZ_CHECK(rc == QDP_ERR_INVALID_ARGUMENT && e->code == rc && e->msg[0], "client: %d (%s)",
               (int)rc, e->msg);
    return;
  }
  /* The same file must not be read two ways: a state encoded from a path on the node and from
   * the same file uploaded by libqdp must see the same values. */
  FUZZ_CHECK(d.dtype == codec->dtype && d.shape[0] == codec->rows && d.shape[1] == codec->cols &&
                 d.count == codec->rows * codec->cols && d.data_offset == codec->data_offset,
             "client: %d, %llu x %llu at %llu", (int)d.dtype, (unsigned long long)d.shape[0],
             (unsigned long long)d.shape[1], (unsigned long long)d.data_offset);
}

/* qdp__input_file_open on the input as a file, with the reshape, the raw-file dtype and raw taken
 * from the last byte (so one input explores the reshapes as well as the header); text that is
 * not .npy is read as CSV. */
static void client_file(const uint8_t *data, size_t size) {
  FUZZ_CHECK(ftruncate(memfd, 0) == 0, "ftruncate");
  FUZZ_CHECK(size == 0 || pwrite(memfd, data, size, 0) == (ssize_t)size, "pwrite");
  uint8_t last = size ? data[size - 1] : 0;
  static const qdp_dtype raw[4] = {QDP_DTYPE_UNSPECIFIED, QDP_DTYPE_FLOAT32, QDP_DTYPE_FLOAT64,
                                   QDP_DTYPE_INT64};
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_LOCAL_FILE;
  in.path = memfd_path;
  in.dtype = raw[(last >> 4) & 3];
  in.rows = last & 7;
  in.cols = (last >> 3) & 7;
  in.offset = (last >> 6) * 8;
  in.raw = last >> 7;
  struct qdp__input_file f;
  qdp_status rc = qdp__input_file_open(&in, &f);
  if (rc != QDP_OK) {
    const struct qdp_errinfo *e = qdp_last_error();
    FUZZ_CHECK(f.fd == -1 && !f.values &&
                   (rc == QDP_ERR_INVALID_ARGUMENT || rc == QDP_ERR_SYSTEM) && e->msg[0],
               "client file: %d (%s)", (int)rc, e->msg);
    return;
  }
  const struct qdp__npy *d = &f.d;
  unsigned es = qdp_dtype_size(d->dtype);
  if (f.csv) {
    FUZZ_CHECK(f.fd == -1 && f.values && !in.raw &&
                   (d->dtype == QDP_DTYPE_FLOAT32 || d->dtype == QDP_DTYPE_FLOAT64 ||
                    d->dtype == QDP_DTYPE_INT64) &&
                   d->count >= 1 && d->count <= size,
               "client csv: %d, %llu values from %zu B", (int)d->dtype,
               (unsigned long long)d->count, size);
  } else {
    FUZZ_CHECK(
        f.fd >= 0 && es && d->data_offset <= size && d->count <= (size - d->data_offset) / es,
        "client file: %llu elements at %llu in %zu B", (unsigned long long)d->count,
        (unsigned long long)d->data_offset, size);
  }
  FUZZ_CHECK(d->shape[0] * d->shape[1] == d->count, "client file: %llu x %llu for %llu elements",
             (unsigned long long)d->shape[0], (unsigned long long)d->shape[1],
             (unsigned long long)d->count);
  free(f.values);
  if (f.fd >= 0) {
    close(f.fd);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct qdp_npy h;
  bool ok = codec_parse(data, size, &h);
  daemon_parse(data, size, &h, ok);
  client_parse(data, size, &h, ok);
  client_file(data, size);
  return 0;
}
