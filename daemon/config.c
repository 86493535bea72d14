#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "qdp_limits.h"

#define KI 1024ull
#define MI (1024ull * KI)
#define GI (1024ull * MI)
#define TI (1024ull * GI)

/* The config file is a few kilobytes; anything past this is not a config file. */
#define CONFIG_FILE_MAX (1u << 20)

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
    OPT(default_ttl, CONFIG_SECONDS, "3600", 0, UINT32_MAX, "seconds", false, NULL,
        "lifetime of a state whose request asks for none; 0: no expiry"),
    OPT(max_ttl, CONFIG_SECONDS, "86400", 0, UINT32_MAX, "seconds", false, NULL,
        "cap on any state's lifetime; 0: no cap"),
    OPT(expire_interval, CONFIG_SECONDS, "10", 1, 3600, "seconds", false, NULL,
        "how often states past their lifetime are released"),
    OPT(lease_grace, CONFIG_SECONDS, "30", 0, 86400, "seconds", false, NULL,
        "how long a view lease or registered region outlives its exited client process"),
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

static const struct config_option *find_n(const char *name, size_t len) {
  for (size_t i = 0; i < NOPTIONS; i++) {
    if (name_eq(options[i].name, name, len)) {
      return &options[i];
    }
  }
  return NULL;
}

const struct config_option *config_find(const char *name) {
  return find_n(name, strlen(name));
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

/* ---- number parsers ----------------------------------------------------------------------------
 */

/* Digits only: strtoull alone would take a sign, leading blanks and "0x". */
static qdp_status digits(const char *s, size_t *ret_len, uint64_t *ret, const char *field,
                         const char *whole, struct qdp_error *reterr) {
  uint64_t v = 0;
  size_t i = 0;
  for (; isdigit((unsigned char)s[i]); i++) {
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                           "%s = '%s' does not fit 64 bits", field, whole);
    }
    v = v * 10 + d;
  }
  if (i == 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s = '%s' is not a non-negative integer", field, whole);
  }
  *ret_len = i;
  *ret = v;
  return QDP_OK;
}

static qdp_status in_range(uint64_t v, uint64_t min, uint64_t max, const char *field,
                           const char *whole, struct qdp_error *reterr) {
  if (v < min || v > max) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s = '%s' (%" PRIu64 ") is outside [%" PRIu64 ", %" PRIu64 "]", field,
                         whole, v, min, max);
  }
  return QDP_OK;
}

qdp_status config_parse_u64(const char *s, uint64_t min, uint64_t max, const char *field,
                            uint64_t *ret, struct qdp_error *reterr) {
  uint64_t v;
  size_t n;
  qdp_status rc = digits(s, &n, &v, field, s, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  if (s[n] != '\0') {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s = '%s' has trailing characters after the number", field, s);
  }
  rc = in_range(v, min, max, field, s, reterr);
  if (rc == QDP_OK) {
    *ret = v;
  }
  return rc;
}

qdp_status config_parse_mode(const char *s, const char *field, uint64_t *ret,
                             struct qdp_error *reterr) {
  uint64_t v = 0;
  size_t n = 0;
  for (; s[n] >= '0' && s[n] <= '7' && n < 5; n++) {
    v = v * 8 + (uint64_t)(s[n] - '0');
  }
  if (n == 0 || s[n] != '\0' || v > 0777) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s = '%s' is not permission bits in octal (0000 to 0777, e.g. 0660)",
                         field, s);
  }
  *ret = v;
  return QDP_OK;
}

static qdp_status scaled(const char *s, const char *suffix, uint64_t v, uint64_t mul, uint64_t min,
                         uint64_t max, const char *field, uint64_t *ret, struct qdp_error *reterr) {
  (void)suffix;
  if (mul != 0 && v > UINT64_MAX / mul) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field, "%s = '%s' does not fit 64 bits",
                         field, s);
  }
  qdp_status rc = in_range(v * mul, min, max, field, s, reterr);
  if (rc == QDP_OK) {
    *ret = v * mul;
  }
  return rc;
}

qdp_status config_parse_bytes(const char *s, uint64_t min, uint64_t max, const char *field,
                              uint64_t *ret, struct qdp_error *reterr) {
  static const struct {
    const char *sfx;
    uint64_t mul;
  } units[] = {
      {"", 1},    {"B", 1},    {"K", 1000ull},          {"KB", 1000ull},
      {"Ki", KI}, {"KiB", KI}, {"M", 1000000ull},       {"MB", 1000000ull},
      {"Mi", MI}, {"MiB", MI}, {"G", 1000000000ull},    {"GB", 1000000000ull},
      {"Gi", GI}, {"GiB", GI}, {"T", 1000000000000ull}, {"TB", 1000000000000ull},
      {"Ti", TI}, {"TiB", TI},
  };
  uint64_t v;
  size_t n;
  qdp_status rc = digits(s, &n, &v, field, s, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  const char *sfx = s + n;
  while (*sfx == ' ') {
    sfx++;
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcmp(sfx, units[i].sfx) == 0) {
      return scaled(s, sfx, v, units[i].mul, min, max, field, ret, reterr);
    }
  }
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                       "%s = '%s' has an unknown size suffix '%s' (use B, K, M, G, T or Ki, Mi, "
                       "Gi, Ti)",
                       field, s, sfx);
}

qdp_status config_parse_seconds(const char *s, uint64_t min, uint64_t max, const char *field,
                                uint64_t *ret, struct qdp_error *reterr) {
  uint64_t v;
  size_t n;
  qdp_status rc = digits(s, &n, &v, field, s, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  const char *sfx = s + n;
  uint64_t mul;
  if (strcmp(sfx, "") == 0 || strcmp(sfx, "s") == 0) {
    mul = 1;
  } else if (strcmp(sfx, "m") == 0 || strcmp(sfx, "min") == 0) {
    mul = 60;
  } else if (strcmp(sfx, "h") == 0) {
    mul = 3600;
  } else if (strcmp(sfx, "d") == 0) {
    mul = 86400;
  } else {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s = '%s' has an unknown time suffix '%s' (use s, m, h or d)", field, s,
                         sfx);
  }
  return scaled(s, sfx, v, mul, min, max, field, ret, reterr);
}

qdp_status config_parse_double(const char *s, double min, double max, const char *field,
                               double *ret, struct qdp_error *reterr) {
  char *end = NULL;
  errno = 0;
  if (!*s || isspace((unsigned char)*s)) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field, "%s = '%s' is not a number",
                         field, s);
  }
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field, "%s = '%s' is not a number",
                         field, s);
  }
  if (v < min || v > max) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field, "%s = '%s' is outside [%g, %g]",
                         field, s, min, max);
  }
  *ret = v;
  return QDP_OK;
}

qdp_status config_parse_bool(const char *s, const char *field, bool *ret,
                             struct qdp_error *reterr) {
  static const char *yes[] = {"1", "yes", "true", "on"};
  static const char *no[] = {"0", "no", "false", "off"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0) {
      *ret = true;
      return QDP_OK;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *ret = false;
      return QDP_OK;
    }
  }
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                       "%s = '%s' is not a boolean (yes/no, true/false, on/off, 1/0)", field, s);
}

qdp_status config_parse_level(const char *s, const char *field, int *ret,
                              struct qdp_error *reterr) {
  static const struct {
    const char *name;
    int level;
  } names[] = {
      {"err", 3},   {"error", 3}, {"warning", 4}, {"warn", 4}, {"notice", 5}, {"info", 6},
      {"debug", 7}, {"3", 3},     {"4", 4},       {"5", 5},    {"6", 6},      {"7", 7},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strcasecmp(s, names[i].name) == 0) {
      *ret = names[i].level;
      return QDP_OK;
    }
  }
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                       "%s = '%s' is not a log level (err, warning, notice, info, debug or 3..7)",
                       field, s);
}

qdp_status config_parse_log_format(const char *s, const char *field, int *ret,
                                   struct qdp_error *reterr) {
  if (strcasecmp(s, "text") == 0 || strcasecmp(s, "json") == 0) {
    *ret = strcasecmp(s, "json") == 0 ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT;
    return QDP_OK;
  }
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                       "%s = '%s' is not a log format (text or json)", field, s);
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
  size_t i = (size_t)(o - options);
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

/* ---- the file ----------------------------------------------------------------------------------
 */

static const char *trim(char *s, size_t *len) {
  size_t n = *len;
  while (n > 0 && isspace((unsigned char)*s)) {
    s++;
    n--;
  }
  while (n > 0 && isspace((unsigned char)s[n - 1])) {
    n--;
  }
  *len = n;
  return s;
}

qdp_status config_parse_text(struct config *c, const char *text, size_t len, const char *origin,
                             struct qdp_error *reterr) {
  size_t lineno = 0;
  size_t pos = 0;
  while (pos < len) {
    lineno++;
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
    char line[1024];
    if (n >= sizeof line) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                           "%s:%zu: line is %zu bytes long; the limit is %zu", origin, lineno, n,
                           sizeof line - 1);
    }
    memcpy(line, text + pos, n);
    line[n] = '\0';
    pos += n + (nl ? 1 : 0);
    if (memchr(line, '\0', n)) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL, "%s:%zu: line holds a NUL byte",
                           origin, lineno);
    }

    size_t ln = n;
    char *l = (char *)trim(line, &ln);
    l[ln] = '\0';
    if (ln == 0 || l[0] == '#') {
      continue;
    }
    char *eq = strchr(l, '=');
    if (!eq) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                           "%s:%zu: expected 'key = value', got '%s'", origin, lineno, l);
    }
    size_t kn = (size_t)(eq - l);
    char *key = (char *)trim(l, &kn);
    key[kn] = '\0';
    size_t vn = strlen(eq + 1);
    char *val = (char *)trim(eq + 1, &vn);
    val[vn] = '\0';
    if (vn >= 2 && val[0] == '"' && val[vn - 1] == '"') {
      val[vn - 1] = '\0';
      val++;
    }
    char where[80];
    snprintf(where, sizeof where, "%s:%zu", origin, lineno);
    if (strcmp(key, "config") == 0) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "config",
                           "%s: 'config' cannot be set inside a config file", where);
    }
    qdp_status rc = config_set(c, key, val, CONFIG_SRC_FILE, where, reterr);
    if (rc != QDP_OK) {
      qdp_error_prefix(reterr, "%s", where);
      return rc;
    }
  }
  return QDP_OK;
}

qdp_status config_load_file(struct config *c, const char *path, bool must_exist,
                            struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  char *buf = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT && !must_exist) {
      return QDP_OK;
    }
    int e = errno;
    rc = qdp_error_set_at(reterr, e == ENOENT ? QDP_ERR_NOT_FOUND : QDP_ERR_SYSTEM, -1, e,
                          "cannot open config file '%s': %s", path, strerror(e));
    goto out;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > CONFIG_FILE_MAX) {
    rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "config",
                       "config file '%s' is not a regular file of at most %u bytes", path,
                       CONFIG_FILE_MAX);
    goto out;
  }
  buf = malloc((size_t)st.st_size + 1);
  if (!buf) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, "config",
                       "no memory for the %lld bytes of config file '%s'", (long long)st.st_size,
                       path);
    goto out;
  }
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r <= 0) {
      int e = r < 0 ? errno : EIO;
      rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, e, "cannot read config file '%s': %s", path,
                            strerror(e));
      goto out;
    }
    got += (size_t)r;
  }
  rc = config_parse_text(c, buf, got, path, reterr);
out:
  free(buf);
  if (fd >= 0) {
    close(fd);
  }
  return rc;
}

/* ---- environment and command line --------------------------------------------------------------
 */

static void env_name(const struct config_option *o, char *buf, size_t len) {
  size_t j = snprintf(buf, len, "QDP_");
  for (size_t i = 0; o->name[i] && j + 1 < len; i++, j++) {
    buf[j] = (char)toupper((unsigned char)o->name[i]);
  }
  buf[j < len ? j : len - 1] = '\0';
}

static const char *env_lookup(char *const *envp, const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; envp && envp[i]; i++) {
    if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=') {
      return envp[i] + n + 1;
    }
  }
  return NULL;
}

qdp_status config_apply_env(struct config *c, char *const *envp, struct qdp_error *reterr) {
  for (size_t i = 0; i < NOPTIONS; i++) {
    const struct config_option *o = &options[i];
    if (strcmp(o->name, "config") == 0) {
      continue; /* read by config_load before the file */
    }
    char name[64];
    env_name(o, name, sizeof name);
    const char *v = env_lookup(envp, name);
    const char *which = name;
    if (!v && o->env_alias) {
      v = env_lookup(envp, o->env_alias);
      which = o->env_alias;
    }
    if (v) {
      qdp_status rc = config_set(c, o->name, v, CONFIG_SRC_ENV, which, reterr);
      if (rc != QDP_OK) {
        qdp_error_prefix(reterr, "environment %s", which);
        return rc;
      }
    }
  }
  return QDP_OK;
}

qdp_status config_apply_args(struct config *c, int argc, char *const *argv,
                             enum config_action *ret_action, struct qdp_error *reterr) {
  enum config_action action = CONFIG_RUN;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      action = CONFIG_HELP;
      continue;
    }
    if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
      action = action == CONFIG_RUN ? CONFIG_VERSION : action;
      continue;
    }
    if (strcmp(a, "--print-config") == 0) {
      action = action == CONFIG_RUN ? CONFIG_PRINT : action;
      continue;
    }
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                           "unexpected argument '%s' (options are --name value or --name=value)",
                           a);
    }
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    const struct config_option *o = find_n(name, nlen);
    if (!o) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                           "unknown option '%.*s' (qdpd --help lists them)", (int)(nlen + 2), a);
    }
    const char *value;
    if (eq) {
      value = eq + 1;
    } else if (o->type == CONFIG_BOOL) {
      /* A bare boolean flag means yes; a following boolean word is its value. */
      bool b;
      if (i + 1 < argc && config_parse_bool(argv[i + 1], o->name, &b, NULL) == QDP_OK) {
        value = argv[++i];
      } else {
        value = "yes";
      }
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, o->name, "option '--%s' needs a value",
                           o->name);
    }
    qdp_status rc = config_set(c, o->name, value, CONFIG_SRC_ARG, NULL, reterr);
    if (rc != QDP_OK) {
      return rc;
    }
  }
  if (ret_action) {
    *ret_action = action;
  }
  return QDP_OK;
}

qdp_status config_load(struct config *c, int argc, char *const *argv, char *const *envp,
                       enum config_action *ret_action, struct qdp_error *reterr) {
  config_defaults(c);
  /* The command line first, on a scratch copy, only to learn --config: the file must be read
   * before the environment and the command line so that they override it. */
  struct config *scratch = malloc(sizeof *scratch);
  if (!scratch) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no memory for the configuration (%zu bytes)", sizeof *scratch);
  }
  config_defaults(scratch);
  enum config_action action = CONFIG_RUN;
  qdp_status rc = config_apply_args(scratch, argc, argv, &action, reterr);
  bool must_exist = false;
  if (rc == QDP_OK) {
    size_t ci = (size_t)(config_find("config") - options);
    const char *env_cfg = env_lookup(envp, "QDP_CONFIG");
    if (scratch->src[ci] == CONFIG_SRC_ARG) {
      rc = config_set(c, "config", scratch->config, CONFIG_SRC_ARG, NULL, reterr);
      must_exist = true;
    } else if (env_cfg) {
      rc = config_set(c, "config", env_cfg, CONFIG_SRC_ENV, "QDP_CONFIG", reterr);
      must_exist = true;
    }
  }
  free(scratch);
  if (rc != QDP_OK) {
    return rc;
  }
  /* An empty --config means: read no file at all. */
  if (c->config[0]) {
    rc = config_load_file(c, c->config, must_exist, reterr);
    if (rc != QDP_OK) {
      return rc;
    }
  }
  rc = config_apply_env(c, envp, reterr);
  if (rc == QDP_OK) {
    rc = config_apply_args(c, argc, argv, &action, reterr);
  }
  if (rc == QDP_OK && action == CONFIG_RUN) {
    rc = config_check(c, reterr);
  }
  if (rc == QDP_OK && ret_action) {
    *ret_action = action;
  }
  return rc;
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
  if (c->tcp[0] && !c->tcp_token[0] && !c->tcp_tokens_file[0]) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "tcp",
                         "tcp = '%s' needs tcp_token or tcp_tokens_file: a TCP caller's identity "
                         "is the principal of the token it presents",
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
               {"tcp_tokens_file", c->tcp_tokens_file}};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    if (paths[i].value[0] && paths[i].value[0] != '/') {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, paths[i].name,
                           "%s = '%s' is not an absolute path", paths[i].name, paths[i].value);
    }
  }
  return QDP_OK;
}

/* ---- printing ----------------------------------------------------------------------------------
 */

void config_format_value(const struct config *c, const struct config_option *o, bool mask,
                         char *buf, size_t len) {
  const char *p = (const char *)c + o->offset;
  switch (o->type) {
  case CONFIG_STRING:
    if (mask && strcmp(o->name, "tcp_token") == 0 && p[0]) {
      snprintf(buf, len, "(set, %zu characters)", strlen(p));
    } else {
      snprintf(buf, len, "%s", p);
    }
    break;
  case CONFIG_BOOL:
    snprintf(buf, len, "%s", *(const bool *)p ? "yes" : "no");
    break;
  case CONFIG_U64:
  case CONFIG_BYTES:
  case CONFIG_SECONDS:
    snprintf(buf, len, "%" PRIu64, *(const uint64_t *)p);
    break;
  case CONFIG_MODE:
    snprintf(buf, len, "%04" PRIo64, *(const uint64_t *)p);
    break;
  case CONFIG_DOUBLE:
    snprintf(buf, len, "%g", *(const double *)p);
    break;
  case CONFIG_LEVEL: {
    static const char *names[] = {"err", "warning", "notice", "info", "debug"};
    int l = *(const int *)p;
    snprintf(buf, len, "%s", l >= 3 && l <= 7 ? names[l - 3] : "?");
    break;
  }
  case CONFIG_LOG_FORMAT:
    snprintf(buf, len, "%s", *(const int *)p == LOG_FORMAT_JSON ? "json" : "text");
    break;
  }
}

void config_print(const struct config *c, FILE *f) {
  for (size_t i = 0; i < NOPTIONS; i++) {
    char v[CONFIG_STR_MAX + 32];
    config_format_value(c, &options[i], true, v, sizeof v);
    char src[128];
    if (c->origin[i][0]) {
      snprintf(src, sizeof src, "%s %s", config_source_name(c->src[i]), c->origin[i]);
    } else {
      snprintf(src, sizeof src, "%s", config_source_name(c->src[i]));
    }
    fprintf(
        f, "%s = %s%*s# %s\n", options[i].name, v,
        (int)(strlen(v) + strlen(options[i].name) < 40 ? 40 - strlen(v) - strlen(options[i].name)
                                                       : 1),
        "", src);
  }
}

void config_help(FILE *f, const char *prog) {
  fprintf(f,
          "Usage: %s [--help] [--version] [--print-config] [--NAME VALUE | --NAME=VALUE]...\n"
          "qdpd encodes classical data into quantum state vectors on this node's devices and\n"
          "serves them over gRPC. Every option below can also be set in the config file\n"
          "(NAME = VALUE) or in the environment (QDP_NAME); the command line wins over the\n"
          "environment, which wins over the file. Sizes take K, M, G, T (x1000) or Ki, Mi, Gi,\n"
          "Ti (x1024); durations take s, m, h, d. SIGHUP re-reads options marked [runtime].\n\n",
          prog);
  for (size_t i = 0; i < NOPTIONS; i++) {
    const struct config_option *o = &options[i];
    char flag[64];
    snprintf(flag, sizeof flag, "--%s %s", o->name, o->type == CONFIG_BOOL ? "[yes|no]" : o->unit);
    char env[64];
    env_name(o, env, sizeof env);
    fprintf(f, "  %-34s %s%s\n", flag, o->doc, o->runtime ? " [runtime]" : "");
    fprintf(f, "  %-34s default: '%s'; env %s%s%s\n", "", o->def, env, o->env_alias ? " or " : "",
            o->env_alias ? o->env_alias : "");
  }
}
