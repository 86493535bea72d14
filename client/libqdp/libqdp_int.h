/* libqdp_int.h — libqdp's internals, shared by its source files and its unit tests; not installed.
 *
 * Owns: the per-thread error record (errors.c), the gRPC call machinery (client.c), what the call
 * families share (calls_*.c) and local input files (npy.c, and csv.c for text; the .npy header
 * codec itself is common/qdp_npy.h). Every function here is thread-safe: the only shared objects
 * are the client, whose fields are written once in qdp_client_create and only read afterwards,
 * and csv.c's "C" locale, made once.
 */
#ifndef QDP_LIBQDP_INT_H
#define QDP_LIBQDP_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#include "qdp.h"
#include "qdp.pb-c.h"

#define QDP__HIDDEN __attribute__((visibility("hidden")))

/* ---- errors.c: the calling thread's record behind qdp_last_error() ---- */

/* The thread's record, writable. */
QDP__HIDDEN struct qdp_errinfo *qdp__err(void);
/* Resets the record at the start of a public call. */
QDP__HIDDEN void qdp__err_reset(void);
/* Records a local failure (remote = 0) and returns code. cause: errno or -1; field may be NULL. */
QDP__HIDDEN qdp_status qdp__err_local(qdp_status code, int cause, const char *field,
                                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The status a failed open(2), creat, link or rename means: NOT_FOUND (no such file),
 * PERMISSION_DENIED (this process may not), ALREADY_EXISTS, else `otherwise`. */
QDP__HIDDEN qdp_status qdp__errno_status(int err, qdp_status otherwise);
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
/* The same with the deadline timeout_ms from now (0: none). */
QDP__HIDDEN qdp_status qdp__call_begin_ms(qdp_client *c, const char *method, int64_t timeout_ms,
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

/* grpc_byte_buffer -> protobuf-c (packing is qdp_wire_pack, common/qdp_wire.h): NULL when bb
 * is not a valid message of that type. */
QDP__HIDDEN ProtobufCMessage *qdp__unpack(grpc_byte_buffer *bb,
                                          const ProtobufCMessageDescriptor *desc);

/* Resolves the default target (see qdp_client_opts.target) into buf. */
QDP__HIDDEN qdp_status qdp__default_target(char *buf, size_t size);

/* ---- handoff.c: descriptors this process opened, handed to the daemon (proto/qdp.proto) ---- */

/* The socket path of a "unix:" target into buf; 0 for any other target (TCP). */
QDP__HIDDEN int qdp__unix_path(const qdp_client *c, char *buf, size_t len);
/* Hands fd (kept open here) to the daemon for reading (access 1) or writing (2); the ticket it
 * answers goes to ticket (len bytes). INVALID_ARGUMENT (field) on a target that is not a Unix
 * socket; the daemon's refusal keeps its status. */
QDP__HIDDEN qdp_status qdp__handoff(qdp_client *c, int fd, int access, const char *field,
                                    char *ticket, size_t len);
/* Takes the descriptor of a view the daemon filed under `ticket` (Shard.view_ticket) into
 * *ret_fd, this process's to close; the daemon's refusal keeps its status (field
 * "view_ticket"). */
QDP__HIDDEN qdp_status qdp__take_fd(qdp_client *c, const char *ticket, int *ret_fd);
/* Opens shared memory for reading with this process's rights: by name (shm_open), or as fd of
 * process pid (this process: a duplicate; another: /proc/<pid>/fd/<fd>, regular files only).
 * Returns the descriptor, or -1 with *rc set and recorded. */
QDP__HIDDEN int qdp__open_shm(const char *name, int pid, int fd, bool writable, qdp_status *rc);

/* ---- calls_state.c: regions made for one call ---- */

/* A shared-memory region made for one call, for what one message does not carry: a memfd, mapped
 * here and registered with the daemon (a kernel matrix the daemon writes, an input it reads). */
struct qdp__scratch {
  int fd;
  void *map; /* len bytes; NULL until mapped */
  size_t len;
  struct qdp_region_info region; /* handle "" until registered */
};

/* clang-format off */
#define QDP__SCRATCH_INIT {-1, NULL, 0, QDP_REGION_INFO_INIT}
/* clang-format on */

/* Makes s (QDP__SCRATCH_INIT) of `bytes` > 0 on a Unix target: registered writable and mapped
 * read-only here when the daemon writes it, the other way round when the caller fills it for the
 * daemon to read. What it took before a failure stays in s for qdp__scratch_end. */
QDP__HIDDEN qdp_status qdp__scratch_make(qdp_client *c, uint64_t bytes, bool daemon_writes,
                                         struct qdp__scratch *s);
/* Unregisters, unmaps and closes what s holds, keeping the thread's error record: the call's own
 * outcome is what it reports. */
QDP__HIDDEN void qdp__scratch_end(qdp_client *c, struct qdp__scratch *s);

/* ---- calls_state.c and views.c: views and their leases ---- */

/* Describe, with views when `views` (this process's pid as the lease's owner), writable ones
 * under the write lease when `writable` too. */
QDP__HIDDEN qdp_status qdp__describe(qdp_client *c, const char *handle, const char *token,
                                     int views, int writable, struct qdp_state_info **ret);
/* CloseView. */
QDP__HIDDEN qdp_status qdp__close_view(qdp_client *c, const char *handle, const char *token,
                                       uint64_t lease_id, uint64_t *ret_freed_bytes);
/* Closes this client's views of handle, if any, keeping the thread's error record as it is (a
 * release or a destroy goes on whatever happens here). */
QDP__HIDDEN void qdp__views_forget(qdp_client *c, const char *handle);
/* Closes every view of the client (qdp_client_destroy). */
QDP__HIDDEN void qdp__views_forget_all(qdp_client *c);

/* ---- calls_reply.c, calls_fetch.c: the decoding of what the daemon sends, reachable without a
 * call (unit tests and fuzzers feed it bytes directly) ---- */

/* The libqdp struct an unpacked unary reply becomes, as the public call returns it: a StateInfo
 * gives a struct qdp_state_info (free with qdp_state_info_free), a PlanReply a qdp_plan_info, a
 * ListReply a qdp_state_list, a StatusReply a qdp_server_status. NULL when out of memory or for
 * any other message type. */
QDP__HIDDEN void *qdp__reply_from_pb(const ProtobufCMessage *m);

/* Delivers the n FetchChunk messages of a fetch stream of amplitudes [offset, offset + count)
 * (count 0: as many as the stream announces) exactly as qdp_fetch does, into dst (dst_bytes), or
 * when dst is NULL into fd as qdp_fetch_npy does (want_dtype: the dtype the state must have,
 * UNSPECIFIED for any); then checks, as at the end of a stream, that every announced amplitude
 * came. *ret_bytes: the bytes delivered. The first refused message stops it, with its status. */
QDP__HIDDEN qdp_status qdp__fetch_deliver(grpc_byte_buffer *const *msgs, size_t n, uint64_t offset,
                                          uint64_t count, qdp_dtype want_dtype, void *dst,
                                          size_t dst_bytes, int fd, uint64_t *ret_bytes);

/* ---- calls_*.c: what the call families share ---- */

/* QDP_ERR_INVALID_ARGUMENT for a NULL client; for a NULL client, an empty handle or a NULL token;
 * rc unless it is QDP_OK and ret is NULL (the result pointer). */
QDP__HIDDEN qdp_status qdp__check_client(const qdp_client *c);
QDP__HIDDEN qdp_status qdp__check_ref(const qdp_client *c, const char *handle, const char *token);
QDP__HIDDEN qdp_status qdp__check_ret(qdp_status rc, const void *ret);
/* An absolute form of path into buf (PATH_MAX), for the daemon, which names files absolutely;
 * SYSTEM (field) without a working directory, INVALID_ARGUMENT when too long. */
QDP__HIDDEN qdp_status qdp__absolute(const char *path, char *buf, const char *field);
/* A StateRef pointing into the caller's strings: nothing allocated. */
QDP__HIDDEN Qdp__StateRef qdp__state_ref(const char *handle, const char *token);
/* Sends the initial metadata and the first message of a streaming call; with close, also closes
 * the sending side and receives the initial metadata. 0 when the call failed. */
QDP__HIDDEN int qdp__send_first(struct qdp__call *k, const ProtobufCMessage *m, int close);

/* How an encode request carries an upload or a local file above its inline_max. */
enum qdp__carry {
  QDP__CARRY_STREAM, /* streamed after the request (EncodeUpload): Encode */
  QDP__CARRY_SHAPE,  /* described by its shape alone: Plan */
  QDP__CARRY_WHOLE,  /* in a region made for the call, the request being one message: Kernel */
};

/* An EncodeRequest for opts and an input, pointing into the caller's storage and its own, and
 * what its input took: a descriptor handed over, a file open, values read, a region. */
struct qdp__encode_request {
  Qdp__EncodeRequest req;
  Qdp__Input input;
  Qdp__Placement placement;
  Qdp__SharedMemory shm;
  char path[PATH_MAX];
  char ticket[64];
  /* An upload's or a local file's data when the request does not carry it: streamed from buf or
   * from fd at data_off, or put in region. */
  int fd;
  unsigned char *filebuf; /* owned: a small file's bytes or a CSV file's values */
  const unsigned char *buf;
  uint64_t total, data_off;
  int stream;
  struct qdp__scratch region;
};

/* Builds r for opts and in: a file or shared memory of this node handed over as a descriptor, a
 * small upload or local file inline, a larger one as `carry` says. Whatever it returns, r is then
 * ended with qdp__encode_request_end. */
QDP__HIDDEN qdp_status qdp__encode_request_begin(qdp_client *c, const struct qdp_encode_opts *opts,
                                                 const struct qdp_input *in, enum qdp__carry carry,
                                                 struct qdp__encode_request *r);
/* Hands the input's descriptor over again, for the request sent once more: the daemon takes a
 * ticket once, refused or not. */
QDP__HIDDEN qdp_status qdp__encode_request_renew(qdp_client *c, const struct qdp_input *in,
                                                 struct qdp__encode_request *r);
QDP__HIDDEN void qdp__encode_request_end(qdp_client *c, struct qdp__encode_request *r);

/* A copy of one protobuf-c reply into a libqdp-owned struct; NULL when out of memory. */
typedef void *(*qdp__from_pb_fn)(const void *pb);
QDP__HIDDEN void *qdp__state_from_pb(const void *pb);  /* Qdp__StateInfo -> qdp_state_info */
QDP__HIDDEN void *qdp__plan_from_pb(const void *pb);   /* Qdp__PlanReply -> qdp_plan_info */
QDP__HIDDEN void *qdp__list_from_pb(const void *pb);   /* Qdp__ListReply -> qdp_state_list */
QDP__HIDDEN void *qdp__status_from_pb(const void *pb); /* Qdp__StatusReply -> qdp_server_status */
/* A unary call whose reply is copied by `from` into a libqdp struct, returned (NULL on failure,
 * with *ret_rc saying why); `what` names the copy in the out-of-memory message. */
QDP__HIDDEN void *qdp__unary_copy(qdp_client *c, const char *method, const ProtobufCMessage *req,
                                  const ProtobufCMessageDescriptor *desc, qdp__from_pb_fn from,
                                  const char *what, qdp_status *ret_rc);

/* Writes hdr then data as the file `path`, complete or not at all (a temporary beside it, then
 * named; an existing path is refused unless overwrite): qdp_kernel_npy's file (calls_fetch.c). */
QDP__HIDDEN qdp_status qdp__write_npy_file(const char *path, int overwrite, const void *hdr,
                                           size_t hlen, const void *data, size_t len);

/* ---- npy.c: local input files (.npy through common/qdp_npy.h, CSV through csv.c, or raw) ---- */

struct qdp__npy {
  qdp_dtype dtype;      /* FLOAT32, FLOAT64, INT64, COMPLEX64, COMPLEX128 */
  int ndim;             /* 1 or 2 */
  uint64_t shape[2];    /* rows, cols; a 1-D array is one row */
  uint64_t count;       /* elements */
  uint64_t data_offset; /* bytes from the start of the file to the first element */
};

/* Parses the header at the start of buf (len bytes of the file, at least the whole header) with
 * the shared codec. QDP_ERR_INVALID_ARGUMENT (field "npy") with its reason for anything qdp
 * cannot read. */
QDP__HIDDEN qdp_status qdp__npy_parse(const void *buf, size_t len, struct qdp__npy *ret);

/* A local input file, opened and described. */
struct qdp__input_file {
  struct qdp__npy d; /* dtype and shape (reshaped by the input's rows/cols when nonzero) */
  int fd;            /* .npy and raw: open O_CLOEXEC, the data at d.data_offset; CSV: -1 */
  void *values;      /* CSV: d.count values of d.dtype, parsed (free()); otherwise NULL */
  bool csv;
};

/* Opens in->path (a LOCAL_FILE input) and describes its data, as qdp.h's qdp_input.raw says: a
 * .npy by its header; CSV (a .csv name, or text) parsed whole into values of in->dtype; raw
 * values of in->dtype from in->offset to the end. */
QDP__HIDDEN qdp_status qdp__input_file_open(const struct qdp_input *in,
                                            struct qdp__input_file *ret);

/* Reads n bytes of the local input file path (open on fd) at off into buf: SYSTEM for a failed
 * read, DATA_LOSS when the file ends first (it shrank since it was described). */
QDP__HIDDEN qdp_status qdp__read_at(int fd, const char *path, void *buf, size_t n, uint64_t off);

/* ---- csv.c: text input files ---- */

/* Whether n bytes of a file look like text: no NUL, no control character but whitespace, valid
 * UTF-8. whole: they are the whole file (else a character cut at their end is no fault). */
QDP__HIDDEN bool qdp__looks_like_text(const unsigned char *buf, size_t n, bool whole);

/* A CSV table as values: one sample per row. */
struct qdp__csv {
  qdp_dtype dtype;
  uint64_t rows, cols;
  void *values; /* rows * cols, row-major (free()) */
};

/* Parses the CSV text (len bytes of the file `path`, for messages) into values of dtype (FLOAT32,
 * FLOAT64 or INT64; UNSPECIFIED: FLOAT64) as qdp.h's qdp_input.raw describes. A table that cannot
 * be read is QDP_ERR_INVALID_ARGUMENT with the row, line, column and text at fault. */
QDP__HIDDEN qdp_status qdp__csv_parse(const char *path, const char *text, size_t len,
                                      qdp_dtype dtype, struct qdp__csv *ret);

#endif /* QDP_LIBQDP_INT_H */
