/* qdpctl_fetch.c — a state's amplitudes elsewhere: fetch (to a local .npy), export (a .npy on
 * qdpd's node), gather (onto one device, as a new state). */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "qdpctl.h"

static const char fetch_help[] =
    "Usage: qdpctl fetch REF -o OUT.npy [--offset N] [--count N] [--force]\n"
    "\n"
    "Streams a state (or an amplitude range of it) into a local .npy file in the state's dtype:\n"
    "shape (batch, 2^n) for a whole batch, (2^n,) for a whole state, (count,) for a range. The\n"
    "file appears complete or not at all.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE  the .npy file to write (required)\n"
    "  --offset N         first amplitude over the flattened [batch, 2^n] array (default 0)\n"
    "  --count N          amplitudes (default: to the end)\n"
    "  --chunk-bytes N    bytes per streamed message (default: the daemon's, 1 MiB)\n"
    "  --force            replace an existing file\n"
    "\n"
    "Example:\n"
    "  qdpctl fetch 4f1c2a...:9b0e... -o state.npy\n"
    "  python3 -c 'import numpy; print(numpy.load(\"state.npy\")[:4])'\n";

static const char export_help[] =
    "Usage: qdpctl export REF PATH [--force]\n"
    "\n"
    "Has qdpd write the state as a .npy file at PATH on the daemon's node. qdpctl creates\n"
    "the file beside PATH with your rights and hands it to qdpd, which fills it; it then gets\n"
    "its name, complete or not at all. Over TCP, PATH is absolute and must lie beneath qdpd's\n"
    "export_dir.\n"
    "An existing file is refused unless --force. (To get the file on this machine instead, use\n"
    "fetch.)\n"
    "\n"
    "Example:\n"
    "  qdpctl export 4f1c2a...:9b0e... /data/states/psi.npy\n";

static const char gather_help[] =
    "Usage: qdpctl gather REF --device DEVICE [--ttl SECONDS]\n"
    "\n"
    "Copies a (sharded) state onto one device, device to device, as a new state; prints its REF\n"
    "and layout (one shard). The source state is left as it was. Refused with the numbers (bytes\n"
    "needed, bytes the device's budget has left) when the state does not fit there.\n"
    "\n"
    "Options:\n"
    "  --device DEVICE  a device name as status lists it (cuda:0, cpu:1) or its index (0)\n"
    "\n"
    "Example:\n"
    "  qdpctl gather 4f1c2a...:9b0e... --device cuda:0\n";

int cmd_fetch(struct global *g, int argc, char **argv) {
  const char *pos[1];
  int npos;
  struct qdp_fetch_opts fo = QDP_FETCH_OPTS_INIT;
  const char *out = NULL;
  int force = 0;
  int rc = parse_simple(g, "fetch", fetch_help, argc, argv, 1, 1, pos, &npos, &fo, &out, &force,
                        NULL, NULL);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  if (!out) {
    return usage_error("fetch", "-o OUT.npy is required");
  }
  struct ref r;
  qdp_client *c = NULL;
  if ((rc = ref_client(g, "fetch", pos[0], &r, &c)) == EXIT_USAGE) {
    return rc;
  }
  struct bar b;
  bar_start(&b, g, "fetch");
  fo.progress = bar_cb;
  fo.progress_arg = &b;
  bar_wait(&b, "waiting for the first bytes", "finishing the file");
  qdp_status fetched = rc == EXIT_OK ? qdp_fetch_npy(c, r.handle, r.token, &fo, out, force)
                                     : QDP_OK;
  bar_end(&b);
  if (rc == EXIT_OK && fetched != QDP_OK) {
    rc = fail(g, "fetch");
    if (qdp_last_error()->code == QDP_ERR_ALREADY_EXISTS && !qdp_last_error()->remote) {
      fprintf(stderr, "qdpctl fetch: pass --force to replace '%s'\n", out);
    }
  } else if (rc == EXIT_OK) {
    struct stat st;
    uint64_t size = stat(out, &st) == 0 ? (uint64_t)st.st_size : 0;
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_s(&w, "path", out);
      jw_u(&w, "offset", fo.offset);
      jw_u(&w, "count", fo.count);
      jw_u(&w, "file_bytes", size);
      jw_close(&w, '}');
    } else {
      char sz[32];
      fmt_size(g, sz, sizeof sz, size);
      printf("wrote %s (%s%s)\n", out, sz, g->raw_bytes ? " bytes" : "");
    }
  }
  qdp_client_destroy(c);
  return rc;
}

int cmd_export(struct global *g, int argc, char **argv) {
  const char *pos[2];
  int npos;
  int force = 0;
  int rc = parse_simple(g, "export", export_help, argc, argv, 2, 2, pos, &npos, NULL, NULL, &force,
                        NULL, NULL);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  struct ref r;
  qdp_client *c = NULL;
  if ((rc = ref_client(g, "export", pos[0], &r, &c)) == EXIT_USAGE) {
    return rc;
  }
  char *path = NULL;
  uint64_t bytes = 0;
  if (rc == EXIT_OK && qdp_export(c, r.handle, r.token, pos[1], force, &path, &bytes) != QDP_OK) {
    rc = fail(g, "export");
  } else if (rc == EXIT_OK) {
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_s(&w, "path", path);
      jw_u(&w, "bytes", bytes);
      jw_close(&w, '}');
    } else {
      char sz[32];
      fmt_size(g, sz, sizeof sz, bytes);
      printf("exported %s (%s%s)\n", path, sz, g->raw_bytes ? " bytes" : "");
    }
  }
  qdp_free(path);
  qdp_client_destroy(c);
  return rc;
}

int cmd_gather(struct global *g, int argc, char **argv) {
  const char *pos[1];
  int npos;
  const char *device = NULL;
  int rc = parse_simple(g, "gather", gather_help, argc, argv, 1, 1, pos, &npos, NULL, NULL, NULL,
                        NULL, &device);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  if (!device) {
    return usage_error("gather", "--device is required");
  }
  struct ref r;
  qdp_client *c = NULL;
  if ((rc = ref_client(g, "gather", pos[0], &r, &c)) == EXIT_USAGE) {
    return rc;
  }
  struct qdp_state_info *s = NULL;
  if (rc == EXIT_OK && qdp_gather(c, r.handle, r.token, device, 0, &s) != QDP_OK) {
    rc = fail(g, "gather");
  } else if (rc == EXIT_OK) {
    rc = print_new_state(g, s);
  }
  qdp_state_info_free(s);
  qdp_client_destroy(c);
  return rc;
}
