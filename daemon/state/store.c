/* store.c — the state store's tables and handles: its hash tables, its life, and the lookups,
 * pins and releases by handle (admission and commit: store_admit.c; expiry and leases:
 * store_leases.c). Four chained hash tables under one mutex:
 *
 *   by_handle   live states, keyed by handle (what clients name)
 *   by_payload  every state whose payload is not yet destroyed, live or unlinked-but-pinned, keyed
 *               by payload pointer (what state_store_put names)
 *   owners      per-owner bytes and slots (reservations + states), dropped when both reach zero
 *   by_lease    every open lease, keyed by lease id (what CloseView names, also after Release)
 *
 * Buckets double when the load passes 1, so every lookup stays O(1) at 10k states and beyond; a
 * failed grow keeps the old table (longer chains, still correct). Payload destroy callbacks always
 * run after the mutex is dropped, because they may free device memory and take their own locks.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "state/capability.h"
#include "state/store_internal.h"

/* ---- hashing ----------------------------------------------------------------------------------
 */

uint64_t store_hash_str(const char *s) {
  /* FNV-1a 64: handles are random, but owners and handles in requests are client-chosen text;
   * FNV spreads short ASCII keys well enough for chaining. */
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h;
}

uint64_t store_hash_ptr(const void *p) {
  /* splitmix64 finalizer: pointers share their low (alignment) and high bits. */
  uint64_t z = (uint64_t)(uintptr_t)p + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int ht_init(struct htable *t) {
  t->buckets = calloc(HT_INITIAL, sizeof *t->buckets);
  t->nbuckets = HT_INITIAL;
  t->count = 0;
  return t->buckets ? 0 : -1;
}

static void ht_grow(struct htable *t) {
  size_t n = t->nbuckets * 2;
  struct hnode **nb = calloc(n, sizeof *nb);
  if (!nb) {
    return; /* keep the old buckets: slower, still correct */
  }
  for (size_t i = 0; i < t->nbuckets; i++) {
    struct hnode *e = t->buckets[i];
    while (e) {
      struct hnode *next = e->next;
      size_t j = e->hash & (n - 1);
      e->next = nb[j];
      nb[j] = e;
      e = next;
    }
  }
  free(t->buckets);
  t->buckets = nb;
  t->nbuckets = n;
}

void store_ht_insert(struct htable *t, struct hnode *n, uint64_t hash) {
  if (t->count >= t->nbuckets) {
    ht_grow(t);
  }
  n->hash = hash;
  size_t i = hash & (t->nbuckets - 1);
  n->next = t->buckets[i];
  t->buckets[i] = n;
  t->count++;
}

void store_ht_remove(struct htable *t, struct hnode *n) {
  struct hnode **pp = &t->buckets[n->hash & (t->nbuckets - 1)];
  while (*pp && *pp != n) {
    pp = &(*pp)->next;
  }
  if (*pp) {
    *pp = n->next;
    t->count--;
  }
}

struct entry *store_find_handle(struct state_store *s, const char *handle) {
  uint64_t h = store_hash_str(handle);
  for (struct hnode *n = s->by_handle.buckets[h & (s->by_handle.nbuckets - 1)]; n; n = n->next) {
    struct entry *e = CONTAINER(n, struct entry, by_handle);
    if (n->hash == h && strcmp(e->meta.handle, handle) == 0) {
      return e;
    }
  }
  return NULL;
}

struct entry *store_find_payload(struct state_store *s, const void *payload) {
  uint64_t h = store_hash_ptr(payload);
  for (struct hnode *n = s->by_payload.buckets[h & (s->by_payload.nbuckets - 1)]; n; n = n->next) {
    struct entry *e = CONTAINER(n, struct entry, by_payload);
    if (e->payload == payload) {
      return e;
    }
  }
  return NULL;
}

struct owner *store_find_owner(struct state_store *s, const char *name) {
  uint64_t h = store_hash_str(name);
  for (struct hnode *n = s->owners.buckets[h & (s->owners.nbuckets - 1)]; n; n = n->next) {
    struct owner *o = CONTAINER(n, struct owner, node);
    if (n->hash == h && strcmp(o->name, name) == 0) {
      return o;
    }
  }
  return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

qdp_status state_store_create(const struct state_store_limits *lim, struct state_store **ret_store,
                              struct qdp_error *reterr) {
  struct state_store *s = calloc(1, sizeof *s);
  if (!s) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "the state store could not allocate its %zu B record", sizeof *s);
  }
  if (lim) {
    s->lim = *lim;
  }
  if (ht_init(&s->by_handle) || ht_init(&s->by_payload) || ht_init(&s->owners) ||
      ht_init(&s->by_lease)) {
    free(s->by_handle.buckets);
    free(s->by_payload.buckets);
    free(s->owners.buckets);
    free(s->by_lease.buckets);
    free(s);
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "the state store could not allocate its hash tables (4 x %zu B)",
                         HT_INITIAL * sizeof(struct hnode *));
  }
  int err = pthread_mutex_init(&s->mu, NULL);
  if (err) {
    free(s->by_handle.buckets);
    free(s->by_payload.buckets);
    free(s->owners.buckets);
    free(s->by_lease.buckets);
    free(s);
    return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, err,
                            "the state store could not create its mutex: %s", strerror(err));
  }
  *ret_store = s;
  return QDP_OK;
}

void store_destroy_list(struct entry *dead) {
  while (dead) {
    struct entry *next = dead->dead_next;
    if (dead->payload_destroy) {
      dead->payload_destroy(dead->payload);
    }
    while (dead->leases) { /* only at state_store_destroy: leases are closed one by one else */
      struct lease *l = dead->leases;
      dead->leases = l->next;
      client_process_end(&l->process);
      free(l);
    }
    free(dead);
    dead = next;
  }
}

void state_store_destroy(struct state_store *s) {
  if (!s) {
    return;
  }
  /* Every entry with a payload is in by_payload (linked or pinned-and-unlinked). */
  struct entry *dead = NULL;
  for (size_t i = 0; i < s->by_payload.nbuckets; i++) {
    for (struct hnode *n = s->by_payload.buckets[i]; n; n = n->next) {
      struct entry *e = CONTAINER(n, struct entry, by_payload);
      e->dead_next = dead;
      dead = e;
    }
  }
  for (size_t i = 0; i < s->owners.nbuckets; i++) {
    struct hnode *n = s->owners.buckets[i];
    while (n) {
      struct hnode *next = n->next;
      free(CONTAINER(n, struct owner, node));
      n = next;
    }
  }
  free(s->by_handle.buckets);
  free(s->by_payload.buckets);
  free(s->owners.buckets);
  free(s->by_lease.buckets);
  pthread_mutex_destroy(&s->mu);
  free(s);
  store_destroy_list(dead);
}

/* ---- lookups --------------------------------------------------------------------------------- */

static qdp_status not_found(const char *handle, struct qdp_error *reterr) {
  return qdp_error_set(reterr, QDP_ERR_NOT_FOUND, "handle",
                       "state '%.*s' not found: unknown handle or wrong token", 64,
                       handle ? handle : "");
}

bool store_token_ok(const struct entry *e, const char *token) {
  static const char dummy[STATE_TOKEN_LEN] = "00000000000000000000000000000000";
  return capability_equal(e ? e->token : dummy, token, STATE_TOKEN_LEN - 1) && e;
}

/* The entry for (handle, token), or NULL; under the lock. Expired states are not found even
 * before the sweeper unlinks them, so a TTL is exact for the client. */
static struct entry *lookup(struct state_store *s, const char *handle, const char *token,
                            int64_t now) {
  if (!handle) {
    return NULL;
  }
  struct entry *e = store_find_handle(s, handle);
  if (!store_token_ok(e, token)) {
    return NULL;
  }
  if (e->meta.expires_unix_ms && e->meta.expires_unix_ms <= now) {
    return NULL;
  }
  return e;
}

/* Pins (handle, token): for its amplitudes unless `record`, refused then under a write lease. */
static qdp_status pin(struct state_store *s, const char *handle, const char *token, bool record,
                      void **ret_payload, struct state_meta *ret_meta, struct qdp_error *reterr) {
  int64_t now = clock_unix_ms();
  pthread_mutex_lock(&s->mu);
  struct entry *e = lookup(s, handle, token, now);
  if (!e) {
    pthread_mutex_unlock(&s->mu);
    return not_found(handle, reterr);
  }
  if (!record && e->meta.writer_lease) {
    qdp_status rc = store_write_leased(e, "its amplitudes are not read", reterr);
    pthread_mutex_unlock(&s->mu);
    return rc;
  }
  e->pins++;
  *ret_payload = e->payload;
  if (ret_meta) {
    *ret_meta = e->meta;
  }
  pthread_mutex_unlock(&s->mu);
  return QDP_OK;
}

qdp_status state_store_get(struct state_store *s, const char *handle, const char *token,
                           void **ret_payload, struct state_meta *ret_meta,
                           struct qdp_error *reterr) {
  return pin(s, handle, token, false, ret_payload, ret_meta, reterr);
}

qdp_status state_store_get_record(struct state_store *s, const char *handle, const char *token,
                                  void **ret_payload, struct state_meta *ret_meta,
                                  struct qdp_error *reterr) {
  return pin(s, handle, token, true, ret_payload, ret_meta, reterr);
}

/* Unlinks a live entry; returns it when it should be destroyed now (no pin). Under the lock. */
struct entry *store_unlink(struct state_store *s, struct entry *e) {
  store_ht_remove(&s->by_handle, &e->by_handle);
  e->linked = false;
  s->states--;
  store_unaccount(s, e->owner, e->meta.bytes);
  e->owner = NULL;
  if (e->pins || e->leases) {
    return NULL;
  }
  store_ht_remove(&s->by_payload, &e->by_payload);
  return e;
}

void state_store_put(struct state_store *s, void *payload) {
  if (!s || !payload) {
    return;
  }
  struct entry *dead = NULL;
  pthread_mutex_lock(&s->mu);
  struct entry *e = store_find_payload(s, payload);
  if (e && e->pins) {
    e->pins--;
    if (!e->pins && !e->linked && !e->leases) {
      store_ht_remove(&s->by_payload, &e->by_payload);
      dead = e;
      dead->dead_next = NULL;
    }
  }
  pthread_mutex_unlock(&s->mu);
  store_destroy_list(dead);
}

/* Unlinks e (found under the lock, which this releases) and destroys it when nothing pins it. */
static qdp_status release_locked(struct state_store *s, struct entry *e, const char *handle,
                                 uint64_t *ret_freed_bytes, struct qdp_error *reterr) {
  if (!e) {
    pthread_mutex_unlock(&s->mu);
    return not_found(handle, reterr);
  }
  uint64_t bytes = e->meta.bytes;
  struct entry *dead = store_unlink(s, e);
  if (dead) {
    dead->dead_next = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  store_destroy_list(dead);
  if (ret_freed_bytes) {
    *ret_freed_bytes = bytes;
  }
  return QDP_OK;
}

qdp_status state_store_release(struct state_store *s, const char *handle, const char *token,
                               uint64_t *ret_freed_bytes, struct qdp_error *reterr) {
  pthread_mutex_lock(&s->mu);
  /* An expired state not yet swept can still be released: the client is tidying up. */
  return release_locked(s, lookup(s, handle, token, INT64_MIN), handle, ret_freed_bytes, reterr);
}

qdp_status state_store_release_owned(struct state_store *s, const char *handle, const char *owner,
                                     uint64_t *ret_freed_bytes, struct qdp_error *reterr) {
  pthread_mutex_lock(&s->mu);
  struct entry *e = handle && owner && owner[0] ? store_find_handle(s, handle) : NULL;
  /* Another identity's state reads as unknown: handles say nothing about whose they are. */
  if (e && strcmp(e->meta.owner, owner) != 0) {
    e = NULL;
  }
  return release_locked(s, e, handle, ret_freed_bytes, reterr);
}

void state_store_foreach(struct state_store *s,
                         void (*fn)(const struct state_meta *meta, void *payload, void *arg),
                         void *arg) {
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->by_handle.nbuckets; i++) {
    for (struct hnode *n = s->by_handle.buckets[i]; n; n = n->next) {
      struct entry *e = CONTAINER(n, struct entry, by_handle);
      fn(&e->meta, e->payload, arg);
    }
  }
  pthread_mutex_unlock(&s->mu);
}

void state_store_usage(struct state_store *s, uint64_t *ret_bytes, uint32_t *ret_states,
                       uint32_t *ret_leases) {
  pthread_mutex_lock(&s->mu);
  if (ret_leases) {
    *ret_leases = s->leases;
  }
  if (ret_bytes) {
    *ret_bytes = s->bytes;
  }
  if (ret_states) {
    *ret_states = s->states;
  }
  pthread_mutex_unlock(&s->mu);
}
