/* libqdp_int.h — libqdp's internals, shared by its source files and its unit tests; not installed.
 *
 * Owns: the per-thread error record (errors.c), the gRPC call machinery (client.c) and the .npy
 * reader and writer (npy.c). Every function here is thread-safe: the only shared object is the
 * client, whose fields are written once in qdp_client_create and only read afterwards.
 */
#ifndef QDP_LIBQDP_INT_H
#define QDP_LIBQDP_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#include "qdp.h"

#define QDP__HIDDEN __attribute__((visibility("hidden")))

/* ---- errors.c: the calling thread's record behind qdp_last_error() ---- */

/* The thread's record, writable. */
QDP__HIDDEN struct qdp_errinfo *qdp__err(void);
/* Resets the record at the start of a public call. */
QDP__HIDDEN void qdp__err_reset(void);
/* Records a local failure (remote = 0) and returns code. cause: errno or -1; field may be NULL. */
QDP__HIDDEN qdp_status qdp__err_local(qdp_status code, int cause, const char *field,
                                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Out of memory while doing `what`: never allocates. */
QDP__HIDDEN qdp_status qdp__err_nomem(const char *what);

/* ---- client.c: calls over the client's channel ---- */

struct qdp__view_set;

struct qdp_client {
  char *target;
  grpc_channel *channel;
  grpc_metadata md[2]; /* qdp-client, and authorization when a token is set */
  size_t nmd;
  int64_t timeout_ms, stream_timeout_ms;
  int wait_for_ready;
  qdp_log_fn log;
  void *log_arg;
  pthread_mutex_t views_mu; /* guards views */
  int views_mu_ready;
  struct qdp__view_set *views; /* open views, one set per handle (views.c) */
};

/* One call in flight, owned by the thread that made it. */
struct qdp__call {
  qdp_client *c;
  const char *method;
  grpc_completion_queue *cq;
  grpc_call *call;
  grpc_metadata_array initial_md, trailing_md;
  grpc_status_code status;
  grpc_slice details;
  const char *error_string;
  int have_status;
  int cancelled_locally;
  struct timespec t0;
};

/* Starts a call of `method` ("/qdp.Qdp/Encode"); streaming selects the stream deadline. */
QDP__HIDDEN qdp_status qdp__call_begin(qdp_client *c, const char *method, int streaming,
                                       struct qdp__call *k);
/* Runs one batch and waits for it; returns the batch's success flag (0: the call is over). */
QDP__HIDDEN int qdp__call_batch(struct qdp__call *k, const grpc_op *ops, size_t nops);
/* The op that sends the client's metadata (first batch of every call). */
QDP__HIDDEN grpc_op qdp__op_send_initial(const struct qdp__call *k);
/* Cancels the call (a local decision: the status becomes QDP_ERR_CANCELLED unless set). */
QDP__HIDDEN void qdp__call_cancel(struct qdp__call *k);
/* Receives the status when not yet received, converts a failure into the thread's error record,
 * frees everything the call holds and returns the status. `local` (not QDP_OK) is a failure the
 * caller already recorded: it wins over the call's own status. */
QDP__HIDDEN qdp_status qdp__call_end(struct qdp__call *k, qdp_status local);

/* A whole unary call: pack req, send, receive and unpack the reply as rep_desc (*ret, freed with
 * protobuf_c_message_free_unpacked). */
QDP__HIDDEN qdp_status qdp__unary(qdp_client *c, const char *method, const ProtobufCMessage *req,
                                  const ProtobufCMessageDescriptor *rep_desc,
                                  ProtobufCMessage **ret);

/* protobuf-c <-> grpc_byte_buffer. pack returns NULL on allocation failure (recorded). */
QDP__HIDDEN grpc_byte_buffer *qdp__pack(const ProtobufCMessage *m);
QDP__HIDDEN ProtobufCMessage *qdp__unpack(grpc_byte_buffer *bb,
                                          const ProtobufCMessageDescriptor *desc);

/* Resolves the default target (see qdp_client_opts.target) into buf. */
QDP__HIDDEN qdp_status qdp__default_target(char *buf, size_t size);

/* ---- calls.c and views.c: views and their leases ---- */

/* Describe, with views when `views` (this process's pid as the lease's owner). */
QDP__HIDDEN qdp_status qdp__describe(qdp_client *c, const char *handle, const char *token,
                                     int views, struct qdp_state_info **ret);
/* CloseView. */
QDP__HIDDEN qdp_status qdp__close_view(qdp_client *c, const char *handle, const char *token,
                                       uint64_t lease_id, uint64_t *ret_freed_bytes);
/* Closes this client's views of handle, if any, keeping the thread's error record as it is (a
 * release or a destroy goes on whatever happens here). */
QDP__HIDDEN void qdp__views_forget(qdp_client *c, const char *handle);
/* Closes every view of the client (qdp_client_destroy). */
QDP__HIDDEN void qdp__views_forget_all(qdp_client *c);

/* ---- npy.c: the NumPy .npy format (versions 1.0-3.0, little-endian, C order) ---- */

struct qdp__npy {
  qdp_dtype dtype;      /* FLOAT32, FLOAT64, INT64, COMPLEX64, COMPLEX128 */
  int ndim;             /* 1 or 2 */
  uint64_t shape[2];    /* shape[1] is 1 for a 1-D array */
  uint64_t count;       /* elements */
  uint64_t data_offset; /* bytes from the start of the file to the first element */
};

/* The longest header qdp reads: numpy writes a few hundred bytes; 1 MiB leaves room for any
 * legitimate file while bounding what a hostile one can make us read. */
#define QDP__NPY_MAX_HEADER ((size_t)1 << 20)

/* Parses the header at the start of buf (len bytes of the file, at least the whole header).
 * QDP_ERR_INVALID_ARGUMENT (field "npy") with the reason for anything qdp cannot read. */
QDP__HIDDEN qdp_status qdp__npy_parse(const void *buf, size_t len, struct qdp__npy *ret);

/* Writes a version 1.0 header for a C-order array of `dtype` and `ndim` (1 or 2) dimensions into
 * buf; its length is a multiple of 64. Returns the length, or 0 when buf is too small. */
QDP__HIDDEN size_t qdp__npy_header(char *buf, size_t size, qdp_dtype dtype, int ndim,
                                   const uint64_t *shape);

/* Opens a local .npy or raw file for reading and describes its data: for .npy the header decides
 * (reshaped by rows/cols when nonzero); for a raw file dtype is required and the data runs from
 * offset to the end of the file. Returns an O_CLOEXEC fd in *ret_fd. */
QDP__HIDDEN qdp_status qdp__input_file_open(const char *path, qdp_dtype dtype, uint64_t rows,
                                            uint64_t cols, uint64_t offset, int *ret_fd,
                                            struct qdp__npy *ret);

#endif /* QDP_LIBQDP_INT_H */
