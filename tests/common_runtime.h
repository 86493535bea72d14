/* The runtime's fixtures the unit and GPU tests share (tests/common_runtime.c, the
 * qdp_test_runtime library): a mesh from a device spec, a plan over the first devices of a mesh,
 * an encode, a state read back whole, and the bytes a device holds. Each fails the test, with
 * the status's name and the error's message, where the call it wraps fails.
 */
#ifndef QDP_TESTS_COMMON_RUNTIME_H
#define QDP_TESTS_COMMON_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "plan/plan.h"
#include "runtime/runtime.h"

/* A mesh of `spec` ("cpu:4", "cuda:0,cuda:1") with `budget` bytes a device and `staging` bytes of
 * input staging a device (0: the backend's default). */
struct runtime_mesh *qdpt_mesh(const char *spec, uint64_t budget, uint64_t staging);

/* A plan of the job over the first `ndev` devices of m (0: every device, in the world's order)
 * with `policy`, counting m's staging; not checked for feasibility. */
struct plan *qdpt_plan_try(struct runtime_mesh *m, size_t ndev, enum plan_policy policy,
                           qdp_encoding enc, uint32_t n, uint64_t batch, uint64_t cols,
                           qdp_dtype in, qdp_dtype out);

/* qdpt_plan_try, and the plan must be feasible. */
struct plan *qdpt_plan_on(struct runtime_mesh *m, size_t ndev, enum plan_policy policy,
                          qdp_encoding enc, uint32_t n, uint64_t batch, uint64_t cols, qdp_dtype in,
                          qdp_dtype out);

/* runtime_encode of p on m, which must succeed. */
struct runtime_state *qdpt_encode(struct runtime_mesh *m, const struct plan *p,
                                  const struct runtime_input *in);

/* Encodes float64 samples x (batch rows of cols values) over the first ndev devices of m (0:
 * every device) with `policy`, under a feasible plan. */
struct runtime_state *qdpt_encode_f64(struct runtime_mesh *m, size_t ndev, enum plan_policy policy,
                                      qdp_encoding enc, uint32_t n, uint64_t batch, uint64_t cols,
                                      const double *x, qdp_dtype out);

/* Every value of s read into a poisoned buffer (malloc'd), so a value left unwritten shows. */
void *qdpt_read_all(struct runtime_state *s);

/* Encodes p on m, reads the whole state back (qdpt_read_all) and destroys the state. */
void *qdpt_encode_read(struct runtime_mesh *m, const struct plan *p,
                       const struct runtime_input *in);

/* The bytes device i of m holds. */
uint64_t qdpt_used_on(struct runtime_mesh *m, size_t i);

/* Gathers s onto every device of m in turn: the copy must read back the bits s reads, take the
 * state's bytes on that device while it lives and give them back after. With `layout`, the copy
 * must also be one shard on that device of s's rows and amplitudes. With `what`, prints one line a
 * device (ok or FAIL) naming it. */
void qdpt_check_gather(struct runtime_mesh *m, struct runtime_state *s, const char *what,
                       bool layout);

/* Every device of m holds 0 bytes; a failure names the device, after `what`. */
void qdpt_assert_mesh_idle(struct runtime_mesh *m, const char *what);

#endif
