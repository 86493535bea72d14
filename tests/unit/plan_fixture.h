/* plan_fixture.h — what the planner's tests (test_plan*.c) share: worlds of one rank built from
 * budgets, requests with the values per sample of their encoding, and plan_compute checked
 * against the tiling invariant (plan_fixture.c); and the function of each part that adds its tests
 * to a tcase of test_plan.c's suite.
 */
#ifndef QDP_TESTS_PLAN_FIXTURE_H
#define QDP_TESTS_PLAN_FIXTURE_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.h"

#define GIB (1ull << 30)

__extension__ typedef unsigned __int128 u128;

/* Room for the devices of every world the tests build. */
struct world_buf {
  struct plan_device dev[64];
  struct plan_world w;
};

/* A world of one rank with n devices named "<kind>:i", with the given budgets. */
void world1(struct world_buf *wb, const char *kind, size_t n, const uint64_t *budgets);

/* world1 with n devices "cuda:i" of the same budget. */
void world_same(struct world_buf *wb, size_t n, uint64_t budget);

/* The values per sample of encoding e for n qubits. */
uint64_t params_for(qdp_encoding e, uint32_t n);

/* A request for one sample of e on `qubits` qubits, float64 in, complex128 out, with pol. */
struct plan_request req_for(qdp_encoding e, uint32_t qubits, enum plan_policy pol);

/* The tiling invariant, checked from the shards alone: every shard lies inside [0, B) x [0, N),
 * is non-empty, no two overlap, their areas sum to B * N (so together they cover it exactly), the
 * order is (row_first, first), bytes are count * rows * element size and sum to total_bytes, each
 * device holds at most one shard, and needs mirror the shards. */
void assert_tiles(const struct plan *p, const struct plan_world *w);

/* plan_compute of r over w, which must succeed with a plan that tiles the state (assert_tiles). */
struct plan *compute_ok(const struct plan_request *r, const struct plan_world *w);

/* Each adds the tests of one tcase (its name) to tc. */
void plan_add_policies(TCase *tc); /* test_plan_policies.c */
void plan_add_batch(TCase *tc);
void plan_add_feasibility(TCase *tc); /* test_plan_feasible.c */
void plan_add_validation(TCase *tc);  /* test_plan_validate.c */
void plan_add_ranks(TCase *tc);       /* test_plan_worlds.c */
void plan_add_auto(TCase *tc);
void plan_add_invariants(TCase *tc);

#endif
