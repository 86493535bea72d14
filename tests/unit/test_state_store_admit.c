/* test_state_store_admit.c — admission (daemon/state/store.c): the global and per-client byte
 * budgets at their exact boundaries, byte counts that would overflow, the state counts (states and
 * reservations, per owner), an overlong owner, and a cancelled reservation giving its bytes back.
 */
#include <check.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "state/store.h"
#include "state_store_fixture.h"

/* ---- admission ------------------------------------------------------------------------------- */

START_TEST(test_admit_global_budget_exact_boundary) {
  struct state_store *s = make_store(1000, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *a = NULL, *b = NULL, *c = NULL;
  ck_assert_int_eq(state_store_admit(s, "alice", 600, &a, &err), QDP_OK);
  /* 600 + 400 = 1000: exactly the budget fits. */
  ck_assert_int_eq(state_store_admit(s, "bob", 400, &b, &err), QDP_OK);
  ck_assert_uint_eq(usage_bytes(s), 1000);
  state_reservation_cancel(b);
  /* 600 + 401 is one byte over. */
  ck_assert_int_eq(state_store_admit(s, "bob", 401, &c, &err), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_null(c);
  ck_assert_str_eq(err.msg,
                   "state of 401 B refused: the store holds 600 B of its 1000 B budget "
                   "(budget_bytes); release states or raise it");
  ck_assert_uint_eq(err.need_bytes, 401);
  ck_assert_uint_eq(err.free_bytes, 400);
  ck_assert_uint_eq(usage_bytes(s), 600);
  state_reservation_cancel(a);
  ck_assert_uint_eq(usage_bytes(s), 0);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_admit_client_budget_exact_boundary) {
  struct state_store *s = make_store(0, 4294967296ULL, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  ck_assert_int_eq(state_store_admit(s, "alice@h:12", 3221225472ULL, &a, &err), QDP_OK);
  ck_assert_int_eq(state_store_admit(s, "alice@h:12", 1073741825ULL, &b, &err),
                   QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(err.msg,
                   "state of 1 GiB refused: client 'alice@h:12' holds 3 GiB of its 4 GiB budget "
                   "(client_budget_bytes)");
  ck_assert_uint_eq(err.need_bytes, 1073741825ULL);
  ck_assert_uint_eq(err.free_bytes, 1073741824ULL);
  /* Another client has its own budget. */
  ck_assert_int_eq(state_store_admit(s, "carol", 4294967296ULL, &c, &err), QDP_OK);
  /* Exactly the rest of alice's budget fits. */
  ck_assert_int_eq(state_store_admit(s, "alice@h:12", 1073741824ULL, &d, &err), QDP_OK);
  ck_assert_uint_eq(usage_bytes(s), 3221225472ULL + 4294967296ULL + 1073741824ULL);
  state_reservation_cancel(a);
  state_reservation_cancel(c);
  state_reservation_cancel(d);
  ck_assert_uint_eq(usage_bytes(s), 0);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_admit_refuses_byte_count_overflow_when_unlimited) {
  struct state_store *s = make_store(0, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *a = NULL, *b = NULL;
  ck_assert_int_eq(state_store_admit(s, "x", UINT64_MAX - 10, &a, &err), QDP_OK);
  ck_assert_int_eq(state_store_admit(s, "y", 11, &b, &err), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_null(b);
  state_reservation_cancel(a);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_admit_max_states_counts_states_and_reservations) {
  struct state_store *s = make_store(0, 0, 3, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add_state(s, "a", 1, 0, h, t);
  add_state(s, "b", 1, 0, h, t);
  struct state_reservation *r = NULL, *x = NULL;
  ck_assert_int_eq(state_store_admit(s, "c", 1, &r, &err), QDP_OK);
  ck_assert_int_eq(state_store_admit(s, "d", 1, &x, &err), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(err.msg, "max_states 3"));
  state_reservation_cancel(r);
  ck_assert_int_eq(state_store_admit(s, "d", 1, &x, &err), QDP_OK);
  state_reservation_cancel(x);
  ck_assert_uint_eq(usage_states(s), 2);
  state_store_destroy(s);
  ck_assert_int_eq(atomic_load(&destroy_calls), 2);
}
END_TEST

START_TEST(test_admit_max_client_states_per_owner) {
  struct state_store *s = make_store(0, 0, 0, 2);
  struct qdp_error err = QDP_ERROR_INIT;
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  add_state(s, "a", 1, 0, h, t);
  add_state(s, "a", 1, 0, h, t);
  struct state_reservation *r = NULL;
  ck_assert_int_eq(state_store_admit(s, "a", 1, &r, &err), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(err.msg, "client 'a' holds 2 states"));
  ck_assert_int_eq(state_store_admit(s, "b", 1, &r, &err), QDP_OK);
  state_reservation_cancel(r);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_admit_refuses_overlong_owner) {
  struct state_store *s = make_store(0, 0, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  char owner[65];
  memset(owner, 'o', 64);
  owner[64] = '\0';
  struct state_reservation *r = NULL;
  ck_assert_int_eq(state_store_admit(s, owner, 1, &r, &err), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.msg, "64 B"));
  owner[63] = '\0';
  ck_assert_int_eq(state_store_admit(s, owner, 1, &r, &err), QDP_OK);
  state_reservation_cancel(r);
  state_store_destroy(s);
}
END_TEST

START_TEST(test_cancel_returns_reserved_bytes) {
  struct state_store *s = make_store(100, 100, 0, 0);
  struct qdp_error err = QDP_ERROR_INIT;
  struct state_reservation *r = NULL;
  ck_assert_int_eq(state_store_admit(s, "a", 100, &r, &err), QDP_OK);
  ck_assert_uint_eq(usage_bytes(s), 100);
  state_reservation_cancel(r);
  state_reservation_cancel(NULL);
  ck_assert_uint_eq(usage_bytes(s), 0);
  /* The whole budget is available again, globally and for the owner. */
  ck_assert_int_eq(state_store_admit(s, "a", 100, &r, &err), QDP_OK);
  state_reservation_cancel(r);
  state_store_destroy(s);
}
END_TEST

void state_store_add_admit(TCase *tc) {
  tcase_add_test(tc, test_admit_global_budget_exact_boundary);
  tcase_add_test(tc, test_admit_client_budget_exact_boundary);
  tcase_add_test(tc, test_admit_refuses_byte_count_overflow_when_unlimited);
  tcase_add_test(tc, test_admit_max_states_counts_states_and_reservations);
  tcase_add_test(tc, test_admit_max_client_states_per_owner);
  tcase_add_test(tc, test_admit_refuses_overlong_owner);
  tcase_add_test(tc, test_cancel_returns_reserved_bytes);
}
