/* Upload admission: the host memory that uploads in flight hold, counted against upload_budget
 * for all of them and client_upload_budget per identity. Receiving the values (the stream, its
 * idle timeout) is the transport's; it asks here before each buffer grows and gives the bytes
 * back when the upload ends. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdp_size.h"
#include "internal.h"

/* What one identity's uploads in flight hold; listed only while it holds something. */
struct job_upload_owner {
  struct job_upload_owner *next;
  char owner[64];
  uint64_t bytes;
};

void job_uploads_init(struct job_pipeline *jp) {
  pthread_mutex_init(&jp->uploads_mu, NULL);
  atomic_init(&jp->upload_budget, 0);
  atomic_init(&jp->client_upload_budget, 0);
}

void job_uploads_end(struct job_pipeline *jp) {
  /* No upload is in flight any more; an owner left means a transport that never gave back. */
  while (jp->upload_owners) {
    struct job_upload_owner *o = jp->upload_owners;
    jp->upload_owners = o->next;
    free(o);
  }
  pthread_mutex_destroy(&jp->uploads_mu);
}

void job_set_upload_budgets(struct job_pipeline *jp, uint64_t upload_budget,
                            uint64_t client_upload_budget) {
  atomic_store(&jp->upload_budget, upload_budget);
  atomic_store(&jp->client_upload_budget, client_upload_budget);
}

/* Under uploads_mu. */
static struct job_upload_owner **owner_slot(struct job_pipeline *jp, const char *owner) {
  struct job_upload_owner **p = &jp->upload_owners;
  while (*p && strcmp((*p)->owner, owner) != 0) {
    p = &(*p)->next;
  }
  return p;
}

/* RESOURCE_EXHAUSTED naming the budget that `more` would pass; QDP_OK when both fit. */
static qdp_status check_budgets(uint64_t held, uint64_t budget, const char *owner,
                                uint64_t mine_held, uint64_t mine, uint64_t more,
                                struct qdp_error *err) {
  qdp_status rc = QDP_OK;
  /* Compared without forming held + more, which may overflow. */
  if (held > budget || more > budget - held) {
    rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, "data",
                       "uploads in flight hold %s of upload_budget = %s and this one needs %s "
                       "more; retry later",
                       QDP_SIZE_STR(held), QDP_SIZE_STR(budget), QDP_SIZE_STR(more));
    if (err) {
      err->free_bytes = held < budget ? budget - held : 0;
    }
  } else if (mine_held > mine || more > mine - mine_held) {
    rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, "data",
                       "uploads of %s in flight hold %s of client_upload_budget = %s and this "
                       "one needs %s more; finish or cancel one first",
                       owner, QDP_SIZE_STR(mine_held), QDP_SIZE_STR(mine), QDP_SIZE_STR(more));
    if (err) {
      err->free_bytes = mine_held < mine ? mine - mine_held : 0;
    }
  }
  if (rc != QDP_OK && err) {
    err->need_bytes = more;
  }
  return rc;
}

qdp_status job_upload_admit(struct job_pipeline *jp, const char *owner, uint64_t bytes,
                            struct qdp_error *err) {
  size_t olen = strlen(owner);
  if (olen >= sizeof((struct job_upload_owner *)0)->owner) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "owner",
                         "an identity of %zu B is too long to count uploads under; at most %zu B",
                         olen, sizeof((struct job_upload_owner *)0)->owner - 1);
  }
  uint64_t budget = atomic_load(&jp->upload_budget);
  uint64_t mine = atomic_load(&jp->client_upload_budget);
  pthread_mutex_lock(&jp->uploads_mu);
  struct job_upload_owner **slot = owner_slot(jp, owner);
  uint64_t mine_held = *slot ? (*slot)->bytes : 0;
  qdp_status rc = check_budgets(jp->upload_held, budget, owner, mine_held, mine, bytes, err);
  if (rc == QDP_OK && !*slot) {
    *slot = calloc(1, sizeof **slot);
    if (!*slot) {
      rc = qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, "data",
                         "no host memory (%zu B) to count the uploads of %s", sizeof **slot, owner);
    } else {
      memcpy((*slot)->owner, owner, olen + 1);
    }
  }
  if (rc == QDP_OK) {
    (*slot)->bytes += bytes;
    jp->upload_held += bytes;
  }
  pthread_mutex_unlock(&jp->uploads_mu);
  return rc;
}

void job_upload_release(struct job_pipeline *jp, const char *owner, uint64_t bytes) {
  if (bytes == 0) {
    return;
  }
  pthread_mutex_lock(&jp->uploads_mu);
  struct job_upload_owner **slot = owner_slot(jp, owner);
  struct job_upload_owner *o = *slot;
  if (o) {
    uint64_t back = bytes < o->bytes ? bytes : o->bytes;
    o->bytes -= back;
    jp->upload_held -= back < jp->upload_held ? back : jp->upload_held;
    if (o->bytes == 0) {
      /* An identity with nothing in flight is forgotten. */
      *slot = o->next;
      free(o);
    }
  }
  pthread_mutex_unlock(&jp->uploads_mu);
}

void job_upload_usage(struct job_pipeline *jp, const char *owner, uint64_t *ret_all,
                      uint64_t *ret_owner) {
  pthread_mutex_lock(&jp->uploads_mu);
  *ret_all = jp->upload_held;
  if (ret_owner) {
    struct job_upload_owner *o = owner ? *owner_slot(jp, owner) : NULL;
    *ret_owner = o ? o->bytes : 0;
  }
  pthread_mutex_unlock(&jp->uploads_mu);
}
