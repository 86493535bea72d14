/* Built without CUDA: there are no GPUs to join, and every call says so. */
#include "device_comm.h"

static qdp_status absent(struct qdp_error *reterr) {
  return qdp_error_set(reterr, QDP_ERR_UNIMPLEMENTED, NULL,
                       "device collectives need NCCL, and this qdpd was built without CUDA");
}

qdp_status device_comm_create_local(const int *ordinals, size_t n, struct device_comm **ret,
                                    struct qdp_error *reterr) {
  (void)ordinals;
  (void)n;
  (void)ret;
  return absent(reterr);
}

qdp_status device_comm_unique_id(unsigned char id[DEVICE_COMM_ID_BYTES], struct qdp_error *reterr) {
  (void)id;
  return absent(reterr);
}

qdp_status device_comm_create_members(const unsigned char id[DEVICE_COMM_ID_BYTES], int size,
                                      int first_member, const int *ordinals, size_t n,
                                      uint64_t timeout_ms, struct device_comm **ret,
                                      struct qdp_error *reterr) {
  (void)id;
  (void)size;
  (void)first_member;
  (void)ordinals;
  (void)n;
  (void)timeout_ms;
  (void)ret;
  return absent(reterr);
}

void device_comm_destroy(struct device_comm *c) {
  (void)c;
}

size_t device_comm_local_members(const struct device_comm *c) {
  (void)c;
  return 0;
}

int device_comm_size(const struct device_comm *c) {
  (void)c;
  return 0;
}

int device_comm_first_member(const struct device_comm *c) {
  (void)c;
  return 0;
}

qdp_status device_comm_wait(struct device_comm *c, size_t local, void *stream,
                            struct qdp_error *reterr) {
  (void)c;
  (void)local;
  (void)stream;
  return absent(reterr);
}

bool device_comm_usable(const struct device_comm *c) {
  (void)c;
  return false;
}

qdp_status device_comm_allgather_f64(struct device_comm *c, size_t local, const double *send,
                                     double *recv, size_t count, void *stream,
                                     struct qdp_error *reterr) {
  (void)c;
  (void)local;
  (void)send;
  (void)recv;
  (void)count;
  (void)stream;
  return absent(reterr);
}

qdp_status device_comm_allgather_f64_all(struct device_comm *c, const double *const *send,
                                         double *const *recv, size_t count, void *const *streams,
                                         struct qdp_error *reterr) {
  (void)c;
  (void)send;
  (void)recv;
  (void)count;
  (void)streams;
  return absent(reterr);
}

qdp_status device_comm_swap(struct device_comm *c, size_t la, const void *send_a, void *recv_a,
                            size_t lb, const void *send_b, void *recv_b, size_t bytes,
                            void *stream_a, void *stream_b, struct qdp_error *reterr) {
  (void)c;
  (void)la;
  (void)send_a;
  (void)recv_a;
  (void)lb;
  (void)send_b;
  (void)recv_b;
  (void)bytes;
  (void)stream_a;
  (void)stream_b;
  return absent(reterr);
}

qdp_status device_comm_exchange(struct device_comm *c, size_t local, int peer, const void *send,
                                void *recv, size_t bytes, void *stream, struct qdp_error *reterr) {
  (void)c;
  (void)local;
  (void)peer;
  (void)send;
  (void)recv;
  (void)bytes;
  (void)stream;
  return absent(reterr);
}

int device_comm_nccl_version(void) {
  return 0;
}
