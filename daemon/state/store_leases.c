/* store_leases.c — what ends a state other than a Release: its expiry, and the leases of the
 * clients that view its memory (read, or one exclusive write lease), opened and closed by id, or
 * swept once their process is gone.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "state/capability.h"
#include "state/store_internal.h"

/* Unlinks every linked state `ends` says ends; returns how many (their bytes in *ret_bytes). */
static size_t unlink_where(struct state_store *s, bool (*ends)(const struct entry *e, const void *arg),
                           const void *arg, uint64_t *ret_bytes) {
  struct entry *dead = NULL;
  size_t count = 0;
  uint64_t bytes = 0;
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->by_handle.nbuckets; i++) {
    struct hnode *n = s->by_handle.buckets[i];
    while (n) {
      struct hnode *next = n->next; /* n may leave the chain below */
      struct entry *e = CONTAINER(n, struct entry, by_handle);
      if (ends(e, arg)) {
        bytes += e->meta.bytes;
        struct entry *d = store_unlink(s, e);
        if (d) {
          d->dead_next = dead;
          dead = d;
        }
        count++;
      }
      n = next;
    }
  }
  pthread_mutex_unlock(&s->mu);
  store_destroy_list(dead);
  if (ret_bytes) {
    *ret_bytes = bytes;
  }
  return count;
}

static bool expired(const struct entry *e, const void *now) {
  return e->meta.expires_unix_ms && e->meta.expires_unix_ms <= *(const int64_t *)now;
}

size_t state_store_expire(struct state_store *s, int64_t now) {
  return unlink_where(s, expired, &now, NULL);
}

static bool in_session(const struct entry *e, const void *session) {
  return e->meta.session[0] && strcmp(e->meta.session, session) == 0;
}

size_t state_store_end_session(struct state_store *s, const char *session, uint64_t *ret_bytes) {
  if (ret_bytes) {
    *ret_bytes = 0;
  }
  if (!session || !session[0]) {
    return 0;
  }
  return unlink_where(s, in_session, session, ret_bytes);
}

/* ---- leases ---------------------------------------------------------------------------------- */

qdp_status store_write_leased(const struct entry *e, const char *what, struct qdp_error *reterr) {
  const struct state_meta *m = &e->meta;
  int64_t held = 0;
  for (const struct lease *l = e->leases; l; l = l->next) {
    if (l->id == m->writer_lease) {
      held = clock_unix_ms() - l->opened_unix_ms;
    }
  }
  return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "handle",
                       "state '%s' is leased for writing by %s (pid %d, lease %" PRIu64
                       ", open for %.1f s): %s until that lease is closed (CloseView, or the "
                       "holder's exit)",
                       m->handle, m->writer[0] ? m->writer : "an unnamed client", m->writer_pid,
                       m->writer_lease, (double)held / 1000.0, what);
}

/* Why e takes no write lease now: other leases, or pins beyond the opener's one. */
static qdp_status check_exclusive(const struct entry *e, struct qdp_error *reterr) {
  if (e->meta.leases) {
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "handle",
                         "state '%s' has %" PRIu32 " open view lease%s: a write lease is "
                         "exclusive; close them (CloseView) first",
                         e->meta.handle, e->meta.leases, e->meta.leases == 1 ? "" : "s");
  }
  if (e->pins > 1) {
    return qdp_error_set(reterr, QDP_ERR_FAILED_PRECONDITION, "handle",
                         "state '%s' is being read by %" PRIu32 " call%s in flight: a write "
                         "lease is exclusive; ask again once they end",
                         e->meta.handle, e->pins - 1, e->pins == 2 ? "" : "s");
  }
  return QDP_OK;
}

qdp_status state_store_lease_open(struct state_store *s, void *payload, const char *client, int pid,
                                  int pidfd, bool write, uint64_t *ret_lease_id, struct qdp_error *reterr) {
  size_t clen;
  qdp_status rc = capability_text_len(&client, OWNER_MAX, "client", "client name", &clen, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  if (pid < 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "client_pid",
                         "client_pid %d is negative: give the viewing process's pid, or 0", pid);
  }
  struct lease *l = calloc(1, sizeof *l);
  if (!l) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for a %zu B lease record", sizeof *l);
  }
  pthread_mutex_lock(&s->mu);
  struct entry *e = store_find_payload(s, payload);
  if (!e || !e->linked) {
    rc = qdp_error_set(reterr, QDP_ERR_NOT_FOUND, "handle",
                       "state '%s' was released while its views were being opened",
                       e ? e->meta.handle : "?");
    goto out;
  }
  if (e->meta.writer_lease) {
    rc = store_write_leased(e, "no other view of it opens", reterr);
    goto out;
  }
  if (write && (rc = check_exclusive(e, reterr)) != QDP_OK) {
    goto out;
  }
  if (e->meta.leases >= STATE_LEASES_MAX) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "state '%s' has %" PRIu32
                       " open view leases, its limit "
                       "(STATE_LEASES_MAX); close some with CloseView",
                       e->meta.handle, e->meta.leases);
    goto out;
  }
  memcpy(l->client, client, clen + 1);
  client_process_init(&l->process, pid, pidfd);
  l->opened_unix_ms = clock_unix_ms();
  l->id = ++s->next_lease_id;
  l->write = write;
  if (write) {
    e->meta.writer_lease = l->id;
    memcpy(e->meta.writer, client, clen + 1);
    e->meta.writer_pid = pid;
  }
  l->entry = e;
  l->next = e->leases;
  e->leases = l;
  e->meta.leases++;
  s->leases++;
  store_ht_insert(&s->by_lease, &l->node, store_hash_ptr((const void *)(uintptr_t)l->id));
  *ret_lease_id = l->id;
  l = NULL;
out:
  pthread_mutex_unlock(&s->mu);
  free(l);
  return rc;
}

static struct lease *find_lease(struct state_store *s, uint64_t id) {
  uint64_t h = store_hash_ptr((const void *)(uintptr_t)id);
  for (struct hnode *n = s->by_lease.buckets[h & (s->by_lease.nbuckets - 1)]; n; n = n->next) {
    struct lease *l = CONTAINER(n, struct lease, node);
    if (l->id == id) {
      return l;
    }
  }
  return NULL;
}

/* Ends lease l; returns its entry when that was the payload's last hold and it must be destroyed
 * now. Under the lock. */
static struct entry *end_lease(struct state_store *s, struct lease *l) {
  struct entry *e = l->entry;
  store_ht_remove(&s->by_lease, &l->node);
  struct lease **pp = &e->leases;
  while (*pp != l) {
    pp = &(*pp)->next;
  }
  *pp = l->next;
  if (l->write) {
    e->meta.writer_lease = 0;
    e->meta.writer[0] = '\0';
    e->meta.writer_pid = 0;
  }
  e->meta.leases--;
  s->leases--;
  client_process_end(&l->process);
  free(l);
  if (e->linked || e->pins || e->leases) {
    return NULL;
  }
  store_ht_remove(&s->by_payload, &e->by_payload);
  e->dead_next = NULL;
  return e;
}

qdp_status state_store_lease_close(struct state_store *s, const char *handle, const char *token,
                                   uint64_t lease_id, uint64_t *ret_freed_bytes,
                                   struct qdp_error *reterr) {
  pthread_mutex_lock(&s->mu);
  struct lease *l = find_lease(s, lease_id);
  struct entry *e = l ? l->entry : NULL;
  if (!store_token_ok(e, token) || !handle || strcmp(e->meta.handle, handle) != 0) {
    pthread_mutex_unlock(&s->mu);
    return qdp_error_set(reterr, QDP_ERR_NOT_FOUND, "lease_id",
                         "lease %" PRIu64
                         " of state '%.64s' not found: unknown lease, handle "
                         "or token",
                         lease_id, handle ? handle : "");
  }
  uint64_t bytes = e->meta.bytes;
  struct entry *dead = end_lease(s, l);
  pthread_mutex_unlock(&s->mu);
  store_destroy_list(dead);
  if (ret_freed_bytes) {
    *ret_freed_bytes = dead ? bytes : 0;
  }
  return QDP_OK;
}

size_t state_store_sweep_leases(struct state_store *s, int64_t now) {
  struct entry *dead = NULL;
  size_t ended = 0;
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->by_lease.nbuckets; i++) {
    struct hnode *n = s->by_lease.buckets[i];
    while (n) {
      struct hnode *next = n->next; /* n may leave the chain below */
      struct lease *l = CONTAINER(n, struct lease, node);
      n = next;
      if (client_process_gone(&l->process, now, s->lim.lease_grace_ms)) {
        struct entry *d = end_lease(s, l);
        if (d) {
          d->dead_next = dead;
          dead = d;
        }
        ended++;
      }
    }
  }
  pthread_mutex_unlock(&s->mu);
  store_destroy_list(dead);
  return ended;
}
