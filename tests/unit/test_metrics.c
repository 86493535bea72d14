/* Unit tests of daemon/metrics: counters and histograms against hand-computed exposition lines,
 * label escaping, the format's grammar line by line, counts from concurrent threads, and the
 * HTTP listener (a real socket, requests written by hand: status, type, paths, methods, bad and
 * busy addresses). */
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "http.h"
#include "metrics.h"

static const char *const methods[] = {"Encode", "Status"};
static const struct metrics_names names = {methods, 2};

static struct metrics *make(void) {
  struct metrics *m = NULL;
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(metrics_create(&names, &m, &err), QDP_OK);
  return m;
}

static char *render(const struct metrics *m, const struct metrics_sample *s) {
  struct metrics_text t = {0};
  struct qdp_error err = QDP_ERROR_INIT;
  ck_assert_int_eq(metrics_render(m, s, &t, &err), QDP_OK);
  ck_assert_ptr_nonnull(t.buf);
  return t.buf;
}

static const struct metrics_sample empty = {
    .version = "1.2.3", .backend = "cpu", .transport = "local", .serving = true};

/* Whether text has the line exactly. */
static bool has_line(const char *text, const char *line) {
  size_t n = strlen(line);
  for (const char *p = text; (p = strstr(p, line)) != NULL; p++) {
    if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0')) {
      return true;
    }
  }
  return false;
}

#define ck_line(text, line) ck_assert_msg(has_line(text, line), "missing line: %s", line)
#define ck_no_line(text, line) ck_assert_msg(!has_line(text, line), "unexpected line: %s", line)

START_TEST(fresh_metrics_have_every_family_and_zero_ok_series) {
  struct metrics *m = make();
  char *t = render(m, &empty);
  ck_line(t, "# TYPE qdp_rpcs_total counter");
  ck_line(t, "# TYPE qdp_rpc_duration_seconds histogram");
  ck_line(t, "# TYPE qdp_jobs_total counter");
  ck_line(t, "# TYPE qdp_states gauge");
  ck_line(t, "qdp_build_info{version=\"1.2.3\",backend=\"cpu\",transport=\"local\"} 1");
  ck_line(t, "qdp_up 1");
  ck_line(t, "qdp_rpcs_total{method=\"Encode\",code=\"OK\"} 0");
  ck_line(t, "qdp_rpcs_total{method=\"Status\",code=\"OK\"} 0");
  ck_no_line(t, "qdp_rpcs_total{method=\"Encode\",code=\"NOT_FOUND\"} 0");
  ck_line(t, "qdp_jobs_total{encoding=\"angle\",code=\"OK\"} 0");
  ck_line(t, "qdp_rpc_duration_seconds_count{method=\"Status\"} 0");
  ck_line(t, "qdp_input_bytes_total{source=\"shm\"} 0");
  ck_line(t, "qdp_output_bytes_total{sink=\"cuda_ipc\"} 0");
  free(t);
  metrics_destroy(m);
}
END_TEST

START_TEST(observations_land_in_their_codes_and_cumulative_buckets) {
  struct metrics *m = make();
  metrics_rpc(m, 0, 0, 0.0003);
  metrics_rpc(m, 0, 0, 0.002);
  metrics_rpc(m, 0, 5, 0.1);      /* NOT_FOUND; on a bucket's bound: in that bucket */
  metrics_rpc(m, 0, 99, 0.00001); /* no such code: UNKNOWN */
  metrics_rpc(m, 7, 0, 1);        /* no such method: not counted */
  metrics_job(m, QDP_ENCODING_ANGLE, 8, 0.5, -1); /* RESOURCE_EXHAUSTED, no encode phase */
  metrics_job(m, QDP_ENCODING_ANGLE, 0, 0.004, 0.003);
  metrics_input(m, QDP_SOURCE_SHM, 4096);
  metrics_input(m, QDP_SOURCE_SHM, 1);
  metrics_phase(m, METRICS_PHASE_COMMIT, 0.0002);
  metrics_phase(m, METRICS_PHASE_COMMIT, 0.03);
  metrics_phase(m, METRICS_PHASE_COUNT, 1); /* no such phase: not counted */
  metrics_output(m, METRICS_OUT_STATE, 1 << 20);
  char *t = render(m, &empty);
  ck_line(t, "qdp_rpcs_total{method=\"Encode\",code=\"OK\"} 2");
  ck_line(t, "qdp_rpcs_total{method=\"Encode\",code=\"NOT_FOUND\"} 1");
  ck_line(t, "qdp_rpcs_total{method=\"Encode\",code=\"UNKNOWN\"} 1");
  ck_line(t, "qdp_rpcs_total{method=\"Status\",code=\"OK\"} 0");
  /* 0.00001, 0.0003, 0.002, 0.1 */
  ck_line(t, "qdp_rpc_duration_seconds_bucket{method=\"Encode\",le=\"0.0001\"} 1");
  ck_line(t, "qdp_rpc_duration_seconds_bucket{method=\"Encode\",le=\"0.00025\"} 1");
  ck_line(t, "qdp_rpc_duration_seconds_bucket{method=\"Encode\",le=\"0.0005\"} 2");
  ck_line(t, "qdp_rpc_duration_seconds_bucket{method=\"Encode\",le=\"0.0025\"} 3");
  ck_line(t, "qdp_rpc_duration_seconds_bucket{method=\"Encode\",le=\"0.05\"} 3");
  ck_line(t, "qdp_rpc_duration_seconds_bucket{method=\"Encode\",le=\"0.1\"} 4");
  ck_line(t, "qdp_rpc_duration_seconds_bucket{method=\"Encode\",le=\"+Inf\"} 4");
  ck_line(t, "qdp_rpc_duration_seconds_sum{method=\"Encode\"} 0.10231");
  ck_line(t, "qdp_rpc_duration_seconds_count{method=\"Encode\"} 4");
  ck_line(t, "qdp_rpc_duration_seconds_count{method=\"Status\"} 0");
  ck_line(t, "qdp_jobs_total{encoding=\"angle\",code=\"RESOURCE_EXHAUSTED\"} 1");
  ck_line(t, "qdp_jobs_total{encoding=\"angle\",code=\"OK\"} 1");
  ck_line(t, "qdp_job_duration_seconds_count{encoding=\"angle\"} 2");
  ck_line(t, "qdp_job_encode_seconds_count{encoding=\"angle\"} 1");
  ck_line(t, "qdp_job_encode_seconds_bucket{encoding=\"angle\",le=\"0.0025\"} 0");
  ck_line(t, "qdp_job_encode_seconds_bucket{encoding=\"angle\",le=\"0.005\"} 1");
  ck_line(t, "qdp_input_bytes_total{source=\"shm\"} 4097");
  ck_line(t, "qdp_job_phase_seconds_bucket{phase=\"commit\",le=\"0.00025\"} 1");
  ck_line(t, "qdp_job_phase_seconds_bucket{phase=\"commit\",le=\"0.025\"} 1");
  ck_line(t, "qdp_job_phase_seconds_bucket{phase=\"commit\",le=\"0.05\"} 2");
  ck_line(t, "qdp_job_phase_seconds_count{phase=\"commit\"} 2");
  ck_line(t, "qdp_job_phase_seconds_count{phase=\"ingest\"} 0");
  ck_line(t, "qdp_job_phase_seconds_count{phase=\"collective\"} 0");
  ck_line(t, "qdp_output_bytes_total{sink=\"state\"} 1048576");
  free(t);
  metrics_destroy(m);
}
END_TEST

/* The encoding and source labels are the tables' (common/qdp_encodings.h, qdp_source.h), in
 * their order; a job of no encoding and bytes of no source are not counted. */
START_TEST(encodings_and_sources_label_as_their_tables_name_them) {
  struct metrics *m = make();
  metrics_job(m, QDP_ENCODING_UNSPECIFIED, 13, 1, 1);
  metrics_job(m, (qdp_encoding)99, 13, 1, 1);
  metrics_job(m, QDP_ENCODING_IQP_Z, 13, 1, 1);
  metrics_input(m, QDP_SOURCE_NONE, 7);
  metrics_input(m, QDP_SOURCE_UPLOAD, 5);
  char *t = render(m, &empty);
  static const char *const encodings[] = {"amplitude", "angle", "basis", "iqp", "iqp-z", "phase"};
  const char *at = t;
  for (size_t i = 0; i < sizeof encodings / sizeof encodings[0]; i++) {
    char line[96];
    snprintf(line, sizeof line, "qdp_jobs_total{encoding=\"%s\",code=\"OK\"} 0", encodings[i]);
    ck_line(t, line);
    ck_assert_msg((at = strstr(at, line)) != NULL, "%s is out of the table's order", line);
  }
  ck_line(t, "qdp_jobs_total{encoding=\"iqp-z\",code=\"INTERNAL\"} 1");
  ck_assert_ptr_null(strstr(t, "code=\"INTERNAL\"} 2"));
  static const char *const sources[] = {"values", "upload", "shm", "region", "file", "cuda_ipc"};
  at = t;
  for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
    char line[96];
    snprintf(line, sizeof line, "qdp_input_bytes_total{source=\"%s\"} %d", sources[i],
             i == 1 ? 5 : 0);
    ck_line(t, line);
    ck_assert_msg((at = strstr(at, line)) != NULL, "%s is out of the table's order", line);
  }
  ck_assert_ptr_null(strstr(t, "source=\"none\""));
  free(t);
  metrics_destroy(m);
}
END_TEST

START_TEST(samples_render_with_their_labels_escaped) {
  struct metrics *m = make();
  struct metrics_device d[2] = {{.name = "cuda:0",
                                 .rank = 0,
                                 .total_bytes = 100,
                                 .budget_bytes = 90,
                                 .used_bytes = 10,
                                 .free_bytes = 80},
                                {.name = "a\"b\\c\nd", .rank = 1, .total_bytes = 1}};
  bool lost[2] = {false, true};
  struct metrics_sample s = empty;
  s.serving = false;
  s.states = 4096;
  s.leases = 7;
  s.regions = 3;
  s.uploads = 2;
  s.store_budget_bytes = 1 << 30;
  s.devices = d;
  s.ndevices = 2;
  s.rank_lost = lost;
  s.nranks = 2;
  char *t = render(m, &s);
  ck_line(t, "qdp_up 0");
  ck_line(t, "qdp_states 4096");
  ck_line(t, "qdp_leases 7");
  ck_line(t, "qdp_regions 3");
  ck_line(t, "qdp_uploads 2");
  ck_line(t, "qdp_store_budget_bytes 1073741824");
  ck_line(t, "qdp_device_memory_budget_bytes{device=\"cuda:0\",rank=\"0\"} 90");
  ck_line(t, "qdp_device_memory_free_bytes{device=\"cuda:0\",rank=\"0\"} 80");
  ck_line(t, "qdp_device_memory_total_bytes{device=\"a\\\"b\\\\c\\nd\",rank=\"1\"} 1");
  ck_line(t, "qdp_rank_up{rank=\"0\"} 1");
  ck_line(t, "qdp_rank_up{rank=\"1\"} 0");
  free(t);
  metrics_destroy(m);
}
END_TEST

/* The text format's grammar, line by line: a comment (# HELP / # TYPE name ...) or
 * name[{k="v",...}] value, value a number or +Inf; each family's TYPE before its samples. */
static void check_grammar(const char *text) {
  const char *p = text;
  int line = 0;
  while (*p) {
    line++;
    const char *e = strchr(p, '\n');
    ck_assert_msg(e != NULL, "line %d does not end in a newline", line);
    if (*p == '#') {
      ck_assert_msg(strncmp(p, "# HELP qdp_", 11) == 0 || strncmp(p, "# TYPE qdp_", 11) == 0,
                    "line %d: a comment that is neither HELP nor TYPE", line);
    } else {
      const char *q = p;
      ck_assert_msg(strncmp(q, "qdp_", 4) == 0, "line %d: a name without the qdp_ prefix", line);
      while ((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '_') {
        q++;
      }
      if (*q == '{') {
        for (q++; *q != '}';) {
          while (*q >= 'a' && *q <= 'z') {
            q++;
          }
          ck_assert_msg(q[0] == '=' && q[1] == '"', "line %d: a label without =\"", line);
          for (q += 2; *q != '"'; q++) {
            ck_assert_msg(*q != '\n', "line %d: an unescaped newline", line);
            if (*q == '\\') {
              q++;
              ck_assert_msg(*q == '\\' || *q == '"' || *q == 'n', "line %d: a bad escape", line);
            }
          }
          q++;
          if (*q == ',') {
            q++;
          }
        }
        q++;
      }
      ck_assert_msg(*q == ' ', "line %d: no space before the value", line);
      char *end;
      q++;
      if (strncmp(q, "+Inf", 4) == 0) {
        end = (char *)q + 4;
      } else {
        strtod(q, &end);
      }
      ck_assert_msg(end == e && end > q, "line %d: the value is not a number", line);
    }
    p = e + 1;
  }
}

START_TEST(the_text_follows_the_exposition_grammar) {
  struct metrics *m = make();
  metrics_rpc(m, 1, 14, 3.5);
  metrics_job(m, QDP_ENCODING_AMPLITUDE, 0, 70, 65); /* past the last bucket */
  struct metrics_device d = {.name = "x\"y", .rank = 0};
  bool lost = false;
  struct metrics_sample s = empty;
  s.devices = &d;
  s.ndevices = 1;
  s.rank_lost = &lost;
  s.nranks = 1;
  char *t = render(m, &s);
  check_grammar(t);
  ck_line(t, "qdp_job_duration_seconds_bucket{encoding=\"amplitude\",le=\"60\"} 0");
  ck_line(t, "qdp_job_duration_seconds_bucket{encoding=\"amplitude\",le=\"+Inf\"} 1");
  free(t);
  metrics_destroy(m);
}
END_TEST

struct hammer {
  struct metrics *m;
  int n;
};

static void *hammer_run(void *arg) {
  struct hammer *h = arg;
  for (int i = 0; i < h->n; i++) {
    metrics_rpc(h->m, 1, 0, 0.001);
    metrics_input(h->m, QDP_SOURCE_VALUES, 3);
  }
  return NULL;
}

START_TEST(concurrent_updates_all_count) {
  struct metrics *m = make();
  struct hammer h = {m, 100000};
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(pthread_create(&th[i], NULL, hammer_run, &h), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
  }
  char *t = render(m, &empty);
  ck_line(t, "qdp_rpcs_total{method=\"Status\",code=\"OK\"} 400000");
  ck_line(t, "qdp_rpc_duration_seconds_bucket{method=\"Status\",le=\"0.001\"} 400000");
  ck_line(t, "qdp_rpc_duration_seconds_bucket{method=\"Status\",le=\"0.0005\"} 0");
  ck_line(t, "qdp_input_bytes_total{source=\"values\"} 1200000");
  free(t);
  metrics_destroy(m);
}
END_TEST

/* ---- the listener ---- */

struct served {
  struct metrics *m;
  bool ready;
  int renders;
};

static void served_render(void *arg, struct metrics_text *t) {
  struct served *s = arg;
  s->renders++;
  struct qdp_error err = QDP_ERROR_INIT;
  metrics_render(s->m, &empty, t, &err);
}

static bool served_ready(void *arg) {
  return ((struct served *)arg)->ready;
}

/* Sends raw (an HTTP/1.0 request: the server closes after answering) to 127.0.0.1:port and
 * returns the whole answer (malloc'd). */
static char *ask(int port, const char *raw) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(write(fd, raw, strlen(raw)), (ssize_t)strlen(raw));
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  ssize_t n;
  while ((n = read(fd, buf + len, cap - 1 - len)) > 0) {
    len += (size_t)n;
    if (len + 1 == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
    }
  }
  buf[len] = '\0';
  close(fd);
  return buf;
}

START_TEST(the_listener_serves_metrics_health_and_readiness) {
  struct served sv = {.m = make(), .ready = true};
  metrics_rpc(sv.m, 0, 0, 0.01);
  struct metrics_http_ops ops = {served_render, served_ready, &sv};
  struct metrics_http *h = NULL;
  struct qdp_error err = QDP_ERROR_INIT;
  int port = 0;
  ck_assert_int_eq(metrics_http_start("127.0.0.1:0", &ops, &h, &port, &err), QDP_OK);
  ck_assert_int_gt(port, 0);

  char *r = ask(port, "GET /metrics HTTP/1.0\r\n\r\n");
  ck_assert_msg(strncmp(r, "HTTP/1.0 200", 12) == 0 || strncmp(r, "HTTP/1.1 200", 12) == 0, "%s",
                r);
  ck_assert_ptr_nonnull(strstr(r, "text/plain; version=0.0.4"));
  char *body = strstr(r, "\r\n\r\n");
  ck_assert_ptr_nonnull(body);
  ck_line(body + 4, "qdp_rpcs_total{method=\"Encode\",code=\"OK\"} 1");
  check_grammar(body + 4);
  free(r);
  ck_assert_int_eq(sv.renders, 1);

  r = ask(port, "GET /healthz HTTP/1.0\r\n\r\n");
  ck_assert_ptr_nonnull(strstr(r, " 200 "));
  free(r);
  r = ask(port, "GET /readyz HTTP/1.0\r\n\r\n");
  ck_assert_ptr_nonnull(strstr(r, " 200 "));
  free(r);
  sv.ready = false;
  r = ask(port, "GET /readyz HTTP/1.0\r\n\r\n");
  ck_assert_msg(strstr(r, " 503 ") != NULL, "%s", r);
  free(r);
  r = ask(port, "GET /states HTTP/1.0\r\n\r\n");
  ck_assert_msg(strstr(r, " 404 ") != NULL, "%s", r);
  free(r);
  r = ask(port, "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc");
  ck_assert_msg(strstr(r, " 405 ") != NULL && strstr(r, "Allow: GET, HEAD"), "%s", r);
  free(r);
  ck_assert_int_eq(sv.renders, 1); /* only /metrics renders */

  /* The port is taken while it serves; a second listener there is refused with the address. */
  char busy[32];
  snprintf(busy, sizeof busy, "127.0.0.1:%d", port);
  struct metrics_http *h2 = NULL;
  ck_assert_int_eq(metrics_http_start(busy, &ops, &h2, NULL, &err), QDP_ERR_UNAVAILABLE);
  ck_assert_str_eq(err.field, "metrics_listen");
  ck_assert_ptr_nonnull(strstr(err.msg, busy));
  metrics_http_stop(h);
  metrics_destroy(sv.m);
}
END_TEST

START_TEST(bad_addresses_are_refused_with_the_option_named) {
  struct served sv = {.m = NULL};
  struct metrics_http_ops ops = {served_render, served_ready, &sv};
  const char *bad[] = {"",
                       "9464",
                       "127.0.0.1:",
                       "127.0.0.1:port",
                       "127.0.0.1:70000",
                       "[::1:9464",
                       "no-such-host.invalid:9464"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct metrics_http *h = NULL;
    struct qdp_error err = QDP_ERROR_INIT;
    ck_assert_msg(metrics_http_start(bad[i], &ops, &h, NULL, &err) == QDP_ERR_INVALID_ARGUMENT,
                  "'%s' was not refused as invalid", bad[i]);
    ck_assert_str_eq(err.field, "metrics_listen");
    ck_assert_ptr_null(h);
  }
}
END_TEST

static Suite *metrics_suite(void) {
  Suite *s = suite_create("metrics");
  TCase *tc = tcase_create("metrics");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, fresh_metrics_have_every_family_and_zero_ok_series);
  tcase_add_test(tc, observations_land_in_their_codes_and_cumulative_buckets);
  tcase_add_test(tc, encodings_and_sources_label_as_their_tables_name_them);
  tcase_add_test(tc, samples_render_with_their_labels_escaped);
  tcase_add_test(tc, the_text_follows_the_exposition_grammar);
  tcase_add_test(tc, concurrent_updates_all_count);
  tcase_add_test(tc, the_listener_serves_metrics_health_and_readiness);
  tcase_add_test(tc, bad_addresses_are_refused_with_the_option_named);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(metrics_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
