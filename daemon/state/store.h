/* store.h — the state store: every state the daemon holds, by handle, with its capability token,
 * owner, TTL, byte accounting and admission.
 *
 * Admission reserves bytes against the global budget and the owner's budget before anything is
 * allocated (state_store_admit); a reservation becomes a state (state_store_commit) or is given
 * back (state_reservation_cancel). A handle is an opaque id; its token is 128 random bits, compared
 * in constant time; an unknown handle and a wrong token give the same NOT_FOUND. Lookups pin the
 * state's payload (state_store_get / state_store_put): Release and expiry unlink a state at once
 * (its bytes are no longer listed) but the payload is destroyed only when the last pin is put, so
 * a Fetch in flight never reads freed memory.
 *
 * Leases (zero-copy views): a client that opened a state's shards in its own address space holds a
 * lease on it, (lease id, client, pid or 0, opened at). Release and expiry unlink a leased state
 * like any other (its handle answers NOT_FOUND from then on: no new pins, views or leases), but
 * the payload, and with it the device memory the client's views point to, is destroyed only when
 * the last pin is put and the last lease is closed (state_store_lease_close, by the lease id,
 * with the handle and token, which keep working for that) or swept: a lease whose client process
 * has been gone for lease_grace_ms (capability.h: by its pidfd, else its pid) ends at the next
 * sweep. A lease with no process known (a TCP client) ends only when closed. At most
 * STATE_LEASES_MAX leases per state.
 *
 * A write lease is exclusive: it opens only on a state with no other lease and no pin but the
 * opener's, and while it is open no other lease opens and state_store_get (every read of the
 * amplitudes) answers FAILED_PRECONDITION naming its holder; the record (state_store_get_record)
 * stays readable. It ends like any lease, and the state is then read again as written.
 *
 * Thread-safe: every function may be called from any thread (one internal mutex; payload destroy
 * callbacks run outside it). The store owns payloads once committed and destroys them through the
 * callback given at commit.
 */
#ifndef QDP_STATE_STORE_H
#define QDP_STATE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "state/capability.h"

#define STATE_HANDLE_LEN 24 /* "s" + hex digits, NUL included */
#define STATE_TOKEN_LEN 33  /* 32 hex digits + NUL */
/* Open leases one state may have: a client opens one per Describe/Encode with views, so more than
 * this is a client that never closes them. */
#define STATE_LEASES_MAX 256

struct state_store_limits {
  uint64_t budget_bytes;        /* all states together; 0 = unlimited */
  uint64_t client_budget_bytes; /* per owner; 0 = unlimited */
  uint32_t max_states;          /* 0 = unlimited */
  uint32_t max_client_states;   /* 0 = unlimited */
  uint64_t default_ttl_ms;      /* used when a request asks for 0; 0 = no expiry */
  uint64_t max_ttl_ms;          /* cap on any TTL; 0 = no cap */
  uint64_t lease_grace_ms;      /* a lease whose client pid is gone this long ends */
};

/* What the store keeps beside the payload; returned by get and list. */
struct state_meta {
  char handle[STATE_HANDLE_LEN];
  char owner[64];
  char label[128];
  uint64_t bytes;
  int64_t created_unix_ms;
  int64_t expires_unix_ms; /* 0 = never */
  uint64_t ttl_ms;         /* the lifetime given at commit (0 = never) */
  bool ttl_capped;         /* the ttl asked for was above max_ttl_ms, which it got instead */
  uint32_t leases;         /* open leases (zero-copy views held by clients) */
  /* The open write lease (0: none), its client and pid. */
  uint64_t writer_lease;
  char writer[64];
  int writer_pid;
  char session[SESSION_ID_LEN]; /* the session it ends with (sessions.h); "": none */
};

struct state_store;
struct state_reservation;

qdp_status state_store_create(const struct state_store_limits *lim, struct state_store **ret_store,
                              struct qdp_error *reterr);
/* Destroys every state (waits for nothing: no pin may be held). NULL-safe. */
void state_store_destroy(struct state_store *s);

/* RESOURCE_EXHAUSTED naming the budget, bytes in use, bytes asked and the owner when a limit would
 * be passed (need_bytes = bytes asked, free_bytes = what the budget has left). A budget admits
 * exactly up to itself: in use + asked == budget fits. max_states and max_client_states count
 * outstanding reservations as well as states. owner may be NULL (""); over 63 B is
 * INVALID_ARGUMENT. */
qdp_status state_store_admit(struct state_store *s, const char *owner, uint64_t bytes,
                             struct state_reservation **ret_res, struct qdp_error *reterr);
void state_reservation_cancel(struct state_reservation *r); /* NULL-safe */
/* The state r becomes ends with session `session` (NULL or "": none; longer than
 * SESSION_ID_LEN - 1 B is INVALID_ARGUMENT): state_store_end_session releases it. */
qdp_status state_reservation_join(struct state_reservation *r, const char *session,
                                  struct qdp_error *reterr);

/* Turns the reservation into a state holding `payload` (destroyed through payload_destroy when the
 * state goes). ttl_ms 0 = the default TTL; capped at max_ttl_ms (a state that would never expire
 * gets max_ttl_ms too; the record says when a ttl asked for was capped). Consumes r in every
 * case; on failure payload is not taken and the bytes go back to the budgets.
 * ret_handle/ret_token: STATE_HANDLE_LEN / STATE_TOKEN_LEN bytes. payload must be non-NULL and
 * not held already (INTERNAL); label (NULL = "") at most 127 B (INVALID_ARGUMENT); SYSTEM when
 * getrandom(2) fails. */
qdp_status state_store_commit(struct state_store *s, struct state_reservation *r, void *payload,
                              void (*payload_destroy)(void *), uint64_t ttl_ms, const char *label,
                              char *ret_handle, char *ret_token, struct qdp_error *reterr);
/* The same, the new state returned pinned (state_store_put the payload) with its record in
 * *ret_meta (the handle in ret_meta->handle): a Release with the new token or an expiry may land
 * as soon as the state is linked, and must not free the payload while the caller still describes
 * it. */
qdp_status state_store_commit_pinned(struct state_store *s, struct state_reservation *r,
                                     void *payload, void (*payload_destroy)(void *),
                                     uint64_t ttl_ms, const char *label,
                                     struct state_meta *ret_meta, char *ret_token,
                                     struct qdp_error *reterr);

/* Pins the state to read its amplitudes and returns its payload and metadata; NOT_FOUND for
 * unknown handle or wrong token. A state past its expiry is NOT_FOUND here even before
 * state_store_expire unlinks it. FAILED_PRECONDITION (field "handle") while a write lease is
 * open, naming its holder. */
qdp_status state_store_get(struct state_store *s, const char *handle, const char *token,
                           void **ret_payload, struct state_meta *ret_meta,
                           struct qdp_error *reterr);
/* The same pin for the state's record and layout only (Describe, and the pin views are opened
 * under): not refused while a write lease is open. */
qdp_status state_store_get_record(struct state_store *s, const char *handle, const char *token,
                                  void **ret_payload, struct state_meta *ret_meta,
                                  struct qdp_error *reterr);
/* Unpins a payload returned by state_store_get. */
void state_store_put(struct state_store *s, void *payload);

/* Unlinks the state now (bytes returned to the budgets); the payload goes with its last pin.
 * A state past its expiry but not yet swept can still be released. */
qdp_status state_store_release(struct state_store *s, const char *handle, const char *token,
                               uint64_t *ret_freed_bytes, struct qdp_error *reterr);

/* The same for the owner of the state, without its token (a client that lost a token can still
 * free its memory): NOT_FOUND when handle is unknown or another owner's. */
qdp_status state_store_release_owned(struct state_store *s, const char *handle, const char *owner,
                                     uint64_t *ret_freed_bytes, struct qdp_error *reterr);

/* Calls fn for every live state (under the store's lock: fn must not call the store). */
void state_store_foreach(struct state_store *s,
                         void (*fn)(const struct state_meta *meta, void *payload, void *arg),
                         void *arg);

/* Releases every state whose expiry is <= now_unix_ms; returns how many. */
size_t state_store_expire(struct state_store *s, int64_t now_unix_ms);

/* Releases every live state of `session` (NULL or "": none) as state_store_release would;
 * returns how many, their bytes in *ret_bytes (may be NULL). */
size_t state_store_end_session(struct state_store *s, const char *session, uint64_t *ret_bytes);

/* Opens a lease on the live state whose payload the caller pinned (state_store_get_record) for
 * `client` (at most 63 B; NULL = "") in process `pid` (0 = unknown) named by `pidfd` (borrowed,
 * duplicated; -1 = none: tested by pid), a write lease when `write`.
 * *ret_lease_id is never 0. NOT_FOUND when the state was released or expired meanwhile;
 * INVALID_ARGUMENT for a negative pid or a long client name; RESOURCE_EXHAUSTED past
 * STATE_LEASES_MAX; FAILED_PRECONDITION (field "handle") while a write lease is open, and for a
 * write lease while other leases are open or other calls hold pins (the numbers in the
 * message). */
qdp_status state_store_lease_open(struct state_store *s, void *payload, const char *client, int pid,
                                  int pidfd, bool write, uint64_t *ret_lease_id, struct qdp_error *reterr);

/* Closes lease `lease_id` of the state (handle, token), live or released. *ret_freed_bytes
 * (may be NULL) gets the state's bytes when this close destroyed its payload (it was released and
 * this was its last lease and pin), else 0. NOT_FOUND for an unknown lease, handle or token, all
 * alike. */
qdp_status state_store_lease_close(struct state_store *s, const char *handle, const char *token,
                                   uint64_t lease_id, uint64_t *ret_freed_bytes,
                                   struct qdp_error *reterr);

/* Ends every lease whose client process has been gone for lease_grace_ms as of now_unix_ms (the
 * first sweep that finds a pid gone starts its grace), destroying released states left with no
 * lease and no pin; returns how many leases ended. */
size_t state_store_sweep_leases(struct state_store *s, int64_t now_unix_ms);

/* Bytes held (committed + reserved) and live states. */
void state_store_usage(struct state_store *s, uint64_t *ret_bytes, uint32_t *ret_states,
                       uint32_t *ret_leases);

#endif /* QDP_STATE_STORE_H */
