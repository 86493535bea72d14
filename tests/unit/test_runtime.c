/* The runtime on the CPU backend: meshes, the executor's sharding (every encoding built from 1, 2,
 * 4, 8 and uneven shards gives the one-device bits), the norm tree, value checks with their
 * messages, reservations, reading states back across shard boundaries, and the same jobs split
 * over the ranks of a world (ranks as threads: tests/unit/world_harness.h).
 *
 * The suite; its tests are in test_runtime_mesh.c (meshes, workers, the norm tree),
 * test_runtime_encode.c (encodes and sharding), test_runtime_refusals.c (value checks and
 * reservations), test_runtime_output.c (reads, encodes into the caller's memory) and
 * test_runtime_ranks.c (worlds of several ranks), with what they share in runtime_fixture.h. */
#include <check.h>

#include "common.h"
#include "runtime_fixture.h"

static Suite *runtime_suite(void) {
  Suite *s = suite_create("runtime");
  TCase *tc = tcase_create("mesh");
  runtime_add_mesh(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("workers");
  runtime_add_workers(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("norm");
  runtime_add_norm(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("encode");
  tcase_set_timeout(tc, 60);
  runtime_add_encode_sharding(tc);
  runtime_add_encode_refusals(tc);
  runtime_add_encode_output(tc);
  runtime_add_encode_ranks(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("kernel");
  runtime_add_kernel(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("measure");
  runtime_add_measure(tc);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return qdpt_run_suite(runtime_suite(), CK_FORK_GETENV);
}
