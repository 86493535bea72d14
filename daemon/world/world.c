/* world.c — the coordinator protocol (world.h).
 *
 * Every message between ranks is point to point and bounded in time (transport_io_within), so no
 * rank can be blocked for ever by another. The coordinator sends control messages on one tag, in
 * order; everything that belongs to one job or one read (replies, the all-gather of norm blocks,
 * the exchanges of the global-bit stages) goes on tags derived from its sequence number, so a
 * message a failed job left behind can never be taken for one of a later job.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collectives.h"
#include "io/guard.h"
#include "launcher.h"
#include "log.h"
#include "qdp_build_config.h"
#include "transport.h"
#include "world/mesh_group.h"
#include "world/world.h"

#define TAG_CONTROL 1
/* Replies and peer traffic of sequence number s: 2 + 2k and 3 + 2k, k = s mod 16383, all within
 * TRANSPORT_TAG_MAX; a tag comes back only 16383 jobs later. */
#define TAG_SEQS 16383u

static int reply_tag(uint64_t seq) {
  return 2 + 2 * (int)(seq % TAG_SEQS);
}

static int peer_tag(uint64_t seq) {
  return 3 + 2 * (int)(seq % TAG_SEQS);
}

/* Ranks other than 0 wait for the coordinator in slices of this length, to notice a stop. */
#define SERVE_POLL_MS 200

enum msg_type { MSG_JOB = 1, MSG_RELEASE = 2, MSG_READ = 3, MSG_STOP = 4, MSG_EXPORT = 5 };

/* A control message. JOB: a = plan bytes, b/c = the input window's first value and count,
 * d = input values per sample, e = bytes of the third message; the plan and then the window
 * follow, or with JOB_FROM_FILE the file's path and, after its NUL, the struct runtime_file_id
 * of the file the caller handed over (the rank opens the path, checks that it found that very
 * file, and reads its window itself, from byte f + b * value size on). READ: job = the state's
 * job, a = offset, b = count, c = the read's sequence number (its reply tag), d = bytes. EXPORT:
 * job, a = the shard's index, c = the sequence number. STOP: flags STOP_LOST: a rank was lost, do
 * not finalize MPI. */
struct msg_header {
  uint32_t type, flags;
  uint64_t job, a, b, c, d, e, f;
};

#define JOB_FROM_FILE 1u
#define JOB_DEVICE_GROUP 2u /* the job's collectives may use the world's device group */
#define STOP_LOST 1u

struct msg_reply {
  int32_t status;
  int32_t group_lost; /* this rank's device group was aborted: the coordinator stops using it */
  struct qdp_error err;
};

/* What each rank tells the others at start. Every rank must run the same build: plans and errors
 * travel as the structs themselves. */
struct wire_mesh {
  char version[32];
  uint32_t sizes[4]; /* struct plan, plan_shard, plan_need, runtime_device_info */
  char host[64];
  uint32_t ndev, pad;
  /* followed by ndev struct runtime_device_info */
};

struct held_state { /* a state this rank holds for the coordinator */
  uint64_t job;
  struct runtime_state *st;
  struct held_state *next;
};

struct rank_entry {
  char host[64];
  size_t dev_first, ndev;
  bool lost;
  char reason[160];
};

struct dev_entry {
  int rank;
  struct runtime_device_info info;
  uint64_t used_remote; /* coordinator's account of what it placed there (ranks other than 0) */
};

struct world {
  struct transport *t;
  struct runtime_mesh *mesh;
  uint64_t timeout_ms;
  pthread_mutex_t mu;      /* recursive: one MPI user at a time; release may nest in encode */
  pthread_mutex_t info_mu; /* lost flags and device accounts, for Status without waiting */
  int nranks;
  struct rank_entry *ranks;
  size_t ndev;
  struct dev_entry *devs;
  uint64_t seq;
  bool any_lost; /* coordinator: never finalize MPI then; other ranks: told so by STOP */
  /* The job running on this rank: its sequence number and the ranks taking part. */
  uint64_t job;
  int *parts;
  size_t nparts;
  bool job_group; /* the job may use the device group */
  struct held_state *held;
  /* NCCL across every GPU of the world, made at start when every device is a GPU; comm NULL:
   * device collectives of jobs across ranks run on the host over MPI. */
  struct collectives_group group;
  bool group_on;                 /* coordinator: jobs use it (until a rank reports it aborted) */
  struct mesh_group *mesh_group; /* the group over this rank's GPUs, handed to the mesh */
};

static qdp_status no_memory(struct qdp_error *reterr, const char *what, size_t bytes) {
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
    return no_memory(reterr, "the world", sizeof *w);
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

/* ---- faults ---- */

static void mark_lost(struct world *w, int rank, const char *why) {
  if (rank <= 0 || rank >= w->nranks) {
    return;
  }
  pthread_mutex_lock(&w->info_mu);
  bool was = w->ranks[rank].lost;
  if (!was) {
    w->ranks[rank].lost = true;
    snprintf(w->ranks[rank].reason, sizeof w->ranks[rank].reason, "%.150s", why);
    w->any_lost = true;
  }
  pthread_mutex_unlock(&w->info_mu);
  if (!was) {
    log_warning("world",
                "rank %d (%s) is lost: %s; jobs that need it fail until the world is "
                "restarted",
                rank, w->ranks[rank].host, why);
  }
}

static bool is_lost(struct world *w, int rank) {
  pthread_mutex_lock(&w->info_mu);
  bool lost = w->ranks[rank].lost;
  pthread_mutex_unlock(&w->info_mu);
  return lost;
}

static qdp_status lost_error(struct world *w, int rank, struct qdp_error *reterr) {
  struct world_rank_info ri;
  world_rank_info(w, rank, &ri);
  qdp_status rc = qdp_error_set(reterr, QDP_ERR_UNAVAILABLE, NULL,
                                "rank %d (%s) is lost (%s); jobs and reads that need it fail until "
                                "the world is restarted",
                                rank, ri.host, ri.reason);
  if (reterr) {
    reterr->rank = rank;
  }
  return rc;
}

/* Bounded messages with other ranks. On the coordinator a peer that does not answer is marked
 * lost (mark: the caller knows the peer itself was due to answer, not a third rank). */
static qdp_status exchange_bounded(struct world *w, struct transport_io *items, size_t n, bool mark,
                                   struct qdp_error *reterr) {
  int pinned = 0;
  qdp_status rc = transport_io_within(w->t, items, n, w->timeout_ms, &pinned, reterr);
  if (pinned) {
    log_warning("world",
                "a message to or from a rank that stopped answering could not be "
                "cancelled; its buffer may still be read");
  }
  if (rc == QDP_ERR_UNAVAILABLE && mark && world_rank(w) == 0) {
    for (size_t i = 0; i < n; i++) {
      if (!items[i].done) {
        mark_lost(w, items[i].peer, reterr ? reterr->msg : "it did not answer in time");
      }
    }
  }
  return rc;
}

/* ---- start: agree, exchange meshes, hook the runtime ---- */

static qdp_status op_allgather(void *ctx, const void *mine, size_t bytes, void **ret,
                               size_t *ret_bytes, struct qdp_error *reterr);
static qdp_status op_allgather_fixed(void *ctx, const void *mine, size_t bytes, void **ret,
                                     size_t *ret_bytes, struct qdp_error *reterr);
static qdp_status op_exchange(void *ctx, int peer, const void *mine, void *ret, size_t bytes,
                              struct qdp_error *reterr);
static qdp_status op_read(void *ctx, int rank, uint64_t job, uint64_t offset, uint64_t count,
                          void *dst, size_t bytes, struct qdp_error *reterr);
static void op_release(void *ctx, uint64_t job, const struct plan *p);
static qdp_status op_export_ipc(void *ctx, int rank, uint64_t job, size_t shard,
                                struct runtime_ipc *ret, struct qdp_error *reterr);

static struct device_comm *op_device_group(void *ctx) {
  struct world *w = ctx;
  return w->job_group ? w->group.comm : NULL;
}

static const struct runtime_world_ops world_ops = {
    .allgather = op_allgather,
    .allgather_fixed = op_allgather_fixed,
    .exchange = op_exchange,
    .read = op_read,
    .release = op_release,
    .export_ipc = op_export_ipc,
    .device_group = op_device_group,
};

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

/* Coordinator, after a job that used the device group: once any rank's copy of the group was
 * aborted (a rank died or hung inside a collective), jobs go back to MPI for the world's life. */
static void group_check(struct world *w, const struct msg_reply *replies, const int *ranks,
                        size_t nranks) {
  int lost = device_comm_usable(w->group.comm) ? -1 : 0;
  for (size_t i = 0; lost < 0 && i < nranks; i++) {
    lost = replies[ranks[i]].group_lost ? ranks[i] : -1;
  }
  if (lost < 0) {
    return;
  }
  pthread_mutex_lock(&w->info_mu);
  w->group_on = false;
  collectives_group_aborted(&w->group, lost);
  pthread_mutex_unlock(&w->info_mu);
  log_warning("world",
              "the NCCL group across ranks was aborted on rank %d: jobs across ranks "
              "reduce over MPI from now on",
              lost);
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
    local = no_memory(&why, "the mesh description", bytes);
  } else if (local == QDP_OK) {
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
  QDP_TRY(rc, transport_agree(w->t, local, &why, reterr));
  QDP_TRY(rc, transport_allgatherv(w->t, mine, bytes, &g, reterr));

  /* Every rank checks every description the same way, so they fail (or not) together. */
  w->ranks = calloc((size_t)w->nranks, sizeof *w->ranks);
  size_t total = 0;
  for (int r = 0; r < w->nranks; r++) {
    const struct wire_mesh *m = (const struct wire_mesh *)(g.data + g.offsets[r]);
    if (g.lengths[r] < sizeof *m || strncmp(m->version, mine->version, sizeof m->version) != 0 ||
        memcmp(m->sizes, mine->sizes, sizeof m->sizes) != 0 ||
        g.lengths[r] != sizeof *m + m->ndev * sizeof(struct runtime_device_info)) {
      rc = qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, NULL,
                         "rank %d runs qdpd '%.32s', rank %d runs '%s' (or another build of it): "
                         "every rank of a world must run the same build",
                         r, g.lengths[r] >= sizeof *m ? m->version : "?", world_rank(w),
                         QDP_VERSION);
      goto out;
    }
    total += m->ndev;
  }
  w->ndev = total;
  w->devs = calloc(total ? total : 1, sizeof *w->devs);
  if (!w->ranks || !w->devs) {
    rc = no_memory(reterr, "the world's device table", total * sizeof *w->devs);
    goto out;
  }
  size_t at = 0;
  for (int r = 0; r < w->nranks; r++) {
    const struct wire_mesh *m = (const struct wire_mesh *)(g.data + g.offsets[r]);
    snprintf(w->ranks[r].host, sizeof w->ranks[r].host, "%.63s", m->host);
    w->ranks[r].dev_first = at;
    w->ranks[r].ndev = m->ndev;
    const struct runtime_device_info *info = (const struct runtime_device_info *)(m + 1);
    for (uint32_t i = 0; i < m->ndev; i++, at++) {
      w->devs[at].rank = r;
      w->devs[at].info = info[i];
    }
  }
  if (w->nranks > 1) {
    join_device_group(w, device_collectives);
    runtime_mesh_set_world(mesh, world_rank(w), &world_ops, w);
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

/* ---- the runtime's collectives, on the ranks of the job running here ---- */

/* fixed: every rank contributes `bytes`, so the sizes need not travel. */
static qdp_status allgather(struct world *w, const void *mine, size_t bytes, bool fixed, void **ret,
                            size_t *ret_bytes, struct qdp_error *reterr) {
  int me = world_rank(w);
  size_t n = w->nparts;
  qdp_status rc = QDP_OK;
  uint64_t *sizes = calloc(n, sizeof *sizes);
  struct transport_io *items = calloc(2 * n, sizeof *items);
  unsigned char *all = NULL;
  uint64_t my_size = bytes;
  if (!sizes || !items) {
    rc = no_memory(reterr, "the all-gather tables", n * (sizeof *sizes + 2 * sizeof *items));
    goto out;
  }
  /* Sizes first, then the blobs: both sides post sends and receives together each time, so large
   * blobs (rendezvous) never wait on each other. */
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (w->parts[i] == me || fixed) {
      sizes[i] = bytes;
      continue;
    }
    items[k++] = (struct transport_io){.buf = &my_size,
                                       .bytes = sizeof my_size,
                                       .peer = w->parts[i],
                                       .tag = peer_tag(w->job),
                                       .send = 1};
    items[k++] = (struct transport_io){
        .buf = &sizes[i], .bytes = sizeof sizes[i], .peer = w->parts[i], .tag = peer_tag(w->job)};
  }
  if (k) {
    QDP_TRY(rc, exchange_bounded(w, items, k, false, reterr));
  }
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    total += sizes[i];
  }
  all = malloc(total ? total : 1);
  if (!all) {
    rc = no_memory(reterr, "the gathered blocks", total);
    goto out;
  }
  k = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (w->parts[i] == me) {
      memcpy(all + at, mine, bytes);
    } else {
      items[k++] = (struct transport_io){.buf = (void *)mine,
                                         .bytes = bytes,
                                         .peer = w->parts[i],
                                         .tag = peer_tag(w->job),
                                         .send = 1};
      items[k++] = (struct transport_io){
          .buf = all + at, .bytes = sizes[i], .peer = w->parts[i], .tag = peer_tag(w->job)};
    }
    at += sizes[i];
  }
  QDP_TRY(rc, exchange_bounded(w, items, k, false, reterr));
  *ret = all;
  *ret_bytes = total;
  all = NULL;
out:
  free(all);
  free(items);
  free(sizes);
  return rc;
}

static qdp_status op_allgather(void *ctx, const void *mine, size_t bytes, void **ret,
                               size_t *ret_bytes, struct qdp_error *reterr) {
  return allgather(ctx, mine, bytes, false, ret, ret_bytes, reterr);
}

static qdp_status op_allgather_fixed(void *ctx, const void *mine, size_t bytes, void **ret,
                                     size_t *ret_bytes, struct qdp_error *reterr) {
  return allgather(ctx, mine, bytes, true, ret, ret_bytes, reterr);
}

static qdp_status op_exchange(void *ctx, int peer, const void *mine, void *ret, size_t bytes,
                              struct qdp_error *reterr) {
  struct world *w = ctx;
  struct transport_io items[2] = {
      {.buf = (void *)mine, .bytes = bytes, .peer = peer, .tag = peer_tag(w->job), .send = 1},
      {.buf = ret, .bytes = bytes, .peer = peer, .tag = peer_tag(w->job)},
  };
  return exchange_bounded(w, items, 2, false, reterr);
}

/* Asks `rank` for something of a state it holds (h: its type and arguments; the sequence number
 * is set here) and takes the reply and `bytes` of data into dst. */
static qdp_status ask_rank(struct world *w, int rank, struct msg_header *h, void *dst, size_t bytes,
                           struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  pthread_mutex_lock(&w->mu);
  if (is_lost(w, rank)) {
    rc = lost_error(w, rank, reterr);
    goto out;
  }
  uint64_t seq = ++w->seq;
  h->c = seq;
  struct msg_reply reply;
  struct transport_io items[3] = {
      {.buf = h, .bytes = sizeof *h, .peer = rank, .tag = TAG_CONTROL, .send = 1},
      {.buf = &reply, .bytes = sizeof reply, .peer = rank, .tag = reply_tag(seq)},
      {.buf = dst, .bytes = bytes, .peer = rank, .tag = reply_tag(seq)},
  };
  QDP_TRY(rc, exchange_bounded(w, items, 3, true, reterr));
  if (reply.status != QDP_OK) {
    rc = (qdp_status)reply.status;
    if (reterr) {
      *reterr = reply.err;
    }
  }
out:
  pthread_mutex_unlock(&w->mu);
  return rc;
}

static qdp_status op_read(void *ctx, int rank, uint64_t job, uint64_t offset, uint64_t count,
                          void *dst, size_t bytes, struct qdp_error *reterr) {
  struct msg_header h = {.type = MSG_READ, .job = job, .a = offset, .b = count, .d = bytes};
  return ask_rank(ctx, rank, &h, dst, bytes, reterr);
}

static qdp_status op_export_ipc(void *ctx, int rank, uint64_t job, size_t shard,
                                struct runtime_ipc *ret, struct qdp_error *reterr) {
  struct world *w = ctx;
  const char *there = world_host(w, rank), *here = world_host(w, world_rank(w));
  if (strcmp(there, here) != 0) {
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "views",
                         "shard %zu is on rank %d at host '%s', and a zero-copy view opens only on "
                         "the node holding the shard (this daemon's clients are on '%s'): read it "
                         "with Fetch or Export, or ask for views on that node",
                         shard, rank, there, here);
  }
  struct msg_header h = {.type = MSG_EXPORT, .job = job, .a = shard, .d = sizeof *ret};
  return ask_rank(w, rank, &h, ret, sizeof *ret, reterr);
}

/* The ranks other than this one holding shards of p, ascending; returns how many. */
static size_t shard_ranks(const struct world *w, const struct plan *p, int *ret) {
  size_t n = 0;
  for (int r = 0; r < w->nranks; r++) {
    if (r == world_rank(w)) {
      continue;
    }
    for (size_t i = 0; i < p->nshards; i++) {
      if (p->shards[i].rank == r) {
        ret[n++] = r;
        break;
      }
    }
  }
  return n;
}

static void account(struct world *w, const struct plan *p, bool add) {
  pthread_mutex_lock(&w->info_mu);
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *sh = &p->shards[i];
    if (sh->rank != world_rank(w) && sh->device < w->ndev) {
      uint64_t *used = &w->devs[sh->device].used_remote;
      *used = add ? *used + sh->bytes : (*used > sh->bytes ? *used - sh->bytes : 0);
    }
  }
  pthread_mutex_unlock(&w->info_mu);
}

/* Tells the live ranks among `ranks` to drop job's shards. Best effort: a rank that does not take
 * the message in time is marked lost, and a lost rank's memory is gone with it anyway. */
static void send_release(struct world *w, uint64_t job, const int *ranks, size_t n) {
  struct msg_header h = {.type = MSG_RELEASE, .job = job};
  for (size_t i = 0; i < n; i++) {
    if (is_lost(w, ranks[i])) {
      continue;
    }
    struct transport_io item = {
        .buf = &h, .bytes = sizeof h, .peer = ranks[i], .tag = TAG_CONTROL, .send = 1};
    struct qdp_error err = QDP_ERROR_INIT;
    if (exchange_bounded(w, &item, 1, true, &err) != QDP_OK) {
      log_warning("world", "release of job %" PRIu64 " on rank %d: %s", job, ranks[i], err.msg);
    }
  }
}

static void op_release(void *ctx, uint64_t job, const struct plan *p) {
  struct world *w = ctx;
  int *ranks = calloc((size_t)w->nranks, sizeof *ranks);
  pthread_mutex_lock(&w->mu);
  if (ranks) {
    send_release(w, job, ranks, shard_ranks(w, p, ranks));
  }
  account(w, p, false);
  pthread_mutex_unlock(&w->mu);
  free(ranks);
}

/* ---- jobs ---- */

/* The flattened input values rank's shards read: one range, as shards of a rank are contiguous. */
static void rank_window(const struct plan *p, uint64_t cols, int rank, uint64_t *ret_first,
                        uint64_t *ret_count) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *sh = &p->shards[i];
    if (sh->rank != rank) {
      continue;
    }
    uint64_t first = sh->row_first * cols, end = (sh->row_first + sh->rows) * cols;
    if (p->encoding == QDP_ENCODING_AMPLITUDE) {
      if (sh->first >= cols) {
        continue; /* padding only: reads nothing */
      }
      first += sh->first;
      uint64_t stop = sh->first + sh->count < cols ? sh->first + sh->count : cols;
      end = (sh->row_first + sh->rows - 1) * cols + stop;
    }
    lo = first < lo ? first : lo;
    hi = end > hi ? end : hi;
  }
  *ret_first = lo < hi ? lo : 0;
  *ret_count = lo < hi ? hi - lo : 0;
}

/* The ranks taking part in a job: rank 0 (it coordinates) and every rank holding a shard. */
static qdp_status set_parts(struct world *w, const struct plan *p, uint64_t job,
                            struct qdp_error *reterr) {
  free(w->parts);
  w->parts = calloc((size_t)w->nranks, sizeof *w->parts);
  w->nparts = 0;
  if (!w->parts) {
    return no_memory(reterr, "the job's rank list", (size_t)w->nranks * sizeof *w->parts);
  }
  for (int r = 0; r < w->nranks; r++) {
    bool in = r == 0;
    for (size_t i = 0; !in && i < p->nshards; i++) {
      in = p->shards[i].rank == r;
    }
    if (in) {
      w->parts[w->nparts++] = r;
    }
  }
  w->job = job;
  return QDP_OK;
}

/* A job whose ranks open its input file themselves: before anything else every rank of the job
 * says whether it could, so that one that could not (another file at the path, a short file)
 * fails the job on every rank at once instead of leaving the others in its first exchange until
 * the rank timeout. A rank that failed keeps its own error; the others fail with UNAVAILABLE
 * naming it, which the coordinator ranks below it. */
static qdp_status agree_input(struct world *w, qdp_status mine, struct qdp_error *reterr) {
  struct {
    int32_t rank, status;
  } me = {world_rank(w), mine}, *all = NULL;
  size_t bytes = 0;
  struct qdp_error own = QDP_ERROR_INIT;
  if (reterr) {
    own = *reterr;
  }
  qdp_status rc = allgather(w, &me, sizeof me, true, (void **)&all, &bytes, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  if (mine != QDP_OK) {
    free(all);
    if (reterr) {
      *reterr = own;
    }
    return mine;
  }
  for (size_t i = 0; i < bytes / sizeof *all; i++) {
    if (all[i].status != QDP_OK) {
      rc = qdp_error_set(reterr, QDP_ERR_UNAVAILABLE, "input.path",
                         "rank %d could not read its part of the input file", (int)all[i].rank);
      if (reterr) {
        reterr->rank = all[i].rank;
      }
      break;
    }
  }
  free(all);
  return rc;
}

static bool spans_ranks(const struct plan *p) {
  for (size_t i = 0; i < p->nshards; i++) {
    if (p->shards[i].rank != 0) {
      return true;
    }
  }
  return false;
}

qdp_status world_encode(struct world *w, const struct plan *p, const struct runtime_input *in,
                        struct runtime_state **ret_state, struct qdp_error *reterr) {
  if (w->nranks == 1 || !spans_ranks(p)) {
    return runtime_encode(w->mesh, p, in, ret_state, reterr);
  }
  qdp_status rc = QDP_OK;
  struct runtime_state *st = NULL;
  struct qdp_error local_err = QDP_ERROR_INIT;
  int *ranks = calloc((size_t)w->nranks, sizeof *ranks);
  struct msg_header *hdr = calloc((size_t)w->nranks, sizeof *hdr);
  struct msg_reply *replies = calloc((size_t)w->nranks, sizeof *replies);
  struct transport_io *items = calloc(3 * (size_t)w->nranks, sizeof *items);
  size_t blob_bytes = sizeof *p + p->nshards * sizeof *p->shards + p->nneeds * sizeof *p->needs;
  unsigned char *blob = malloc(blob_bytes);
  char *file_msg = NULL;
  size_t file_msg_bytes = 0;
  bool sent = false;
  size_t nranks = 0;
  uint64_t job = 0;
  pthread_mutex_lock(&w->mu);
  if (!ranks || !hdr || !replies || !items || !blob) {
    rc = no_memory(reterr, "the job's messages", blob_bytes);
    goto out;
  }
  nranks = shard_ranks(w, p, ranks);
  for (size_t i = 0; i < nranks; i++) {
    if (is_lost(w, ranks[i])) {
      rc = lost_error(w, ranks[i], reterr);
      goto out;
    }
  }
  job = ++w->seq;
  w->job_group = w->group_on;
  struct plan copy = *p;
  copy.shards = NULL;
  copy.needs = NULL;
  memcpy(blob, &copy, sizeof copy);
  memcpy(blob + sizeof copy, p->shards, p->nshards * sizeof *p->shards);
  memcpy(blob + sizeof copy + p->nshards * sizeof *p->shards, p->needs,
         p->nneeds * sizeof *p->needs);

  /* An input file travels as its path and the identity of the file the caller handed over. */
  if (in->file) {
    size_t pl = strlen(in->file) + 1;
    file_msg_bytes = pl + sizeof in->file_id;
    file_msg = malloc(file_msg_bytes);
    if (!file_msg) {
      rc = no_memory(reterr, "the job's file name", file_msg_bytes);
      goto out;
    }
    memcpy(file_msg, in->file, pl);
    memcpy(file_msg + pl, &in->file_id, sizeof in->file_id);
  }
  /* The job goes only to the ranks that own shards, each with its own slice of the input. */
  size_t k = 0;
  unsigned esize = qdp_dtype_size(in->dtype);
  for (size_t i = 0; i < nranks; i++) {
    struct msg_header *h = &hdr[ranks[i]];
    *h = (struct msg_header){.type = MSG_JOB,
                             .flags = w->job_group ? JOB_DEVICE_GROUP : 0,
                             .job = job,
                             .a = blob_bytes,
                             .d = in->cols};
    rank_window(p, in->cols, ranks[i], &h->b, &h->c);
    /* A file every rank can read is read by each rank itself: only its path travels. */
    const void *third = (const char *)in->data + h->b * esize;
    h->e = h->c * esize;
    if (in->file) {
      h->flags |= JOB_FROM_FILE;
      h->f = in->file_offset;
      third = file_msg;
      h->e = file_msg_bytes;
    }
    items[k++] = (struct transport_io){
        .buf = h, .bytes = sizeof *h, .peer = ranks[i], .tag = TAG_CONTROL, .send = 1};
    items[k++] = (struct transport_io){
        .buf = blob, .bytes = blob_bytes, .peer = ranks[i], .tag = TAG_CONTROL, .send = 1};
    items[k++] = (struct transport_io){
        .buf = (void *)third, .bytes = h->e, .peer = ranks[i], .tag = TAG_CONTROL, .send = 1};
  }
  sent = true;
  QDP_TRY(rc, exchange_bounded(w, items, k, true, reterr));

  QDP_TRY(rc, set_parts(w, p, job, reterr));
  qdp_status local = in->file ? agree_input(w, QDP_OK, &local_err) : QDP_OK;
  if (local == QDP_OK) {
    local = runtime_encode(w->mesh, p, in, &st, &local_err);
  }

  /* Every rank answers, even after a failure, so the coordinator knows who is alive. */
  k = 0;
  for (size_t i = 0; i < nranks; i++) {
    items[k++] = (struct transport_io){.buf = &replies[ranks[i]],
                                       .bytes = sizeof replies[ranks[i]],
                                       .peer = ranks[i],
                                       .tag = reply_tag(job)};
  }
  /* A rank that did not answer at all is the cause (the others' waits on it failed too). */
  QDP_TRY(rc, exchange_bounded(w, items, k, true, reterr));
  if (w->job_group) {
    group_check(w, replies, ranks, nranks);
  }
  /* Else a failure of the job itself, in rank order, before a rank's complaint that another did
   * not answer (that one failed early, and its own error says why). */
  const struct qdp_error *unavailable = NULL;
  qdp_status unavailable_rc = QDP_OK;
  for (int r = 0; r < w->nranks && rc == QDP_OK; r++) {
    bool mine = r == 0;
    qdp_status s = mine ? local : (qdp_status)replies[r].status;
    const struct qdp_error *e = mine ? &local_err : &replies[r].err;
    if (r != 0 && !hdr[r].type) {
      continue; /* not part of the job */
    }
    if (s == QDP_ERR_UNAVAILABLE) {
      if (!unavailable) {
        unavailable = e;
        unavailable_rc = s;
      }
    } else if (s != QDP_OK) {
      rc = s;
      if (reterr) {
        *reterr = *e;
      }
    }
  }
  if (rc == QDP_OK && unavailable) {
    rc = unavailable_rc;
    if (reterr) {
      *reterr = *unavailable;
    }
  }
  if (rc != QDP_OK) {
    goto out;
  }
  runtime_state_set_world_job(st, job);
  account(w, p, true);
  *ret_state = st;
  st = NULL;
out:
  if (rc != QDP_OK && sent) {
    send_release(w, job, ranks, nranks);
  }
  runtime_state_destroy(st);
  pthread_mutex_unlock(&w->mu);
  free(blob);
  free(file_msg);
  free(items);
  free(replies);
  free(hdr);
  free(ranks);
  return rc;
}

/* ---- ranks other than 0 ---- */

/* Maps `bytes` at `offset` of the file at `path` (the job's input on a shared filesystem)
 * read-only: the page cache's pages, never a copy. *ret_map / *ret_len are what to munmap;
 * *ret_data the window's first byte. */
static qdp_status map_window(int rank, const char *path, const struct runtime_file_id *id,
                             uint64_t offset, size_t bytes, void **ret_map, size_t *ret_len,
                             const void **ret_data, struct qdp_error *reterr) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return qdp_error_set_at(reterr, e == ENOENT ? QDP_ERR_NOT_FOUND : QDP_ERR_SYSTEM, -1, e,
                            "rank %d cannot open '%s': %s; an input file given by path must be at "
                            "that path on every rank (a shared filesystem)",
                            rank, path, strerror(e));
  }
  struct stat sb;
  qdp_status rc = QDP_OK;
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start = offset - offset % page;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, e, "rank %d cannot stat '%s': %s", rank, path,
                          strerror(e));
  } else if ((uint64_t)sb.st_ino != id->ino || (uint64_t)sb.st_size != id->size ||
             (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec != id->mtime_ns) {
    /* This rank reads with the daemon's rights, so it reads only the very file the caller
     * handed over (a shared filesystem shows every node the same inode, size and time). */
    rc = qdp_error_set(reterr, QDP_ERR_PERMISSION_DENIED, "input.path",
                       "rank %d finds another file at '%s' than the one the caller opened (inode, "
                       "size or modification time differ): an input file given by path must be "
                       "the same file on every rank (a shared filesystem)",
                       rank, path);
  } else if ((uint64_t)sb.st_size < offset + bytes) {
    /* Mapping past the end would fault on the first read of it. */
    rc = qdp_error_set(reterr, QDP_ERR_DATA_LOSS, NULL,
                       "rank %d needs %zu B at offset %" PRIu64
                       " of '%s', which has %lld B: the "
                       "file is shorter than the coordinator's",
                       rank, bytes, offset, path, (long long)sb.st_size);
  } else if (bytes > 0) {
    size_t len = (size_t)(offset - start) + bytes;
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)start);
    if (map == MAP_FAILED) {
      int e = errno;
      rc = qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, e, "rank %d cannot map %zu B of '%s': %s",
                            rank, len, path, strerror(e));
    } else {
      *ret_map = map;
      *ret_len = len;
      *ret_data = (const char *)map + (offset - start);
    }
  }
  close(fd);
  return rc;
}

static void serve_job(struct world *w, const struct msg_header *h) {
  qdp_status rc = QDP_OK;
  struct qdp_error err = QDP_ERROR_INIT;
  struct plan p = {0};
  unsigned char *blob = malloc(h->a ? h->a : 1);
  void *window = NULL, *map = NULL;
  size_t map_len = 0;
  const void *data = NULL;
  char *path = NULL;
  struct runtime_state *st = NULL;
  struct held_state *held = NULL;
  if (!blob) {
    rc = no_memory(&err, "the job's plan", h->a);
    goto out;
  }
  struct transport_io item = {.buf = blob, .bytes = h->a, .peer = 0, .tag = TAG_CONTROL};
  QDP_TRY(rc, exchange_bounded(w, &item, 1, false, &err));
  memcpy(&p, blob, sizeof p);
  size_t shards_bytes = p.nshards * sizeof *p.shards, needs_bytes = p.nneeds * sizeof *p.needs;
  size_t wbytes = h->c * qdp_dtype_size(p.in_dtype);
  bool from_file = h->flags & JOB_FROM_FILE;
  /* A slice sent here needs memory; one in a file is mapped below. */
  window = from_file ? NULL : malloc(wbytes ? wbytes : 1);
  path = from_file ? malloc(h->e ? h->e : 1) : NULL;
  p.shards = malloc(shards_bytes ? shards_bytes : 1);
  p.needs = malloc(needs_bytes ? needs_bytes : 1);
  if (!(window || path) || !p.shards || !p.needs) {
    /* The slice cannot be taken: the coordinator's send of it ends at the rank timeout. */
    rc = no_memory(&err, "the job's input slice", wbytes);
    goto out;
  }
  memcpy(p.shards, blob + sizeof p, shards_bytes);
  memcpy(p.needs, blob + sizeof p + shards_bytes, needs_bytes);
  item = (struct transport_io){
      .buf = path ? (void *)path : window, .bytes = h->e, .peer = 0, .tag = TAG_CONTROL};
  QDP_TRY(rc, exchange_bounded(w, &item, 1, false, &err));
  data = window;
  if (path) {
    struct runtime_file_id id = {0};
    size_t pl = h->e > sizeof id ? h->e - sizeof id : 0;
    if (pl == 0 || path[pl - 1] != '\0') {
      rc = qdp_error_set(&err, QDP_ERR_INTERNAL, NULL, "rank %d got a malformed input file name",
                         world_rank(w));
      goto out;
    }
    memcpy(&id, path + pl, sizeof id);
    rc = map_window(world_rank(w), path, &id, h->f + h->b * qdp_dtype_size(p.in_dtype), wbytes,
                    &map, &map_len, &data, &err);
    qdp_status parts = set_parts(w, &p, h->job, rc == QDP_OK ? &err : NULL);
    rc = parts == QDP_OK ? agree_input(w, rc, &err) : parts;
    if (rc != QDP_OK) {
      goto out;
    }
  }
  /* The plan indexes the world's device table; this rank's mesh indexes its own devices. */
  int me = world_rank(w);
  for (size_t i = 0; i < p.nshards; i++) {
    if (p.shards[i].rank == me) {
      p.shards[i].device -= w->ranks[me].dev_first;
    }
  }
  struct runtime_input in = {.data = data ? data : (const void *)"",
                             .dtype = p.in_dtype,
                             .rows = p.batch,
                             .cols = h->d,
                             .windowed = true,
                             .window_first = h->b,
                             .window_count = h->c};
  if (!path) {
    QDP_TRY(rc, set_parts(w, &p, h->job, &err));
  }
  w->job_group = h->flags & JOB_DEVICE_GROUP;
  held = malloc(sizeof *held);
  if (!held) {
    rc = no_memory(&err, "the state table", sizeof *held);
    goto out;
  }
  /* The window is the caller's file, read in place: if it shrinks under this rank's read, the
   * guard turns the fault into zeros and the job into DATA_LOSS, and the rank lives on. */
  int guard = map ? io_guard_add(map, map_len) : -1;
  if (map && guard < 0) {
    rc = qdp_error_set(&err, QDP_ERR_RESOURCE_EXHAUSTED, "input",
                       "rank %d reads too many mapped inputs at once; retry", me);
    goto out;
  }
  rc = runtime_encode(w->mesh, &p, &in, &st, &err);
  if (io_guard_remove(guard)) {
    rc = qdp_error_set(&err, QDP_ERR_DATA_LOSS, "input",
                       "the input file shrank while rank %d read its part of it; nothing was kept",
                       me);
  }
  if (rc != QDP_OK) {
    goto out;
  }
  /* Tests read this line to check that a rank got only its own slice of the input. */
  log_info("world",
           "job %" PRIu64 ": %" PRIu64 " B in %zu shards here; input slice [%" PRIu64 ", %" PRIu64
           ") of %" PRIu64 " values %s%s%s",
           h->job, runtime_state_bytes(st), plan_rank_shards(&p, me, NULL, 0), h->b, h->b + h->c,
           p.batch * h->d, path ? "read here from '" : "from the coordinator", path ? path : "",
           path ? "'" : "");
  held->job = h->job;
  held->st = st;
  held->next = w->held;
  w->held = held;
  held = NULL;
  st = NULL;
out:;
  struct msg_reply r = {
      .status = rc, .group_lost = w->group.comm && !device_comm_usable(w->group.comm), .err = err};
  struct transport_io back = {
      .buf = &r, .bytes = sizeof r, .peer = 0, .tag = reply_tag(h->job), .send = 1};
  struct qdp_error send_err = QDP_ERROR_INIT;
  if (exchange_bounded(w, &back, 1, false, &send_err) != QDP_OK) {
    log_warning("world", "job %" PRIu64 ": cannot answer the coordinator: %s", h->job,
                send_err.msg);
  }
  if (rc != QDP_OK) {
    log_info("world", "job %" PRIu64 " failed here: %s", h->job, err.msg);
  }
  runtime_state_destroy(st);
  free(held);
  free(p.shards);
  free(p.needs);
  if (map) {
    munmap(map, map_len);
  }
  free(path);
  free(window);
  free(blob);
}

static struct held_state **find_held(struct world *w, uint64_t job) {
  struct held_state **at = &w->held;
  while (*at && (*at)->job != job) {
    at = &(*at)->next;
  }
  return at;
}

static void serve_release(struct world *w, uint64_t job) {
  struct held_state **at = find_held(w, job);
  struct held_state *h = *at;
  if (!h) {
    return; /* the job failed here, or never reached this rank */
  }
  *at = h->next;
  log_info("world", "job %" PRIu64 " released: %" PRIu64 " B freed", job,
           runtime_state_bytes(h->st));
  runtime_state_destroy(h->st);
  free(h);
}

/* A read of a held state's amplitudes (MSG_READ) or the view of one of its shards (MSG_EXPORT). */
static void serve_ask(struct world *w, const struct msg_header *h) {
  struct msg_reply r = {.status = QDP_OK, .err = QDP_ERROR_INIT};
  void *data = calloc(1, h->d ? h->d : 1);
  struct held_state *held = *find_held(w, h->job);
  if (!data) {
    r.status = no_memory(&r.err, "a read", h->d);
  } else if (!held) {
    r.status = qdp_error_set(&r.err, QDP_ERR_NOT_FOUND, NULL,
                             "rank %d holds no shard of job %" PRIu64, world_rank(w), h->job);
  } else if (h->type == MSG_EXPORT) {
    r.status =
        h->d == sizeof(struct runtime_ipc)
            ? runtime_state_export_ipc(held->st, (size_t)h->a, data, &r.err)
            : qdp_error_set(&r.err, QDP_ERR_INTERNAL, NULL, "a view asked for %" PRIu64 " B", h->d);
  } else {
    r.status = runtime_state_read(held->st, h->a, h->b, data, &r.err);
  }
  /* The data goes even after a failure: the coordinator waits for both messages. */
  struct transport_io items[2] = {
      {.buf = &r, .bytes = sizeof r, .peer = 0, .tag = reply_tag(h->c), .send = 1},
      {.buf = data, .bytes = data ? h->d : 0, .peer = 0, .tag = reply_tag(h->c), .send = 1},
  };
  struct qdp_error err = QDP_ERROR_INIT;
  if (exchange_bounded(w, items, 2, false, &err) != QDP_OK) {
    log_warning("world", "%s of job %" PRIu64 ": cannot answer the coordinator: %s",
                h->type == MSG_EXPORT ? "view" : "read", h->job, err.msg);
  }
  free(data);
}

qdp_status world_serve(struct world *w, volatile sig_atomic_t *stop, struct qdp_error *reterr) {
  uint64_t grace = w->timeout_ms / SERVE_POLL_MS + 1; /* polls left once *stop is set */
  while (!*stop || grace-- > 0) {
    struct msg_header h;
    struct transport_io item = {.buf = &h, .bytes = sizeof h, .peer = 0, .tag = TAG_CONTROL};
    qdp_status rc = transport_io_within(w->t, &item, 1, SERVE_POLL_MS, NULL, reterr);
    if (rc == QDP_ERR_UNAVAILABLE) {
      continue; /* nothing yet: look at the stop flag */
    }
    if (rc != QDP_OK) {
      return rc;
    }
    switch (h.type) {
    case MSG_JOB:
      serve_job(w, &h);
      break;
    case MSG_RELEASE:
      serve_release(w, h.job);
      break;
    case MSG_READ:
    case MSG_EXPORT:
      serve_ask(w, &h);
      break;
    case MSG_STOP: {
      /* The answer tells the coordinator that nothing of this rank's is still on its way, so
       * both enter MPI_Finalize with no message in flight. */
      w->any_lost = h.flags & STOP_LOST;
      log_info("world", "rank %d: the coordinator says stop", world_rank(w));
      struct msg_reply r = {.status = QDP_OK, .err = QDP_ERROR_INIT};
      struct transport_io ack = {
          .buf = &r, .bytes = sizeof r, .peer = 0, .tag = reply_tag(h.c), .send = 1};
      struct qdp_error err = QDP_ERROR_INIT;
      if (transport_io_within(w->t, &ack, 1, w->timeout_ms, NULL, &err) != QDP_OK) {
        w->any_lost = true; /* the coordinator is gone: MPI_Finalize would wait for it */
      }
      return QDP_OK;
    }
    default:
      return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                           "rank %d got control message type %u from the coordinator",
                           world_rank(w), h.type);
    }
  }
  /* Stopped without the coordinator's word: it may be gone, so MPI_Finalize could wait forever. */
  w->any_lost = true;
  log_notice("world", "rank %d: stopping on a signal without the coordinator's word",
             world_rank(w));
  return QDP_OK;
}

void world_destroy(struct world *w) {
  if (!w) {
    return;
  }
  if (w->t && world_rank(w) == 0 && w->nranks > 1 && w->ranks) {
    pthread_mutex_lock(&w->mu);
    for (int r = 1; r < w->nranks; r++) {
      /* A lost rank is told too, briefly: one that only hung may be running again, and would
       * otherwise wait for the coordinator for ever. A live one answers. */
      bool lost = is_lost(w, r);
      uint64_t seq = ++w->seq;
      struct msg_header h = {.type = MSG_STOP, .flags = w->any_lost ? STOP_LOST : 0, .c = seq};
      struct msg_reply ack;
      struct transport_io items[2] = {
          {.buf = &h, .bytes = sizeof h, .peer = r, .tag = TAG_CONTROL, .send = 1},
          {.buf = &ack, .bytes = sizeof ack, .peer = r, .tag = reply_tag(seq)},
      };
      struct qdp_error err = QDP_ERROR_INIT;
      if (transport_io_within(w->t, items, lost ? 1 : 2, lost ? 100 : w->timeout_ms, NULL, &err) !=
              QDP_OK &&
          !lost) {
        log_warning("world", "cannot tell rank %d to stop: %s", r, err.msg);
        w->any_lost = true;
      }
    }
    pthread_mutex_unlock(&w->mu);
  }
  while (w->held) {
    serve_release(w, w->held->job);
  }
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
