/* store_admit.c — admission and budgets: a reservation of bytes and a slot against the store's
 * limits and its owner's, given back or turned into a state by a commit, which draws the state's
 * handle and token and sets its expiry.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "qdp_size.h"
#include "state/capability.h"
#include "state/store_internal.h"

/* ---- admission ------------------------------------------------------------------------------- */

static void owner_drop_if_idle(struct state_store *s, struct owner *o) {
  if (o->bytes == 0 && o->slots == 0) {
    store_ht_remove(&s->owners, &o->node);
    free(o);
  }
}

/* Gives back what a reservation or a state held. Under the lock. */
void store_unaccount(struct state_store *s, struct owner *o, uint64_t bytes) {
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
  store_ht_insert(&s->owners, &fresh->node, store_hash_str(fresh->name));
  *ret = fresh;
  return QDP_OK;
}

qdp_status state_store_admit(struct state_store *s, const char *owner, uint64_t bytes,
                             struct state_reservation **ret_res, struct qdp_error *reterr) {
  size_t olen;
  qdp_status rc = capability_text_len(&owner, OWNER_MAX, "owner", "owner name", &olen, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  struct state_reservation *r = calloc(1, sizeof *r);
  if (!r) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for a %zu B reservation record", sizeof *r);
  }
  pthread_mutex_lock(&s->mu);
  struct owner *o = store_find_owner(s, owner);
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

qdp_status state_reservation_join(struct state_reservation *r, const char *session,
                                  struct qdp_error *reterr) {
  size_t n;
  qdp_status rc = capability_text_len(&session, SESSION_ID_LEN, "session", "session id", &n, reterr);
  if (rc == QDP_OK) {
    memcpy(r->session, session, n + 1);
  }
  return rc;
}

void state_reservation_cancel(struct state_reservation *r) {
  if (!r) {
    return;
  }
  struct state_store *s = r->store;
  pthread_mutex_lock(&s->mu);
  store_unaccount(s, r->owner, r->bytes);
  pthread_mutex_unlock(&s->mu);
  free(r);
}

/* ---- commit ---------------------------------------------------------------------------------- */

/* A state record for payload, not yet linked: label, token, creation time and expiry. */
static qdp_status new_entry(struct state_store *s, const struct state_reservation *r, void *payload,
                            void (*payload_destroy)(void *), uint64_t ttl_ms, const char *label,
                            struct entry **ret, struct qdp_error *reterr) {
  size_t llen;
  qdp_status rc = capability_text_len(&label, LABEL_MAX, "label", "label", &llen, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  struct entry *e = calloc(1, sizeof *e);
  if (!e) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for a %zu B state record", sizeof *e);
  }
  rc = capability_random_hex(e->token, TOKEN_BYTES, reterr);
  if (rc != QDP_OK) {
    free(e);
    return rc;
  }
  memcpy(e->meta.label, label, llen + 1);
  memcpy(e->meta.session, r->session, sizeof e->meta.session);
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
  if (store_find_payload(s, payload)) {
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
    if (!store_find_handle(s, e->meta.handle)) {
      break;
    }
  }
  snprintf(e->meta.owner, sizeof e->meta.owner, "%s", r->owner->name);
  e->owner = r->owner; /* the reservation's bytes and slot become the state's */
  e->linked = true;
  e->pins = ret_meta ? 1 : 0;
  store_ht_insert(&s->by_handle, &e->by_handle, store_hash_str(e->meta.handle));
  store_ht_insert(&s->by_payload, &e->by_payload, store_hash_ptr(payload));
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
