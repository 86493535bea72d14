/* config.c — the option table: every option's row, lookups by name, setting a value with its
 * source, the defaults, and config_check, the checks across options. The values' parsers are in
 * config_parse.c, the file, environment and command line in config_sources.c, --print-config and
 * --help in config_print.c.
 */
#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "config_internal.h"
#include "log.h"
#include "qdp_limits.h"

#define OPT(n, t, d, lo, hi, u, rt, alias, doc) \
  { #n, t, d, lo, hi, 0.0, 0.0, u, rt, alias, doc, offsetof(struct config, n) }
#define DOPT(n, d, lo, hi, u, rt, doc) \
  { #n, CONFIG_DOUBLE, d, 0, 0, lo, hi, u, rt, NULL, doc, offsetof(struct config, n) }

/* Limits worth a comment:
 *  - max_message_bytes stops at 2 GiB - 1 because gRPC takes the receive limit as an int.
 *  - max_qubits stops at 60 (the planner's hard ceiling: 2^60 complex64 amplitudes are 2^63 B).
 *  - fetch_chunk defaults to 1 MiB: large enough to amortize a message's overhead, far below a
 *    default client's 4 MiB receive limit.
 *  - max_upload_bytes 1 GiB and upload_budget 4 GiB bound the host memory uploads in flight may
 *    take; inline inputs are bounded by max_message_bytes. */
static const struct config_option options[] = {
    OPT(config, CONFIG_STRING, CONFIG_DEFAULT_PATH, 0, CONFIG_STR_MAX - 1, "path", false, NULL,
        "configuration file read before the environment and the command line"),
    OPT(socket, CONFIG_STRING, "", 0, 107, "path", false, NULL,
        "Unix socket; empty: $RUNTIME_DIRECTORY/qdpd.sock, /run/qdp/qdpd.sock (root) or "
        "$XDG_RUNTIME_DIR/qdp/qdpd.sock"),
    OPT(socket_mode, CONFIG_MODE, "0660", 0, 0777, "mode", false, NULL,
        "permission bits of the Unix socket (octal); whoever may connect is a client"),
    OPT(socket_group, CONFIG_STRING, "", 0, 63, "group", false, NULL,
        "group of the Unix socket (name or number); empty: the daemon's own group"),
    OPT(tcp, CONFIG_STRING, "", 0, CONFIG_STR_MAX - 1, "host:port", false, NULL,
        "also listen on TCP at HOST:PORT (port 0 picks one); needs tcp_token or tcp_tokens_file; "
        "empty: TCP off"),
    OPT(tcp_token, CONFIG_STRING, "", 0, CONFIG_STR_MAX - 1, "text", false, "QDP_TOKEN",
        "a bearer token for TCP clients ('authorization: Bearer <token>'), principal 'tcp'"),
    OPT(tcp_tokens_file, CONFIG_STRING, "", 0, CONFIG_STR_MAX - 1, "path", false, NULL,
        "file of TCP bearer tokens, one 'PRINCIPAL TOKEN' per line; each principal is an identity"),
    OPT(tcp_plaintext, CONFIG_BOOL, "no", 0, 1, "bool", false, NULL,
        "let tcp listen without TLS: bearer tokens and data then cross the network in clear "
        "text (a warning is logged); only on a network every host of which is trusted"),
    OPT(tcp_tls_cert, CONFIG_STRING, "", 0, CONFIG_STR_MAX - 1, "path", true, NULL,
        "TLS on tcp: the server's certificate chain (PEM), leaf first; re-read on SIGHUP"),
    OPT(tcp_tls_key, CONFIG_STRING, "", 0, CONFIG_STR_MAX - 1, "path", true, NULL,
        "TLS on tcp: the private key (PEM) of tcp_tls_cert; re-read on SIGHUP"),
    OPT(tcp_tls_client_ca, CONFIG_STRING, "", 0, CONFIG_STR_MAX - 1, "path", true, NULL,
        "mutual TLS: CA certificates (PEM) that TCP clients' certificates must chain to; a "
        "client is then principal 'x509:<subject>' unless it presents a token; empty: no "
        "client certificates; re-read on SIGHUP"),
    OPT(tcp_node_paths, CONFIG_BOOL, "no", 0, 1, "bool", false, NULL,
        "let TCP clients read .npy files beneath input_dir and Export beneath export_dir"),
    OPT(metrics_listen, CONFIG_STRING, "", 0, CONFIG_STR_MAX - 1, "host:port", false, NULL,
        "serve Prometheus metrics, /healthz and /readyz over HTTP at HOST:PORT (127.0.0.1:9464; "
        "port 0 picks one); counts only, no states; empty: off"),
    OPT(input_dir, CONFIG_STRING, "", 0, CONFIG_STR_MAX - 1, "path", false, NULL,
        ".npy inputs named by path must lie beneath this folder (also files Unix clients hand "
        "over); empty: no folder (TCP clients then name none)"),
    OPT(export_dir, CONFIG_STRING, "", 0, CONFIG_STR_MAX - 1, "path", false, NULL,
        "Export writes only beneath this folder (also files Unix clients hand over); empty: no "
        "folder (TCP clients then export nowhere)"),
    OPT(devices, CONFIG_STRING, "auto", 1, CONFIG_STR_MAX - 1, "list", false, NULL,
        "devices to own: 'auto' (all GPUs, else cpu:1), 'cpu:N', GPU ordinals '0,1', or "
        "'local-rank' (one GPU per rank: the rank's index on its node)"),
    OPT(device_budget, CONFIG_BYTES, "0", 0, UINT64_MAX, "bytes", false, NULL,
        "bytes qdp may hold per device; 0: mem_fraction of the device's free memory at start"),
    DOPT(mem_fraction, QDP_STRINGIFY(QDP_MEM_FRACTION_DEFAULT), QDP_MEM_FRACTION_MIN,
         QDP_MEM_FRACTION_MAX, "fraction", false,
         "share of each device's free memory at start used as its budget when device_budget is 0"),
    OPT(staging_bytes, CONFIG_BYTES, "0", 0, UINT64_MAX, "bytes", false, NULL,
        "host-input staging buffer per device; 0: the backend's default"),
    OPT(copy_threads, CONFIG_U64, "0", 0, 32, "count", false, NULL,
        "threads per GPU that copy host input that is not page-locked (a .npy file, shared "
        "memory) into the staging; 0: this process's CPUs shared among the GPUs, at most 16"),
    OPT(host_collectives, CONFIG_BOOL, "no", 0, 1, "bool", false, NULL,
        "reduce sharded norms on the host even where NCCL could, and keep a world's ranks out of "
        "one NCCL group (the fallback, for comparison)"),
    OPT(legacy_ipc_views, CONFIG_BOOL, "no", 0, 1, "bool", false, NULL,
        "hand zero-copy views out as CUDA IPC handles (cudaMalloc'd states), as daemons before "
        "descriptor views did, rather than as file descriptors over the socket; those do not "
        "cross PID namespaces"),
    OPT(nccl_exchange, CONFIG_BOOL, "no", 0, 1, "bool", false, NULL,
        "swap iqp's global-bit stages over NCCL even between GPUs that can read each other "
        "directly (for comparison)"),
    OPT(store_budget, CONFIG_BYTES, "0", 0, UINT64_MAX, "bytes", false, NULL,
        "bytes all states together may hold; 0: only the device budgets apply"),
    OPT(client_budget, CONFIG_BYTES, "0", 0, UINT64_MAX, "bytes", false, NULL,
        "bytes the states of one client may hold; 0: no per-client limit"),
    OPT(max_states, CONFIG_U64, "4096", 1, UINT32_MAX, "count", false, NULL,
        "states held at once, all clients together"),
    OPT(max_client_states, CONFIG_U64, "1024", 1, UINT32_MAX, "count", false, NULL,
        "states one client may hold at once"),
    OPT(max_regions, CONFIG_U64, "64", 1, UINT32_MAX, "count", false, NULL,
        "shared-memory input regions registered at once, all clients together"),
    OPT(max_client_regions, CONFIG_U64, "16", 0, UINT32_MAX, "count", false, NULL,
        "regions one client may have registered at once (within max_regions); 0: no "
        "per-client limit"),
    OPT(default_ttl, CONFIG_SECONDS, "3600", 0, UINT32_MAX, "seconds", false, NULL,
        "lifetime of a state whose request asks for none; 0: no expiry"),
    OPT(max_ttl, CONFIG_SECONDS, "86400", 0, UINT32_MAX, "seconds", false, NULL,
        "cap on any state's lifetime; 0: no cap"),
    OPT(expire_interval, CONFIG_SECONDS, "10", 1, 3600, "seconds", false, NULL,
        "how often states past their lifetime are released"),
    OPT(lease_grace, CONFIG_SECONDS, "30", 0, 86400, "seconds", false, NULL,
        "how long a view lease or registered region outlives its exited client process"),
    OPT(max_sessions, CONFIG_U64, "4096", 0, UINT32_MAX, "count", false, NULL,
        "sessions open at once, all clients together (OpenSession); 0: no limit"),
    OPT(max_client_sessions, CONFIG_U64, "64", 0, UINT32_MAX, "count", false, NULL,
        "sessions one client may have open at once; 0: no per-client limit"),
    OPT(session_max_heartbeat, CONFIG_SECONDS, "3600", 1, 86400, "seconds", false, NULL,
        "the longest heartbeat timeout a session may ask for"),
    OPT(max_qubits, CONFIG_U64, "40", 1, 60, "count", true, NULL, "qubits one request may ask for"),
    OPT(max_batch, CONFIG_U64, "1048576", 1, UINT64_C(1) << 40, "count", true, NULL,
        "samples one request may carry"),
    OPT(max_message_bytes, CONFIG_BYTES, "64Mi", 4 * KI, INT_MAX, "bytes", false, NULL,
        "largest gRPC message accepted (inline inputs travel in one)"),
    OPT(max_upload_bytes, CONFIG_BYTES, "1Gi", 0, UINT64_MAX, "bytes", true, NULL,
        "largest input one EncodeUpload may send"),
    OPT(upload_budget, CONFIG_BYTES, "4Gi", 0, UINT64_MAX, "bytes", true, NULL,
        "host memory all uploads in flight together may hold"),
    OPT(client_upload_budget, CONFIG_BYTES, "1Gi", 0, UINT64_MAX, "bytes", true, NULL,
        "host memory the uploads in flight of one client may hold"),
    OPT(upload_idle_timeout, CONFIG_SECONDS, "30", 1, 86400, "seconds", true, NULL,
        "an upload that sends nothing for this long is cancelled and its memory freed"),
    OPT(fetch_chunk, CONFIG_BYTES, "1Mi", 4 * KI, 64 * MI, "bytes", true, NULL,
        "Fetch chunk size when the request gives none"),
    OPT(workers, CONFIG_U64, "4", 1, 256, "count", false, NULL,
        "worker threads for encode, fetch and export jobs (concurrent jobs)"),
    OPT(shutdown_timeout, CONFIG_SECONDS, "30", 0, 86400, "seconds", false, NULL,
        "on SIGTERM, how long calls in flight may finish before they are cancelled; 0: no limit"),
    OPT(rank_timeout, CONFIG_SECONDS, "10", 1, 3600, "seconds", false, NULL,
        "multi-rank worlds: how long a rank may take to answer before its jobs fail (UNAVAILABLE) "
        "and it is marked lost"),
    OPT(log_level, CONFIG_LEVEL, "info", 3, 7, "level", true, NULL,
        "err, warning, notice, info or debug"),
    OPT(log_format, CONFIG_LOG_FORMAT, "text", 0, 1, "format", true, NULL,
        "text (a timestamped line, or the journal's priority prefix under journald) or json (one "
        "object per line: ts, level, ident, rank, device, subsys, msg)"),
    OPT(log_subsys, CONFIG_STRING, "", 0, CONFIG_STR_MAX - 1, "list", true, NULL,
        "show info and debug lines only of these comma-separated subsystems (" LOG_SUBSYSTEMS
        "); empty: all"),
    OPT(watchdog, CONFIG_BOOL, "yes", 0, 1, "bool", false, NULL,
        "ping systemd's watchdog (WATCHDOG=1) when the unit sets WatchdogSec"),
};

#define NOPTIONS (sizeof options / sizeof options[0])
_Static_assert(NOPTIONS <= CONFIG_MAX_OPTIONS, "raise CONFIG_MAX_OPTIONS");

size_t config_option_count(void) {
  return NOPTIONS;
}

const struct config_option *config_option_at(size_t i) {
  return i < NOPTIONS ? &options[i] : NULL;
}

/* Option names compare with '-' and '_' as the same character. */
static bool name_eq(const char *a, const char *b, size_t blen) {
  size_t i = 0;
  for (; i < blen && a[i]; i++) {
    char x = a[i] == '-' ? '_' : a[i];
    char y = b[i] == '-' ? '_' : b[i];
    if (x != y) {
      return false;
    }
  }
  return i == blen && a[i] == '\0';
}

const struct config_option *config_find_n(const char *name, size_t len) {
  for (size_t i = 0; i < NOPTIONS; i++) {
    if (name_eq(options[i].name, name, len)) {
      return &options[i];
    }
  }
  return NULL;
}

const struct config_option *config_find(const char *name) {
  return config_find_n(name, strlen(name));
}

size_t config_option_index(const struct config_option *o) {
  return (size_t)(o - options);
}

void config_env_name(const struct config_option *o, char *buf, size_t len) {
  size_t j = snprintf(buf, len, "QDP_");
  for (size_t i = 0; o->name[i] && j + 1 < len; i++, j++) {
    buf[j] = (char)toupper((unsigned char)o->name[i]);
  }
  buf[j < len ? j : len - 1] = '\0';
}

const char *config_source_name(enum config_source s) {
  switch (s) {
  case CONFIG_SRC_DEFAULT:
    return "default";
  case CONFIG_SRC_FILE:
    return "file";
  case CONFIG_SRC_ENV:
    return "environment";
  case CONFIG_SRC_ARG:
    return "command line";
  }
  return "unknown";
}

/* ---- setting values ----------------------------------------------------------------------------
 */

/* The parsers write their result only on success, so they store straight into the field. */
static qdp_status set_value(struct config *c, const struct config_option *o, const char *value,
                            struct qdp_error *reterr) {
  char *p = (char *)c + o->offset;
  switch (o->type) {
  case CONFIG_STRING: {
    size_t n = strlen(value);
    if (n < o->min || n > o->max) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, o->name,
                           "%s is %zu characters long; it must have %" PRIu64 " to %" PRIu64,
                           o->name, n, o->min, o->max);
    }
    memcpy(p, value, n + 1);
    return QDP_OK;
  }
  case CONFIG_BOOL:
    return config_parse_bool(value, o->name, (bool *)p, reterr);
  case CONFIG_U64:
    return config_parse_u64(value, o->min, o->max, o->name, (uint64_t *)p, reterr);
  case CONFIG_MODE:
    return config_parse_mode(value, o->name, (uint64_t *)p, reterr);
  case CONFIG_BYTES:
    return config_parse_bytes(value, o->min, o->max, o->name, (uint64_t *)p, reterr);
  case CONFIG_SECONDS:
    return config_parse_seconds(value, o->min, o->max, o->name, (uint64_t *)p, reterr);
  case CONFIG_DOUBLE:
    return config_parse_double(value, o->dmin, o->dmax, o->name, (double *)p, reterr);
  case CONFIG_LEVEL:
    return config_parse_level(value, o->name, (int *)p, reterr);
  case CONFIG_LOG_FORMAT:
    return config_parse_log_format(value, o->name, (int *)p, reterr);
  }
  return QDP_OK;
}

static void set_origin(struct config *c, const struct config_option *o, enum config_source src,
                       const char *origin) {
  size_t i = config_option_index(o);
  c->src[i] = src;
  snprintf(c->origin[i], sizeof c->origin[i], "%s", origin ? origin : "");
}

void config_defaults(struct config *c) {
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < NOPTIONS; i++) {
    qdp_status rc = set_value(c, &options[i], options[i].def, NULL);
    /* A default the table itself cannot parse is a programming error caught by the unit test. */
    (void)rc;
    set_origin(c, &options[i], CONFIG_SRC_DEFAULT, NULL);
  }
}

qdp_status config_set(struct config *c, const char *name, const char *value, enum config_source src,
                      const char *origin, struct qdp_error *reterr) {
  const struct config_option *o = config_find(name);
  if (!o) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, name,
                         "unknown option '%s' (qdpd --help lists them)", name);
  }
  qdp_status rc = set_value(c, o, value, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  set_origin(c, o, src, origin);
  return QDP_OK;
}

qdp_status config_check(const struct config *c, struct qdp_error *reterr) {
  if (c->max_ttl != 0 && c->default_ttl > c->max_ttl) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "default_ttl",
                         "default_ttl = %" PRIu64 " s is above max_ttl = %" PRIu64 " s",
                         c->default_ttl, c->max_ttl);
  }
  if (c->max_ttl != 0 && c->default_ttl == 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "default_ttl",
                         "default_ttl = 0 (no expiry) contradicts max_ttl = %" PRIu64
                         " s; set default_ttl to at most max_ttl, or max_ttl = 0",
                         c->max_ttl);
  }
  if (c->max_client_states > c->max_states) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "max_client_states",
                         "max_client_states = %" PRIu64 " is above max_states = %" PRIu64,
                         c->max_client_states, c->max_states);
  }
  if (c->fetch_chunk + 64 > c->max_message_bytes) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "fetch_chunk",
                         "fetch_chunk = %" PRIu64
                         " B plus a 64 B header does not fit "
                         "max_message_bytes = %" PRIu64 " B",
                         c->fetch_chunk, c->max_message_bytes);
  }
  if (c->max_upload_bytes > c->upload_budget) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "max_upload_bytes",
                         "max_upload_bytes = %" PRIu64 " B is above upload_budget = %" PRIu64 " B",
                         c->max_upload_bytes, c->upload_budget);
  }
  if (c->tcp[0] && !c->tcp_token[0] && !c->tcp_tokens_file[0] && !c->tcp_tls_client_ca[0]) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "tcp",
                         "tcp = '%s' needs tcp_token, tcp_tokens_file or tcp_tls_client_ca: a TCP "
                         "caller's identity is the principal of the token or the client "
                         "certificate it presents",
                         c->tcp);
  }
  if (!c->tcp_tls_cert[0] != !c->tcp_tls_key[0]) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT,
                         c->tcp_tls_cert[0] ? "tcp_tls_key" : "tcp_tls_cert",
                         "tcp_tls_cert and tcp_tls_key go together: %s is set, %s is not",
                         c->tcp_tls_cert[0] ? "tcp_tls_cert" : "tcp_tls_key",
                         c->tcp_tls_cert[0] ? "tcp_tls_key" : "tcp_tls_cert");
  }
  if (c->tcp_tls_client_ca[0] && !c->tcp_tls_cert[0]) {
    return qdp_error_set(
        reterr, QDP_ERR_INVALID_ARGUMENT, "tcp_tls_client_ca",
        "tcp_tls_client_ca (mutual TLS) needs the server's own tcp_tls_cert and tcp_tls_key");
  }
  if (c->tcp_tls_cert[0] && !c->tcp[0]) {
    return qdp_error_set(
        reterr, QDP_ERR_INVALID_ARGUMENT, "tcp_tls_cert",
        "tcp_tls_cert is set but tcp is not: TLS is for the TCP listener (the Unix "
        "socket needs none)");
  }
  if (c->tcp_tls_cert[0] && c->tcp_plaintext) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "tcp_plaintext",
                         "tcp_plaintext = yes contradicts tcp_tls_cert: choose TLS or clear text");
  }
  if (c->tcp[0] && !c->tcp_tls_cert[0] && !c->tcp_plaintext) {
    return qdp_error_set(
        reterr, QDP_ERR_INVALID_ARGUMENT, "tcp",
        "tcp = '%s' without TLS would carry bearer tokens and data in clear "
        "text: set tcp_tls_cert and tcp_tls_key (TLS), or tcp_plaintext = yes to accept "
        "clear text on a trusted network",
        c->tcp);
  }
  if (c->client_upload_budget > c->upload_budget) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "client_upload_budget",
                         "client_upload_budget = %" PRIu64 " B is above upload_budget = %" PRIu64
                         " B",
                         c->client_upload_budget, c->upload_budget);
  }
  if (c->tcp[0]) {
    const char *colon = strrchr(c->tcp, ':');
    uint64_t port;
    if (!colon || colon == c->tcp ||
        config_parse_u64(colon + 1, 0, 65535, "tcp", &port, NULL) != QDP_OK) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "tcp",
                           "tcp = '%s' is not HOST:PORT with a port in [0, 65535]", c->tcp);
    }
  }
  /* Every name a subsystem: a name that matches none would hide every line without a word. */
  for (const char *p = c->log_subsys; *c->log_subsys; p++) {
    size_t n = strcspn(p, ",");
    if (!log_subsys_known(p, n)) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "log_subsys",
                           "log_subsys = '%s' names '%.*s', which is no subsystem: list some of "
                           "%s, separated by commas without spaces, or leave it empty for all",
                           c->log_subsys, (int)n, p, LOG_SUBSYSTEMS);
    }
    p += n;
    if (!*p) {
      break;
    }
  }
  /* Paths that, when set, must be absolute. */
  const struct {
    const char *name, *value;
  } paths[] = {{"input_dir", c->input_dir},
               {"export_dir", c->export_dir},
               {"socket", c->socket},
               {"tcp_tokens_file", c->tcp_tokens_file},
               {"tcp_tls_cert", c->tcp_tls_cert},
               {"tcp_tls_key", c->tcp_tls_key},
               {"tcp_tls_client_ca", c->tcp_tls_client_ca}};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    if (paths[i].value[0] && paths[i].value[0] != '/') {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, paths[i].name,
                           "%s = '%s' is not an absolute path", paths[i].name, paths[i].value);
    }
  }
  return QDP_OK;
}
