/* The device-collective policy (collectives.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives.h"
#include "log.h"
#include "qdp_limits.h"

void collectives_local_group(const int *ordinals, size_t n, bool host_only,
                             struct collectives_group *ret) {
  ret->comm = NULL;
  if (n < 2) {
    snprintf(ret->desc, sizeof ret->desc, "none (one GPU)");
    return;
  }
  if (host_only) {
    snprintf(ret->desc, sizeof ret->desc, "host (configured)");
    return;
  }
  /* Made once (it takes most of a second) and reused by every job. */
  struct qdp_error err = QDP_ERROR_INIT;
  if (device_comm_create_local(ordinals, n, &ret->comm, &err) != QDP_OK) {
    ret->comm = NULL;
    snprintf(ret->desc, sizeof ret->desc, "host (%.170s)", err.msg);
    return;
  }
  snprintf(ret->desc, sizeof ret->desc, "nccl (NCCL %d, %zu GPUs)", device_comm_nccl_version(), n);
}

/* Rank 0 makes the id, every rank joins with all of its GPUs; every step is agreed, so the ranks
 * end with the group or without it together. */
static qdp_status join_world_group(struct transport *t, int size, int first_member,
                                   const int *ordinals, size_t n, uint64_t timeout_ms,
                                   struct device_comm **ret, struct qdp_error *agreed) {
  struct qdp_error err = QDP_ERROR_INIT;
  unsigned char id[DEVICE_COMM_ID_BYTES] = {0};
  qdp_status local = transport_rank(t) == 0 ? device_comm_unique_id(id, &err) : QDP_OK;
  qdp_status rc = transport_agree(t, local, &err, agreed);
  if (rc == QDP_OK) {
    rc = transport_bcast(t, id, sizeof id, 0, agreed);
  }
  if (rc == QDP_OK) {
    local = device_comm_create_members(id, size, first_member, ordinals, n, timeout_ms, ret, &err);
    rc = transport_agree(t, local, &err, agreed);
  }
  return rc;
}

void collectives_world_group(struct transport *t, bool all_gpus, bool wanted, int size,
                             int first_member, const int *ordinals, size_t n, uint64_t timeout_ms,
                             struct collectives_group *ret) {
  struct qdp_error err = QDP_ERROR_INIT;
  ret->comm = NULL;
  bool gpus = all_gpus && size <= QDP_DEVICES_MAX;
  uint64_t want = wanted && gpus, all_want = 0;
  if (transport_allreduce_u64(t, &want, 1, TRANSPORT_MIN, &all_want, &err) != QDP_OK) {
    snprintf(ret->desc, sizeof ret->desc, "mpi (%.180s)", err.msg);
    return;
  }
  if (!all_want) {
    snprintf(
        ret->desc, sizeof ret->desc, "mpi (%s)",
        !gpus ? "not every device of the world is a GPU" : "host_collectives is set on some rank");
    return;
  }
  if (join_world_group(t, size, first_member, ordinals, n, timeout_ms, &ret->comm, &err) !=
      QDP_OK) {
    device_comm_destroy(ret->comm);
    ret->comm = NULL;
    snprintf(ret->desc, sizeof ret->desc, "mpi (NCCL across ranks: %.160s)", err.msg);
    log_warning("transport", "device collectives across ranks run on the host: %s", err.msg);
    return;
  }
  snprintf(ret->desc, sizeof ret->desc, "nccl (NCCL %d, %d ranks, %d GPUs)",
           device_comm_nccl_version(), transport_size(t), size);
}

void collectives_group_aborted(struct collectives_group *g, int rank) {
  snprintf(g->desc, sizeof g->desc, "mpi (the NCCL group across ranks was aborted on rank %d)",
           rank);
}

void collectives_group_fini(struct collectives_group *g) {
  device_comm_destroy(g->comm);
  g->comm = NULL;
}

bool collectives_job_fits(const struct device_comm *c, const size_t *members, size_t n,
                          size_t local) {
  /* Members in a 64-bit set. */
  _Static_assert(QDP_DEVICES_MAX <= 64, "a job's members are a 64-bit set");
  if (!c || n < 2 || n > QDP_DEVICES_MAX || n != (size_t)device_comm_size(c) ||
      local != device_comm_local_members(c)) {
    return false;
  }
  uint64_t seen = 0;
  for (size_t i = 0; i < n; i++) {
    if (members[i] >= QDP_DEVICES_MAX || (seen >> members[i] & 1)) {
      return false;
    }
    seen |= UINT64_C(1) << members[i];
  }
  return true;
}
