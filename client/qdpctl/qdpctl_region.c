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
    "The region stays registered after qdpctl exits, until rm (or qdpd stops).\n"
    "rm unregisters it; an encode reading it finishes first.\n"
    "\n"
    "Examples:\n"
    "  ref=$(qdpctl --json region add /features |\n"
    "        python3 -c 'import json,sys; print(json.load(sys.stdin)[\"ref\"])')\n"
    "  qdpctl encode --encoding amplitude --qubits 10 --region \"$ref\" --offset 0 --length 8192\n"
    "  qdpctl region rm \"$ref\"\n";

/* What a region command asks for once its options are read. */
struct region_args {
  int is_add;
  const char *name;           /* add NAME */
  int pid, fd;                /* add --pid PID --fd FD */
  const char *handle, *token; /* rm REF, split into buf */
  char buf[256];
};

static const struct option region_opts[] = {
    {"pid", required_argument, NULL, OPT_PID},
    {"fd", required_argument, NULL, OPT_FD},
    COMMON_LONG_OPTS,
    {NULL, 0, NULL, 0},
};

/* The options (--pid, --fd and the common ones); -1 after --help. */
static int region_options(struct global *g, int argc, char **argv, struct region_args *a) {
  const char *cmd = "region";
  optind = 0;
  int opt;
  while ((opt = next_opt(g, cmd, region_help, argc, argv, "", region_opts, 0)) > 0) {
    switch (opt) {
    case OPT_PID:
      if (!parse_i32(optarg, 1, INT32_MAX, &a->pid)) {
        return usage_error(cmd, "--pid: '%s' is not a process id", optarg);
      }
      break;
    case OPT_FD:
      if (!parse_i32(optarg, 0, INT32_MAX, &a->fd)) {
        return usage_error(cmd, "--fd: '%s' is not a file descriptor", optarg);
      }
      break;
    default:
      return usage_error(cmd, "unknown option");
    }
  }
  return opt == OPT_END ? EXIT_OK : opt == OPT_HELPED ? -1 : EXIT_USAGE;
}

/* The subcommand and its argument, and what goes with which. */
static int region_parse(struct global *g, int argc, char **argv, struct region_args *a) {
  const char *cmd = "region";
  a->pid = a->fd = -1;
  int rc = region_options(g, argc, argv, a);
  if (rc != EXIT_OK) {
    return rc;
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
  a->is_add = strcmp(sub, "add") == 0;
  if (a->is_add) {
    if ((arg != NULL) == (a->pid > 0 || a->fd >= 0) || (!arg && (a->pid <= 0 || a->fd < 0))) {
      return usage_error(cmd, "add takes a NAME, or --pid and --fd");
    }
    a->name = arg;
    return EXIT_OK;
  }
  if (!arg) {
    return usage_error(cmd, "missing REF");
  }
  if (a->pid > 0 || a->fd >= 0) {
    return usage_error(cmd, "--pid and --fd go with add");
  }
  return split_ref(cmd, arg, a->buf, sizeof a->buf, &a->handle, &a->token) != EXIT_OK ? EXIT_USAGE
                                                                                      : EXIT_OK;
}

static int region_add(struct global *g, qdp_client *c, const struct region_args *a) {
  struct qdp_region_info ri = QDP_REGION_INFO_INIT;
  /* Kept: the region is for later commands to name, so it must outlive this one's process. */
  if (qdp_region_register_flags(c, a->name, a->pid, a->fd, QDP_REGION_KEEP, &ri) != QDP_OK) {
    return fail(g, "region");
  }
  if (g->json) {
    struct jw w = {stdout, 0, {0}};
    char ref[160];
    snprintf(ref, sizeof ref, "%s:%s", ri.handle, ri.token);
    jw_open(&w, NULL, '{');
    jw_s(&w, "ref", ref);
    jw_s(&w, "handle", ri.handle);
    jw_u(&w, "bytes", ri.bytes);
    jw_s(&w, "owner", ri.owner);
    jw_b(&w, "sealed", ri.sealed);
    jw_b(&w, "frozen", ri.frozen);
    jw_b(&w, "pinned", ri.pinned);
    jw_i(&w, "created_unix_ms", ri.created_unix_ms);
    jw_close(&w, '}');
  } else {
    printf("%s:%s\n", ri.handle, ri.token);
    char sz[32];
    fmt_size(g, sz, sizeof sz, ri.bytes);
    printf("region     %s%s%s%s\n", sz, g->raw_bytes ? " bytes" : "",
           ri.frozen   ? ", sealed, frozen"
           : ri.sealed ? ", sealed"
                       : "",
           ri.pinned ? ", pinned" : "");
  }
  return EXIT_OK;
}

static int region_rm(struct global *g, qdp_client *c, const struct region_args *a) {
  if (qdp_region_unregister(c, a->handle, a->token) != QDP_OK) {
    return fail(g, "region");
  }
  if (g->json) {
    struct jw w = {stdout, 0, {0}};
    jw_open(&w, NULL, '{');
    jw_s(&w, "unregistered", a->handle);
    jw_close(&w, '}');
  } else {
    printf("unregistered %s\n", a->handle);
  }
  return EXIT_OK;
}

int cmd_region(struct global *g, int argc, char **argv) {
  struct region_args a;
  memset(&a, 0, sizeof a);
  int rc = region_parse(g, argc, argv, &a);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "region", &c);
  if (rc != EXIT_OK) {
    return rc;
  }
  rc = a.is_add ? region_add(g, c, &a) : region_rm(g, c, &a);
  qdp_client_destroy(c);
  return rc;
}
