/* Shard views and gather on the CUDA backend (runtime/views.c, the CUDA ops export_ipc and
 * copy_rows), in-process: a state over two GPUs (one where there is only one) gathered onto each
 * GPU equals reading the sharded state back, bit for bit; a gather past the device budget is
 * refused with the numbers and takes nothing; every shard exports a 64-byte IPC handle with the
 * shard's offset in its allocation (0 for the one-allocation-per-shard backend). Opening the
 * handles needs another process: tests/gpu/views_client does that.
 *
 * Exits 77 without a GPU; Check's no-fork mode (a CUDA context does not survive fork).
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"
#include "runtime/mesh.h"

#define MIB (UINT64_C(1) << 20)

static int ngpu;

static struct runtime_mesh *mesh_of(uint64_t budget) {
  return qdpt_mesh(ngpu > 1 ? "cuda:0,cuda:1" : "cuda:0", budget, 0);
}

/* An angle state (batch 1) or an amplitude batch over every device of m. */
static struct runtime_state *encode(struct runtime_mesh *m, uint32_t n, uint64_t batch,
                                    qdp_dtype out) {
  qdp_encoding enc = batch > 1 ? QDP_ENCODING_AMPLITUDE : QDP_ENCODING_ANGLE;
  uint64_t cols = batch > 1 ? (UINT64_C(1) << n) - 5 : n;
  double *x = qdpt_xmalloc(batch * cols * sizeof *x);
  for (uint64_t i = 0; i < batch * cols; i++) {
    x[i] = 0.05 + 0.21 * (double)(i % 13);
  }
  struct runtime_state *s =
      qdpt_encode_f64(m, 0, batch > 1 ? PLAN_BATCH : PLAN_EVEN, enc, n, batch, cols, x, out);
  free(x);
  return s;
}

START_TEST(test_gather_equals_the_sharded_read) {
  struct runtime_mesh *m = mesh_of(0);
  struct runtime_state *s = encode(m, 24, 1, QDP_DTYPE_COMPLEX128);
  qdpt_check_gather(m, s, "angle 24 qubits complex128", false);
  runtime_state_destroy(s);
  s = encode(m, 21, 1, QDP_DTYPE_COMPLEX64);
  qdpt_check_gather(m, s, "angle 21 qubits complex64", false);
  runtime_state_destroy(s);
  s = encode(m, 12, 7, QDP_DTYPE_COMPLEX128);
  qdpt_check_gather(m, s, "amplitude batch of 7 x 12 qubits", false);
  runtime_state_destroy(s);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_gather_past_the_budget_is_refused_with_numbers) {
  /* 384 MiB per device, 128 MiB of it for staging: a 256 MiB shard fits beside the staging (a
   * 2^26 complex64 state over two GPUs, 2^25 on one), and the whole state does not fit beside the
   * shard. */
  struct runtime_mesh *m = mesh_of(384 * MIB);
  struct runtime_state *s = encode(m, ngpu > 1 ? 26 : 25, 1, QDP_DTYPE_COMPLEX64);
  const struct plan *p = runtime_state_plan(s);
  uint64_t used = qdpt_used_on(m, 0);
  struct runtime_state *g = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  qdp_status rc = runtime_state_gather(m, s, 0, &g, &e);
  printf("%s gather past the budget: %s\n", rc == QDP_ERR_RESOURCE_EXHAUSTED ? "ok  " : "FAIL",
         e.msg);
  CK_STATUS(rc, QDP_ERR_RESOURCE_EXHAUSTED, e);
  ck_assert_uint_eq(e.need_bytes, p->total_bytes);
  ck_assert_uint_eq(e.free_bytes, 384 * MIB - used);
  ck_assert_uint_eq(qdpt_used_on(m, 0), used);
  runtime_state_destroy(s);
  runtime_mesh_destroy(m);
}
END_TEST

START_TEST(test_every_shard_exports_an_ipc_handle) {
  struct runtime_mesh *m = mesh_of(0);
  struct runtime_state *s = encode(m, 20, 1, QDP_DTYPE_COMPLEX128);
  ck_assert_int_eq(runtime_mesh_check_views(m, NULL), QDP_OK);
  for (size_t i = 0; i < runtime_state_plan(s)->nshards; i++) {
    struct runtime_ipc ipc;
    static const unsigned char zero[RUNTIME_IPC_HANDLE_BYTES];
    struct qdp_error e = QDP_ERROR_INIT;
    CK_OK(runtime_state_export_ipc(s, i, &ipc, &e), e);
    struct runtime_shard_layout l;
    runtime_state_shard_layout(s, i, &l);
    int ok = memcmp(ipc.handle, zero, sizeof zero) != 0 && ipc.offset == 0 &&
             strncmp(l.uuid, "GPU-", 4) == 0;
    printf("%s shard %zu on %s (%s): IPC handle exported, offset %" PRIu64 "\n",
           ok ? "ok  " : "FAIL", i, l.name, l.uuid, ipc.offset);
    ck_assert(ok);
  }
  runtime_state_destroy(s);
  runtime_mesh_destroy(m);
}
END_TEST

int main(void) {
  ngpu = runtime_cuda_device_count();
  if (ngpu == 0) {
    printf("test_views_cuda: no CUDA device visible, skipping\n");
    return 77;
  }
  printf("test_views_cuda: %d GPU%s\n", ngpu, ngpu == 1 ? "" : "s");
  Suite *su = suite_create("views_cuda");
  TCase *tc = tcase_create("views");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_gather_equals_the_sharded_read);
  tcase_add_test(tc, test_gather_past_the_budget_is_refused_with_numbers);
  tcase_add_test(tc, test_every_shard_exports_an_ipc_handle);
  suite_add_tcase(su, tc);
  return qdpt_run_suite(su, CK_NOFORK); /* a CUDA context does not survive fork */
}
