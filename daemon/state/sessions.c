/* sessions.c — the session table (sessions.h): an array searched linearly, as sessions are few
 * (bounded by max_sessions) and looked up once per call that names one. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state/sessions.h"

#define ID_BYTES 16 /* 128 bits */

struct session {
  struct session_info info;
  struct client_process process;
};

struct session_table {
  pthread_mutex_t mu;
  struct session_limits lim;
  struct session *v;
  size_t n, cap;
};

qdp_status session_table_create(const struct session_limits *lim, struct session_table **ret,
                                struct qdp_error *reterr) {
  struct session_table *t = calloc(1, sizeof *t);
  if (!t) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for the session table");
  }
  pthread_mutex_init(&t->mu, NULL);
  t->lim = *lim;
  *ret = t;
  return QDP_OK;
}

void session_table_destroy(struct session_table *t) {
  if (!t) {
    return;
  }
  for (size_t i = 0; i < t->n; i++) {
    client_process_end(&t->v[i].process);
  }
  free(t->v);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

static uint32_t owned_by(const struct session_table *t, const char *owner) {
  uint32_t n = 0;
  for (size_t i = 0; i < t->n; i++) {
    n += strcmp(t->v[i].info.owner, owner) == 0;
  }
  return n;
}

/* Room for one more session, under the lock. */
static qdp_status check_room(struct session_table *t, const char *owner, struct qdp_error *reterr) {
  if (t->lim.max_sessions && t->n >= t->lim.max_sessions) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "%zu sessions are open, the daemon's limit (max_sessions = %" PRIu32
                         "); close some (CloseSession)",
                         t->n, t->lim.max_sessions);
  }
  uint32_t mine = owned_by(t, owner);
  if (t->lim.max_client_sessions && mine >= t->lim.max_client_sessions) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "%s has %" PRIu32 " sessions open, its limit (max_client_sessions = %" PRIu32
                         "); close some (CloseSession)",
                         owner, mine, t->lim.max_client_sessions);
  }
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 16;
    struct session *v = realloc(t->v, cap * sizeof *v);
    if (!v) {
      return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                           "no host memory for %zu session records", cap);
    }
    t->v = v;
    t->cap = cap;
  }
  return QDP_OK;
}

qdp_status session_open(struct session_table *t, const char *owner, int pid, int pidfd,
                        uint64_t heartbeat_ms, const char *label, int64_t now,
                        struct session_info *ret, struct qdp_error *reterr) {
  size_t olen, llen;
  qdp_status rc = capability_text_len(&owner, sizeof ret->owner, "owner", "owner name", &olen, reterr);
  if (rc == QDP_OK) {
    rc = capability_text_len(&label, sizeof ret->label, "label", "label", &llen, reterr);
  }
  if (rc != QDP_OK) {
    return rc;
  }
  if (pid <= 0 && pidfd <= STDERR_FILENO && heartbeat_ms == 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "heartbeat_ms",
                         "a session of a caller with no process on the daemon's node (TCP) "
                         "needs a heartbeat: set heartbeat_ms and call Heartbeat within it");
  }
  if (heartbeat_ms > t->lim.max_heartbeat_ms) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "heartbeat_ms",
                         "heartbeat_ms = %" PRIu64 " is above the daemon's limit of %" PRIu64
                         " ms (session_max_heartbeat)",
                         heartbeat_ms, t->lim.max_heartbeat_ms);
  }
  struct session s = {.info = {.pid = pid > 0 ? pid : 0,
                               .heartbeat_ms = heartbeat_ms,
                               .opened_unix_ms = now,
                               .seen_unix_ms = now}};
  memcpy(s.info.owner, owner, olen + 1);
  memcpy(s.info.label, label, llen + 1);
  s.info.id[0] = 'c';
  if ((rc = capability_random_hex(s.info.id + 1, ID_BYTES, reterr)) != QDP_OK) {
    return rc;
  }
  pthread_mutex_lock(&t->mu);
  rc = check_room(t, owner, reterr);
  if (rc == QDP_OK) {
    client_process_init(&s.process, pid, pidfd);
    t->v[t->n++] = s;
    if (ret) {
      *ret = s.info;
    }
  }
  pthread_mutex_unlock(&t->mu);
  return rc;
}

/* owner's session id, or NULL; under the lock. Ids are compared in constant time: they are
 * capabilities as much as names. */
static struct session *find(struct session_table *t, const char *owner, const char *id) {
  if (!id || strlen(id) != SESSION_ID_LEN - 1 || !owner) {
    return NULL;
  }
  for (size_t i = 0; i < t->n; i++) {
    struct session *s = &t->v[i];
    if (capability_equal(s->info.id, id, SESSION_ID_LEN - 1) && strcmp(s->info.owner, owner) == 0) {
      return s;
    }
  }
  return NULL;
}

static qdp_status not_found(const char *id, const char *field, struct qdp_error *reterr) {
  return qdp_error_set(reterr, QDP_ERR_NOT_FOUND, field,
                       "session '%.40s' not found: unknown, another identity's, or ended (its "
                       "process exited, its heartbeat lapsed, or it was closed); open another",
                       id ? id : "");
}

qdp_status session_touch(struct session_table *t, const char *owner, const char *id,
                         const char *field, int64_t now, struct session_info *ret,
                         struct qdp_error *reterr) {
  pthread_mutex_lock(&t->mu);
  struct session *s = find(t, owner, id);
  if (s) {
    s->info.seen_unix_ms = now;
    if (ret) {
      *ret = s->info;
    }
  }
  pthread_mutex_unlock(&t->mu);
  return s ? QDP_OK : not_found(id, field, reterr);
}

/* Takes t->v[i] out of the table (the last one moves into its place); under the lock. */
static struct session take(struct session_table *t, size_t i) {
  struct session s = t->v[i];
  t->v[i] = t->v[--t->n];
  return s;
}

qdp_status session_close(struct session_table *t, const char *owner, const char *id,
                         struct session_info *ret, struct qdp_error *reterr) {
  pthread_mutex_lock(&t->mu);
  struct session *found = find(t, owner, id);
  struct session s;
  if (found) {
    s = take(t, (size_t)(found - t->v));
  }
  pthread_mutex_unlock(&t->mu);
  if (!found) {
    return not_found(id, "session", reterr);
  }
  client_process_end(&s.process);
  if (ret) {
    *ret = s.info;
  }
  return QDP_OK;
}

/* Why s ends as of now, or NULL while it lives. */
static const char *ends(struct session *s, int64_t now) {
  if (client_process_gone(&s->process, now, 0)) {
    return "its process exited";
  }
  if (s->info.heartbeat_ms && now - s->info.seen_unix_ms > (int64_t)s->info.heartbeat_ms) {
    return "no heartbeat came within its heartbeat_ms";
  }
  return NULL;
}

size_t session_sweep(struct session_table *t, int64_t now,
                     void (*ended)(const struct session_info *s, const char *why, void *arg),
                     void *arg) {
  struct ended_session {
    struct session s;
    const char *why;
  } *list = NULL;
  size_t n = 0, cap = 0;
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->n;) {
    const char *why = ends(&t->v[i], now);
    if (!why) {
      i++;
      continue;
    }
    if (n == cap) {
      size_t c = cap ? 2 * cap : 8;
      struct ended_session *l = realloc(list, c * sizeof *l);
      if (!l) {
        break; /* the next sweep ends the rest */
      }
      list = l;
      cap = c;
    }
    list[n].why = why;
    list[n++].s = take(t, i);
  }
  pthread_mutex_unlock(&t->mu);
  for (size_t i = 0; i < n; i++) {
    client_process_end(&list[i].s.process);
    if (ended) {
      ended(&list[i].s.info, list[i].why, arg);
    }
  }
  free(list);
  return n;
}

uint32_t session_count(struct session_table *t) {
  pthread_mutex_lock(&t->mu);
  uint32_t n = (uint32_t)t->n;
  pthread_mutex_unlock(&t->mu);
  return n;
}
