/* qdpctl_kernel.c — kernel: the kernel matrix of resident states into a local .npy file. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "qdpctl.h"

static const char kernel_help[] =
    "Usage: qdpctl kernel REF [REF_B] -o OUT.npy [--overlaps] [--force]\n"
    "\n"
    "Has qdpd compute the kernel matrix of resident states where their shards are, and writes it\n"
    "as a local .npy file of shape (rows, cols): K[i][j] = |<a_i|b_j>|^2 for every sample i of\n"
    "REF and j of REF_B (REF with itself when REF_B is left out), float64 (float32 for complex64\n"
    "states). The states stay resident. The matrix has the same bits however the states are\n"
    "sharded.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE  the .npy file to write (required)\n"
    "  --overlaps         the complex overlaps <a_i|b_j> instead, in the states' dtype\n"
    "  --force            replace FILE if it exists\n"
    "\n"
    "Example:\n"
    "  qdpctl kernel 4f1c2a...:9b0e... -o K.npy\n"
    "  python3 -c 'import numpy; print(numpy.load(\"K.npy\")[:2, :2])'\n";

int cmd_kernel(struct global *g, int argc, char **argv) {
  static const struct option opts[] = {
      {"output", required_argument, NULL, OPT_OUTPUT},
      {"force", no_argument, NULL, OPT_FORCE},
      {"overlaps", no_argument, NULL, OPT_OVERLAPS},
      COMMON_LONG_OPTS,
      {NULL, 0, NULL, 0},
  };
  const char *out = NULL;
  int force = 0;
  unsigned flags = 0;
  int opt;
  optind = 0;
  while ((opt = next_opt(g, "kernel", kernel_help, argc, argv, "o:", opts, 0)) > 0) {
    if (opt == 'o' || opt == OPT_OUTPUT) {
      out = optarg;
    } else if (opt == OPT_FORCE) {
      force = 1;
    } else if (opt == OPT_OVERLAPS) {
      flags |= QDP_KERNEL_OVERLAPS;
    } else {
      return usage_error("kernel", "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (opt != OPT_END) {
    return opt == OPT_HELPED ? EXIT_OK : EXIT_USAGE;
  }
  int npos = argc - optind;
  if (npos < 1 || npos > 2) {
    return usage_error("kernel", npos < 1 ? "missing REF" : "unexpected argument '%s'",
                       argv[argc - 1]);
  }
  if (!out) {
    return usage_error("kernel", "-o OUT.npy is required");
  }
  struct ref a, b;
  const char *bh = NULL, *bt = NULL;
  if (npos == 2) {
    if (split_ref("kernel", argv[optind + 1], b.buf, sizeof b.buf, &b.handle, &b.token) !=
        EXIT_OK) {
      return EXIT_USAGE;
    }
    bh = b.handle;
    bt = b.token;
  }
  qdp_client *c = NULL;
  int rc = ref_client(g, "kernel", argv[optind], &a, &c);
  if (rc == EXIT_USAGE) {
    return rc;
  }
  struct qdp_kernel_info info = QDP_KERNEL_INFO_INIT;
  if (rc == EXIT_OK &&
      qdp_kernel_npy(c, a.handle, a.token, bh, bt, flags, out, force, &info) != QDP_OK) {
    rc = fail(g, "kernel");
    if (qdp_last_error()->code == QDP_ERR_ALREADY_EXISTS && !qdp_last_error()->remote) {
      fprintf(stderr, "qdpctl kernel: pass --force to replace '%s'\n", out);
    }
  } else if (rc == EXIT_OK) {
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_s(&w, "path", out);
      jw_u(&w, "rows", info.rows);
      jw_u(&w, "cols", info.cols);
      jw_s(&w, "dtype", qdp_dtype_name(info.dtype));
      jw_u(&w, "bytes", info.bytes);
      jw_s(&w, "device", info.device);
      jw_d(&w, "compute_ms", info.compute_ms);
      jw_close(&w, '}');
    } else {
      printf("wrote %s (%" PRIu64 " x %" PRIu64 " %s, computed on %s in %.3f ms)\n", out,
             info.rows, info.cols, qdp_dtype_name(info.dtype), info.device, info.compute_ms);
    }
  }
  qdp_client_destroy(c);
  return rc;
}
