/* config.h — qdpd's configuration: one table of options that drives the file parser, the QDP_*
 * environment overrides, the command-line flags, `qdpd --help` and `qdpd --print-config`.
 *
 * Every option has one row in config.c: name, type, default, range, unit, whether it may change at
 * run time (SIGHUP re-reads the file for those), and a one-line doc string. Values come, lowest
 * precedence first, from the table's default, the config file (`key = value`, `#` comments), the
 * environment (`QDP_<NAME>`) and the command line (`--name value`, `--name=value`; `-` and `_` are
 * the same in flags). Every number goes through a range-checked parser; byte values accept K, M,
 * G, T (powers of 1000) and Ki, Mi, Gi, Ti (powers of 1024), durations s, m, h, d.
 *
 * A struct config is a plain value: no allocation, copyable. Functions that take one are safe on
 * any thread as long as the struct is not written concurrently; the daemon fills it on the main
 * thread before any other thread starts.
 * Statuses: INVALID_ARGUMENT (field = option name) for a bad name or value; NOT_FOUND or
 * QDP_ERR_SYSTEM (cause = errno) when the config file cannot be read.
 */
#ifndef QDP_CONFIG_H
#define QDP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"

#define CONFIG_DEFAULT_PATH "/etc/qdp/qdpd.conf"
#define CONFIG_MAX_OPTIONS 64
#define CONFIG_STR_MAX 256

enum config_type {
  CONFIG_STRING,
  CONFIG_BOOL,
  CONFIG_U64,
  CONFIG_BYTES,   /* uint64_t bytes, with size suffixes */
  CONFIG_SECONDS, /* uint64_t seconds, with s/m/h/d suffixes */
  CONFIG_DOUBLE,
  CONFIG_MODE,  /* uint64_t permission bits, in octal */
  CONFIG_LEVEL, /* int syslog level 3..7, by name (err, warning, notice, info, debug) or number */
  CONFIG_LOG_FORMAT /* enum log_format (log.h), by name: text or json */
};

enum config_source { CONFIG_SRC_DEFAULT = 0, CONFIG_SRC_FILE, CONFIG_SRC_ENV, CONFIG_SRC_ARG };

struct config_option {
  const char *name;
  enum config_type type;
  const char *def;       /* the default, as text: parsed like any other value */
  uint64_t min, max;     /* integer types: the range; strings: max is the longest length */
  double dmin, dmax;     /* CONFIG_DOUBLE: the range */
  const char *unit;      /* for --help: "bytes", "seconds", "path", ... */
  bool runtime;          /* SIGHUP applies a changed value without a restart */
  const char *env_alias; /* a second environment name, or NULL */
  const char *doc;       /* one line */
  size_t offset;         /* of the value in struct config */
};

struct config {
  char config[CONFIG_STR_MAX];
  char socket[CONFIG_STR_MAX];
  uint64_t socket_mode;
  char socket_group[CONFIG_STR_MAX];
  char tcp[CONFIG_STR_MAX];
  char tcp_token[CONFIG_STR_MAX];
  char tcp_tokens_file[CONFIG_STR_MAX];
  bool tcp_plaintext;
  char tcp_tls_cert[CONFIG_STR_MAX];
  char tcp_tls_key[CONFIG_STR_MAX];
  char tcp_tls_client_ca[CONFIG_STR_MAX];
  bool tcp_node_paths;
  char metrics_listen[CONFIG_STR_MAX];
  char input_dir[CONFIG_STR_MAX];
  char export_dir[CONFIG_STR_MAX];
  char devices[CONFIG_STR_MAX];
  uint64_t device_budget;
  double mem_fraction;
  uint64_t staging_bytes;
  uint64_t copy_threads;
  bool host_collectives;
  bool nccl_exchange;
  bool legacy_ipc_views;
  uint64_t store_budget;
  uint64_t client_budget;
  uint64_t max_states;
  uint64_t max_client_states;
  uint64_t max_regions;
  uint64_t max_client_regions;
  uint64_t default_ttl;
  uint64_t max_ttl;
  uint64_t expire_interval;
  uint64_t lease_grace;
  uint64_t max_sessions;
  uint64_t max_client_sessions;
  uint64_t session_max_heartbeat;
  uint64_t max_qubits;
  uint64_t max_batch;
  uint64_t max_message_bytes;
  uint64_t max_upload_bytes;
  uint64_t upload_budget;
  uint64_t client_upload_budget;
  uint64_t upload_idle_timeout;
  uint64_t fetch_chunk;
  uint64_t workers;
  uint64_t shutdown_timeout;
  uint64_t rank_timeout;
  int log_level;
  int log_format; /* enum log_format */
  char log_subsys[CONFIG_STR_MAX];
  bool watchdog;

  /* Where each option's value came from, by table index; origin says which file and line or which
   * environment variable. */
  enum config_source src[CONFIG_MAX_OPTIONS];
  char origin[CONFIG_MAX_OPTIONS][80];
};

/* What the command line asked for beyond running the daemon. */
enum config_action { CONFIG_RUN = 0, CONFIG_HELP, CONFIG_PRINT, CONFIG_VERSION };

/* The table. */
size_t config_option_count(void);
const struct config_option *config_option_at(size_t i);
/* By name; `-` matches `_`. NULL if unknown. */
const struct config_option *config_find(const char *name);

/* Fills every option with its default (source "default"). */
void config_defaults(struct config *c);

/* Parses `value` for option `name` and stores it with its source and origin (origin may be NULL).
 */
qdp_status config_set(struct config *c, const char *name, const char *value, enum config_source src,
                      const char *origin, struct qdp_error *reterr);

/* Parses config-file text: one `key = value` per line, blank lines and lines starting with `#`
 * ignored, surrounding whitespace and one pair of double quotes around the value stripped.
 * `origin` (the file name) goes into error messages and each value's origin. */
qdp_status config_parse_text(struct config *c, const char *text, size_t len, const char *origin,
                             struct qdp_error *reterr);

/* Reads and parses a file. With must_exist false a missing file is not an error. */
/* The regular file at path read whole into *ret (malloc'd, NUL-terminated, *ret_len bytes; the
 * caller frees it), for the files the configuration names. 0, or the errno of what failed:
 * open's or read's, EINVAL for a file that is not regular, EFBIG for one above max bytes and
 * ENOMEM (*ret_len then its size), EIO for one that shrank while it was read. */
int config_read_file(const char *path, size_t max, char **ret, size_t *ret_len);

qdp_status config_load_file(struct config *c, const char *path, bool must_exist,
                            struct qdp_error *reterr);

/* Applies QDP_<NAME> (and each option's alias) from envp, a NULL-terminated environ array. */
qdp_status config_apply_env(struct config *c, char *const *envp, struct qdp_error *reterr);

/* Applies the command line (argv[0] skipped); sets *ret_action for --help, --version and
 * --print-config. */
qdp_status config_apply_args(struct config *c, int argc, char *const *argv,
                             enum config_action *ret_action, struct qdp_error *reterr);

/* The whole sequence: defaults, the file (--config, else QDP_CONFIG, else the default path when it
 * exists), the environment, the command line, then config_check. */
qdp_status config_load(struct config *c, int argc, char *const *argv, char *const *envp,
                       enum config_action *ret_action, struct qdp_error *reterr);

/* Cross-option checks: default_ttl <= max_ttl, tcp is HOST:PORT, fetch_chunk fits a message, ... */
qdp_status config_check(const struct config *c, struct qdp_error *reterr);

/* The effective value of option o as text (tcp_token masked when `mask`). */
void config_format_value(const struct config *c, const struct config_option *o, bool mask,
                         char *buf, size_t len);
const char *config_source_name(enum config_source s);

/* `qdpd --print-config`: every option, its value and where it came from. */
void config_print(const struct config *c, FILE *f);
/* `qdpd --help`, generated from the table. */
void config_help(FILE *f, const char *prog);

/* Range-checked number parsers (no sign, no trailing garbage); `field` names the value in the
 * INVALID_ARGUMENT message. */
qdp_status config_parse_u64(const char *s, uint64_t min, uint64_t max, const char *field,
                            uint64_t *ret, struct qdp_error *reterr);
qdp_status config_parse_bytes(const char *s, uint64_t min, uint64_t max, const char *field,
                              uint64_t *ret, struct qdp_error *reterr);
qdp_status config_parse_seconds(const char *s, uint64_t min, uint64_t max, const char *field,
                                uint64_t *ret, struct qdp_error *reterr);
qdp_status config_parse_mode(const char *s, const char *field, uint64_t *ret,
                             struct qdp_error *reterr);
qdp_status config_parse_double(const char *s, double min, double max, const char *field,
                               double *ret, struct qdp_error *reterr);
qdp_status config_parse_bool(const char *s, const char *field, bool *ret, struct qdp_error *reterr);
qdp_status config_parse_level(const char *s, const char *field, int *ret, struct qdp_error *reterr);
/* "text" or "json" (any case) into an enum log_format. */
qdp_status config_parse_log_format(const char *s, const char *field, int *ret,
                                   struct qdp_error *reterr);

#endif /* QDP_CONFIG_H */
