/* Unit tests of daemon/config.{c,h} (the option table, parsers and precedence) and of the logger's
 * line format (daemon/log.{c,h}). The deployed deploy/qdpd.conf is checked against the table: the
 * test takes its path from QDP_DEPLOY_CONF. */
#include <check.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "config.h"
#include "log.h"

/* ---- parsers ------------------------------------------------------------------------------------
 */

START_TEST(test_bytes_accepts_decimal_and_binary_suffixes) {
  uint64_t v = 0;
  ck_assert_int_eq(config_parse_bytes("0", 0, UINT64_MAX, "x", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 0);
  ck_assert_int_eq(config_parse_bytes("4096", 0, UINT64_MAX, "x", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 4096);
  ck_assert_int_eq(config_parse_bytes("3K", 0, UINT64_MAX, "x", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 3000);
  ck_assert_int_eq(config_parse_bytes("3Ki", 0, UINT64_MAX, "x", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 3072);
  ck_assert_int_eq(config_parse_bytes("2M", 0, UINT64_MAX, "x", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 2000000);
  ck_assert_int_eq(config_parse_bytes("2MiB", 0, UINT64_MAX, "x", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 2097152);
  ck_assert_int_eq(config_parse_bytes("5G", 0, UINT64_MAX, "x", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 5000000000ull);
  ck_assert_int_eq(config_parse_bytes("5Gi", 0, UINT64_MAX, "x", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 5368709120ull);
  ck_assert_int_eq(config_parse_bytes("7 Ti", 0, UINT64_MAX, "x", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 7696581394432ull);
  ck_assert_int_eq(config_parse_bytes("16384Pi", 0, UINT64_MAX, "x", &v, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_bytes_refuses_overflow_sign_garbage_and_range) {
  uint64_t v = 77;
  struct qdp_error e = QDP_ERROR_INIT;
  /* 2^64 = 18446744073709551616: one past the largest uint64. */
  ck_assert_int_eq(config_parse_bytes("18446744073709551616", 0, UINT64_MAX, "x", &v, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "64 bits"));
  ck_assert_int_eq(config_parse_bytes("18446744073709551615", 0, UINT64_MAX, "x", &v, NULL),
                   QDP_OK);
  ck_assert_uint_eq(v, UINT64_MAX);
  /* 2^54 Ki = 2^64: the multiplication overflows. */
  ck_assert_int_eq(config_parse_bytes("18014398509481984Ki", 0, UINT64_MAX, "x", &v, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_bytes("-1", 0, UINT64_MAX, "x", &v, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_bytes("+1", 0, UINT64_MAX, "x", &v, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_bytes(" 1", 0, UINT64_MAX, "x", &v, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_bytes("0x10", 0, UINT64_MAX, "x", &v, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_bytes("1.5G", 0, UINT64_MAX, "x", &v, NULL),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_bytes("", 0, UINT64_MAX, "x", &v, NULL), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_bytes("1Q", 0, UINT64_MAX, "x", &v, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "'Q'"));
  ck_assert_int_eq(config_parse_bytes("5Ki", 0, 4096, "limit", &v, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "limit");
  ck_assert_ptr_nonnull(strstr(e.msg, "5120"));
  ck_assert_ptr_nonnull(strstr(e.msg, "4096"));
  ck_assert_uint_eq(v, UINT64_MAX); /* untouched by the failures after the success above */
}
END_TEST

START_TEST(test_u64_seconds_double_bool_and_level) {
  uint64_t v;
  ck_assert_int_eq(config_parse_u64("60", 1, 60, "q", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 60);
  ck_assert_int_eq(config_parse_u64("61", 1, 60, "q", &v, NULL), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_u64("0", 1, 60, "q", &v, NULL), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_u64("12a", 0, 60, "q", &v, NULL), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_seconds("90", 0, UINT64_MAX, "t", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 90);
  ck_assert_int_eq(config_parse_seconds("2m", 0, UINT64_MAX, "t", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 120);
  ck_assert_int_eq(config_parse_seconds("3h", 0, UINT64_MAX, "t", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 10800);
  ck_assert_int_eq(config_parse_seconds("2d", 0, UINT64_MAX, "t", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 172800);
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(config_parse_seconds("2w", 0, UINT64_MAX, "t", &v, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.msg, "t = '2w' has an unknown time suffix 'w' (use s, m, h or d)");
  /* Blanks may stand before a duration's suffix as before a size's. */
  ck_assert_int_eq(config_parse_seconds("30 s", 0, UINT64_MAX, "t", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 30);
  ck_assert_int_eq(config_parse_seconds("5 min", 0, UINT64_MAX, "t", &v, NULL), QDP_OK);
  ck_assert_uint_eq(v, 300);
  ck_assert_int_eq(config_parse_seconds("213503982334602d", 0, UINT64_MAX, "t", &v, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.msg, "t = '213503982334602d' does not fit 64 bits");
  double d;
  ck_assert_int_eq(config_parse_double("0.25", 0.01, 1.0, "f", &d, NULL), QDP_OK);
  ck_assert_double_eq_tol(d, 0.25, 1e-15);
  ck_assert_int_eq(config_parse_double("1.5", 0.01, 1.0, "f", &d, NULL), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_double("nan", 0.01, 1.0, "f", &d, NULL), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_parse_double("0.5x", 0.01, 1.0, "f", &d, NULL), QDP_ERR_INVALID_ARGUMENT);
  bool b = false;
  ck_assert_int_eq(config_parse_bool("On", "b", &b, NULL), QDP_OK);
  ck_assert(b);
  ck_assert_int_eq(config_parse_bool("no", "b", &b, NULL), QDP_OK);
  ck_assert(!b);
  ck_assert_int_eq(config_parse_bool("maybe", "b", &b, NULL), QDP_ERR_INVALID_ARGUMENT);
  int l = 0;
  ck_assert_int_eq(config_parse_level("warning", "l", &l, NULL), QDP_OK);
  ck_assert_int_eq(l, 4);
  ck_assert_int_eq(config_parse_level("DEBUG", "l", &l, NULL), QDP_OK);
  ck_assert_int_eq(l, 7);
  ck_assert_int_eq(config_parse_level("8", "l", &l, NULL), QDP_ERR_INVALID_ARGUMENT);
}
END_TEST

/* ---- the table ----------------------------------------------------------------------------------
 */

START_TEST(test_table_defaults_parse_and_names_are_unique) {
  size_t n = config_option_count();
  ck_assert_uint_ge(n, 20);
  static const char *required[] = {
      "config",
      "socket",
      "tcp",
      "tcp_token",
      "devices",
      "device_budget",
      "mem_fraction",
      "store_budget",
      "client_budget",
      "max_states",
      "max_client_states",
      "default_ttl",
      "max_ttl",
      "max_qubits",
      "max_batch",
      "max_message_bytes",
      "max_upload_bytes",
      "workers",
      "log_level",
      "watchdog",
  };
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    ck_assert_msg(config_find(required[i]) != NULL, "option %s missing", required[i]);
  }
  struct config c;
  config_defaults(&c);
  for (size_t i = 0; i < n; i++) {
    const struct config_option *o = config_option_at(i);
    struct config scratch;
    config_defaults(&scratch);
    struct qdp_error e = QDP_ERROR_INIT;
    CK_OK_AT(config_set(&scratch, o->name, o->def, CONFIG_SRC_FILE, NULL, &e), e,
             "default of %s does not parse", o->name);
    ck_assert_ptr_nonnull(o->doc);
    ck_assert_uint_gt(strlen(o->doc), 10);
    for (size_t j = i + 1; j < n; j++) {
      ck_assert_str_ne(o->name, config_option_at(j)->name);
    }
  }
  /* A few defaults by value, so a changed table is a deliberate change. */
  ck_assert_str_eq(c.devices, "auto");
  ck_assert_double_eq_tol(c.mem_fraction, 0.9, 1e-15);
  ck_assert_uint_eq(c.max_message_bytes, 64ull << 20);
  ck_assert_uint_eq(c.fetch_chunk, 1ull << 20);
  ck_assert_int_eq(c.log_level, 6);
  ck_assert(c.watchdog);
  ck_assert(!c.tcp_node_paths);
  ck_assert_int_eq(config_check(&c, NULL), QDP_OK);
  ck_assert_ptr_null(config_find("no_such_option"));
  ck_assert_ptr_eq(config_find("max-qubits"), config_find("max_qubits"));
}
END_TEST

/* ---- sources and precedence ---------------------------------------------------------------------
 */

START_TEST(test_file_parser_reads_keys_comments_and_quotes) {
  struct config c;
  config_defaults(&c);
  const char *text =
      "# a comment\n"
      "\n"
      "   max_qubits   =  12  \n"
      "devices = \"cpu:3\"\n"
      "store_budget=2Gi\n"
      "\t# indented comment\n"
      "log_level = debug";
  struct qdp_error e = QDP_ERROR_INIT;
  ck_assert_int_eq(config_parse_text(&c, text, strlen(text), "t.conf", &e), QDP_OK);
  ck_assert_uint_eq(c.max_qubits, 12);
  ck_assert_str_eq(c.devices, "cpu:3");
  ck_assert_uint_eq(c.store_budget, 2147483648ull);
  ck_assert_int_eq(c.log_level, 7);
  size_t qi = (size_t)(config_find("max_qubits") - config_option_at(0));
  ck_assert_int_eq(c.src[qi], CONFIG_SRC_FILE);
  ck_assert_str_eq(c.origin[qi], "t.conf:3");
}
END_TEST

START_TEST(test_file_parser_names_file_line_and_option_on_error) {
  struct config c;
  config_defaults(&c);
  struct qdp_error e = QDP_ERROR_INIT;
  const char *bad_key = "max_qubits = 3\nmax_cubits = 4\n";
  ck_assert_int_eq(config_parse_text(&c, bad_key, strlen(bad_key), "q.conf", &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "q.conf:2"));
  ck_assert_ptr_nonnull(strstr(e.msg, "max_cubits"));
  const char *no_eq = "\n\nworkers 4\n";
  ck_assert_int_eq(config_parse_text(&c, no_eq, strlen(no_eq), "q.conf", &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "q.conf:3"));
  const char *range = "workers = 0\n";
  ck_assert_int_eq(config_parse_text(&c, range, strlen(range), "q.conf", &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "workers");
  ck_assert_ptr_nonnull(strstr(e.msg, "q.conf:1"));
}
END_TEST

static char tmpdir[64];

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

START_TEST(test_precedence_is_argument_over_environment_over_file_over_default) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/qdp-config-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  char path[128];
  snprintf(path, sizeof path, "%s/qdpd.conf", tmpdir);
  write_file(path, "workers = 3\nmax_qubits = 20\nmax_batch = 100\n");
  char cfg_arg[160];
  snprintf(cfg_arg, sizeof cfg_arg, "--config=%s", path);
  char *argv[] = {"qdpd", cfg_arg, "--max-qubits", "22", "--watchdog", "--tcp_node_paths",
                  "no",   NULL};
  char *envp[] = {"PATH=/bin", "QDP_MAX_QUBITS=21", "QDP_MAX_BATCH=200", "QDP_TOKEN=s3cret", NULL};
  struct config c;
  enum config_action act = CONFIG_HELP;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(config_load(&c, 7, argv, envp, &act, &e), e);
  ck_assert_int_eq(act, CONFIG_RUN);
  ck_assert_uint_eq(c.workers, 3);         /* file */
  ck_assert_uint_eq(c.max_batch, 200);     /* environment over file */
  ck_assert_uint_eq(c.max_qubits, 22);     /* argument over environment */
  ck_assert_str_eq(c.tcp_token, "s3cret"); /* the QDP_TOKEN alias */
  ck_assert(c.watchdog);
  ck_assert(!c.tcp_node_paths);
  ck_assert_uint_eq(c.max_states, 4096); /* default */
  size_t wi = (size_t)(config_find("workers") - config_option_at(0));
  size_t bi = (size_t)(config_find("max_batch") - config_option_at(0));
  size_t qi = (size_t)(config_find("max_qubits") - config_option_at(0));
  size_t si = (size_t)(config_find("max_states") - config_option_at(0));
  ck_assert_int_eq(c.src[wi], CONFIG_SRC_FILE);
  ck_assert_int_eq(c.src[bi], CONFIG_SRC_ENV);
  ck_assert_int_eq(c.src[qi], CONFIG_SRC_ARG);
  ck_assert_int_eq(c.src[si], CONFIG_SRC_DEFAULT);

  /* --print-config shows each value with its source, and masks the token. */
  char out[160];
  snprintf(out, sizeof out, "%s/print.txt", tmpdir);
  FILE *f = fopen(out, "w+");
  ck_assert_ptr_nonnull(f);
  config_print(&c, f);
  rewind(f);
  char buf[16384];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "workers = 3"));
  ck_assert_ptr_nonnull(strstr(buf, "max_qubits = 22"));
  ck_assert_ptr_nonnull(strstr(buf, "# command line"));
  ck_assert_ptr_nonnull(strstr(buf, "# environment QDP_MAX_BATCH"));
  ck_assert_ptr_nonnull(strstr(buf, "qdpd.conf:1"));
  ck_assert_ptr_null(strstr(buf, "s3cret"));
  unlink(out);

  /* A --config that does not exist is an error; the default path that does not exist is not. */
  char *argv2[] = {"qdpd", "--config", "/nonexistent/qdpd.conf", NULL};
  ck_assert_int_eq(config_load(&c, 3, argv2, envp, &act, &e), QDP_ERR_NOT_FOUND);
  ck_assert_ptr_nonnull(strstr(e.msg, "/nonexistent/qdpd.conf"));
  unlink(path);
  rmdir(tmpdir);
}
END_TEST

START_TEST(test_arguments_help_version_and_errors) {
  struct config c;
  config_defaults(&c);
  enum config_action act;
  char *a1[] = {"qdpd", "--help", NULL};
  ck_assert_int_eq(config_apply_args(&c, 2, a1, &act, NULL), QDP_OK);
  ck_assert_int_eq(act, CONFIG_HELP);
  char *a2[] = {"qdpd", "--print-config", "--workers=9", NULL};
  ck_assert_int_eq(config_apply_args(&c, 3, a2, &act, NULL), QDP_OK);
  ck_assert_int_eq(act, CONFIG_PRINT);
  ck_assert_uint_eq(c.workers, 9);
  struct qdp_error e = QDP_ERROR_INIT;
  char *a3[] = {"qdpd", "--workers", NULL};
  ck_assert_int_eq(config_apply_args(&c, 2, a3, &act, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "needs a value"));
  char *a4[] = {"qdpd", "stray", NULL};
  ck_assert_int_eq(config_apply_args(&c, 2, a4, &act, &e), QDP_ERR_INVALID_ARGUMENT);
  char *a5[] = {"qdpd", "--bogus=1", NULL};
  ck_assert_int_eq(config_apply_args(&c, 2, a5, &act, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "--bogus"));
}
END_TEST

START_TEST(test_socket_mode_is_octal_permission_bits) {
  struct config c;
  struct qdp_error e = QDP_ERROR_INIT;
  config_defaults(&c);
  ck_assert_uint_eq(c.socket_mode, 0660);
  ck_assert_int_eq(config_set(&c, "socket_mode", "0600", CONFIG_SRC_ARG, NULL, &e), QDP_OK);
  ck_assert_uint_eq(c.socket_mode, 0600);
  char buf[32];
  config_format_value(&c, config_find("socket_mode"), false, buf, sizeof buf);
  ck_assert_str_eq(buf, "0600");
  ck_assert_int_eq(config_set(&c, "socket_mode", "0680", CONFIG_SRC_ARG, NULL, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(e.msg, "octal"));
  ck_assert_int_eq(config_set(&c, "socket_mode", "01777", CONFIG_SRC_ARG, NULL, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(config_set(&c, "socket_mode", "", CONFIG_SRC_ARG, NULL, &e),
                   QDP_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(c.socket_mode, 0600);
}
END_TEST

START_TEST(test_check_refuses_contradictions) {
  struct config c;
  struct qdp_error e = QDP_ERROR_INIT;
  config_defaults(&c);
  c.default_ttl = 100;
  c.max_ttl = 50;
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "default_ttl");
  config_defaults(&c);
  snprintf(c.tcp, sizeof c.tcp, "localhost");
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "tcp");
  snprintf(c.tcp, sizeof c.tcp, "127.0.0.1:65536");
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  snprintf(c.tcp, sizeof c.tcp, "[::1]:0");
  /* TCP callers are the principals of their tokens: TCP without any is refused. */
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "tcp");
  snprintf(c.tcp_token, sizeof c.tcp_token, "0123456789abcdef");
  /* With a token, still neither TLS nor the operator's word for clear text: refused, and the
   * message names both ways out. */
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "tcp");
  ck_assert_ptr_nonnull(strstr(e.msg, "tcp_tls_cert"));
  ck_assert_ptr_nonnull(strstr(e.msg, "tcp_plaintext = yes"));
  c.tcp_plaintext = true;
  ck_assert_int_eq(config_check(&c, &e), QDP_OK);
  /* TLS: certificate and key together, never with tcp_plaintext. */
  snprintf(c.tcp_tls_cert, sizeof c.tcp_tls_cert, "/etc/qdp/server.pem");
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "tcp_tls_key");
  snprintf(c.tcp_tls_key, sizeof c.tcp_tls_key, "/etc/qdp/server.key");
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "tcp_plaintext");
  c.tcp_plaintext = false;
  CK_OK(config_check(&c, &e), e);
  /* mTLS alone identifies callers: no token needed. */
  c.tcp_token[0] = '\0';
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "tcp");
  snprintf(c.tcp_tls_client_ca, sizeof c.tcp_tls_client_ca, "ca.pem");
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT); /* not absolute */
  ck_assert_str_eq(e.field, "tcp_tls_client_ca");
  snprintf(c.tcp_tls_client_ca, sizeof c.tcp_tls_client_ca, "/etc/qdp/ca.pem");
  CK_OK(config_check(&c, &e), e);
  c.tcp_tls_cert[0] = c.tcp_tls_key[0] = '\0';
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "tcp_tls_client_ca");
  config_defaults(&c);
  snprintf(c.tcp_tls_cert, sizeof c.tcp_tls_cert, "/etc/qdp/server.pem");
  snprintf(c.tcp_tls_key, sizeof c.tcp_tls_key, "/etc/qdp/server.key");
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT); /* TLS without tcp */
  ck_assert_str_eq(e.field, "tcp_tls_cert");
  config_defaults(&c);
  c.client_upload_budget = c.upload_budget + 1;
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "client_upload_budget");
  config_defaults(&c);
  c.fetch_chunk = c.max_message_bytes;
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "fetch_chunk");
  config_defaults(&c);
  snprintf(c.socket, sizeof c.socket, "relative.sock");
  ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "socket");
}
END_TEST

/* log_subsys names subsystems that exist: a name that matches none would hide every info and
 * debug line, which nothing else would say. */
START_TEST(test_check_refuses_a_log_subsystem_that_does_not_exist) {
  static const char *const good[] = {"", "transport", "world", "rpc,transport", "main,grpc"};
  static const struct {
    const char *list, *bad;
  } bad[] = {{"plan", "'plan'"}, {"rpc,store", "'store'"}, {"rpc, world", "' world'"},
             {"rpc,", "''"},     {",rpc", "''"},           {"transports", "'transports'"}};
  struct config c;
  struct qdp_error e = QDP_ERROR_INIT;
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    config_defaults(&c);
    snprintf(c.log_subsys, sizeof c.log_subsys, "%s", good[i]);
    CK_OK(config_check(&c, &e), e);
  }
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    config_defaults(&c);
    snprintf(c.log_subsys, sizeof c.log_subsys, "%s", bad[i].list);
    ck_assert_int_eq(config_check(&c, &e), QDP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(e.field, "log_subsys");
    char names[64];
    snprintf(names, sizeof names, "names %s, which is no subsystem", bad[i].bad);
    ck_assert_msg(strstr(e.msg, names) && strstr(e.msg, "transport"), "%s: %s", bad[i].list, e.msg);
  }
  /* The same through the environment, as a deployment sets it. */
  char *env[] = {"QDP_LOG_SUBSYS=plan", NULL};
  char *argv[] = {"qdpd", "--config", "", NULL};
  enum config_action act;
  ck_assert_int_eq(config_load(&c, 3, argv, env, &act, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "log_subsys");
}
END_TEST

/* deploy/qdpd.conf names every option of the table (set, or as a commented default) with the
 * table's default, names nothing else, and parses once uncommented. */
START_TEST(test_deployed_conf_documents_every_option_with_its_default) {
  const char *path = getenv("QDP_DEPLOY_CONF");
  ck_assert_msg(path != NULL, "QDP_DEPLOY_CONF is not set");
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  static char text[65536];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = '\0';
  size_t n = config_option_count();
  int seen[CONFIG_MAX_OPTIONS] = {0};
  /* Every line that looks like `[# ]key = value` with a known-looking key. */
  static char uncommented[65536];
  size_t ulen = 0;
  for (char *line = text, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) {
      *next++ = '\0';
    }
    char *p = line;
    bool commented = false;
    if (p[0] == '#' && p[1] == ' ' && p[2] != ' ' && strstr(p, " = ")) {
      p += 2;
      commented = true;
    }
    char key[64];
    char val[300];
    if (sscanf(p, "%63[a-z_] = %299[^\n]", key, val) != 2) {
      continue;
    }
    const struct config_option *o = config_find(key);
    if (!o && commented) {
      continue; /* prose that happens to contain " = " */
    }
    ck_assert_msg(o != NULL, "qdpd.conf sets unknown option '%s'", key);
    size_t i = (size_t)(o - config_option_at(0));
    seen[i]++;
    if (commented) {
      /* The commented default is the table's default. */
      const char *v = val;
      char unq[300];
      size_t vl = strlen(v);
      if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') {
        snprintf(unq, sizeof unq, "%.*s", (int)(vl - 2), v + 1);
        v = unq;
      }
      ck_assert_msg(strcmp(v, o->def) == 0, "qdpd.conf shows %s = '%s', the table says '%s'", key,
                    v, o->def);
    }
    if (strcmp(key, "config") != 0) {
      ulen += (size_t)snprintf(uncommented + ulen, sizeof uncommented - ulen, "%s\n", p);
    }
  }
  for (size_t i = 0; i < n; i++) {
    ck_assert_msg(seen[i] >= 1, "qdpd.conf does not document option '%s'",
                  config_option_at(i)->name);
  }
  struct config c;
  config_defaults(&c);
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(config_parse_text(&c, uncommented, ulen, "qdpd.conf", &e), e);
  ck_assert_int_eq(config_check(&c, NULL), QDP_OK);
}
END_TEST

/* ---- log ----------------------------------------------------------------------------------------
 */

static size_t read_log(int fd, char *buf, size_t cap) {
  lseek(fd, 0, SEEK_SET);
  ssize_t n = read(fd, buf, cap - 1);
  ck_assert_int_ge(n, 0);
  buf[n] = '\0';
  return (size_t)n;
}

/* The logger writing into a fresh unlinked file at level info; its descriptor. */
static int log_to_temp_file(void) {
  char path[] = "/tmp/qdp-log-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  unlink(path);
  log_init("qdpd");
  log_set_fd(fd);
  log_set_level(LOG_LEVEL_INFO);
  return fd;
}

START_TEST(test_log_formats_journal_and_timestamp_lines_and_filters) {
  int fd = log_to_temp_file();
  log_set_rank(1);
  log_set_journal(1);
  log_write(LOG_LEVEL_WARNING, "transport", "cuda:3", "peer access %d->%d unavailable", 3, 5);
  log_write(LOG_LEVEL_DEBUG, "rpc", NULL, "hidden at info");
  char buf[4096];
  read_log(fd, buf, sizeof buf);
  ck_assert_str_eq(buf, "<4>qdpd r1 cuda:3 transport: peer access 3->5 unavailable\n");

  ck_assert_int_eq(ftruncate(fd, 0), 0);
  lseek(fd, 0, SEEK_SET);
  log_set_journal(0);
  log_set_rank(-1);
  log_write(LOG_LEVEL_ERR, "rpc", NULL, "two\nlines");
  read_log(fd, buf, sizeof buf);
  /* 2025-01-31T12:00:00.123Z err qdpd rpc: two lines */
  ck_assert_uint_eq(strlen(buf), 24 + strlen(" err qdpd rpc: two lines\n"));
  ck_assert_int_eq(buf[4], '-');
  ck_assert_int_eq(buf[10], 'T');
  ck_assert_int_eq(buf[23], 'Z');
  ck_assert_str_eq(buf + 24, " err qdpd rpc: two lines\n");

  ck_assert_int_eq(ftruncate(fd, 0), 0);
  lseek(fd, 0, SEEK_SET);
  log_set_journal(1);
  log_set_level(LOG_LEVEL_DEBUG);
  log_set_subsys("world,transport");
  log_write(LOG_LEVEL_DEBUG, "rpc", NULL, "filtered out");
  log_write(LOG_LEVEL_DEBUG, "transport", NULL, "kept");
  log_write(LOG_LEVEL_WARNING, "rpc", NULL, "warnings always show");
  read_log(fd, buf, sizeof buf);
  ck_assert_str_eq(buf, "<7>qdpd transport: kept\n<4>qdpd rpc: warnings always show\n");
  log_set_subsys(NULL);
  log_set_fd(2);
  log_set_journal(-1);
  close(fd);
}
END_TEST

START_TEST(test_log_json_lines_are_one_object_each_with_every_field_escaped) {
  int fd = log_to_temp_file();
  log_set_rank(2);
  log_set_journal(1); /* json wins over the journal's prefix */
  log_set_format(LOG_FORMAT_JSON);
  log_write(LOG_LEVEL_WARNING, "rpc", "cuda:1", "a \"quoted\" \\ path\nand\ta tab %d", 7);
  log_set_rank(-1);
  log_write(LOG_LEVEL_INFO, NULL, NULL, "plain");
  char buf[4096];
  read_log(fd, buf, sizeof buf);
  char *second = strchr(buf, '\n');
  ck_assert_ptr_nonnull(second);
  *second++ = '\0';
  /* {"ts":"2025-01-31T12:00:00.123Z","level":... */
  ck_assert_int_eq(strncmp(buf, "{\"ts\":\"", 7), 0);
  ck_assert_int_eq(buf[7 + 23], 'Z');
  ck_assert_str_eq(buf + 7 + 24,
                   "\",\"level\":\"warning\",\"ident\":\"qdpd\",\"rank\":2,"
                   "\"device\":\"cuda:1\",\"subsys\":\"rpc\","
                   "\"msg\":\"a \\\"quoted\\\" \\\\ path\\u000aand\\u0009a tab 7\"}");
  ck_assert_str_eq(second + 7 + 24,
                   "\",\"level\":\"info\",\"ident\":\"qdpd\",\"msg\":\"plain\"}\n");
  /* A message longer than a line is cut inside its string: the object still closes. */
  ck_assert_int_eq(ftruncate(fd, 0), 0);
  lseek(fd, 0, SEEK_SET);
  char big[3000];
  memset(big, '"', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  log_write(LOG_LEVEL_ERR, "rpc", NULL, "%s", big);
  size_t n = read_log(fd, buf, sizeof buf);
  ck_assert_uint_le(n, 2048);
  ck_assert_str_eq(buf + n - 3, "\"}\n");
  ck_assert_ptr_eq(strchr(buf, '\n'), buf + n - 1); /* one line */
  log_set_format(LOG_FORMAT_TEXT);
  log_set_fd(2);
  log_set_journal(-1);
  close(fd);

  struct qdp_error e = QDP_ERROR_INIT;
  int f = -1;
  ck_assert_int_eq(config_parse_log_format("JSON", "log_format", &f, &e), QDP_OK);
  ck_assert_int_eq(f, LOG_FORMAT_JSON);
  ck_assert_int_eq(config_parse_log_format("text", "log_format", &f, &e), QDP_OK);
  ck_assert_int_eq(f, LOG_FORMAT_TEXT);
  ck_assert_int_eq(config_parse_log_format("xml", "log_format", &f, &e), QDP_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(e.field, "log_format");
  ck_assert_ptr_nonnull(strstr(e.msg, "text or json"));
}
END_TEST

START_TEST(test_log_fields_go_to_the_journal_socket_as_fields_and_into_json) {
  char dir[] = "/tmp/qdp-journal-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof path, "%.40s/socket", dir);
  int sock = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  ck_assert_int_eq(bind(sock, (struct sockaddr *)&sa, sizeof sa), 0);
  int fd = log_to_temp_file();
  log_set_rank(1);
  log_set_journal(1);
  log_set_journal_socket(path);
  const struct log_field f[] = {{"QDP_METHOD", "Encode"},
                                {"QDP_STATUS", "RESOURCE_EXHAUSTED"},
                                {"QDP_CLIENT", "a\nb"},
                                {"QDP_STATE", NULL}}; /* no value: left out */
  log_fields(LOG_LEVEL_ERR, "rpc", "cuda:0", f, 4, "Encode from %s failed", "x");
  char got[4096];
  ssize_t n = recv(sock, got, sizeof got - 1, MSG_DONTWAIT);
  ck_assert_int_gt(n, 0);
  got[n] = '\0';
  ck_assert_str_eq(got,
                   "PRIORITY=3\nSYSLOG_IDENTIFIER=qdpd\nMESSAGE=Encode from x failed\n"
                   "QDP_RANK=1\nQDP_SUBSYS=rpc\nQDP_DEVICE=cuda:0\nQDP_METHOD=Encode\n"
                   "QDP_STATUS=RESOURCE_EXHAUSTED\nQDP_CLIENT=a b\n");
  char buf[4096];
  read_log(fd, buf, sizeof buf);
  ck_assert_str_eq(buf, ""); /* the journal took it: nothing on the stream */

  /* The socket gone: the record falls back to the stream, nothing lost. */
  close(sock);
  unlink(path);
  rmdir(dir);
  log_write(LOG_LEVEL_WARNING, "rpc", NULL, "still here");
  read_log(fd, buf, sizeof buf);
  ck_assert_str_eq(buf, "<4>qdpd r1 rpc: still here\n");

  /* JSON lines carry the fields as members, named without QDP_ in lower case. */
  ck_assert_int_eq(ftruncate(fd, 0), 0);
  lseek(fd, 0, SEEK_SET);
  log_set_format(LOG_FORMAT_JSON);
  log_fields(LOG_LEVEL_ERR, "rpc", NULL, f, 4, "failed");
  read_log(fd, buf, sizeof buf);
  ck_assert_ptr_nonnull(strstr(buf,
                               "\"msg\":\"failed\",\"method\":\"Encode\",\"status\":"
                               "\"RESOURCE_EXHAUSTED\",\"client\":\"a\\u000ab\"}\n"));
  ck_assert_ptr_null(strstr(buf, "state"));
  log_set_format(LOG_FORMAT_TEXT);
  log_set_journal_socket("");
  log_set_rank(-1);
  log_set_fd(2);
  log_set_journal(-1);
  close(fd);
}
END_TEST

static Suite *config_suite(void) {
  Suite *s = suite_create("config");
  TCase *tc = tcase_create("parsers");
  tcase_add_test(tc, test_bytes_accepts_decimal_and_binary_suffixes);
  tcase_add_test(tc, test_bytes_refuses_overflow_sign_garbage_and_range);
  tcase_add_test(tc, test_u64_seconds_double_bool_and_level);
  suite_add_tcase(s, tc);
  tc = tcase_create("table");
  tcase_add_test(tc, test_table_defaults_parse_and_names_are_unique);
  tcase_add_test(tc, test_deployed_conf_documents_every_option_with_its_default);
  suite_add_tcase(s, tc);
  tc = tcase_create("sources");
  tcase_add_test(tc, test_file_parser_reads_keys_comments_and_quotes);
  tcase_add_test(tc, test_file_parser_names_file_line_and_option_on_error);
  tcase_add_test(tc, test_precedence_is_argument_over_environment_over_file_over_default);
  tcase_add_test(tc, test_arguments_help_version_and_errors);
  tcase_add_test(tc, test_check_refuses_contradictions);
  tcase_add_test(tc, test_check_refuses_a_log_subsystem_that_does_not_exist);
  tcase_add_test(tc, test_socket_mode_is_octal_permission_bits);
  suite_add_tcase(s, tc);
  tc = tcase_create("log");
  tcase_add_test(tc, test_log_formats_journal_and_timestamp_lines_and_filters);
  tcase_add_test(tc, test_log_json_lines_are_one_object_each_with_every_field_escaped);
  tcase_add_test(tc, test_log_fields_go_to_the_journal_socket_as_fields_and_into_json);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(config_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
