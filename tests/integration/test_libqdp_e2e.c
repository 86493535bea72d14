/* Integration: libqdp's public API against a real qdpd (run by with_qdpd.sh: QDP_SOCKET and
 * QDP_TEST_DIR set). Every input kind, plan, describe, list, fetch (buffer, .npy, progress,
 * cancel), export, release, status, health, the error record with the daemon's details, and 32
 * threads sharing one client. States are compared with the formulas of docs/design.md's encodings,
 * computed here in double precision. No fork: gRPC threads do not survive it. */
#include <check.h>
#include <complex.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "qdp.h"
#include "qdp.pb-c.h"

static qdp_client *cl;
static char dir[512];

static void setup(void) {
  const char *d = getenv("QDP_TEST_DIR");
  ck_assert_ptr_nonnull(d);
  snprintf(dir, sizeof dir, "%s", d);
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.client_name = "libqdp-e2e@test:1";
  CK_QDP(qdp_client_create(&o, &cl));
}

static void teardown(void) {
  qdp_client_destroy(cl);
  cl = NULL;
}

static double max_err(const double complex *got, const double complex *want, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double e = cabs(got[i] - want[i]);
    m = e > m ? e : m;
  }
  return m;
}

static void ref_amplitude(const double *x, size_t len, unsigned n, double complex *out) {
  double s = 0;
  for (size_t i = 0; i < len; i++) {
    s += x[i] * x[i];
  }
  for (size_t b = 0; b < ((size_t)1 << n); b++) {
    out[b] = b < len ? x[b] / sqrt(s) : 0;
  }
}

static void ref_angle(const double *x, unsigned n, double complex *out) {
  for (size_t b = 0; b < ((size_t)1 << n); b++) {
    double p = 1;
    for (unsigned k = 0; k < n; k++) {
      p *= (b >> k) & 1 ? sin(x[k]) : cos(x[k]);
    }
    out[b] = p;
  }
}

static struct qdp_state_info *encode_inline(qdp_encoding e, unsigned n, const double *x, size_t len,
                                            uint64_t rows) {
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = e;
  eo.qubits = n;
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_INLINE;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.rows = rows;
  in.data = x;
  in.data_bytes = len * sizeof(double);
  struct qdp_state_info *s = NULL;
  CK_QDP(qdp_encode(cl, &eo, &in, &s));
  return s;
}

/* Writes x as a float64 .npy file of shape (rows, cols), or (cols,) for rows 0 (header per the
 * format: magic, version 1.0, dict padded to a multiple of 64 bytes with spaces and a newline). */
static void write_npy(const char *path, const double *x, size_t rows, size_t cols) {
  char dict[160], shape[48];
  if (rows) {
    snprintf(shape, sizeof shape, "(%zu, %zu)", rows, cols);
  } else {
    snprintf(shape, sizeof shape, "(%zu,)", cols);
  }
  int dl =
      snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }", shape);
  size_t n = (rows ? rows : 1) * cols;
  size_t total = (10 + (size_t)dl + 1 + 63) / 64 * 64;
  char hdr[256];
  memcpy(hdr, "\x93NUMPY\x01\x00", 8);
  hdr[8] = (char)((total - 10) & 0xff);
  hdr[9] = (char)((total - 10) >> 8);
  memcpy(hdr + 10, dict, (size_t)dl);
  memset(hdr + 10 + dl, ' ', total - 10 - (size_t)dl - 1);
  hdr[total - 1] = '\n';
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(hdr, 1, total, f), total);
  ck_assert_uint_eq(fwrite(x, sizeof *x, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

/* ---- status, health ---- */

START_TEST(test_status_lists_four_cpu_devices_and_health_is_serving) {
  struct qdp_server_status *s = NULL;
  CK_QDP(qdp_get_status(cl, &s));
  ck_assert_str_eq(s->backend, "cpu");
  ck_assert_uint_eq(s->ndevices, 4);
  for (size_t i = 0; i < s->ndevices; i++) {
    char want[32];
    snprintf(want, sizeof want, "cpu:%zu", i);
    ck_assert_str_eq(s->devices[i]->name, want);
    ck_assert_uint_gt(s->devices[i]->budget_bytes, 0);
  }
  ck_assert_uint_ge(s->max_qubits, 22);
  qdp_server_status_free(s);
  qdp_health h = QDP_HEALTH_UNKNOWN;
  CK_QDP(qdp_get_health(cl, &h));
  ck_assert_int_eq(h, QDP_HEALTH_SERVING);
}
END_TEST

/* ---- inline encode, fetch, describe, list, release ---- */

struct progress {
  int calls;
  uint64_t last_done, last_total;
  int cancel_after;
};

static int on_progress(void *arg, uint64_t done, uint64_t total) {
  struct progress *p = arg;
  ck_assert_uint_ge(done, p->last_done);
  p->calls++;
  p->last_done = done;
  p->last_total = total;
  return p->cancel_after && p->calls >= p->cancel_after;
}

START_TEST(test_inline_amplitude_round_trip_and_lifecycle) {
  double x[6] = {1, -2, 3, 0.5, 4, -1};
  struct qdp_state_info *s = encode_inline(QDP_ENCODING_AMPLITUDE, 3, x, 6, 0);
  ck_assert_uint_eq(s->qubits, 3);
  ck_assert_uint_eq(s->batch, 1);
  ck_assert_int_eq(s->dtype, QDP_DTYPE_COMPLEX128);
  ck_assert_uint_eq(s->bytes, 128);
  /* The owner is who the kernel says the caller is; the client name is only a label. */
  char me[32];
  snprintf(me, sizeof me, "uid:%u", (unsigned)getuid());
  ck_assert_str_eq(s->owner, me);
  ck_assert_uint_ge(s->nshards, 1);
  ck_assert_uint_gt(strlen(s->token), 0);
  double complex got[8], want[8];
  struct progress pr = {0, 0, 0, 0};
  struct qdp_fetch_opts fo = QDP_FETCH_OPTS_INIT;
  fo.chunk_bytes = 32; /* 2 amplitudes per chunk: 4 chunks */
  fo.progress = on_progress;
  fo.progress_arg = &pr;
  size_t nb = 0;
  CK_QDP(qdp_fetch(cl, s->handle, s->token, &fo, got, sizeof got, &nb));
  ck_assert_uint_eq(nb, sizeof got);
  ck_assert_int_ge(pr.calls, 4);
  ck_assert_uint_eq(pr.last_done, 128);
  ck_assert_uint_eq(pr.last_total, 128);
  ref_amplitude(x, 6, 3, want);
  ck_assert_double_le(max_err(got, want, 8), 1e-15);

  /* A sub-range lands at the start of the buffer. */
  fo = (struct qdp_fetch_opts)QDP_FETCH_OPTS_INIT;
  fo.offset = 3;
  fo.count = 4;
  double complex part[4];
  CK_QDP(qdp_fetch(cl, s->handle, s->token, &fo, part, sizeof part, &nb));
  ck_assert_uint_eq(nb, sizeof part);
  ck_assert_double_le(max_err(part, want + 3, 4), 1e-15);

  /* Too small a buffer: refused locally, nothing written past it, the state is untouched. */
  double complex small[5];
  ck_assert_int_eq(qdp_fetch(cl, s->handle, s->token, NULL, small, sizeof small, &nb),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "dst_bytes");
  ck_assert_int_eq(qdp_last_error()->remote, 0);
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "128"));

  struct qdp_state_info *d = NULL;
  CK_QDP(qdp_describe(cl, s->handle, s->token, &d));
  ck_assert_str_eq(d->handle, s->handle);
  ck_assert_uint_eq(d->bytes, 128);
  ck_assert_uint_eq(d->nshards, s->nshards);
  qdp_state_info_free(d);

  struct qdp_state_list *l = NULL;
  CK_QDP(qdp_list(cl, &l));
  int found = 0;
  for (size_t i = 0; i < l->count; i++) {
    found += strcmp(l->states[i]->handle, s->handle) == 0;
    ck_assert_str_eq(l->states[i]->token, ""); /* tokens are never listed */
  }
  ck_assert_int_eq(found, 1);
  qdp_state_list_free(l);

  uint64_t freed = 0;
  CK_QDP(qdp_release(cl, s->handle, s->token, &freed));
  ck_assert_uint_eq(freed, 128);
  CK_QDP_STATUS(qdp_describe(cl, s->handle, s->token, &d), QDP_ERR_NOT_FOUND);
  ck_assert_ptr_null(d);
  const struct qdp_errinfo *e = qdp_last_error();
  ck_assert_int_eq(e->remote, 1);
  ck_assert_str_eq(e->code_name, "QDP_ERR_NOT_FOUND");
  ck_assert_uint_gt(strlen(e->msg), 0);
  qdp_state_info_free(s);
}
END_TEST

/* qdp_call: requests packed here and replies unpacked here (protobuf-c, as a binding would with
 * its own messages); the daemon's refusals in the error record as the typed calls give them; a
 * method the service lacks refused before anything is sent. */
START_TEST(test_serialized_calls_carry_the_wire_and_its_errors) {
  void *rep = NULL;
  size_t n = 0;
  CK_QDP(qdp_call(cl, "Status", NULL, 0, -1, &rep, &n));
  Qdp__StatusReply *st = qdp__status_reply__unpack(NULL, n, rep);
  ck_assert_ptr_nonnull(st);
  ck_assert_str_eq(st->version, qdp_version_string());
  ck_assert_uint_eq(st->n_devices, 4);
  qdp__status_reply__free_unpacked(st, NULL);
  qdp_free(rep);

  double x[4] = {1, 2, 3, 4};
  Qdp__Input in = QDP__INPUT__INIT;
  in.dtype = QDP__DTYPE__DTYPE_FLOAT64;
  in.source_case = QDP__INPUT__SOURCE_DATA;
  in.data = (ProtobufCBinaryData){sizeof x, (uint8_t *)x};
  Qdp__EncodeRequest er = QDP__ENCODE_REQUEST__INIT;
  er.encoding = QDP__ENCODING__ENCODING_AMPLITUDE;
  er.qubits = 2;
  er.input = &in;
  uint8_t buf[256];
  size_t len = qdp__encode_request__pack(&er, buf);
  CK_QDP(qdp_call(cl, "Encode", buf, len, 5000, &rep, &n));
  Qdp__EncodeReply *r = qdp__encode_reply__unpack(NULL, n, rep);
  qdp_free(rep);
  ck_assert_ptr_nonnull(r);
  ck_assert_uint_eq(r->state->qubits, 2);
  ck_assert_uint_eq(r->state->bytes, 64);
  double complex got[4], want[4];
  size_t nb = 0;
  CK_QDP(qdp_fetch(cl, r->state->handle, r->state->token, NULL, got, sizeof got, &nb));
  ref_amplitude(x, 4, 2, want);
  ck_assert_double_le(max_err(got, want, 4), 1e-15);
  Qdp__StateRef ref = QDP__STATE_REF__INIT;
  ref.handle = r->state->handle;
  ref.token = r->state->token;
  len = qdp__state_ref__pack(&ref, buf);
  CK_QDP(qdp_call(cl, "Release", buf, len, -1, &rep, &n));
  Qdp__ReleaseReply *rr = qdp__release_reply__unpack(NULL, n, rep);
  ck_assert_uint_eq(rr->freed_bytes, 64);
  qdp__release_reply__free_unpacked(rr, NULL);
  qdp_free(rep);
  qdp__encode_reply__free_unpacked(r, NULL);

  er.qubits = 1; /* 4 values on 1 qubit: the daemon refuses, naming the field */
  len = qdp__encode_request__pack(&er, buf);
  rep = buf;
  n = 1;
  CK_QDP_STATUS(qdp_call(cl, "Encode", buf, len, -1, &rep, &n), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(rep);
  ck_assert_uint_eq(n, 0);
  ck_assert_int_eq(qdp_last_error()->remote, 1);
  ck_assert_str_eq(qdp_last_error()->field, "input.cols");
  CK_QDP_STATUS(qdp_call(cl, "Encodes", buf, len, -1, &rep, &n), QDP_ERR_UNIMPLEMENTED);
  ck_assert_int_eq(qdp_last_error()->remote, 0);
  ck_assert_str_eq(qdp_last_error()->field, "method");
  CK_QDP_STATUS(qdp_call(cl, "Status", NULL, 4, -1, &rep, &n), QDP_ERR_INVALID_ARGUMENT);
}
END_TEST

/* ---- the other input kinds ---- */

/* FetchInto a writable memfd region: the bytes Fetch streams, at the region offset asked. */
static void *read_all(const char *path, size_t *ret_n);

/* The kernel matrix: a hand-computed pair in the reply, a matrix over the reply's 64 MiB through
 * the region libqdp makes for it (checked against the direct sum of the fetched amplitudes), the
 * refusals, and the .npy form. */
START_TEST(test_kernel_in_the_reply_and_through_a_region) {
  /* |0> and (|0> + |1>)/sqrt(2) on 1 qubit: K = [[1, 1/2], [1/2, 1]]. */
  double pair[4] = {1, 0, 1, 1};
  struct qdp_state_info *s = encode_inline(QDP_ENCODING_AMPLITUDE, 1, pair, 4, 2);
  double k[4];
  struct qdp_kernel_info ki = QDP_KERNEL_INFO_INIT;
  CK_QDP(qdp_kernel(cl, s->handle, s->token, NULL, NULL, 0, k, sizeof k, &ki));
  ck_assert_uint_eq(ki.rows, 2);
  ck_assert_uint_eq(ki.cols, 2);
  ck_assert_int_eq(ki.dtype, QDP_DTYPE_FLOAT64);
  ck_assert_double_eq_tol(k[1], 0.5, 1e-15);
  ck_assert_double_eq(k[1], k[2]);
  ck_assert_double_eq_tol(k[3], 1.0, 1e-15);
  double complex o[4];
  CK_QDP(qdp_kernel(cl, s->handle, s->token, s->handle, s->token, QDP_KERNEL_OVERLAPS, o, sizeof o,
                    NULL));
  ck_assert_double_eq_tol(creal(o[1]), 1 / sqrt(2.0), 1e-15);
  /* A buffer too small: the bytes it needs. */
  ck_assert_int_eq(qdp_kernel(cl, s->handle, s->token, NULL, NULL, 0, k, 3 * sizeof(double), NULL),
                   QDP_ERR_OUT_OF_RANGE);
  ck_assert_uint_eq(qdp_last_error()->need_bytes, sizeof k);
  ck_assert_int_eq(qdp_kernel(cl, s->handle, s->token, NULL, NULL, 8, k, sizeof k, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "flags");

  /* 3000 x 3000 complex overlaps: 137 MiB, past what a reply carries. */
  enum { N = 3000, D = 4 };
  double *x = malloc(sizeof(double) * N * D);
  for (size_t i = 0; i < N * D; i++) {
    x[i] = sin(0.37 * (double)i + 1.0);
  }
  struct qdp_state_info *big = encode_inline(QDP_ENCODING_AMPLITUDE, 2, x, N * D, N);
  double complex *amp = malloc(sizeof(double complex) * N * D);
  size_t nb = 0;
  CK_QDP(qdp_fetch(cl, big->handle, big->token, NULL, amp, sizeof(double complex) * N * D, &nb));
  double complex *ov = malloc(sizeof(double complex) * N * N);
  CK_QDP(qdp_kernel(cl, big->handle, big->token, NULL, NULL, QDP_KERNEL_OVERLAPS, ov,
                    sizeof(double complex) * N * N, &ki));
  ck_assert_uint_eq(ki.bytes, sizeof(double complex) * N * N);
  double worst = 0;
  for (size_t i = 0; i < N; i += 7) {
    for (size_t j = 0; j < N; j += 5) {
      double complex want = 0;
      for (size_t b = 0; b < D; b++) {
        want += conj(amp[i * D + b]) * amp[j * D + b];
      }
      worst = fmax(worst, cabs(ov[i * N + j] - want));
    }
  }
  ck_assert_double_le(worst, 1e-15);
  struct qdp_server_status *st = NULL;
  CK_QDP(qdp_get_status(cl, &st));
  ck_assert_uint_eq(st->regions, 0); /* the call's region is gone */
  qdp_server_status_free(st);

  /* Other qubits: field "b"; and the .npy file, refused once it exists. */
  ck_assert_int_eq(qdp_kernel(cl, s->handle, s->token, big->handle, big->token, 0, k, sizeof k,
                              NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "b");
  char path[sizeof dir + 16];
  snprintf(path, sizeof path, "%s/kernel.npy", dir);
  CK_QDP(qdp_kernel_npy(cl, s->handle, s->token, NULL, NULL, 0, path, 0, NULL));
  ck_assert_int_eq(qdp_kernel_npy(cl, s->handle, s->token, NULL, NULL, 0, path, 0, NULL),
                   QDP_ERR_ALREADY_EXISTS);
  size_t fsize = 0;
  unsigned char *file = read_all(path, &fsize);
  ck_assert_uint_eq(fsize, 128 + sizeof k); /* a 128-byte header, then the 2 x 2 float64 */
  ck_assert_int_eq(memcmp(file + 128, k, sizeof k), 0);
  free(file);
  unlink(path);
  CK_QDP(qdp_release(cl, s->handle, s->token, NULL));
  CK_QDP(qdp_release(cl, big->handle, big->token, NULL));
  qdp_state_info_free(s);
  qdp_state_info_free(big);
  free(x);
  free(amp);
  free(ov);
}
END_TEST

/* ---- the kernel matrix of inputs ---- */

/* The reference states of `rows` samples of `values` values each: angle (n angles) or amplitude
 * (values <= 2^n). */
static void ref_batch(qdp_encoding e, unsigned n, const double *x, size_t rows, size_t values,
                      double complex *out) {
  for (size_t i = 0; i < rows; i++) {
    if (e == QDP_ENCODING_ANGLE) {
      ref_angle(x + i * values, n, out + (i << n));
    } else {
      ref_amplitude(x + i * values, values, n, out + (i << n));
    }
  }
}

/* <p|q>, the direct sum over the 2^n amplitudes. */
static double complex overlap(const double complex *p, const double complex *q, unsigned n) {
  double complex s = 0;
  for (size_t b = 0; b < ((size_t)1 << n); b++) {
    s += conj(p[b]) * q[b];
  }
  return s;
}

static void counts(uint32_t *ret_states, uint32_t *ret_regions) {
  struct qdp_server_status *st = NULL;
  CK_QDP(qdp_get_status(cl, &st));
  *ret_states = st->states;
  *ret_regions = st->regions;
  qdp_server_status_free(st);
}

/* One batch of rows x cols float64 values as an input of `kind`: inline, an upload, a .npy file
 * at path (on the node, or local), or shared memory (a memfd *fd, by pid and fd, or registered
 * as the region *ri when region). */
static void batch_input(qdp_input_kind kind, int region, const double *x, size_t rows, size_t cols,
                        const char *path, struct qdp_input *in, int *fd,
                        struct qdp_region_info *ri) {
  const size_t bytes = sizeof(double) * rows * cols;
  *in = (struct qdp_input)QDP_INPUT_INIT;
  in->kind = kind;
  in->dtype = QDP_DTYPE_FLOAT64;
  in->rows = rows;
  if (kind == QDP_INPUT_INLINE || kind == QDP_INPUT_UPLOAD) {
    in->data = x;
    in->data_bytes = bytes;
  } else if (kind == QDP_INPUT_SHM) {
    *fd = memfd_create("qdp-e2e-in", MFD_CLOEXEC);
    ck_assert_int_ge(*fd, 0);
    ck_assert_int_eq(pwrite(*fd, x, bytes, 0), (ssize_t)bytes);
    in->length = bytes;
    if (region) {
      CK_QDP(qdp_region_register(cl, NULL, (int)getpid(), *fd, ri));
      in->region = ri->handle;
      in->region_token = ri->token;
    } else {
      in->shm_pid = (int)getpid();
      in->shm_fd = *fd;
    }
  } else {
    write_npy(path, x, rows, cols);
    in->dtype = QDP_DTYPE_UNSPECIFIED;
    in->rows = 0;
    in->path = path;
  }
}

/* qdp_kernel_of against the direct sum over reference states. max_bytes 2000 makes tiles of 2
 * rows of 4 qubits for amplitude (2 * 2 * 256 B of states and 2 * 2 * 16 * 8 B of their real
 * parts; 3 rows would take 2304), so X's 9 rows are 5 tiles, and blocks of 4 amplitudes of the
 * 9 rows' angle states (2 * 9 * 4 * 8 B of real parts + 9 * 4 * 16 B encoded); 0 makes one
 * tile. X by Y and X with itself, fidelities and
 * overlaps, from each kind of input: inline data and a local .npy (angle), a file on the node and
 * an upload (amplitude), shared memory by descriptor and a registered region (angle); the local
 * file and the upload past inline_max, so through regions made for the call. Then the .npy form.
 * No state is kept and no region is left. */
START_TEST(test_kernel_of_inputs_is_the_direct_sum_in_tiles) {
  enum { N = 4, D = 1 << N, XR = 9, YR = 4, VMAX = 13 };
  uint32_t states0, regions0, states, regions;
  counts(&states0, &regions0);
  qdpt_rng_seed(21);
  const struct {
    qdp_encoding e;
    size_t values;
    qdp_input_kind a, b;
  } cases[] = {{QDP_ENCODING_ANGLE, N, QDP_INPUT_INLINE, QDP_INPUT_LOCAL_FILE},
               {QDP_ENCODING_AMPLITUDE, VMAX, QDP_INPUT_SERVER_FILE, QDP_INPUT_UPLOAD},
               {QDP_ENCODING_ANGLE, N, QDP_INPUT_SHM, QDP_INPUT_SHM}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const size_t L = cases[c].values;
    double x[XR * VMAX], y[YR * VMAX];
    for (size_t i = 0; i < XR * L; i++) {
      x[i] = qdpt_rng_uniform(-1, 1);
    }
    for (size_t i = 0; i < YR * L; i++) {
      y[i] = qdpt_rng_uniform(-1, 1);
    }
    double complex P[XR * D], Q[YR * D];
    ref_batch(cases[c].e, N, x, XR, L, P);
    ref_batch(cases[c].e, N, y, YR, L, Q);
    struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
    eo.encoding = cases[c].e;
    eo.qubits = N;
    char xpath[600], ypath[600];
    snprintf(xpath, sizeof xpath, "%s/kx.npy", dir);
    snprintf(ypath, sizeof ypath, "%s/ky.npy", dir);
    struct qdp_input a, b;
    int afd = -1, bfd = -1;
    struct qdp_region_info ri = QDP_REGION_INFO_INIT;
    batch_input(cases[c].a, 0, x, XR, L, xpath, &a, &afd, NULL);
    batch_input(cases[c].b, 1, y, YR, L, ypath, &b, &bfd, &ri);
    b.inline_max = 0;
    double k[XR * YR], s[XR * XR];
    double complex o[XR * YR];
    struct qdp_kernel_info ki = QDP_KERNEL_INFO_INIT;
    for (uint64_t mb = 0; mb <= 2000; mb += 2000) {
      CK_QDP(qdp_kernel_of(cl, &eo, &a, &b, mb, 0, k, sizeof k, &ki));
      ck_assert_uint_eq(ki.rows, XR);
      ck_assert_uint_eq(ki.cols, YR);
      ck_assert_int_eq(ki.dtype, QDP_DTYPE_FLOAT64);
      ck_assert_uint_eq(ki.bytes, sizeof k);
      CK_QDP(qdp_kernel_of(cl, &eo, &a, &b, mb, QDP_KERNEL_OVERLAPS, o, sizeof o, &ki));
      ck_assert_int_eq(ki.dtype, QDP_DTYPE_COMPLEX128);
      CK_QDP(qdp_kernel_of(cl, &eo, &a, NULL, mb, 0, s, sizeof s, &ki));
      ck_assert_uint_eq(ki.cols, XR);
      for (size_t i = 0; i < XR; i++) {
        for (size_t j = 0; j < YR; j++) {
          double complex want = overlap(P + i * D, Q + j * D, N);
          ck_assert_double_eq_tol(k[i * YR + j], creal(want * conj(want)), 1e-14);
          ck_assert_double_le(cabs(o[i * YR + j] - want), 1e-14);
        }
        for (size_t j = 0; j < XR; j++) {
          double complex want = overlap(P + i * D, P + j * D, N);
          ck_assert_double_eq_tol(s[i * XR + j], creal(want * conj(want)), 1e-14);
          ck_assert_double_eq(s[i * XR + j], s[j * XR + i]);
        }
      }
    }
    /* The .npy form: a 128-byte header of shape (9, 4), then the same matrix. */
    char out[600];
    snprintf(out, sizeof out, "%s/kof.npy", dir);
    CK_QDP(qdp_kernel_of_npy(cl, &eo, &a, &b, 2000, 0, out, 0, &ki));
    ck_assert_uint_eq(ki.rows, XR);
    CK_QDP_STATUS(qdp_kernel_of_npy(cl, &eo, &a, &b, 2000, 0, out, 0, NULL),
                  QDP_ERR_ALREADY_EXISTS);
    size_t fsize = 0;
    char *file = read_all(out, &fsize);
    ck_assert_uint_eq(fsize, 128 + sizeof k);
    ck_assert_ptr_nonnull(memmem(file, 128, "'shape': (9, 4)", 15));
    ck_assert_int_eq(memcmp(file + 128, k, sizeof k), 0);
    free(file);
    unlink(out);
    unlink(xpath);
    unlink(ypath);
    if (ri.handle[0]) {
      CK_QDP(qdp_region_unregister(cl, ri.handle, ri.token));
    }
    if (afd >= 0) {
      close(afd);
    }
    if (bfd >= 0) {
      close(bfd);
    }
  }
  counts(&states, &regions);
  ck_assert_uint_eq(states, states0);
  ck_assert_uint_eq(regions, regions0);
}
END_TEST

/* A matrix past a reply's 64 MiB from a file on the node: the call is made again into a region,
 * with the file handed over again (the daemon takes a descriptor once). 3000 angles on 1 qubit,
 * (cos x, sin x): K[i][j] = cos^2(x_i - x_j). */
START_TEST(test_kernel_of_a_large_matrix_from_a_file_on_the_node) {
  enum { R = 3000 };
  double *x = qdpt_xmalloc(sizeof(double) * R);
  qdpt_rng_seed(22);
  for (size_t i = 0; i < R; i++) {
    x[i] = qdpt_rng_uniform(0, M_PI);
  }
  char path[600];
  snprintf(path, sizeof path, "%s/kbig.npy", dir);
  write_npy(path, x, R, 1);
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_ANGLE;
  eo.qubits = 1;
  struct qdp_input a = QDP_INPUT_INIT;
  a.kind = QDP_INPUT_SERVER_FILE;
  a.path = path;
  double *k = qdpt_xmalloc(sizeof(double) * R * R);
  struct qdp_kernel_info ki = QDP_KERNEL_INFO_INIT;
  CK_QDP(qdp_kernel_of(cl, &eo, &a, NULL, 0, 0, k, sizeof(double) * R * R, &ki));
  ck_assert_uint_eq(ki.bytes, sizeof(double) * R * R);
  for (size_t i = 0; i < R; i += 7) {
    for (size_t j = 0; j < R; j += 5) {
      double c = cos(x[i] - x[j]);
      ck_assert_double_eq_tol(k[i * R + j], c * c, 1e-14);
    }
  }
  uint32_t states, regions;
  counts(&states, &regions);
  ck_assert_uint_eq(regions, 0);
  unlink(path);
  free(k);
  free(x);
}
END_TEST

/* The refusals, each naming its field: max_bytes below one row's tiles (with need_bytes, the
 * least that works: 2 * 256 + 2 * 16 * 8 for rows of 4 qubits and their real parts), after the
 * input went through a region that is gone again; another policy; views; b's input; a bad
 * sample, by the rows of its tile; a buffer too small; and over TCP, an input past inline_max,
 * found before anything is sent. */
START_TEST(test_kernel_of_refusals) {
  enum { R = 5, D = 16 };
  double x[R * D];
  for (size_t i = 0; i < R * D; i++) {
    x[i] = sin(0.7 * (double)i) + 0.1;
  }
  char path[600];
  snprintf(path, sizeof path, "%s/kref.npy", dir);
  write_npy(path, x, R, D);
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_AMPLITUDE;
  eo.qubits = 4;
  struct qdp_input a = QDP_INPUT_INIT;
  a.kind = QDP_INPUT_LOCAL_FILE;
  a.path = path;
  a.inline_max = 0;
  double k[R * R];
  CK_QDP_STATUS(qdp_kernel_of(cl, &eo, &a, NULL, 100, 0, k, sizeof k, NULL),
                QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "max_bytes");
  ck_assert_uint_eq(qdp_last_error()->need_bytes, 2 * 256 + 2 * 16 * 8);
  uint32_t states, regions;
  counts(&states, &regions);
  ck_assert_uint_eq(regions, 0);
  CK_QDP(qdp_kernel_of(cl, &eo, &a, NULL, 2 * 256 + 2 * 16 * 8, 0, k, sizeof k, NULL));

  eo.policy = QDP_POLICY_EVEN;
  CK_QDP_STATUS(qdp_kernel_of(cl, &eo, &a, NULL, 0, 0, k, sizeof k, NULL),
                QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "encode.placement.policy");
  eo.policy = QDP_POLICY_AUTO;
  eo.ipc = 1;
  CK_QDP_STATUS(qdp_kernel_of(cl, &eo, &a, NULL, 0, 0, k, sizeof k, NULL),
                QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "ipc");
  eo.ipc = 0;
  struct qdp_input b = QDP_INPUT_INIT;
  b.kind = QDP_INPUT_LOCAL_FILE;
  b.path = "/nonexistent/y.npy";
  CK_QDP_STATUS(qdp_kernel_of(cl, &eo, &a, &b, 0, 0, k, sizeof k, NULL), QDP_ERR_NOT_FOUND);
  ck_assert_str_eq(qdp_last_error()->field, "input_b.path");
  CK_QDP_STATUS(qdp_kernel_of(cl, &eo, &a, NULL, 0, 0, k, sizeof k - 1, NULL),
                QDP_ERR_OUT_OF_RANGE);
  ck_assert_uint_eq(qdp_last_error()->need_bytes, sizeof k);

  /* Row 3 all zeros, in the second tile of 2 rows. */
  memset(x + 3 * D, 0, sizeof(double) * D);
  struct qdp_input z = QDP_INPUT_INIT;
  z.kind = QDP_INPUT_INLINE;
  z.dtype = QDP_DTYPE_FLOAT64;
  z.rows = R;
  z.data = x;
  z.data_bytes = sizeof x;
  CK_QDP_STATUS(
      qdp_kernel_of(cl, &eo, &z, NULL, 2 * (2 * 256 + 2 * 16 * 8), 0, k, sizeof k, NULL),
      QDP_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(qdp_last_error()->msg, "rows 2 to 3"), "%s", qdp_last_error()->msg);

  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.target = "127.0.0.1:9";
  qdp_client *tcp = NULL;
  CK_QDP(qdp_client_create(&o, &tcp));
  CK_QDP_STATUS(qdp_kernel_of(tcp, &eo, &a, NULL, 0, 0, k, sizeof k, NULL),
                QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.inline_max");
  ck_assert_int_eq(qdp_last_error()->remote, 0);
  qdp_client_destroy(tcp);
  counts(&states, &regions);
  ck_assert_uint_eq(regions, 0);
  unlink(path);
}
END_TEST

/* Measurements of a Bell state, (|00> + |11>)/sqrt(2), by hand: each qubit 1/2 and 1/2, <ZZ> =
 * <XX> = 1, <YY> = -1, <ZI> = 0; samples of 0 and 3 from a seed; and the refusals. */
START_TEST(test_probabilities_and_expectations) {
  double bell[4] = {1, 0, 0, 1};
  struct qdp_state_info *s = encode_inline(QDP_ENCODING_AMPLITUDE, 2, bell, 4, 0);
  double p[4], e[4];
  const uint32_t q1 = 1;
  struct qdp_measure_info mi = QDP_MEASURE_INFO_INIT;
  CK_QDP(qdp_probabilities(cl, s->handle, s->token, &q1, 1, p, sizeof p, &mi));
  ck_assert_uint_eq(mi.rows, 1);
  ck_assert_uint_eq(mi.cols, 2);
  ck_assert_double_eq_tol(p[0], 0.5, 1e-15);
  ck_assert_double_eq_tol(p[1], 0.5, 1e-15);
  CK_QDP(qdp_probabilities(cl, s->handle, s->token, NULL, 0, p, sizeof p, &mi));
  ck_assert_uint_eq(mi.cols, 4);
  ck_assert_double_eq_tol(p[3], 0.5, 1e-15);
  ck_assert_double_eq(p[1], 0.0);
  const char *strings[4] = {"ZZ", "XX", "YY", "ZI"};
  CK_QDP(qdp_expectations(cl, s->handle, s->token, strings, 4, e, sizeof e, &mi));
  ck_assert_double_eq_tol(e[0], 1.0, 1e-15);
  ck_assert_double_eq_tol(e[1], 1.0, 1e-15);
  ck_assert_double_eq_tol(e[2], -1.0, 1e-15);
  ck_assert_double_eq_tol(e[3], 0.0, 1e-15);
  ck_assert_int_eq(qdp_expectations(cl, s->handle, s->token, strings, 4, e, 3 * sizeof(double),
                                    NULL),
                   QDP_ERR_OUT_OF_RANGE);
  ck_assert_uint_eq(qdp_last_error()->need_bytes, sizeof e);
  const char *bad[1] = {"ZQ"};
  ck_assert_int_eq(qdp_expectations(cl, s->handle, s->token, bad, 1, e, sizeof e, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "paulis");
  const uint32_t twice[2] = {0, 0};
  ck_assert_int_eq(qdp_probabilities(cl, s->handle, s->token, twice, 2, p, sizeof p, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "qubits");
  /* Samples of the Bell state: 0 or 3 only, the same for a seed, about half each. */
  int64_t draws[2000], again[2000];
  CK_QDP(qdp_sample(cl, s->handle, s->token, 2000, 9, draws, sizeof draws, &mi));
  ck_assert_uint_eq(mi.cols, 2000);
  CK_QDP(qdp_sample(cl, s->handle, s->token, 2000, 9, again, sizeof again, NULL));
  ck_assert_int_eq(memcmp(draws, again, sizeof draws), 0);
  int threes = 0;
  for (int i = 0; i < 2000; i++) {
    ck_assert(draws[i] == 0 || draws[i] == 3);
    threes += draws[i] == 3;
  }
  ck_assert_int_gt(threes, 850); /* 1000 +- 5 standard deviations of 22 */
  ck_assert_int_lt(threes, 1150);
  ck_assert_int_eq(qdp_sample(cl, s->handle, s->token, 0, 9, draws, sizeof draws, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  CK_QDP(qdp_release(cl, s->handle, s->token, NULL));
  qdp_state_info_free(s);
}
END_TEST

START_TEST(test_fetch_into_a_writable_region_matches_fetch) {
  double x[6] = {1, -2, 3, 0.5, 4, -1};
  struct qdp_state_info *s = encode_inline(QDP_ENCODING_AMPLITUDE, 3, x, 6, 0);
  double complex want[8], got[8];
  CK_QDP(qdp_fetch(cl, s->handle, s->token, NULL, want, sizeof want, NULL));
  int fd = memfd_create("qdp-e2e-out", MFD_CLOEXEC);
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  struct qdp_region_info ri = QDP_REGION_INFO_INIT;
  CK_QDP(qdp_region_register_writable(cl, NULL, (int)getpid(), fd, &ri));
  uint64_t nb = 0;
  CK_QDP(qdp_fetch_into(cl, s->handle, s->token, NULL, ri.handle, ri.token, 512, &nb));
  ck_assert_uint_eq(nb, sizeof want);
  ck_assert_int_eq(pread(fd, got, sizeof got, 512), (ssize_t)sizeof got);
  ck_assert_mem_eq(got, want, sizeof want);
  ck_assert_int_eq(qdp_fetch_into(cl, s->handle, s->token, NULL, ri.handle, ri.token, 4000, &nb),
                   QDP_ERR_OUT_OF_RANGE);
  ck_assert_uint_eq(qdp_last_error()->need_bytes, 128);
  ck_assert_uint_eq(qdp_last_error()->free_bytes, 96);
  CK_QDP(qdp_region_unregister(cl, ri.handle, ri.token));
  /* Registered read-only: the daemon will not write into it. */
  ri = (struct qdp_region_info)QDP_REGION_INFO_INIT;
  CK_QDP(qdp_region_register(cl, NULL, (int)getpid(), fd, &ri));
  ck_assert_int_eq(qdp_fetch_into(cl, s->handle, s->token, NULL, ri.handle, ri.token, 0, &nb),
                   QDP_ERR_FAILED_PRECONDITION);
  CK_QDP(qdp_region_unregister(cl, ri.handle, ri.token));
  close(fd);
  CK_QDP(qdp_release(cl, s->handle, s->token, NULL));
  qdp_state_info_free(s);
}
END_TEST

/* A region's seals as the daemon read them: none, sealed against shrinking and growing, and
 * against writing too (frozen); a caller built before `frozen` (its struct_size short of it) is
 * still served and its memory past its struct left alone. */
START_TEST(test_region_info_reports_seals) {
  int fd = memfd_create("qdp-e2e-seal", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  struct qdp_region_info ri = QDP_REGION_INFO_INIT;
  CK_QDP(qdp_region_register(cl, NULL, (int)getpid(), fd, &ri));
  ck_assert_int_eq(ri.sealed, 0);
  ck_assert_int_eq(ri.frozen, 0);
  CK_QDP(qdp_region_unregister(cl, ri.handle, ri.token));
  ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  ri = (struct qdp_region_info)QDP_REGION_INFO_INIT;
  CK_QDP(qdp_region_register(cl, NULL, (int)getpid(), fd, &ri));
  ck_assert_int_eq(ri.sealed, 1);
  ck_assert_int_eq(ri.frozen, 0);
  CK_QDP(qdp_region_unregister(cl, ri.handle, ri.token));
  ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
  ri = (struct qdp_region_info)QDP_REGION_INFO_INIT;
  CK_QDP(qdp_region_register(cl, NULL, (int)getpid(), fd, &ri));
  ck_assert_int_eq(ri.sealed, 1);
  ck_assert_int_eq(ri.frozen, 1);
  /* The owner unregisters by handle alone. */
  CK_QDP(qdp_region_unregister(cl, ri.handle, ""));
  ri = (struct qdp_region_info)QDP_REGION_INFO_INIT;
  ri.struct_size = offsetof(struct qdp_region_info, frozen);
  ri.frozen = 7;
  CK_QDP(qdp_region_register(cl, NULL, (int)getpid(), fd, &ri));
  ck_assert_int_eq(ri.sealed, 1);
  ck_assert_int_eq(ri.frozen, 7);
  CK_QDP(qdp_region_unregister(cl, ri.handle, ri.token));
  close(fd);
}
END_TEST

START_TEST(test_server_file_and_shared_memory_inputs) {
  enum { N = 5, L = 32 };
  double x[L];
  for (int i = 0; i < L; i++) {
    x[i] = sin(0.3 * i) + 0.1;
  }
  double complex want[L], got[L];
  ref_amplitude(x, L, N, want);
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_AMPLITUDE;
  eo.qubits = N;

  /* A .npy on the daemon's node (the same machine here). */
  char path[600];
  snprintf(path, sizeof path, "%s/e2e-input.npy", dir);
  write_npy(path, x, 0, L);
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_SERVER_FILE;
  in.path = path;
  struct qdp_state_info *s = NULL;
  CK_QDP(qdp_encode(cl, &eo, &in, &s));
  CK_QDP(qdp_fetch(cl, s->handle, s->token, NULL, got, sizeof got, NULL));
  ck_assert_double_le(max_err(got, want, L), 1e-15);
  CK_QDP(qdp_release(cl, s->handle, s->token, NULL));
  qdp_state_info_free(s);

  /* Shared memory by name, at an offset. */
  char name[64];
  snprintf(name, sizeof name, "/qdp-e2e-%ld", (long)getpid());
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  unsigned char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne(m, MAP_FAILED);
  memcpy(m + 256, x, sizeof x);
  in = (struct qdp_input)QDP_INPUT_INIT;
  in.kind = QDP_INPUT_SHM;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.cols = L;
  in.shm_name = name;
  in.offset = 256;
  in.length = sizeof x;
  CK_QDP(qdp_encode(cl, &eo, &in, &s));
  CK_QDP(qdp_fetch(cl, s->handle, s->token, NULL, got, sizeof got, NULL));
  ck_assert_double_le(max_err(got, want, L), 1e-15);
  CK_QDP(qdp_release(cl, s->handle, s->token, NULL));
  qdp_state_info_free(s);

  /* The same region by pid + fd. */
  in.shm_name = NULL;
  in.shm_pid = (int)getpid();
  in.shm_fd = fd;
  CK_QDP(qdp_encode(cl, &eo, &in, &s));
  CK_QDP(qdp_fetch(cl, s->handle, s->token, NULL, got, sizeof got, NULL));
  ck_assert_double_le(max_err(got, want, L), 1e-15);
  CK_QDP(qdp_release(cl, s->handle, s->token, NULL));
  qdp_state_info_free(s);
  munmap(m, 4096);
  close(fd);
  shm_unlink(name);
}
END_TEST

START_TEST(test_uploads_from_a_buffer_and_a_local_file_stream_in_chunks) {
  enum { N = 20 };
  const size_t L = (size_t)1 << N; /* 8 MiB of float64: far above the inline limit */
  double *x = malloc(L * sizeof *x);
  double complex *got = malloc(L * sizeof *got);
  ck_assert_ptr_nonnull(x);
  ck_assert_ptr_nonnull(got);
  double ss = 0;
  for (size_t i = 0; i < L; i++) {
    x[i] = cos(0.001 * (double)i) + 0.25;
    ss += x[i] * x[i];
  }
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_AMPLITUDE;
  eo.qubits = N;
  struct progress pr = {0, 0, 0, 0};
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_UPLOAD;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.cols = L;
  in.data = x;
  in.data_bytes = L * sizeof *x;
  in.chunk_bytes = 256 << 10;
  in.progress = on_progress;
  in.progress_arg = &pr;
  struct qdp_state_info *s = NULL;
  CK_QDP(qdp_encode(cl, &eo, &in, &s));
  ck_assert_int_eq(pr.calls, 32); /* 8 MiB / 256 KiB */
  ck_assert_uint_eq(pr.last_done, L * sizeof *x);
  CK_QDP(qdp_fetch(cl, s->handle, s->token, NULL, got, L * sizeof *got, NULL));
  double err = 0;
  for (size_t i = 0; i < L; i++) {
    double e = cabs(got[i] - x[i] / sqrt(ss));
    err = e > err ? e : err;
  }
  ck_assert_double_le(err, 1e-12);
  CK_QDP(qdp_release(cl, s->handle, s->token, NULL));
  qdp_state_info_free(s);

  /* The same values from a local .npy file: libqdp reads and streams it. */
  char path[600];
  snprintf(path, sizeof path, "%s/e2e-upload.npy", dir);
  write_npy(path, x, 0, L);
  in = (struct qdp_input)QDP_INPUT_INIT;
  in.kind = QDP_INPUT_LOCAL_FILE;
  in.path = path;
  pr = (struct progress){0, 0, 0, 0};
  in.progress = on_progress;
  in.progress_arg = &pr;
  eo.dtype = QDP_DTYPE_COMPLEX64;
  CK_QDP(qdp_encode(cl, &eo, &in, &s));
  ck_assert_int_eq(pr.calls, 8); /* 8 MiB in the default 1 MiB chunks */
  ck_assert_int_eq(s->dtype, QDP_DTYPE_COMPLEX64);
  float complex *g64 = (float complex *)got;
  CK_QDP(qdp_fetch(cl, s->handle, s->token, NULL, g64, L * sizeof *g64, NULL));
  err = 0;
  double peak = 0;
  for (size_t i = 0; i < L; i++) {
    double e = cabs((double complex)g64[i] - x[i] / sqrt(ss));
    err = e > err ? e : err;
    peak = fabs(x[i]) / sqrt(ss) > peak ? fabs(x[i]) / sqrt(ss) : peak;
  }
  ck_assert_double_le(err, 1e-5 * peak); /* float precision, relative to the largest value */

  /* Cancelling a fetch from its progress callback. */
  pr = (struct progress){0, 0, 0, 2};
  struct qdp_fetch_opts fo = QDP_FETCH_OPTS_INIT;
  fo.progress = on_progress;
  fo.progress_arg = &pr;
  ck_assert_int_eq(qdp_fetch(cl, s->handle, s->token, &fo, g64, L * sizeof *g64, NULL),
                   QDP_ERR_CANCELLED);
  ck_assert_int_eq(qdp_last_error()->remote, 0);
  ck_assert_int_eq(pr.calls, 2);
  CK_QDP(qdp_release(cl, s->handle, s->token, NULL));
  qdp_state_info_free(s);
  free(x);
  free(got);
}
END_TEST

/* ---- .npy out: fetch_npy and export ---- */

static void *read_all(const char *path, size_t *ret_n) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  ck_assert_int_ge(n, 0);
  rewind(f);
  void *buf = malloc((size_t)n + 1);
  ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *ret_n = (size_t)n;
  return buf;
}

START_TEST(test_fetch_npy_and_export_write_the_same_array) {
  double x[2 * 3] = {0.1, 0.2, 0.3, 1.0, 2.0, 3.0}; /* two samples of three angles */
  struct qdp_state_info *s = encode_inline(QDP_ENCODING_ANGLE, 3, x, 6, 2);
  ck_assert_uint_eq(s->batch, 2);
  char local[600], remote[600];
  snprintf(local, sizeof local, "%s/e2e-fetch.npy", dir);
  snprintf(remote, sizeof remote, "%s/e2e-export.npy", dir);
  CK_QDP(qdp_fetch_npy(cl, s->handle, s->token, NULL, local, 0));
  CK_QDP_STATUS(qdp_fetch_npy(cl, s->handle, s->token, NULL, local, 0), QDP_ERR_ALREADY_EXISTS);
  char *path = NULL;
  uint64_t bytes = 0;
  CK_QDP(qdp_export(cl, s->handle, s->token, remote, 0, &path, &bytes));
  ck_assert_str_eq(path, remote);
  qdp_free(path);
  size_t na, nb;
  unsigned char *a = read_all(local, &na);
  unsigned char *b = read_all(remote, &nb);
  ck_assert_uint_eq(nb, bytes);
  /* Headers may differ in padding; the data (the last 256 bytes) must be identical. */
  ck_assert_uint_ge(na, 256 + 64);
  ck_assert_uint_ge(nb, 256 + 64);
  ck_assert_int_eq(memcmp(a + na - 256, b + nb - 256, 256), 0);
  a[na < 200 ? na : 200] = 0;
  ck_assert_ptr_nonnull(strstr((char *)a + 10, "'descr': '<c16'"));
  ck_assert_ptr_nonnull(strstr((char *)a + 10, "'shape': (2, 8)"));
  double complex want[16];
  ref_angle(x, 3, want);
  ref_angle(x + 3, 3, want + 8);
  double complex got[16];
  memcpy(got, b + nb - 256, 256);
  ck_assert_double_le(max_err(got, want, 16), 1e-15);
  free(a);
  free(b);
  CK_QDP(qdp_release(cl, s->handle, s->token, NULL));
  qdp_state_info_free(s);
}
END_TEST

/* ---- plan and refusals ---- */

START_TEST(test_plan_and_refusals_carry_the_numbers) {
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_PHASE;
  eo.qubits = 10;
  eo.policy = QDP_POLICY_EVEN;
  const char *devs[] = {"cpu:0", "cpu:1"};
  eo.devices = devs;
  eo.ndevices = 2;
  double x[40] = {0};
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_INLINE;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.data = x;
  in.data_bytes = 10 * sizeof(double);
  struct qdp_plan_info *p = NULL;
  CK_QDP(qdp_plan(cl, &eo, &in, &p));
  ck_assert_int_eq(p->feasible, 1);
  ck_assert_uint_eq(p->global_bits, 1);
  ck_assert_uint_eq(p->total_bytes, 1024 * 16);
  ck_assert_uint_eq(p->nneeds, 2);
  ck_assert_uint_eq(p->nshards, 2);
  for (size_t i = 0; i < 2; i++) {
    ck_assert_str_eq(p->needs[i]->device, devs[i]);
    ck_assert_uint_eq(p->needs[i]->shard_bytes, 512 * 16);
    ck_assert_uint_eq(
        p->needs[i]->need_bytes,
        p->needs[i]->shard_bytes + p->needs[i]->staging_bytes + p->needs[i]->workspace_bytes);
    ck_assert_uint_eq(p->shards[i]->first, 512 * i);
  }
  qdp_plan_info_free(p);

  /* The largest state the daemon allows cannot fit its CPU devices. */
  struct qdp_server_status *st = NULL;
  CK_QDP(qdp_get_status(cl, &st));
  eo.qubits = st->max_qubits;
  qdp_server_status_free(st);
  eo.policy = QDP_POLICY_AUTO;
  eo.ndevices = 0;
  eo.devices = NULL;
  in.data_bytes = eo.qubits * sizeof(double);
  CK_QDP(qdp_plan(cl, &eo, &in, &p));
  ck_assert_int_eq(p->feasible, 0);
  ck_assert_uint_gt(strlen(p->message), 0);
  qdp_plan_info_free(p);
  struct qdp_state_info *s = (struct qdp_state_info *)&eo; /* must be reset to NULL */
  CK_QDP_STATUS(qdp_encode(cl, &eo, &in, &s), QDP_ERR_RESOURCE_EXHAUSTED);
  ck_assert_ptr_null(s);
  const struct qdp_errinfo *e = qdp_last_error();
  ck_assert_int_eq(e->remote, 1);
  ck_assert_uint_gt(e->need_bytes, e->free_bytes);
  /* Sizes a person reads in the message (2^max_qubits complex128 amplitudes on four devices,
   * each needing a quarter), the exact bytes in the detail. */
  ck_assert_uint_eq(e->need_bytes, (16ull << eo.qubits) / 4);
  ck_assert_ptr_nonnull(strstr(e->msg, "complex128 state (16 TiB) does not fit"));
  ck_assert_ptr_nonnull(strstr(e->msg, "needs 4 TiB (shard 4 TiB"));

  eo.qubits = 0;
  CK_QDP_STATUS(qdp_encode(cl, &eo, &in, &s), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "qubits");
  ck_assert_str_eq(qdp_last_error()->code_name, "QDP_ERR_INVALID_ARGUMENT");
}
END_TEST

/* ---- threads ---- */

struct worker {
  int id;
  int ok;
  char why[1400];
};

/* Gather through libqdp (bits equal to the sharded fetch), refusals with the numbers, and views,
 * which a daemon on host memory refuses (and a libqdp without CUDA refuses itself). */
START_TEST(test_gather_and_views_on_four_cpu_devices) {
  enum { N = 10, AMPS = 1 << N };
  double x[N];
  for (int i = 0; i < N; i++) {
    x[i] = 0.2 + 0.3 * i;
  }
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_ANGLE;
  eo.qubits = N;
  eo.policy = QDP_POLICY_EVEN;
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_INLINE;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.data = x;
  in.data_bytes = sizeof x;
  struct qdp_state_info *s = NULL, *g = NULL;
  CK_QDP(qdp_encode(cl, &eo, &in, &s));
  ck_assert_uint_eq(s->nshards, 4);
  CK_QDP(qdp_gather(cl, s->handle, s->token, "cpu:1", 0, &g));
  ck_assert_uint_eq(g->nshards, 1);
  ck_assert_str_eq(g->shards[0]->device, "cpu:1");
  ck_assert_uint_eq(g->shards[0]->count, AMPS);
  double complex *want = malloc(AMPS * sizeof *want), *got = malloc(AMPS * sizeof *got);
  CK_QDP(qdp_fetch(cl, s->handle, s->token, NULL, want, AMPS * sizeof *want, NULL));
  CK_QDP(qdp_fetch(cl, g->handle, g->token, NULL, got, AMPS * sizeof *got, NULL));
  ck_assert(memcmp(got, want, AMPS * sizeof *got) == 0);
  CK_QDP_STATUS(qdp_gather(cl, s->handle, s->token, "cpu:9", 0, &g), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "device");

  const struct qdp_views *v = NULL;
  qdp_status rc = qdp_views_open(cl, s->handle, s->token, &v);
  ck_assert_msg(rc == QDP_ERR_FAILED_PRECONDITION || rc == QDP_ERR_UNIMPLEMENTED, "%s: %s",
                qdp_status_name(rc), qdp_last_error()->msg);
  ck_assert_ptr_null(v);
  ck_assert_msg(strstr(qdp_last_error()->msg, "zero-copy views") ||
                    strstr(qdp_last_error()->msg, "without CUDA"),
                "%s", qdp_last_error()->msg);
  /* Writable views likewise (the write lease is never taken), and a mode of neither kind. */
  rc = qdp_views_open_mode(cl, s->handle, s->token, QDP_VIEWS_WRITE, &v);
  ck_assert_msg(rc == QDP_ERR_FAILED_PRECONDITION || rc == QDP_ERR_UNIMPLEMENTED, "%s: %s",
                qdp_status_name(rc), qdp_last_error()->msg);
  ck_assert_ptr_null(v);
  CK_QDP_STATUS(qdp_views_open_mode(cl, s->handle, s->token, (enum qdp_views_mode)7, &v),
                QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "mode");
  CK_QDP_STATUS(qdp_views_close(cl, s->handle), QDP_ERR_NOT_FOUND);
  CK_QDP_STATUS(qdp_close_view(cl, s->handle, s->token, 12345, NULL), QDP_ERR_NOT_FOUND);
  struct qdp_state_info *d = NULL;
  CK_QDP(qdp_describe(cl, s->handle, s->token, &d));
  ck_assert_uint_eq(d->leases, 0);
  ck_assert_int_eq(d->written, 0);
  ck_assert_uint_eq(d->writer_lease_id, 0);
  ck_assert_str_eq(d->writer, "");
  ck_assert_uint_eq(d->nshards, 4);
  ck_assert_uint_eq(d->shards[3]->first, 3 * AMPS / 4);
  qdp_state_info_free(d);
  CK_QDP(qdp_release(cl, g->handle, g->token, NULL));
  CK_QDP(qdp_release(cl, s->handle, s->token, NULL));
  free(want);
  free(got);
  qdp_state_info_free(g);
  qdp_state_info_free(s);
}
END_TEST

static void *worker_main(void *arg) {
  struct worker *w = arg;
  double x[4];
  for (int k = 0; k < 4; k++) {
    x[k] = 0.01 * (w->id + 1) * (k + 1);
  }
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_ANGLE;
  eo.qubits = 4;
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_INLINE;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.data = x;
  in.data_bytes = sizeof x;
  for (int round = 0; round < 5; round++) {
    struct qdp_state_info *s = NULL;
    if (qdp_encode(cl, &eo, &in, &s) != QDP_OK) {
      snprintf(w->why, sizeof w->why, "encode: %s", qdp_last_error()->msg);
      return NULL;
    }
    double complex got[16], want[16];
    qdp_status rc = qdp_fetch(cl, s->handle, s->token, NULL, got, sizeof got, NULL);
    ref_angle(x, 4, want);
    if (rc != QDP_OK || max_err(got, want, 16) > 1e-15) {
      snprintf(w->why, sizeof w->why, "fetch: %s", rc ? qdp_last_error()->msg : "wrong values");
      qdp_state_info_free(s);
      return NULL;
    }
    /* A refusal whose message carries this thread's own number: the per-thread record must
     * hold this thread's error, not another's. */
    double bad = 1000.0 + w->id;
    struct qdp_encode_opts be = QDP_ENCODE_OPTS_INIT;
    be.encoding = QDP_ENCODING_BASIS;
    be.qubits = 3;
    struct qdp_input bi = QDP_INPUT_INIT;
    bi.kind = QDP_INPUT_INLINE;
    bi.dtype = QDP_DTYPE_FLOAT64;
    bi.data = &bad;
    bi.data_bytes = sizeof bad;
    struct qdp_state_info *none = NULL;
    rc = qdp_encode(cl, &be, &bi, &none);
    char mine[16];
    snprintf(mine, sizeof mine, "%d", 1000 + w->id);
    if (rc != QDP_ERR_INVALID_ARGUMENT || !strstr(qdp_last_error()->msg, mine)) {
      snprintf(w->why, sizeof w->why, "basis %s: %s, '%s'", mine, qdp_status_name(rc),
               qdp_last_error()->msg);
      qdp_state_info_free(s);
      return NULL;
    }
    if (qdp_release(cl, s->handle, s->token, NULL) != QDP_OK) {
      snprintf(w->why, sizeof w->why, "release: %s", qdp_last_error()->msg);
      qdp_state_info_free(s);
      return NULL;
    }
    qdp_state_info_free(s);
  }
  w->ok = 1;
  return NULL;
}

START_TEST(test_32_threads_share_one_client) {
  enum { T = 32 };
  pthread_t th[T];
  struct worker w[T];
  for (int i = 0; i < T; i++) {
    w[i] = (struct worker){i, 0, ""};
    ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
  }
  for (int i = 0; i < T; i++) {
    ck_assert_msg(w[i].ok, "thread %d: %s", i, w[i].why);
  }
}
END_TEST

/* The unary calls of qdp_call, each checked to be answered by its own method, from clients made
 * and destroyed one after another while the fixture's client keeps the connection open: gRPC
 * shares that connection (and the index of method paths its header compression keeps) among
 * every channel of the process to one target, and it outlives each client. A path whose memory
 * went with its client used to send a later client's call as another method (a Kernel answered
 * with a StatusReply): the type of every reply is checked here, and the sanitizer build sees
 * any read of freed memory. */
static int reply_is_of(const char *method, const void *rep, size_t n, char *why, size_t cap) {
  if (strcmp(method, "Status") == 0) {
    Qdp__StatusReply *st = qdp__status_reply__unpack(NULL, n, rep);
    int ok = st && strcmp(st->version, qdp_version_string()) == 0 && st->n_devices == 4;
    snprintf(why, cap, "Status answered with %zu bytes that are no StatusReply of 4 devices", n);
    qdp__status_reply__free_unpacked(st, NULL);
    return ok;
  }
  if (strcmp(method, "Health") == 0) {
    Qdp__HealthReply *h = qdp__health_reply__unpack(NULL, n, rep);
    int ok = h && h->status == QDP__HEALTH_REPLY__SERVING_STATUS__SERVING && n == 2;
    snprintf(why, cap, "Health answered with %zu bytes, not a 2-byte SERVING HealthReply", n);
    qdp__health_reply__free_unpacked(h, NULL);
    return ok;
  }
  /* List of a client that holds nothing: an empty ListReply. */
  snprintf(why, cap, "%s answered with %zu bytes, not an empty ListReply", method, n);
  return n == 0;
}

START_TEST(test_calls_of_clients_made_after_others_ended_reach_their_method) {
  static const char *const methods[] = {"Status", "Health", "List"};
  enum { M = sizeof methods / sizeof methods[0], ROUNDS = 200 };
  void *rep = NULL;
  size_t n = 0;
  CK_QDP(qdp_call(cl, "Health", NULL, 0, -1, &rep, &n)); /* the shared connection is up */
  qdp_free(rep);
  for (int round = 0; round < ROUNDS; round++) {
    struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
    o.client_name = "libqdp-e2e-paths@test:1";
    qdp_client *c = NULL;
    CK_QDP(qdp_client_create(&o, &c));
    for (int k = 0; k < M; k++) {
      const char *m = methods[(round + k) % M];
      CK_QDP(qdp_call(c, m, NULL, 0, -1, &rep, &n));
      char why[160];
      int ok = reply_is_of(m, rep, n, why, sizeof why);
      qdp_free(rep);
      ck_assert_msg(ok, "round %d: %s", round, why);
    }
    qdp_client_destroy(c);
  }
}
END_TEST

/* Sessions: a state made naming one carries it and goes with its close; the ended session's
 * heartbeat and a request naming it are NOT_FOUND and keep nothing; a state made without it
 * stays. */
START_TEST(test_a_sessions_states_end_with_it) {
  char id[QDP_SESSION_ID_LEN];
  CK_QDP(qdp_session_open(cl, 0, "e2e", id));
  ck_assert_int_eq(id[0], 'c');
  ck_assert_uint_eq(strlen(id), QDP_SESSION_ID_LEN - 1);
  double x[2] = {0.3, 0.4};
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_ANGLE;
  eo.qubits = 2;
  eo.session = id;
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_INLINE;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.data = x;
  in.data_bytes = sizeof x;
  struct qdp_state_info *a = NULL, *kept = NULL, *d = NULL;
  CK_QDP(qdp_encode(cl, &eo, &in, &a));
  ck_assert_str_eq(a->session, id);
  eo.session = NULL;
  CK_QDP(qdp_encode(cl, &eo, &in, &kept));
  ck_assert_str_eq(kept->session, "");
  CK_QDP(qdp_session_heartbeat(cl, id));
  uint32_t states = 0;
  uint64_t freed = 0;
  CK_QDP(qdp_session_close(cl, id, &states, &freed));
  ck_assert_uint_eq(states, 1);
  ck_assert_uint_eq(freed, a->bytes);
  CK_QDP_STATUS(qdp_describe(cl, a->handle, a->token, &d), QDP_ERR_NOT_FOUND);
  CK_QDP(qdp_describe(cl, kept->handle, kept->token, &d));
  qdp_state_info_free(d);
  CK_QDP_STATUS(qdp_session_heartbeat(cl, id), QDP_ERR_NOT_FOUND);
  ck_assert_str_eq(qdp_last_error()->field, "session");
  uint32_t before, regions;
  counts(&before, &regions);
  eo.session = id;
  struct qdp_state_info *none = NULL;
  CK_QDP_STATUS(qdp_encode(cl, &eo, &in, &none), QDP_ERR_NOT_FOUND);
  ck_assert_str_eq(qdp_last_error()->field, "session");
  counts(&states, &regions);
  ck_assert_uint_eq(states, before);
  CK_QDP(qdp_release(cl, kept->handle, kept->token, NULL));
  qdp_state_info_free(a);
  qdp_state_info_free(kept);
}
END_TEST

int main(void) {
  Suite *s = suite_create("libqdp-e2e");
  TCase *t = tcase_create("e2e");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_status_lists_four_cpu_devices_and_health_is_serving);
  tcase_add_test(t, test_inline_amplitude_round_trip_and_lifecycle);
  tcase_add_test(t, test_serialized_calls_carry_the_wire_and_its_errors);
  tcase_add_test(t, test_calls_of_clients_made_after_others_ended_reach_their_method);
  tcase_add_test(t, test_server_file_and_shared_memory_inputs);
  tcase_add_test(t, test_fetch_into_a_writable_region_matches_fetch);
  tcase_add_test(t, test_region_info_reports_seals);
  tcase_add_test(t, test_kernel_in_the_reply_and_through_a_region);
  tcase_add_test(t, test_kernel_of_inputs_is_the_direct_sum_in_tiles);
  tcase_add_test(t, test_kernel_of_a_large_matrix_from_a_file_on_the_node);
  tcase_add_test(t, test_kernel_of_refusals);
  tcase_add_test(t, test_probabilities_and_expectations);
  tcase_add_test(t, test_uploads_from_a_buffer_and_a_local_file_stream_in_chunks);
  tcase_add_test(t, test_fetch_npy_and_export_write_the_same_array);
  tcase_add_test(t, test_plan_and_refusals_carry_the_numbers);
  tcase_add_test(t, test_32_threads_share_one_client);
  tcase_add_test(t, test_gather_and_views_on_four_cpu_devices);
  tcase_add_test(t, test_a_sessions_states_end_with_it);
  suite_add_tcase(s, t);
  return qdpt_run_suite(s, CK_NOFORK);
}
