/* The coordinator (rank 0): jobs across the world, reads and views of shards other ranks hold,
 * releases, and the stop. Every call takes the world's lock: MPI is used by one thread at a time.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "qdp_encodings.h"
#include "world/internal.h"

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

/* Asks `rank` for something of a state it holds (h: its type and arguments; the sequence number
 * is set here) and takes the reply and `bytes` of data into dst. */
static qdp_status ask_rank(struct world *w, int rank, struct msg_header *h, void *dst, size_t bytes,
                           struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  pthread_mutex_lock(&w->mu);
  if (world_is_lost(w, rank)) {
    rc = world_lost_error(w, rank, reterr);
    goto out;
  }
  uint64_t seq = ++w->seq;
  h->seq = seq;
  struct msg_reply reply;
  struct transport_io items[3] = {
      {.buf = h, .bytes = sizeof *h, .peer = rank, .tag = TAG_CONTROL, .send = 1},
      {.buf = &reply, .bytes = sizeof reply, .peer = rank, .tag = reply_tag(seq)},
      {.buf = dst, .bytes = bytes, .peer = rank, .tag = reply_tag(seq)},
  };
  QDP_TRY(rc, world_exchange(w, items, 3, true, reterr));
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

qdp_status coordinator_read(void *ctx, int rank, uint64_t job, uint64_t offset, uint64_t count,
                            void *dst, size_t bytes, struct qdp_error *reterr) {
  struct msg_header h = {.type = MSG_READ,
                         .job = job,
                         .body.read = {.offset = offset, .count = count, .bytes = bytes}};
  return ask_rank(ctx, rank, &h, dst, bytes, reterr);
}

qdp_status coordinator_export_ipc(void *ctx, int rank, uint64_t job, size_t shard,
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
  struct msg_header h = {.type = MSG_EXPORT, .job = job, .body.view = {.shard = shard}};
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
    if (world_is_lost(w, ranks[i])) {
      continue;
    }
    struct transport_io item = {
        .buf = &h, .bytes = sizeof h, .peer = ranks[i], .tag = TAG_CONTROL, .send = 1};
    struct qdp_error err = QDP_ERROR_INIT;
    if (world_exchange(w, &item, 1, true, &err) != QDP_OK) {
      log_warning("world", "release of job %" PRIu64 " on rank %d: %s", job, ranks[i], err.msg);
    }
  }
}

void coordinator_release(void *ctx, uint64_t job, const struct plan *p) {
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

/* The flattened input values rank's shards read: one range, as shards of a rank are contiguous.
 * Values laid out by amplitude are read from each shard's own index range, parameters whole. */
static void rank_window(const struct plan *p, uint64_t cols, int rank, uint64_t *ret_first,
                        uint64_t *ret_count) {
  const bool by_amplitude = qdp_encoding_desc(p->encoding)->layout == QDP_LAYOUT_AMPLITUDES;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *sh = &p->shards[i];
    if (sh->rank != rank) {
      continue;
    }
    uint64_t first = sh->row_first * cols, end = (sh->row_first + sh->rows) * cols;
    if (by_amplitude) {
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

static bool spans_ranks(const struct plan *p) {
  for (size_t i = 0; i < p->nshards; i++) {
    if (p->shards[i].rank != 0) {
      return true;
    }
  }
  return false;
}

/* What the coordinator sends for one job and what comes back: per rank of the world, indexed by
 * rank, and the plan and the file's name as they travel. */
struct job_msgs {
  int *ranks; /* the ranks other than this one holding shards, ascending */
  size_t nranks;
  struct msg_header *hdr; /* type 0: the rank takes no part */
  struct msg_reply *replies;
  struct transport_io *items;
  unsigned char *blob; /* struct plan, its shards, its needs */
  size_t blob_bytes;
  char *file_msg; /* the input file's path, its NUL, its struct runtime_file_id */
  size_t file_msg_bytes;
};

static void job_msgs_fini(struct job_msgs *m) {
  free(m->blob);
  free(m->file_msg);
  free(m->items);
  free(m->replies);
  free(m->hdr);
  free(m->ranks);
}

static qdp_status job_msgs_init(struct world *w, const struct plan *p,
                                const struct runtime_input *in, struct job_msgs *m,
                                struct qdp_error *reterr) {
  size_t shards_bytes = p->nshards * sizeof *p->shards;
  m->ranks = calloc((size_t)w->nranks, sizeof *m->ranks);
  m->hdr = calloc((size_t)w->nranks, sizeof *m->hdr);
  m->replies = calloc((size_t)w->nranks, sizeof *m->replies);
  m->items = calloc(3 * (size_t)w->nranks, sizeof *m->items);
  m->blob_bytes = sizeof *p + shards_bytes + p->nneeds * sizeof *p->needs;
  m->blob = malloc(m->blob_bytes);
  if (!m->ranks || !m->hdr || !m->replies || !m->items || !m->blob) {
    return world_no_memory(reterr, "the job's messages", m->blob_bytes);
  }
  struct plan copy = *p;
  copy.shards = NULL;
  copy.needs = NULL;
  memcpy(m->blob, &copy, sizeof copy);
  memcpy(m->blob + sizeof copy, p->shards, shards_bytes);
  memcpy(m->blob + sizeof copy + shards_bytes, p->needs, p->nneeds * sizeof *p->needs);
  /* An input file travels as its path and the identity of the file the caller handed over. */
  if (in->file) {
    size_t pl = strlen(in->file) + 1;
    m->file_msg_bytes = pl + sizeof in->file_id;
    m->file_msg = malloc(m->file_msg_bytes);
    if (!m->file_msg) {
      return world_no_memory(reterr, "the job's file name", m->file_msg_bytes);
    }
    memcpy(m->file_msg, in->file, pl);
    memcpy(m->file_msg + pl, &in->file_id, sizeof in->file_id);
  }
  m->nranks = shard_ranks(w, p, m->ranks);
  return QDP_OK;
}

/* The job goes only to the ranks that own shards, each with its own slice of the input: header,
 * plan, payload. Returns how many items it filled. */
static size_t job_sends(struct world *w, const struct plan *p, const struct runtime_input *in,
                        uint64_t job, struct job_msgs *m) {
  size_t k = 0;
  unsigned esize = qdp_dtype_size(in->dtype);
  for (size_t i = 0; i < m->nranks; i++) {
    int rank = m->ranks[i];
    struct msg_header *h = &m->hdr[rank];
    struct msg_job *run = &h->body.run;
    *h = (struct msg_header){.type = MSG_JOB,
                             .flags = w->job_group ? JOB_DEVICE_GROUP : 0,
                             .job = job,
                             .seq = job,
                             .body.run = {.plan_bytes = m->blob_bytes, .cols = in->cols}};
    rank_window(p, in->cols, rank, &run->window_first, &run->window_count);
    /* A file every rank can read is read by each rank itself: only its path travels. */
    const void *payload = (const char *)in->data + run->window_first * esize;
    run->payload_bytes = run->window_count * esize;
    if (in->file) {
      h->flags |= JOB_FROM_FILE;
      run->file_offset = in->file_offset;
      payload = m->file_msg;
      run->payload_bytes = m->file_msg_bytes;
    }
    m->items[k++] = (struct transport_io){
        .buf = h, .bytes = sizeof *h, .peer = rank, .tag = TAG_CONTROL, .send = 1};
    m->items[k++] = (struct transport_io){
        .buf = m->blob, .bytes = m->blob_bytes, .peer = rank, .tag = TAG_CONTROL, .send = 1};
    m->items[k++] = (struct transport_io){.buf = (void *)payload,
                                          .bytes = run->payload_bytes,
                                          .peer = rank,
                                          .tag = TAG_CONTROL,
                                          .send = 1};
  }
  return k;
}

/* The job's outcome from this rank's (local, local_err) and the replies: a failure of the job
 * itself, in rank order, before a rank's complaint that another did not answer (that one failed
 * early, and its own error says why). */
static qdp_status job_outcome(const struct world *w, const struct job_msgs *m, qdp_status local,
                              const struct qdp_error *local_err, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  const struct qdp_error *unavailable = NULL;
  qdp_status unavailable_rc = QDP_OK;
  for (int r = 0; r < w->nranks && rc == QDP_OK; r++) {
    bool mine = r == 0;
    qdp_status s = mine ? local : (qdp_status)m->replies[r].status;
    const struct qdp_error *e = mine ? local_err : &m->replies[r].err;
    if (r != 0 && !m->hdr[r].type) {
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
  return rc;
}

qdp_status world_encode(struct world *w, const struct plan *p, const struct runtime_input *in,
                        struct runtime_state **ret_state, struct qdp_error *reterr) {
  if (w->nranks == 1 || !spans_ranks(p)) {
    return runtime_encode(w->mesh, p, in, ret_state, reterr);
  }
  struct runtime_state *st = NULL;
  struct qdp_error local_err = QDP_ERROR_INIT;
  struct job_msgs m = {0};
  bool sent = false;
  uint64_t job = 0;
  pthread_mutex_lock(&w->mu);
  qdp_status rc = job_msgs_init(w, p, in, &m, reterr);
  for (size_t i = 0; rc == QDP_OK && i < m.nranks; i++) {
    if (world_is_lost(w, m.ranks[i])) {
      rc = world_lost_error(w, m.ranks[i], reterr);
    }
  }
  if (rc != QDP_OK) {
    goto out;
  }
  job = ++w->seq;
  w->job_group = w->group_on;
  size_t k = job_sends(w, p, in, job, &m);
  sent = true;
  QDP_TRY(rc, world_exchange(w, m.items, k, true, reterr));

  QDP_TRY(rc, world_set_job(w, p, job, reterr));
  qdp_status local = in->file ? world_agree_input(w, QDP_OK, &local_err) : QDP_OK;
  if (local == QDP_OK) {
    local = runtime_encode(w->mesh, p, in, &st, &local_err);
  }
  /* Every rank answers, even after a failure, so the coordinator knows who is alive. */
  k = 0;
  for (size_t i = 0; i < m.nranks; i++) {
    int rank = m.ranks[i];
    m.items[k++] = (struct transport_io){.buf = &m.replies[rank],
                                         .bytes = sizeof m.replies[rank],
                                         .peer = rank,
                                         .tag = reply_tag(job)};
  }
  /* A rank that did not answer at all is the cause (the others' waits on it failed too). */
  QDP_TRY(rc, world_exchange(w, m.items, k, true, reterr));
  if (w->job_group) {
    group_check(w, m.replies, m.ranks, m.nranks);
  }
  QDP_TRY(rc, job_outcome(w, &m, local, &local_err, reterr));
  runtime_state_set_world_job(st, job);
  account(w, p, true);
  *ret_state = st;
  st = NULL;
out:
  if (rc != QDP_OK && sent) {
    send_release(w, job, m.ranks, m.nranks);
  }
  runtime_state_destroy(st);
  pthread_mutex_unlock(&w->mu);
  job_msgs_fini(&m);
  return rc;
}

void coordinator_stop(struct world *w) {
  pthread_mutex_lock(&w->mu);
  for (int r = 1; r < w->nranks; r++) {
    /* A lost rank is told too, briefly: one that only hung may be running again, and would
     * otherwise wait for the coordinator for ever. A live one answers. */
    bool lost = world_is_lost(w, r);
    uint64_t seq = ++w->seq;
    struct msg_header h = {.type = MSG_STOP, .flags = w->any_lost ? STOP_LOST : 0, .seq = seq};
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
