/* qdpctl_kernel.c — computations: kernel (the kernel matrix of resident states or of inputs'
 * states, into a local .npy file) and measure (a resident state's probabilities, Pauli
 * expectation values or samples, printed). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdpctl.h"

static const char kernel_help[] =
    "Usage: qdpctl kernel REF [REF_B] -o OUT.npy [--overlaps] [--force]\n"
    "       qdpctl kernel --encoding E --qubits N INPUT [--input-b FILE] [--max-bytes N]\n"
    "                     -o OUT.npy [--overlaps] [--force] [options]\n"
    "\n"
    "Has qdpd compute a kernel matrix and writes it as a local .npy file of shape (rows, cols):\n"
    "K[i][j] = |<a_i|b_j>|^2 for every sample i of a and j of b, float64 (float32 for complex64\n"
    "states). The first form takes resident states, a = REF and b = REF_B (REF with itself when\n"
    "REF_B is left out), computed where their shards are; they stay resident, and the matrix has\n"
    "the same bits however they are sharded. The second takes inputs: qdpd encodes INPUT's\n"
    "samples (and --input-b's; INPUT with itself when it is left out) a piece at a time on one\n"
    "device, pairs the pieces there and keeps no state.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE  the .npy file to write (required)\n"
    "  --overlaps         the complex overlaps <a_i|b_j> instead, in the states' dtype\n"
    "  --force            replace FILE if it exists\n"
    "\n"
    "The form from inputs:\n"
    "  --encoding E, --qubits N, --dtype T\n"
    "                     the states of both inputs, as encode takes them\n"
    "  --policy P         auto or single (default auto)\n"
    "  --devices LIST     the devices to choose from: the matrix is computed on one\n"
    "  INPUT              one of encode's inputs: --values, --input, --server-file, --shm,\n"
    "                     --shm-fd (--shm-pid) or --region, with --offset, --length, --rows,\n"
    "                     --cols, --input-dtype and --raw as encode takes them\n"
    "                     ('qdpctl encode --help'); an --input file of more than 1 MiB goes\n"
    "                     through shared memory made for the call\n"
    "  --input-b FILE     the second batch: a local file read as --input reads one\n"
    "                     (--input-dtype, --cols and --raw apply to it too)\n"
    "  --max-bytes N      the most device memory that holds amplitudes, which sets the tiles;\n"
    "                     0 (default): the tiles of the resident form. angle, basis and phase go\n"
    "                     a block of amplitudes of every row at a time, the others a tile of\n"
    "                     whole rows (two tiles of T rows of n qubits in complex128 take\n"
    "                     2*T*2^n*16 bytes); the partial sums come on top; smaller tiles cost\n"
    "                     more encodes\n"
    "\n"
    "Examples:\n"
    "  qdpctl kernel 4f1c2a...:9b0e... -o K.npy\n"
    "  python3 -c 'import numpy; print(numpy.load(\"K.npy\")[:2, :2])'\n"
    "  qdpctl kernel --encoding angle --qubits 8 --input X.npy --input-b Y.npy -o K.npy\n"
    "  qdpctl kernel --encoding amplitude --qubits 10 --input X.npy --max-bytes 67108864 \\\n"
    "                --dtype complex64 -o K.npy\n";

/* What kernel's options say: the output, and for the form from inputs its request and inputs. */
struct kernel_args {
  const char *out;
  int force;
  unsigned flags;
  int inputs; /* an option of the form from inputs was given */
  struct encode_args e;
  struct qdp_input b;
  int have_b;
  uint64_t max_bytes;
};

/* One of kernel's own options, or one of encode's (the form from inputs). */
static int kernel_opt(struct kernel_args *k, int opt, const char *arg, const char *name) {
  int rc = EXIT_OK;
  switch (opt) {
  case 'o':
  case OPT_OUTPUT:
    k->out = arg;
    return EXIT_OK;
  case OPT_FORCE:
    k->force = 1;
    return EXIT_OK;
  case OPT_OVERLAPS:
    k->flags |= QDP_KERNEL_OVERLAPS;
    return EXIT_OK;
  case OPT_INPUT_B:
    k->b.kind = QDP_INPUT_LOCAL_FILE;
    k->b.path = arg;
    k->have_b = 1;
    break;
  case OPT_MAX_BYTES:
    if (!parse_u64(arg, 0, UINT64_MAX, &k->max_bytes)) {
      return usage_error("kernel", "--max-bytes: '%s' is not a byte count", arg);
    }
    break;
  default:
    rc = encode_opt(&k->e, "kernel", opt, arg);
    if (rc == NOT_MINE) {
      return usage_error("kernel", "unknown option '%s'", name);
    }
  }
  k->inputs = 1;
  return rc;
}

/* The form from inputs, once every option is taken: encode's checks (an input is required), and
 * b read as an --input file would be. */
static int kernel_inputs(struct kernel_args *k) {
  k->b.dtype = k->e.input_dtype;
  k->b.cols = k->e.in.cols;
  k->b.raw = k->e.in.raw;
  return encode_args_finish("kernel", &k->e, 1);
}

int cmd_kernel(struct global *g, int argc, char **argv) {
  static const struct option opts[] = {
      {"output", required_argument, NULL, OPT_OUTPUT},
      {"force", no_argument, NULL, OPT_FORCE},
      {"overlaps", no_argument, NULL, OPT_OVERLAPS},
      {"input-b", required_argument, NULL, OPT_INPUT_B},
      {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
      ENCODE_REQUEST_LONG_OPTS,
      ENCODE_INPUT_LONG_OPTS,
      COMMON_LONG_OPTS,
      {NULL, 0, NULL, 0},
  };
  struct kernel_args k = {.b = QDP_INPUT_INIT};
  encode_args_init(&k.e);
  int opt, rc = EXIT_OK;
  optind = 0;
  while (rc == EXIT_OK &&
         (opt = next_opt(g, "kernel", kernel_help, argc, argv, "o:", opts, 1)) > 0) {
    rc = kernel_opt(&k, opt, optarg, argv[optind - 1]);
  }
  int npos = argc - optind;
  if (rc != EXIT_OK) {
    /* reported */
  } else if (opt != OPT_END) {
    rc = opt == OPT_HELPED ? -1 : EXIT_USAGE;
  } else if (k.inputs && npos) {
    rc = usage_error("kernel",
                     "'%s': give REFs of resident states or an input with --encoding "
                     "and --qubits, not both",
                     argv[optind]);
  } else if (!k.inputs && (npos < 1 || npos > 2)) {
    rc = usage_error("kernel",
                     npos < 1 ? "missing REF (or an input with --encoding and --qubits)"
                              : "unexpected argument '%s'",
                     argv[argc - 1]);
  } else if (!k.out) {
    rc = usage_error("kernel", "-o OUT.npy is required");
  } else if (k.inputs) {
    rc = kernel_inputs(&k);
  }
  struct ref a, b;
  const char *bh = NULL, *bt = NULL;
  if (rc == EXIT_OK && !k.inputs && npos == 2) {
    rc = split_ref("kernel", argv[optind + 1], b.buf, sizeof b.buf, &b.handle, &b.token);
    bh = b.handle;
    bt = b.token;
  }
  qdp_client *c = NULL;
  if (rc == EXIT_OK) {
    rc = k.inputs ? connect_client(g, "kernel", &c) : ref_client(g, "kernel", argv[optind], &a, &c);
  }
  struct qdp_kernel_info info = QDP_KERNEL_INFO_INIT;
  qdp_status st = QDP_OK;
  if (rc == EXIT_OK && k.inputs) {
    st = qdp_kernel_of_npy(c, &k.e.eo, &k.e.in, k.have_b ? &k.b : NULL, k.max_bytes, k.flags, k.out,
                           k.force, &info);
  } else if (rc == EXIT_OK) {
    st = qdp_kernel_npy(c, a.handle, a.token, bh, bt, k.flags, k.out, k.force, &info);
  }
  if (rc == EXIT_OK && st != QDP_OK) {
    rc = encode_fail(g, "kernel", &k.e);
    if (qdp_last_error()->code == QDP_ERR_ALREADY_EXISTS && !qdp_last_error()->remote) {
      fprintf(stderr, "qdpctl kernel: pass --force to replace '%s'\n", k.out);
    }
  } else if (rc == EXIT_OK && g->json) {
    struct jw w = {stdout, 0, {0}};
    jw_open(&w, NULL, '{');
    jw_s(&w, "path", k.out);
    jw_u(&w, "rows", info.rows);
    jw_u(&w, "cols", info.cols);
    jw_s(&w, "dtype", qdp_dtype_name(info.dtype));
    jw_u(&w, "bytes", info.bytes);
    jw_s(&w, "device", info.device);
    jw_d(&w, "compute_ms", info.compute_ms);
    jw_close(&w, '}');
  } else if (rc == EXIT_OK) {
    printf("wrote %s (%" PRIu64 " x %" PRIu64 " %s, computed on %s in %.3f ms)\n", k.out, info.rows,
           info.cols, qdp_dtype_name(info.dtype), info.device, info.compute_ms);
  }
  qdp_client_destroy(c);
  encode_args_free(&k.e);
  return rc < 0 ? EXIT_OK : rc;
}

static const char measure_help[] =
    "Usage: qdpctl measure REF (--qubits LIST | --pauli STRING... | --shots N [--seed S])\n"
    "\n"
    "Has qdpd measure a resident state where its shards are and prints, one line per sample, the\n"
    "probabilities of the outcomes of the qubits in LIST (outcome m has bit j equal to the j-th\n"
    "qubit of LIST; 'all' for every basis state), the expectation values of Pauli strings (one\n"
    "letter per qubit, I, X, Y or Z, letter k on qubit k), or N basis states drawn by their\n"
    "probabilities (indices; qubit k is bit k). With --json: rows, cols, values. The values (and\n"
    "the draws of a seed) are the same however the state is sharded.\n"
    "\n"
    "Options:\n"
    "  --qubits LIST    comma-separated qubits (at most 10), or 'all'\n"
    "  --pauli STRING   a Pauli string; repeat for more\n"
    "  --shots N        draws per sample\n"
    "  --seed S         the draws' seed (default 0): the same seed, the same draws\n"
    "\n"
    "Examples:\n"
    "  qdpctl measure 4f1c2a...:9b0e... --qubits 0,3\n"
    "  qdpctl measure 4f1c2a...:9b0e... --pauli ZII --pauli IXY\n"
    "  qdpctl measure 4f1c2a...:9b0e... --shots 1000 --seed 7\n";

/* "0,3" into qubits (at most max); 'all': none. -1 on a malformed list. */
static int qubit_list(const char *arg, uint32_t *qubits, size_t max, size_t *ret_n) {
  *ret_n = 0;
  if (strcmp(arg, "all") == 0) {
    return 0;
  }
  const char *p = arg;
  while (*p) {
    char *end = NULL;
    unsigned long v = strtoul(p, &end, 10);
    if (end == p || v > UINT32_MAX || *ret_n == max || (*end && *end != ',')) {
      return -1;
    }
    qubits[(*ret_n)++] = (uint32_t)v;
    p = *end ? end + 1 : end;
  }
  return *ret_n ? 0 : -1;
}

int cmd_measure(struct global *g, int argc, char **argv) {
  static const struct option opts[] = {
      {"qubits", required_argument, NULL, OPT_QUBITS},
      {"pauli", required_argument, NULL, OPT_PAULI},
      {"shots", required_argument, NULL, OPT_SHOTS},
      {"seed", required_argument, NULL, OPT_SEED},
      COMMON_LONG_OPTS,
      {NULL, 0, NULL, 0},
  };
  uint32_t qubits[16];
  size_t nq = 0, np = 0;
  const char *paulis[64];
  int have_qubits = 0, opt;
  uint64_t shots = 0, seed = 0;
  int have_seed = 0;
  optind = 0;
  while ((opt = next_opt(g, "measure", measure_help, argc, argv, "", opts, 0)) > 0) {
    if (opt == OPT_QUBITS) {
      if (qubit_list(optarg, qubits, sizeof qubits / sizeof qubits[0], &nq) != 0) {
        return usage_error("measure", "--qubits '%s': give qubits as 0,3 (at most 16), or all",
                           optarg);
      }
      have_qubits = 1;
    } else if (opt == OPT_PAULI) {
      if (np == sizeof paulis / sizeof paulis[0]) {
        return usage_error("measure", "at most %zu --pauli strings at once",
                           sizeof paulis / sizeof paulis[0]);
      }
      paulis[np++] = optarg;
    } else if (opt == OPT_SHOTS || opt == OPT_SEED) {
      char *end = NULL;
      errno = 0;
      unsigned long long v = strtoull(optarg, &end, 10);
      if (!*optarg || *end || errno || optarg[0] == '-' || (opt == OPT_SHOTS && v == 0)) {
        return usage_error("measure", "%s '%s': give %s", opt == OPT_SHOTS ? "--shots" : "--seed",
                           optarg, opt == OPT_SHOTS ? "a count of draws (1, 2, ...)"
                                                    : "an unsigned number");
      }
      *(opt == OPT_SHOTS ? &shots : &seed) = v;
      have_seed |= opt == OPT_SEED;
    } else {
      return usage_error("measure", "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (opt != OPT_END) {
    return opt == OPT_HELPED ? EXIT_OK : EXIT_USAGE;
  }
  if (argc - optind != 1) {
    return usage_error("measure", argc - optind < 1 ? "missing REF" : "unexpected argument '%s'",
                       argv[argc - 1]);
  }
  if (have_qubits + (np > 0) + (shots > 0) != 1 || (have_seed && !shots)) {
    return usage_error("measure", "give one of --qubits, --pauli and --shots (--seed with --shots)");
  }
  struct ref r;
  qdp_client *c = NULL;
  int rc = ref_client(g, "measure", argv[optind], &r, &c);
  if (rc == EXIT_USAGE) {
    return rc;
  }
  struct qdp_measure_info info = QDP_MEASURE_INFO_INIT;
  void *vals = NULL;
  size_t cap = 0;
  qdp_status st = QDP_OK;
  /* The values' size is the daemon's to say: a first try into a small buffer tells it. */
  for (int attempt = 0; rc == EXIT_OK && attempt < 2; attempt++) {
    st = shots ? qdp_sample(c, r.handle, r.token, shots, seed, vals, cap, &info)
         : np  ? qdp_expectations(c, r.handle, r.token, paulis, np, vals, cap, &info)
               : qdp_probabilities(c, r.handle, r.token, qubits, nq, vals, cap, &info);
    if (st != QDP_ERR_OUT_OF_RANGE || attempt == 1) {
      break;
    }
    cap = qdp_last_error()->need_bytes;
    vals = malloc(cap ? cap : 1);
    if (!vals) {
      fprintf(stderr, "qdpctl measure: no memory for %zu bytes of values\n", cap);
      rc = EXIT_FAILURE;
    }
  }
  if (rc == EXIT_OK && st != QDP_OK) {
    rc = fail(g, "measure");
  } else if (rc == EXIT_OK) {
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_u(&w, "rows", info.rows);
      jw_u(&w, "cols", info.cols);
      jw_s(&w, "device", info.device);
      jw_d(&w, "compute_ms", info.compute_ms);
      jw_open(&w, "values", '[');
      for (uint64_t i = 0; i < info.rows; i++) {
        jw_open(&w, NULL, '[');
        for (uint64_t j = 0; j < info.cols; j++) {
          if (shots) {
            jw_i(&w, NULL, ((const int64_t *)vals)[i * info.cols + j]);
          } else {
            jw_d(&w, NULL, ((const double *)vals)[i * info.cols + j]);
          }
        }
        jw_close(&w, ']');
      }
      jw_close(&w, ']');
      jw_close(&w, '}');
    } else {
      for (uint64_t i = 0; i < info.rows; i++) {
        for (uint64_t j = 0; j < info.cols; j++) {
          if (shots) {
            printf("%s%" PRId64, j ? " " : "", ((const int64_t *)vals)[i * info.cols + j]);
          } else {
            printf("%s%.17g", j ? " " : "", ((const double *)vals)[i * info.cols + j]);
          }
        }
        printf("\n");
      }
    }
  }
  free(vals);
  qdp_client_destroy(c);
  return rc;
}
