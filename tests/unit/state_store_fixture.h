/* state_store_fixture.h — what the state store's tests (test_state_store*.c) share: payloads that
 * count their destruction, a store with given limits, a committed state in one call, the store's
 * usage, and a tally of what state_store_foreach visits (state_store_fixture.c); and the function
 * of each part that adds its tests to a tcase of test_state_store.c's suite.
 */
#ifndef QDP_TESTS_STATE_STORE_FIXTURE_H
#define QDP_TESTS_STATE_STORE_FIXTURE_H

#include <check.h>
#include <stdatomic.h>
#include <stdint.h>

#include "state/store.h"

/* A payload that counts how often the store destroys it. */
struct payload {
  int destroyed;
};

/* Payloads destroyed since the last make_store. */
extern atomic_int destroy_calls;

/* A payload destructor that counts the call in it and in destroy_calls. */
void payload_destroy(void *p);

/* A destructor of malloc'd payloads that counts the call in destroy_calls. */
void payload_free(void *p);

/* A store with these limits (0: none); destroy_calls starts again from 0. */
struct state_store *make_store(uint64_t budget, uint64_t client_budget, uint32_t max_states,
                               uint32_t max_client_states);

/* Admits and commits `bytes` for `owner`; the payload is freed by the store. */
void add_state(struct state_store *s, const char *owner, uint64_t bytes, uint64_t ttl_ms,
               char *handle, char *token);

/* The store's bytes and states in use. */
uint64_t usage_bytes(struct state_store *s);
uint32_t usage_states(struct state_store *s);

/* What state_store_foreach visited (count_fn): how many, their bytes, and whether it visited
 * the handle in `released`. */
struct tally {
  int count;
  uint64_t bytes;
  int saw_released;
  char released[STATE_HANDLE_LEN];
};

void count_fn(const struct state_meta *m, void *payload, void *arg);

/* Each adds the tests of one tcase (its name) to tc. */
void state_store_add_admit(TCase *tc);      /* test_state_store_admit.c */
void state_store_add_commit_get(TCase *tc); /* test_state_store_states.c */
void state_store_add_release_put(TCase *tc);
void state_store_add_expire(TCase *tc); /* test_state_store_expire.c */
void state_store_add_foreach(TCase *tc);
void state_store_add_concurrency(TCase *tc); /* test_state_store_concurrency.c */

#endif
