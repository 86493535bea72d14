/* qdpctl_encode.c — the request and input options of an encode, which encode, plan and kernel's
 * form from inputs share; then encode and plan. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qdpctl.h"

/* encode's help, before and after its table of encodings (encode_help). */
static const char help_head[] =
    "Usage: qdpctl encode --encoding E --qubits N INPUT [options]\n"
    "       qdpctl plan   --encoding E --qubits N [INPUT] [options]\n"
    "\n"
    "encode materializes a state on qdpd's devices and prints its REF (HANDLE:TOKEN, the\n"
    "capability every later command needs) and its layout. plan asks the same question as a dry\n"
    "run: the shards and the per-device arithmetic (shard + staging + workspace vs budget);\n"
    "nothing is allocated, and plan exits 0 whether or not the plan is feasible.\n"
    "\n"
    "Request:\n"
    "  --encoding E      one of the encodings below\n"
    "  --qubits N        qubits per sample (the state has 2^N amplitudes)\n"
    "  --dtype T         complex64 or complex128 (default complex128)\n"
    "  --policy P        auto, single, even, uneven, capacity or batch (default auto)\n"
    "  --devices LIST    devices to use, e.g. cpu:0,cpu:1 (default: all)\n"
    "  --ttl SECONDS     lifetime of the state; 0 = the daemon's default\n"
    "  --label TEXT      free text kept with the state\n"
    "  --ipc             also ask for zero-copy views (CUDA IPC handles per shard, under a lease\n"
    "                    that view-close ends; GPU daemons only)\n"
    "\n"
    "Input (exactly one; plan also takes none, with --rows/--cols/--input-dtype):\n"
    "  --values V,V,...  inline values (float64 unless --input-dtype says otherwise)\n"
    "  --input FILE      a local file: .npy; CSV (named .csv, or any text file): one sample per\n"
    "                    row, a header row when a field of the first is not a number, columns\n"
    "                    of text left out; or raw values (binary, with --input-dtype). Its\n"
    "                    values are sent inline when they are at most 1 MiB, streamed in 1 MiB\n"
    "                    chunks otherwise\n"
    "  --server-file P   a .npy file on qdpd's node, read in place: qdpctl opens it (with your\n"
    "                    rights) and hands it to qdpd; over TCP, a path beneath qdpd's input_dir\n"
    "  --shm NAME        a POSIX shared-memory region on qdpd's node (shm_open name), likewise\n"
    "  --shm-fd FD       ... or an open fd of process --shm-pid PID (default: qdpctl itself)\n"
    "  --region REF      a region registered with 'qdpctl region add' (mapped once)\n"
    "    --offset N      bytes into the region (or into a raw --input file)\n"
    "    --length N      bytes to read (rows x cols x element size)\n"
    "Shape and type of inputs without a header (values, raw files, shared memory; rows and\n"
    "cols also reshape a .npy or CSV file):\n"
    "  --rows N          samples (default 1); with several, the state is a batch [rows, 2^N]\n"
    "  --cols N          values per sample (default: all values / rows)\n"
    "  --input-dtype T   float32, float64 or int64 (basis indices); a CSV file's values are\n"
    "                    read as T (default float64)\n"
    "  --raw             read --input's bytes as values of --input-dtype even when they are\n"
    "                    text (without it a text file is read as CSV, or refused)\n"
    "  --upload          stream --input even when it is small\n"
    "  --chunk-bytes N   bytes per uploaded message (default 1048576)\n"
    "\n";

static const char help_tail[] =
    "\n"
    "Examples:\n"
    "  qdpctl encode --encoding amplitude --qubits 2 --values 1,2,3,4\n"
    "  qdpctl encode --encoding angle --qubits 3 --values 0.1,0.2,0.3,0.4,0.5,0.6 --rows 2\n"
    "  qdpctl encode --encoding amplitude --qubits 20 --input data.npy --dtype complex64\n"
    "  qdpctl encode --encoding angle --qubits 4 --input features.csv   # a batch, one per row\n"
    "  qdpctl encode --encoding amplitude --qubits 10 --input x.f32 --input-dtype float32\n"
    "  qdpctl encode --encoding phase --qubits 8 --server-file /data/x.npy --devices cpu:0,cpu:1\n"
    "  qdpctl encode --encoding amplitude --qubits 10 --shm /features --offset 0 --length 8192 \\\n"
    "                --input-dtype float64\n"
    "  qdpctl plan --encoding amplitude --qubits 30 --rows 1 --cols 1073741824 \\\n"
    "              --input-dtype float32 --policy even\n";

/* Appends to buf (len bytes) at *at; what does not fit is cut off. */
static void append(char *buf, size_t len, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, size_t *at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = *at < len ? vsnprintf(buf + *at, len - *at, fmt, ap) : 0;
  va_end(ap);
  *at += n > 0 ? (size_t)n : 0;
}

/* The help of encode and plan: the encodings and their values per sample are QDP_ENCODINGS's
 * (qdp_defs.h), whose rows the daemon takes. */
static void encode_help(char *buf, size_t len) {
  size_t at = 0;
  append(buf, len, &at, "%s", help_head);
  append(buf, len, &at, "Encodings (--encoding) and the values of each sample of N qubits:\n");
#define HELP_ROW(ID, number, name, values, layout, states, reduction, exchange, check, dtypes, \
                 count, noun) \
  append(buf, len, &at, "  %-17s %s %s\n", name, count, noun);
  QDP_ENCODINGS(HELP_ROW)
#undef HELP_ROW
  append(buf, len, &at, "%s", help_tail);
}

/* The encodings' names, ", " between them. */
static void encoding_names(char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
#define NAME_ROW(ID, number, name, ...) append(buf, len, &at, "%s%s", at ? ", " : "", name);
  QDP_ENCODINGS(NAME_ROW)
#undef NAME_ROW
}

static int parse_values(const char *cmd, const char *s, qdp_dtype dt, void **ret, size_t *ret_n) {
  size_t n = 1;
  for (const char *p = s; *p; p++) {
    n += *p == ',';
  }
  unsigned es = qdp_dtype_size(dt);
  unsigned char *buf = malloc(n * es);
  if (!buf) {
    fprintf(stderr, "qdpctl %s: out of memory for %zu values\n", cmd, n);
    return EXIT_LOCAL;
  }
  const char *p = s;
  for (size_t i = 0; i < n; i++) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char tok[128];
    if (len == 0 || len >= sizeof tok) {
      free(buf);
      return usage_error(cmd, "--values: value %zu is %s", i + 1, len ? "too long" : "empty");
    }
    memcpy(tok, p, len);
    tok[len] = '\0';
    char *end = NULL;
    errno = 0;
    if (dt == QDP_DTYPE_INT64) {
      long long v = strtoll(tok, &end, 10);
      if (errno || *end) {
        free(buf);
        return usage_error(cmd, "--values: '%s' is not a 64-bit integer", tok);
      }
      int64_t x = v;
      memcpy(buf + i * es, &x, es);
    } else {
      /* NaN and Inf parse on purpose: judging them is the daemon's job, and it names them. */
      double v = strtod(tok, &end);
      if (*end || end == tok) {
        free(buf);
        return usage_error(cmd, "--values: '%s' is not a number", tok);
      }
      if (dt == QDP_DTYPE_FLOAT32) {
        float f = (float)v;
        memcpy(buf + i * es, &f, es);
      } else {
        memcpy(buf + i * es, &v, es);
      }
    }
    p = comma ? comma + 1 : p + len;
  }
  *ret = buf;
  *ret_n = n;
  return EXIT_OK;
}

static int set_input(struct encode_args *a, const char *cmd, qdp_input_kind kind) {
  if (a->have_input && a->in.kind != kind) {
    return usage_error(cmd, "give exactly one input: --values, --input, --server-file or --shm");
  }
  a->have_input = 1;
  a->in.kind = kind;
  return EXIT_OK;
}

static const struct option encode_opts[] = {
    ENCODE_REQUEST_LONG_OPTS,
    {"ttl", required_argument, NULL, OPT_TTL},
    {"label", required_argument, NULL, OPT_LABEL},
    {"ipc", no_argument, NULL, OPT_IPC},
    ENCODE_INPUT_LONG_OPTS,
    {"upload", no_argument, NULL, OPT_UPLOAD},
    {"chunk-bytes", required_argument, NULL, OPT_CHUNK_BYTES},
    COMMON_LONG_OPTS,
    {NULL, 0, NULL, 0},
};

/* Options that take any unsigned 64-bit value. */
static int number_opt(struct encode_args *a, const char *cmd, int opt, const char *arg) {
  const struct {
    int opt;
    const char *name, *what;
    uint64_t *dst;
    int *seen;
  } nums[] = {
      {OPT_TTL, "--ttl", "a number of seconds", &a->eo.ttl_seconds, NULL},
      {OPT_OFFSET, "--offset", "a byte offset", &a->in.offset, &a->have_offset},
      {OPT_LENGTH, "--length", "a byte count", &a->in.length, &a->have_length},
      {OPT_ROWS, "--rows", "a count", &a->in.rows, NULL},
      {OPT_COLS, "--cols", "a count", &a->in.cols, NULL},
  };
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    if (nums[i].opt != opt) {
      continue;
    }
    if (!parse_u64(arg, 0, UINT64_MAX, nums[i].dst)) {
      return usage_error(cmd, "%s: '%s' is not %s", nums[i].name, arg, nums[i].what);
    }
    if (nums[i].seen) {
      *nums[i].seen = 1;
    }
    return EXIT_OK;
  }
  return NOT_MINE;
}

/* --devices LIST: the names point into a->devbuf. */
static int parse_devices(struct encode_args *a, const char *cmd, const char *arg) {
  free(a->devbuf);
  free(a->devices);
  a->devbuf = strdup(arg);
  size_t n = 1;
  for (const char *p = arg; *p; p++) {
    n += *p == ',';
  }
  a->devices = calloc(n, sizeof *a->devices);
  if (!a->devbuf || !a->devices) {
    fprintf(stderr, "qdpctl %s: out of memory\n", cmd);
    return EXIT_LOCAL;
  }
  a->ndevices = 0;
  char *p = a->devbuf;
  for (;;) {
    char *comma = strchr(p, ',');
    if (comma) {
      *comma = '\0';
    }
    if (!*p) {
      return usage_error(cmd, "--devices: empty device name in '%s'", arg);
    }
    a->devices[a->ndevices++] = p;
    if (!comma) {
      return EXIT_OK;
    }
    p = comma + 1;
  }
}

/* What to make: encoding, qubits, dtype, placement, lifetime, label, views. */
static int request_opt(struct encode_args *a, const char *cmd, int opt, const char *arg) {
  uint64_t v;
  int p;
  switch (opt) {
  case OPT_ENCODING:
    a->eo.encoding = qdp_encoding_from_name(arg);
    if (a->eo.encoding == QDP_ENCODING_UNSPECIFIED) {
      char names[256];
      encoding_names(names, sizeof names);
      return usage_error(cmd, "unknown encoding '%s' (%s)", arg, names);
    }
    return EXIT_OK;
  case OPT_QUBITS:
    if (!parse_u64(arg, 0, UINT32_MAX, &v)) {
      return usage_error(cmd, "--qubits: '%s' is not a count of qubits", arg);
    }
    a->eo.qubits = (uint32_t)v;
    return EXIT_OK;
  case OPT_DTYPE:
    a->eo.dtype = qdp_dtype_from_name(arg);
    if (a->eo.dtype != QDP_DTYPE_COMPLEX64 && a->eo.dtype != QDP_DTYPE_COMPLEX128) {
      return usage_error(cmd, "--dtype: '%s' is not complex64 or complex128", arg);
    }
    return EXIT_OK;
  case OPT_POLICY:
    if ((p = qdp_policy_from_name(arg)) < 0) {
      return usage_error(cmd,
                         "--policy: unknown policy '%s' (auto, single, even, uneven, capacity, "
                         "batch)",
                         arg);
    }
    a->eo.policy = (qdp_policy)p;
    return EXIT_OK;
  case OPT_DEVICES:
    return parse_devices(a, cmd, arg);
  case OPT_LABEL:
    a->eo.label = arg;
    return EXIT_OK;
  case OPT_IPC:
    a->eo.ipc = 1;
    return EXIT_OK;
  default:
    return NOT_MINE;
  }
}

/* Where the input is: exactly one of --values, --input, --server-file, --shm, --shm-fd and
 * --region. */
static int source_opt(struct encode_args *a, const char *cmd, int opt, const char *arg) {
  switch (opt) {
  case OPT_VALUES:
    a->values_arg = arg;
    return set_input(a, cmd, QDP_INPUT_INLINE);
  case OPT_INPUT:
  case OPT_SERVER_FILE:
    a->in.path = arg;
    return set_input(a, cmd, opt == OPT_INPUT ? QDP_INPUT_LOCAL_FILE : QDP_INPUT_SERVER_FILE);
  case OPT_SHM:
    a->in.shm_name = arg;
    return set_input(a, cmd, QDP_INPUT_SHM);
  case OPT_REGION:
    if (set_input(a, cmd, QDP_INPUT_SHM) != EXIT_OK ||
        split_ref(cmd, arg, a->regbuf, sizeof a->regbuf, &a->in.region, &a->in.region_token) !=
            EXIT_OK) {
      return EXIT_USAGE;
    }
    return EXIT_OK;
  case OPT_SHM_FD:
    if (set_input(a, cmd, QDP_INPUT_SHM) != EXIT_OK) {
      return EXIT_USAGE;
    }
    if (!parse_i32(arg, 0, INT32_MAX, &a->in.shm_fd)) {
      return usage_error(cmd, "--shm-fd: '%s' is not a file descriptor", arg);
    }
    return EXIT_OK;
  default:
    return NOT_MINE;
  }
}

/* How to read the input: its process, element type, upload and chunking. */
static int input_opt(struct encode_args *a, const char *cmd, int opt, const char *arg) {
  uint64_t v;
  switch (opt) {
  case OPT_SHM_PID:
    if (!parse_i32(arg, 1, INT32_MAX, &a->in.shm_pid)) {
      return usage_error(cmd, "--shm-pid: '%s' is not a process id", arg);
    }
    return EXIT_OK;
  case OPT_INPUT_DTYPE:
    a->input_dtype = qdp_dtype_from_name(arg);
    if (a->input_dtype != QDP_DTYPE_FLOAT32 && a->input_dtype != QDP_DTYPE_FLOAT64 &&
        a->input_dtype != QDP_DTYPE_INT64) {
      return usage_error(cmd, "--input-dtype: '%s' is not float32, float64 or int64", arg);
    }
    return EXIT_OK;
  case OPT_RAW:
    a->in.raw = 1;
    return EXIT_OK;
  case OPT_UPLOAD:
    a->force_upload = 1;
    return EXIT_OK;
  case OPT_CHUNK_BYTES:
    if (!parse_u64(arg, 1, (uint64_t)1 << 30, &v)) {
      return usage_error(cmd, "--chunk-bytes: '%s' is not in [1, 1073741824]", arg);
    }
    a->in.chunk_bytes = (size_t)v;
    return EXIT_OK;
  default:
    return NOT_MINE;
  }
}

int encode_opt(struct encode_args *a, const char *cmd, int opt, const char *arg) {
  int (*const handlers[])(struct encode_args *, const char *, int, const char *) = {
      number_opt, request_opt, source_opt, input_opt};
  int rc = NOT_MINE;
  for (size_t i = 0; rc == NOT_MINE && i < sizeof handlers / sizeof handlers[0]; i++) {
    rc = handlers[i](a, cmd, opt, arg);
  }
  return rc;
}

/* The options together: what goes with what, and the defaults that depend on the input. */
static int check_encode(const char *cmd, struct encode_args *a, int need_input) {
  if (a->eo.encoding == QDP_ENCODING_UNSPECIFIED) {
    return usage_error(cmd, "--encoding is required");
  }
  if (!a->have_input && need_input) {
    return usage_error(cmd, "an input is required: --values, --input, --server-file or --shm");
  }
  if (a->in.kind == QDP_INPUT_SHM && (!a->have_offset || !a->have_length)) {
    return usage_error(cmd, "--shm and --region need --offset and --length");
  }
  if (a->in.kind != QDP_INPUT_SHM && (a->have_length || a->in.shm_pid >= 0)) {
    return usage_error(cmd, "--length and --shm-pid go with --shm or --shm-fd");
  }
  if (a->have_offset && a->in.kind != QDP_INPUT_SHM && a->in.kind != QDP_INPUT_LOCAL_FILE) {
    return usage_error(cmd, "--offset goes with --shm or a raw --input file");
  }
  if (a->in.raw &&
      (a->in.kind != QDP_INPUT_LOCAL_FILE || a->input_dtype == QDP_DTYPE_UNSPECIFIED)) {
    return usage_error(cmd,
                       "--raw reads an --input file's bytes as values: give it with --input "
                       "and their type with --input-dtype");
  }
  return EXIT_OK;
}

/* Fills in what the options leave to the input: the process of an fd, the element type, inline
 * values, the upload threshold (--upload, which needs a file) and the device list. */
static int finish_encode(const char *cmd, struct encode_args *a) {
  if (a->in.kind == QDP_INPUT_SHM && !a->in.shm_name && !a->in.region && a->in.shm_pid < 0) {
    a->in.shm_pid = (int)getpid(); /* our own fd: valid while qdpctl waits for the reply */
  }
  a->in.dtype = a->input_dtype;
  if (a->in.kind == QDP_INPUT_INLINE) {
    if (a->in.dtype == QDP_DTYPE_UNSPECIFIED) {
      a->in.dtype = QDP_DTYPE_FLOAT64;
    }
    size_t n = 0;
    int rc = parse_values(cmd, a->values_arg, a->in.dtype, &a->values, &n);
    if (rc != EXIT_OK) {
      return rc;
    }
    a->in.data = a->values;
    a->in.data_bytes = n * qdp_dtype_size(a->in.dtype);
  }
  if ((a->in.kind == QDP_INPUT_SHM || a->in.kind == QDP_INPUT_NONE) &&
      a->in.dtype == QDP_DTYPE_UNSPECIFIED) {
    a->in.dtype = QDP_DTYPE_FLOAT64;
  }
  if (a->force_upload) {
    if (a->in.kind != QDP_INPUT_LOCAL_FILE) {
      return usage_error(cmd, "--upload goes with --input");
    }
    a->in.inline_max = 0;
  }
  a->eo.devices = a->devices;
  a->eo.ndevices = a->ndevices;
  return EXIT_OK;
}

int encode_args_finish(const char *cmd, struct encode_args *a, int need_input) {
  int rc = check_encode(cmd, a, need_input);
  return rc != EXIT_OK ? rc : finish_encode(cmd, a);
}

void encode_args_init(struct encode_args *a) {
  memset(a, 0, sizeof *a);
  a->eo = (struct qdp_encode_opts)QDP_ENCODE_OPTS_INIT;
  a->in = (struct qdp_input)QDP_INPUT_INIT;
}

static int parse_encode(struct global *g, const char *cmd, int argc, char **argv,
                        struct encode_args *a) {
  encode_args_init(a);
  optind = 0;
  int opt;
  char help[8192];
  encode_help(help, sizeof help);
  while ((opt = next_opt(g, cmd, help, argc, argv, "", encode_opts, 1)) > 0) {
    int rc = encode_opt(a, cmd, opt, optarg);
    if (rc == NOT_MINE) {
      return usage_error(cmd, "unknown option");
    }
    if (rc != EXIT_OK) {
      return rc;
    }
  }
  if (opt != OPT_END) {
    return opt == OPT_HELPED ? -1 : EXIT_USAGE;
  }
  if (optind < argc) {
    return usage_error(cmd, "unexpected argument '%s'", argv[optind]);
  }
  return encode_args_finish(cmd, a, strcmp(cmd, "plan") != 0);
}

int encode_fail(const struct global *g, const char *cmd, const struct encode_args *a) {
  int rc = fail(g, cmd);
  if (strcmp(qdp_last_error()->field, "input.raw") == 0) {
    fprintf(stderr,
            "qdpctl %s: to read '%s' as raw values after all, pass --raw with "
            "--input-dtype\n",
            cmd, a->in.path);
  }
  return rc;
}

void encode_args_free(struct encode_args *a) {
  free(a->values);
  free(a->devices);
  free(a->devbuf);
}

int cmd_encode(struct global *g, int argc, char **argv) {
  struct encode_args a;
  int rc = parse_encode(g, "encode", argc, argv, &a);
  if (rc != EXIT_OK) {
    encode_args_free(&a);
    return rc < 0 ? EXIT_OK : rc;
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "encode", &c);
  struct bar b;
  bar_start(&b, g, "encode");
  if (a.in.kind == QDP_INPUT_LOCAL_FILE) { /* uploaded: a bar, then the daemon's part */
    a.in.progress = bar_cb;
    a.in.progress_arg = &b;
    bar_wait(&b, "starting the upload", "encoding on the daemon");
  } else {
    bar_wait(&b, NULL, "encoding on the daemon");
  }
  struct qdp_state_info *s = NULL;
  qdp_status st = rc == EXIT_OK ? qdp_encode(c, &a.eo, &a.in, &s) : QDP_OK;
  bar_end(&b);
  if (rc == EXIT_OK) {
    rc = st != QDP_OK ? encode_fail(g, "encode", &a) : print_new_state(g, s);
  }
  qdp_state_info_free(s);
  qdp_client_destroy(c);
  encode_args_free(&a);
  return rc;
}

static void plan_json(const struct qdp_plan_info *p) {
  struct jw jw = {stdout, 0, {0}}, *w = &jw;
  jw_open(w, NULL, '{');
  jw_b(w, "feasible", p->feasible);
  jw_s(w, "policy", p->policy);
  jw_u(w, "global_bits", p->global_bits);
  jw_u(w, "total_bytes", p->total_bytes);
  jw_s(w, "message", p->message);
  jw_open(w, "needs", '[');
  for (size_t i = 0; i < p->nneeds; i++) {
    const struct qdp_device_need *d = p->needs[i];
    jw_open(w, NULL, '{');
    jw_i(w, "rank", d->rank);
    jw_s(w, "device", d->device);
    jw_u(w, "shard_bytes", d->shard_bytes);
    jw_u(w, "staging_bytes", d->staging_bytes);
    jw_u(w, "workspace_bytes", d->workspace_bytes);
    jw_u(w, "need_bytes", d->need_bytes);
    jw_u(w, "budget_bytes", d->budget_bytes);
    jw_b(w, "fits", d->fits);
    jw_close(w, '}');
  }
  jw_close(w, ']');
  jw_open(w, "shards", '[');
  for (size_t i = 0; i < p->nshards; i++) {
    shard_json(w, p->shards[i]);
  }
  jw_close(w, ']');
  jw_close(w, '}');
}

static void plan_text(const struct global *g, const struct qdp_plan_info *p) {
  char total[32];
  fmt_size(g, total, sizeof total, p->total_bytes);
  printf("%s: policy %s, global bits %" PRIu32 ", %s%s in %zu shard%s\n",
         p->feasible ? "feasible" : "NOT FEASIBLE", p->policy, p->global_bits, total,
         g->raw_bytes ? " bytes" : "", p->nshards, p->nshards == 1 ? "" : "s");
  if (p->message[0]) {
    printf("%s\n", p->message);
  }
  printf("\n");
  static const char *const head[] = {"DEVICE",    "RANK", "SHARD",  "STAGING",
                                     "WORKSPACE", "NEED", "BUDGET", "FITS"};
  static const int right[] = {0, 1, 1, 1, 1, 1, 1, 0};
  struct table t;
  table_init(&t, 8, head, right);
  for (size_t i = 0; i < p->nneeds; i++) {
    const struct qdp_device_need *d = p->needs[i];
    char rank[16], sh[24], st[24], ws[24], need[24], bud[24];
    snprintf(rank, sizeof rank, "%d", d->rank);
    fmt_size(g, sh, sizeof sh, d->shard_bytes);
    fmt_size(g, st, sizeof st, d->staging_bytes);
    fmt_size(g, ws, sizeof ws, d->workspace_bytes);
    fmt_size(g, need, sizeof need, d->need_bytes);
    fmt_size(g, bud, sizeof bud, d->budget_bytes);
    char *row[] = {d->device, rank, sh, st, ws, need, bud, d->fits ? "yes" : "NO"};
    table_row(&t, row);
  }
  table_print(&t, stdout);
  if (p->nshards) {
    printf("\n");
    shards_table(g, p->shards, p->nshards);
  }
}

int cmd_plan(struct global *g, int argc, char **argv) {
  struct encode_args a;
  int rc = parse_encode(g, "plan", argc, argv, &a);
  if (rc != EXIT_OK) {
    encode_args_free(&a);
    return rc < 0 ? EXIT_OK : rc;
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "plan", &c);
  struct qdp_plan_info *p = NULL;
  if (rc == EXIT_OK && qdp_plan(c, &a.eo, &a.in, &p) != QDP_OK) {
    rc = encode_fail(g, "plan", &a);
  } else if (rc == EXIT_OK && g->json) {
    plan_json(p);
  } else if (rc == EXIT_OK) {
    plan_text(g, p);
  }
  qdp_plan_info_free(p);
  qdp_client_destroy(c);
  encode_args_free(&a);
  return rc;
}
