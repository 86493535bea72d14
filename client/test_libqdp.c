/* Unit tests of libqdp without a daemon: the .npy reader (the shared codec as libqdp reports
 * it), local input files, target resolution, client creation, the per-thread error record, and
 * a call that cannot connect. Runs without forking (gRPC threads do not survive fork). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libqdp_int.h"
#include "qdp_dlpack.h"

static char tmpdir[256];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/test_libqdp.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

/* A header exactly as numpy 1.x writes it for np.save(f, np.zeros(5, np.float32)). */
static size_t numpy_header(unsigned char *buf, int major, const char *dict) {
  size_t pre = major == 1 ? 10 : 12;
  size_t n = strlen(dict);
  size_t total = (pre + n + 1 + 63) / 64 * 64;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  size_t hl = total - pre;
  buf[8] = (unsigned char)(hl & 0xff);
  buf[9] = (unsigned char)(hl >> 8);
  if (major != 1) {
    buf[10] = 0;
    buf[11] = 0;
  }
  memcpy(buf + pre, dict, n);
  memset(buf + pre + n, ' ', total - pre - n - 1);
  buf[total - 1] = '\n';
  return total;
}

/* ---- npy ---- */

START_TEST(test_npy_parse_reads_numpy_v1_and_v2_headers) {
  unsigned char buf[256];
  struct qdp__npy d;
  size_t n = numpy_header(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }");
  ck_assert_int_eq(qdp__npy_parse(buf, n, &d), QDP_OK);
  ck_assert_int_eq(d.dtype, QDP_DTYPE_FLOAT32);
  ck_assert_int_eq(d.ndim, 1);
  ck_assert_uint_eq(d.count, 5);
  ck_assert_uint_eq(d.data_offset, 128);
  n = numpy_header(buf, 2, "{\"descr\": \"<i8\", \"shape\": (2, 3), \"fortran_order\": False}");
  ck_assert_int_eq(qdp__npy_parse(buf, n, &d), QDP_OK);
  ck_assert_int_eq(d.dtype, QDP_DTYPE_INT64);
  ck_assert_uint_eq(d.shape[0], 2);
  ck_assert_uint_eq(d.shape[1], 3);
  ck_assert_uint_eq(d.data_offset, n);
}
END_TEST

START_TEST(test_npy_parse_refuses_what_qdp_cannot_read) {
  unsigned char buf[256];
  struct qdp__npy d;
  static const char *const bad[] = {
      "{'descr': '>f8', 'fortran_order': False, 'shape': (5,), }",       /* big-endian */
      "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }",      /* Fortran order */
      "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 4), }",  /* 3-D */
      "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",         /* scalar */
      "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }",       /* bytes */
      "{'descr': '<f8', 'shape': (5,), }",                               /* no fortran_order */
      "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), 'x': 1}", /* unknown key */
      "['descr']",                                                       /* not a dict */
      /* Accepted by libqdp's own reader before the shared codec; the daemon refused them. */
      "{'descr': '=f8', 'fortran_order': False, 'shape': (5,), }",       /* native order */
      "{'descr': '<f8', 'fortran_order': True, 'shape': (5,), }",        /* 1-D Fortran */
      "{'descr': '<f8', 'descr': '<f4', 'fortran_order': False, 'shape': (5,)}", /* repeated */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t n = numpy_header(buf, 1, bad[i]);
    ck_assert_int_eq(qdp__npy_parse(buf, n, &d), QDP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(qdp_last_error()->field, "npy");
    ck_assert_int_eq(qdp_last_error()->remote, 0);
  }
  size_t n = numpy_header(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }");
  ck_assert_int_eq(qdp__npy_parse(buf, n - 5, &d), QDP_ERR_INVALID_ARGUMENT); /* truncated */
  buf[0] = 'X';
  ck_assert_int_eq(qdp__npy_parse(buf, n, &d), QDP_ERR_INVALID_ARGUMENT); /* no magic */
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "not a .npy file"));
}
END_TEST

/* ---- local input files ---- */

START_TEST(test_input_file_npy_gives_shape_dtype_and_data_offset) {
  make_tmpdir();
  unsigned char buf[256 + 6 * 8];
  size_t n = numpy_header(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }");
  double v[6] = {1, 2, 3, 4, 5, 6};
  memcpy(buf + n, v, sizeof v);
  char path[300];
  snprintf(path, sizeof path, "%s/a.npy", tmpdir);
  write_file(path, buf, n + sizeof v);
  int fd = -1;
  struct qdp__npy d;
  ck_assert_int_eq(qdp__input_file_open(path, QDP_DTYPE_UNSPECIFIED, 0, 0, 0, &fd, &d), QDP_OK);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(d.dtype, QDP_DTYPE_FLOAT64);
  ck_assert_uint_eq(d.shape[0], 2);
  ck_assert_uint_eq(d.shape[1], 3);
  ck_assert_uint_eq(d.data_offset, n);
  double back[6];
  ck_assert_int_eq(pread(fd, back, sizeof back, (off_t)d.data_offset), (ssize_t)sizeof back);
  ck_assert_double_eq(back[5], 6.0);
  close(fd);
  /* Reshaped by cols: 6 values as 3 rows of 2. */
  ck_assert_int_eq(qdp__input_file_open(path, QDP_DTYPE_UNSPECIFIED, 0, 2, 0, &fd, &d), QDP_OK);
  ck_assert_uint_eq(d.shape[0], 3);
  ck_assert_uint_eq(d.shape[1], 2);
  close(fd);
  /* 6 values are not 4 rows. */
  ck_assert_int_eq(qdp__input_file_open(path, QDP_DTYPE_UNSPECIFIED, 4, 0, 0, &fd, &d),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.rows");
  ck_assert_int_eq(fd, -1);
  /* The header says float64; asking for float32 is refused. */
  ck_assert_int_eq(qdp__input_file_open(path, QDP_DTYPE_FLOAT32, 0, 0, 0, &fd, &d),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.dtype");
  /* Truncated: the header promises 6 values, 5 follow. */
  write_file(path, buf, n + 5 * 8);
  ck_assert_int_eq(qdp__input_file_open(path, QDP_DTYPE_UNSPECIFIED, 0, 0, 0, &fd, &d),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "truncated"));
  remove_tmpdir();
}
END_TEST

START_TEST(test_input_file_raw_needs_a_dtype_and_whole_values) {
  make_tmpdir();
  char path[300];
  snprintf(path, sizeof path, "%s/raw.bin", tmpdir);
  float v[5] = {1, 2, 3, 4, 5};
  write_file(path, v, sizeof v);
  int fd = -1;
  struct qdp__npy d;
  ck_assert_int_eq(qdp__input_file_open(path, QDP_DTYPE_UNSPECIFIED, 0, 0, 0, &fd, &d),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.dtype");
  ck_assert_int_eq(qdp__input_file_open(path, QDP_DTYPE_FLOAT32, 0, 0, 4, &fd, &d), QDP_OK);
  ck_assert_uint_eq(d.count, 4); /* 20 bytes - 4 of offset */
  ck_assert_uint_eq(d.shape[0], 1);
  ck_assert_uint_eq(d.shape[1], 4);
  ck_assert_uint_eq(d.data_offset, 4);
  close(fd);
  /* 20 bytes are not a whole number of float64 values. */
  ck_assert_int_eq(qdp__input_file_open(path, QDP_DTYPE_FLOAT64, 0, 0, 0, &fd, &d),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(qdp__input_file_open("/nonexistent/x.npy", QDP_DTYPE_FLOAT64, 0, 0, 0, &fd, &d),
                   QDP_ERR_SYSTEM);
  ck_assert_int_eq(qdp_last_error()->cause, ENOENT);
  remove_tmpdir();
}
END_TEST

/* ---- target, client, errors ---- */

START_TEST(test_default_target_follows_the_environment) {
  char buf[512];
  setenv("QDP_TARGET", "127.0.0.1:7777", 1);
  setenv("QDP_SOCKET", "/tmp/s.sock", 1);
  ck_assert_int_eq(qdp_default_target(buf, sizeof buf), QDP_OK);
  ck_assert_str_eq(buf, "127.0.0.1:7777");
  unsetenv("QDP_TARGET");
  ck_assert_int_eq(qdp_default_target(buf, sizeof buf), QDP_OK);
  ck_assert_str_eq(buf, "unix:/tmp/s.sock");
  unsetenv("QDP_SOCKET");
  setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
  ck_assert_int_eq(qdp_default_target(buf, sizeof buf), QDP_OK);
  ck_assert_str_eq(
      buf, geteuid() == 0 ? "unix:/run/qdp/qdpd.sock" : "unix:/run/user/1234/qdp/qdpd.sock");
  ck_assert_int_eq(qdp_default_target(buf, 5), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(buf, "");
}
END_TEST

START_TEST(test_client_create_refuses_an_uninitialised_opts_struct) {
  struct qdp_client_opts o;
  memset(&o, 0, sizeof o);
  qdp_client *c = (qdp_client *)&o;
  ck_assert_int_eq(qdp_client_create(&o, &c), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(c);
  ck_assert_str_eq(qdp_last_error()->field, "struct_size");
  o = (struct qdp_client_opts)QDP_CLIENT_OPTS_INIT;
  o.timeout_ms = -1;
  ck_assert_int_eq(qdp_client_create(&o, &c), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "timeout_ms");
}
END_TEST

START_TEST(test_call_without_daemon_is_unavailable_and_names_the_target) {
  make_tmpdir();
  char target[300];
  snprintf(target, sizeof target, "unix:%s/none.sock", tmpdir);
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.target = target;
  qdp_client *c = NULL;
  ck_assert_int_eq(qdp_client_create(&o, &c), QDP_OK);
  ck_assert_int_eq(qdp_last_error()->code, QDP_OK);
  ck_assert_str_eq(qdp_client_target(c), target);
  qdp_health h = QDP_HEALTH_SERVING;
  ck_assert_int_eq(qdp_get_health(c, &h), QDP_ERR_UNAVAILABLE);
  ck_assert_int_eq(h, QDP_HEALTH_UNKNOWN);
  const struct qdp_errinfo *e = qdp_last_error();
  ck_assert_int_eq(e->remote, 1);
  ck_assert_str_eq(e->code_name, "QDP_ERR_UNAVAILABLE");
  ck_assert_ptr_nonnull(strstr(e->msg, target));
  /* A later successful local step resets the record. */
  char buf[64];
  ck_assert_int_eq(qdp_default_target(buf, sizeof buf), QDP_OK);
  ck_assert_int_eq(qdp_last_error()->code, QDP_OK);
  ck_assert_str_eq(qdp_last_error()->msg, "");
  qdp_client_destroy(c);
  remove_tmpdir();
}
END_TEST

START_TEST(test_calls_check_their_arguments_before_any_rpc) {
  qdp_client *c = NULL;
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.target = "unix:/nonexistent/qdp.sock";
  ck_assert_int_eq(qdp_client_create(&o, &c), QDP_OK);
  char dst[16];
  ck_assert_int_eq(qdp_fetch(c, "h", "t", NULL, NULL, 0, NULL), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "dst");
  ck_assert_int_eq(qdp_fetch(c, "", "t", NULL, dst, sizeof dst, NULL), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "state.handle");
  struct qdp_state_info *s = (struct qdp_state_info *)dst;
  struct qdp_encode_opts eo;
  memset(&eo, 0, sizeof eo);
  struct qdp_input in = QDP_INPUT_INIT;
  ck_assert_int_eq(qdp_encode(c, &eo, &in, &s), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(s);
  ck_assert_str_eq(qdp_last_error()->field, "opts");
  eo = (struct qdp_encode_opts)QDP_ENCODE_OPTS_INIT;
  in.kind = QDP_INPUT_SHM;
  ck_assert_int_eq(qdp_encode(c, &eo, &in, &s), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "input.shm");
  in.kind = QDP_INPUT_LOCAL_FILE;
  in.path = "/nonexistent/in.npy";
  ck_assert_int_eq(qdp_encode(c, &eo, &in, &s), QDP_ERR_SYSTEM);
  ck_assert_int_eq(qdp_last_error()->remote, 0);
  ck_assert_int_eq(qdp_fetch_npy(c, "h", "t", NULL, "", 0), QDP_ERR_INVALID_ARGUMENT);
  struct qdp_region_info ri = QDP_REGION_INFO_INIT;
  ck_assert_int_eq(qdp_region_register_flags(c, "/x", 0, -1, 8u, &ri), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(qdp_last_error()->field, "flags");
  ck_assert_ptr_nonnull(strstr(qdp_last_error()->msg, "0x8"));
  qdp_client_destroy(c);
  /* Destructors take NULL. */
  qdp_client_destroy(NULL);
  qdp_state_info_free(NULL);
  qdp_plan_info_free(NULL);
  qdp_state_list_free(NULL);
  qdp_server_status_free(NULL);
  qdp_free(NULL);
}
END_TEST

struct thread_arg {
  int fail;
  qdp_status got;
  char field[64];
};

static void *thread_main(void *p) {
  struct thread_arg *a = p;
  char buf[8];
  for (int i = 0; i < 1000; i++) {
    /* One thread fails (buffer too small), the other succeeds, over and over. */
    qdp_status rc = qdp_default_target(buf, a->fail ? 2 : sizeof buf);
    (void)rc;
  }
  a->got = qdp_last_error()->code;
  snprintf(a->field, sizeof a->field, "%s", qdp_last_error()->field);
  return NULL;
}

START_TEST(test_last_error_is_kept_per_thread) {
  setenv("QDP_TARGET", "a:1", 1);
  struct thread_arg a = {1, QDP_OK, ""}, b = {0, QDP_ERR_UNKNOWN, "x"};
  pthread_t ta, tb;
  ck_assert_int_eq(pthread_create(&ta, NULL, thread_main, &a), 0);
  ck_assert_int_eq(pthread_create(&tb, NULL, thread_main, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  ck_assert_int_eq(a.got, QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(a.field, "target");
  ck_assert_int_eq(b.got, QDP_OK);
  ck_assert_str_eq(b.field, "");
  unsetenv("QDP_TARGET");
}
END_TEST

START_TEST(test_versions_and_names) {
  ck_assert_uint_eq(qdp_version(), QDP_VERSION_HEX);
  ck_assert_uint_eq(qdp_version(), 0x000100);
  ck_assert_str_eq(qdp_version_string(), "0.1.0");
  for (int p = QDP_POLICY_AUTO; p <= QDP_POLICY_BATCH; p++) {
    ck_assert_int_eq(qdp_policy_from_name(qdp_policy_name((qdp_policy)p)), p);
  }
  ck_assert_str_eq(qdp_policy_name(QDP_POLICY_CAPACITY), "capacity");
  ck_assert_ptr_null(qdp_policy_name((qdp_policy)6));
  ck_assert_int_eq(qdp_policy_from_name("fastest"), -1);
}
END_TEST

/* Views as qdp_views_open leaves them, built by hand: two shards of a 3-qubit complex64 state on
 * this process's GPUs 0 and 1 (fake device pointers: nothing dereferences them). A DLPack tensor
 * must carry each shard's own device id, not 0 for all (a bug that hit an earlier library). */
START_TEST(test_dlpack_tensors_carry_each_shards_device_shape_and_dtype) {
  struct qdp_shard sh[2] = {{.struct_size = sizeof sh[0], .first = 0, .count = 4, .rows = 1},
                            {.struct_size = sizeof sh[1], .first = 4, .count = 4, .rows = 1}};
  struct qdp_shard *shp[2] = {&sh[0], &sh[1]};
  struct qdp_state_info st = {.struct_size = sizeof st,
                              .qubits = 3,
                              .batch = 1,
                              .dtype = QDP_DTYPE_COMPLEX64,
                              .nshards = 2,
                              .shards = shp};
  char mem[2][64];
  struct qdp_view views[2] = {{sizeof views[0], mem[0], 0, &sh[0]},
                              {sizeof views[1], mem[1] + 16, 1, &sh[1]}};
  struct qdp_views v = {sizeof v, &st, 7, 2, views};
  for (size_t i = 0; i < 2; i++) {
    struct DLManagedTensor *t = NULL;
    ck_assert_int_eq(qdp_view_dlpack(&v, i, &t), QDP_OK);
    ck_assert_int_eq(t->dl_tensor.device.device_type, kDLCUDA);
    ck_assert_int_eq(t->dl_tensor.device.device_id, (int)i);
    ck_assert_ptr_eq(t->dl_tensor.data, views[i].data);
    ck_assert_int_eq(t->dl_tensor.ndim, 2);
    ck_assert_int_eq(t->dl_tensor.shape[0], 1);
    ck_assert_int_eq(t->dl_tensor.shape[1], 4);
    ck_assert_ptr_null(t->dl_tensor.strides);
    ck_assert_uint_eq(t->dl_tensor.byte_offset, 0);
    ck_assert_uint_eq(t->dl_tensor.dtype.code, 5);
    ck_assert_uint_eq(t->dl_tensor.dtype.bits, 64);
    ck_assert_uint_eq(t->dl_tensor.dtype.lanes, 1);
    t->deleter(t);
  }
  /* complex128 and a batch shard of 3 rows. */
  st.dtype = QDP_DTYPE_COMPLEX128;
  sh[1].rows = 3;
  struct DLManagedTensor *t = NULL;
  ck_assert_int_eq(qdp_view_dlpack(&v, 1, &t), QDP_OK);
  ck_assert_uint_eq(t->dl_tensor.dtype.bits, 128);
  ck_assert_int_eq(t->dl_tensor.shape[0], 3);
  t->deleter(t);
  ck_assert_int_eq(qdp_view_dlpack(&v, 2, &t), QDP_ERR_OUT_OF_RANGE);
  ck_assert_int_eq(qdp_view_dlpack(NULL, 0, &t), QDP_ERR_INVALID_ARGUMENT);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("libqdp");
  TCase *t = tcase_create("npy");
  tcase_add_test(t, test_npy_parse_reads_numpy_v1_and_v2_headers);
  tcase_add_test(t, test_npy_parse_refuses_what_qdp_cannot_read);
  suite_add_tcase(s, t);
  t = tcase_create("input_file");
  tcase_add_test(t, test_input_file_npy_gives_shape_dtype_and_data_offset);
  tcase_add_test(t, test_input_file_raw_needs_a_dtype_and_whole_values);
  suite_add_tcase(s, t);
  t = tcase_create("client");
  tcase_add_test(t, test_default_target_follows_the_environment);
  tcase_add_test(t, test_client_create_refuses_an_uninitialised_opts_struct);
  tcase_add_test(t, test_call_without_daemon_is_unavailable_and_names_the_target);
  tcase_add_test(t, test_calls_check_their_arguments_before_any_rpc);
  tcase_add_test(t, test_last_error_is_kept_per_thread);
  tcase_add_test(t, test_versions_and_names);
  tcase_add_test(t, test_dlpack_tensors_carry_each_shards_device_shape_and_dtype);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
