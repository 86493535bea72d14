/* Joining a world, its device tables, and leaving it (world.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher.h"
#include "log.h"
#include "qdp_build_config.h"
#include "world/internal.h"
#include "world/mesh_group.h"

qdp_status world_no_memory(struct qdp_error *reterr, const char *what, size_t bytes) {
  qdp_status rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                                "cannot allocate %zu B for %s", bytes, what);
  if (reterr) {
    reterr->need_bytes = bytes;
  }
  return rc;
}

bool world_launched_by_mpi(void) {
  return launcher_started_mpi();
}

qdp_status world_create(bool use_mpi, int *argc, char ***argv, struct world **ret,
                        struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct world *w = calloc(1, sizeof *w);
  if (!w) {
    return world_no_memory(reterr, "the world", sizeof *w);
  }
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&w->mu, &attr);
  pthread_mutexattr_destroy(&attr);
  pthread_mutex_init(&w->info_mu, NULL);
  rc = use_mpi ? transport_mpi_create(argc, argv, &w->t, reterr)
               : transport_local_create(&w->t, reterr);
  if (rc != QDP_OK) {
    world_destroy(w);
    return rc;
  }
  w->nranks = transport_size(w->t);
  *ret = w;
  return QDP_OK;
}

int world_rank(const struct world *w) {
  return transport_rank(w->t);
}

int world_size(const struct world *w) {
  return w->nranks;
}

const char *world_transport_name(const struct world *w) {
  return transport_kind_name(w->t);
}

const char *world_threads_name(const struct world *w) {
  return transport_threads_name(transport_threads(w->t));
}

uint64_t world_timeout_ms(const struct world *w) {
  return w->timeout_ms;
}

size_t world_device_count(const struct world *w) {
  return w->ndev;
}

/* One NCCL group over every GPU of the world, made once at start (member = the device's index in
 * the world table). Collective: every rank calls it. */
static void join_device_group(struct world *w, bool wanted) {
  bool gpus = true;
  for (size_t i = 0; i < w->ndev; i++) {
    gpus = gpus && w->devs[i].info.kind == RUNTIME_DEVICE_CUDA;
  }
  const struct rank_entry *me = &w->ranks[world_rank(w)];
  int *ords = calloc(me->ndev ? me->ndev : 1, sizeof *ords);
  for (size_t i = 0; ords && i < me->ndev; i++) {
    ords[i] = w->devs[me->dev_first + i].info.ordinal;
  }
  /* A rank without the memory for its list does not want the group: the ranks still agree. */
  collectives_world_group(w->t, gpus, wanted && ords, (int)w->ndev, (int)me->dev_first, ords,
                          me->ndev, w->timeout_ms, &w->group);
  w->group_on = w->group.comm != NULL;
  free(ords);
}

void world_device_collectives(struct world *w, char *buf, size_t size) {
  pthread_mutex_lock(&w->info_mu);
  snprintf(buf, size, "%s", w->nranks == 1 ? "none (one rank)" : w->group.desc);
  pthread_mutex_unlock(&w->info_mu);
}

/* The world's rank and device tables from every rank's description (g). Every rank checks every
 * description the same way, so they fail (or not) together. */
static qdp_status build_tables(struct world *w, const struct transport_gathered *g,
                               const struct wire_mesh *mine, struct qdp_error *reterr) {
  w->ranks = calloc((size_t)w->nranks, sizeof *w->ranks);
  size_t total = 0;
  for (int r = 0; r < w->nranks; r++) {
    const struct wire_mesh *m = (const struct wire_mesh *)(g->data + g->offsets[r]);
    if (g->lengths[r] < sizeof *m || strncmp(m->version, mine->version, sizeof m->version) != 0 ||
        memcmp(m->sizes, mine->sizes, sizeof m->sizes) != 0 ||
        g->lengths[r] != sizeof *m + m->ndev * sizeof(struct runtime_device_info)) {
      return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, NULL,
                           "rank %d runs qdpd '%.32s', rank %d runs '%s' (or another build of "
                           "it): every rank of a world must run the same build",
                           r, g->lengths[r] >= sizeof *m ? m->version : "?", world_rank(w),
                           QDP_VERSION);
    }
    total += m->ndev;
  }
  w->ndev = total;
  w->devs = calloc(total ? total : 1, sizeof *w->devs);
  if (!w->ranks || !w->devs) {
    return world_no_memory(reterr, "the world's device table", total * sizeof *w->devs);
  }
  size_t at = 0;
  for (int r = 0; r < w->nranks; r++) {
    const struct wire_mesh *m = (const struct wire_mesh *)(g->data + g->offsets[r]);
    snprintf(w->ranks[r].host, sizeof w->ranks[r].host, "%.63s", m->host);
    w->ranks[r].dev_first = at;
    w->ranks[r].ndev = m->ndev;
    const struct runtime_device_info *info = (const struct runtime_device_info *)(m + 1);
    for (uint32_t i = 0; i < m->ndev; i++, at++) {
      w->devs[at].rank = r;
      w->devs[at].info = info[i];
    }
  }
  return QDP_OK;
}

/* This rank's description for the others: the build, the host, and the mesh's devices after it. */
static void describe_mesh(const struct world *w, struct runtime_mesh *mesh,
                          struct wire_mesh *mine) {
  size_t ndev = runtime_mesh_count(mesh);
  snprintf(mine->version, sizeof mine->version, "%s", QDP_VERSION);
  mine->sizes[0] = sizeof(struct plan);
  mine->sizes[1] = sizeof(struct plan_shard);
  mine->sizes[2] = sizeof(struct plan_need);
  mine->sizes[3] = sizeof(struct runtime_device_info);
  snprintf(mine->host, sizeof mine->host, "%s", transport_host(w->t));
  mine->ndev = (uint32_t)ndev;
  struct runtime_device_info *info = (struct runtime_device_info *)(mine + 1);
  for (size_t i = 0; i < ndev; i++) {
    runtime_mesh_device_info(mesh, i, &info[i]);
  }
}

qdp_status world_start(struct world *w, qdp_status mesh_rc, const struct qdp_error *mesh_err,
                       struct runtime_mesh *mesh, uint64_t timeout_ms, bool device_collectives,
                       struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct transport_gathered g = {0};
  struct wire_mesh *mine = NULL;
  struct qdp_error why = QDP_ERROR_INIT;
  w->mesh = mesh;
  w->timeout_ms = timeout_ms ? timeout_ms : 1;
  qdp_status local = mesh_rc;
  if (local == QDP_OK && w->nranks > 1 && transport_threads(w->t) < TRANSPORT_THREADS_SERIALIZED) {
    /* Workers call MPI one at a time under the world's lock: that is SERIALIZED. */
    local = qdp_error_set(&why, QDP_ERR_FAILED_PRECONDITION, NULL,
                          "MPI granted thread level '%s'; qdpd needs 'serialized' or 'multiple'",
                          world_threads_name(w));
  } else if (local != QDP_OK && mesh_err) {
    why = *mesh_err;
  }
  QDP_TRY(rc, transport_agree(w->t, local, &why, reterr));

  size_t ndev = runtime_mesh_count(mesh);
  size_t bytes = sizeof *mine + ndev * sizeof(struct runtime_device_info);
  /* The mesh's own group first: it is the mesh's for every job, across ranks or not. */
  local = mesh_group_create(mesh, device_collectives, &w->mesh_group, &why);
  mine = calloc(1, bytes);
  if (local == QDP_OK && !mine) {
    local = world_no_memory(&why, "the mesh description", bytes);
  } else if (local == QDP_OK) {
    describe_mesh(w, mesh, mine);
  }
  QDP_TRY(rc, transport_agree(w->t, local, &why, reterr));
  QDP_TRY(rc, transport_allgatherv(w->t, mine, bytes, &g, reterr));

  QDP_TRY(rc, build_tables(w, &g, mine, reterr));
  if (w->nranks > 1) {
    join_device_group(w, device_collectives);
    runtime_mesh_set_world(mesh, world_rank(w), &world_runtime_ops, w);
    log_info("world",
             "rank %d of %d on %s: %zu devices in the world, MPI thread level %s, rank "
             "timeout %" PRIu64 " ms, device collectives %s",
             world_rank(w), w->nranks, w->ranks[world_rank(w)].host, w->ndev, world_threads_name(w),
             w->timeout_ms, w->group.desc);
  }
out:
  transport_gathered_fini(&g);
  free(mine);
  return rc;
}

const char *world_host(const struct world *w, int rank) {
  return w->ranks && rank >= 0 && rank < w->nranks ? w->ranks[rank].host : "";
}

void world_rank_info(struct world *w, int rank, struct world_rank_info *ret) {
  memset(ret, 0, sizeof *ret);
  ret->rank = rank;
  if (!w->ranks || rank < 0 || rank >= w->nranks) {
    return;
  }
  pthread_mutex_lock(&w->info_mu);
  snprintf(ret->host, sizeof ret->host, "%s", w->ranks[rank].host);
  ret->devices = (uint32_t)w->ranks[rank].ndev;
  ret->lost = w->ranks[rank].lost;
  snprintf(ret->reason, sizeof ret->reason, "%s", w->ranks[rank].reason);
  pthread_mutex_unlock(&w->info_mu);
}

void world_device_at(struct world *w, size_t i, struct world_device *ret) {
  const struct dev_entry *d = &w->devs[i];
  ret->rank = d->rank;
  ret->host = w->ranks[d->rank].host;
  if (d->rank == world_rank(w)) {
    runtime_mesh_device_info(w->mesh, i - w->ranks[d->rank].dev_first, &ret->info);
    return;
  }
  ret->info = d->info;
  pthread_mutex_lock(&w->info_mu);
  ret->info.used_bytes = d->used_remote;
  pthread_mutex_unlock(&w->info_mu);
}

void world_plan_devices(struct world *w, struct plan_device *devs) {
  int me = world_rank(w);
  runtime_mesh_plan_devices(w->mesh, me, devs + w->ranks[me].dev_first);
  pthread_mutex_lock(&w->info_mu);
  for (size_t i = 0; i < w->ndev; i++) {
    const struct dev_entry *d = &w->devs[i];
    if (d->rank != me) {
      devs[i].rank = d->rank;
      devs[i].ordinal = d->info.ordinal;
      /* A lost rank keeps its budget: a plan that needs it then fails in world_encode with
       * UNAVAILABLE naming the rank, rather than as a mysteriously full device. */
      uint64_t budget = d->info.budget_bytes;
      devs[i].budget_bytes = budget > d->used_remote ? budget - d->used_remote : 0;
    }
    if (w->nranks > 1) {
      snprintf(devs[i].name, sizeof devs[i].name, "r%d/%.24s", d->rank, d->info.name);
    }
  }
  pthread_mutex_unlock(&w->info_mu);
}

size_t world_live_devices(struct world *w, size_t *ret) {
  size_t n = 0;
  pthread_mutex_lock(&w->info_mu);
  if (w->any_lost) {
    for (size_t i = 0; i < w->ndev; i++) {
      if (!w->ranks[w->devs[i].rank].lost) {
        ret[n++] = i;
      }
    }
  }
  pthread_mutex_unlock(&w->info_mu);
  return n;
}

void world_destroy(struct world *w) {
  if (!w) {
    return;
  }
  if (w->t && world_rank(w) == 0 && w->nranks > 1 && w->ranks) {
    coordinator_stop(w);
  }
  follower_release_all(w);
  if (w->mesh && w->nranks > 1) {
    runtime_mesh_set_world(w->mesh, 0, NULL, NULL);
  }
  mesh_group_destroy(w->mesh_group);
  if (w->any_lost) {
    /* MPI_Finalize waits for every rank, the lost one too: leave without it. */
    log_warning("world", "a rank was lost: leaving MPI without finalizing");
  } else {
    transport_destroy(w->t);
  }
  collectives_group_fini(&w->group);
  pthread_mutex_destroy(&w->mu);
  pthread_mutex_destroy(&w->info_mu);
  free(w->parts);
  free(w->ranks);
  free(w->devs);
  free(w);
}
