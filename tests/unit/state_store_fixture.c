/* state_store_fixture.c — the helpers of state_store_fixture.h. */
#include <check.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "state_store_fixture.h"

atomic_int destroy_calls;

void payload_destroy(void *p) {
  ((struct payload *)p)->destroyed++;
  atomic_fetch_add(&destroy_calls, 1);
}

void payload_free(void *p) {
  atomic_fetch_add(&destroy_calls, 1);
  free(p);
}

struct state_store *make_store(uint64_t budget, uint64_t client_budget, uint32_t max_states,
                               uint32_t max_client_states) {
  struct state_store_limits lim = {
      .budget_bytes = budget,
      .client_budget_bytes = client_budget,
      .max_states = max_states,
      .max_client_states = max_client_states,
  };
  struct state_store *s = NULL;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(state_store_create(&lim, &s, &err), QDP_OK);
  ck_assert_ptr_nonnull(s);
  atomic_store(&destroy_calls, 0);
  return s;
}

void add_state(struct state_store *s, const char *owner, uint64_t bytes, uint64_t ttl_ms,
               char *handle, char *token) {
  struct state_reservation *r = NULL;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(state_store_admit(s, owner, bytes, &r, &err), QDP_OK);
  void *p = malloc(1);
  ck_assert_int_eq(state_store_commit(s, r, p, payload_free, ttl_ms, "t", handle, token, &err),
                   QDP_OK);
}

uint64_t usage_bytes(struct state_store *s) {
  uint64_t b = 0;
  state_store_usage(s, &b, NULL, NULL);
  return b;
}

uint32_t usage_states(struct state_store *s) {
  uint32_t n = 0;
  state_store_usage(s, NULL, &n, NULL);
  return n;
}

void count_fn(const struct state_meta *m, void *payload, void *arg) {
  struct tally *t = arg;
  t->count++;
  t->bytes += m->bytes;
  if (strcmp(m->handle, t->released) == 0) {
    t->saw_released = 1;
  }
  ck_assert_ptr_nonnull(payload);
}
