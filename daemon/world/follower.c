/* The ranks other than 0: serving the coordinator's jobs, reads, views and releases until it says
 * stop (world_serve). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/guard.h"
#include "log.h"
#include "world/internal.h"

/* Ranks other than 0 wait for the coordinator in slices of this length, to notice a stop. */
#define SERVE_POLL_MS 200

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

/* What a job brought here: its plan, and its window of the input (received, or mapped from the
 * file every rank reads itself). */
struct job_input {
  struct plan p;
  void *window; /* the window as sent */
  char *path;   /* the file's path and identity as sent */
  void *map;    /* the window mapped from the file */
  size_t map_len;
  const void *data; /* the window's first value */
};

static void job_input_fini(struct job_input *j) {
  free(j->p.shards);
  free(j->p.needs);
  if (j->map) {
    munmap(j->map, j->map_len);
  }
  free(j->path);
  free(j->window);
}

/* The plan, then the payload: the window itself or the file's path and identity. */
static qdp_status receive_job(struct world *w, const struct msg_header *h, struct job_input *j,
                              struct qdp_error *reterr) {
  const struct msg_job *run = &h->body.run;
  qdp_status rc = QDP_OK;
  unsigned char *blob = malloc(run->plan_bytes ? run->plan_bytes : 1);
  if (!blob) {
    return world_no_memory(reterr, "the job's plan", run->plan_bytes);
  }
  struct transport_io item = {.buf = blob, .bytes = run->plan_bytes, .peer = 0, .tag = TAG_CONTROL};
  QDP_TRY(rc, world_exchange(w, &item, 1, false, reterr));
  struct plan *p = &j->p;
  memcpy(p, blob, sizeof *p);
  size_t shards_bytes = p->nshards * sizeof *p->shards, needs_bytes = p->nneeds * sizeof *p->needs;
  size_t wbytes = run->window_count * qdp_dtype_size(p->in_dtype);
  bool from_file = h->flags & JOB_FROM_FILE;
  /* A slice sent here needs memory; one in a file is mapped below. */
  j->window = from_file ? NULL : malloc(wbytes ? wbytes : 1);
  j->path = from_file ? malloc(run->payload_bytes ? run->payload_bytes : 1) : NULL;
  p->shards = malloc(shards_bytes ? shards_bytes : 1);
  p->needs = malloc(needs_bytes ? needs_bytes : 1);
  if (!(j->window || j->path) || !p->shards || !p->needs) {
    /* The slice cannot be taken: the coordinator's send of it ends at the rank timeout. */
    rc = world_no_memory(reterr, "the job's input slice", wbytes);
    goto out;
  }
  memcpy(p->shards, blob + sizeof *p, shards_bytes);
  memcpy(p->needs, blob + sizeof *p + shards_bytes, needs_bytes);
  item = (struct transport_io){.buf = j->path ? (void *)j->path : j->window,
                               .bytes = run->payload_bytes,
                               .peer = 0,
                               .tag = TAG_CONTROL};
  QDP_TRY(rc, world_exchange(w, &item, 1, false, reterr));
  j->data = j->window;
out:
  free(blob);
  return rc;
}

/* Maps this rank's window of the job's input file and agrees with the job's other ranks that
 * every one could (world_agree_input). */
static qdp_status open_input(struct world *w, const struct msg_header *h, struct job_input *j,
                             struct qdp_error *reterr) {
  const struct msg_job *run = &h->body.run;
  struct runtime_file_id id = {0};
  size_t pl = run->payload_bytes > sizeof id ? run->payload_bytes - sizeof id : 0;
  if (pl == 0 || j->path[pl - 1] != '\0') {
    return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL, "rank %d got a malformed input file name",
                         world_rank(w));
  }
  memcpy(&id, j->path + pl, sizeof id);
  unsigned esize = qdp_dtype_size(j->p.in_dtype);
  qdp_status rc =
      map_window(world_rank(w), j->path, &id, run->file_offset + run->window_first * esize,
                 run->window_count * esize, &j->map, &j->map_len, &j->data, reterr);
  qdp_status parts = world_set_job(w, &j->p, h->job, rc == QDP_OK ? reterr : NULL);
  return parts == QDP_OK ? world_agree_input(w, rc, reterr) : parts;
}

/* Runs the job's shards of this rank on its mesh; *ret_state: what it now holds. */
static qdp_status run_job(struct world *w, const struct msg_header *h, struct job_input *j,
                          struct runtime_state **ret_state, struct qdp_error *reterr) {
  const struct msg_job *run = &h->body.run;
  qdp_status rc = QDP_OK;
  /* The plan indexes the world's device table; this rank's mesh indexes its own devices. */
  int me = world_rank(w);
  for (size_t i = 0; i < j->p.nshards; i++) {
    if (j->p.shards[i].rank == me) {
      j->p.shards[i].device -= w->ranks[me].dev_first;
    }
  }
  struct runtime_input in = {.data = j->data ? j->data : (const void *)"",
                             .dtype = j->p.in_dtype,
                             .rows = j->p.batch,
                             .cols = run->cols,
                             .windowed = true,
                             .window_first = run->window_first,
                             .window_count = run->window_count};
  if (!j->path) {
    QDP_TRY(rc, world_set_job(w, &j->p, h->job, reterr));
  }
  w->job_group = h->flags & JOB_DEVICE_GROUP;
  /* The window is the caller's file, read in place: if it shrinks under this rank's read, the
   * guard turns the fault into zeros and the job into DATA_LOSS, and the rank lives on. */
  int guard = j->map ? io_guard_add(j->map, j->map_len) : -1;
  if (j->map && guard < 0) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, "input",
                         "rank %d reads too many mapped inputs at once; retry", me);
  }
  rc = runtime_encode(w->mesh, &j->p, &in, ret_state, reterr);
  if (io_guard_remove(guard)) {
    runtime_state_destroy(*ret_state);
    *ret_state = NULL;
    rc = qdp_error_set(reterr, QDP_ERR_DATA_LOSS, "input",
                       "the input file shrank while rank %d read its part of it; nothing was kept",
                       me);
  }
out:
  return rc;
}

static void serve_job(struct world *w, const struct msg_header *h) {
  const struct msg_job *run = &h->body.run;
  struct qdp_error err = QDP_ERROR_INIT;
  struct job_input j = {0};
  struct runtime_state *st = NULL;
  struct held_state *held = malloc(sizeof *held);
  qdp_status rc = receive_job(w, h, &j, &err);
  if (rc == QDP_OK && j.path) {
    rc = open_input(w, h, &j, &err);
  }
  if (rc == QDP_OK && !held) {
    rc = world_no_memory(&err, "the state table", sizeof *held);
  }
  if (rc == QDP_OK) {
    rc = run_job(w, h, &j, &st, &err);
  }
  if (rc == QDP_OK) {
    /* Tests read this line to check that a rank got only its own slice of the input. */
    log_info("world",
             "job %" PRIu64 ": %" PRIu64 " B in %zu shards here; input slice [%" PRIu64 ", %" PRIu64
             ") of %" PRIu64 " values %s%s%s",
             h->job, runtime_state_bytes(st), plan_rank_shards(&j.p, world_rank(w), NULL, 0),
             run->window_first, run->window_first + run->window_count, j.p.batch * run->cols,
             j.path ? "read here from '" : "from the coordinator", j.path ? j.path : "",
             j.path ? "'" : "");
    *held = (struct held_state){.job = h->job, .st = st, .next = w->held};
    w->held = held;
    held = NULL;
  }
  struct msg_reply r = {
      .status = rc, .group_lost = w->group.comm && !device_comm_usable(w->group.comm), .err = err};
  struct transport_io back = {
      .buf = &r, .bytes = sizeof r, .peer = 0, .tag = reply_tag(h->seq), .send = 1};
  struct qdp_error send_err = QDP_ERROR_INIT;
  if (world_exchange(w, &back, 1, false, &send_err) != QDP_OK) {
    log_warning("world", "job %" PRIu64 ": cannot answer the coordinator: %s", h->job,
                send_err.msg);
  }
  if (rc != QDP_OK) {
    log_info("world", "job %" PRIu64 " failed here: %s", h->job, err.msg);
  }
  free(held);
  job_input_fini(&j);
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
  bool view = h->type == MSG_EXPORT;
  uint64_t bytes = view ? sizeof(struct runtime_ipc) : h->body.read.bytes;
  void *data = calloc(1, bytes ? bytes : 1);
  struct held_state *held = *find_held(w, h->job);
  if (!data) {
    r.status = world_no_memory(&r.err, "a read", bytes);
  } else if (!held) {
    r.status = qdp_error_set(&r.err, QDP_ERR_NOT_FOUND, NULL,
                             "rank %d holds no shard of job %" PRIu64, world_rank(w), h->job);
  } else if (view) {
    struct runtime_ipc *v = data;
    r.status = runtime_state_export_ipc(held->st, (size_t)h->body.view.shard, v, &r.err);
    if (r.status == QDP_OK && v->fd >= 0) {
      close(v->fd);
      r.status = qdp_error_set(&r.err, QDP_ERR_FAILED_PRECONDITION, "views",
                               "rank %d hands its shards out as file descriptors, which do not "
                               "travel between its process and the coordinator's: start every "
                               "rank with legacy_ipc_views = yes for views of shards on other "
                               "ranks",
                               world_rank(w));
    }
  } else {
    r.status = runtime_state_read(held->st, h->body.read.offset, h->body.read.count, data, &r.err);
  }
  /* The data goes even after a failure: the coordinator waits for both messages. */
  struct transport_io items[2] = {
      {.buf = &r, .bytes = sizeof r, .peer = 0, .tag = reply_tag(h->seq), .send = 1},
      {.buf = data, .bytes = data ? bytes : 0, .peer = 0, .tag = reply_tag(h->seq), .send = 1},
  };
  struct qdp_error err = QDP_ERROR_INIT;
  if (world_exchange(w, items, 2, false, &err) != QDP_OK) {
    log_warning("world", "%s of job %" PRIu64 ": cannot answer the coordinator: %s",
                view ? "view" : "read", h->job, err.msg);
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
          .buf = &r, .bytes = sizeof r, .peer = 0, .tag = reply_tag(h.seq), .send = 1};
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

void follower_release_all(struct world *w) {
  while (w->held) {
    serve_release(w, w->held->job);
  }
}
