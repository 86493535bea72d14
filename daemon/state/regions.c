/* regions.c — the region registry: one list under one mutex.
 *
 * Regions are few (max_regions, 64 by default) and each costs a system call or a page-locking
 * pass to make, so a list searched in order is all the structure they need. An entry stays on the
 * list while it is linked or pinned; `linked` says whether clients can still name it.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "state/capability.h"
#include "state/regions.h"

#define OWNER_MAX (sizeof(((struct region_meta *)0)->owner))
#define TOKEN_BYTES 16 /* 128 bits */
#define HANDLE_BYTES 8

struct region {
  struct region *next;
  struct region_meta meta;
  char token[REGION_TOKEN_LEN];
  void *payload;
  void (*payload_end)(void *);
  uint32_t pins;
  bool linked;
  struct client_process process; /* meta.pid's */
  struct region *swept_next; /* on a sweep's list, pinned by the sweep until it reports it */
};

/* One identity's linked regions and outstanding reservations (max_client_regions). */
struct owner_slots {
  char owner[OWNER_MAX];
  uint32_t slots;
};

struct region_registry {
  pthread_mutex_t mu;
  uint32_t max_regions;
  uint32_t max_client_regions;
  uint32_t slots;   /* linked regions + outstanding reservations */
  uint32_t regions; /* linked */
  uint64_t bytes;   /* of linked regions */
  struct region *head;
  struct owner_slots *owners; /* those with slots > 0, in no order */
  size_t nowners, cap_owners;
};

qdp_status region_registry_create(uint32_t max_regions, uint32_t max_client_regions,
                                  struct region_registry **ret, struct qdp_error *reterr) {
  struct region_registry *r = calloc(1, sizeof *r);
  if (!r) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "the region registry could not allocate its %zu B record", sizeof *r);
  }
  int err = pthread_mutex_init(&r->mu, NULL);
  if (err) {
    free(r);
    return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, err,
                            "the region registry could not create its mutex: %s", strerror(err));
  }
  r->max_regions = max_regions;
  r->max_client_regions = max_client_regions;
  *ret = r;
  return QDP_OK;
}

static void end_region(struct region *e) {
  if (e->payload_end) {
    e->payload_end(e->payload);
  }
  client_process_end(&e->process);
  free(e);
}

void region_registry_destroy(struct region_registry *r) {
  if (!r) {
    return;
  }
  struct region *e = r->head;
  while (e) {
    struct region *next = e->next;
    end_region(e);
    e = next;
  }
  pthread_mutex_destroy(&r->mu);
  free(r->owners);
  free(r);
}

/* owner's record, or NULL; under the lock. */
static struct owner_slots *owner_find(struct region_registry *r, const char *owner) {
  for (size_t i = 0; i < r->nowners; i++) {
    if (strcmp(r->owners[i].owner, owner) == 0) {
      return &r->owners[i];
    }
  }
  return NULL;
}

/* Gives back one of owner's slots (and its record with the last one); under the lock. */
static void owner_release(struct region_registry *r, const char *owner) {
  struct owner_slots *o = owner_find(r, owner);
  if (o && --o->slots == 0) {
    *o = r->owners[--r->nowners];
  }
}

qdp_status region_registry_reserve(struct region_registry *r, const char *owner,
                                   struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  size_t olen;
  QDP_TRY(rc, capability_text_len(&owner, OWNER_MAX, "owner", "owner name", &olen, reterr));
  pthread_mutex_lock(&r->mu);
  struct owner_slots *o = owner_find(r, owner);
  uint32_t mine = o ? o->slots : 0;
  if (r->max_regions && r->slots >= r->max_regions) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "region refused: %" PRIu32
                       " regions are registered or being registered, "
                       "the limit (max_regions %" PRIu32 "; %" PRIu32
                       " of them %s's); unregister one or raise it",
                       r->slots, r->max_regions, mine, owner);
  } else if (r->max_client_regions && mine >= r->max_client_regions) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "region refused: %s has %" PRIu32
                       " regions registered or being registered, its limit (max_client_regions "
                       "%" PRIu32 "; %" PRIu32 " of max_regions %" PRIu32
                       " in use by everyone); unregister one of its regions or raise the limit",
                       owner, mine, r->max_client_regions, r->slots, r->max_regions);
  } else if (!o && r->nowners == r->cap_owners) {
    size_t cap = r->cap_owners ? 2 * r->cap_owners : 8;
    struct owner_slots *grown = realloc(r->owners, cap * sizeof *grown);
    if (!grown) {
      rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for the region records of %zu identities", cap);
    } else {
      r->owners = grown;
      r->cap_owners = cap;
    }
  }
  if (rc == QDP_OK) {
    if (!o) {
      o = &r->owners[r->nowners++];
      memcpy(o->owner, owner, olen + 1);
      o->slots = 0;
    }
    o->slots++;
    r->slots++;
  }
  pthread_mutex_unlock(&r->mu);
out:
  return rc;
}

/* Gives back a reserved slot, and owner's (NULL: a commit given an owner no reserve took). */
static void cancel_slot(struct region_registry *r, const char *owner) {
  pthread_mutex_lock(&r->mu);
  if (r->slots > r->regions) {
    r->slots--;
    if (owner) {
      owner_release(r, owner);
    }
  }
  pthread_mutex_unlock(&r->mu);
}

void region_registry_cancel(struct region_registry *r, const char *owner) {
  cancel_slot(r, owner ? owner : "");
}

static struct region *find(struct region_registry *r, const char *handle) {
  for (struct region *e = r->head; e; e = e->next) {
    if (e->linked && strcmp(e->meta.handle, handle) == 0) {
      return e;
    }
  }
  return NULL;
}

qdp_status region_registry_commit(struct region_registry *r, const char *owner, int pid,
                                  int pidfd, const char *session, uint64_t bytes, void *payload, void (*payload_end)(void *),
                                  char *ret_handle, char *ret_token, struct region_meta *ret_meta,
                                  struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct region *e = NULL;
  size_t olen = OWNER_MAX;
  size_t slen = 0;
  QDP_TRY(rc, capability_text_len(&owner, OWNER_MAX, "owner", "owner name", &olen, reterr));
  QDP_TRY(rc, capability_text_len(&session, SESSION_ID_LEN, "session", "session id", &slen, reterr));
  if (pid < 0) {
    rc = qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "pid",
                       "a region's process id %d is negative: give the registering process's, "
                       "or 0 for none",
                       pid);
    goto out;
  }
  if (!payload) {
    rc = qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                       "commit of a %" PRIu64 " B region given a NULL payload", bytes);
    goto out;
  }
  e = calloc(1, sizeof *e);
  if (!e) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "no host memory for a %zu B region record", sizeof *e);
    goto out;
  }
  QDP_TRY(rc, capability_random_hex(e->token, TOKEN_BYTES, reterr));
  memcpy(e->meta.owner, owner, olen + 1);
  e->meta.bytes = bytes;
  e->meta.pid = pid;
  memcpy(e->meta.session, session, slen + 1);
  client_process_init(&e->process, pid, pidfd);
  e->meta.created_unix_ms = clock_unix_ms();
  e->payload = payload;
  e->payload_end = payload_end;
  e->linked = true;
  pthread_mutex_lock(&r->mu);
  /* A handle must never name two regions: draw again on the (astronomically rare) collision. */
  do {
    e->meta.handle[0] = 'r';
    rc = capability_random_hex(e->meta.handle + 1, HANDLE_BYTES, reterr);
  } while (rc == QDP_OK && find(r, e->meta.handle));
  if (rc == QDP_OK) {
    e->next = r->head;
    r->head = e;
    r->regions++;
    r->bytes += bytes;
    memcpy(ret_handle, e->meta.handle, REGION_HANDLE_LEN);
    memcpy(ret_token, e->token, REGION_TOKEN_LEN);
    if (ret_meta) {
      *ret_meta = e->meta;
    }
    e = NULL;
  } else {
    r->slots--;
    owner_release(r, owner);
  }
  pthread_mutex_unlock(&r->mu);
  if (e) {
    client_process_end(&e->process);
    free(e);
  }
  return rc;
out:
  free(e); /* its process not yet recorded */
  cancel_slot(r, olen < OWNER_MAX ? owner : NULL);
  return rc;
}

static qdp_status not_found(const char *handle, struct qdp_error *reterr) {
  return qdp_error_set(reterr, QDP_ERR_NOT_FOUND, "region",
                       "region '%.*s' not found: unknown handle or wrong token", 64,
                       handle ? handle : "");
}

/* The linked region for (handle, token), or NULL; under the lock. */
static struct region *lookup(struct region_registry *r, const char *handle, const char *token) {
  if (!handle) {
    return NULL;
  }
  struct region *e = find(r, handle);
  /* Compare a token even for an unknown handle, so both refusals cost the same. */
  static const char dummy[REGION_TOKEN_LEN] = "00000000000000000000000000000000";
  bool ok = capability_equal(e ? e->token : dummy, token, REGION_TOKEN_LEN - 1);
  return e && ok ? e : NULL;
}

qdp_status region_registry_get(struct region_registry *r, const char *handle, const char *token,
                               void **ret_payload, struct region_meta *ret_meta,
                               struct qdp_error *reterr) {
  pthread_mutex_lock(&r->mu);
  struct region *e = lookup(r, handle, token);
  if (!e) {
    pthread_mutex_unlock(&r->mu);
    return not_found(handle, reterr);
  }
  e->pins++;
  *ret_payload = e->payload;
  if (ret_meta) {
    *ret_meta = e->meta;
  }
  pthread_mutex_unlock(&r->mu);
  return QDP_OK;
}

/* Takes e off the list; under the lock. */
static void drop(struct region_registry *r, struct region *e) {
  for (struct region **pp = &r->head; *pp; pp = &(*pp)->next) {
    if (*pp == e) {
      *pp = e->next;
      return;
    }
  }
}

/* Takes one pin off e; returns e, off the list, when that was the last hold of an unlinked
 * region and it must end (outside the lock). Under the lock. */
static struct region *unpin(struct region_registry *r, struct region *e) {
  e->pins--;
  if (e->pins || e->linked) {
    return NULL;
  }
  drop(r, e);
  return e;
}

void region_registry_put(struct region_registry *r, void *payload) {
  if (!r || !payload) {
    return;
  }
  struct region *dead = NULL;
  pthread_mutex_lock(&r->mu);
  for (struct region *e = r->head; e; e = e->next) {
    if (e->payload == payload && e->pins) {
      dead = unpin(r, e);
      break;
    }
  }
  pthread_mutex_unlock(&r->mu);
  if (dead) {
    end_region(dead);
  }
}

/* Unlinks e: clients can no longer name it, and its slot and bytes are free at once. It stays on
 * the list while pinned. Under the lock. */
static void unlink_region(struct region_registry *r, struct region *e) {
  e->linked = false;
  r->regions--;
  r->slots--;
  owner_release(r, e->meta.owner);
  r->bytes -= e->meta.bytes;
}

qdp_status region_registry_remove(struct region_registry *r, const char *handle, const char *token,
                                  const char *caller, uint64_t *ret_bytes,
                                  struct qdp_error *reterr) {
  struct region *dead = NULL;
  bool by_handle = caller && (!token || !token[0]);
  pthread_mutex_lock(&r->mu);
  struct region *e = NULL;
  if (by_handle) {
    /* The owner's own region by handle alone; another's reads as unknown. */
    e = handle ? find(r, handle) : NULL;
    if (e && strcmp(e->meta.owner, caller) != 0) {
      e = NULL;
    }
  } else {
    e = lookup(r, handle, token);
  }
  if (!e) {
    pthread_mutex_unlock(&r->mu);
    return not_found(handle, reterr);
  }
  if (caller && strcmp(e->meta.owner, caller) != 0) {
    /* The token proves the caller may read it, not end it for its owner. */
    qdp_status rc = qdp_error_set(reterr, QDP_ERR_PERMISSION_DENIED, "region",
                                  "region '%.64s' was registered by %s, not by %.64s: only the "
                                  "identity that registered a region unregisters it",
                                  e->meta.handle, e->meta.owner, caller);
    pthread_mutex_unlock(&r->mu);
    return rc;
  }
  uint64_t bytes = e->meta.bytes;
  unlink_region(r, e);
  if (!e->pins) {
    drop(r, e);
    dead = e;
  }
  pthread_mutex_unlock(&r->mu);
  if (dead) {
    end_region(dead);
  }
  if (ret_bytes) {
    *ret_bytes = bytes;
  }
  return QDP_OK;
}

/* Unlinks every linked region `ends` says ends, each pinned by the sweep so that its record lasts
 * until swept() has it even if a job's last put lands meanwhile; then reports and unpins them. */
static size_t end_where(struct region_registry *r, bool (*ends)(struct region *e, const void *arg),
                        const void *ends_arg,
                        void (*swept)(const struct region_meta *meta, void *arg), void *arg) {
  struct region *list = NULL;
  size_t n = 0;
  pthread_mutex_lock(&r->mu);
  for (struct region *e = r->head; e; e = e->next) {
    if (e->linked && ends(e, ends_arg)) {
      unlink_region(r, e);
      e->pins++;
      e->swept_next = list;
      list = e;
      n++;
    }
  }
  pthread_mutex_unlock(&r->mu);
  while (list) {
    struct region *e = list;
    list = e->swept_next;
    if (swept) {
      swept(&e->meta, arg);
    }
    pthread_mutex_lock(&r->mu);
    struct region *dead = unpin(r, e);
    pthread_mutex_unlock(&r->mu);
    if (dead) {
      end_region(dead);
    }
  }
  return n;
}

struct gone_test {
  int64_t now;
  uint64_t grace_ms;
};

static bool process_gone(struct region *e, const void *arg) {
  const struct gone_test *t = arg;
  return client_process_gone(&e->process, t->now, t->grace_ms);
}

size_t region_registry_sweep(struct region_registry *r, int64_t now, uint64_t grace_ms,
                             void (*swept)(const struct region_meta *meta, void *arg), void *arg) {
  struct gone_test t = {.now = now, .grace_ms = grace_ms};
  return end_where(r, process_gone, &t, swept, arg);
}

static bool in_session(struct region *e, const void *session) {
  return e->meta.session[0] && strcmp(e->meta.session, session) == 0;
}

size_t region_registry_end_session(struct region_registry *r, const char *session,
                                   void (*swept)(const struct region_meta *meta, void *arg),
                                   void *arg) {
  if (!session || !session[0]) {
    return 0;
  }
  return end_where(r, in_session, session, swept, arg);
}

void region_registry_usage(struct region_registry *r, uint32_t *ret_count, uint64_t *ret_bytes) {
  pthread_mutex_lock(&r->mu);
  if (ret_count) {
    *ret_count = r->regions;
  }
  if (ret_bytes) {
    *ret_bytes = r->bytes;
  }
  pthread_mutex_unlock(&r->mu);
}
