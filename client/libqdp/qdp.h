/* qdp.h — libqdp, the C client library of qdpd, the qdp node daemon.
 *
 * Why it exists: qdpd turns classical data into quantum state vectors on the GPUs (or host-memory
 * "cpu:N" devices) of a node, keeps them resident and serves them over gRPC. libqdp wraps that wire
 * contract (proto/qdp.proto) in a small C API with no gRPC or protobuf types, so that a program
 * can encode, inspect, fetch and release states with plain C structs and caller-owned buffers.
 *
 * Objects and lifetimes
 *  - qdp_client is opaque: qdp_client_create() / qdp_client_destroy(). One client holds one gRPC
 *    channel; create it once and share it between threads.
 *  - Structs the caller fills start with `size_t struct_size` and are initialised with their
 *    QDP_*_INIT macro, so that later versions can append fields without breaking old callers.
 *  - Everything libqdp allocates and hands out has its own qdp_*_free(); never free() it.
 *  - Buffers passed in (input data, fetch destinations) stay owned by the caller.
 *
 * Errors
 *  Every fallible call returns a qdp_status (QDP_OK on success). gRPC status codes map 1:1 onto
 *  qdp_status (numbers 1..16). The details of a failure — the daemon's message with its numbers,
 *  the request field, the device and the byte counts of its ErrorDetail — are kept per thread:
 *  qdp_last_error() returns the record of the calling thread's most recent libqdp call (as errno
 *  and dlerror do), so concurrent calls from many threads never see each other's errors.
 *
 * Threads
 *  All functions are thread-safe. Calls on one client from many threads run concurrently over the
 *  shared channel. Callbacks (progress, log) run on the thread that made the call.
 *
 * Versioning
 *  Same major version: ABI compatible; minor versions only add symbols (linker node QDP_0.<minor>)
 *  and append struct fields.
 */
#ifndef QDP_H
#define QDP_H

#include <stddef.h>
#include <stdint.h>

#include "qdp_defs.h"
#include "qdp_version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(QDP_BUILDING_LIBRARY)
#define QDP_EXPORT __attribute__((visibility("default")))
#else
#define QDP_EXPORT
#endif

/* The library's run-time version as QDP_VERSION_HEX computes it, and as QDP_VERSION_STRING
 * ("0.7.0"): a program built against one release can tell the one it runs with. */
QDP_EXPORT unsigned qdp_version(void);
QDP_EXPORT const char *qdp_version_string(void);

/* ---- Errors ------------------------------------------------------------------------------- */

struct qdp_errinfo {
  size_t struct_size;
  qdp_status code;     /* QDP_OK when the call succeeded */
  int remote;          /* 1: the status came from the daemon or the gRPC transport; 0: local */
  int rank, device;    /* from the daemon's ErrorDetail; -1 when not applicable */
  int cause;           /* errno (local), or the daemon's cause (cudaError_t...); -1 if none */
  uint64_t need_bytes; /* RESOURCE_EXHAUSTED: bytes needed and bytes free or budgeted */
  uint64_t free_bytes;
  char code_name[48]; /* "QDP_ERR_INVALID_ARGUMENT" */
  char field[64];     /* the request field at fault, e.g. "qubits"; "" if none */
  char msg[1024];     /* one complete sentence with the numbers */
};

/* clang-format off */
#define QDP_ERRINFO_INIT \
  {sizeof(struct qdp_errinfo), QDP_OK, 0, -1, -1, -1, 0, 0, {0}, {0}, {0}}
/* clang-format on */

/* The calling thread's record of its most recent libqdp call that returns a qdp_status: every
 * such call resets it on entry, so after a success its code is QDP_OK. Never NULL; valid for the
 * thread's lifetime and overwritten by its next call. Any thread. */
QDP_EXPORT const struct qdp_errinfo *qdp_last_error(void);

/* ---- Client ------------------------------------------------------------------------------- */

typedef struct qdp_client qdp_client;

/* Debug lines (one per call: method, status, milliseconds). libqdp never writes to stderr. */
typedef void (*qdp_log_fn)(void *arg, const char *line);

/* Progress of an upload or a fetch, called after each chunk: bytes done and the total (0 while it
 * is not known yet). Return nonzero to cancel the call (it then fails with QDP_ERR_CANCELLED). */
typedef int (*qdp_progress_fn)(void *arg, uint64_t done_bytes, uint64_t total_bytes);

struct qdp_client_opts {
  size_t struct_size;
  /* Any gRPC target ("unix:/path", "127.0.0.1:7777"). NULL: $QDP_TARGET, else unix:$QDP_SOCKET,
   * else unix:/run/qdp/qdpd.sock for root and unix:$XDG_RUNTIME_DIR/qdp/qdpd.sock otherwise. */
  const char *target;
  /* Sent as "authorization: Bearer <token>" (TCP daemons ask for one). NULL: $QDP_TOKEN. */
  const char *token;
  /* A label for the daemon's logs ("qdp-client" metadata); NULL: user@host:pid. The identity
   * budgets and ownership count against is the daemon's own finding (uid, or token principal). */
  const char *client_name;
  /* Deadline of each unary call in milliseconds; 0 = none. */
  int64_t timeout_ms;
  /* Deadline of each streaming call (uploads, fetches); 0 = none. */
  int64_t stream_timeout_ms;
  /* 0: a call fails at once with QDP_ERR_UNAVAILABLE when the daemon cannot be reached;
   * 1: it waits for the daemon (up to its deadline). */
  int wait_for_ready;
  qdp_log_fn log;
  void *log_arg;
  /* Since 0.7 (an older caller's shorter struct reads as NULL): TLS to a TCP target. Paths of PEM
   * files; NULL: $QDP_TLS_CA, $QDP_TLS_CERT, $QDP_TLS_KEY, $QDP_TLS_SERVER_NAME; "": none.
   * tls_ca (the CAs the daemon's certificate must chain to) turns TLS on; tls_cert and tls_key,
   * together, are this client's certificate chain and key for a daemon that asks for one (mutual
   * TLS). tls_server_name: the name the daemon's certificate must carry when it is not the
   * target's host. A unix: target refuses TLS options given here and ignores the environment's.
   * A file that cannot be read fails qdp_client_create (NOT_FOUND, PERMISSION_DENIED, or
   * INVALID_ARGUMENT for one that holds no PEM), naming the option and the path. */
  const char *tls_ca;
  const char *tls_cert;
  const char *tls_key;
  const char *tls_server_name;
};

/* clang-format off */
#define QDP_CLIENT_OPTS_INIT \
  {sizeof(struct qdp_client_opts), NULL, NULL, NULL, 60000, 0, 0, NULL, NULL, NULL, NULL, NULL, \
   NULL}
/* clang-format on */

/* Creates a client (opts may be NULL: all defaults). No connection is made yet: gRPC connects on
 * the first call, and that call reports QDP_ERR_UNAVAILABLE if the daemon is not there. Fails
 * with QDP_ERR_INVALID_ARGUMENT for a bad option. Any thread. */
QDP_EXPORT qdp_status qdp_client_create(const struct qdp_client_opts *opts, qdp_client **ret);

/* Closes the channel and frees the client; NULL is allowed. No call on it may be in flight. */
QDP_EXPORT void qdp_client_destroy(qdp_client *c);

/* The gRPC target the client talks to (owned by the client). */
QDP_EXPORT const char *qdp_client_target(const qdp_client *c);

/* The default target as qdp_client_create resolves it without opts->target, into buf (always
 * terminated). Returns QDP_ERR_INVALID_ARGUMENT when it does not fit. */
QDP_EXPORT qdp_status qdp_default_target(char *buf, size_t buf_size);

/* ---- Requests ----------------------------------------------------------------------------- */

typedef enum qdp_policy {
  QDP_POLICY_AUTO = 0,     /* single device when it fits, else even, else capacity-weighted */
  QDP_POLICY_SINGLE = 1,   /* one device */
  QDP_POLICY_EVEN = 2,     /* 2^g equal shards over a power-of-two device set */
  QDP_POLICY_UNEVEN = 3,   /* contiguous near-equal shards over any number of devices */
  QDP_POLICY_CAPACITY = 4, /* contiguous shards sized by each device's byte budget */
  QDP_POLICY_BATCH = 5     /* whole samples per device (data parallel) */
} qdp_policy;

/* "auto", "single", "even", "uneven", "capacity", "batch"; NULL for anything else. */
QDP_EXPORT const char *qdp_policy_name(qdp_policy p);
/* Inverse of qdp_policy_name; returns -1 for an unknown name. */
QDP_EXPORT int qdp_policy_from_name(const char *name);

struct qdp_encode_opts {
  size_t struct_size;
  qdp_encoding encoding;
  uint32_t qubits;
  qdp_dtype dtype; /* QDP_DTYPE_COMPLEX64 or _COMPLEX128; UNSPECIFIED = COMPLEX128 */
  qdp_policy policy;
  const char *const *devices; /* ndevices names as status reports them ("cpu:0"); 0 = all */
  size_t ndevices;
  uint64_t ttl_seconds; /* 0 = the daemon's default */
  const char *label;    /* free text kept with the state; NULL = none */
  /* also ask for views under a lease (see qdp_views_open): each shard's view_ticket, which any
   * process of this identity on the node may take (since 0.7), or a legacy daemon's CUDA IPC
   * handle */
  int ipc;
  /* since 0.7: the session (qdp_session_open) the new state ends with; NULL or "": none */
  const char *session;
};

/* clang-format off */
#define QDP_ENCODE_OPTS_INIT \
  {sizeof(struct qdp_encode_opts), QDP_ENCODING_UNSPECIFIED, 0, QDP_DTYPE_UNSPECIFIED, \
   QDP_POLICY_AUTO, NULL, 0, 0, NULL, 0, NULL}
/* clang-format on */

typedef enum qdp_input_kind {
  QDP_INPUT_NONE = 0,        /* shape only (dtype, rows, cols): for qdp_plan */
  QDP_INPUT_INLINE = 1,      /* data/data_bytes, sent in the request (one message) */
  QDP_INPUT_SERVER_FILE = 2, /* path: a .npy on the daemon's node, opened by this process (over
                                TCP: named, beneath the daemon's input_dir) */
  QDP_INPUT_SHM = 3,         /* shm_name, or shm_pid + shm_fd, opened by this process; offset and
                                length in bytes */
  QDP_INPUT_UPLOAD = 4,      /* data/data_bytes, streamed in chunk_bytes pieces */
  QDP_INPUT_LOCAL_FILE = 5   /* path: a local .npy, CSV or raw file (see raw); inline up to
                                inline_max bytes, streamed beyond */
} qdp_input_kind;

struct qdp_input {
  size_t struct_size;
  qdp_input_kind kind;
  /* Element type and shape of raw values (FLOAT32 or FLOAT64, basis also INT64). rows 0 means 1,
   * cols 0 means all values / rows. A .npy or CSV file says its own shape; nonzero values here
   * then reshape it and must match its element count. A CSV file's values are read as dtype
   * (FLOAT32, FLOAT64 or INT64; UNSPECIFIED: FLOAT64). */
  qdp_dtype dtype;
  uint64_t rows, cols;
  const void *data; /* INLINE, UPLOAD */
  size_t data_bytes;
  const char *path;     /* SERVER_FILE, LOCAL_FILE */
  const char *shm_name; /* SHM by name ("/my-input"), or NULL and shm_pid + shm_fd */
  int shm_pid, shm_fd;
  uint64_t offset;          /* SHM: bytes into the region; LOCAL_FILE: bytes into a raw file */
  uint64_t length;          /* SHM: bytes, must equal rows * cols * dtype size */
  size_t chunk_bytes;       /* UPLOAD, LOCAL_FILE: bytes per message; 0 = 1 MiB */
  size_t inline_max;        /* LOCAL_FILE: largest input sent inline */
  qdp_progress_fn progress; /* UPLOAD, LOCAL_FILE; NULL = none */
  void *progress_arg;
  /* SHM from a registered region (qdp_region_register): its handle and token; shm_name, shm_pid
   * and shm_fd are then ignored and offset/length count within the region. Since 0.2. */
  const char *region;
  const char *region_token;
  /* LOCAL_FILE: how the file is read (since 0.7; an older caller's shorter struct reads as 0).
   *  0: by what it holds. A file that starts with the .npy magic is .npy. One whose name ends in
   *     .csv (any case), or whose first 4096 bytes are text (no NUL, no control character but
   *     whitespace, valid UTF-8), is CSV, read whole as the Python package's qdp.readers reads
   *     one: ',' between fields, '"' quoting; empty lines skipped; a first row with a field that
   *     is not a number is a header, and then a column of text alone is left out; every row as
   *     wide as the first; one sample per row (R rows of C numbers: rows R, cols C; basis, one
   *     index per row). INVALID_ARGUMENT, with the row (from 0, after any header), line, column
   *     and text, for an empty field, a field that is not a value of dtype, or a column that
   *     mixes numbers and text; its field is "input.raw" for a file taken for CSV only because it
   *     is text. Any other file is raw values of dtype from offset to its end. So a text file is
   *     never read as raw values by default.
   *  1: raw values of dtype from offset to the end of the file, whatever its bytes are. */
  int raw;
};

/* clang-format off */
#define QDP_INPUT_INIT \
  {sizeof(struct qdp_input), QDP_INPUT_NONE, QDP_DTYPE_UNSPECIFIED, 0, 0, NULL, 0, NULL, NULL, \
   -1, -1, 0, 0, 0, (size_t)1 << 20, NULL, NULL, NULL, NULL, 0}
/* clang-format on */

/* ---- Replies (allocated by libqdp; free with their qdp_*_free) ------------------------------ */

struct qdp_shard {
  size_t struct_size;
  int rank;
  char *device; /* "cpu:0", "cuda:1" */
  int ordinal;
  char *uuid; /* GPU UUID; "" on the CPU backend */
  char *host;
  uint64_t first, count;    /* amplitude index range within each sample */
  uint64_t row_first, rows; /* sample range */
  uint64_t bytes;
  const void *ipc_handle; /* cudaIpcMemHandle_t bytes when requested, else NULL */
  size_t ipc_handle_bytes;
  uint64_t ipc_offset; /* since 0.3: the shard's byte offset in the allocation ipc_handle names */
  uint64_t lease_id;   /* since 0.3: the lease the views of this reply hold; 0 without views */
  /* since 0.7: a view handed out as a descriptor: the ticket to take it under on the daemon's
   * socket (once, as the same identity, within 60 s; "" for an IPC-handle view or none) and the
   * size of the allocation it maps (proto/qdp.proto, Shard.view_ticket); qdp_views_open does
   * this itself */
  char *view_ticket;
  uint64_t view_bytes;
};

struct qdp_state_info {
  size_t struct_size;
  char *handle;
  char *token; /* only in qdp_encode's reply; "" elsewhere */
  qdp_encoding encoding;
  uint32_t qubits;
  uint64_t batch;
  qdp_dtype dtype;
  uint64_t bytes;
  char *policy; /* the policy the plan resolved to */
  uint32_t global_bits;
  size_t nshards;
  struct qdp_shard **shards;
  char *collective; /* how the norm was reduced: "none", "host", "nccl", "mpi" */
  int64_t created_unix_ms;
  int64_t expires_unix_ms; /* 0 = no expiry */
  char *label;
  char *owner;
  double encode_ms;
  uint32_t leases; /* since 0.3: open view leases */
  /* since 0.7: the lifetime the state was given in whole seconds (0 = no expiry), and whether
   * the ttl asked for was above the daemon's max_ttl, which it got instead */
  uint64_t ttl_seconds;
  int ttl_capped;
  /* since 0.7: whether a write lease was ever opened on it (its amplitudes are then its holders',
   * not necessarily the encoding's), and the write lease open now: its id (0: none), holder and
   * holder's pid */
  int written;
  uint64_t writer_lease_id;
  char *writer;
  int writer_pid;
  /* since 0.7: the session it ends with (proto OpenSession), or "" */
  char *session;
};

struct qdp_device_need {
  size_t struct_size;
  int rank;
  char *device;
  uint64_t shard_bytes, staging_bytes, workspace_bytes;
  uint64_t need_bytes; /* the sum of the three above */
  uint64_t budget_bytes;
  int fits;
};

struct qdp_plan_info {
  size_t struct_size;
  int feasible;
  char *policy;
  uint32_t global_bits;
  uint64_t total_bytes;
  size_t nshards;
  struct qdp_shard **shards;
  size_t nneeds;
  struct qdp_device_need **needs;
  char *message; /* when not feasible: why, with the numbers */
};

struct qdp_state_list {
  size_t struct_size;
  size_t count;
  struct qdp_state_info **states; /* tokens are never listed */
};

struct qdp_device_info {
  size_t struct_size;
  char *name; /* "cpu:0", "cuda:1" */
  char *kind; /* "cpu" or "cuda" */
  int rank, ordinal;
  char *uuid, *model, *host;
  uint64_t total_bytes, free_bytes, budget_bytes, used_bytes;
  int cc_major, cc_minor;
  int numa_node; /* since 0.3; -1 unknown */
};

/* How devices[from] reaches devices[to]'s memory (since 0.3). */
struct qdp_link_info {
  size_t struct_size;
  size_t from, to;
  char *kind;    /* "self", "host", "nvlink", "pcie", "peer" (kind unknown), "none" */
  int nvlinks;   /* NVLink links joining the pair directly */
  int peer;      /* peer access enabled */
  int perf_rank; /* CUDA's relative rank of the path, 0 best; -1 unknown */
};

/* One rank of a qdpd world (a plain qdpd is a world of one). */
struct qdp_rank_info {
  size_t struct_size;
  int rank;
  char *host;
  uint32_t devices;
  int lost;     /* stopped answering: jobs that need it fail with QDP_ERR_UNAVAILABLE */
  char *reason; /* why it was marked lost; "" while live */
};

struct qdp_server_status {
  size_t struct_size;
  char *version;
  uint64_t uptime_ms;
  char *backend; /* "cpu" or "cuda" */
  int ranks;
  size_t ndevices;
  struct qdp_device_info **devices;
  uint64_t budget_bytes, used_bytes;
  uint32_t states;
  uint64_t jobs_total, jobs_failed;
  uint32_t max_qubits;
  /* since 0.3 */
  uint32_t regions;      /* registered shared-memory regions */
  uint64_t region_bytes; /* their sizes together */
  char *topology_source; /* "nvml", "cuda", "host" */
  size_t nlinks;         /* ndevices * ndevices: every ordered pair */
  struct qdp_link_info **links;
  char *collectives; /* what reductions over sharded states use, and why */
  /* The world (appended; present when struct_size covers them). */
  char *transport;        /* "local" or "mpi" */
  char *host_collectives; /* how scalars travel between ranks */
  char *mpi_threads;      /* MPI's thread level; "" without MPI */
  uint64_t rank_timeout_ms;
  size_t nrank_info;
  struct qdp_rank_info **rank_info; /* in rank order */
  char *device_collectives; /* jobs across ranks: "nccl (...)", "mpi (why not NCCL)", "none" */
};

typedef enum qdp_health {
  QDP_HEALTH_UNKNOWN = 0,
  QDP_HEALTH_SERVING = 1,
  QDP_HEALTH_NOT_SERVING = 2
} qdp_health;

QDP_EXPORT void qdp_state_info_free(struct qdp_state_info *s);
QDP_EXPORT void qdp_plan_info_free(struct qdp_plan_info *p);
QDP_EXPORT void qdp_state_list_free(struct qdp_state_list *l);
QDP_EXPORT void qdp_server_status_free(struct qdp_server_status *s);
QDP_EXPORT void qdp_free(void *p); /* strings libqdp returns (e.g. qdp_export's path) */

/* ---- Calls (any thread; each resets and, on failure, fills qdp_last_error()) --------------- */

/* Encodes one job. For UPLOAD and LOCAL_FILE inputs above inline_max the input is streamed in
 * chunks (EncodeUpload). On success *ret holds the state, its handle and token. */
QDP_EXPORT qdp_status qdp_encode(qdp_client *c, const struct qdp_encode_opts *opts,
                                 const struct qdp_input *in, struct qdp_state_info **ret);

/* The same request as a dry run: the plan and per-device arithmetic; nothing is allocated on the
 * daemon. An infeasible plan is a successful call with (*ret)->feasible == 0. Streamed inputs
 * above inline_max are described by shape only. */
QDP_EXPORT qdp_status qdp_plan(qdp_client *c, const struct qdp_encode_opts *opts,
                               const struct qdp_input *in, struct qdp_plan_info **ret);

QDP_EXPORT qdp_status qdp_describe(qdp_client *c, const char *handle, const char *token,
                                   struct qdp_state_info **ret);

/* The calling identity's own states (its uid on the Unix socket, its token's principal on TCP). */
QDP_EXPORT qdp_status qdp_list(qdp_client *c, struct qdp_state_list **ret);

/* Every identity's states (since 0.4): for the daemon's own user and root; PERMISSION_DENIED for
 * anyone else. */
QDP_EXPORT qdp_status qdp_list_all(qdp_client *c, struct qdp_state_list **ret);

/* Releases a state; ret_freed_bytes may be NULL. token "" (since 0.4) releases one of the calling
 * identity's own states by its handle alone, so a lost token strands no memory. */
QDP_EXPORT qdp_status qdp_release(qdp_client *c, const char *handle, const char *token,
                                  uint64_t *ret_freed_bytes);

struct qdp_fetch_opts {
  size_t struct_size;
  uint64_t offset;      /* first amplitude over the flattened [batch, 2^n] array */
  uint64_t count;       /* amplitudes; 0 = to the end */
  uint32_t chunk_bytes; /* bytes per streamed message; 0 = the daemon's default (1 MiB) */
  qdp_progress_fn progress;
  void *progress_arg;
};

/* clang-format off */
#define QDP_FETCH_OPTS_INIT \
  {sizeof(struct qdp_fetch_opts), 0, 0, 0, NULL, NULL}
/* clang-format on */

/* Streams amplitudes [offset, offset + count) into dst, in the state's dtype (interleaved re, im).
 * Fails with QDP_ERR_INVALID_ARGUMENT (field "dst_bytes") before anything is written past dst when
 * the range does not fit. ret_bytes (may be NULL) receives the bytes written. opts may be NULL. */
QDP_EXPORT qdp_status qdp_fetch(qdp_client *c, const char *handle, const char *token,
                                const struct qdp_fetch_opts *opts, void *dst, size_t dst_bytes,
                                size_t *ret_bytes);

/* Streams the range into a local .npy file: shape (batch, 2^n) for a whole batch, (2^n,) for a
 * whole single state, (count,) for a sub-range. The file appears complete or not at all; an
 * existing file is refused unless overwrite. */
QDP_EXPORT qdp_status qdp_fetch_npy(qdp_client *c, const char *handle, const char *token,
                                    const struct qdp_fetch_opts *opts, const char *path,
                                    int overwrite);

/* Has the daemon write the state as .npy at path, on its node. Over the Unix socket this process
 * creates the file beside path with its own rights (relative paths are taken from the working
 * directory) and hands it to the daemon, which fills it; the file then gets its name, complete
 * or not at all. Over TCP path is absolute and must lie beneath the daemon's export_dir. An
 * existing file is refused unless overwrite. ret_path (may be NULL; free with qdp_free) gets the
 * path written, ret_bytes (may be NULL) the file's size. */
QDP_EXPORT qdp_status qdp_export(qdp_client *c, const char *handle, const char *token,
                                 const char *path, int overwrite, char **ret_path,
                                 uint64_t *ret_bytes);

QDP_EXPORT qdp_status qdp_get_status(qdp_client *c, struct qdp_server_status **ret);

QDP_EXPORT qdp_status qdp_get_health(qdp_client *c, qdp_health *ret);

/* ---- Registered shared-memory regions (since 0.2) ------------------------------------------ */

/* A region the daemon mapped once; filled by qdp_region_register. */
struct qdp_region_info {
  size_t struct_size;
  char handle[64];
  char token[64];
  char owner[72];
  uint64_t bytes; /* the region's size */
  int sealed;     /* it cannot shrink (a memfd with F_SEAL_SHRINK): no job checks it for a cut */
  int pinned;     /* page-locked for the daemon's GPUs */
  int64_t created_unix_ms;
  /* Since 0.7: sealed against writing too (F_SEAL_WRITE): its bytes can no longer change. A
   * caller built before it passes a struct_size without it and is not told. */
  int frozen;
};

/* clang-format off */
#define QDP_REGION_INFO_INIT \
  {sizeof(struct qdp_region_info), "", "", "", 0, 0, 0, 0, 0}
/* clang-format on */

/* Registers a shared-memory region of this node with the daemon: by name ("/my-input"), or name
 * NULL and pid + fd (this process's own fd, or /proc/<pid>/fd/<fd> opened with this process's
 * rights); the descriptor is handed to the daemon, so a Unix socket target is needed. The
 * daemon maps the whole object once
 * (and pins it on GPUs); encodes then name it with qdp_input.region / region_token. ret_info must
 * be initialised with QDP_REGION_INFO_INIT. The region stays registered until
 * qdp_region_unregister, or until this process has been gone for the daemon's lease_grace (since
 * 0.6; QDP_REGION_KEEP: until unregistered). */
QDP_EXPORT qdp_status qdp_region_register(qdp_client *c, const char *name, int pid, int fd,
                                          struct qdp_region_info *ret_info);

/* The same for a region the daemon may also write (since 0.5): the object is opened here for
 * reading and writing (O_RDWR) and handed over for writing, then mapped read-write (MAP_SHARED),
 * an output of qdp_fetch_into as well as an input. */
QDP_EXPORT qdp_status qdp_region_register_writable(qdp_client *c, const char *name, int pid, int fd,
                                                   struct qdp_region_info *ret_info);

/* Flags of qdp_region_register_flags (since 0.6), or'ed together. */
enum {
  QDP_REGION_WRITABLE = 1u, /* as qdp_region_register_writable */
  /* The region outlives this process, until qdp_region_unregister (or the daemon's exit): for a
   * region one program registers for others to name, as `qdpctl region add` does. */
  QDP_REGION_KEEP = 2u,
};

/* qdp_region_register with flags (since 0.6); unknown flags are INVALID_ARGUMENT. A daemon that
 * predates QDP_REGION_KEEP ignores it, and unregisters no region by itself either. */
QDP_EXPORT qdp_status qdp_region_register_flags(qdp_client *c, const char *name, int pid, int fd,
                                                unsigned flags, struct qdp_region_info *ret_info);

/* Forgets a region; an encode reading it finishes first. */
QDP_EXPORT qdp_status qdp_region_unregister(qdp_client *c, const char *handle, const char *token);

/* Has the daemon copy amplitudes [opts->offset, + opts->count) of a state straight into a region
 * this identity registered writable (since 0.5), at byte region_offset: no message carries them.
 * opts may be NULL (the whole state); its chunk_bytes and progress are unused. ret_bytes (may be
 * NULL) receives the bytes written. OUT_OF_RANGE (need_bytes, free_bytes) when they do not fit,
 * FAILED_PRECONDITION for a region registered read-only or a TCP target. */
QDP_EXPORT qdp_status qdp_fetch_into(qdp_client *c, const char *handle, const char *token,
                                     const struct qdp_fetch_opts *opts, const char *region,
                                     const char *region_token, uint64_t region_offset,
                                     uint64_t *ret_bytes);

/* ---- Sessions (since 0.7) -----------------------------------------------------------------------
 * What a client makes naming a session (qdp_encode_opts.session) is released when the session
 * ends: qdp_session_close, the exit of the process that opened it (the daemon watches it through
 * the connection), or no call naming it for heartbeat_ms. Only this identity may name it. */

#define QDP_SESSION_ID_LEN 34 /* "c" + 32 hex digits + NUL */

/* Opens a session; its id into ret_id (QDP_SESSION_ID_LEN bytes). heartbeat_ms 0: none (it ends
 * with this process; a TCP client has none on the daemon's node and must give one, calling
 * qdp_session_heartbeat within it). label (NULL: none) names it in the daemon's log. */
QDP_EXPORT qdp_status qdp_session_open(qdp_client *c, uint64_t heartbeat_ms, const char *label,
                                       char *ret_id);
/* Marks the session alive now; QDP_ERR_NOT_FOUND (field "session") once it has ended. */
QDP_EXPORT qdp_status qdp_session_heartbeat(qdp_client *c, const char *id);
/* Ends the session now, releasing the states and regions made in it: how many states and their
 * bytes (either pointer may be NULL). QDP_ERR_NOT_FOUND as qdp_session_heartbeat. */
QDP_EXPORT qdp_status qdp_session_close(qdp_client *c, const char *id, uint32_t *ret_states,
                                        uint64_t *ret_freed_bytes);

/* ---- Zero-copy shard views and gather (since 0.3) ------------------------------------------ */

/* One shard of a state, mapped into this process's GPU memory. */
struct qdp_view {
  size_t struct_size;
  void *data;    /* the shard's first amplitude: device memory of this process */
  int device_id; /* CUDA ordinal of the shard's GPU in this process (found by its UUID) */
  /* The shard's layout: rows [row_first, + rows) of the batch, amplitudes [first, + count) of
   * each, row-major [rows][count] in state->dtype. */
  const struct qdp_shard *shard;
};

/* The views of one state, owned by the client that opened them. */
struct qdp_views {
  size_t struct_size;
  const struct qdp_state_info *state; /* the daemon's description when they were opened */
  uint64_t lease_id;
  size_t count; /* == state->nshards */
  const struct qdp_view *views;
  int writable; /* since 0.7: opened with QDP_VIEWS_WRITE */
};

/* What views are for (since 0.7). QDP_VIEWS_WRITE takes the state's exclusive write lease: it
 * opens only while no other view of the state is open and no call is reading it, and until the
 * views are closed the daemon reads none of its amplitudes (every such call answers
 * FAILED_PRECONDITION naming the lease); the state is marked written for good. */
enum qdp_views_mode { QDP_VIEWS_READ = 0, QDP_VIEWS_WRITE = 1 };

struct DLManagedTensor;

/* Opens every shard of a state in this process (CUDA IPC, same node as a GPU daemon), under one
 * lease: until the views are closed, or this process has exited for the daemon's lease_grace,
 * the daemon keeps the state's memory even when the state is released or expires. Cached per
 * handle in the client: opening the same handle again returns the same views. *ret stays valid
 * until qdp_views_close, qdp_release of the handle on this client, or qdp_client_destroy, which
 * all close the views. QDP_ERR_UNIMPLEMENTED where libqdp was built without CUDA;
 * FAILED_PRECONDITION from a daemon on host memory (cpu:N) or when this process does not see a
 * shard's GPU; QDP_ERR_CUDA (cause: cudaError_t) when opening a handle fails. */
QDP_EXPORT qdp_status qdp_views_open(qdp_client *c, const char *handle, const char *token,
                                     const struct qdp_views **ret);

/* qdp_views_open for `mode` (since 0.7). Writable views: the amplitudes are complete when this
 * returns, and what this process writes through them is what the daemon reads once
 * qdp_views_close returns (it waits for the views' devices first; work of this process queued on
 * them after that is not covered). FAILED_PRECONDITION from the daemon when another lease is
 * open, a call is reading the state or another write lease holds it (the holder in the message);
 * locally when this client holds read views of the handle (close them first). Views of a handle
 * already opened writable are returned for QDP_VIEWS_READ too. */
QDP_EXPORT qdp_status qdp_views_open_mode(qdp_client *c, const char *handle, const char *token,
                                          enum qdp_views_mode mode, const struct qdp_views **ret);

/* Unmaps the state's views in this process and closes their lease on the daemon; writable views
 * after waiting for every device they are on (cudaDeviceSynchronize), so that the daemon's next
 * read sees what was written (QDP_ERR_CUDA when that wait fails: the lease is closed anyway).
 * NOT_FOUND when this client has no views of the handle. */
QDP_EXPORT qdp_status qdp_views_close(qdp_client *c, const char *handle);

/* Shard i of v as a DLPack tensor: kDLCUDA on the view's device_id, shape [rows, count], complex
 * (code 5) of 64 or 128 bits, compact row-major. The tensor borrows the view's memory: its
 * deleter frees only the tensor, and the views must stay open while it is used. */
QDP_EXPORT qdp_status qdp_view_dlpack(const struct qdp_views *v, size_t i,
                                      struct DLManagedTensor **ret);

/* Closes one lease (as a qdp_views_close would) by its id, for callers that keep leases
 * themselves (Encode with opts->ipc, another process's views). ret_freed_bytes (may be NULL):
 * the state's bytes when this close freed a released state, else 0. */
QDP_EXPORT qdp_status qdp_close_view(qdp_client *c, const char *handle, const char *token,
                                     uint64_t lease_id, uint64_t *ret_freed_bytes);

/* Copies the whole state onto one device of the daemon ("cuda:0", or its index "0") as a new
 * state with its own handle and token (*ret, as qdp_encode's). RESOURCE_EXHAUSTED with the
 * numbers (qdp_last_error's need_bytes, free_bytes) when it does not fit. ttl_seconds 0: the
 * daemon's default. */
QDP_EXPORT qdp_status qdp_gather(qdp_client *c, const char *handle, const char *token,
                                 const char *device, uint64_t ttl_seconds,
                                 struct qdp_state_info **ret);

/* ---- The kernel matrix (since 0.7) ----------------------------------------------------------- */

/* What a kernel call computed. */
struct qdp_kernel_info {
  size_t struct_size;
  uint64_t rows, cols; /* a's samples, b's */
  /* QDP_DTYPE_FLOAT64 (FLOAT32 for complex64 states) for |<a_i|b_j>|^2; the states' dtype for
   * QDP_KERNEL_OVERLAPS */
  qdp_dtype dtype;
  uint64_t bytes;  /* rows * cols * the dtype's size */
  char device[32]; /* where it was computed: "cuda:0" */
  double compute_ms;
};

/* clang-format off */
#define QDP_KERNEL_INFO_INIT \
  {sizeof(struct qdp_kernel_info), 0, 0, QDP_DTYPE_UNSPECIFIED, 0, {0}, 0}
/* clang-format on */

enum {
  QDP_KERNEL_OVERLAPS = 1u, /* the complex overlaps <a_i|b_j> instead of |<a_i|b_j>|^2 */
};

/* The kernel matrix of two resident states, computed by the daemon where their shards are:
 * K[i][j] = |<a_i|b_j>|^2 for every sample i of a and j of b (b NULL: a with itself, computed
 * once per pair), row-major into dst (dst_bytes; OUT_OF_RANGE with need_bytes when the matrix is
 * larger). Summed over blocks along one fixed tree: the same bits however the states are sharded.
 * A matrix over a reply's 64 MiB goes through a shared-memory region made for the call (a Unix
 * target). INVALID_ARGUMENT (field "b") for states of other qubits or dtype; NOT_FOUND for a
 * released state or a wrong token. ret_info (may be NULL) must be QDP_KERNEL_INFO_INIT. */
QDP_EXPORT qdp_status qdp_kernel(qdp_client *c, const char *a, const char *a_token, const char *b,
                                 const char *b_token, unsigned flags, void *dst, size_t dst_bytes,
                                 struct qdp_kernel_info *ret_info);

/* The same into a local .npy file of shape (rows, cols), which appears complete or not at all;
 * an existing file is refused unless overwrite. */
QDP_EXPORT qdp_status qdp_kernel_npy(qdp_client *c, const char *a, const char *a_token,
                                     const char *b, const char *b_token, unsigned flags,
                                     const char *path, int overwrite,
                                     struct qdp_kernel_info *ret_info);

/* The kernel matrix of the states of inputs, with no state kept: the daemon encodes a's samples
 * (and b's; b NULL: a with itself) with opts's encoding, qubits and dtype a piece at a time on
 * one device, pairs the pieces there, and frees them; K[i][j] as qdp_kernel gives it (past a
 * reply's 64 MiB through a region, as there), into dst (dst_bytes; OUT_OF_RANGE with need_bytes
 * when the matrix is larger). max_bytes bounds the device memory that holds amplitudes (0: the
 * tiles of qdp_kernel): angle, basis and phase go a block of amplitudes of every row at a time
 * (with max_bytes 0, in qdp_kernel's tiles and with its bits), the other encodings a tile of
 * whole rows at a time, the most rows whose two tiles fit (for tiles of T rows of n qubits in
 * complex128, 2*T*2^n*16 bytes); the partial sums of the products come on top. Smaller pieces
 * cost more encodes, not other values.
 *  - Inputs: a and b are qdp_inputs as qdp_encode takes them, but the call is one request, so
 *    nothing is streamed: INLINE, SERVER_FILE and SHM (a region too) go as for qdp_encode; an
 *    UPLOAD's data and a LOCAL_FILE's values (read as qdp_input.raw says) travel in the request
 *    up to inline_max bytes and beyond it, over a Unix target, in a shared-memory region libqdp
 *    makes for the call and unregisters before it returns (over TCP, INVALID_ARGUMENT field
 *    "input.inline_max": raise it or name a SERVER_FILE). chunk_bytes and progress are unused.
 *  - opts: encoding, qubits, dtype, and the placement: policy AUTO or SINGLE (any other is
 *    INVALID_ARGUMENT, field "encode.placement.policy"), devices the ones to choose from (the
 *    matrix is computed on one). ttl_seconds and label are unused (nothing is kept); ipc is
 *    refused (INVALID_ARGUMENT, field "ipc").
 *  - Refusals: max_bytes too small for a tile of one row, INVALID_ARGUMENT field "max_bytes" with
 *    need_bytes the least that works; a device without room for the tiles, RESOURCE_EXHAUSTED
 *    (need_bytes, free_bytes); a bad value of an input, as qdp_encode's, its message naming the
 *    rows of its tile ("rows 2 to 3"). libqdp's own refusals of b's input name its fields
 *    "input_b..." (of a's, "input..." as qdp_encode's).
 * Since 0.7. ret_info (may be NULL) must be QDP_KERNEL_INFO_INIT. */
QDP_EXPORT qdp_status qdp_kernel_of(qdp_client *c, const struct qdp_encode_opts *opts,
                                    const struct qdp_input *a, const struct qdp_input *b,
                                    uint64_t max_bytes, unsigned flags, void *dst, size_t dst_bytes,
                                    struct qdp_kernel_info *ret_info);

/* The same into a local .npy file of shape (rows, cols), as qdp_kernel_npy writes it. */
QDP_EXPORT qdp_status qdp_kernel_of_npy(qdp_client *c, const struct qdp_encode_opts *opts,
                                        const struct qdp_input *a, const struct qdp_input *b,
                                        uint64_t max_bytes, unsigned flags, const char *path,
                                        int overwrite, struct qdp_kernel_info *ret_info);

/* ---- Measurements (since 0.7) --------------------------------------------------------------- */

/* What a measurement computed: rows (the state's samples) x cols float64 values. */
struct qdp_measure_info {
  size_t struct_size;
  uint64_t rows, cols, bytes;
  char device[32];
  double compute_ms;
};

/* clang-format off */
#define QDP_MEASURE_INFO_INIT {sizeof(struct qdp_measure_info), 0, 0, 0, {0}, 0}
/* clang-format on */

/* Per sample of a resident state, computed by the daemon where its shards are, row-major into dst
 * (dst_bytes; OUT_OF_RANGE with need_bytes when smaller): the probabilities of the outcomes of
 * `nqubits` qubits (outcome m has bit j = qubit qubits[j]; cols 2^nqubits, at most 10 qubits), or
 * with nqubits 0 of every basis state (cols 2^n). Summed in double along one fixed tree: the same
 * bits however the state is sharded. INVALID_ARGUMENT (field "qubits") for a qubit the state does
 * not have or one named twice. ret_info (may be NULL) must be QDP_MEASURE_INFO_INIT. */
QDP_EXPORT qdp_status qdp_probabilities(qdp_client *c, const char *handle, const char *token,
                                        const uint32_t *qubits, size_t nqubits, double *dst,
                                        size_t dst_bytes, struct qdp_measure_info *ret_info);

/* The same for the expectation values <psi|P|psi> of npaulis Pauli strings (cols npaulis): one
 * letter per qubit, I, X, Y or Z, letter k on qubit k. INVALID_ARGUMENT (field "paulis") for a
 * string of the wrong length or letter, or none. */
QDP_EXPORT qdp_status qdp_expectations(qdp_client *c, const char *handle, const char *token,
                                       const char *const *paulis, size_t npaulis, double *dst,
                                       size_t dst_bytes, struct qdp_measure_info *ret_info);

/* `shots` basis states of each sample drawn by their probabilities, as int64 indices into dst
 * ([rows][shots]; OUT_OF_RANGE with need_bytes when smaller): shot i of sample r is drawn with a
 * number of (seed, r, i) alone, so a seed gives the same samples however the state is sharded.
 * INVALID_ARGUMENT for shots 0 or past 2^24 in all ("shots"), a state of more than 38 qubits
 * ("state"). */
QDP_EXPORT qdp_status qdp_sample(qdp_client *c, const char *handle, const char *token,
                                 uint64_t shots, uint64_t seed, int64_t *dst, size_t dst_bytes,
                                 struct qdp_measure_info *ret_info);

/* One unary call with its request already serialized (the protobuf encoding of the method's
 * request message in proto/qdp.proto), for bindings that build their own messages and want this
 * transport: method is the RPC's name ("Encode"), unary methods only. timeout_ms < 0: the
 * client's timeout; 0: none. On success *ret_reply (freed with qdp_free) holds the serialized
 * reply, *ret_len bytes of it. A failure fills qdp_last_error() as every call does (the daemon's
 * status, message and ErrorDetail fields); UNIMPLEMENTED (field "method") for a name the
 * service lacks. Since 0.7. */
QDP_EXPORT qdp_status qdp_call(qdp_client *c, const char *method, const void *request,
                               size_t request_len, int64_t timeout_ms, void **ret_reply,
                               size_t *ret_len);

#ifdef __cplusplus
}
#endif
#endif /* QDP_H */
