/* The runtime's CUDA backend against its CPU backend: every encoding in complex64 and complex128,
 * single samples and batches, on a "cuda" mesh and a "cpu" mesh with the same plan; amplitude
 * inputs far larger than the staging (the chunk sums must combine into the bits of one launch);
 * sharding over two GPUs giving the one-GPU bits; the same state split over two ranks (threads of
 * this process, one GPU each where there are two: the cross-rank norm and the cross-rank global-bit
 * stage through host memory) giving the one-GPU bits; the CPU backend's refusals and messages;
 * budget and cudaMalloc exhaustion; reads across shards and through the staging; concurrent jobs on
 * one GPU; and every device's used bytes back to 0 after each job. The amplitude norm's scaled
 * fallback (sums of squares that under- or overflow) runs through every one of those paths too,
 * and parameters complex64 cannot compute are refused with the CPU's messages.
 *
 * Runs only where a GPU is visible (exit 77 otherwise, which meson reports as a skip), in Check's
 * no-fork mode (a CUDA context does not survive fork). Prints one line per check with the numbers
 * it compared, and exits non-zero when any check fails.
 *
 * The suite; its tests are in test_runtime_cuda_encode.c (one GPU against the CPU),
 * test_runtime_cuda_mesh.c (meshes, two GPUs, two ranks, device groups) and
 * test_runtime_cuda_memory.c (refusals, budgets, the buffer cache, reads, concurrent jobs), with
 * what they share in runtime_cuda_fixture.h.
 */
#include <check.h>
#include <stdio.h>

#include "common.h"
#include "runtime/mesh.h"
#include "runtime/runtime.h"
#include "runtime_cuda_fixture.h"

static Suite *runtime_cuda_suite(void) {
  Suite *s = suite_create("runtime_cuda");
  TCase *tc = tcase_create("mesh");
  runtime_cuda_add_mesh(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("encode");
  runtime_cuda_add_encode_one_gpu(tc);
  runtime_cuda_add_encode_shards(tc);
  runtime_cuda_add_encode_staging(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("refusals");
  runtime_cuda_add_refusals(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("memory");
  runtime_cuda_add_memory(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("read");
  runtime_cuda_add_read(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("kernel");
  runtime_cuda_add_kernel(tc);
  suite_add_tcase(s, tc);
  tc = tcase_create("measure");
  runtime_cuda_add_measure(tc);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  int count = runtime_cuda_device_count();
  if (count == 0) {
    printf("test_runtime_cuda: no CUDA device visible, skipping\n");
    return 77;
  }
  printf("test_runtime_cuda: %d GPU%s\n", count, count == 1 ? "" : "s");
  fflush(stdout);
  return qdpt_run_suite(runtime_cuda_suite(), CK_NOFORK); /* a CUDA context does not survive fork */
}
