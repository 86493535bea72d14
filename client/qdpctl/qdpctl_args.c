/* qdpctl_args.c — parsing for every command: usage errors, numbers, REFs, the common options and
 * the option sets that several commands share; the help epilogue; failures as exit codes. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdpctl.h"

/* One process runs one command: its output mode, fixed before parsing, lives here so that the
 * dozens of parsers that report usage errors need not carry it. */
static int usage_as_json;

void usage_json(int on) {
  usage_as_json = on;
}

int usage_error(const char *cmd, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "qdpctl%s%s: %s\nTry 'qdpctl %s%s--help'.\n", cmd ? " " : "", cmd ? cmd : "", msg,
          cmd ? cmd : "", cmd ? " " : "");
  if (usage_as_json) {
    struct jw w = {stdout, 0, {0}};
    jw_open(&w, NULL, '{');
    jw_open(&w, "error", '{');
    jw_s(&w, "code", "USAGE");
    jw_s(&w, "command", cmd ? cmd : "");
    jw_s(&w, "message", msg);
    jw_i(&w, "exit", EXIT_USAGE);
    jw_close(&w, '}');
    jw_close(&w, '}');
  }
  return EXIT_USAGE;
}

/* Edits (insertions, deletions, substitutions, swaps of neighbours) from a to b; words longer
 * than 63 characters count as far from everything. */
static size_t edit_distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > 63 || m > 63) {
    return SIZE_MAX;
  }
  size_t d[64][64];
  for (size_t i = 0; i <= n; i++) {
    for (size_t j = 0; j <= m; j++) {
      if (i == 0 || j == 0) {
        d[i][j] = i + j;
        continue;
      }
      size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      best = d[i - 1][j] + 1 < best ? d[i - 1][j] + 1 : best;
      best = d[i][j - 1] + 1 < best ? d[i][j - 1] + 1 : best;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best) {
        best = d[i - 2][j - 2] + 1;
      }
      d[i][j] = best;
    }
  }
  return d[n][m];
}

void nearest_word(const char *given, const char *candidate, struct nearest *nr) {
  size_t d = edit_distance(given, candidate);
  /* Close enough to be a slip: a third of the word's letters, at least 1 edit and at most 2. */
  size_t limit = strlen(candidate) / 3;
  limit = limit < 1 ? 1 : limit > 2 ? 2 : limit;
  if (d <= limit && d < nr->distance) {
    nr->distance = d;
    nr->word = candidate;
  }
}

/* Parses an unsigned decimal (or 0x hex) integer in [min, max]; the whole string must be used. */
int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret) {
  if (!s || !*s || *s == '-' || *s == '+' || *s == ' ') {
    return 0;
  }
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || !end || *end || v < min || v > max) {
    return 0;
  }
  *ret = v;
  return 1;
}

int parse_i32(const char *s, int32_t min, int32_t max, int *ret) {
  if (!s || !*s) {
    return 0;
  }
  errno = 0;
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (errno || !end || *end || v < min || v > max) {
    return 0;
  }
  *ret = (int)v;
  return 1;
}

/* A REF is HANDLE:TOKEN, as encode prints it. The pieces point into buf; anything else is a usage
 * error of cmd. */
int split_ref(const char *cmd, const char *ref, char *buf, size_t size, const char **handle,
              const char **token) {
  char *colon = NULL;
  if (ref && strlen(ref) < size) {
    memcpy(buf, ref, strlen(ref) + 1);
    colon = strchr(buf, ':');
  }
  if (!colon || colon == buf || !colon[1]) {
    return usage_error(cmd, "'%s' is not a REF (HANDLE:TOKEN)", ref);
  }
  *colon = '\0';
  *handle = buf;
  *token = colon + 1;
  return EXIT_OK;
}

/* A failure's class is its status's, whether qdpd or libqdp found it: a bad input file is an
 * invalid argument as a bad --qubits is. Only a status without a class of its own tells where it
 * came from: refused by qdpd (4), or a local error (1). */
int exit_code_for(const struct qdp_errinfo *e) {
  if (interrupted) {
    return EXIT_INTERRUPTED;
  }
  switch (e->code) {
  case QDP_ERR_UNAVAILABLE:
  case QDP_ERR_DEADLINE_EXCEEDED:
    return EXIT_UNAVAILABLE;
  case QDP_ERR_NOT_FOUND:
    return EXIT_NOT_FOUND;
  case QDP_ERR_INVALID_ARGUMENT:
  case QDP_ERR_OUT_OF_RANGE:
    return EXIT_INVALID;
  case QDP_ERR_RESOURCE_EXHAUSTED:
    return EXIT_EXHAUSTED;
  case QDP_ERR_PERMISSION_DENIED:
  case QDP_ERR_UNAUTHENTICATED:
    return EXIT_PERMISSION;
  case QDP_ERR_DATA_LOSS:
    return EXIT_DATA_LOSS;
  default:
    return e->remote ? EXIT_REFUSED : EXIT_LOCAL;
  }
}

/* ---- failures ---- */

int fail(const struct global *g, const char *cmd) {
  const struct qdp_errinfo *e = qdp_last_error();
  /* The message gives sizes as a person reads them; the exact figures follow it. */
  if (e->need_bytes || e->free_bytes) {
    fprintf(stderr, "qdpctl %s: %s (%s; need_bytes %" PRIu64 ", free_bytes %" PRIu64 ")\n", cmd,
            e->msg[0] ? e->msg : qdp_strerror(e->code), e->code_name, e->need_bytes,
            e->free_bytes);
  } else {
    fprintf(stderr, "qdpctl %s: %s (%s)\n", cmd, e->msg[0] ? e->msg : qdp_strerror(e->code),
            e->code_name);
  }
  if (g->json) {
    struct jw w = {stdout, 0, {0}};
    jw_open(&w, NULL, '{');
    error_json(&w, e, 1);
    jw_close(&w, '}');
  }
  return exit_code_for(e);
}

int connect_client(const struct global *g, const char *cmd, qdp_client **ret) {
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.target = g->target;
  o.token = g->token;
  o.tls_ca = g->tls_ca;
  o.tls_cert = g->tls_cert;
  o.tls_key = g->tls_key;
  o.tls_server_name = g->tls_server_name;
  o.client_name = g->client_name;
  if (g->timeout_ms >= 0) {
    o.timeout_ms = g->timeout_ms;
  }
  if (qdp_client_create(&o, ret) != QDP_OK) {
    return fail(g, cmd);
  }
  return EXIT_OK;
}

int ref_client(const struct global *g, const char *cmd, const char *arg, struct ref *r,
               qdp_client **ret) {
  *ret = NULL;
  if (split_ref(cmd, arg, r->buf, sizeof r->buf, &r->handle, &r->token) != EXIT_OK) {
    return EXIT_USAGE;
  }
  return connect_client(g, cmd, ret);
}

/* ---- common options ---- */

static char socket_target[PATH_MAX + 8];

/* Handles a common option; returns 1 if it was one, -1 on a bad value, 0 otherwise. */
int common_opt(struct global *g, int opt, const char *arg) {
  uint64_t v;
  switch (opt) {
  case OPT_TARGET:
    g->target = arg;
    return 1;
  case OPT_SOCKET:
    if (snprintf(socket_target, sizeof socket_target, "unix:%s", arg) >=
        (int)sizeof socket_target) {
      return -1;
    }
    g->target = socket_target;
    return 1;
  case OPT_TOKEN:
    g->token = arg;
    return 1;
  case OPT_TLS_CA:
    g->tls_ca = arg;
    return 1;
  case OPT_TLS_CERT:
    g->tls_cert = arg;
    return 1;
  case OPT_TLS_KEY:
    g->tls_key = arg;
    return 1;
  case OPT_TLS_SERVER_NAME:
    g->tls_server_name = arg;
    return 1;
  case OPT_NAME:
    g->client_name = arg;
    return 1;
  case OPT_TIMEOUT:
    if (!parse_u64(arg, 0, INT64_MAX / 1000, &v)) {
      return -1;
    }
    g->timeout_ms = (int64_t)v;
    return 1;
  case OPT_JSON:
    g->json = 1;
    return 1;
  case OPT_BYTES:
    g->raw_bytes = 1;
    return 1;
  case OPT_NO_PROGRESS:
    g->progress = 0;
    return 1;
  case OPT_PROGRESS:
    g->progress = 1;
    return 1;
  default:
    return 0;
  }
}

static const char common_help[] =
    "Common options (before or after the subcommand):\n"
    "  --target T        gRPC target of qdpd: unix:/path or host:port\n"
    "                    (default: $QDP_TARGET, unix:$QDP_SOCKET, unix:/run/qdp/qdpd.sock for\n"
    "                    root, unix:$XDG_RUNTIME_DIR/qdp/qdpd.sock otherwise)\n"
    "  --socket PATH     same as --target unix:PATH\n"
    "  --token TOKEN     bearer token for a TCP daemon (default: $QDP_TOKEN)\n"
    "  --tls-ca FILE     TLS to a TCP daemon: the CA certificates (PEM) its certificate must\n"
    "                    chain to (default: $QDP_TLS_CA; without it TCP is clear text)\n"
    "  --tls-cert FILE, --tls-key FILE\n"
    "                    this client's certificate chain and key (PEM) for a daemon that asks\n"
    "                    for one (mutual TLS; default: $QDP_TLS_CERT, $QDP_TLS_KEY)\n"
    "  --tls-server-name NAME\n"
    "                    the name the daemon's certificate carries when it is not the target's\n"
    "                    host (default: $QDP_TLS_SERVER_NAME)\n"
    "  --client-name N   identity per-client budgets count against (default user@host:pid)\n"
    "  --timeout MS      deadline of each request in milliseconds, 0 = none (default 60000;\n"
    "                    uploads and fetches have none)\n"
    "  --json            print the result (or the error, usage errors too) as JSON on stdout;\n"
    "                    each object has \"schema\": 1, the version of its layout\n"
    "  --bytes           sizes as byte counts (16777216), not for people (16 MiB); JSON always\n"
    "                    has byte counts\n"
    "  --progress, --no-progress\n"
    "                    force progress on or off (default: on when stderr is a terminal): a bar\n"
    "                    while bytes move, the phase and its seconds while the daemon works\n"
    "  --help            this help\n";

static const char exit_help[] =
    "Exit status (a failure's class, whether qdpd or qdpctl found it):\n"
    "  0  success\n"
    "  1  local error of no class below: a system call that failed (an I/O error, no memory),\n"
    "     an output file that exists (--force replaces it), a reply qdpctl cannot use\n"
    "  2  usage error: the command line itself (unknown option, missing or malformed argument),\n"
    "     found before anything is sent\n"
    "  3  cannot connect: qdpd is not running or not reachable (UNAVAILABLE, DEADLINE_EXCEEDED)\n"
    "  4  refused by qdpd with a status not listed below (FAILED_PRECONDITION, INTERNAL, ...)\n"
    "  5  not found (NOT_FOUND): an unknown or released state, region or lease, or a local file\n"
    "     or shared-memory object that does not exist\n"
    "  6  invalid argument (INVALID_ARGUMENT, OUT_OF_RANGE): a request or an input file that\n"
    "     qdpd or qdpctl refused; the message names the field\n"
    "  7  resource exhausted (RESOURCE_EXHAUSTED: memory, budgets), with the bytes needed and\n"
    "     free\n"
    "  8  permission (PERMISSION_DENIED, UNAUTHENTICATED): refused by qdpd, or a local file you\n"
    "     may not open\n"
    "  9  data loss (DATA_LOSS: an input that changed or shrank while it was read)\n"
    "  130  interrupted (Ctrl-C)\n";

/* A command's own help (followed by `gap`), then the common options and the exit codes. */
void print_help(const char *help, const char *gap) {
  fputs(help, stdout);
  fputs(gap, stdout);
  fputs(common_help, stdout);
  fputs("\n", stdout);
  fputs(exit_help, stdout);
}

/* ---- option sets shared by several commands ---- */

int next_opt(struct global *g, const char *cmd, const char *help, int argc, char **argv,
             const char *shortopts, const struct option *opts, int say_which) {
  int opt;
  while ((opt = getopt_long(argc, argv, shortopts, opts, NULL)) != -1) {
    int r = common_opt(g, opt, optarg);
    if (r < 0) {
      if (say_which) {
        usage_error(cmd, "bad value '%s' for %s", optarg, argv[optind - 1]);
      } else {
        usage_error(cmd, "bad value '%s'", optarg);
      }
      return OPT_BAD;
    }
    if (r > 0) {
      continue;
    }
    if (opt == OPT_HELP) {
      print_help(help, "\n");
      return OPT_HELPED;
    }
    if (opt == '?' && optind > 0 && strncmp(argv[optind - 1], "--", 2) == 0) {
      char given[64];
      snprintf(given, sizeof given, "%.*s", (int)strcspn(argv[optind - 1] + 2, "="),
               argv[optind - 1] + 2);
      struct nearest nr = NEAREST_INIT;
      for (const struct option *o = opts; o->name; o++) {
        nearest_word(given, o->name, &nr);
      }
      if (nr.word) {
        fprintf(stderr, "qdpctl %s: did you mean '--%s'?\n", cmd ? cmd : "", nr.word);
      }
    }
    return opt;
  }
  return OPT_END;
}

/* The positional arguments after the options: min_pos to max_pos of them. */
static int positionals(const char *cmd, int argc, char **argv, int min_pos, int max_pos,
                       const char **pos, int *npos) {
  *npos = 0;
  for (int i = optind; i < argc; i++) {
    if (*npos >= max_pos) {
      return usage_error(cmd, "unexpected argument '%s'", argv[i]);
    }
    pos[(*npos)++] = argv[i];
  }
  if (*npos < min_pos) {
    return usage_error(cmd, "missing %s", min_pos == 1 ? "REF" : "arguments");
  }
  return EXIT_OK;
}

/* --offset, --count and --chunk-bytes of a fetch (`name` as given); fo NULL: not this command's. */
static int range_opt(const char *cmd, int opt, const char *arg, const char *name,
                     struct qdp_fetch_opts *fo) {
  uint64_t v;
  if (!fo) {
    return usage_error(cmd, "unknown option '%s'", name);
  }
  if (!parse_u64(arg, 0, opt == OPT_CHUNK_BYTES ? (uint64_t)1 << 30 : UINT64_MAX, &v)) {
    return usage_error(cmd, "'%s' is not a valid number for %s", arg, name);
  }
  if (opt == OPT_OFFSET) {
    fo->offset = v;
  } else if (opt == OPT_COUNT) {
    fo->count = v;
  } else {
    fo->chunk_bytes = (uint32_t)v;
  }
  return EXIT_OK;
}

/* Parses the options of a command without request options; fills positional args. The optional
 * outputs (NULL: the command has no such option) take --offset/--count/--chunk-bytes (fo),
 * -o/--output, --force, --views (*views bit 0) with --writable (bit 1) and --device. */
int parse_simple(struct global *g, const char *cmd, const char *help, int argc, char **argv,
                 int min_pos, int max_pos, const char **pos, int *npos, struct qdp_fetch_opts *fo,
                 const char **output, int *force, int *views, const char **device) {
  static const struct option opts[] = {
      {"views", no_argument, NULL, OPT_VIEWS},
      {"writable", no_argument, NULL, OPT_WRITABLE},
      {"device", required_argument, NULL, OPT_DEVICE},
      {"offset", required_argument, NULL, OPT_OFFSET},
      {"count", required_argument, NULL, OPT_COUNT},
      {"chunk-bytes", required_argument, NULL, OPT_CHUNK_BYTES},
      {"output", required_argument, NULL, OPT_OUTPUT},
      {"force", no_argument, NULL, OPT_FORCE},
      COMMON_LONG_OPTS,
      {NULL, 0, NULL, 0},
  };
  optind = 0;
  int opt, r;
  while ((opt = next_opt(g, cmd, help, argc, argv, fo ? "o:" : "", opts, 0)) > 0) {
    switch (opt) {
    case OPT_OFFSET:
    case OPT_COUNT:
    case OPT_CHUNK_BYTES:
      if ((r = range_opt(cmd, opt, optarg, argv[optind - 1], fo)) != EXIT_OK) {
        return r;
      }
      break;
    case 'o':
    case OPT_OUTPUT:
      if (!output) {
        return usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
      }
      *output = optarg;
      break;
    case OPT_FORCE:
      if (!force) {
        return usage_error(cmd, "unknown option '--force'");
      }
      *force = 1;
      break;
    case OPT_VIEWS:
      if (!views) {
        return usage_error(cmd, "unknown option '--views'");
      }
      *views |= 1;
      break;
    case OPT_WRITABLE:
      if (!views) {
        return usage_error(cmd, "unknown option '--writable'");
      }
      *views |= 2;
      break;
    case OPT_DEVICE:
      if (!device) {
        return usage_error(cmd, "unknown option '--device'");
      }
      *device = optarg;
      break;
    default:
      return usage_error(cmd, "unknown option");
    }
  }
  if (opt != OPT_END) {
    return opt == OPT_HELPED ? -1 : EXIT_USAGE;
  }
  return positionals(cmd, argc, argv, min_pos, max_pos, pos, npos);
}

/* The options of ls and rm: --mine, --all, and up to max_pos positional arguments. */
int parse_owned(struct global *g, const char *cmd, const char *help, int argc, char **argv,
                int max_pos, const char **pos, int *npos, int *mine, int *all) {
  static const struct option opts[] = {
      {"mine", no_argument, NULL, OPT_MINE},
      {"all", no_argument, NULL, OPT_ALL},
      COMMON_LONG_OPTS,
      {NULL, 0, NULL, 0},
  };
  optind = 0;
  int opt;
  while ((opt = next_opt(g, cmd, help, argc, argv, "", opts, 0)) > 0) {
    switch (opt) {
    case OPT_MINE:
      *mine = 1;
      break;
    case OPT_ALL:
      *all = 1;
      break;
    default:
      return usage_error(cmd, "unknown option");
    }
  }
  if (opt != OPT_END) {
    return opt == OPT_HELPED ? -1 : EXIT_USAGE;
  }
  return positionals(cmd, argc, argv, 0, max_pos, pos, npos);
}
