/* qdpctl_states.c — the states qdpd holds: describe (and views), ls, rm, view-close. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qdpctl.h"

static const char describe_help[] =
    "Usage: qdpctl describe REF [--views [--writable]]\n"
    "\n"
    "Prints the layout of a state: encoding, qubits, batch, dtype, bytes, the plan's policy and\n"
    "every shard (rank, device, amplitude and sample ranges, bytes). REF is HANDLE:TOKEN as\n"
    "encode printed it.\n"
    "\n"
    "Options:\n"
    "  --views  also open a zero-copy view of every shard in this process (a descriptor taken\n"
    "           on the daemon's socket, or a legacy daemon's CUDA IPC handle; needs a GPU daemon\n"
    "           on this node) and print the view table: the shard's GPU as this process numbers\n"
    "           it, its UUID, its byte offset in the exported allocation, the lease and how it\n"
    "           came (VIA: fd or ipc).\n"
    "           The views are closed (and their lease with them) when qdpctl exits.\n"
    "  --writable  with --views: writable views under the state's exclusive write lease. It\n"
    "           opens only while no other view is open and no call reads the state; while it\n"
    "           is open the daemon reads none of its amplitudes (fetch, kernel, measure... fail\n"
    "           naming the lease), and the state is marked written for good. It ends with\n"
    "           qdpctl, as the views do.\n"
    "\n"
    "Examples:\n"
    "  qdpctl describe 4f1c2a...:9b0e...\n"
    "  qdpctl describe --views 4f1c2a...:9b0e...\n"
    "  qdpctl describe --views --writable 4f1c2a...:9b0e...\n";

static const char ls_help[] =
    "Usage: qdpctl ls [--mine | --all]\n"
    "\n"
    "Lists your states (handles only: tokens are never listed): encoding, qubits, batch, dtype,\n"
    "bytes, policy, shards, owner, expiry and label. You are who the daemon finds you to be: your\n"
    "uid on its socket, your token's principal over TCP. --mine (the default) says so; --all\n"
    "lists every identity's states, for the daemon's own user and root, yours marked '*'. Oldest\n"
    "first.\n"
    "\n"
    "Examples:\n"
    "  qdpctl ls\n"
    "  sudo qdpctl ls --all\n"
    "  qdpctl --json ls | python3 -c 'import json,sys; "
    "print(len(json.load(sys.stdin)[\"states\"]))'\n";

static const char rm_help[] =
    "Usage: qdpctl rm REF [REF...]\n"
    "       qdpctl rm --mine HANDLE [HANDLE...]\n"
    "       qdpctl rm --mine --all\n"
    "\n"
    "Releases states and frees their memory on the devices. Stops at the first one that fails\n"
    "(and exits with its code); the ones before it are released. With --mine, your own states\n"
    "are released by handle alone, no token needed (a lost token strands no memory); --mine --all\n"
    "releases every state of yours.\n"
    "\n"
    "Examples:\n"
    "  qdpctl rm 4f1c2a...:9b0e... 77d0e1...:c4a2...\n"
    "  qdpctl rm --mine s4f1c2a0b9e8d7c6\n"
    "  qdpctl rm --mine --all\n";

static const char view_close_help[] =
    "Usage: qdpctl view-close REF LEASE_ID\n"
    "\n"
    "Closes a view lease (from an encode with --ipc, or a process that cannot close its own).\n"
    "A state released while the lease was open is freed now if this was its last lease.\n"
    "\n"
    "Example:\n"
    "  qdpctl view-close 4f1c2a...:9b0e... 7\n";

int cmd_describe(struct global *g, int argc, char **argv) {
  const char *pos[1];
  int npos;
  int views = 0;
  int rc = parse_simple(g, "describe", describe_help, argc, argv, 1, 1, pos, &npos, NULL, NULL,
                        NULL, &views, NULL);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  if (views == 2) {
    return usage_error("describe", "--writable asks for writable views: give --views too");
  }
  struct ref r;
  qdp_client *c = NULL;
  if ((rc = ref_client(g, "describe", pos[0], &r, &c)) == EXIT_USAGE) {
    return rc;
  }
  struct qdp_state_info *s = NULL;
  const struct qdp_views *v = NULL;
  enum qdp_views_mode mode = views & 2 ? QDP_VIEWS_WRITE : QDP_VIEWS_READ;
  if (rc == EXIT_OK && views && qdp_views_open_mode(c, r.handle, r.token, mode, &v) != QDP_OK) {
    rc = fail(g, "describe");
  } else if (rc == EXIT_OK && !views && qdp_describe(c, r.handle, r.token, &s) != QDP_OK) {
    rc = fail(g, "describe");
  } else if (rc == EXIT_OK) {
    const struct qdp_state_info *info = v ? v->state : s;
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_s(&w, "ref", pos[0]);
      state_json_fields(&w, info);
      if (v) {
        jw_open(&w, "views", '[');
        for (size_t i = 0; i < v->count; i++) {
          jw_open(&w, NULL, '{');
          jw_i(&w, "local_gpu", v->views[i].device_id);
          jw_b(&w, "writable", v->writable);
          jw_close(&w, '}');
        }
        jw_close(&w, ']');
      }
      jw_close(&w, '}');
    } else {
      state_print(g, info, pos[0]);
      if (v) {
        views_table(v);
      }
    }
  }
  qdp_state_info_free(s);
  qdp_client_destroy(c); /* closes the views and their lease */
  return rc;
}

/* Oldest first, then by handle: the same order on every call. */
static int by_age(const void *a, const void *b) {
  const struct qdp_state_info *x = *(const struct qdp_state_info *const *)a;
  const struct qdp_state_info *y = *(const struct qdp_state_info *const *)b;
  if (x->created_unix_ms != y->created_unix_ms) {
    return x->created_unix_ms < y->created_unix_ms ? -1 : 1;
  }
  return strcmp(x->handle, y->handle);
}

/* The identity the daemon files this caller's states under, when qdpctl can know it: its uid on
 * a Unix socket ("uid:N"); "" over TCP (a token's principal is the daemon's to say). */
static void own_identity(qdp_client *c, char *buf, size_t size) {
  const char *t = qdp_client_target(c);
  buf[0] = '\0';
  if (t && strncmp(t, "unix:", 5) == 0) {
    snprintf(buf, size, "uid:%u", (unsigned)getuid());
  }
}

int cmd_ls(struct global *g, int argc, char **argv) {
  const char *pos[1];
  int npos, mine = 0, all = 0;
  int rc = parse_owned(g, "ls", ls_help, argc, argv, 0, pos, &npos, &mine, &all);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  if (mine && all) {
    return usage_error("ls", "--mine and --all contradict each other");
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "ls", &c);
  struct qdp_state_list *l = NULL;
  if (rc == EXIT_OK && (all ? qdp_list_all(c, &l) : qdp_list(c, &l)) != QDP_OK) {
    rc = fail(g, "ls");
  } else if (rc == EXIT_OK) {
    char me[64];
    own_identity(c, me, sizeof me);
    if (l->count) { /* an empty list has no array, and qsort's may not be NULL */
      qsort(l->states, l->count, sizeof *l->states, by_age);
    }
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_open(&w, "states", '[');
      for (size_t i = 0; i < l->count; i++) {
        jw_open(&w, NULL, '{');
        state_json_fields(&w, l->states[i]);
        if (me[0]) {
          jw_b(&w, "yours", strcmp(l->states[i]->owner, me) == 0);
        }
        jw_close(&w, '}');
      }
      jw_close(&w, ']');
      jw_close(&w, '}');
    } else {
      static const char *const head[] = {"HANDLE", "ENCODING", "QUBITS", "BATCH",
                                         "DTYPE",  "BYTES",    "POLICY", "SHARDS",
                                         "OWNER",  "EXPIRES",  "LABEL"};
      static const int right[] = {0, 0, 1, 1, 0, 1, 0, 1, 0, 0, 0};
      struct table t;
      table_init(&t, 11, head, right);
      int marked = 0;
      for (size_t i = 0; i < l->count; i++) {
        const struct qdp_state_info *s = l->states[i];
        char q[16], batch[24], bytes[24], shards[24], exp[40], handle[80];
        /* Listing every identity's: the caller's own are marked. */
        int yours = all && me[0] && strcmp(s->owner, me) == 0;
        marked |= yours;
        snprintf(handle, sizeof handle, "%s%s", s->handle, yours ? " *" : "");
        const char *enc = qdp_encoding_name(s->encoding);
        const char *dt = qdp_dtype_name(s->dtype);
        snprintf(q, sizeof q, "%" PRIu32, s->qubits);
        fmt_u64(batch, sizeof batch, s->batch);
        fmt_size(g, bytes, sizeof bytes, s->bytes);
        snprintf(shards, sizeof shards, "%zu", s->nshards);
        fmt_time(exp, sizeof exp, s->expires_unix_ms, "never");
        char *row[] = {handle,
                       (char *)(enc ? enc : "?"),
                       q,
                       batch,
                       (char *)(dt ? dt : "?"),
                       bytes,
                       s->policy,
                       shards,
                       s->owner,
                       exp,
                       s->label};
        table_row(&t, row);
      }
      table_print(&t, stdout);
      if (marked) {
        printf("* yours (%s)\n", me);
      }
    }
  }
  qdp_state_list_free(l);
  qdp_client_destroy(c);
  return rc;
}

int cmd_rm(struct global *g, int argc, char **argv) {
  const char *pos[256];
  int npos, mine = 0, all = 0;
  int rc = parse_owned(g, "rm", rm_help, argc, argv, 256, pos, &npos, &mine, &all);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  if (all && (!mine || npos > 0)) {
    return usage_error("rm",
                       "--all releases every state of yours: give it with --mine and no "
                       "handles");
  }
  if (!all && npos == 0) {
    return usage_error("rm", "missing REF");
  }
  static char bufs[256][256];
  const char *handles[256], *tokens[256];
  for (int i = 0; i < npos; i++) {
    if (mine && !strchr(pos[i], ':')) {
      handles[i] = pos[i]; /* your own, by handle: no token */
      tokens[i] = "";
    } else if (split_ref("rm", pos[i], bufs[i], sizeof bufs[i], &handles[i], &tokens[i]) !=
               EXIT_OK) {
      return EXIT_USAGE;
    }
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "rm", &c);
  struct qdp_state_list *l = NULL;
  if (rc == EXIT_OK && all) {
    if (qdp_list(c, &l) != QDP_OK) {
      rc = fail(g, "rm");
    } else {
      for (size_t k = 0; k < l->count && k < 256; k++) {
        handles[npos] = l->states[k]->handle;
        tokens[npos++] = "";
      }
    }
  }
  struct jw w = {stdout, 0, {0}};
  if (rc == EXIT_OK && g->json) {
    jw_open(&w, NULL, '{');
    jw_open(&w, "released", '[');
  }
  int i = 0;
  for (; rc == EXIT_OK && i < npos; i++) {
    uint64_t freed = 0;
    if (interrupted || qdp_release(c, handles[i], tokens[i], &freed) != QDP_OK) {
      break; /* Ctrl-C: what is released is said; what is not stays */
    }
    if (g->json) {
      jw_open(&w, NULL, '{');
      jw_s(&w, "handle", handles[i]);
      jw_u(&w, "freed_bytes", freed);
      jw_close(&w, '}');
    } else {
      char sz[32];
      fmt_size(g, sz, sizeof sz, freed);
      printf("released %s (%s%s freed)\n", handles[i], sz, g->raw_bytes ? " bytes" : "");
    }
  }
  if (rc == EXIT_OK) {
    const struct qdp_errinfo *e = qdp_last_error();
    struct qdp_errinfo stop = QDP_ERRINFO_INIT;
    int failed = i < npos;
    if (failed && interrupted) {
      stop.code = QDP_ERR_CANCELLED;
      snprintf(stop.code_name, sizeof stop.code_name, "%s", qdp_status_name(stop.code));
      snprintf(stop.msg, sizeof stop.msg, "Interrupted after %d of %d released.", i, npos);
      e = &stop;
    }
    if (g->json) {
      jw_close(&w, ']');
      if (failed) {
        error_json(&w, e, 0);
      }
      jw_close(&w, '}');
    }
    if (failed) {
      fprintf(stderr, "qdpctl rm: %s (%s)\n", e->msg, e->code_name);
      rc = exit_code_for(e);
    }
  }
  qdp_state_list_free(l);
  qdp_client_destroy(c);
  return rc;
}

int cmd_view_close(struct global *g, int argc, char **argv) {
  const char *pos[2];
  int npos;
  int rc = parse_simple(g, "view-close", view_close_help, argc, argv, 2, 2, pos, &npos, NULL, NULL,
                        NULL, NULL, NULL);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  char buf[1024];
  const char *handle, *token;
  uint64_t lease = 0;
  if (split_ref("view-close", pos[0], buf, sizeof buf, &handle, &token) != EXIT_OK) {
    return EXIT_USAGE;
  }
  if (!parse_u64(pos[1], 1, UINT64_MAX, &lease)) {
    return usage_error("view-close", "'%s' is not a lease id", pos[1]);
  }
  qdp_client *c = NULL;
  rc = connect_client(g, "view-close", &c);
  uint64_t freed = 0;
  if (rc == EXIT_OK && qdp_close_view(c, handle, token, lease, &freed) != QDP_OK) {
    rc = fail(g, "view-close");
  } else if (rc == EXIT_OK) {
    if (g->json) {
      struct jw w = {stdout, 0, {0}};
      jw_open(&w, NULL, '{');
      jw_u(&w, "freed_bytes", freed);
      jw_close(&w, '}');
    } else {
      char sz[32];
      fmt_size(g, sz, sizeof sz, freed);
      printf("closed lease %" PRIu64 " (%s%s freed)\n", lease, sz, g->raw_bytes ? " bytes" : "");
    }
  }
  qdp_client_destroy(c);
  return rc;
}
