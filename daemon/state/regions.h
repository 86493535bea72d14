/* regions.h — the region registry: shared-memory input regions a client registered once, by
 * handle, with a capability token, an owner and a size, for every later job to read.
 *
 * The registry holds an opaque payload per region (the daemon's mapping, pinned or not) and the
 * callback that ends it. Like the state store: a handle is an opaque id, its token 128 random bits
 * compared in constant time, and an unknown handle and a wrong token give the same NOT_FOUND.
 * Lookups pin the payload (region_registry_get / region_registry_put): Unregister unlinks the
 * region at once (it no longer counts) but the payload ends only with its last pin, so a job
 * reading the region never reads an unmapped page.
 *
 * Registration is two steps so the limits are checked before anything is mapped: reserve a slot
 * (RESOURCE_EXHAUSTED past max_regions, or past max_client_regions for the registering
 * identity), then commit it with the payload or cancel it. max_regions is shared by every
 * identity; max_client_regions keeps one identity from taking all of it.
 *
 * A region is its owner's: only the identity that registered it unregisters it (the token alone
 * is not enough; it lets others read the region), and the owner may also unregister it by handle
 * alone, so a lost token strands no region.
 *
 * A region records the process that registered it, as the kernel named it (its pidfd where the
 * listener took one: capability.h), and the session it was made in, if any (sessions.h). A client
 * that dies without unregistering would otherwise keep its regions (and, on GPUs, their
 * page-locked memory) until the daemon stops: region_registry_sweep unregisters those whose
 * process has been gone for a grace period, as the state store ends such a client's leases, and
 * region_registry_end_session those of a session that ended. A region with no process known (a
 * TCP caller) and no session ends only when unregistered.
 *
 * Thread-safe: one internal mutex; payload callbacks run outside it.
 */
#ifndef QDP_STATE_REGIONS_H
#define QDP_STATE_REGIONS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "state/capability.h"

#define REGION_HANDLE_LEN 24 /* "r" + 16 hex digits + NUL */
#define REGION_TOKEN_LEN 33  /* 32 hex digits + NUL */

struct region_meta {
  char handle[REGION_HANDLE_LEN];
  char owner[64];
  uint64_t bytes;
  int64_t created_unix_ms;
  int pid; /* the registering process, in the daemon's pid namespace; 0: never swept */
  char session[SESSION_ID_LEN]; /* the session it ends with; "": none */
};

struct region_registry;

/* max_regions, max_client_regions: 0 = unlimited. */
qdp_status region_registry_create(uint32_t max_regions, uint32_t max_client_regions,
                                  struct region_registry **ret, struct qdp_error *reterr);
/* Ends every payload, pinned or not (no job may be running). NULL-safe. */
void region_registry_destroy(struct region_registry *r);

/* Takes one of max_regions slots and one of owner's max_client_regions (owner NULL = "", at most
 * 63 B: INVALID_ARGUMENT); RESOURCE_EXHAUSTED naming the count and the limit (and the owner). */
qdp_status region_registry_reserve(struct region_registry *r, const char *owner,
                                   struct qdp_error *reterr);
/* Gives back a slot that reserve took for owner and that was not committed. */
void region_registry_cancel(struct region_registry *r, const char *owner);

/* Turns owner's reserved slot (reserve's owner) into a region of process pid (0: never swept),
 * named by pidfd (borrowed, duplicated; -1: tested by pid), in session `session` (NULL or "":
 * none; at most SESSION_ID_LEN - 1 B) holding payload (ended through payload_end when the region goes). Consumes the slot in every
 * case; on failure the payload is not taken. owner (NULL = "") at most 63 B, pid not negative
 * (INVALID_ARGUMENT); INTERNAL for a NULL payload; SYSTEM when getrandom(2) fails. ret_handle /
 * ret_token: REGION_HANDLE_LEN / REGION_TOKEN_LEN bytes; ret_meta may be NULL. */
qdp_status region_registry_commit(struct region_registry *r, const char *owner, int pid,
                                  int pidfd, const char *session, uint64_t bytes, void *payload, void (*payload_end)(void *),
                                  char *ret_handle, char *ret_token, struct region_meta *ret_meta,
                                  struct qdp_error *reterr);

/* Pins the region and returns its payload; NOT_FOUND for an unknown handle or a wrong token. */
qdp_status region_registry_get(struct region_registry *r, const char *handle, const char *token,
                               void **ret_payload, struct region_meta *ret_meta,
                               struct qdp_error *reterr);
/* Unpins a payload from region_registry_get; ends it when it was the last pin of an unlinked
 * region. */
void region_registry_put(struct region_registry *r, void *payload);

/* Unlinks the region now (its slot is free at once); the payload ends with its last pin.
 * caller: the identity asking; NULL for the daemon itself (any region, by handle and token).
 * NOT_FOUND for an unknown handle or a wrong token; PERMISSION_DENIED, naming the owner, when
 * the token is right but caller is not the region's owner. An empty (or NULL) token unregisters
 * caller's own region by handle alone; another's is NOT_FOUND then, as an unknown one. */
qdp_status region_registry_remove(struct region_registry *r, const char *handle, const char *token,
                                  const char *caller, uint64_t *ret_bytes,
                                  struct qdp_error *reterr);

/* Unlinks every region whose process has been gone for grace_ms as of now_unix_ms
 * (client_process_gone: the first sweep that finds it gone starts its grace), as
 * region_registry_remove would: its slot and bytes are free at once, its payload ends with its
 * last pin, so a job still reading or writing it finishes first. swept (may be NULL) gets each
 * one's record, outside the lock and before its payload ends. Returns how many. Blocks while
 * payloads end (unpinning, unmapping): a worker's call. */
size_t region_registry_sweep(struct region_registry *r, int64_t now_unix_ms, uint64_t grace_ms,
                             void (*swept)(const struct region_meta *meta, void *arg), void *arg);

/* Unlinks every region of `session` as region_registry_sweep does (swept the same); returns how
 * many. A worker's call. */
size_t region_registry_end_session(struct region_registry *r, const char *session,
                                   void (*swept)(const struct region_meta *meta, void *arg),
                                   void *arg);

/* Linked regions and their bytes together. */
void region_registry_usage(struct region_registry *r, uint32_t *ret_count, uint64_t *ret_bytes);

#endif /* QDP_STATE_REGIONS_H */
