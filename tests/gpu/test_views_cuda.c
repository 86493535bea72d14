/* Shard views and gather on the CUDA backend (runtime/views.c, the CUDA ops export_view and
 * copy_rows), in-process: a state over two GPUs (one where there is only one) gathered onto each
 * GPU equals reading the sharded state back, bit for bit; a gather past the device budget is
 * refused with the numbers and takes nothing; every shard exports a file descriptor of its own
 * allocation (cuda_vmm.c), which maps to the shard's amplitudes and keeps them after the state is
 * gone and its device memory asked for again (an exported allocation is never reused); a mesh
 * with legacy_ipc_views exports 64-byte IPC handles instead, with the shard's offset in its
 * allocation (0 for the one-allocation-per-shard backend), and never hands an exported buffer to
 * another state. Opening IPC handles needs another
 * process: tests/gpu/views_client does that.
 *
 * Exits 77 without a GPU; Check's no-fork mode (a CUDA context does not survive fork).
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

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

START_TEST(test_a_legacy_mesh_exports_ipc_handles) {
  struct runtime_mesh_config cfg = {.devices = ngpu > 1 ? "cuda:0,cuda:1" : "cuda:0",
                                    .legacy_ipc_views = true};
  struct runtime_mesh *m = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_mesh_create(&cfg, &m, &e), e);
  struct runtime_state *s = encode(m, 20, 1, QDP_DTYPE_COMPLEX128);
  ck_assert_int_eq(runtime_mesh_check_views(m, NULL), QDP_OK);
  for (size_t i = 0; i < runtime_state_plan(s)->nshards; i++) {
    struct runtime_ipc ipc;
    static const unsigned char zero[RUNTIME_IPC_HANDLE_BYTES];
    CK_OK(runtime_state_export_ipc(s, i, &ipc, &e), e);
    struct runtime_shard_layout l;
    runtime_state_shard_layout(s, i, &l);
    int ok = ipc.fd < 0 && memcmp(ipc.handle, zero, sizeof zero) != 0 && ipc.offset == 0 &&
             strncmp(l.uuid, "GPU-", 4) == 0;
    printf("%s shard %zu on %s (%s): IPC handle exported, offset %" PRIu64 "\n",
           ok ? "ok  " : "FAIL", i, l.name, l.uuid, ipc.offset);
    ck_assert(ok);
  }
  /* A buffer whose handle went out is given back to the driver, not kept for the next state of
   * its size (16 MiB: one the cache would keep), which a client that keeps the handle open past
   * its lease would read. Seen through the driver's free memory. */
  uint64_t bytes = runtime_state_plan(s)->total_bytes;
  size_t before = 0, after = 0, total = 0;
  ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
  ck_assert_int_eq(cudaMemGetInfo(&before, &total), cudaSuccess);
  runtime_state_destroy(s);
  ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
  ck_assert_int_eq(cudaMemGetInfo(&after, &total), cudaSuccess);
  int freed = after >= before + bytes / (ngpu > 1 ? 2 : 1);
  printf("%s the exported buffers went back to the driver (%zu B more free)\n",
         freed ? "ok  " : "FAIL", after - before);
  ck_assert(freed);
  runtime_mesh_destroy(m);
}
END_TEST

typedef CUresult (*import_fn)(CUmemGenericAllocationHandle *h, void *shareable,
                              CUmemAllocationHandleType type);
typedef CUresult (*reserve_fn)(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                               unsigned long long flags);
typedef CUresult (*map_fn)(CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h,
                           unsigned long long flags);
typedef CUresult (*access_fn)(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n);
typedef CUresult (*unmap_fn)(CUdeviceptr p, size_t size);
typedef CUresult (*free_fn)(CUdeviceptr p, size_t size);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle h);

static void *driver(const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found;
  ck_assert_int_eq(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found),
                   cudaSuccess);
  ck_assert_ptr_nonnull(fn);
  return fn;
}

/* Maps descriptor fd (size bytes, on GPU ordinal) here, as a client would; the handle and the
 * address for unmap. */
static void *map_fd(int fd, size_t size, int ordinal, CUmemGenericAllocationHandle *ret_h) {
  CUdeviceptr p = 0;
  ck_assert_int_eq(((import_fn)driver("cuMemImportFromShareableHandle"))(
                       ret_h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                   CUDA_SUCCESS);
  ck_assert_int_eq(((reserve_fn)driver("cuMemAddressReserve"))(&p, size, 0, 0, 0), CUDA_SUCCESS);
  ck_assert_int_eq(((map_fn)driver("cuMemMap"))(p, size, 0, *ret_h, 0), CUDA_SUCCESS);
  CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = ordinal},
                       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ck_assert_int_eq(((access_fn)driver("cuMemSetAccess"))(p, size, &a, 1), CUDA_SUCCESS);
  return (void *)(uintptr_t)p;
}

START_TEST(test_every_shard_exports_a_descriptor_that_outlives_its_state) {
  struct runtime_mesh *m = mesh_of(0);
  struct runtime_state *s = encode(m, 20, 1, QDP_DTYPE_COMPLEX128);
  const struct plan *p = runtime_state_plan(s);
  size_t n = p->nshards;
  void *want = qdpt_read_all(s);
  struct runtime_ipc *ipc = qdpt_xcalloc(n, sizeof *ipc);
  struct qdp_error e = QDP_ERROR_INIT;
  for (size_t i = 0; i < n; i++) {
    CK_OK(runtime_state_export_ipc(s, i, &ipc[i], &e), e);
    int ok = ipc[i].fd >= 0 && ipc[i].offset == 0 && ipc[i].map_bytes >= p->shards[i].bytes;
    printf("%s shard %zu: descriptor %d of %" PRIu64 " B for %" PRIu64 " B\n", ok ? "ok  " : "FAIL",
           i, ipc[i].fd, ipc[i].map_bytes, p->shards[i].bytes);
    ck_assert(ok);
  }
  /* Mapped as a client maps them under its lease; then the state goes and one of the same size
   * takes device memory again (where the old one was, if its memory were handed on): the
   * mappings still read the old amplitudes. */
  void **at = qdpt_xcalloc(n, sizeof *at);
  CUmemGenericAllocationHandle *h = qdpt_xcalloc(n, sizeof *h);
  int *ordinal = qdpt_xcalloc(n, sizeof *ordinal);
  for (size_t i = 0; i < n; i++) {
    struct runtime_shard_layout l;
    runtime_state_shard_layout(s, i, &l);
    ordinal[i] = l.ordinal;
    ck_assert_int_eq(cudaSetDevice(l.ordinal), cudaSuccess);
    at[i] = map_fd(ipc[i].fd, ipc[i].map_bytes, l.ordinal, &h[i]);
    close(ipc[i].fd);
  }
  uint64_t shard_bytes = p->shards[0].bytes;
  runtime_state_destroy(s);
  struct runtime_state *again = encode(m, 20, 1, QDP_DTYPE_COMPLEX128);
  struct runtime_state *zeros = encode(m, 20, 1, QDP_DTYPE_COMPLEX128);
  unsigned char *got = qdpt_xmalloc(n * shard_bytes);
  for (size_t i = 0; i < n; i++) {
    ck_assert_int_eq(cudaSetDevice(ordinal[i]), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(got + i * shard_bytes, at[i], shard_bytes, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    ck_assert_int_eq(((unmap_fn)driver("cuMemUnmap"))((CUdeviceptr)(uintptr_t)at[i],
                                                      ipc[i].map_bytes),
                     CUDA_SUCCESS);
    ck_assert_int_eq(((free_fn)driver("cuMemAddressFree"))((CUdeviceptr)(uintptr_t)at[i],
                                                           ipc[i].map_bytes),
                     CUDA_SUCCESS);
    ck_assert_int_eq(((release_fn)driver("cuMemRelease"))(h[i]), CUDA_SUCCESS);
  }
  runtime_state_destroy(zeros);
  free(at);
  free(h);
  free(ordinal);
  /* One angle state over whole shards in order: the shards' bytes end to end are the state. */
  int same = memcmp(got, want, n * shard_bytes) == 0;
  printf("%s the descriptors mapped the destroyed state's %zu shard%s, bit for bit\n",
         same ? "ok  " : "FAIL", n, n == 1 ? "" : "s");
  ck_assert(same);
  free(got);
  free(want);
  free(ipc);
  runtime_state_destroy(again);
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
  tcase_add_test(tc, test_every_shard_exports_a_descriptor_that_outlives_its_state);
  tcase_add_test(tc, test_a_legacy_mesh_exports_ipc_handles);
  suite_add_tcase(su, tc);
  return qdpt_run_suite(su, CK_NOFORK); /* a CUDA context does not survive fork */
}
