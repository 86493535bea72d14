/* test_runtime_output.c — where a state's bits go on the CPU backend: reads that span shards and
 * refuse past the end, and an encode into memory the mesh does not own (runtime_encode_into), which
 * writes the bits in place, holds nothing, and refuses an output that does not fit the plan. */
#include <check.h>
#include <complex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common_runtime.h"
#include "plan/plan.h"
#include "runtime/runtime.h"
#include "runtime_fixture.h"

START_TEST(test_read_spans_shards_and_refuses_past_end) {
  enum { N = 5 };
  struct runtime_mesh *m = qdpt_mesh("cpu:4", GIB, 0);
  double x[N] = {0.3, 1.1, -0.7, 2.0, 0.25};
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = N};
  struct plan *p1 = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_ANGLE, N, 1, N, QDP_DTYPE_FLOAT64,
                                 QDP_DTYPE_COMPLEX128);
  double complex *ref = qdpt_encode_read(m, p1, &in);
  struct plan *p = qdpt_plan_on(m, 3, PLAN_UNEVEN, QDP_ENCODING_ANGLE, N, 1, N, QDP_DTYPE_FLOAT64,
                                QDP_DTYPE_COMPLEX128);
  struct runtime_state *s = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(runtime_encode(m, p, &in, &s, &e), e);
  double complex part[20];
  CK_OK(runtime_state_read(s, 7, 20, part, &e), e); /* crosses both boundaries */
  ck_assert(memcmp(part, ref + 7, sizeof part) == 0);
  CK_STATUS(runtime_state_read(s, 30, 3, part, &e), QDP_ERR_OUT_OF_RANGE, e);
  ck_assert_ptr_nonnull(strstr(e.msg, "outside the state's 32"));
  runtime_state_destroy(s);
  free(ref);
  plan_destroy(p);
  plan_destroy(p1);
  runtime_mesh_destroy(m);
}
END_TEST

/* ---- an encode into memory the mesh does not own (runtime_encode_into) ---- */

#define GUARD 64 /* bytes poisoned on each side of an output */

static bool all_bytes_are(const unsigned char *b, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++) {
    if (b[i] != v) {
      return false;
    }
  }
  return true;
}

/* On host memory (the CPU backend's device memory): the bits runtime_encode gives, for an
 * amplitude batch, angle and iqp in both precisions, written exactly in the range
 * (the guards around it untouched), with nothing reserved on the device, and left as they are
 * by runtime_state_destroy (a free of them would be a double free below). */
START_TEST(test_encode_into_writes_the_bits_in_place_and_holds_nothing) {
  enum { N = 6, B = 5 };
  struct runtime_mesh *m = qdpt_mesh("cpu:2", GIB, 0);
  double *x = random_values(B * (1u << N), 11);
  static const struct {
    qdp_encoding enc;
    qdp_dtype out;
  } jobs[] = {{QDP_ENCODING_AMPLITUDE, QDP_DTYPE_COMPLEX128},
              {QDP_ENCODING_AMPLITUDE, QDP_DTYPE_COMPLEX64},
              {QDP_ENCODING_ANGLE, QDP_DTYPE_COMPLEX128},
              {QDP_ENCODING_IQP, QDP_DTYPE_COMPLEX64}};
  for (size_t k = 0; k < sizeof jobs / sizeof jobs[0]; k++) {
    uint64_t cols = jobs[k].enc == QDP_ENCODING_AMPLITUDE ? (1u << N) - 3
                                                          : qdp_values_per_sample(jobs[k].enc, N);
    struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = B, .cols = cols};
    struct plan *p =
        qdpt_plan_on(m, 2, PLAN_SINGLE, jobs[k].enc, N, B, cols, QDP_DTYPE_FLOAT64, jobs[k].out);
    void *want = qdpt_encode_read(m, p, &in);
    size_t bytes = (size_t)p->total_bytes;
    unsigned char *buf = qdpt_xmalloc(bytes + 2 * GUARD);
    memset(buf, 0xa5, bytes + 2 * GUARD);
    struct runtime_output out = {
        .data = buf + GUARD, .device = p->shards[0].device, .bytes = bytes};
    struct runtime_state *s = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    CK_OK_AT(runtime_encode_into(m, p, &in, &out, &s, &e), e, "job %zu", k);
    ck_assert_uint_eq(runtime_state_bytes(s), 0);
    ck_assert_uint_eq(runtime_state_plan(s)->total_bytes, bytes);
    qdpt_assert_mesh_idle(m, "while the output's state lives");
    runtime_state_destroy(s);
    ck_assert_msg(memcmp(buf + GUARD, want, bytes) == 0, "job %zu: the bits differ", k);
    ck_assert_msg(
        all_bytes_are(buf, GUARD, 0xa5) && all_bytes_are(buf + GUARD + bytes, GUARD, 0xa5),
        "job %zu wrote outside its %zu B", k, bytes);
    free(buf);
    free(want);
    plan_destroy(p);
  }
  free(x);
  runtime_mesh_destroy(m);
}
END_TEST

/* An output that does not fit the plan is refused before anything is written: too few bytes
 * (with both numbers), a misaligned address, another device than the shard's, a plan of two
 * shards. */
START_TEST(test_encode_into_refuses_an_output_that_does_not_fit_the_plan) {
  struct runtime_mesh *m = qdpt_mesh("cpu:2", GIB, 0);
  double x[2 * 4];
  for (int i = 0; i < 8; i++) {
    x[i] = 0.1 * i;
  }
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 2, .cols = 4};
  struct plan *p = qdpt_plan_on(m, 1, PLAN_SINGLE, QDP_ENCODING_ANGLE, 4, 2, 4, QDP_DTYPE_FLOAT64,
                                QDP_DTYPE_COMPLEX128); /* 2 x 16 x 16 = 512 B on cpu:0 */
  struct plan *two = qdpt_plan_on(m, 2, PLAN_BATCH, QDP_ENCODING_ANGLE, 4, 2, 4, QDP_DTYPE_FLOAT64,
                                  QDP_DTYPE_COMPLEX128);
  unsigned char *buf = qdpt_xmalloc(1024);
  memset(buf, 0xa5, 1024);
  const struct {
    const struct plan *p;
    struct runtime_output out;
    qdp_status want;
    const char *field, *fragment;
  } cases[] = {
      {p,
       {buf, 0, 511},
       QDP_ERR_INVALID_ARGUMENT,
       "out.bytes",
       "the state needs 512 B but the output holds 511 B"},
      {p,
       {buf + 8, 0, 512},
       QDP_ERR_INVALID_ARGUMENT,
       "out.offset",
       "is not aligned to its 16 B amplitudes"},
      {p,
       {buf, 1, 512},
       QDP_ERR_FAILED_PRECONDITION,
       "placement",
       "an encode into an allocation of device 1 needs one shard there, but the plan has 1, the "
       "first on rank 0 device 0"},
      {two, {buf, 0, 1024}, QDP_ERR_FAILED_PRECONDITION, "placement", "the plan has 2"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    struct runtime_state *s = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    CK_STATUS(runtime_encode_into(m, cases[k].p, &in, &cases[k].out, &s, &e), cases[k].want, e);
    ck_assert_ptr_null(s);
    ck_assert_str_eq(e.field, cases[k].field);
    ck_assert_msg(strstr(e.msg, cases[k].fragment), "case %zu: '%s' lacks '%s'", k, e.msg,
                  cases[k].fragment);
    if (k == 0) {
      ck_assert_uint_eq(e.need_bytes, 512);
      ck_assert_uint_eq(e.free_bytes, 511);
    }
  }
  ck_assert_msg(all_bytes_are(buf, 1024, 0xa5), "a refused encode wrote its output");
  qdpt_assert_mesh_idle(m, "after the refusals");
  free(buf);
  plan_destroy(two);
  plan_destroy(p);
  runtime_mesh_destroy(m);
}
END_TEST

void runtime_add_encode_output(TCase *tc) {
  tcase_add_test(tc, test_read_spans_shards_and_refuses_past_end);
  tcase_add_test(tc, test_encode_into_writes_the_bits_in_place_and_holds_nothing);
  tcase_add_test(tc, test_encode_into_refuses_an_output_that_does_not_fit_the_plan);
}
