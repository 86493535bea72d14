/* test_job_regions.c — the caller's memory through the job pipeline: shared memory registered as a
 * region, inputs that are short or shrink under the daemon keeping nothing, the regions of exited
 * processes unregistered by the expiry sweep, and fetch into a caller's writable region. */
#include <check.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clock.h"
#include "common.h"
#include "job/internal.h"
#include "job/region.h"
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
  ck_assert_int_eq(job_unregister_region(fx.jp, NULL, ri.meta.handle, ri.token, &bytes, &e),
                   QDP_OK);
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
  const struct job_expire_report report = {.region = count_swept, .arg = &last};
  job_expire(fx.jp, clock_unix_ms(), &report, &ex);
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
  job_expire(fx.jp, clock_unix_ms() + 3600 * 1000, NULL, &ex);
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
  ck_assert_int_eq(job_unregister_region(fx.jp, NULL, out.meta.handle, out.token, NULL, &e),
                   QDP_OK);
  ck_assert_int_eq(job_unregister_region(fx.jp, NULL, ro.meta.handle, ro.token, NULL, &e), QDP_OK);
  ck_assert_int_eq(job_release(fx.jp, &alice, handle, token, NULL, &e), QDP_OK);
  close(fd);
}
END_TEST

/* A memfd holding v (n float64s) in 4096 B, sealable, and its region registered by alice. */
static int region_of(const double *v, size_t n, bool writable, struct job_region_info *ret) {
  struct qdp_error e = QDP_ERROR_INIT;
  int fd = memfd_create("qdp-test-gen", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  ck_assert_int_eq(pwrite(fd, v, n * sizeof *v, 0), (ssize_t)(n * sizeof *v));
  CK_OK(register_region(&alice, dup(fd), "region 'gen'", writable, false, ret, &e), e);
  return fd;
}

/* The kernel matrix of angle-encoded samples read from a region (2 samples of 2 qubits), opened
 * (the job's start) and, after `between` ran, computed (its reads). */
static qdp_status kernel_from_region(const struct job_region_info *ri, void (*between)(int fd),
                                     int fd, double *ret4, struct qdp_error *e) {
  struct job_encode_request enc = {.input = {.source = QDP_SOURCE_REGION,
                                             .dtype = QDP_DTYPE_FLOAT64,
                                             .length = 4 * sizeof(double),
                                             .rows = 2,
                                             .cols = 2,
                                             .region = ri->meta.handle,
                                             .region_token = ri->token,
                                             .fd = -1},
                                   .encoding = QDP_ENCODING_ANGLE,
                                   .qubits = 2};
  struct job_kernel_request kr = {.encode = &enc};
  struct job_kernel_inputs *ki = NULL;
  qdp_status rc = job_kernel_inputs_open(fx.jp, &alice, &kr, &ki, e);
  if (rc == QDP_OK) {
    uint64_t rows = 0, cols = 0;
    qdp_dtype dt;
    job_kernel_inputs_shape(ki, &rows, &cols, &dt);
    ck_assert_uint_eq(rows * cols, 4);
    between(fd);
    const char *device = NULL;
    rc = job_kernel_inputs_write(fx.jp, ki, false, ret4, &device, e);
  }
  job_kernel_inputs_close(fx.jp, ki);
  return rc;
}

static void nothing(int fd) {
  (void)fd;
}

/* Cut to nothing and grown back to its size: the same size, its pages zeros. */
static void shrink_and_grow(int fd) {
  ck_assert_int_eq(ftruncate(fd, 0), 0);
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
}

static void rewrite(int fd) {
  const double z[4] = {0, 0, 0, 0};
  ck_assert_int_eq(pwrite(fd, z, sizeof z, 0), (ssize_t)sizeof z);
}

/* An unsealed region cut and grown back between the start of a job and its reads keeps its size
 * and reads zeros: the job is DATA_LOSS naming the region (not a matrix of zero angles), and the
 * region is lost. One sealed against shrinking and growing cannot be cut, is reported sealed, and
 * is not checked: a write(2) into it between the same two points is the client's own. */
START_TEST(test_a_region_cut_and_grown_back_under_a_job_is_data_loss) {
  const double v[4] = {0.5, 1.0, 1.5, 2.0};
  double k[4];
  struct qdp_error e = QDP_ERROR_INIT;
  struct job_region_info ri;
  int fd = region_of(v, 4, false, &ri);
  ck_assert(!ri.sealed);
  CK_OK(kernel_from_region(&ri, nothing, fd, k, &e), e);
  ck_assert_double_eq_tol(k[0], 1.0, 1e-12); /* a sample with itself */
  ck_assert_double_lt(k[1], 0.99);
  ck_assert_int_eq(kernel_from_region(&ri, shrink_and_grow, fd, k, &e), QDP_ERR_DATA_LOSS);
  ck_assert_str_eq(e.field, "encode.input");
  ck_assert_ptr_nonnull(strstr(e.msg, ri.meta.handle));
  ck_assert_ptr_nonnull(strstr(e.msg, "changed while it was being read"));
  ck_assert_ptr_nonnull(strstr(e.msg, "F_SEAL_SHRINK"));
  /* Lost for every later job, even with its bytes written again. */
  ck_assert_int_eq(pwrite(fd, v, sizeof v, 0), (ssize_t)sizeof v);
  ck_assert_int_eq(kernel_from_region(&ri, nothing, fd, k, &e), QDP_ERR_DATA_LOSS);
  ck_assert_ptr_nonnull(strstr(e.msg, "register it again"));
  CK_OK(job_unregister_region(fx.jp, &alice, ri.meta.handle, ri.token, NULL, &e), e);
  close(fd);

  /* Sealed: cannot be cut, so never checked, and reported so. */
  fd = memfd_create("qdp-test-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  ck_assert_int_eq(pwrite(fd, v, sizeof v, 0), (ssize_t)sizeof v);
  ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  CK_OK(register_region(&alice, dup(fd), "sealed", false, false, &ri, &e), e);
  ck_assert(ri.sealed);
  ck_assert(!ri.frozen);
  ck_assert_int_ne(ftruncate(fd, 0), 0); /* the seal holds */
  CK_OK(kernel_from_region(&ri, rewrite, fd, k, &e), e);
  CK_OK(job_unregister_region(fx.jp, &alice, ri.meta.handle, ri.token, NULL, &e), e);
  close(fd);
}
END_TEST

/* An unsealed region is also checked between reads by its change time when a write(2) replaced
 * its bytes under the job (the same signal: it cannot tell them apart). */
START_TEST(test_a_region_written_by_write_under_a_job_is_data_loss) {
  const double v[4] = {0.5, 1.0, 1.5, 2.0};
  double k[4];
  struct qdp_error e = QDP_ERROR_INIT;
  struct job_region_info ri;
  int fd = region_of(v, 4, false, &ri);
  ck_assert_int_eq(kernel_from_region(&ri, rewrite, fd, k, &e), QDP_ERR_DATA_LOSS);
  ck_assert_ptr_nonnull(strstr(e.msg, "changed while it was being read"));
  CK_OK(job_unregister_region(fx.jp, &alice, ri.meta.handle, ri.token, NULL, &e), e);
  close(fd);
}
END_TEST

/* The write of one FetchInto, cut in two with a region cut and grown back between the halves. */
struct halves {
  int fd;
  const unsigned char *src;
  size_t n;
};

static qdp_status write_in_halves(void *arg, void *dst, struct qdp_error *err) {
  (void)err;
  struct halves *h = arg;
  memcpy(dst, h->src, h->n / 2);
  shrink_and_grow(h->fd);
  memcpy((char *)dst + h->n / 2, h->src + h->n / 2, h->n - h->n / 2);
  return QDP_OK;
}

static qdp_status write_whole(void *arg, void *dst, struct qdp_error *err) {
  (void)err;
  struct halves *h = arg;
  memcpy(dst, h->src, h->n);
  return QDP_OK;
}

/* The daemon's writes into a writable region: its own writes never read as a change (twice, and
 * after the region was cut and grown back between two writes, which the client sees as it is);
 * a cut grown back while it writes (the first half then lost to the client) is DATA_LOSS and the
 * region lost. */
START_TEST(test_a_region_cut_and_grown_back_under_a_write_is_data_loss) {
  const double v[4] = {0};
  struct qdp_error e = QDP_ERROR_INIT;
  struct job_region_info ri;
  int fd = region_of(v, 4, true, &ri);
  unsigned char src[8192 / 2];
  memset(src, 0x5a, sizeof src);
  struct halves h = {.fd = fd, .src = src, .n = sizeof src};
  struct job_region *g = NULL;
  CK_OK(job_output_region(fx.jp, &alice, ri.meta.handle, ri.token, "test", &g, &e), e);
  CK_OK(job_region_write(g, ri.meta.handle, 0, write_whole, &h, &e), e);
  CK_OK(job_region_write(g, ri.meta.handle, 0, write_whole, &h, &e), e);
  shrink_and_grow(fd); /* between jobs: the client's business */
  CK_OK(job_region_write(g, ri.meta.handle, 0, write_whole, &h, &e), e);
  unsigned char back[sizeof src];
  ck_assert_int_eq(pread(fd, back, sizeof back, 0), (ssize_t)sizeof back);
  ck_assert_mem_eq(back, src, sizeof src);
  ck_assert_int_eq(job_region_write(g, ri.meta.handle, 0, write_in_halves, &h, &e),
                   QDP_ERR_DATA_LOSS);
  ck_assert_ptr_nonnull(strstr(e.msg, ri.meta.handle));
  ck_assert_ptr_nonnull(strstr(e.msg, "changed while it was written"));
  region_registry_put(fx.jp->regions, g);
  ck_assert_int_eq(job_output_region(fx.jp, &alice, ri.meta.handle, ri.token, "test", &g, &e),
                   QDP_ERR_DATA_LOSS);
  region_registry_put(fx.jp->regions, g);
  CK_OK(job_unregister_region(fx.jp, &alice, ri.meta.handle, ri.token, NULL, &e), e);
  close(fd);
}
END_TEST

/* A page-locked region (on GPUs; marked so here, its pages faulted in as pinning does) cut and
 * grown back between two jobs keeps its old pages for the devices: the next job finds its mapping
 * missing pages and fails DATA_LOSS, the region lost. A write(2) between jobs moves the same
 * change time but leaves every page in place: the next job runs. */
START_TEST(test_a_pinned_region_cut_between_jobs_is_lost) {
  const double v[4] = {0.5, 1.0, 1.5, 2.0};
  double k[4];
  struct qdp_error e = QDP_ERROR_INIT;
  struct job_region_info ri;
  int fd = region_of(v, 4, false, &ri);
  void *payload = NULL;
  CK_OK(region_registry_get(fx.jp->regions, ri.meta.handle, ri.token, &payload, NULL, &e), e);
  struct job_region *g = payload;
  g->pinned = true; /* the CPU mesh has no unregister_host: ending it stays a plain unmap */
  ck_assert_int_eq(madvise(g->map.base, g->map.map_len, MADV_POPULATE_READ), 0);
  region_registry_put(fx.jp->regions, g);
  CK_OK(kernel_from_region(&ri, nothing, fd, k, &e), e);
  rewrite(fd);
  ck_assert_int_eq(pwrite(fd, v, sizeof v, 0), (ssize_t)sizeof v);
  CK_OK(kernel_from_region(&ri, nothing, fd, k, &e), e);
  shrink_and_grow(fd);
  ck_assert_int_eq(pwrite(fd, v, sizeof v, 0), (ssize_t)sizeof v); /* the same bytes again */
  ck_assert_int_eq(kernel_from_region(&ri, nothing, fd, k, &e), QDP_ERR_DATA_LOSS);
  ck_assert_str_eq(e.field, "input.shm.region");
  ck_assert_ptr_nonnull(strstr(e.msg, ri.meta.handle));
  ck_assert_ptr_nonnull(strstr(e.msg, "cut (and grown back) since it was page-locked"));
  ck_assert_int_eq(kernel_from_region(&ri, nothing, fd, k, &e), QDP_ERR_DATA_LOSS);
  CK_OK(job_unregister_region(fx.jp, &alice, ri.meta.handle, ri.token, NULL, &e), e);
  close(fd);
}
END_TEST

/* A memfd sealed against writing as well is reported frozen; registering it writable is refused
 * with the reason rather than an errno. */
START_TEST(test_a_write_sealed_region_is_frozen_and_never_writable) {
  const double v[4] = {0.5, 1.0, 1.5, 2.0};
  struct qdp_error e = QDP_ERROR_INIT;
  struct job_region_info ri;
  int fd = memfd_create("qdp-test-frozen", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  ck_assert_int_eq(pwrite(fd, v, sizeof v, 0), (ssize_t)sizeof v);
  ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE), 0);
  CK_OK(register_region(&alice, dup(fd), "frozen", false, false, &ri, &e), e);
  ck_assert(ri.sealed);
  ck_assert(ri.frozen);
  CK_OK(job_unregister_region(fx.jp, &alice, ri.meta.handle, ri.token, NULL, &e), e);
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  int rw = open(path, O_RDWR); /* the descriptor a writable registration hands over */
  ck_assert_int_ge(rw, 0);
  ck_assert_int_eq(register_region(&alice, rw, "frozen", true, false, &ri, &e),
                   QDP_ERR_FAILED_PRECONDITION);
  ck_assert_ptr_nonnull(strstr(e.msg, "sealed against writing"));
  uint64_t bytes = 1;
  ck_assert_uint_eq(regions_registered(&bytes), 0);
  close(fd);
}
END_TEST

/* Only the identity that registered a region unregisters it, also with its token; the owner may
 * by handle alone. */
START_TEST(test_unregister_is_the_owners) {
  int fd = memfd_create("qdp-test-owner", MFD_CLOEXEC);
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  struct qdp_error e = QDP_ERROR_INIT;
  struct job_region_info ri;
  CK_OK(register_region(&alice, dup(fd), "owned", false, false, &ri, &e), e);
  ck_assert_int_eq(job_unregister_region(fx.jp, &bob, ri.meta.handle, ri.token, NULL, &e),
                   QDP_ERR_PERMISSION_DENIED);
  ck_assert_ptr_nonnull(strstr(e.msg, alice.owner));
  ck_assert_ptr_nonnull(strstr(e.msg, bob.owner));
  ck_assert_int_eq(job_unregister_region(fx.jp, &bob, ri.meta.handle, "", NULL, &e),
                   QDP_ERR_NOT_FOUND);
  uint64_t bytes = 0;
  ck_assert_uint_eq(regions_registered(&bytes), 1);
  CK_OK(job_unregister_region(fx.jp, &alice, ri.meta.handle, "", &bytes, &e), e);
  ck_assert_uint_eq(bytes, 4096);
  ck_assert_uint_eq(regions_registered(&bytes), 0);
  close(fd);
}
END_TEST

void job_add_pipeline_regions(TCase *tc) {
  tcase_add_test(tc, test_short_and_shrunk_inputs_keep_nothing);
  tcase_add_test(tc, test_fetch_into_writes_the_callers_writable_region);
  tcase_add_test(tc, test_expiry_unregisters_the_regions_of_exited_processes);
  tcase_add_test(tc, test_a_region_cut_and_grown_back_under_a_job_is_data_loss);
  tcase_add_test(tc, test_a_region_written_by_write_under_a_job_is_data_loss);
  tcase_add_test(tc, test_a_region_cut_and_grown_back_under_a_write_is_data_loss);
  tcase_add_test(tc, test_a_pinned_region_cut_between_jobs_is_lost);
  tcase_add_test(tc, test_a_write_sealed_region_is_frozen_and_never_writable);
  tcase_add_test(tc, test_unregister_is_the_owners);
}
