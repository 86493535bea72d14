/* The parallel host copy (daemon/runtime/host_copy.c): every byte of packed and strided copies,
 * whatever the number of ways and the slice edges (inside rows, across them), against a copy made
 * byte by byte; copies too small to split; many copies in a row on one pool; the refusals. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "runtime/host_copy.h"

static struct host_copy *pool_of(unsigned threads) {
  struct host_copy *p = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_msg(host_copy_create(threads, &p, &e) == QDP_OK, "%s", e.msg);
  ck_assert_uint_eq(host_copy_ways(p), threads + 1);
  return p;
}

/* Copies nrows x row_bytes from src (stride apart) through the pool and byte by byte, and compares
 * them; the bytes past the packed rows must stay as they were. */
static void check_copy(struct host_copy *p, uint64_t row_bytes, uint64_t nrows, uint64_t stride) {
  uint64_t src_bytes = (nrows - 1) * stride + row_bytes, total = row_bytes * nrows;
  unsigned char *src = qdpt_xmalloc(src_bytes);
  unsigned char *got = qdpt_xmalloc(total + 64), *want = qdpt_xmalloc(total + 64);
  for (uint64_t i = 0; i < src_bytes; i++) {
    src[i] = (unsigned char)qdpt_rng_next();
  }
  memset(got, 0xa5, total + 64);
  memset(want, 0xa5, total + 64);
  for (uint64_t r = 0; r < nrows; r++) {
    for (uint64_t b = 0; b < row_bytes; b++) {
      want[r * row_bytes + b] = src[r * stride + b];
    }
  }
  host_copy_rows(p, got, src, stride, row_bytes, nrows);
  ck_assert_msg(memcmp(got, want, total + 64) == 0,
                "%u ways, %llu rows of %llu B, stride %llu: the copy differs", host_copy_ways(p),
                (unsigned long long)nrows, (unsigned long long)row_bytes,
                (unsigned long long)stride);
  free(src);
  free(got);
  free(want);
}

START_TEST(test_copies_every_byte_packed_and_strided) {
  static const unsigned threads[] = {0, 1, 3, 7};
  const uint64_t mib = HOST_COPY_MIN_SLICE;
  qdpt_rng_seed(11);
  for (size_t i = 0; i < sizeof threads / sizeof threads[0]; i++) {
    struct host_copy *p = pool_of(threads[i]);
    check_copy(p, 8 * mib + 13, 1, 8 * mib + 13); /* one row: slices cut inside it */
    check_copy(p, 3 * mib + 1, 3, 3 * mib + 1);   /* packed rows: slices across rows */
    check_copy(p, mib / 2 + 7, 17, mib / 2 + 100); /* strided rows, slices inside and across */
    check_copy(p, 24, 300000, 40);                 /* many short strided rows */
    check_copy(p, 5 * mib, 2, 5 * mib + 3);
    host_copy_destroy(p);
  }
}
END_TEST

/* Below HOST_COPY_MIN_SLICE per way the copy takes fewer ways; nothing is lost either way. */
START_TEST(test_small_copies) {
  struct host_copy *p = pool_of(7);
  qdpt_rng_seed(12);
  check_copy(p, 1, 1, 1);
  check_copy(p, 100, 3, 101);
  check_copy(p, HOST_COPY_MIN_SLICE - 1, 1, HOST_COPY_MIN_SLICE - 1);
  check_copy(p, HOST_COPY_MIN_SLICE, 2, HOST_COPY_MIN_SLICE); /* exactly two ways */
  host_copy_rows(p, NULL, NULL, 8, 8, 0);                      /* nothing to copy */
  host_copy_destroy(p);
  /* No pool: the caller copies alone. */
  check_copy(NULL, 3 * HOST_COPY_MIN_SLICE + 5, 2, 3 * HOST_COPY_MIN_SLICE + 9);
  ck_assert_uint_eq(host_copy_ways(NULL), 1);
}
END_TEST

/* One pool, many copies of changing sizes: every generation is copied once and whole. */
START_TEST(test_many_copies_on_one_pool) {
  struct host_copy *p = pool_of(3);
  qdpt_rng_seed(13);
  for (int k = 0; k < 200; k++) {
    uint64_t row = 1 + qdpt_rng_next() % (3 * HOST_COPY_MIN_SLICE);
    uint64_t rows = 1 + qdpt_rng_next() % 4;
    check_copy(p, row, rows, row + qdpt_rng_next() % 64);
  }
  host_copy_destroy(p);
}
END_TEST

START_TEST(test_refusals) {
  struct host_copy *p = (struct host_copy *)1;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(host_copy_create(HOST_COPY_THREADS_MAX + 1, &p, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(p);
  ck_assert_str_eq(e.field, "copy_threads");
  ck_assert_msg(strstr(e.msg, "copy_threads = 32 is above the most a device takes, 31"), "%s",
                e.msg);
  host_copy_destroy(NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("host_copy");
  TCase *tc = tcase_create("host_copy");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_copies_every_byte_packed_and_strided);
  tcase_add_test(tc, test_small_copies);
  tcase_add_test(tc, test_many_copies_on_one_pool);
  tcase_add_test(tc, test_refusals);
  suite_add_tcase(s, tc);
  return qdpt_run_suite(s, CK_NOFORK);
}
