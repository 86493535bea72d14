/* store_internal.h — what the state store's files share (store.h is its contract): the records,
 * the chained hash tables and the steps the files call in each other. Every function here runs
 * under the store's mutex unless it says otherwise.
 */
#ifndef QDP_STATE_STORE_INTERNAL_H
#define QDP_STATE_STORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
  struct client_process process; /* the viewing process */
  int64_t opened_unix_ms;
  bool write;
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
  char session[SESSION_ID_LEN]; /* what the state will end with; "": none */
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

#define CONTAINER(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* store.c: the tables. */
uint64_t store_hash_str(const char *s);
uint64_t store_hash_ptr(const void *p);
void store_ht_insert(struct htable *t, struct hnode *n, uint64_t hash);
void store_ht_remove(struct htable *t, struct hnode *n);
struct entry *store_find_handle(struct state_store *s, const char *handle);
struct entry *store_find_payload(struct state_store *s, const void *payload);
struct owner *store_find_owner(struct state_store *s, const char *name);
/* Unlinks a live entry; returns it when it should be destroyed now (no pin, no lease). */
struct entry *store_unlink(struct state_store *s, struct entry *e);
/* Destroys a list built under the lock (dead_next), its payloads with their callbacks: call it
 * without the lock. */
void store_destroy_list(struct entry *dead);
/* FAILED_PRECONDITION naming e's write lease and its holder, for `what` that it refuses. */
qdp_status store_write_leased(const struct entry *e, const char *what, struct qdp_error *reterr);
/* Whether e is an entry and token its token. A token is compared even without an entry (an
 * unknown handle or lease), so that every refusal costs the same time. */
bool store_token_ok(const struct entry *e, const char *token);

/* store_admit.c: gives back what a reservation or a state held. */
void store_unaccount(struct state_store *s, struct owner *o, uint64_t bytes);

#endif /* QDP_STATE_STORE_INTERNAL_H */
