/* Unit tests of the job pipeline (daemon/job) on the CPU backend, without gRPC: a world of one,
 * a mesh of host-memory devices and a store, driven through job_* as rpc/ drives it. Encodes are
 * checked against hand-computed amplitudes; ownership, budgets, data loss and the caller leaving
 * against what the store holds afterwards; and job_encode against every allocation failure
 * (alloc_shim.h): each ends in RESOURCE_EXHAUSTED with a message, leaving nothing behind. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc_shim.h"
#include "clock.h"
#include "common.h"
#include "job/job.h"

#define MIB (UINT64_C(1) << 20)

struct fixture {
  struct runtime_mesh *mesh;
  struct world *world;
  struct state_store *store;
  struct job_pipeline *jp;
};

static struct fixture fx;

static void setup_with(uint64_t client_budget) {
  struct qdp_error e = QDP_ERROR_INIT;
  struct runtime_mesh_config mc = {.devices = "cpu:2", .device_budget_bytes = 64 * MIB};
  CK_OK(runtime_mesh_create(&mc, &fx.mesh, &e), e);
  ck_assert_int_eq(world_create(false, NULL, NULL, &fx.world, &e), QDP_OK);
  ck_assert_int_eq(world_start(fx.world, QDP_OK, NULL, fx.mesh, 1000, false, &e), QDP_OK);
  struct state_store_limits lim = {.budget_bytes = 128 * MIB, .client_budget_bytes = client_budget};
  ck_assert_int_eq(state_store_create(&lim, &fx.store, &e), QDP_OK);
  struct job_deps deps = {.mesh = fx.mesh, .world = fx.world, .store = fx.store, .max_regions = 4};
  CK_OK(job_pipeline_create(&deps, &fx.jp, &e), e);
  job_set_limits(fx.jp, 30, 1 << 20);
}

static void setup(void) {
  setup_with(0);
}

static void setup_small_budget(void) {
  setup_with(4096);
}

static void teardown(void) {
  job_pipeline_destroy(fx.jp);
  state_store_destroy(fx.store);
  world_destroy(fx.world);
  runtime_mesh_destroy(fx.mesh);
  memset(&fx, 0, sizeof fx);
}

static const struct job_caller alice = {.owner = "uid:1000", .pid = 0};
static const struct job_caller bob = {.owner = "uid:1001", .pid = 0};

/* An amplitude encode of n float64 values on 2^qubits amplitudes. */
static struct job_encode_request amplitude_of(const double *v, size_t n, uint32_t qubits) {
  return (struct job_encode_request){.input = {.source = QDP_SOURCE_VALUES,
                                               .dtype = QDP_DTYPE_FLOAT64,
                                               .values = v,
                                               .bytes = n * sizeof *v,
                                               .fd = -1},
                                     .encoding = QDP_ENCODING_AMPLITUDE,
                                     .qubits = qubits};
}

static void assert_store_empty(void) {
  uint64_t bytes = 1;
  uint32_t states = 1;
  state_store_usage(fx.store, &bytes, &states, NULL);
  ck_assert_uint_eq(bytes, 0);
  ck_assert_uint_eq(states, 0);
}

/* Reads the whole state (handle, token) back: complex128 as re, im pairs. */
static void fetch_all(const char *handle, const char *token, double *out, uint64_t amps) {
  struct job_fetch f;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(job_fetch_open(fx.jp, handle, token, 0, 0, &f, &e), e);
  ck_assert_uint_eq(f.total, amps);
  ck_assert_uint_eq(f.esize, 16);
  ck_assert_int_eq(job_fetch_read(&f, amps, out, &e), QDP_OK);
  ck_assert_uint_eq(f.next, f.end);
  job_fetch_close(fx.jp, &f);
  ck_assert_ptr_null(f.state);
}

START_TEST(test_amplitude_of_3_4_is_0_6_0_8) {
  const double v[2] = {3, 4};
  struct job_encode_request req = amplitude_of(v, 2, 1);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(job_encode(fx.jp, &alice, &req, &st, &e), e);
  ck_assert_str_eq(st.meta.owner, "uid:1000");
  ck_assert_uint_eq(strlen(st.token), STATE_TOKEN_LEN - 1);
  ck_assert_uint_eq(st.plan->qubits, 1);
  ck_assert_uint_eq(st.plan->total_bytes, 2 * 16);
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(fx.jp, &st, true);
  double amps[4];
  fetch_all(handle, token, amps, 2);
  ck_assert_double_eq_tol(amps[0], 0.6, 1e-12);
  ck_assert_double_eq_tol(amps[1], 0.0, 1e-12);
  ck_assert_double_eq_tol(amps[2], 0.8, 1e-12);
  ck_assert_double_eq_tol(amps[3], 0.0, 1e-12);
  /* Padded: [1, 1, 1] on 2 qubits is [1, 1, 1, 0] / sqrt(3). */
  const double w[3] = {1, 1, 1};
  req = amplitude_of(w, 3, 2);
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_OK);
  char h2[STATE_HANDLE_LEN], t2[STATE_TOKEN_LEN];
  memcpy(h2, st.meta.handle, sizeof h2);
  memcpy(t2, st.token, sizeof t2);
  job_state_info_end(fx.jp, &st, true);
  double a2[8];
  fetch_all(h2, t2, a2, 4);
  for (int i = 0; i < 3; i++) {
    ck_assert_double_eq_tol(a2[2 * i], 1 / sqrt(3.0), 1e-12);
  }
  ck_assert_double_eq_tol(a2[6], 0.0, 1e-12);
  uint64_t freed = 0;
  ck_assert_int_eq(job_release(fx.jp, &alice, handle, token, &freed, &e), QDP_OK);
  ck_assert_uint_eq(freed, 32);
  ck_assert_int_eq(job_release(fx.jp, &alice, h2, t2, &freed, &e), QDP_OK);
  assert_store_empty();
}
END_TEST

START_TEST(test_plan_only_reports_the_plan_and_keeps_nothing) {
  struct job_encode_request req = {.input = {.source = QDP_SOURCE_NONE,
                                             .dtype = QDP_DTYPE_FLOAT64,
                                             .rows = 1,
                                             .cols = 1000,
                                             .fd = -1},
                                   .encoding = QDP_ENCODING_AMPLITUDE,
                                   .qubits = 10,
                                   .placement = {.policy = PLAN_EVEN}};
  struct plan *p = NULL;
  struct qdp_error why = QDP_ERROR_INIT, e = QDP_ERROR_INIT;
  CK_OK(job_plan(fx.jp, &alice, &req, &p, &why, &e), e);
  ck_assert(p->feasible);
  ck_assert_int_eq(why.code, QDP_OK);
  ck_assert_uint_eq(p->total_bytes, 1024 * 16);
  ck_assert_uint_eq(p->nshards, 2);
  plan_destroy(p);
  /* Too large for the devices: planned, infeasible, and why says by how much. */
  req.qubits = 24;
  req.input.cols = 1 << 24;
  p = NULL;
  ck_assert_int_eq(job_plan(fx.jp, &alice, &req, &p, &why, &e), QDP_OK);
  ck_assert(!p->feasible);
  ck_assert_int_eq(why.code, QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_uint_gt(why.need_bytes, 0);
  plan_destroy(p);
  /* An encode needs values, not a shape. */
  struct job_state_info st;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "no source"));
  /* A device that is not the world's is named with the ones that are. */
  const char *names[] = {"cuda:7"};
  req.placement = (struct job_placement){.devices = names, .ndevices = 1};
  ck_assert_int_eq(job_plan(fx.jp, &alice, &req, &p, &why, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "placement.devices");
  ck_assert_ptr_nonnull(strstr(e.msg, "cpu:0, cpu:1"));
  assert_store_empty();
}
END_TEST

struct listed {
  int n;
  char owner[64];
};

static void count_listed(const struct job_state_info *st, void *arg) {
  struct listed *l = arg;
  l->n++;
  snprintf(l->owner, sizeof l->owner, "%s", st->meta.owner);
}

START_TEST(test_states_belong_to_their_owner) {
  const double v[4] = {1, 2, 3, 4};
  struct job_encode_request req = amplitude_of(v, 4, 2);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_OK);
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(fx.jp, &st, true);
  /* Listing: each identity its own; every identity's only for operators. */
  struct listed l = {0};
  ck_assert_int_eq(job_list(fx.jp, &bob, false, count_listed, &l, &e), QDP_OK);
  ck_assert_int_eq(l.n, 0);
  ck_assert_int_eq(job_list(fx.jp, &alice, false, count_listed, &l, &e), QDP_OK);
  ck_assert_int_eq(l.n, 1);
  ck_assert_str_eq(l.owner, "uid:1000");
  ck_assert_int_eq(job_list(fx.jp, &bob, true, count_listed, &l, &e), QDP_ERR_PERMISSION_DENIED);
  ck_assert_ptr_nonnull(strstr(e.msg, "uid:1001"));
  struct job_caller root = {.owner = "uid:0", .operator= true };
  l.n = 0;
  ck_assert_int_eq(job_list(fx.jp, &root, true, count_listed, &l, &e), QDP_OK);
  ck_assert_int_eq(l.n, 1);
  /* Another identity cannot release it by handle alone, nor describe it with a wrong token. */
  uint64_t freed = 0;
  ck_assert_int_eq(job_release(fx.jp, &bob, handle, NULL, &freed, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(job_describe(fx.jp, &bob, handle, "0123", false, 0, &st, &e), QDP_ERR_NOT_FOUND);
  /* Its token is a capability: whoever holds it may describe it. */
  ck_assert_int_eq(job_describe(fx.jp, &bob, handle, token, false, 0, &st, &e), QDP_OK);
  ck_assert_str_eq(st.meta.owner, "uid:1000");
  ck_assert_str_eq(st.token, "");
  job_state_info_end(fx.jp, &st, false); /* not fresh: a failed Describe reply keeps the state */
  /* The owner releases it by handle alone. */
  ck_assert_int_eq(job_release(fx.jp, &alice, handle, NULL, &freed, &e), QDP_OK);
  ck_assert_uint_eq(freed, 4 * 16);
  assert_store_empty();
  ck_assert_int_eq(job_release(fx.jp, &alice, "", NULL, &freed, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "state");
}
END_TEST

START_TEST(test_a_reply_that_cannot_be_sent_releases_the_new_state) {
  const double v[2] = {1, 1};
  struct job_encode_request req = amplitude_of(v, 2, 1);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_OK);
  job_state_info_end(fx.jp, &st, false);
  assert_store_empty();
}
END_TEST

/* Set by a test: every commit is followed at once by the state's release, as a Release with the
 * new token or an expiry sweep on another thread may land before the reply is built (linked with
 * --wrap=state_store_commit_pinned). */
static bool release_on_commit;

qdp_status __real_state_store_commit_pinned(struct state_store *s, struct state_reservation *r,
                                            void *payload, void (*payload_destroy)(void *),
                                            uint64_t ttl_ms, const char *label,
                                            struct state_meta *ret_meta, char *ret_token,
                                            struct qdp_error *reterr);
qdp_status __wrap_state_store_commit_pinned(struct state_store *s, struct state_reservation *r,
                                            void *payload, void (*payload_destroy)(void *),
                                            uint64_t ttl_ms, const char *label,
                                            struct state_meta *ret_meta, char *ret_token,
                                            struct qdp_error *reterr);

qdp_status __wrap_state_store_commit_pinned(struct state_store *s, struct state_reservation *r,
                                            void *payload, void (*payload_destroy)(void *),
                                            uint64_t ttl_ms, const char *label,
                                            struct state_meta *ret_meta, char *ret_token,
                                            struct qdp_error *reterr) {
  qdp_status rc = __real_state_store_commit_pinned(s, r, payload, payload_destroy, ttl_ms, label,
                                                   ret_meta, ret_token, reterr);
  if (rc == QDP_OK && release_on_commit) {
    ck_assert_int_eq(state_store_release(s, ret_meta->handle, ret_token, NULL, NULL), QDP_OK);
  }
  return rc;
}

static void assert_devices_empty(void) {
  for (size_t i = 0; i < runtime_mesh_count(fx.mesh); i++) {
    struct runtime_device_info info;
    runtime_mesh_device_info(fx.mesh, i, &info);
    ck_assert_uint_eq(info.used_bytes, 0);
  }
}

/* The reply of an Encode or Gather is described from the new state: one released the moment it
 * was committed must still be readable until the reply is built, and freed once it is. */
START_TEST(test_a_state_released_as_it_is_committed_is_described_from_a_pin) {
  const double v[4] = {3, 4, 0, 0};
  struct job_encode_request req = amplitude_of(v, 4, 2);
  req.placement.policy = PLAN_EVEN;
  req.label = "raced";
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  release_on_commit = true;
  CK_OK(job_encode(fx.jp, &alice, &req, &st, &e), e);
  release_on_commit = false;
  ck_assert_uint_eq(st.plan->qubits, 2);
  ck_assert_uint_eq(st.plan->nshards, 2);
  ck_assert_uint_eq(st.plan->total_bytes, 4 * 16);
  ck_assert_ptr_nonnull(st.collective);
  ck_assert_str_eq(st.meta.owner, "uid:1000");
  ck_assert_str_eq(st.meta.label, "raced");
  ck_assert_uint_eq(st.meta.bytes, 4 * 16);
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  assert_store_empty(); /* unlinked: its bytes are no longer listed */
  job_state_info_end(fx.jp, &st, true);
  assert_devices_empty(); /* the reply's pin was the last */
  struct job_fetch f;
  ck_assert_int_eq(job_fetch_open(fx.jp, handle, token, 0, 0, &f, &e), QDP_ERR_NOT_FOUND);
  /* Gather commits through the same step. */
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_OK);
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(fx.jp, &st, true);
  release_on_commit = true;
  CK_OK(job_gather(fx.jp, &alice, handle, token, "cpu:1", 0, "whole", &st, &e), e);
  release_on_commit = false;
  ck_assert_uint_eq(st.plan->nshards, 1);
  ck_assert_uint_eq(st.plan->total_bytes, 4 * 16);
  ck_assert_str_eq(st.meta.label, "whole");
  job_state_info_end(fx.jp, &st, true);
  ck_assert_int_eq(job_release(fx.jp, &alice, handle, token, NULL, &e), QDP_OK);
  assert_store_empty();
  assert_devices_empty();
}
END_TEST

START_TEST(test_fetch_reads_a_window_and_refuses_past_the_end) {
  const double v[4] = {1, 1, 1, 1};
  struct job_encode_request req = amplitude_of(v, 4, 2);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_OK);
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(fx.jp, &st, true);
  struct job_fetch f;
  ck_assert_int_eq(job_fetch_open(fx.jp, handle, token, 1, 2, &f, &e), QDP_OK);
  double amps[4];
  ck_assert_int_eq(job_fetch_read(&f, 2, amps, &e), QDP_OK);
  ck_assert_double_eq_tol(amps[0], 0.5, 1e-12);
  ck_assert_double_eq_tol(amps[2], 0.5, 1e-12);
  job_fetch_close(fx.jp, &f);
  ck_assert_int_eq(job_fetch_open(fx.jp, handle, token, 3, 2, &f, &e), QDP_ERR_OUT_OF_RANGE);
  ck_assert_str_eq(e.field, "count");
  job_fetch_close(fx.jp, &f);
  ck_assert_int_eq(job_fetch_open(fx.jp, handle, "wrong", 0, 0, &f, &e), QDP_ERR_NOT_FOUND);
  ck_assert_int_eq(job_release(fx.jp, &alice, handle, token, NULL, &e), QDP_OK);
  /* Released: the pin is gone with it. */
  ck_assert_int_eq(job_fetch_open(fx.jp, handle, token, 0, 0, &f, &e), QDP_ERR_NOT_FOUND);
  assert_store_empty();
}
END_TEST

START_TEST(test_the_budget_refuses_with_the_numbers) {
  /* 8 qubits of complex128: 4096 B fit the 4096 B client budget; 9 qubits do not. */
  static double v[512];
  for (int i = 0; i < 512; i++) {
    v[i] = 1;
  }
  struct job_encode_request req = amplitude_of(v, 512, 9);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_uint_eq(e.need_bytes, 8192);
  ck_assert_uint_eq(e.free_bytes, 4096);
  ck_assert_ptr_nonnull(strstr(e.msg, "state of 8 KiB refused"));
  ck_assert_ptr_nonnull(strstr(e.msg, "uid:1000"));
  assert_store_empty();
  req = amplitude_of(v, 256, 8);
  CK_OK(job_encode(fx.jp, &alice, &req, &st, &e), e);
  job_state_info_end(fx.jp, &st, false);
  assert_store_empty();
}
END_TEST

/* A memfd of n float64 values, and a second descriptor of it to hand over. */
/* Registers the shared memory of fd (taken) as rpc/ does for RegisterRegion. */
static qdp_status register_region(const struct job_caller *who, int fd, const char *what,
                                  bool writable, bool keep, struct job_region_info *ret,
                                  struct qdp_error *e) {
  struct job_region_request req = {.fd = fd, .what = what, .writable = writable, .keep = keep};
  return job_register_region(fx.jp, who, &req, ret, e);
}

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
  ck_assert_int_eq(job_unregister_region(fx.jp, ri.meta.handle, ri.token, &bytes, &e), QDP_OK);
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
  ck_assert_int_eq(job_unregister_region(fx.jp, gone.meta.handle, gone.token, NULL, &e),
                   QDP_ERR_NOT_FOUND);
  job_expire(fx.jp, clock_unix_ms() + 3600 * 1000, NULL, NULL, &ex);
  ck_assert_uint_eq(ex.regions, 0);
  CK_OK(job_unregister_region(fx.jp, alive.meta.handle, alive.token, NULL, &e), e);
  CK_OK(job_unregister_region(fx.jp, tcp.meta.handle, tcp.token, NULL, &e), e);
  CK_OK(job_unregister_region(fx.jp, kept.meta.handle, kept.token, NULL, &e), e);
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
  ck_assert_int_eq(job_unregister_region(fx.jp, out.meta.handle, out.token, NULL, &e), QDP_OK);
  ck_assert_int_eq(job_unregister_region(fx.jp, ro.meta.handle, ro.token, NULL, &e), QDP_OK);
  ck_assert_int_eq(job_release(fx.jp, &alice, handle, token, NULL, &e), QDP_OK);
  close(fd);
}
END_TEST

/* A CUDA IPC input on host-memory devices: no GPU has the UUID, and the refusal names what the
 * daemon owns; nothing is opened or kept. */
START_TEST(test_cuda_ipc_input_names_the_gpus_the_daemon_owns) {
  static const unsigned char handle[64];
  struct job_encode_request req = {.input = {.source = QDP_SOURCE_CUDA_IPC,
                                             .dtype = QDP_DTYPE_FLOAT64,
                                             .rows = 1,
                                             .cols = 4,
                                             .ipc_handle = handle,
                                             .ipc_handle_len = sizeof handle,
                                             .device_uuid = "GPU-x",
                                             .fd = -1},
                                   .encoding = QDP_ENCODING_AMPLITUDE,
                                   .qubits = 2};
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_FAILED_PRECONDITION);
  ck_assert_str_eq(e.field, "input.cuda_ipc.device_uuid");
  ck_assert_ptr_nonnull(strstr(e.msg, "GPU GPU-x is not one this daemon owns (it owns cpu:0"));
  ck_assert_ptr_nonnull(strstr(e.msg, "cpu:1 (host memory)"));
  req.input.ipc_handle_len = 63;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_INVALID_ARGUMENT);
  req.input.ipc_handle_len = 64;
  req.input.cols = 0; /* the shape cannot come from the bytes: it is required */
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_INVALID_ARGUMENT);
  /* A plan is refused the same way: an empty UUID names no GPU. */
  struct plan *p = NULL;
  struct qdp_error why = QDP_ERROR_INIT;
  req.input.cols = 4;
  req.input.device_uuid = "";
  ck_assert_int_eq(job_plan(fx.jp, &alice, &req, &p, &why, &e), QDP_ERR_FAILED_PRECONDITION);
  assert_store_empty();
}
END_TEST

/* job_encode and job_plan of req both refused with `want`, field and a message fragment, and
 * nothing left stored or reserved. */
static void expect_out_refused(const struct job_encode_request *req, qdp_status want,
                               const char *field, const char *fragment) {
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT, why = QDP_ERROR_INIT;
  struct plan *p = NULL;
  CK_STATUS(job_encode(fx.jp, &alice, req, &st, &e), want, e);
  ck_assert_str_eq(e.field, field);
  ck_assert_msg(strstr(e.msg, fragment), "'%s' lacks '%s'", e.msg, fragment);
  e = (struct qdp_error)QDP_ERROR_INIT;
  CK_STATUS(job_plan(fx.jp, &alice, req, &p, &why, &e), want, e);
  ck_assert_str_eq(e.field, field);
  ck_assert_ptr_null(p);
  assert_store_empty();
  assert_devices_empty();
}

/* An encode into a caller's CUDA allocation on host-memory devices: the request's own faults
 * come first, each naming its field (a handle of the wrong length, views, a policy that shards,
 * two devices, a misaligned offset, too few bytes with both numbers), so that they are found
 * before any device is looked at; then the backend, with what to do instead. The dry run refuses
 * as the encode does; nothing is opened, stored or reserved. */
START_TEST(test_out_refuses_the_request_then_the_cpu_backend) {
  static const unsigned char handle[64];
  const double v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  struct job_encode_request req = amplitude_of(v, 8, 3);
  req.input.rows = 2; /* 2 samples of 4 values on 3 qubits: 2 x 8 x 16 = 256 B of complex128 */
  struct job_output out = {.ipc_handle = handle,
                           .ipc_handle_len = 64,
                           .offset = 256,
                           .bytes = 256,
                           .device_uuid = "GPU-x"};
  req.out = &out;
  expect_out_refused(&req, QDP_ERR_FAILED_PRECONDITION, "out",
                     "out names a CUDA allocation to write the state into, but this daemon's "
                     "mesh is cpu:2 (host memory); leave out unset and read the state back");
  out.ipc_handle_len = 63;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "out.ipc_handle",
                     "out.ipc_handle has 63 bytes; a cudaIpcMemHandle_t has 64");
  out.ipc_handle_len = 64;
  req.views = true;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "views", "views and out exclude each other");
  req.views = false;
  req.placement.policy = PLAN_EVEN;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "placement.policy",
                     "placement.policy even shards the state");
  req.placement.policy = PLAN_SINGLE;
  const char *two[] = {"cpu:0", "cpu:1"};
  req.placement.devices = two;
  req.placement.ndevices = 2;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "placement.devices", "names 2 devices");
  req.placement.ndevices = 0;
  out.offset = 8;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "out.offset",
                     "out.offset 8 is not a multiple of 16 B, the size of a complex128 amplitude");
  out.offset = 256;
  out.bytes = 255;
  expect_out_refused(&req, QDP_ERR_INVALID_ARGUMENT, "out.bytes",
                     "the state of 2 x 2^3 complex128 amplitudes needs 256 B but out offers 255 B");
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_uint_eq(e.need_bytes, 256);
  ck_assert_uint_eq(e.free_bytes, 255);
  /* complex64 needs half: 128 B are enough, and the backend is what refuses. */
  req.output_dtype = QDP_DTYPE_COMPLEX64;
  out.bytes = 128;
  expect_out_refused(&req, QDP_ERR_FAILED_PRECONDITION, "out", "cpu:2 (host memory)");
}
END_TEST

static unsigned left(const void *arg) {
  return *(const unsigned *)arg;
}

START_TEST(test_a_caller_that_left_or_is_late_gets_nothing_kept) {
  const double v[2] = {3, 4};
  struct job_encode_request req = amplitude_of(v, 2, 1);
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  unsigned gone = JOB_CALLER_LEFT;
  struct job_caller c = {.owner = "uid:1000", .gone = left, .arg = &gone};
  ck_assert_int_eq(job_encode(fx.jp, &c, &req, &st, &e), QDP_ERR_CANCELLED);
  ck_assert_ptr_nonnull(strstr(e.msg, "nothing was kept"));
  assert_store_empty();
  gone = JOB_CALLER_LATE;
  ck_assert_int_eq(job_encode(fx.jp, &c, &req, &st, &e), QDP_ERR_DEADLINE_EXCEEDED);
  ck_assert_ptr_nonnull(strstr(e.msg, "its job could start"));
  assert_store_empty();
}
END_TEST

START_TEST(test_placement_maps_names_to_indices_in_order) {
  struct plan_device devs[3] = {{0, 0, "cpu:0", 100}, {0, 1, "cpu:1", 100}, {0, 2, "cpu:2", 100}};
  size_t sub[3] = {9, 9, 9};
  size_t n = 99;
  enum plan_policy pol = PLAN_BATCH;
  const char *names[] = {"cpu:2", "cpu:0"};
  struct job_placement pl = {.policy = PLAN_UNEVEN, .devices = names, .ndevices = 2};
  ck_assert_int_eq(job_placement(&pl, devs, 3, &pol, sub, &n, NULL), QDP_OK);
  ck_assert_int_eq(pol, PLAN_UNEVEN);
  ck_assert_uint_eq(n, 2);
  ck_assert_uint_eq(sub[0], 2);
  ck_assert_uint_eq(sub[1], 0);
}
END_TEST

/* Upload memory: upload_budget for every identity together, client_upload_budget for each,
 * refusals with the numbers and nothing taken, and everything back once released. */
START_TEST(test_upload_admission_counts_each_identity_and_all) {
  struct qdp_error e = QDP_ERROR_INIT;
  uint64_t all = 1, mine = 1;
  job_set_upload_budgets(fx.jp, 3 * MIB, 2 * MIB);
  ck_assert_int_eq(job_upload_admit(fx.jp, alice.owner, 2 * MIB, &e), QDP_OK);
  ck_assert_int_eq(job_upload_admit(fx.jp, alice.owner, 1, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(e.field, "data");
  ck_assert_ptr_nonnull(strstr(e.msg, "client_upload_budget = 2 MiB"));
  ck_assert_ptr_nonnull(strstr(e.msg, "uid:1000"));
  ck_assert_uint_eq(e.need_bytes, 1);
  ck_assert_uint_eq(e.free_bytes, 0);
  /* Another identity has its own share, up to what all of them may hold. */
  ck_assert_int_eq(job_upload_admit(fx.jp, bob.owner, MIB, &e), QDP_OK);
  ck_assert_int_eq(job_upload_admit(fx.jp, bob.owner, 4096, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(e.msg, "hold 3 MiB of upload_budget = 3 MiB"));
  ck_assert_uint_eq(e.need_bytes, 4096);
  ck_assert_uint_eq(e.free_bytes, 0);
  job_upload_usage(fx.jp, bob.owner, &all, &mine);
  ck_assert_uint_eq(all, 3 * MIB);
  ck_assert_uint_eq(mine, MIB);
  /* A budget lowered by SIGHUP refuses more, and what is held stays held. */
  job_set_upload_budgets(fx.jp, 3 * MIB, MIB / 2);
  ck_assert_int_eq(job_upload_admit(fx.jp, bob.owner, 1, &e), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_uint_eq(e.free_bytes, 0);
  job_upload_release(fx.jp, alice.owner, 2 * MIB);
  job_upload_release(fx.jp, bob.owner, 2 * MIB); /* more than it holds: clamped */
  job_upload_release(fx.jp, "uid:4242", 1);      /* holds nothing */
  job_upload_usage(fx.jp, alice.owner, &all, &mine);
  ck_assert_uint_eq(all, 0);
  ck_assert_uint_eq(mine, 0);
  ck_assert_int_eq(job_upload_admit(fx.jp, bob.owner, MIB / 2, &e), QDP_OK);
  job_upload_release(fx.jp, bob.owner, MIB / 2);
  char longname[80];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  ck_assert_int_eq(job_upload_admit(fx.jp, longname, 1, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "79 B"));
  job_upload_usage(fx.jp, NULL, &all, NULL);
  ck_assert_uint_eq(all, 0);
}
END_TEST

/* ---- job_encode under every allocation failure ---- */

static qdp_status op_encode(void *arg, struct qdp_error *e) {
  const struct job_encode_request *req = arg;
  struct job_state_info st;
  qdp_status rc = job_encode(fx.jp, &alice, req, &st, e);
  if (rc != QDP_OK) {
    return rc;
  }
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(fx.jp, &st, true);
  return job_release(fx.jp, &alice, handle, token, NULL, e);
}

/* Whatever the run did, nothing stays stored or reserved on a device. */
static void check_encode(void *arg, qdp_status rc) {
  (void)arg;
  (void)rc;
  assert_store_empty();
  for (size_t i = 0; i < runtime_mesh_count(fx.mesh); i++) {
    struct runtime_device_info info;
    runtime_mesh_device_info(fx.mesh, i, &info);
    ck_assert_uint_eq(info.used_bytes, 0);
  }
}

START_TEST(test_encode_survives_every_allocation_failure) {
  static double v[40];
  for (int i = 0; i < 40; i++) {
    v[i] = (double)(i % 7) - 3.0 + 0.01;
  }
  struct job_encode_request req = amplitude_of(v, 40, 6);
  req.placement.policy = PLAN_EVEN;
  ck_assert_uint_gt(shim_sweep("job_encode amplitude even", op_encode, check_encode, &req), 0);
  req.views = true; /* refused on the CPU backend before anything is encoded */
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_encode(fx.jp, &alice, &req, &st, &e), QDP_ERR_FAILED_PRECONDITION);
  check_encode(NULL, QDP_OK);
}
END_TEST

int main(void) {
  Suite *s = suite_create("job");
  TCase *tc = tcase_create("pipeline");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_amplitude_of_3_4_is_0_6_0_8);
  tcase_add_test(tc, test_plan_only_reports_the_plan_and_keeps_nothing);
  tcase_add_test(tc, test_states_belong_to_their_owner);
  tcase_add_test(tc, test_a_reply_that_cannot_be_sent_releases_the_new_state);
  tcase_add_test(tc, test_a_state_released_as_it_is_committed_is_described_from_a_pin);
  tcase_add_test(tc, test_fetch_reads_a_window_and_refuses_past_the_end);
  tcase_add_test(tc, test_short_and_shrunk_inputs_keep_nothing);
  tcase_add_test(tc, test_fetch_into_writes_the_callers_writable_region);
  tcase_add_test(tc, test_expiry_unregisters_the_regions_of_exited_processes);
  tcase_add_test(tc, test_cuda_ipc_input_names_the_gpus_the_daemon_owns);
  tcase_add_test(tc, test_out_refuses_the_request_then_the_cpu_backend);
  tcase_add_test(tc, test_a_caller_that_left_or_is_late_gets_nothing_kept);
  tcase_add_test(tc, test_placement_maps_names_to_indices_in_order);
  tcase_add_test(tc, test_upload_admission_counts_each_identity_and_all);
  suite_add_tcase(s, tc);
  tc = tcase_create("budget");
  tcase_add_checked_fixture(tc, setup_small_budget, teardown);
  tcase_add_test(tc, test_the_budget_refuses_with_the_numbers);
  suite_add_tcase(s, tc);
  tc = tcase_create("faults");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_encode_survives_every_allocation_failure);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
