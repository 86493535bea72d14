/* Unit tests for daemon/state/tickets.c: descriptors handed over, taken once by their owner for
 * their access, bounded, lapsing, and closed whatever happens to them. */
#include <check.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state/tickets.h"

/* Whether fd is open in this process. */
static int is_open(int fd) {
  return fcntl(fd, F_GETFD) != -1;
}

static struct fd_tickets *make(uint32_t total, uint32_t per_owner, uint64_t ttl_ms) {
  struct fd_tickets *t = NULL;
  ck_assert_int_eq(fd_tickets_create(total, per_owner, ttl_ms, &t, NULL), QDP_OK);
  return t;
}

START_TEST(test_a_ticket_is_taken_once_by_its_owner_for_its_access) {
  struct fd_tickets *t = make(0, 0, 60000);
  struct qdp_error e = QDP_ERROR_INIT;
  char ticket[FD_TICKET_LEN];
  int fd = open("/dev/null", O_RDONLY);
  ck_assert_int_eq(fd_tickets_add(t, "uid:7", fd, FD_ACCESS_READ, 0, ticket, &e), QDP_OK);
  ck_assert_int_eq(ticket[0], 't');
  ck_assert_uint_eq(strlen(ticket), FD_TICKET_LEN - 1);
  int got = -1;
  /* Another owner, a truncated ticket: unknown, and the ticket stays for its owner. */
  ck_assert_int_eq(fd_tickets_take(t, "uid:8", ticket, FD_ACCESS_READ, 1, "fd_ticket", &got, &e),
                   QDP_ERR_NOT_FOUND);
  ck_assert_str_eq(e.field, "fd_ticket");
  char cut[FD_TICKET_LEN];
  memcpy(cut, ticket, FD_TICKET_LEN);
  cut[FD_TICKET_LEN - 2] = '\0';
  ck_assert_int_eq(fd_tickets_take(t, "uid:7", cut, FD_ACCESS_READ, 1, "fd_ticket", &got, &e),
                   QDP_ERR_NOT_FOUND);
  ck_assert_uint_eq(fd_tickets_count(t), 1);
  ck_assert_int_eq(fd_tickets_take(t, "uid:7", ticket, FD_ACCESS_READ, 1, "fd_ticket", &got, &e),
                   QDP_OK);
  ck_assert_int_eq(got, fd);
  close(got);
  /* Once. */
  ck_assert_int_eq(fd_tickets_take(t, "uid:7", ticket, FD_ACCESS_READ, 2, "fd_ticket", &got, &e),
                   QDP_ERR_NOT_FOUND);
  /* Handed over for reading, named for writing: refused, and the descriptor closed. */
  fd = open("/dev/null", O_RDONLY);
  ck_assert_int_eq(fd_tickets_add(t, "uid:7", fd, FD_ACCESS_READ, 0, ticket, &e), QDP_OK);
  ck_assert_int_eq(fd_tickets_take(t, "uid:7", ticket, FD_ACCESS_WRITE, 1, "fd_ticket", &got, &e),
                   QDP_ERR_PERMISSION_DENIED);
  ck_assert_ptr_nonnull(strstr(e.msg, "for reading"));
  ck_assert(!is_open(fd));
  ck_assert_uint_eq(fd_tickets_count(t), 0);
  fd_tickets_destroy(t);
}
END_TEST

START_TEST(test_tickets_are_bounded_lapse_and_close_their_descriptors) {
  struct fd_tickets *t = make(3, 2, 1000);
  struct qdp_error e = QDP_ERROR_INIT;
  char ticket[4][FD_TICKET_LEN];
  int fds[5];
  for (int i = 0; i < 5; i++) {
    fds[i] = open("/dev/null", O_RDONLY);
  }
  ck_assert_int_eq(fd_tickets_add(t, "a", fds[0], FD_ACCESS_READ, 0, ticket[0], &e), QDP_OK);
  ck_assert_int_eq(fd_tickets_add(t, "a", fds[1], FD_ACCESS_READ, 0, ticket[1], &e), QDP_OK);
  /* A third of one owner's: refused, and its descriptor closed. */
  ck_assert_int_eq(fd_tickets_add(t, "a", fds[2], FD_ACCESS_READ, 0, ticket[2], &e),
                   QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert(!is_open(fds[2]));
  ck_assert_int_eq(fd_tickets_add(t, "b", fds[3], FD_ACCESS_WRITE, 500, ticket[3], &e), QDP_OK);
  /* The table's limit. */
  ck_assert_int_eq(fd_tickets_add(t, "c", fds[4], FD_ACCESS_READ, 500, ticket[2], &e),
                   QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg, "its limit"));
  ck_assert(!is_open(fds[4]));
  /* A lapsed ticket cannot be taken even before the sweep; the sweep closes it. */
  int got = -1;
  ck_assert_int_eq(fd_tickets_take(t, "a", ticket[0], FD_ACCESS_READ, 1000, "t", &got, &e),
                   QDP_ERR_NOT_FOUND);
  ck_assert_uint_eq(fd_tickets_expire(t, 1000), 2);
  ck_assert(!is_open(fds[0]) && !is_open(fds[1]));
  ck_assert(is_open(fds[3]));
  /* Destroying the table closes what it still holds. */
  fd_tickets_destroy(t);
  ck_assert(!is_open(fds[3]));
}
END_TEST

int main(void) {
  Suite *s = suite_create("tickets");
  TCase *tc = tcase_create("tickets");
  tcase_add_test(tc, test_a_ticket_is_taken_once_by_its_owner_for_its_access);
  tcase_add_test(tc, test_tickets_are_bounded_lapse_and_close_their_descriptors);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
