/* store.c — the state store: three chained hash tables under one mutex.
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
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "qdp_size.h"
#include "state/capability.h"
#include "state/store.h"

#define OWNER_MAX (sizeof(((struct state_meta *)0)->owner))
#define LABEL_MAX (sizeof(((struct state_meta *)0)->label))
#define TOKEN_BYTES 16 /* 128 bits */
#define HANDLE_BYTES 8 /* 16 hex digits */
/* The first table size: small enough to cost nothing for an idle daemon, and doubling reaches 16k
 * buckets in 6 steps. */
#define HT_INITIAL 64

struct hnode {
  struct hnode *next;
  uint64_t hash;
};

struct htable {
  struct hnode **buckets;
  size_t nbuckets; /* a power of two */
  size_t count;
};

struct owner {
  struct hnode node; /* in store->owners */
  char name[OWNER_MAX];
  uint64_t bytes; /* committed + reserved */
  uint32_t slots; /* committed states + outstanding reservations */
};

struct lease {
  struct hnode node;  /* in store->by_lease */
  struct lease *next; /* the entry's other leases */
  struct entry *entry;
  uint64_t id;
  char client[OWNER_MAX];
  int pid; /* 0: unknown, never swept */
  int64_t opened_unix_ms;
  int64_t gone_since_ms; /* when a sweep first found pid gone; 0 while it exists */
};

struct entry {
  struct hnode by_handle; /* in store->by_handle while linked */
  struct hnode by_payload;
  struct state_meta meta;
  char token[STATE_TOKEN_LEN];
  struct owner *owner; /* NULL once unlinked */
  void *payload;
  void (*payload_destroy)(void *);
  uint32_t pins;
  struct lease *leases; /* meta.leases of them */
  bool linked;
  struct entry *dead_next; /* on a to-destroy list built under the lock */
};

struct state_reservation {
  struct state_store *store;
  struct owner *owner;
  uint64_t bytes;
};

struct state_store {
  pthread_mutex_t mu;
  struct state_store_limits lim;
  struct htable by_handle, by_payload, owners, by_lease;
  uint64_t next_lease_id;
  uint64_t bytes;  /* committed + reserved */
  uint32_t slots;  /* committed + reserved */
  uint32_t states; /* committed and linked */
  uint32_t leases; /* open, over every entry */
};

/* ---- hashing ----------------------------------------------------------------------------------
 */

static uint64_t hash_str(const char *s) {
  /* FNV-1a 64: handles are random, but owners and handles in requests are client-chosen text;
   * FNV spreads short ASCII keys well enough for chaining. */
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h;
}

static uint64_t hash_ptr(const void *p) {
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

static void ht_insert(struct htable *t, struct hnode *n, uint64_t hash) {
  if (t->count >= t->nbuckets) {
    ht_grow(t);
  }
  n->hash = hash;
  size_t i = hash & (t->nbuckets - 1);
  n->next = t->buckets[i];
  t->buckets[i] = n;
  t->count++;
}

static void ht_remove(struct htable *t, struct hnode *n) {
  struct hnode **pp = &t->buckets[n->hash & (t->nbuckets - 1)];
  while (*pp && *pp != n) {
    pp = &(*pp)->next;
  }
  if (*pp) {
    *pp = n->next;
    t->count--;
  }
}

#define CONTAINER(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

static struct entry *find_handle(struct state_store *s, const char *handle) {
  uint64_t h = hash_str(handle);
  for (struct hnode *n = s->by_handle.buckets[h & (s->by_handle.nbuckets - 1)]; n; n = n->next) {
    struct entry *e = CONTAINER(n, struct entry, by_handle);
    if (n->hash == h && strcmp(e->meta.handle, handle) == 0) {
      return e;
    }
  }
  return NULL;
}

static struct entry *find_payload(struct state_store *s, const void *payload) {
  uint64_t h = hash_ptr(payload);
  for (struct hnode *n = s->by_payload.buckets[h & (s->by_payload.nbuckets - 1)]; n; n = n->next) {
    struct entry *e = CONTAINER(n, struct entry, by_payload);
    if (e->payload == payload) {
      return e;
    }
  }
  return NULL;
}

static struct owner *find_owner(struct state_store *s, const char *name) {
  uint64_t h = hash_str(name);
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

static void destroy_list(struct entry *dead) {
  while (dead) {
    struct entry *next = dead->dead_next;
    if (dead->payload_destroy) {
      dead->payload_destroy(dead->payload);
    }
    while (dead->leases) { /* only at state_store_destroy: leases are closed one by one else */
      struct lease *l = dead->leases;
      dead->leases = l->next;
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
  destroy_list(dead);
}

/* ---- admission ------------------------------------------------------------------------------- */

static void owner_drop_if_idle(struct state_store *s, struct owner *o) {
  if (o->bytes == 0 && o->slots == 0) {
    ht_remove(&s->owners, &o->node);
    free(o);
  }
}

/* Gives back what a reservation or a state held. Under the lock. */
static void unaccount(struct state_store *s, struct owner *o, uint64_t bytes) {
  s->bytes -= bytes;
  s->slots--;
  o->bytes -= bytes;
  o->slots--;
  owner_drop_if_idle(s, o);
}

/* Whether bytes more and one slot more fit the store's limits and those of owner (o, or NULL when
 * it holds nothing yet): RESOURCE_EXHAUSTED naming the first limit that refuses. Under the lock. */
static qdp_status check_room(const struct state_store *s, const char *owner, const struct owner *o,
                             uint64_t bytes, struct qdp_error *reterr) {
  const struct state_store_limits *lim = &s->lim;
  uint64_t obytes = o ? o->bytes : 0;
  uint32_t oslots = o ? o->slots : 0;
  if (bytes > UINT64_MAX - s->bytes ||
      (lim->budget_bytes && bytes > lim->budget_bytes - s->bytes)) {
    uint64_t budget = lim->budget_bytes ? lim->budget_bytes : UINT64_MAX;
    qdp_status rc =
        qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                      "state of %s refused: the store holds %s of its %s budget (budget_bytes); "
                      "release states or raise it",
                      QDP_SIZE_STR(bytes), QDP_SIZE_STR(s->bytes), QDP_SIZE_STR(budget));
    if (reterr) {
      reterr->need_bytes = bytes;
      reterr->free_bytes = budget - s->bytes;
    }
    return rc;
  }
  if (bytes > UINT64_MAX - obytes ||
      (lim->client_budget_bytes && bytes > lim->client_budget_bytes - obytes)) {
    uint64_t budget = lim->client_budget_bytes ? lim->client_budget_bytes : UINT64_MAX;
    qdp_status rc =
        qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                      "state of %s refused: client '%s' holds %s of its %s budget "
                      "(client_budget_bytes)",
                      QDP_SIZE_STR(bytes), owner, QDP_SIZE_STR(obytes), QDP_SIZE_STR(budget));
    if (reterr) {
      reterr->need_bytes = bytes;
      reterr->free_bytes = budget - obytes;
    }
    return rc;
  }
  if (lim->max_states && s->slots >= lim->max_states) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "state of %s refused: the store holds %" PRIu32
                         " states and reservations, its limit (max_states %" PRIu32 ")",
                         QDP_SIZE_STR(bytes), s->slots, lim->max_states);
  }
  if (lim->max_client_states && oslots >= lim->max_client_states) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "state of %s refused: client '%s' holds %" PRIu32
                         " states and reservations, its limit (max_client_states %" PRIu32 ")",
                         QDP_SIZE_STR(bytes), owner, oslots, lim->max_client_states);
  }
  return QDP_OK;
}

/* A new, empty record for owner (olen bytes), entered in the table. Under the lock. */
static qdp_status owner_add(struct state_store *s, const char *owner, size_t olen,
                            struct owner **ret, struct qdp_error *reterr) {
  struct owner *fresh = calloc(1, sizeof *fresh);
  if (!fresh) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for a %zu B owner record", sizeof *fresh);
  }
  memcpy(fresh->name, owner, olen + 1);
  ht_insert(&s->owners, &fresh->node, hash_str(fresh->name));
  *ret = fresh;
  return QDP_OK;
}

qdp_status state_store_admit(struct state_store *s, const char *owner, uint64_t bytes,
                             struct state_reservation **ret_res, struct qdp_error *reterr) {
  if (!owner) {
    owner = "";
  }
  size_t olen = strlen(owner);
  if (olen >= OWNER_MAX) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "owner",
                         "owner name of %zu B is too long; at most %zu B", olen, OWNER_MAX - 1);
  }
  struct state_reservation *r = malloc(sizeof *r);
  if (!r) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for a %zu B reservation record", sizeof *r);
  }
  qdp_status rc = QDP_OK;
  pthread_mutex_lock(&s->mu);
  struct owner *o = find_owner(s, owner);
  QDP_TRY(rc, check_room(s, owner, o, bytes, reterr));
  if (!o) {
    QDP_TRY(rc, owner_add(s, owner, olen, &o, reterr));
  }
  o->bytes += bytes;
  o->slots++;
  s->bytes += bytes;
  s->slots++;
  r->store = s;
  r->owner = o;
  r->bytes = bytes;
  *ret_res = r;
  r = NULL;
out:
  pthread_mutex_unlock(&s->mu);
  free(r);
  return rc;
}

void state_reservation_cancel(struct state_reservation *r) {
  if (!r) {
    return;
  }
  struct state_store *s = r->store;
  pthread_mutex_lock(&s->mu);
  unaccount(s, r->owner, r->bytes);
  pthread_mutex_unlock(&s->mu);
  free(r);
}

/* ---- commit ---------------------------------------------------------------------------------- */

/* A state record for payload, not yet linked: label, token, creation time and expiry. */
static qdp_status new_entry(struct state_store *s, const struct state_reservation *r, void *payload,
                            void (*payload_destroy)(void *), uint64_t ttl_ms, const char *label,
                            struct entry **ret, struct qdp_error *reterr) {
  if (!label) {
    label = "";
  }
  size_t llen = strlen(label);
  if (llen >= LABEL_MAX) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "label",
                         "label of %zu B is too long; at most %zu B", llen, LABEL_MAX - 1);
  }
  struct entry *e = calloc(1, sizeof *e);
  if (!e) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for a %zu B state record", sizeof *e);
  }
  qdp_status rc = capability_random_hex(e->token, TOKEN_BYTES, reterr);
  if (rc != QDP_OK) {
    free(e);
    return rc;
  }
  memcpy(e->meta.label, label, llen + 1);
  e->meta.bytes = r->bytes;
  e->meta.created_unix_ms = clock_unix_ms();
  uint64_t ttl = ttl_ms ? ttl_ms : s->lim.default_ttl_ms;
  /* The cap applies to "never" as well: with max_ttl_ms set, no state outlives it. A caller
   * that asked for longer is told (the reply's ttl_capped), never cut short silently. */
  if (s->lim.max_ttl_ms && (ttl == 0 || ttl > s->lim.max_ttl_ms)) {
    e->meta.ttl_capped = ttl_ms != 0;
    ttl = s->lim.max_ttl_ms;
  }
  e->meta.ttl_ms = ttl;
  if (ttl) {
    /* Clamp far futures instead of overflowing the signed millisecond clock. */
    int64_t room = INT64_MAX - e->meta.created_unix_ms;
    e->meta.expires_unix_ms =
        ttl > (uint64_t)room ? INT64_MAX : e->meta.created_unix_ms + (int64_t)ttl;
  }
  e->payload = payload;
  e->payload_destroy = payload_destroy;
  *ret = e;
  return QDP_OK;
}

/* Both commits; ret_meta non-NULL: the state is linked already pinned, and its record copied,
 * under the same lock, so no Release or expiry can come between. */
static qdp_status commit(struct state_store *s, struct state_reservation *r, void *payload,
                         void (*payload_destroy)(void *), uint64_t ttl_ms, const char *label,
                         struct state_meta *ret_meta, char *ret_handle, char *ret_token,
                         struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct entry *e = NULL;
  bool locked = false;
  if (!r || r->store != s) {
    rc = qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL, "commit given %s reservation",
                       r ? "another store's" : "no");
    if (r && r->store != s) {
      state_reservation_cancel(r);
      r = NULL;
    }
    goto out;
  }
  if (!payload) {
    rc = qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                       "commit of a %" PRIu64 " B state given a NULL payload", r->bytes);
    goto out;
  }
  QDP_TRY(rc, new_entry(s, r, payload, payload_destroy, ttl_ms, label, &e, reterr));
  pthread_mutex_lock(&s->mu);
  locked = true;
  if (find_payload(s, payload)) {
    rc = qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                       "commit given a payload the store already holds (%" PRIu64 " B state)",
                       r->bytes);
    goto out;
  }
  /* 64 random bits: a collision with a live handle is astronomically rare, but a handle must never
   * name two states, so draw again rather than assume. */
  for (;;) {
    QDP_TRY(rc, capability_random_hex(e->meta.handle + 1, HANDLE_BYTES, reterr));
    e->meta.handle[0] = 's';
    if (!find_handle(s, e->meta.handle)) {
      break;
    }
  }
  snprintf(e->meta.owner, sizeof e->meta.owner, "%s", r->owner->name);
  e->owner = r->owner; /* the reservation's bytes and slot become the state's */
  e->linked = true;
  e->pins = ret_meta ? 1 : 0;
  ht_insert(&s->by_handle, &e->by_handle, hash_str(e->meta.handle));
  ht_insert(&s->by_payload, &e->by_payload, hash_ptr(payload));
  s->states++;
  if (ret_meta) {
    *ret_meta = e->meta;
  }
  if (ret_handle) {
    memcpy(ret_handle, e->meta.handle, STATE_HANDLE_LEN);
  }
  memcpy(ret_token, e->token, STATE_TOKEN_LEN);
  e = NULL;
  free(r);
  r = NULL;
out:
  if (locked) {
    pthread_mutex_unlock(&s->mu);
  }
  free(e);
  state_reservation_cancel(r);
  return rc;
}

qdp_status state_store_commit(struct state_store *s, struct state_reservation *r, void *payload,
                              void (*payload_destroy)(void *), uint64_t ttl_ms, const char *label,
                              char *ret_handle, char *ret_token, struct qdp_error *reterr) {
  return commit(s, r, payload, payload_destroy, ttl_ms, label, NULL, ret_handle, ret_token, reterr);
}

qdp_status state_store_commit_pinned(struct state_store *s, struct state_reservation *r,
                                     void *payload, void (*payload_destroy)(void *),
                                     uint64_t ttl_ms, const char *label,
                                     struct state_meta *ret_meta, char *ret_token,
                                     struct qdp_error *reterr) {
  return commit(s, r, payload, payload_destroy, ttl_ms, label, ret_meta, NULL, ret_token, reterr);
}

/* ---- lookups --------------------------------------------------------------------------------- */

static qdp_status not_found(const char *handle, struct qdp_error *reterr) {
  return qdp_error_set(reterr, QDP_ERR_NOT_FOUND, "handle",
                       "state '%.*s' not found: unknown handle or wrong token", 64,
                       handle ? handle : "");
}

/* The entry for (handle, token), or NULL; under the lock. Expired states are not found even
 * before the sweeper unlinks them, so a TTL is exact for the client. */
static struct entry *lookup(struct state_store *s, const char *handle, const char *token,
                            int64_t now) {
  if (!handle) {
    return NULL;
  }
  struct entry *e = find_handle(s, handle);
  /* Compare a token even for an unknown handle, so both refusals cost the same. */
  static const char dummy[STATE_TOKEN_LEN] = "00000000000000000000000000000000";
  bool ok = capability_equal(e ? e->token : dummy, token, STATE_TOKEN_LEN - 1);
  if (!e || !ok) {
    return NULL;
  }
  if (e->meta.expires_unix_ms && e->meta.expires_unix_ms <= now) {
    return NULL;
  }
  return e;
}

qdp_status state_store_get(struct state_store *s, const char *handle, const char *token,
                           void **ret_payload, struct state_meta *ret_meta,
                           struct qdp_error *reterr) {
  int64_t now = clock_unix_ms();
  pthread_mutex_lock(&s->mu);
  struct entry *e = lookup(s, handle, token, now);
  if (!e) {
    pthread_mutex_unlock(&s->mu);
    return not_found(handle, reterr);
  }
  e->pins++;
  *ret_payload = e->payload;
  if (ret_meta) {
    *ret_meta = e->meta;
  }
  pthread_mutex_unlock(&s->mu);
  return QDP_OK;
}

/* Unlinks a live entry; returns it when it should be destroyed now (no pin). Under the lock. */
static struct entry *unlink_entry(struct state_store *s, struct entry *e) {
  ht_remove(&s->by_handle, &e->by_handle);
  e->linked = false;
  s->states--;
  unaccount(s, e->owner, e->meta.bytes);
  e->owner = NULL;
  if (e->pins || e->leases) {
    return NULL;
  }
  ht_remove(&s->by_payload, &e->by_payload);
  return e;
}

void state_store_put(struct state_store *s, void *payload) {
  if (!s || !payload) {
    return;
  }
  struct entry *dead = NULL;
  pthread_mutex_lock(&s->mu);
  struct entry *e = find_payload(s, payload);
  if (e && e->pins) {
    e->pins--;
    if (!e->pins && !e->linked && !e->leases) {
      ht_remove(&s->by_payload, &e->by_payload);
      dead = e;
      dead->dead_next = NULL;
    }
  }
  pthread_mutex_unlock(&s->mu);
  destroy_list(dead);
}

/* Unlinks e (found under the lock, which this releases) and destroys it when nothing pins it. */
static qdp_status release_locked(struct state_store *s, struct entry *e, const char *handle,
                                 uint64_t *ret_freed_bytes, struct qdp_error *reterr) {
  if (!e) {
    pthread_mutex_unlock(&s->mu);
    return not_found(handle, reterr);
  }
  uint64_t bytes = e->meta.bytes;
  struct entry *dead = unlink_entry(s, e);
  if (dead) {
    dead->dead_next = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  destroy_list(dead);
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
  struct entry *e = handle && owner && owner[0] ? find_handle(s, handle) : NULL;
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

size_t state_store_expire(struct state_store *s, int64_t now) {
  struct entry *dead = NULL;
  size_t count = 0;
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->by_handle.nbuckets; i++) {
    struct hnode *n = s->by_handle.buckets[i];
    while (n) {
      struct hnode *next = n->next; /* n may leave the chain below */
      struct entry *e = CONTAINER(n, struct entry, by_handle);
      if (e->meta.expires_unix_ms && e->meta.expires_unix_ms <= now) {
        struct entry *d = unlink_entry(s, e);
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
  destroy_list(dead);
  return count;
}

/* ---- leases ---------------------------------------------------------------------------------- */

qdp_status state_store_lease_open(struct state_store *s, void *payload, const char *client, int pid,
                                  uint64_t *ret_lease_id, struct qdp_error *reterr) {
  if (!client) {
    client = "";
  }
  size_t clen = strlen(client);
  if (clen >= OWNER_MAX) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "client",
                         "client name of %zu B is too long; at most %zu B", clen, OWNER_MAX - 1);
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
  qdp_status rc = QDP_OK;
  pthread_mutex_lock(&s->mu);
  struct entry *e = find_payload(s, payload);
  if (!e || !e->linked) {
    rc = qdp_error_set(reterr, QDP_ERR_NOT_FOUND, "handle",
                       "state '%s' was released while its views were being opened",
                       e ? e->meta.handle : "?");
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
  l->pid = pid;
  l->opened_unix_ms = clock_unix_ms();
  l->id = ++s->next_lease_id;
  l->entry = e;
  l->next = e->leases;
  e->leases = l;
  e->meta.leases++;
  s->leases++;
  ht_insert(&s->by_lease, &l->node, hash_ptr((const void *)(uintptr_t)l->id));
  *ret_lease_id = l->id;
  l = NULL;
out:
  pthread_mutex_unlock(&s->mu);
  free(l);
  return rc;
}

static struct lease *find_lease(struct state_store *s, uint64_t id) {
  uint64_t h = hash_ptr((const void *)(uintptr_t)id);
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
  ht_remove(&s->by_lease, &l->node);
  struct lease **pp = &e->leases;
  while (*pp != l) {
    pp = &(*pp)->next;
  }
  *pp = l->next;
  e->meta.leases--;
  s->leases--;
  free(l);
  if (e->linked || e->pins || e->leases) {
    return NULL;
  }
  ht_remove(&s->by_payload, &e->by_payload);
  e->dead_next = NULL;
  return e;
}

qdp_status state_store_lease_close(struct state_store *s, const char *handle, const char *token,
                                   uint64_t lease_id, uint64_t *ret_freed_bytes,
                                   struct qdp_error *reterr) {
  static const char dummy[STATE_TOKEN_LEN] = "00000000000000000000000000000000";
  pthread_mutex_lock(&s->mu);
  struct lease *l = find_lease(s, lease_id);
  struct entry *e = l ? l->entry : NULL;
  /* As lookup(): a token is compared whatever else matched, so refusals cost the same. */
  bool ok = capability_equal(e ? e->token : dummy, token, STATE_TOKEN_LEN - 1);
  if (!e || !ok || !handle || strcmp(e->meta.handle, handle) != 0) {
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
  destroy_list(dead);
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
      if (capability_pid_gone(l->pid, now, s->lim.lease_grace_ms, &l->gone_since_ms)) {
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
  destroy_list(dead);
  return ended;
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
