/* qdpctl_status.c — status and health: the daemon, its devices, budgets and links. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "qdpctl.h"

static const char status_help[] =
    "Usage: qdpctl status\n"
    "\n"
    "Prints qdpd's version, backend, budgets, counters, registered regions, what reductions over\n"
    "sharded states use (NCCL or the host), the world's ranks when there are several, one line\n"
    "per device (NUMA node, total, free, budget and used bytes), and the link matrix of this\n"
    "node's devices: NV<n> (NVLink, n links), PCIe, P2P (a peer path of unknown kind), HOST (one\n"
    "memory), '-' (none); '!' marks a pair whose peer access is off.\n"
    "\n"
    "Examples:\n"
    "  qdpctl status\n"
    "  qdpctl --target 127.0.0.1:7777 --token \"$TOKEN\" --json status\n";

static const char health_help[] =
    "Usage: qdpctl health\n"
    "\n"
    "Prints SERVING, NOT_SERVING or UNKNOWN; exits 0 only for SERVING (4 otherwise, 3 when\n"
    "qdpd cannot be reached), so it serves as a readiness probe.\n"
    "\n"
    "Example:\n"
    "  until qdpctl health >/dev/null 2>&1; do sleep 0.2; done\n";

/* The link matrix, in the spirit of nvidia-smi topo -m: NV<n> for n direct NVLink links, NV
 * through a switch, PCIe, P2P (a peer path NVML did not name), HOST (one memory), '-' none. */
static void print_topology(const struct qdp_server_status *s) {
  size_t n = 0; /* the links cover this node's devices, the first of the list */
  while ((n + 1) * (n + 1) <= s->nlinks) {
    n++;
  }
  if (n < 2 || n > s->ndevices || s->nlinks != n * n) {
    return;
  }
  int w = 6;
  for (size_t i = 0; i < n; i++) {
    int len = (int)strlen(s->devices[i]->name);
    w = len > w ? len : w;
  }
  printf("\ntopology (%s; ! = peer access off):\n%-*s", s->topology_source, w, "");
  for (size_t j = 0; j < n; j++) {
    printf("  %-*s", w, s->devices[j]->name);
  }
  for (size_t i = 0; i < n; i++) {
    printf("\n%-*s", w, s->devices[i]->name);
    for (size_t j = 0; j < n; j++) {
      const struct qdp_link_info *l = s->links[i * n + j];
      char c[24];
      if (strcmp(l->kind, "self") == 0) {
        snprintf(c, sizeof c, "X");
      } else if (strcmp(l->kind, "nvlink") == 0 && l->nvlinks > 0) {
        snprintf(c, sizeof c, "NV%d%s", l->nvlinks, l->peer ? "" : "!");
      } else {
        const char *k = strcmp(l->kind, "nvlink") == 0 ? "NV"
                        : strcmp(l->kind, "pcie") == 0 ? "PCIe"
                        : strcmp(l->kind, "peer") == 0 ? "P2P"
                        : strcmp(l->kind, "host") == 0 ? "HOST"
                                                       : "-";
        snprintf(c, sizeof c, "%s%s", k, l->peer || k[0] == '-' ? "" : "!");
      }
      printf("  %-*s", w, c);
    }
  }
  printf("\n");
}

/* The ranks of a multi-rank world: how they talk, then one line each. */
static void print_world(const struct qdp_server_status *s) {
  printf("world: %d ranks over %s (MPI threads %s), host collectives %s, rank timeout %" PRIu64
         " ms\ndevice collectives across ranks: %s\n",
         s->ranks, s->transport, s->mpi_threads, s->host_collectives, s->rank_timeout_ms,
         s->device_collectives);
  static const char *const head[] = {"RANK", "HOST", "DEVICES", "STATE"};
  static const int right[] = {1, 0, 1, 0};
  struct table t;
  table_init(&t, 4, head, right);
  for (size_t i = 0; i < s->nrank_info; i++) {
    const struct qdp_rank_info *r = s->rank_info[i];
    char rank[16], devs[16], state[192];
    snprintf(rank, sizeof rank, "%d", r->rank);
    snprintf(devs, sizeof devs, "%" PRIu32, r->devices);
    snprintf(state, sizeof state, "%s%s%.170s", r->lost ? "lost" : "live", r->lost ? ": " : "",
             r->reason);
    char *row[] = {rank, r->host, devs, state};
    table_row(&t, row);
  }
  table_print(&t, stdout);
  putchar('\n');
}

static void ranks_json(struct jw *w, const struct qdp_server_status *s) {
  jw_open(w, "rank_info", '[');
  for (size_t i = 0; i < s->nrank_info; i++) {
    const struct qdp_rank_info *r = s->rank_info[i];
    jw_open(w, NULL, '{');
    jw_i(w, "rank", r->rank);
    jw_s(w, "host", r->host);
    jw_u(w, "devices", r->devices);
    jw_b(w, "lost", r->lost);
    jw_s(w, "reason", r->reason);
    jw_close(w, '}');
  }
  jw_close(w, ']');
}

static void devices_json(struct jw *w, const struct qdp_server_status *s) {
  jw_open(w, "devices", '[');
  for (size_t i = 0; i < s->ndevices; i++) {
    const struct qdp_device_info *d = s->devices[i];
    jw_open(w, NULL, '{');
    jw_s(w, "name", d->name);
    jw_s(w, "kind", d->kind);
    jw_i(w, "rank", d->rank);
    jw_i(w, "ordinal", d->ordinal);
    jw_s(w, "uuid", d->uuid);
    jw_s(w, "model", d->model);
    jw_s(w, "host", d->host);
    jw_u(w, "total_bytes", d->total_bytes);
    jw_u(w, "free_bytes", d->free_bytes);
    jw_u(w, "budget_bytes", d->budget_bytes);
    jw_u(w, "used_bytes", d->used_bytes);
    jw_i(w, "cc_major", d->cc_major);
    jw_i(w, "cc_minor", d->cc_minor);
    jw_i(w, "numa_node", d->numa_node);
    jw_close(w, '}');
  }
  jw_close(w, ']');
}

static void links_json(struct jw *w, const struct qdp_server_status *s) {
  jw_open(w, "links", '[');
  for (size_t i = 0; i < s->nlinks; i++) {
    const struct qdp_link_info *l = s->links[i];
    jw_open(w, NULL, '{');
    jw_u(w, "from", l->from);
    jw_u(w, "to", l->to);
    jw_s(w, "kind", l->kind);
    jw_i(w, "nvlinks", l->nvlinks);
    jw_b(w, "peer", l->peer);
    jw_i(w, "perf_rank", l->perf_rank);
    jw_close(w, '}');
  }
  jw_close(w, ']');
}

static void status_json(const struct qdp_server_status *s, const char *target) {
  struct jw jw = {stdout, 0, {0}}, *w = &jw;
  jw_open(w, NULL, '{');
  jw_s(w, "target", target);
  jw_s(w, "version", s->version);
  jw_u(w, "uptime_ms", s->uptime_ms);
  jw_s(w, "backend", s->backend);
  jw_i(w, "ranks", s->ranks);
  jw_u(w, "budget_bytes", s->budget_bytes);
  jw_u(w, "used_bytes", s->used_bytes);
  jw_u(w, "states", s->states);
  jw_u(w, "jobs_total", s->jobs_total);
  jw_u(w, "jobs_failed", s->jobs_failed);
  jw_u(w, "max_qubits", s->max_qubits);
  jw_s(w, "transport", s->transport);
  jw_s(w, "host_collectives", s->host_collectives);
  jw_s(w, "device_collectives", s->device_collectives);
  jw_s(w, "mpi_threads", s->mpi_threads);
  jw_u(w, "rank_timeout_ms", s->rank_timeout_ms);
  ranks_json(w, s);
  devices_json(w, s);
  jw_u(w, "regions", s->regions);
  jw_u(w, "region_bytes", s->region_bytes);
  jw_s(w, "topology_source", s->topology_source);
  jw_s(w, "collectives", s->collectives);
  links_json(w, s);
  jw_close(w, '}');
}

static void status_text(const struct global *g, const struct qdp_server_status *s,
                        const char *target) {
  printf("qdpd %s at %s: backend %s, %d rank%s, up %.1f s\n", s->version, target, s->backend,
         s->ranks, s->ranks == 1 ? "" : "s", (double)s->uptime_ms / 1000.0);
  /* A store budget of 0 means only the device budgets apply. */
  const char *unit = g->raw_bytes ? " bytes" : "";
  char budget[64] = "no store budget", used[32], regions[32], b[32];
  if (s->budget_bytes) {
    fmt_size(g, b, sizeof b, s->budget_bytes);
    snprintf(budget, sizeof budget, "store budget %s%s", b, unit);
  }
  fmt_size(g, used, sizeof used, s->used_bytes);
  fmt_size(g, regions, sizeof regions, s->region_bytes);
  printf("states %" PRIu32 ", %s%s used (%s); jobs %" PRIu64 " (%" PRIu64 " failed); max qubits %" PRIu32
         "; regions %" PRIu32 " (%s%s)\n",
         s->states, used, unit, budget, s->jobs_total, s->jobs_failed, s->max_qubits, s->regions,
         regions, unit);
  printf("collectives: %s\n\n", s->collectives);
  if (s->ranks > 1) {
    print_world(s);
  }
  static const char *const head[] = {"DEVICE", "KIND",  "RANK", "HOST",   "MODEL",
                                     "NUMA",   "TOTAL", "FREE", "BUDGET", "USED"};
  static const int right[] = {0, 0, 1, 0, 0, 1, 1, 1, 1, 1};
  struct table t;
  table_init(&t, 10, head, right);
  for (size_t i = 0; i < s->ndevices; i++) {
    const struct qdp_device_info *d = s->devices[i];
    char rank[16], numa[16], tot[24], fr[24], bud[24], used[24];
    snprintf(rank, sizeof rank, "%d", d->rank);
    snprintf(numa, sizeof numa, d->numa_node < 0 ? "-" : "%d", d->numa_node);
    fmt_size(g, tot, sizeof tot, d->total_bytes);
    fmt_size(g, fr, sizeof fr, d->free_bytes);
    fmt_size(g, bud, sizeof bud, d->budget_bytes);
    fmt_size(g, used, sizeof used, d->used_bytes);
    char *row[] = {d->name, d->kind, rank, d->host, d->model, numa, tot, fr, bud, used};
    table_row(&t, row);
  }
  table_print(&t, stdout);
  print_topology(s);
}

static int run_status(struct global *g, qdp_client *c) {
  struct qdp_server_status *s = NULL;
  if (qdp_get_status(c, &s) != QDP_OK) {
    return fail(g, "status");
  }
  if (g->json) {
    status_json(s, qdp_client_target(c));
  } else {
    status_text(g, s, qdp_client_target(c));
  }
  qdp_server_status_free(s);
  return EXIT_OK;
}

static int run_health(struct global *g, qdp_client *c) {
  qdp_health h;
  if (qdp_get_health(c, &h) != QDP_OK) {
    return fail(g, "health");
  }
  const char *name = h == QDP_HEALTH_SERVING       ? "SERVING"
                     : h == QDP_HEALTH_NOT_SERVING ? "NOT_SERVING"
                                                   : "UNKNOWN";
  if (g->json) {
    struct jw w = {stdout, 0, {0}};
    jw_open(&w, NULL, '{');
    jw_s(&w, "status", name);
    jw_close(&w, '}');
  } else {
    printf("%s\n", name);
  }
  return h == QDP_HEALTH_SERVING ? EXIT_OK : EXIT_REFUSED;
}

/* A command without options or arguments of its own: parse, connect, run fn. */
static int cmd_noargs(struct global *g, int argc, char **argv, const char *cmd, const char *help,
                      int (*fn)(struct global *, qdp_client *)) {
  const char *pos[1];
  int npos;
  int rc = parse_simple(g, cmd, help, argc, argv, 0, 0, pos, &npos, NULL, NULL, NULL, NULL, NULL);
  if (rc != EXIT_OK) {
    return rc < 0 ? EXIT_OK : rc;
  }
  qdp_client *c = NULL;
  rc = connect_client(g, cmd, &c);
  if (rc == EXIT_OK) {
    rc = fn(g, c);
  }
  qdp_client_destroy(c);
  return rc;
}

int cmd_status(struct global *g, int argc, char **argv) {
  return cmd_noargs(g, argc, argv, "status", status_help, run_status);
}

int cmd_health(struct global *g, int argc, char **argv) {
  return cmd_noargs(g, argc, argv, "health", health_help, run_health);
}
