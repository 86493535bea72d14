/* fuzz_fetch.c — libqdp's receiving side of Fetch: a stream of arbitrary messages delivered as
 * FetchChunks (qdp__fetch_deliver: the fast path that copies the data straight from the received
 * slices, the generic unpack for any other layout, the bounds against the caller's buffer or
 * file, and the end-of-stream check), into a buffer of exactly the caller's size.
 *
 * Input: one flags byte, three varints (offset, count, buffer bytes), then messages as a varint
 * length and that many bytes (the last one takes what is left). Flags: bits 0-1 the dtype the
 * state must have (none, complex64, complex128, float64), bit 2 deliver to a file instead of the
 * buffer, bits 4-7 the size of the slices each message arrives in (0: one slice).
 *
 * Checked beyond memory safety: a refusal has a status and a message; a completed fetch delivered
 * what it announced, within the buffer, and wrote nothing past the announced amplitudes.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>

#include "fuzz.h"
#include "libqdp_int.h"

/* Bounds that keep one input cheap; the code's own limits are far larger. */
#define MAX_MESSAGES 64
#define MAX_DST_BYTES (1u << 16)

static int devnull = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  FUZZ_CHECK(devnull >= 0, "cannot open /dev/null");
  return 0;
}

struct reader {
  const uint8_t *p, *end;
};

static uint64_t varint(struct reader *r) {
  uint64_t v = 0;
  for (unsigned shift = 0; shift < 64 && r->p < r->end; shift += 7) {
    uint8_t b = *r->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      break;
    }
  }
  return v;
}

/* The message as gRPC may hand it over: in slices of `piece` bytes (0: one slice). */
static grpc_byte_buffer *message(const uint8_t *p, size_t n, size_t piece) {
  grpc_slice parts[MAX_DST_BYTES / 64];
  size_t k = 0;
  if (piece == 0 || n / piece + 1 > sizeof parts / sizeof parts[0]) {
    piece = n ? n : 1;
  }
  for (size_t at = 0; at < n || k == 0; at += piece) {
    size_t m = n - at < piece ? n - at : piece;
    parts[k++] = grpc_slice_from_copied_buffer((const char *)p + at, m);
  }
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(parts, k);
  for (size_t i = 0; i < k; i++) {
    grpc_slice_unref(parts[i]);
  }
  return bb;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) {
    return 0;
  }
  static const qdp_dtype want[4] = {QDP_DTYPE_UNSPECIFIED, QDP_DTYPE_COMPLEX64,
                                    QDP_DTYPE_COMPLEX128, QDP_DTYPE_FLOAT64};
  uint8_t flags = data[0];
  struct reader r = {data + 1, data + size};
  uint64_t offset = varint(&r);
  uint64_t count = varint(&r);
  size_t dst_bytes = (size_t)(varint(&r) % (MAX_DST_BYTES + 1));
  int to_file = flags & 4;

  grpc_byte_buffer *msgs[MAX_MESSAGES];
  size_t n = 0;
  while (r.p < r.end && n < MAX_MESSAGES) {
    uint64_t len = varint(&r);
    size_t left = (size_t)(r.end - r.p);
    size_t take = len < left ? (size_t)len : left;
    msgs[n++] = message(r.p, take, flags >> 4);
    r.p += take;
  }

  /* Exactly the caller's size, poisoned: ASan sees a write past it, the poison one past the
   * amplitudes announced. */
  unsigned char *dst = to_file ? NULL : malloc(dst_bytes);
  FUZZ_CHECK(to_file || dst, "no memory for %zu B", dst_bytes);
  if (dst) {
    memset(dst, 0xA5, dst_bytes);
  }
  uint64_t got = 0;
  qdp__err_reset();
  qdp_status rc =
      qdp__fetch_deliver(msgs, n, offset, count, want[flags & 3], dst, dst_bytes, devnull, &got);
  if (rc != QDP_OK) {
    const struct qdp_errinfo *e = qdp_last_error();
    FUZZ_CHECK(rc == QDP_ERR_INTERNAL || rc == QDP_ERR_INVALID_ARGUMENT ||
                   rc == QDP_ERR_DATA_LOSS || rc == QDP_ERR_RESOURCE_EXHAUSTED,
               "status %d (%s)", (int)rc, e->msg);
    FUZZ_CHECK(e->code == rc && e->msg[0], "status %d recorded as %d '%s'", (int)rc, (int)e->code,
               e->msg);
  } else {
    FUZZ_CHECK(n > 0, "a fetch of no message completed");
    FUZZ_CHECK(to_file || got <= dst_bytes, "%llu B delivered into %zu B", (unsigned long long)got,
               dst_bytes);
    for (size_t i = got; dst && i < dst_bytes; i++) {
      FUZZ_CHECK(dst[i] == 0xA5, "byte %zu written past the %llu B fetched", i,
                 (unsigned long long)got);
    }
  }
  free(dst);
  for (size_t i = 0; i < n; i++) {
    grpc_byte_buffer_destroy(msgs[i]);
  }
  return 0;
}
