/* qdpctl.h — what the files of qdpctl share: exit codes, the common options, option parsing,
 * failures as exit codes, and the output helpers (JSON writer, tables, progress bar, a state's
 * layout). Internal to qdpctl, which uses libqdp's public API only. One process per command;
 * single-threaded.
 *
 * A command entry point (cmd_*) takes the subcommand's argv (argv[0] is its name) and returns the
 * process's exit code. Parsers return EXIT_OK, a usage error's EXIT_USAGE (already printed), or
 * -1 when --help was printed (the command then exits 0).
 */
#ifndef QDPCTL_H
#define QDPCTL_H

#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "qdp.h"

/* Exit statuses, one per failure class (exit_help in qdpctl_args.c is the table users read). */
enum {
  EXIT_OK = 0,
  EXIT_LOCAL = 1,
  EXIT_USAGE = 2,
  EXIT_UNAVAILABLE = 3, /* not reachable, UNAVAILABLE, DEADLINE_EXCEEDED */
  EXIT_REFUSED = 4,     /* any status without a code of its own */
  EXIT_NOT_FOUND = 5,
  EXIT_INVALID = 6, /* INVALID_ARGUMENT, OUT_OF_RANGE */
  EXIT_EXHAUSTED = 7,
  EXIT_PERMISSION = 8, /* PERMISSION_DENIED, UNAUTHENTICATED */
  EXIT_DATA_LOSS = 9,
  EXIT_INTERRUPTED = 130, /* Ctrl-C, as a shell reports SIGINT */
};

/* Options every subcommand accepts, before or after its name. */
struct global {
  const char *target;
  const char *token;
  const char *tls_ca, *tls_cert, *tls_key, *tls_server_name; /* NULL: libqdp's QDP_TLS_* */
  const char *client_name;
  int64_t timeout_ms;
  int json;
  int raw_bytes; /* --bytes: sizes as byte counts in tables and lines, not 16 MiB */
  int progress;  /* -1 auto (a terminal on stderr), 0 off, 1 on */
};

/* Set by SIGINT (qdpctl.c); the progress callback then cancels the call. A flag a signal handler
 * sets cannot be anything but a global. */
extern volatile sig_atomic_t interrupted;

/* ---- parsing (qdpctl_args.c) ---- */

/* Prints "qdpctl CMD: message" and the hint to --help on stderr, and with usage_json on also
 * {"schema", "error": {"code": "USAGE", "message", "exit": 2}} on stdout; returns EXIT_USAGE. */
int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether usage errors are reported as JSON too: set from the command line before it is parsed
 * (--json anywhere in it), so that an error before or in the options still comes out as JSON. */
void usage_json(int on);
/* The candidate nearest to a misspelt word, for "did you mean": call nearest_word with each
 * candidate; nr.word stays NULL when none is a likely slip. */
struct nearest {
  size_t distance;
  const char *word;
};
/* clang-format off */
#define NEAREST_INIT {SIZE_MAX, NULL}
/* clang-format on */
void nearest_word(const char *given, const char *candidate, struct nearest *nr);
/* Parses an unsigned decimal (or 0x hex) integer in [min, max]; the whole string must be used. */
int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret);
int parse_i32(const char *s, int32_t min, int32_t max, int *ret);
/* A REF is HANDLE:TOKEN, as encode prints it. The pieces point into buf; anything else is a usage
 * error of cmd. */
int split_ref(const char *cmd, const char *ref, char *buf, size_t size, const char **handle,
              const char **token);
int exit_code_for(const struct qdp_errinfo *e);
/* Reports libqdp's last error on stderr (and as JSON with --json); returns its exit code. */
int fail(const struct global *g, const char *cmd);
int connect_client(const struct global *g, const char *cmd, qdp_client **ret);

/* A REF split into its handle and token (pointing into buf). */
struct ref {
  char buf[1024];
  const char *handle, *token;
};
/* The REF a command was given, split into *r, then a client for it: EXIT_OK; EXIT_USAGE when arg
 * is not a REF (nothing connected); or connect_client's failure (reported, *ret NULL). */
int ref_client(const struct global *g, const char *cmd, const char *arg, struct ref *r,
               qdp_client **ret);

enum {
  OPT_TARGET = 1000,
  OPT_SOCKET,
  OPT_TOKEN,
  OPT_TLS_CA,
  OPT_TLS_CERT,
  OPT_TLS_KEY,
  OPT_TLS_SERVER_NAME,
  OPT_NAME,
  OPT_TIMEOUT,
  OPT_JSON,
  OPT_BYTES,
  OPT_NO_PROGRESS,
  OPT_PROGRESS,
  OPT_HELP,
  /* subcommand options */
  OPT_ENCODING,
  OPT_QUBITS,
  OPT_DTYPE,
  OPT_POLICY,
  OPT_DEVICES,
  OPT_TTL,
  OPT_LABEL,
  OPT_VALUES,
  OPT_INPUT,
  OPT_SERVER_FILE,
  OPT_SHM,
  OPT_SHM_FD,
  OPT_SHM_PID,
  OPT_OFFSET,
  OPT_LENGTH,
  OPT_COUNT,
  OPT_ROWS,
  OPT_COLS,
  OPT_INPUT_DTYPE,
  OPT_RAW,
  OPT_UPLOAD,
  OPT_CHUNK_BYTES,
  OPT_IPC,
  OPT_FORCE,
  OPT_OUTPUT,
  OPT_REGION,
  OPT_PID,
  OPT_FD,
  OPT_VIEWS,
  OPT_WRITABLE,
  OPT_DEVICE,
  OPT_MINE,
  OPT_ALL,
  OPT_METRICS,
  OPT_INTERVAL,
  OPT_ONCE,
  OPT_OVERLAPS,
  OPT_PAULI,
  OPT_SHOTS,
  OPT_SEED,
  OPT_INPUT_B,
  OPT_MAX_BYTES,
};

/* clang-format off */
#define COMMON_LONG_OPTS \
  {"target", required_argument, NULL, OPT_TARGET}, \
  {"socket", required_argument, NULL, OPT_SOCKET}, \
  {"token", required_argument, NULL, OPT_TOKEN}, \
  {"tls-ca", required_argument, NULL, OPT_TLS_CA}, \
  {"tls-cert", required_argument, NULL, OPT_TLS_CERT}, \
  {"tls-key", required_argument, NULL, OPT_TLS_KEY}, \
  {"tls-server-name", required_argument, NULL, OPT_TLS_SERVER_NAME}, \
  {"client-name", required_argument, NULL, OPT_NAME}, \
  {"timeout", required_argument, NULL, OPT_TIMEOUT}, \
  {"json", no_argument, NULL, OPT_JSON}, \
  {"bytes", no_argument, NULL, OPT_BYTES}, \
  {"no-progress", no_argument, NULL, OPT_NO_PROGRESS}, \
  {"progress", no_argument, NULL, OPT_PROGRESS}, \
  {"help", no_argument, NULL, OPT_HELP}

/* Handles a common option; returns 1 if it was one, -1 on a bad value, 0 otherwise. */
int common_opt(struct global *g, int opt, const char *arg);
/* A command's own help (followed by `gap`), then the common options and the exit codes. */
void print_help(const char *help, const char *gap);

/* next_opt's answers besides one of the command's own options (its getopt value, > 0). */
enum { OPT_END = 0, OPT_HELPED = -1, OPT_BAD = -3 };
/* The next option of a command (optind 0 before the first): takes the common options and --help
 * (printing `help`) itself. OPT_BAD after printing the usage error of a common option's bad value,
 * which names the option when say_which (encode and plan always have). */
int next_opt(struct global *g, const char *cmd, const char *help, int argc, char **argv,
             const char *shortopts, const struct option *opts, int say_which);
/* Parses the options of a command without request options; fills positional args. The optional
 * outputs (NULL: the command has no such option) take --offset/--count/--chunk-bytes (fo),
 * -o/--output, --force, --views and --device. */
int parse_simple(struct global *g, const char *cmd, const char *help, int argc, char **argv,
                 int min_pos, int max_pos, const char **pos, int *npos, struct qdp_fetch_opts *fo,
                 const char **output, int *force, int *views, const char **device);
/* The options of ls and rm: --mine, --all, and up to max_pos positional arguments. */
int parse_owned(struct global *g, const char *cmd, const char *help, int argc, char **argv,
                int max_pos, const char **pos, int *npos, int *mine, int *all);

/* ---- the request and the input of an encode (qdpctl_encode.c): encode, plan, kernel ---- */

/* What the options say; encode_args_init before the first, encode_args_free after. */
struct encode_args {
  struct qdp_encode_opts eo;
  struct qdp_input in;
  const char **devices;
  size_t ndevices;
  char *devbuf;
  void *values;
  int have_input;
  int force_upload;
  qdp_dtype input_dtype;
  const char *values_arg;
  int have_offset, have_length;
  char regbuf[256]; /* --region REF, split into in.region and in.region_token */
};

/* clang-format off */
/* What to encode: encoding, qubits, dtype, placement. */
#define ENCODE_REQUEST_LONG_OPTS \
  {"encoding", required_argument, NULL, OPT_ENCODING}, \
  {"qubits", required_argument, NULL, OPT_QUBITS}, \
  {"dtype", required_argument, NULL, OPT_DTYPE}, \
  {"policy", required_argument, NULL, OPT_POLICY}, \
  {"devices", required_argument, NULL, OPT_DEVICES}
/* Where the input is, and its shape and type. */
#define ENCODE_INPUT_LONG_OPTS \
  {"values", required_argument, NULL, OPT_VALUES}, \
  {"input", required_argument, NULL, OPT_INPUT}, \
  {"server-file", required_argument, NULL, OPT_SERVER_FILE}, \
  {"shm", required_argument, NULL, OPT_SHM}, \
  {"shm-fd", required_argument, NULL, OPT_SHM_FD}, \
  {"shm-pid", required_argument, NULL, OPT_SHM_PID}, \
  {"region", required_argument, NULL, OPT_REGION}, \
  {"offset", required_argument, NULL, OPT_OFFSET}, \
  {"length", required_argument, NULL, OPT_LENGTH}, \
  {"rows", required_argument, NULL, OPT_ROWS}, \
  {"cols", required_argument, NULL, OPT_COLS}, \
  {"input-dtype", required_argument, NULL, OPT_INPUT_DTYPE}, \
  {"raw", no_argument, NULL, OPT_RAW}
/* clang-format on */

void encode_args_init(struct encode_args *a);
/* An option handler's answer when the option is not one of its own. */
#define NOT_MINE (-2)
/* Takes one of encode's options (getopt value opt): EXIT_OK, a usage error's code, or NOT_MINE. */
int encode_opt(struct encode_args *a, const char *cmd, int opt, const char *arg);
/* The options together, once all are taken: what goes with what (an input when need_input), and
 * the defaults that depend on the input. */
int encode_args_finish(const char *cmd, struct encode_args *a, int need_input);
void encode_args_free(struct encode_args *a);
/* Reports a failure of a call with this input (fail); a text file refused as CSV gets the way
 * out. */
int encode_fail(const struct global *g, const char *cmd, const struct encode_args *a);

/* ---- output (qdpctl_output.c) ---- */

/* A JSON writer onto f: objects and arrays nest (jw_open / jw_close with '{' or '['); a member
 * has a key inside an object and NULL inside an array. Start from {f, 0, {0}}. */
/* The version of qdpctl's JSON, the "schema" member of every top-level object it prints: raised
 * when a member changes meaning or goes (members are only ever added within a version). */
#define QDPCTL_JSON_SCHEMA 1

struct jw {
  FILE *f;
  int depth;
  int count[32]; /* members written at each depth */
};

void jw_open(struct jw *w, const char *key, char ch);
void jw_close(struct jw *w, char ch);
void jw_s(struct jw *w, const char *key, const char *v);
void jw_u(struct jw *w, const char *key, uint64_t v);
void jw_i(struct jw *w, const char *key, int64_t v);
void jw_d(struct jw *w, const char *key, double v); /* null when not finite */
void jw_b(struct jw *w, const char *key, int v);

/* A text table: columns as wide as their widest cell, numbers right-aligned. */
#define TABLE_MAX_COLS 12
struct table {
  int ncols;
  const char *head[TABLE_MAX_COLS];
  int right[TABLE_MAX_COLS]; /* numbers align right */
  char **cells;              /* rows * ncols, malloc'd strings */
  size_t rows, cap;
};

void table_init(struct table *t, int ncols, const char *const *head, const int *right);
/* Appends one row of ncols already formatted cells (copied). */
void table_row(struct table *t, char *const *cells);
/* Prints the table and frees its rows. */
void table_print(struct table *t, FILE *f);
void fmt_u64(char *buf, size_t size, uint64_t v);
/* A size for people: "0 B", "512 B", "1.5 KiB", "16 MiB", "10.4 GiB" (binary units, one
 * decimal when it is not whole); the byte count itself with --bytes (g->raw_bytes). */
void fmt_size(const struct global *g, char *buf, size_t size, uint64_t v);
/* ISO-8601 UTC; `none` when the daemon sent no time (0). */
void fmt_time(char *buf, size_t size, int64_t unix_ms, const char *none);

/* Progress on stderr (on a terminal, or with --progress): a bar while bytes move (uploads,
 * fetches), and while the call waits on the daemon (before the first byte, after the last, or
 * throughout) a line that names the phase and counts its seconds. */
struct bar {
  int on;
  int forced; /* --progress: draw from the first chunk, even for short transfers */
  const char *label;
  struct timespec start, last;
  int drawn;
  /* The waiting line, drawn by its own thread (bar_wait) under mu. */
  const char *before, *after; /* the phase before the first byte moves, and after the last */
  int moving, moved;          /* bytes are moving; the last has */
  const char *phase_drawn;    /* the waiting line last drawn; NULL: none, or a bar after it */
  struct timespec phase_start;
  int ticking, stop;
  pthread_t ticker;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

/* libqdp's progress callback (arg: a struct bar); returns 1 to cancel after Ctrl-C. */
int bar_cb(void *arg, uint64_t done, uint64_t total);
void bar_start(struct bar *b, const struct global *g, const char *label);
/* Names the waiting phases ("sending", "encoding on the daemon") and starts drawing them; NULL
 * `before` for a call whose bytes never move here (the daemon reads the file itself): `after`
 * from the start. Nothing when progress is off. */
void bar_wait(struct bar *b, const char *before, const char *after);
void bar_end(struct bar *b); /* stops the waiting line, ends the progress output's line */

/* The "error" object; rm's per-REF report leaves out the placement details (`full` 0). */
void error_json(struct jw *w, const struct qdp_errinfo *e, int full);
void shard_json(struct jw *w, const struct qdp_shard *s);
/* A state's members (its fields and its shards) inside an open object. */
void state_json_fields(struct jw *w, const struct qdp_state_info *s);
void shards_table(const struct global *g, struct qdp_shard *const *shards, size_t n);
/* A state's layout as text, headed by its REF (or its handle when ref is NULL). */
void state_print(const struct global *g, const struct qdp_state_info *s, const char *ref);
/* Prints a state just made (encode, gather) with the REF that names it; EXIT_LOCAL without memory.
 */
int print_new_state(const struct global *g, const struct qdp_state_info *s);
/* The views of a state as this process mapped them. */
void views_table(const struct qdp_views *v);

/* ---- commands ---- */

int cmd_status(struct global *g, int argc, char **argv);     /* qdpctl_status.c */
int cmd_health(struct global *g, int argc, char **argv);     /* qdpctl_status.c */
int cmd_encode(struct global *g, int argc, char **argv);     /* qdpctl_encode.c */
int cmd_plan(struct global *g, int argc, char **argv);       /* qdpctl_encode.c */
int cmd_describe(struct global *g, int argc, char **argv);   /* qdpctl_states.c */
int cmd_ls(struct global *g, int argc, char **argv);         /* qdpctl_states.c */
int cmd_rm(struct global *g, int argc, char **argv);         /* qdpctl_states.c */
int cmd_view_close(struct global *g, int argc, char **argv); /* qdpctl_states.c */
int cmd_fetch(struct global *g, int argc, char **argv);      /* qdpctl_fetch.c */
int cmd_export(struct global *g, int argc, char **argv);     /* qdpctl_fetch.c */
int cmd_gather(struct global *g, int argc, char **argv);     /* qdpctl_fetch.c */
int cmd_region(struct global *g, int argc, char **argv);     /* qdpctl_region.c */
int cmd_top(struct global *g, int argc, char **argv);        /* qdpctl_top.c */
int cmd_kernel(struct global *g, int argc, char **argv);     /* qdpctl_kernel.c */
int cmd_measure(struct global *g, int argc, char **argv);    /* qdpctl_kernel.c */

#endif /* QDPCTL_H */
