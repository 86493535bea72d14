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
 * Registration is two steps so the limit is checked before anything is mapped: reserve a slot
 * (RESOURCE_EXHAUSTED past max_regions), then commit it with the payload or cancel it.
 *
 * Thread-safe: one internal mutex; payload callbacks run outside it.
 */
#ifndef QDP_STATE_REGIONS_H
#define QDP_STATE_REGIONS_H

#include <stdint.h>

#include "error.h"

#define REGION_HANDLE_LEN 24 /* "r" + 16 hex digits + NUL */
#define REGION_TOKEN_LEN 33  /* 32 hex digits + NUL */

struct region_meta {
  char handle[REGION_HANDLE_LEN];
  char owner[64];
  uint64_t bytes;
  int64_t created_unix_ms;
};

struct region_registry;

/* max_regions 0 = unlimited. */
qdp_status region_registry_create(uint32_t max_regions, struct region_registry **ret,
                                  struct qdp_error *reterr);
/* Ends every payload, pinned or not (no job may be running). NULL-safe. */
void region_registry_destroy(struct region_registry *r);

/* Takes one of max_regions slots; RESOURCE_EXHAUSTED naming the count and the limit. */
qdp_status region_registry_reserve(struct region_registry *r, struct qdp_error *reterr);
/* Gives back a slot taken by reserve and not committed. */
void region_registry_cancel(struct region_registry *r);

/* Turns a reserved slot into a region holding payload (ended through payload_end when the region
 * goes). Consumes the slot in every case; on failure the payload is not taken. owner (NULL = "")
 * at most 63 B (INVALID_ARGUMENT); INTERNAL for a NULL payload; SYSTEM when getrandom(2) fails.
 * ret_handle / ret_token: REGION_HANDLE_LEN / REGION_TOKEN_LEN bytes; ret_meta may be NULL. */
qdp_status region_registry_commit(struct region_registry *r, const char *owner, uint64_t bytes,
                                  void *payload, void (*payload_end)(void *), char *ret_handle,
                                  char *ret_token, struct region_meta *ret_meta,
                                  struct qdp_error *reterr);

/* Pins the region and returns its payload; NOT_FOUND for an unknown handle or a wrong token. */
qdp_status region_registry_get(struct region_registry *r, const char *handle, const char *token,
                               void **ret_payload, struct region_meta *ret_meta,
                               struct qdp_error *reterr);
/* Unpins a payload from region_registry_get; ends it when it was the last pin of an unlinked
 * region. */
void region_registry_put(struct region_registry *r, void *payload);

/* Unlinks the region now (its slot is free at once); the payload ends with its last pin. */
qdp_status region_registry_remove(struct region_registry *r, const char *handle, const char *token,
                                  uint64_t *ret_bytes, struct qdp_error *reterr);

/* Linked regions and their bytes together. */
void region_registry_usage(struct region_registry *r, uint32_t *ret_count, uint64_t *ret_bytes);

#endif /* QDP_STATE_REGIONS_H */
