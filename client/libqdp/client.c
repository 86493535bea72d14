/* The client object and the gRPC call machinery every libqdp call goes through.
 *
 * One channel per client, shared by all threads: gRPC core channels are thread-safe, and each call
 * gets its own pluck completion queue, owned by the calling thread for the call's duration, so
 * concurrent calls never wait on one another's events. Metadata slices are made once in
 * qdp_client_create and only read afterwards.
 */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "libqdp_int.h"
#include "qdp.pb-c.h"
#include "qdp_wire.h"

unsigned qdp_version(void) {
  return QDP_VERSION_HEX;
}

const char *qdp_version_string(void) {
  return QDP_VERSION_STRING;
}

static const char *const policy_names[] = {"auto", "single", "even", "uneven", "capacity", "batch"};

const char *qdp_policy_name(qdp_policy p) {
  return (unsigned)p < sizeof policy_names / sizeof policy_names[0] ? policy_names[p] : NULL;
}

int qdp_policy_from_name(const char *name) {
  for (unsigned i = 0; name && i < sizeof policy_names / sizeof policy_names[0]; i++) {
    if (strcmp(name, policy_names[i]) == 0) {
      return (int)i;
    }
  }
  return -1;
}

/* ---- target and identity ---- */

qdp_status qdp__default_target(char *buf, size_t size) {
  const char *t = getenv("QDP_TARGET");
  const char *sock = getenv("QDP_SOCKET");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  int n;
  if (t && *t) {
    n = snprintf(buf, size, "%s", t);
  } else if (sock && *sock) {
    n = snprintf(buf, size, "unix:%s", sock);
  } else if (geteuid() == 0) {
    n = snprintf(buf, size, "unix:/run/qdp/qdpd.sock");
  } else if (xdg && *xdg) {
    n = snprintf(buf, size, "unix:%s/qdp/qdpd.sock", xdg);
  } else {
    /* No runtime directory in the environment (a cron job, a bare container): systemd's
     * per-user default, which is where XDG_RUNTIME_DIR would point. */
    n = snprintf(buf, size, "unix:/run/user/%u/qdp/qdpd.sock", (unsigned)geteuid());
  }
  if (n < 0 || (size_t)n >= size) {
    if (size > 0) {
      buf[0] = '\0';
    }
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "target",
                          "The default target needs %d bytes but the buffer has %zu.", n + 1, size);
  }
  return QDP_OK;
}

qdp_status qdp_default_target(char *buf, size_t buf_size) {
  qdp__err_reset();
  if (!buf) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "buf", "The buffer is NULL.");
  }
  return qdp__default_target(buf, buf_size);
}

/* user@host:pid, the identity per-client budgets are counted against. */
static void default_identity(char *buf, size_t size) {
  char user[256] = "";
  char host[256] = "";
  struct passwd pw, *res = NULL;
  char pwbuf[4096];
  if (getpwuid_r(geteuid(), &pw, pwbuf, sizeof pwbuf, &res) == 0 && res && res->pw_name) {
    snprintf(user, sizeof user, "%s", res->pw_name);
  } else {
    snprintf(user, sizeof user, "%u", (unsigned)geteuid());
  }
  if (gethostname(host, sizeof host - 1) != 0) {
    snprintf(host, sizeof host, "localhost");
  }
  snprintf(buf, size, "%s@%s:%ld", user, host, (long)getpid());
}

/* ---- client ---- */

/* The caller's options over the defaults (an older caller's shorter struct gives the fields it
 * has), checked. */
static qdp_status take_opts(const struct qdp_client_opts *opts, struct qdp_client_opts *o) {
  *o = (struct qdp_client_opts)QDP_CLIENT_OPTS_INIT;
  if (opts) {
    if (opts->struct_size < offsetof(struct qdp_client_opts, target) + sizeof(opts->target)) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "struct_size",
                            "qdp_client_opts.struct_size is %zu; initialise the struct with "
                            "QDP_CLIENT_OPTS_INIT.",
                            opts->struct_size);
    }
    /* An older caller's shorter struct: take the fields it has, defaults for the rest. */
    memcpy(o, opts, opts->struct_size < sizeof *o ? opts->struct_size : sizeof *o);
    o->struct_size = sizeof *o;
  }
  if (o->timeout_ms < 0 || o->stream_timeout_ms < 0) {
    return qdp__err_local(
        QDP_ERR_INVALID_ARGUMENT, -1, "timeout_ms",
        "Timeouts must not be negative (timeout_ms %lld, stream_timeout_ms %lld).",
        (long long)o->timeout_ms, (long long)o->stream_timeout_ms);
  }
  return QDP_OK;
}

/* The metadata every call sends: who we are, and the bearer token when there is one. */
static qdp_status set_metadata(qdp_client *c, const char *ident, const char *token) {
  c->md[0].key = grpc_slice_from_static_string("qdp-client");
  c->md[0].value = grpc_slice_from_copied_string(ident);
  c->nmd = 1;
  if (token && *token) {
    char auth[1024];
    int n = snprintf(auth, sizeof auth, "Bearer %s", token);
    if (n < 0 || (size_t)n >= sizeof auth) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "token",
                            "The token is %zu bytes long; the limit is %zu.", strlen(token),
                            sizeof auth - 8);
    }
    c->md[1].key = grpc_slice_from_static_string("authorization");
    c->md[1].value = grpc_slice_from_copied_string(auth);
    c->nmd = 2;
  }
  return QDP_OK;
}

/* ---- TLS ---- */

/* The TLS options in effect: the caller's, else the environment's; "" is none. From_env says
 * which came from the environment (a unix: target ignores those). */
struct tls_opts {
  const char *ca, *cert, *key, *server_name;
  int from_env;
};

static const char *opt_or_env(const char *v, const char *env, int *from_env) {
  if (v) {
    return *v ? v : NULL;
  }
  v = getenv(env);
  if (v && *v) {
    *from_env = 1;
    return v;
  }
  return NULL;
}

static int unix_target(const char *t) {
  return strncmp(t, "unix:", 5) == 0 || strncmp(t, "unix-abstract:", 14) == 0;
}

/* The TLS options for target, checked; all NULL when the channel is plain. */
static qdp_status take_tls(const struct qdp_client_opts *o, const char *target,
                           struct tls_opts *t) {
  int env_ca = 0, env_cert = 0, env_key = 0, env_name = 0;
  t->ca = opt_or_env(o->tls_ca, "QDP_TLS_CA", &env_ca);
  t->cert = opt_or_env(o->tls_cert, "QDP_TLS_CERT", &env_cert);
  t->key = opt_or_env(o->tls_key, "QDP_TLS_KEY", &env_key);
  t->server_name = opt_or_env(o->tls_server_name, "QDP_TLS_SERVER_NAME", &env_name);
  t->from_env = env_ca || env_cert || env_key || env_name;
  if (unix_target(target)) {
    /* The kernel vouches for both ends of a Unix socket: TLS there is a mistake when asked for
     * here, and the environment's (set for TCP daemons) does not apply. */
    const char *given = (t->ca && !env_ca)              ? "tls_ca"
                        : (t->cert && !env_cert)        ? "tls_cert"
                        : (t->key && !env_key)          ? "tls_key"
                        : (t->server_name && !env_name) ? "tls_server_name"
                                                        : NULL;
    if (given) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, given,
                            "%s is set but the target '%s' is a Unix socket: TLS is for TCP "
                            "targets (HOST:PORT).",
                            given, target);
    }
    *t = (struct tls_opts){0};
    return QDP_OK;
  }
  if (!t->cert != !t->key) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, t->cert ? "tls_key" : "tls_cert",
                          "tls_cert and tls_key (QDP_TLS_CERT, QDP_TLS_KEY) go together: %s is "
                          "set, %s is not.",
                          t->cert ? "tls_cert" : "tls_key", t->cert ? "tls_key" : "tls_cert");
  }
  if (!t->ca && (t->cert || t->server_name)) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "tls_ca",
                          "%s is set but tls_ca (QDP_TLS_CA) is not: TLS needs the CA "
                          "certificates the daemon's certificate chains to.",
                          t->cert ? "tls_cert" : "tls_server_name");
  }
  return QDP_OK;
}

/* A PEM file's text, NUL-terminated, into *ret (free it); errors name the option and the path. */
static qdp_status read_pem(const char *opt, const char *path, char **ret) {
  *ret = NULL;
  FILE *f = fopen(path, "re");
  if (!f) {
    int e = errno;
    return qdp__err_local(qdp__errno_status(e, QDP_ERR_INVALID_ARGUMENT), e, opt,
                          "%s '%s' cannot be read: %s.", opt, path, strerror(e));
  }
  size_t cap = 8192, n = 0;
  char *buf = malloc(cap);
  qdp_status rc = QDP_OK;
  while (buf) {
    n += fread(buf + n, 1, cap - 1 - n, f);
    if (n < cap - 1) {
      break;
    }
    if (cap >= (4u << 20)) {
      rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, opt,
                          "%s '%s' is larger than 4 MiB: not a PEM certificate or key.", opt, path);
      break;
    }
    char *more = realloc(buf, cap * 2);
    if (!more) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = more;
    cap *= 2;
  }
  int read_err = ferror(f) ? errno : 0;
  fclose(f);
  if (!buf) {
    return qdp__err_nomem("reading a TLS file");
  }
  buf[n] = '\0';
  if (rc == QDP_OK && read_err) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, read_err, opt, "%s '%s' cannot be read: %s.", opt,
                        path, strerror(read_err));
  }
  if (rc == QDP_OK && !strstr(buf, "-----BEGIN ")) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, opt,
                        "%s '%s' holds no PEM ('-----BEGIN ...-----').", opt, path);
  }
  if (rc != QDP_OK) {
    free(buf);
    return rc;
  }
  *ret = buf;
  return QDP_OK;
}

/* TLS credentials from t's files (t->ca set). */
static qdp_status tls_credentials(const struct tls_opts *t, grpc_channel_credentials **ret) {
  char *ca = NULL, *cert = NULL, *key = NULL;
  qdp_status rc = read_pem("tls_ca", t->ca, &ca);
  if (rc == QDP_OK && t->cert) {
    rc = read_pem("tls_cert", t->cert, &cert);
  }
  if (rc == QDP_OK && t->key) {
    rc = read_pem("tls_key", t->key, &key);
  }
  if (rc == QDP_OK) {
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    *ret = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL); /* copies them */
    if (!*ret) {
      rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "tls_ca",
                          "gRPC could not make TLS credentials of tls_ca '%s'.", t->ca);
    }
  }
  free(ca);
  free(cert);
  if (key) {
    memset(key, 0, strlen(key)); /* no copy of the key left in freed memory */
    free(key);
  }
  return rc;
}

/* The channel to c->target. */
static qdp_status open_channel(qdp_client *c, const struct tls_opts *tls) {
  /* States reach gigabytes: replies (Describe of a wide plan, big Fetch chunks) must not hit the
   * 4 MiB default, and sends are bounded by the daemon's own limit, not ours. Retries stay off:
   * a retried upload would make gRPC buffer the chunks it already sent. */
  grpc_arg args[5];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = -1;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = -1;
  args[2].type = GRPC_ARG_INTEGER;
  args[2].key = (char *)GRPC_ARG_ENABLE_RETRIES;
  args[2].value.integer = 0;
  args[3].type = GRPC_ARG_STRING;
  args[3].key = (char *)GRPC_ARG_PRIMARY_USER_AGENT_STRING;
  args[3].value.string = (char *)"libqdp/" QDP_VERSION_STRING;
  grpc_channel_args ca = {4, args};
  if (tls->server_name) {
    args[4].type = GRPC_ARG_STRING;
    args[4].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    args[4].value.string = (char *)tls->server_name;
    ca.num_args = 5;
  }
  grpc_channel_credentials *creds = NULL;
  if (tls->ca) {
    qdp_status rc = tls_credentials(tls, &creds);
    if (rc != QDP_OK) {
      return rc;
    }
  } else {
    creds = grpc_insecure_credentials_create();
  }
  c->channel = grpc_channel_create(c->target, creds, &ca);
  grpc_channel_credentials_release(creds);
  if (!c->channel) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "target",
                          "gRPC could not create a channel to '%s'.", c->target);
  }
  return QDP_OK;
}

qdp_status qdp_client_create(const struct qdp_client_opts *opts, qdp_client **ret) {
  qdp__err_reset();
  if (!ret) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "ret", "The result pointer is NULL.");
  }
  *ret = NULL;
  struct qdp_client_opts o;
  qdp_status rc = take_opts(opts, &o);
  if (rc != QDP_OK) {
    return rc;
  }
  char target[PATH_MAX + 16];
  if (o.target && *o.target) {
    if (strlen(o.target) >= sizeof target) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "target",
                            "The target is %zu bytes long; the limit is %zu.", strlen(o.target),
                            sizeof target - 1);
    }
    snprintf(target, sizeof target, "%s", o.target);
  } else {
    rc = qdp__default_target(target, sizeof target);
    if (rc != QDP_OK) {
      return rc;
    }
  }
  char ident[600];
  if (o.client_name && *o.client_name) {
    snprintf(ident, sizeof ident, "%s", o.client_name);
  } else {
    default_identity(ident, sizeof ident);
  }
  const char *token = o.token ? o.token : getenv("QDP_TOKEN");
  struct tls_opts tls;
  rc = take_tls(&o, target, &tls);
  if (rc != QDP_OK) {
    return rc;
  }

  qdp_client *c = calloc(1, sizeof *c);
  if (!c) {
    return qdp__err_nomem("creating a client");
  }
  c->target = strdup(target);
  if (!c->target) {
    free(c);
    return qdp__err_nomem("creating a client");
  }
  c->timeout_ms = o.timeout_ms;
  c->stream_timeout_ms = o.stream_timeout_ms;
  c->wait_for_ready = o.wait_for_ready;
  c->log = o.log;
  c->log_arg = o.log_arg;
  if (pthread_mutex_init(&c->views_mu, NULL) != 0) {
    free(c->target);
    free(c);
    return qdp__err_nomem("creating a client");
  }
  c->views_mu_ready = 1;

  grpc_init();
  rc = set_metadata(c, ident, token);
  if (rc == QDP_OK) {
    rc = open_channel(c, &tls);
  }
  if (rc != QDP_OK) {
    qdp_client_destroy(c);
    return rc;
  }
  *ret = c;
  return QDP_OK;
}

void qdp_client_destroy(qdp_client *c) {
  if (!c) {
    return;
  }
  if (c->views_mu_ready) {
    qdp__views_forget_all(c); /* needs the channel for CloseView */
    pthread_mutex_destroy(&c->views_mu);
  }
  if (c->channel) {
    grpc_channel_destroy(c->channel);
  }
  for (size_t i = 0; i < c->nmd; i++) {
    grpc_slice_unref(c->md[i].value);
  }
  free(c->target);
  free(c);
  grpc_shutdown();
}

const char *qdp_client_target(const qdp_client *c) {
  return c ? c->target : "";
}

/* ---- byte buffers -> protobuf-c (packing is common/qdp_wire.h's) ---- */

ProtobufCMessage *qdp__unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc) {
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb)) {
    return NULL;
  }
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  ProtobufCMessage *m =
      protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
  grpc_slice_unref(s);
  return m;
}

/* ---- calls ---- */

static gpr_timespec deadline_after(int64_t ms) {
  if (ms <= 0) {
    return gpr_inf_future(GPR_CLOCK_REALTIME);
  }
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

qdp_status qdp__call_begin(qdp_client *c, const char *method, int streaming, struct qdp__call *k) {
  return qdp__call_begin_ms(c, method, streaming ? c->stream_timeout_ms : c->timeout_ms, k);
}

qdp_status qdp__call_begin_ms(qdp_client *c, const char *method, int64_t timeout_ms,
                              struct qdp__call *k) {
  memset(k, 0, sizeof *k);
  k->c = c;
  k->method = method;
  k->details = grpc_empty_slice();
  grpc_metadata_array_init(&k->initial_md);
  grpc_metadata_array_init(&k->trailing_md);
  clock_gettime(CLOCK_MONOTONIC, &k->t0);
  k->cq = grpc_completion_queue_create_for_pluck(NULL);
  if (!k->cq) {
    return qdp__err_nomem("creating a completion queue");
  }
  gpr_timespec deadline = deadline_after(timeout_ms);
  /* A copy that gRPC owns: its HPACK encoder keeps the path in the index of the connection,
   * which every channel of this process to the same target shares and which outlives a client.
   * An index over memory of ours, freed with its client and reused for another path, would send
   * a later call as the method first sent from there. */
  grpc_slice path = grpc_slice_from_copied_string(method);
  k->call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, k->cq, path, NULL,
                                     deadline, NULL);
  grpc_slice_unref(path);
  if (!k->call) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL, "gRPC could not create a call of %s.",
                          method);
  }
  return QDP_OK;
}

grpc_op qdp__op_send_initial(const struct qdp__call *k) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_SEND_INITIAL_METADATA;
  op.data.send_initial_metadata.count = k->c->nmd;
  op.data.send_initial_metadata.metadata = (grpc_metadata *)k->c->md;
  if (k->c->wait_for_ready) {
    op.flags =
        GRPC_INITIAL_METADATA_WAIT_FOR_READY | GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
  }
  return op;
}

int qdp__call_batch(struct qdp__call *k, const grpc_op *ops, size_t nops) {
  for (size_t i = 0; i < nops; i++) {
    if (ops[i].op == GRPC_OP_RECV_STATUS_ON_CLIENT) {
      k->have_status = 1;
    }
  }
  grpc_call_error e = grpc_call_start_batch(k->call, ops, nops, k, NULL);
  if (e != GRPC_CALL_OK) {
    /* A misuse of the API (two sends outstanding, an op after close): report it as the call's
     * status so that the caller's path to qdp__call_end stays the same. */
    k->have_status = 1;
    k->status = GRPC_STATUS_INTERNAL;
    grpc_slice_unref(k->details);
    k->details = grpc_slice_from_copied_string("libqdp could not start a gRPC batch");
    return 0;
  }
  grpc_event ev = grpc_completion_queue_pluck(k->cq, k, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  return ev.type == GRPC_OP_COMPLETE && ev.success;
}

void qdp__call_cancel(struct qdp__call *k) {
  if (k->call) {
    grpc_call_cancel(k->call, NULL);
    k->cancelled_locally = 1;
  }
}

/* The trailing "qdp-error-bin" ErrorDetail, when the daemon sent one (gRPC has already decoded
 * the -bin value from base64). */
static Qdp__ErrorDetail *find_detail(const grpc_metadata_array *md) {
  for (size_t i = 0; i < md->count; i++) {
    if (grpc_slice_str_cmp(md->metadata[i].key, "qdp-error-bin") == 0) {
      grpc_slice v = md->metadata[i].value;
      return qdp__error_detail__unpack(NULL, GRPC_SLICE_LENGTH(v), GRPC_SLICE_START_PTR(v));
    }
  }
  return NULL;
}

static void record_remote(struct qdp__call *k) {
  struct qdp_errinfo *e = qdp__err();
  *e = (struct qdp_errinfo)QDP_ERRINFO_INIT;
  e->remote = 1;
  e->code = (k->status >= 1 && k->status <= 16) ? (qdp_status)k->status : QDP_ERR_UNKNOWN;
  snprintf(e->code_name, sizeof e->code_name, "%s", qdp_status_name(e->code));
  size_t dl = GRPC_SLICE_LENGTH(k->details);
  char details[sizeof e->msg];
  if (dl >= sizeof details) {
    dl = sizeof details - 1;
  }
  memcpy(details, GRPC_SLICE_START_PTR(k->details), dl);
  details[dl] = '\0';
  Qdp__ErrorDetail *d = find_detail(&k->trailing_md);
  if (d) {
    if (d->code_name && *d->code_name) {
      snprintf(e->code_name, sizeof e->code_name, "%s", d->code_name);
    }
    snprintf(e->field, sizeof e->field, "%s", d->field ? d->field : "");
    e->rank = d->rank;
    e->device = d->device;
    e->cause = d->cause;
    e->need_bytes = d->need_bytes;
    e->free_bytes = d->free_bytes;
    qdp__error_detail__free_unpacked(d, NULL);
  }
  if (k->status == GRPC_STATUS_UNAVAILABLE && !d) {
    /* The transport's words ("failed to connect to all addresses") do not say where. */
    snprintf(e->msg, sizeof e->msg, "cannot reach qdpd at '%.200s': %.780s", k->c->target,
             dl ? details : "unavailable");
  } else if (k->cancelled_locally) {
    snprintf(e->msg, sizeof e->msg, "%s was cancelled by the caller.", k->method);
  } else if (dl) {
    snprintf(e->msg, sizeof e->msg, "%s", details);
  } else {
    snprintf(e->msg, sizeof e->msg, "%s failed: %s.", k->method, qdp_strerror(e->code));
  }
}

static void log_call(const struct qdp__call *k, qdp_status rc) {
  if (!k->c || !k->c->log) {
    return;
  }
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - k->t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - k->t0.tv_nsec) / 1e6;
  char line[1200];
  if (rc == QDP_OK) {
    snprintf(line, sizeof line, "qdp: %s -> OK (%.3f ms)", k->method, ms);
  } else {
    snprintf(line, sizeof line, "qdp: %s -> %s (%.3f ms): %s", k->method, qdp_status_name(rc), ms,
             qdp_last_error()->msg);
  }
  k->c->log(k->c->log_arg, line);
}

qdp_status qdp__call_end(struct qdp__call *k, qdp_status local) {
  if (k->call && !k->have_status && local != QDP_OK && !k->cancelled_locally) {
    /* A local failure mid-call: without a cancel, the status below would wait for the daemon
     * (or the deadline) to end a call we no longer want. */
    qdp__call_cancel(k);
  }
  if (k->call && !k->have_status) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &k->trailing_md;
    op.data.recv_status_on_client.status = &k->status;
    op.data.recv_status_on_client.status_details = &k->details;
    op.data.recv_status_on_client.error_string = &k->error_string;
    qdp__call_batch(k, &op, 1);
  }
  qdp_status rc = local;
  if (rc == QDP_OK && k->call && k->status != GRPC_STATUS_OK) {
    record_remote(k);
    rc = qdp__err()->code;
  }
  if (rc == QDP_OK && k->cancelled_locally) {
    rc = qdp__err_local(QDP_ERR_CANCELLED, -1, NULL, "%s was cancelled by the caller.", k->method);
  }
  log_call(k, rc);
  if (k->call) {
    grpc_call_unref(k->call);
  }
  if (k->cq) {
    grpc_completion_queue_shutdown(k->cq);
    while (
        grpc_completion_queue_pluck(k->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
        GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(k->cq);
  }
  grpc_metadata_array_destroy(&k->initial_md);
  grpc_metadata_array_destroy(&k->trailing_md);
  grpc_slice_unref(k->details);
  if (k->error_string) {
    gpr_free((void *)k->error_string);
  }
  memset(k, 0, sizeof *k);
  return rc;
}

/* The batch of a whole unary call: send `send`, receive the reply into *recv and the status;
 * INTERNAL when the daemon answers OK without a message. */
static qdp_status unary_exchange(struct qdp__call *k, grpc_byte_buffer *send,
                                 grpc_byte_buffer **recv) {
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0] = qdp__op_send_initial(k);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &k->initial_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &k->trailing_md;
  ops[5].data.recv_status_on_client.status = &k->status;
  ops[5].data.recv_status_on_client.status_details = &k->details;
  ops[5].data.recv_status_on_client.error_string = &k->error_string;
  qdp__call_batch(k, ops, 6);
  if (k->status == GRPC_STATUS_OK && !*recv) {
    return qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                          "qdpd answered %s with status OK but no reply message.", k->method);
  }
  return QDP_OK;
}

qdp_status qdp__unary(qdp_client *c, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *rep_desc, ProtobufCMessage **ret) {
  *ret = NULL;
  struct qdp__call k;
  qdp_status rc = qdp__call_begin(c, method, 0, &k);
  if (rc != QDP_OK) {
    return qdp__call_end(&k, rc);
  }
  grpc_byte_buffer *send = qdp_wire_pack(req);
  grpc_byte_buffer *recv = NULL;
  rc = unary_exchange(&k, send, &recv);
  grpc_byte_buffer_destroy(send);
  if (rc == QDP_OK && k.status == GRPC_STATUS_OK) {
    *ret = qdp__unpack(recv, rep_desc);
    if (!*ret) {
      rc = qdp__err_local(QDP_ERR_INTERNAL, -1, NULL,
                          "The reply to %s (%zu bytes) is not a valid %s message.", method,
                          grpc_byte_buffer_length(recv), rep_desc->name);
    }
  }
  if (recv) {
    grpc_byte_buffer_destroy(recv);
  }
  return qdp__call_end(&k, rc);
}

/* Whether the service has a method `name`. */
static int has_method(const char *name) {
  for (size_t i = 0; i < qdp__qdp__descriptor.n_methods; i++) {
    if (strcmp(qdp__qdp__descriptor.methods[i].name, name) == 0) {
      return 1;
    }
  }
  return 0;
}

qdp_status qdp_call(qdp_client *c, const char *method, const void *request, size_t request_len,
                    int64_t timeout_ms, void **ret_reply, size_t *ret_len) {
  qdp__err_reset();
  if (!c || !method || !ret_reply || !ret_len || (!request && request_len)) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, NULL,
                          "qdp_call needs a client, a method, a request (NULL only when empty) "
                          "and both result pointers.");
  }
  *ret_reply = NULL;
  *ret_len = 0;
  char path[128];
  if (!has_method(method)) {
    return qdp__err_local(QDP_ERR_UNIMPLEMENTED, -1, "method",
                          "qdp.proto's service %s has no method '%.64s'.",
                          qdp__qdp__descriptor.name, method);
  }
  snprintf(path, sizeof path, "/%s/%s", qdp__qdp__descriptor.name, method);
  struct qdp__call k;
  qdp_status rc = qdp__call_begin_ms(c, path, timeout_ms < 0 ? c->timeout_ms : timeout_ms, &k);
  if (rc != QDP_OK) {
    return qdp__call_end(&k, rc);
  }
  grpc_slice s = grpc_slice_from_copied_buffer(request, request_len);
  grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_byte_buffer *recv = NULL;
  rc = unary_exchange(&k, send, &recv);
  grpc_byte_buffer_destroy(send);
  if (rc == QDP_OK && k.status == GRPC_STATUS_OK) {
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, recv)) {
      rc = qdp__err_local(QDP_ERR_INTERNAL, -1, NULL, "The reply to %s could not be read.", method);
    } else {
      grpc_slice all = grpc_byte_buffer_reader_readall(&r);
      grpc_byte_buffer_reader_destroy(&r);
      size_t n = GRPC_SLICE_LENGTH(all);
      *ret_reply = malloc(n ? n : 1);
      if (*ret_reply) {
        memcpy(*ret_reply, GRPC_SLICE_START_PTR(all), n);
        *ret_len = n;
      } else {
        rc = qdp__err_nomem("copying a reply");
      }
      grpc_slice_unref(all);
    }
  }
  if (recv) {
    grpc_byte_buffer_destroy(recv);
  }
  return qdp__call_end(&k, rc);
}
