/* tickets.c — the ticket table: a list under one mutex (at most a few hundred entries, each
 * looked up once). */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state/capability.h"
#include "state/tickets.h"

#define OWNER_MAX 64
#define TICKET_BYTES 16 /* 128 bits */

struct ticket {
  struct ticket *next;
  char ticket[FD_TICKET_LEN];
  char owner[OWNER_MAX];
  enum fd_access access;
  int fd;
  int64_t added_ms;
};

struct fd_tickets {
  pthread_mutex_t mu;
  uint32_t max_total, max_per_owner, count;
  uint64_t ttl_ms;
  struct ticket *head;
};

qdp_status fd_tickets_create(uint32_t max_total, uint32_t max_per_owner, uint64_t ttl_ms,
                             struct fd_tickets **ret, struct qdp_error *reterr) {
  struct fd_tickets *t = calloc(1, sizeof *t);
  if (!t) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no memory for the descriptor tickets' record (%zu B)", sizeof *t);
  }
  int err = pthread_mutex_init(&t->mu, NULL);
  if (err) {
    free(t);
    return qdp_error_set_at(reterr, QDP_ERR_SYSTEM, -1, err,
                            "the descriptor tickets could not create their mutex: %s",
                            strerror(err));
  }
  t->max_total = max_total;
  t->max_per_owner = max_per_owner;
  t->ttl_ms = ttl_ms;
  *ret = t;
  return QDP_OK;
}

static void drop(struct ticket *e) {
  close(e->fd);
  free(e);
}

void fd_tickets_destroy(struct fd_tickets *t) {
  if (!t) {
    return;
  }
  while (t->head) {
    struct ticket *e = t->head;
    t->head = e->next;
    drop(e);
  }
  pthread_mutex_destroy(&t->mu);
  free(t);
}

static bool lapsed(const struct fd_tickets *t, const struct ticket *e, int64_t now_ms) {
  return t->ttl_ms && now_ms - e->added_ms >= (int64_t)t->ttl_ms;
}

qdp_status fd_tickets_add(struct fd_tickets *t, const char *owner, int fd, enum fd_access access,
                          int64_t now_ms, char *ret_ticket, struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  owner = owner ? owner : "";
  if (strlen(owner) >= OWNER_MAX) {
    close(fd);
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "owner", "an owner is at most %d bytes",
                         OWNER_MAX - 1);
  }
  struct ticket *e = calloc(1, sizeof *e);
  if (!e) {
    close(fd);
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no memory to hold a handed-over descriptor (%zu B)", sizeof *e);
  }
  e->ticket[0] = 't';
  rc = capability_random_hex(e->ticket + 1, TICKET_BYTES, reterr);
  if (rc != QDP_OK) {
    close(fd);
    free(e);
    return rc;
  }
  snprintf(e->owner, sizeof e->owner, "%s", owner);
  e->access = access;
  e->fd = fd;
  e->added_ms = now_ms;
  pthread_mutex_lock(&t->mu);
  uint32_t mine = 0;
  for (const struct ticket *x = t->head; x; x = x->next) {
    mine += strcmp(x->owner, owner) == 0;
  }
  if (t->max_per_owner && mine >= t->max_per_owner) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "%s holds %" PRIu32
                       " handed-over descriptors that no call has named yet, "
                       "the most one caller may (they lapse after %" PRIu64 " s unused)",
                       owner, mine, t->ttl_ms / 1000);
  } else if (t->max_total && t->count >= t->max_total) {
    rc = qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                       "the daemon holds %" PRIu32
                       " handed-over descriptors, its limit; retry "
                       "once some are used or lapse",
                       t->count);
  } else {
    e->next = t->head;
    t->head = e;
    t->count++;
    memcpy(ret_ticket, e->ticket, FD_TICKET_LEN);
    e = NULL;
  }
  pthread_mutex_unlock(&t->mu);
  if (e) {
    drop(e);
  }
  return rc;
}

qdp_status fd_tickets_take(struct fd_tickets *t, const char *owner, const char *ticket,
                           enum fd_access access, int64_t now_ms, const char *field, int *ret_fd,
                           struct qdp_error *reterr) {
  qdp_status rc = QDP_OK;
  struct ticket *found = NULL;
  pthread_mutex_lock(&t->mu);
  for (struct ticket **p = &t->head; *p; p = &(*p)->next) {
    struct ticket *e = *p;
    if (capability_equal(e->ticket, ticket, FD_TICKET_LEN - 1)) {
      if (strcmp(e->owner, owner ? owner : "") == 0 && !lapsed(t, e, now_ms)) {
        *p = e->next;
        t->count--;
        found = e;
      }
      break;
    }
  }
  pthread_mutex_unlock(&t->mu);
  if (!found) {
    return qdp_error_set(reterr, QDP_ERR_NOT_FOUND, field,
                         "%s names no descriptor handed over by this caller (tickets are used "
                         "once and lapse after %" PRIu64 " s)",
                         field, t->ttl_ms / 1000);
  }
  if (found->access != access) {
    rc = qdp_error_set(reterr, QDP_ERR_PERMISSION_DENIED, field,
                       "%s names a descriptor handed over for %s, but this call %s it", field,
                       found->access == FD_ACCESS_READ ? "reading" : "writing",
                       access == FD_ACCESS_READ ? "reads" : "writes");
    drop(found);
    return rc;
  }
  *ret_fd = found->fd;
  free(found);
  return QDP_OK;
}

uint32_t fd_tickets_expire(struct fd_tickets *t, int64_t now_ms) {
  struct ticket *gone = NULL;
  uint32_t n = 0;
  pthread_mutex_lock(&t->mu);
  for (struct ticket **p = &t->head; *p;) {
    struct ticket *e = *p;
    if (lapsed(t, e, now_ms)) {
      *p = e->next;
      e->next = gone;
      gone = e;
      t->count--;
      n++;
    } else {
      p = &e->next;
    }
  }
  pthread_mutex_unlock(&t->mu);
  while (gone) {
    struct ticket *e = gone;
    gone = e->next;
    drop(e);
  }
  return n;
}

uint32_t fd_tickets_count(struct fd_tickets *t) {
  pthread_mutex_lock(&t->mu);
  uint32_t n = t->count;
  pthread_mutex_unlock(&t->mu);
  return n;
}
