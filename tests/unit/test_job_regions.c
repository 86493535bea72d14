/* test_job_regions.c — the caller's memory through the job pipeline: shared memory registered as a
 * region, inputs that are short or shrink under the daemon keeping nothing, the regions of exited
 * processes unregistered by the expiry sweep, and fetch into a caller's writable region. */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clock.h"
#include "common.h"
#include "job_fixture.h"

/* Registers the shared memory of fd (taken) as rpc/ does for RegisterRegion. */
static qdp_status register_region(const struct job_caller *who, int fd, const char *what,
                                  bool writable, bool keep, struct job_region_info *ret,
                                  struct qdp_error *e) {
  struct job_region_request req = {.fd = fd, .what = what, .writable = writable, .keep = keep};
  return job_register_region(fx.jp, who, &req, ret, e);
}

/* A memfd of n float64 values, and a second descriptor of it to hand over. */
static int memfd_of(const double *v, size_t n, int *ret_handed) {
  int fd = memfd_create("qdp-test-job", MFD_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, v, n * sizeof *v), (ssize_t)(n * sizeof *v));
  *ret_handed = dup(fd);
  ck_assert_int_ge(*ret_handed, 0);
  return fd;
}

START_TEST(test_short_and_shrunk_inputs_keep_nothing) {
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  /* Values that are not whole float64s. */
  const double v[2] = {3, 4};
  struct job_encode_request req = amplitude_of(v, 2, 1);
  req.input.bytes = 12;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "12 bytes"));
  /* Shared memory shorter than the request says: refused before it is read. */
  int handed = -1;
  int fd = memfd_of(v, 2, &handed);
  req.input = (struct job_input){.source = QDP_SOURCE_SHM,
                                 .dtype = QDP_DTYPE_FLOAT64,
                                 .fd = handed,
                                 .what = "shared memory 'test'",
                                 .length = 32};
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_OUT_OF_RANGE);
  /* A registered region truncated under its jobs: DATA_LOSS, and lost from then on. */
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  handed = dup(fd);
  struct job_region_info ri;
  CK_OK(register_region(&alice, handed, "region 'test'", false, false, &ri, &e), e);
  ck_assert_uint_eq(ri.meta.bytes, 4096);
  ck_assert_int_eq(ftruncate(fd, 0), 0);
  req.input = (struct job_input){.source = QDP_SOURCE_REGION,
                                 .dtype = QDP_DTYPE_FLOAT64,
                                 .length = 16,
                                 .region = ri.meta.handle,
                                 .region_token = ri.token,
                                 .fd = -1};
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_DATA_LOSS);
  ck_assert_ptr_nonnull(strstr(e.msg, "register it again"));
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_DATA_LOSS);
  ck_assert_str_eq(e.field, "input.shm.region");
  assert_store_empty();
  uint64_t bytes = 0;
  ck_assert_int_eq(job_unregister_region(fx.jp, NULL, ri.meta.handle, ri.token, &bytes, &e), QDP_OK);
  ck_assert_uint_eq(bytes, 4096);
  close(fd);
}
END_TEST

/* FetchInto: the amplitudes land in the caller's writable region, byte for byte what Fetch reads;
 * a range past its end, another identity, a read-only region and a region cut under the write are
 * refused, the last as DATA_LOSS for good. */
static void count_swept(const struct region_meta *m, void *arg) {
  struct region_meta *last = arg;
  *last = *m;
}

static uint32_t regions_registered(uint64_t *ret_bytes) {
  struct job_status js;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(job_status(fx.jp, &js, &e), e);
  uint32_t n = js.regions;
  *ret_bytes = js.region_bytes;
  job_status_free(&js);
  return n;
}

/* The sweep unregisters the region of a caller whose process is gone (the fixture's lease_grace
 * is 0), and none of a live process, of a caller with no process on the node (pid 0, TCP), or
 * registered to be kept. */
START_TEST(test_expiry_unregisters_the_regions_of_exited_processes) {
  struct qdp_error e = QDP_ERROR_INIT;
  int fd = memfd_create("qdp-test-sweep", MFD_CLOEXEC);
  ck_assert_int_eq(ftruncate(fd, 8192), 0);
  struct job_caller dead = {.owner = "uid:1000", .pid = qdpt_dead_pid()};
  struct job_caller live = {.owner = "uid:1000", .pid = (int)getpid()};
  struct job_region_info gone, alive, tcp, kept;
  CK_OK(register_region(&dead, dup(fd), "gone", true, false, &gone, &e), e);
  CK_OK(register_region(&live, dup(fd), "alive", false, false, &alive, &e), e);
  CK_OK(register_region(&alice, dup(fd), "tcp", false, false, &tcp, &e), e);
  CK_OK(register_region(&dead, dup(fd), "kept", false, true, &kept, &e), e);
  ck_assert_int_eq(gone.meta.pid, dead.pid);
  ck_assert_int_eq(kept.meta.pid, 0); /* kept: outlives its process */
  uint64_t bytes = 0;
  ck_assert_uint_eq(regions_registered(&bytes), 4);
  ck_assert_uint_eq(bytes, 4 * 8192);
  struct region_meta last;
  memset(&last, 0, sizeof last);
  struct job_expiry ex;
  job_expire(fx.jp, clock_unix_ms(), count_swept, &last, &ex);
  ck_assert_uint_eq(ex.regions, 1);
  ck_assert_uint_eq(ex.states, 0);
  ck_assert_uint_eq(ex.leases, 0);
  ck_assert_str_eq(last.handle, gone.meta.handle);
  ck_assert_str_eq(last.owner, "uid:1000");
  ck_assert_uint_eq(last.bytes, 8192);
  ck_assert_uint_eq(regions_registered(&bytes), 3);
  ck_assert_uint_eq(bytes, 3 * 8192);
  /* Gone as if unregistered: its handle is unknown. */
  ck_assert_int_eq(job_unregister_region(fx.jp, NULL, gone.meta.handle, gone.token, NULL, &e),
                   QDP_ERR_NOT_FOUND);
  job_expire(fx.jp, clock_unix_ms() + 3600 * 1000, NULL, NULL, &ex);
  ck_assert_uint_eq(ex.regions, 0);
  CK_OK(job_unregister_region(fx.jp, NULL, alive.meta.handle, alive.token, NULL, &e), e);
  CK_OK(job_unregister_region(fx.jp, NULL, tcp.meta.handle, tcp.token, NULL, &e), e);
  CK_OK(job_unregister_region(fx.jp, NULL, kept.meta.handle, kept.token, NULL, &e), e);
  ck_assert_uint_eq(regions_registered(&bytes), 0);
  ck_assert_uint_eq(bytes, 0);
  close(fd);
}
END_TEST

START_TEST(test_fetch_into_writes_the_callers_writable_region) {
  const double v[2] = {3, 4};
  struct job_encode_request req = amplitude_of(v, 2, 1);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(job_encode(fx.jp, &alice, &req, &st, &e), e);
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(fx.jp, &st, true);
  int fd = memfd_create("qdp-test-out", MFD_CLOEXEC);
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  struct job_region_info out, ro;
  CK_OK(register_region(&alice, dup(fd), "out", true, false, &out, &e), e);
  ck_assert(out.writable);
  CK_OK(register_region(&alice, dup(fd), "ro", false, false, &ro, &e), e);
  struct job_fetch_into_request fr = {.handle = handle,
                                      .token = token,
                                      .region = out.meta.handle,
                                      .region_token = out.token,
                                      .region_offset = 16};
  struct job_fetch_into_result res;
  CK_OK(job_fetch_into(fx.jp, &alice, &fr, &res, &e), e);
  ck_assert_uint_eq(res.count, 2);
  ck_assert_uint_eq(res.bytes, 32);
  ck_assert_int_eq(res.dtype, QDP_DTYPE_COMPLEX128);
  double want[4], got[4];
  fetch_all(handle, token, want, 2);
  ck_assert_int_eq(pread(fd, got, sizeof got, 16), (ssize_t)sizeof got);
  ck_assert_mem_eq(got, want, sizeof want);
  /* 32 B at 4080 pass the end at 4096: the numbers, and nothing written. */
  fr.region_offset = 4080;
  ck_assert_int_eq(job_fetch_into(fx.jp, &alice, &fr, &res, &e), QDP_ERR_OUT_OF_RANGE);
  ck_assert_uint_eq(e.need_bytes, 32);
  ck_assert_uint_eq(e.free_bytes, 16);
  ck_assert_ptr_nonnull(strstr(e.msg, "4096"));
  fr.region_offset = 0;
  ck_assert_int_eq(job_fetch_into(fx.jp, &bob, &fr, &res, &e), QDP_ERR_PERMISSION_DENIED);
  fr.region_token = "wrong";
  ck_assert_int_eq(job_fetch_into(fx.jp, &alice, &fr, &res, &e), QDP_ERR_NOT_FOUND);
  fr.region = ro.meta.handle;
  fr.region_token = ro.token;
  ck_assert_int_eq(job_fetch_into(fx.jp, &alice, &fr, &res, &e), QDP_ERR_FAILED_PRECONDITION);
  ck_assert_ptr_nonnull(strstr(e.msg, "writable"));
  /* Cut under the write: the guard keeps the daemon alive, the region is lost from then on. */
  ck_assert_int_eq(ftruncate(fd, 0), 0);
  fr.region = out.meta.handle;
  fr.region_token = out.token;
  ck_assert_int_eq(job_fetch_into(fx.jp, &alice, &fr, &res, &e), QDP_ERR_DATA_LOSS);
  ck_assert_ptr_nonnull(strstr(e.msg, "register it again"));
  ck_assert_int_eq(job_fetch_into(fx.jp, &alice, &fr, &res, &e), QDP_ERR_DATA_LOSS);
  ck_assert_int_eq(job_unregister_region(fx.jp, NULL, out.meta.handle, out.token, NULL, &e), QDP_OK);
  ck_assert_int_eq(job_unregister_region(fx.jp, NULL, ro.meta.handle, ro.token, NULL, &e), QDP_OK);
  ck_assert_int_eq(job_release(fx.jp, &alice, handle, token, NULL, &e), QDP_OK);
  close(fd);
}
END_TEST

void job_add_pipeline_regions(TCase *tc) {
  tcase_add_test(tc, test_short_and_shrunk_inputs_keep_nothing);
  tcase_add_test(tc, test_fetch_into_writes_the_callers_writable_region);
  tcase_add_test(tc, test_expiry_unregisters_the_regions_of_exited_processes);
}
