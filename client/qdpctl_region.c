/* qdpctl_region.c — region add and rm: shared memory registered once for many encodes. */
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "qdpctl.h"

static const char region_help[] =
    "Usage: qdpctl region add NAME | --pid PID --fd FD\n"
    "       qdpctl region rm REF\n"
    "\n"
    "add has qdpd map a POSIX shared-memory region of its node once (and page-lock it for its\n"
    "GPUs) and prints the region's REF (HANDLE:TOKEN); 'encode --region REF --offset N --length "
    "N'\n"
    "then reads it in place, as many times as needed, without mapping it again. The region is\n"
    "named by its shm_open NAME, or by an open fd of a process (/proc/PID/fd/FD); qdpctl opens it\n"
    "with your rights and hands the descriptor to qdpd (so it must run on qdpd's node).\n"
    "rm unregisters it; an encode reading it finishes first.\n"
    "\n"
    "Examples:\n"
    "  ref=$(qdpctl --json region add /features |\n"
    "        python3 -c 'import json,sys; print(json.load(sys.stdin)[\"ref\"])')\n"
    "  qdpctl encode --encoding amplitude --qubits 10 --region \"$ref\" --offset 0 --length 8192\n"
    "  qdpctl region rm \"$ref\"\n";

int cmd_region(struct global *g, int argc, char **argv) {
  static const struct option opts[] = {
      {"pid", required_argument, NULL, OPT_PID},
      {"fd", required_argument, NULL, OPT_FD},
      COMMON_LONG_OPTS,
      {NULL, 0, NULL, 0},
  };
  const char *cmd = "region";
  int pid = -1, fd = -1;
  optind = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    int r = common_opt(g, opt, optarg);
    if (r < 0) {
      return usage_error(cmd, "bad value '%s'", optarg);
    }
    if (r > 0) {
      continue;
    }
    switch (opt) {
    case OPT_HELP:
      print_help(region_help, "\n");
      return EXIT_OK;
    case OPT_PID:
      if (!parse_i32(optarg, 1, INT32_MAX, &pid)) {
        return usage_error(cmd, "--pid: '%s' is not a process id", optarg);
      }
      break;
    case OPT_FD:
      if (!parse_i32(optarg, 0, INT32_MAX, &fd)) {
        return usage_error(cmd, "--fd: '%s' is not a file descriptor", optarg);
      }
      break;
    default:
      return usage_error(cmd, "unknown option");
    }
  }
  int npos = argc - optind;
  const char *sub = npos > 0 ? argv[optind] : NULL;
  const char *arg = npos > 1 ? argv[optind + 1] : NULL;
  if (!sub || (strcmp(sub, "add") != 0 && strcmp(sub, "rm") != 0)) {
    return usage_error(cmd, "give 'add NAME', 'add --pid PID --fd FD' or 'rm REF'");
  }
  if (npos > 2) {
    return usage_error(cmd, "unexpected argument '%s'", argv[optind + 2]);
  }
  int is_add = strcmp(sub, "add") == 0;
  char buf[256];
  const char *handle = NULL, *token = NULL;
  if (is_add) {
    if ((arg != NULL) == (pid > 0 || fd >= 0) || (!arg && (pid <= 0 || fd < 0))) {
      return usage_error(cmd, "add takes a NAME, or --pid and --fd");
    }
  } else {
    if (!arg) {
      return usage_error(cmd, "missing REF");
    }
    if (pid > 0 || fd >= 0) {
      return usage_error(cmd, "--pid and --fd go with add");
    }
    if (split_ref(cmd, arg, buf, sizeof buf, &handle, &token) != EXIT_OK) {
      return EXIT_USAGE;
    }
  }
  qdp_client *c = NULL;
  int rc = connect_client(g, cmd, &c);
  if (rc != EXIT_OK) {
    return rc;
  }
  struct jw w = {stdout, 0, {0}};
  if (is_add) {
    struct qdp_region_info ri = QDP_REGION_INFO_INIT;
    if (qdp_region_register(c, arg, pid, fd, &ri) != QDP_OK) {
      rc = fail(g, cmd);
    } else if (g->json) {
      char ref[160];
      snprintf(ref, sizeof ref, "%s:%s", ri.handle, ri.token);
      jw_open(&w, NULL, '{');
      jw_s(&w, "ref", ref);
      jw_s(&w, "handle", ri.handle);
      jw_u(&w, "bytes", ri.bytes);
      jw_s(&w, "owner", ri.owner);
      jw_b(&w, "sealed", ri.sealed);
      jw_b(&w, "pinned", ri.pinned);
      jw_i(&w, "created_unix_ms", ri.created_unix_ms);
      jw_close(&w, '}');
    } else {
      printf("%s:%s\n", ri.handle, ri.token);
      printf("region     %" PRIu64 " bytes%s%s\n", ri.bytes, ri.sealed ? ", sealed" : "",
             ri.pinned ? ", pinned" : "");
    }
  } else {
    if (qdp_region_unregister(c, handle, token) != QDP_OK) {
      rc = fail(g, cmd);
    } else if (g->json) {
      jw_open(&w, NULL, '{');
      jw_s(&w, "unregistered", handle);
      jw_close(&w, '}');
    } else {
      printf("unregistered %s\n", handle);
    }
  }
  qdp_client_destroy(c);
  return rc;
}
