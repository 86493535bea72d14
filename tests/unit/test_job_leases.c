/* test_job_leases.c — the write lease through the job pipeline (CPU backend, so the lease is
 * opened with job_lease_state, as job_open_views does after exporting the GPU handles): every read
 * of the amplitudes is refused naming the holder while the record stays describable; the holder's
 * writes are what later reads see, and a kernel no longer takes the encoding's real-amplitude
 * shortcut on a written state (it would answer 1/4 where the overlap's modulus squared is 1/2). */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "job/internal.h"
#include "job_fixture.h"
#include "runtime/state.h"
#include "state/store.h"

/* The 1-qubit angle state of x = pi/4: (1, 1) / sqrt(2), real. */
static void encode_angle(const double *x, char *handle, char *token) {
  struct job_encode_request req = {.input = {.source = QDP_SOURCE_VALUES,
                                             .dtype = QDP_DTYPE_FLOAT64,
                                             .values = x,
                                             .bytes = sizeof *x,
                                             .fd = -1},
                                   .encoding = QDP_ENCODING_ANGLE,
                                   .qubits = 1};
  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(job_encode(fx.jp, &alice, &req, &st, &e), e);
  memcpy(handle, st.meta.handle, STATE_HANDLE_LEN);
  memcpy(token, st.token, STATE_TOKEN_LEN);
  job_state_info_end(fx.jp, &st, true);
}

static double fidelity(const char *a, const char *at, const char *b, const char *bt,
                       qdp_status *rc, struct qdp_error *e) {
  struct job_kernel_request req = {.a = a, .a_token = at, .b = b, .b_token = bt};
  struct job_kernel_result res;
  memset(&res, 0, sizeof res);
  *rc = job_kernel(fx.jp, &alice, &req, 1 << 20, &res, e);
  double k = *rc == QDP_OK ? ((const double *)res.values)[0] : NAN;
  free(res.values);
  return k;
}

START_TEST(test_a_written_state_is_read_only_after_its_lease_and_as_written) {
  const double x = M_PI / 4;
  char ha[STATE_HANDLE_LEN], ta[STATE_TOKEN_LEN], hb[STATE_HANDLE_LEN], tb[STATE_TOKEN_LEN];
  encode_angle(&x, ha, ta);
  encode_angle(&x, hb, tb);
  qdp_status rc;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_double_eq_tol(fidelity(ha, ta, hb, tb, &rc, &e), 1.0, 1e-15);

  /* The holder's lease, as a Describe with writable views opens it (pid 4242). */
  struct job_state_info w;
  CK_OK(job_describe(fx.jp, &alice, ha, ta, JOB_VIEWS_NONE, 0, &w, &e), e);
  CK_OK(job_lease_state(fx.jp, &alice, 4242, true, &w, &e), e);
  ck_assert(w.overwritten);
  uint64_t lease = w.lease;
  struct runtime_state *st = w.pinned;
  job_state_info_end(fx.jp, &w, true);

  /* Every read of a's amplitudes is refused naming the holder; b is untouched. */
  char holder[96];
  snprintf(holder, sizeof holder, "by uid:1000 (pid 4242, lease %llu", (unsigned long long)lease);
  struct job_fetch f;
  ck_assert_int_eq(job_fetch_open(fx.jp, ha, ta, 0, 0, &f, &e), QDP_ERR_FAILED_PRECONDITION);
  ck_assert_msg(strstr(e.msg, holder), "%s", e.msg);
  job_fetch_close(fx.jp, &f);
  ck_assert(isnan(fidelity(ha, ta, hb, tb, &rc, &e)));
  ck_assert_int_eq(rc, QDP_ERR_FAILED_PRECONDITION);
  ck_assert(isnan(fidelity(hb, tb, ha, ta, &rc, &e)));
  ck_assert_int_eq(rc, QDP_ERR_FAILED_PRECONDITION);
  struct job_measure_request mr = {.handle = ha, .token = ta,
                                   .measurement = JOB_MEASURE_PROBABILITIES};
  struct job_measure_result m;
  memset(&m, 0, sizeof m);
  ck_assert_int_eq(job_measure(fx.jp, &alice, &mr, 1 << 20, &m, &e), QDP_ERR_FAILED_PRECONDITION);
  ck_assert_msg(strstr(e.msg, holder), "%s", e.msg);
  struct job_state_info g0;
  ck_assert_int_eq(job_gather(fx.jp, &alice, ha, ta, "cpu:0", 0, NULL, &g0, &e),
                   QDP_ERR_FAILED_PRECONDITION);
  ck_assert_int_eq(job_fetch_open(fx.jp, hb, tb, 0, 0, &f, &e), QDP_OK);
  job_fetch_close(fx.jp, &f);
  /* Its record still reads, naming the lease and the state written. */
  struct job_state_info d;
  CK_OK(job_describe(fx.jp, &bob, ha, ta, JOB_VIEWS_NONE, 0, &d, &e), e);
  ck_assert_uint_eq(d.meta.writer_lease, lease);
  ck_assert_int_eq(d.meta.writer_pid, 4242);
  ck_assert_str_eq(d.meta.writer, "uid:1000");
  ck_assert(d.overwritten);
  job_state_info_end(fx.jp, &d, true);

  /* The holder writes (1, i) / sqrt(2) in place (host memory on this backend), then closes. */
  double *amps = st->bufs[0];
  amps[0] = M_SQRT1_2, amps[1] = 0, amps[2] = 0, amps[3] = M_SQRT1_2;
  CK_OK(job_close_view(fx.jp, ha, ta, lease, NULL, &e), e);
  double got[4];
  fetch_all(ha, ta, got, 2);
  ck_assert_double_eq(got[3], M_SQRT1_2);
  /* |<a|b>|^2 = |(1 - i) / 2|^2 = 1/2; the real parts alone would give 1/4. */
  ck_assert_double_eq_tol(fidelity(ha, ta, hb, tb, &rc, &e), 0.5, 1e-15);
  ck_assert_double_eq_tol(fidelity(hb, tb, ha, ta, &rc, &e), 0.5, 1e-15);
  /* A gathered copy is as written as its source. */
  struct job_state_info g;
  CK_OK(job_gather(fx.jp, &alice, ha, ta, "cpu:1", 0, NULL, &g, &e), e);
  ck_assert(g.overwritten);
  char hg[STATE_HANDLE_LEN], tg[STATE_TOKEN_LEN];
  memcpy(hg, g.meta.handle, sizeof hg);
  memcpy(tg, g.token, sizeof tg);
  job_state_info_end(fx.jp, &g, true);
  ck_assert_double_eq_tol(fidelity(hg, tg, hb, tb, &rc, &e), 0.5, 1e-15);
  CK_OK(job_release(fx.jp, &alice, hg, tg, NULL, &e), e);
  CK_OK(job_describe(fx.jp, &alice, ha, ta, JOB_VIEWS_NONE, 0, &d, &e), e);
  ck_assert(d.overwritten); /* for good */
  ck_assert_uint_eq(d.meta.writer_lease, 0);
  job_state_info_end(fx.jp, &d, true);
  CK_OK(job_release(fx.jp, &alice, ha, ta, NULL, &e), e);
  CK_OK(job_release(fx.jp, &alice, hb, tb, NULL, &e), e);
  assert_store_empty();
}
END_TEST

/* Views, read or writable, need GPUs: the CPU backend refuses both before any lease opens. */
START_TEST(test_writable_views_on_host_memory_are_refused_and_lease_nothing) {
  const double x = 0.3;
  char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
  encode_angle(&x, h, t);
  struct job_state_info d;
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(job_describe(fx.jp, &alice, h, t, JOB_VIEWS_WRITE, 0, &d, &e),
                   QDP_ERR_FAILED_PRECONDITION);
  CK_OK(job_describe(fx.jp, &alice, h, t, JOB_VIEWS_NONE, 0, &d, &e), e);
  ck_assert_uint_eq(d.meta.leases, 0);
  ck_assert(!d.overwritten);
  job_state_info_end(fx.jp, &d, true);
  CK_OK(job_release(fx.jp, &alice, h, t, NULL, &e), e);
  assert_store_empty();
}
END_TEST

void job_add_pipeline_leases(TCase *tc) {
  tcase_add_test(tc, test_a_written_state_is_read_only_after_its_lease_and_as_written);
  tcase_add_test(tc, test_writable_views_on_host_memory_are_refused_and_lease_nothing);
}
