/* Device collectives over NCCL (device_comm.h). */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "device_comm.h"

struct device_comm {
  size_t nlocal;
  int size;
  int first_member;     /* the group member number of local member 0 */
  int ordinals[64];     /* of the local members */
  ncclComm_t comms[64]; /* one per local member */
};

static qdp_status nccl_failed(const struct device_comm *c, size_t local, ncclResult_t r,
                              const char *call, struct qdp_error *reterr) {
  int ordinal = c && local < c->nlocal ? c->ordinals[local] : -1;
  const char *last = c && local < c->nlocal ? ncclGetLastError(c->comms[local]) : NULL;
  return qdp_error_set_at(reterr, QDP_ERR_NCCL, ordinal, (int)r, "cuda:%d: %s failed: %s%s%s",
                          ordinal, call, ncclGetErrorString(r), last && *last ? ": " : "",
                          last ? last : "");
}

qdp_status device_comm_create_local(const int *ordinals, size_t n, struct device_comm **ret,
                                    struct qdp_error *reterr) {
  if (n == 0 || n > 64) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "a device group holds 1 to 64 GPUs, not %zu", n);
  }
  struct device_comm *c = calloc(1, sizeof *c);
  if (!c) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate a device group");
  }
  c->nlocal = n;
  c->size = (int)n;
  memcpy(c->ordinals, ordinals, n * sizeof *ordinals);
  ncclResult_t r = ncclCommInitAll(c->comms, (int)n, c->ordinals);
  if (r != ncclSuccess) {
    qdp_status rc =
        qdp_error_set_at(reterr, QDP_ERR_NCCL, ordinals[0], (int)r,
                         "ncclCommInitAll over %zu GPUs failed: %s", n, ncclGetErrorString(r));
    free(c);
    return rc;
  }
  *ret = c;
  return QDP_OK;
}

qdp_status device_comm_unique_id(unsigned char id[DEVICE_COMM_ID_BYTES], struct qdp_error *reterr) {
  ncclUniqueId u;
  _Static_assert(sizeof u == DEVICE_COMM_ID_BYTES, "ncclUniqueId is 128 bytes");
  ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess) {
    return qdp_error_set_at(reterr, QDP_ERR_NCCL, -1, (int)r, "ncclGetUniqueId failed: %s",
                            ncclGetErrorString(r));
  }
  memcpy(id, &u, sizeof u);
  return QDP_OK;
}

qdp_status device_comm_create_member(const unsigned char id[DEVICE_COMM_ID_BYTES], int size,
                                     int member, int ordinal, struct device_comm **ret,
                                     struct qdp_error *reterr) {
  if (size < 1 || member < 0 || member >= size) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "member %d of a device group of %d does not exist", member, size);
  }
  struct device_comm *c = calloc(1, sizeof *c);
  if (!c) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "cannot allocate a device group");
  }
  c->nlocal = 1;
  c->size = size;
  c->first_member = member;
  c->ordinals[0] = ordinal;
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  cudaError_t err = cudaSetDevice(ordinal);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    free(c);
    return qdp_error_set_at(reterr, QDP_ERR_CUDA, ordinal, (int)err, "cuda:%d: cudaSetDevice: %s",
                            ordinal, cudaGetErrorName(err));
  }
  ncclResult_t r = ncclCommInitRank(&c->comms[0], size, u, member);
  if (r != ncclSuccess) {
    qdp_status rc = qdp_error_set_at(reterr, QDP_ERR_NCCL, ordinal, (int)r,
                                     "cuda:%d: joining the device group as member %d of %d "
                                     "failed: %s",
                                     ordinal, member, size, ncclGetErrorString(r));
    free(c);
    return rc;
  }
  *ret = c;
  return QDP_OK;
}

void device_comm_destroy(struct device_comm *c) {
  if (!c) {
    return;
  }
  for (size_t i = 0; i < c->nlocal; i++) {
    if (c->comms[i]) {
      (void)ncclCommDestroy(c->comms[i]);
    }
  }
  free(c);
}

size_t device_comm_local_members(const struct device_comm *c) {
  return c ? c->nlocal : 0;
}

int device_comm_size(const struct device_comm *c) {
  return c ? c->size : 0;
}

qdp_status device_comm_allgather_f64(struct device_comm *c, size_t local, const double *send,
                                     double *recv, size_t count, void *stream,
                                     struct qdp_error *reterr) {
  if (local >= c->nlocal) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "local member %zu of a group holding %zu here", local, c->nlocal);
  }
  ncclResult_t r =
      ncclAllGather(send, recv, count, ncclDouble, c->comms[local], (cudaStream_t)stream);
  return r == ncclSuccess ? QDP_OK : nccl_failed(c, local, r, "ncclAllGather", reterr);
}

qdp_status device_comm_allgather_f64_all(struct device_comm *c, const double *const *send,
                                         double *const *recv, size_t count, void *const *streams,
                                         struct qdp_error *reterr) {
  ncclResult_t r = ncclGroupStart();
  size_t failed = 0;
  for (size_t i = 0; r == ncclSuccess && i < c->nlocal; i++) {
    r = ncclAllGather(send[i], recv[i], count, ncclDouble, c->comms[i], (cudaStream_t)streams[i]);
    failed = i;
  }
  ncclResult_t end = ncclGroupEnd();
  r = r != ncclSuccess ? r : end;
  return r == ncclSuccess ? QDP_OK : nccl_failed(c, failed, r, "ncclAllGather", reterr);
}

qdp_status device_comm_swap(struct device_comm *c, size_t la, const void *send_a, void *recv_a,
                            size_t lb, const void *send_b, void *recv_b, size_t bytes,
                            void *stream_a, void *stream_b, struct qdp_error *reterr) {
  if (la >= c->nlocal || lb >= c->nlocal || la == lb) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "swap between local members %zu and %zu of a group holding %zu here", la,
                         lb, c->nlocal);
  }
  int ma = c->first_member + (int)la, mb = c->first_member + (int)lb;
  ncclResult_t r = ncclGroupStart(), s[4] = {ncclSuccess, ncclSuccess, ncclSuccess, ncclSuccess};
  if (r == ncclSuccess) {
    s[0] = ncclSend(send_a, bytes, ncclChar, mb, c->comms[la], (cudaStream_t)stream_a);
    s[1] = ncclRecv(recv_a, bytes, ncclChar, mb, c->comms[la], (cudaStream_t)stream_a);
    s[2] = ncclSend(send_b, bytes, ncclChar, ma, c->comms[lb], (cudaStream_t)stream_b);
    s[3] = ncclRecv(recv_b, bytes, ncclChar, ma, c->comms[lb], (cudaStream_t)stream_b);
    r = ncclGroupEnd();
  }
  for (int i = 0; i < 4 && r == ncclSuccess; i++) {
    r = s[i];
  }
  return r == ncclSuccess ? QDP_OK : nccl_failed(c, la, r, "ncclSend/ncclRecv", reterr);
}

qdp_status device_comm_exchange(struct device_comm *c, size_t local, int peer, const void *send,
                                void *recv, size_t bytes, void *stream, struct qdp_error *reterr) {
  if (local >= c->nlocal || peer < 0 || peer >= c->size) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                         "exchange between local member %zu and member %d of a group of %d", local,
                         peer, c->size);
  }
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) {
    ncclResult_t s = ncclSend(send, bytes, ncclChar, peer, c->comms[local], (cudaStream_t)stream);
    ncclResult_t v = ncclRecv(recv, bytes, ncclChar, peer, c->comms[local], (cudaStream_t)stream);
    r = ncclGroupEnd();
    r = s != ncclSuccess ? s : v != ncclSuccess ? v : r;
  }
  return r == ncclSuccess ? QDP_OK : nccl_failed(c, local, r, "ncclSend/ncclRecv", reterr);
}

int device_comm_nccl_version(void) {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}
