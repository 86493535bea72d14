/* Unit tests of daemon/rpc/guard.{c,h}: a mapped input truncated under a reader gives zeros and a
 * "lost" flag instead of killing the process with SIGBUS. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/guard.h"

START_TEST(test_truncated_mapping_reads_zeros_and_reports_the_loss) {
  ck_assert_int_eq(io_guard_install(NULL), QDP_OK);
  ck_assert_int_eq(io_guard_install(NULL), QDP_OK); /* idempotent */
  long page = sysconf(_SC_PAGESIZE);
  size_t len = (size_t)page * 4;
  int fd = memfd_create("qdp-guard-test", MFD_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
  unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne(p, MAP_FAILED);
  memset(p, 0x5a, len);
  int slot = io_guard_add(p, len);
  ck_assert_int_ge(slot, 0);
  /* The first page survives; the last three vanish under the reader. */
  ck_assert_int_eq(ftruncate(fd, page), 0);
  unsigned sum = 0;
  for (size_t i = 0; i < len; i += (size_t)page) {
    sum += p[i];
  }
  /* After the fault the whole range reads as zeros (the handler replaced every page). */
  ck_assert_uint_le(sum, 0x5a);
  ck_assert(io_guard_remove(slot));
  munmap(p, len);
  close(fd);
}
END_TEST

START_TEST(test_every_job_guarding_a_faulted_range_learns_of_the_loss) {
  /* Two jobs read one registered region through one mapping; it shrinks under them. */
  ck_assert_int_eq(io_guard_install(NULL), QDP_OK);
  long page = sysconf(_SC_PAGESIZE);
  size_t len = (size_t)page * 2;
  int fd = memfd_create("qdp-guard-test-2", MFD_CLOEXEC);
  ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
  volatile unsigned char *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne((void *)p, MAP_FAILED);
  int a = io_guard_add((void *)p, len);
  int b = io_guard_add((void *)p, len);
  ck_assert_int_ge(a, 0);
  ck_assert_int_ge(b, 0);
  ck_assert_int_eq(ftruncate(fd, 0), 0);
  ck_assert_uint_eq(p[page], 0);
  ck_assert(io_guard_remove(b));
  ck_assert(io_guard_remove(a));
  munmap((void *)p, len);
  close(fd);
}
END_TEST

START_TEST(test_untouched_guard_reports_no_loss_and_slots_are_reused) {
  ck_assert_int_eq(io_guard_install(NULL), QDP_OK);
  long page = sysconf(_SC_PAGESIZE);
  void *p = mmap(NULL, (size_t)page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(p, MAP_FAILED);
  int slots[300];
  int n = 0;
  while (n < 300 && (slots[n] = io_guard_add(p, (size_t)page)) >= 0) {
    n++;
  }
  ck_assert_int_eq(n, 256); /* one per possible worker */
  for (int i = 0; i < n; i++) {
    ck_assert(!io_guard_remove(slots[i]));
  }
  ck_assert(!io_guard_remove(-1));
  int again = io_guard_add(p, (size_t)page);
  ck_assert_int_ge(again, 0);
  ck_assert(!io_guard_remove(again));
  munmap(p, (size_t)page);
}
END_TEST

int main(void) {
  Suite *s = suite_create("guard");
  TCase *tc = tcase_create("guard");
  tcase_add_test(tc, test_truncated_mapping_reads_zeros_and_reports_the_loss);
  tcase_add_test(tc, test_untouched_guard_reports_no_loss_and_slots_are_reused);
  tcase_add_test(tc, test_every_job_guarding_a_faulted_range_learns_of_the_loss);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
