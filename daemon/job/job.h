/* job.h — the pipeline of every job qdpd runs for its clients: encode and its plan-only dry run,
 * fetch, export, gather, views, describe, list, release, status, registered regions, expiry.
 *
 * Contract:
 *  - Plain C in and out: requests are the structs below, results caller-owned structs, failures a
 *    qdp_status with its struct qdp_error (numbers included). Nothing here knows the wire: the
 *    transport unpacks a request, resolves what the caller handed over into descriptors (the
 *    trust boundary, docs/trust-boundary.md), calls job_*, and packs the result.
 *  - Who asks comes as struct job_caller: the identity the kernel gave (states, regions, budgets
 *    and listing key on it, never on what the caller says) and whether it still waits.
 *  - Every job goes through the world (a world of one without MPI), but an encode into a caller's
 *    allocation, whose one shard is on this rank's device (checked): it runs on the mesh. A
 *    descriptor in a request is taken in every case: kept by the mapping it becomes, or closed.
 *  - Any thread; the pipeline takes no lock of its own (the store, registry and world have
 *    theirs) but the short one over its count of upload memory. Calls that free device memory
 *    may block: worker threads, not an event loop.
 */
#ifndef QDP_JOB_H
#define QDP_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "io/map.h"
#include "plan/plan.h"
#include "qdp_source.h"
#include "runtime/runtime.h"
#include "state/regions.h"
#include "state/sessions.h"
#include "state/store.h"
#include "state/tickets.h"
#include "world/world.h"

struct job_pipeline;

struct job_deps {
  struct runtime_mesh *mesh;
  struct world *world; /* the ranks jobs are planned over */
  struct state_store *store;
  uint32_t max_regions;        /* 0 = unlimited */
  uint32_t max_client_regions; /* of one identity; 0 = unlimited */
  /* A region whose registering process has been gone this long is unregistered by job_expire,
   * as the store ends such a process's view leases (lease_grace). */
  uint64_t lease_grace_ms;
  struct session_limits sessions;
  const struct io_file_id *own_files; /* the daemon's own files: never written for a caller */
  size_t nown;
};

/* Creates the pipeline, its region registry and its session table; the mesh, world and store stay the caller's and
 * must outlive it. */
qdp_status job_pipeline_create(const struct job_deps *deps, struct job_pipeline **ret,
                               struct qdp_error *reterr);
/* Ends every region (no job may be running). NULL-safe. */
void job_pipeline_destroy(struct job_pipeline *jp);
/* The planner's limits; changeable at any time (SIGHUP). */
void job_set_limits(struct job_pipeline *jp, uint32_t max_qubits, uint64_t max_batch);
int job_world_ranks(const struct job_pipeline *jp);
/* Device i of the world (planner order) and the host of a rank, for naming shards; NULL past the
 * end. */
const struct runtime_device_info *job_device(const struct job_pipeline *jp, size_t i);
const char *job_rank_host(const struct job_pipeline *jp, int rank);

/* Why a caller no longer waits, as flags: it left (cancelled, connection closed), its deadline
 * passed. */
enum { JOB_CALLER_LEFT = 1u, JOB_CALLER_LATE = 2u };

struct job_caller {
  const char *owner; /* identity key: "uid:<n>" or "tcp:<principal>" */
  int pid;           /* its process as the kernel says; 0 unknown (TCP) */
  int pidfd; /* that process's pidfd, taken at accept (borrowed for the call); 0 or -1: none */
  /* The session (sessions.h) the call's new states and regions end with; NULL or "": none. */
  const char *session;
  bool operator;     /* the daemon's own user or root: may list every identity's states */
  /* JOB_CALLER_* flags, 0 while it waits; NULL: it always does. */
  unsigned (*gone)(const void *arg);
  const void *arg;
};

/* ---- requests' fields, checked (INVALID_ARGUMENT naming the field) ---- */

/* The shape of `nbytes` of input values: rows 0 means 1; cols 0 means nbytes / (rows * size).
 * INVALID_ARGUMENT ("<field>.dtype", ".rows", ".cols" or "<field>") for an unknown or unsupported
 * dtype, an empty input, a size that is not rows * cols * size, or an overflowing product. */
qdp_status job_input_shape(int dtype, uint64_t rows, uint64_t cols, uint64_t nbytes,
                           const char *field, uint64_t *ret_rows, uint64_t *ret_cols,
                           struct qdp_error *reterr);
/* The shape an input declares without its values (a Plan of data still to be streamed): rows 0
 * means 1; cols is required. INVALID_ARGUMENT for an unsupported dtype, cols 0, or a byte count
 * past 64 bits. */
qdp_status job_declared_shape(int dtype, uint64_t rows, uint64_t cols, const char *field,
                              uint64_t *ret_rows, uint64_t *ret_cols, struct qdp_error *reterr);
/* The most bytes an upload declared as (dtype, rows, cols) may send: rows * cols * size when cols
 * is given (*ret_exact = true: it must send exactly that), else max_upload_bytes.
 * RESOURCE_EXHAUSTED when the declared size passes max_upload_bytes. */
qdp_status job_upload_limit(int dtype, uint64_t rows, uint64_t cols, uint64_t max_upload_bytes,
                            uint64_t *ret_limit, bool *ret_exact, struct qdp_error *reterr);
/* The state's dtype: COMPLEX64 or COMPLEX128; UNSPECIFIED means COMPLEX128. */
qdp_status job_output_dtype(int dtype, qdp_dtype *ret, struct qdp_error *reterr);

struct job_placement {
  int policy;                 /* enum plan_policy; 0 = auto */
  const char *const *devices; /* names of the world's devices to use; none: every live one */
  size_t ndevices;
};
/* The policy and device subset of a placement against the planner's devs (n of them);
 * ret_subset holds n entries; *ret_count 0 = every device. */
qdp_status job_placement(const struct job_placement *pl, const struct plan_device *devs, size_t n,
                         enum plan_policy *ret_policy, size_t *ret_subset, size_t *ret_count,
                         struct qdp_error *reterr);
/* A ttl in milliseconds (0 stays 0: the store's default), saturating. */
uint64_t job_ttl_ms(uint64_t ttl_seconds);

/* ---- encode ---- */

struct job_input {
  enum qdp_source source; /* NONE: a declared shape, which plans take and encodes refuse */
  const char *field;      /* how messages name it: "input", "request.input" */
  int dtype;              /* as the request says (a FILE says its own) */
  uint64_t rows, cols;    /* as the request says: 0 derives them */
  const void *values;     /* VALUES, UPLOAD: `bytes` bytes, the caller's until the call returns */
  uint64_t bytes;
  int fd;                  /* FILE, SHM: taken */
  const char *path;        /* FILE: as named; other ranks open it and must find this file */
  const char *what;        /* SHM: how messages name it */
  uint64_t offset, length; /* SHM, REGION: the bytes read */
  const char *region, *region_token; /* REGION */
  /* CUDA_IPC: the allocation's handle (ipc_handle_len bytes, RUNTIME_IPC_HANDLE_BYTES expected),
   * offset is the first value's byte offset in it, device_uuid its GPU. */
  const unsigned char *ipc_handle;
  size_t ipc_handle_len;
  const char *device_uuid;
};

/* Where an encode writes its state instead of keeping it: a same-node client's CUDA allocation
 * by IPC handle (ipc_handle_len bytes, RUNTIME_IPC_HANDLE_BYTES expected) on the GPU of
 * device_uuid; the state's first amplitude at byte offset, `bytes` offered from there. */
struct job_output {
  const unsigned char *ipc_handle;
  size_t ipc_handle_len;
  uint64_t offset, bytes;
  const char *device_uuid;
};

struct job_encode_request {
  struct job_input input;
  const struct job_output *out; /* NULL: a new state, committed to the store */
  int encoding;                 /* qdp_encoding */
  uint32_t qubits;
  int output_dtype;
  struct job_placement placement;
  uint64_t ttl_seconds;
  const char *label;
  bool views;       /* open zero-copy views of the new state for the caller */
  bool descriptors; /* ... and take them as descriptors (JOB_VIEWS_FDS) */
  int client_pid; /* the views' process; 0: the caller's own */
};

/* A live state as a reply describes it, pinned until job_state_info_end. */
struct job_state_info {
  struct state_meta meta;
  const struct plan *plan;
  const char *collective;
  double encode_ms;
  double collective_ms; /* the part of encode_ms spent between shards (0 on one device) */
  /* job_encode's other phases: reading the input in (ingest: resolving and mapping it), planning
   * and admitting, committing the new state (0 with out=). */
  double ingest_ms, plan_ms, commit_ms;
  char token[STATE_TOKEN_LEN]; /* a new state's token (Encode, Gather); else "" */
  uint64_t lease;              /* views opened under this lease; 0: none */
  /* A write lease was ever opened on it: its amplitudes are its holders', not necessarily the
   * encoding's. */
  bool overwritten;
  struct runtime_ipc *ipc;     /* views: one per shard of plan; descriptors closed at the end */
  /* The tickets that name the shards' descriptors once rpc/ handed them to the caller
   * (state/tickets.h; "" for a shard with an IPC handle); NULL: none yet. */
  char (*tickets)[FD_TICKET_LEN];
  /* private */
  void *pinned;
  bool fresh; /* committed by this job: released when its handle cannot be handed over */
  struct runtime_state *written; /* an encode into the caller's allocation: what describes it */
};

/* Plan, feasibility, admission against the caller's budgets, encode across the world, the
 * data-loss check of mapped inputs, and the commit, refused (nothing kept) when the caller left
 * or its deadline passed meanwhile. *ret is the new state (views opened when asked).
 *
 * With req->out the state goes into the caller's allocation and nothing is committed: *ret has
 * the plan, collective and encode_ms, an empty meta (no handle, no owner) and no token, and the
 * amplitudes are in place when it returns. The request is checked before any device is looked
 * at: INVALID_ARGUMENT for a handle of the wrong length ("out.ipc_handle"), views ("views"), a
 * policy that shards ("placement.policy"), more than one device named ("placement.devices"), an
 * offset not a multiple of the dtype's size ("out.offset"), and fewer bytes than the state's
 * ("out.bytes", need_bytes and free_bytes set). Then FAILED_PRECONDITION ("out") on the CPU
 * backend and ("out.device_uuid") for a GPU the mesh does not own; INVALID_ARGUMENT
 * ("placement.devices") for a device named other than that GPU; OUT_OF_RANGE ("out.offset",
 * "out.bytes") for a range past the allocation the driver reports, INVALID_ARGUMENT ("out") for
 * one that overlaps a CUDA IPC input. The job counts as one reservation of 0 bytes against the
 * store's state limits while it runs; the plan's needs hold no shard bytes (the caller holds
 * them). */
qdp_status job_encode(struct job_pipeline *jp, const struct job_caller *caller,
                      const struct job_encode_request *req, struct job_state_info *ret,
                      struct qdp_error *reterr);
/* The dry run: the plan job_encode would make (req->views, ttl and label unused, but for out's
 * checks, which are job_encode's: its GPU is found and nothing opened), which the caller
 * destroys; *ret_why gets why it is infeasible (code QDP_OK when it is feasible). */
qdp_status job_plan(struct job_pipeline *jp, const struct job_caller *caller,
                    const struct job_encode_request *req, struct plan **ret_plan,
                    struct qdp_error *ret_why, struct qdp_error *reterr);
/* Unpins a state info. handed_over false for a fresh state means its handle could not be sent:
 * it is released, since no one else could. NULL-safe and safe on a zeroed info. */
void job_state_info_end(struct job_pipeline *jp, struct job_state_info *info, bool handed_over);

/* ---- uploads: the host memory of values still arriving ---- */

/* The host memory all uploads in flight may hold together, and each identity's (SIGHUP may
 * change them; what is held already stays held). */
void job_set_upload_budgets(struct job_pipeline *jp, uint64_t upload_budget,
                            uint64_t client_upload_budget);
/* Takes `bytes` more upload memory for identity `owner`: RESOURCE_EXHAUSTED (field "data", the
 * budget and the bytes held and asked in the message, need_bytes and free_bytes set) when
 * upload_budget or the owner's client_upload_budget would pass; nothing is taken then. An owner
 * of 64 B or more is INVALID_ARGUMENT. */
qdp_status job_upload_admit(struct job_pipeline *jp, const char *owner, uint64_t bytes,
                            struct qdp_error *reterr);
/* Gives back `bytes` that job_upload_admit took for owner (clamped to what it holds). */
void job_upload_release(struct job_pipeline *jp, const char *owner, uint64_t bytes);
/* Upload memory held by every identity together, and by `owner` (may be NULL). */
void job_upload_usage(struct job_pipeline *jp, const char *owner, uint64_t *ret_all,
                      uint64_t *ret_owner);

/* ---- states ---- */

/* What a Describe opens beside the record: nothing, views under a lease, or writable views under
 * the exclusive write lease (state/store.h says what it excludes). */
/* The views a call asks for: none, read or write; with JOB_VIEWS_FDS the caller takes shards
 * handed out as descriptors (runtime_ipc.fd), without it such shards refuse views
 * (FAILED_PRECONDITION: the caller predates them). */
enum job_views { JOB_VIEWS_NONE = 0, JOB_VIEWS_READ = 1, JOB_VIEWS_WRITE = 2, JOB_VIEWS_FDS = 4 };

/* The state (handle, token), with views opened for process pid (0: the caller) when asked. The
 * record is described while a write lease is open; views then are FAILED_PRECONDITION. */
qdp_status job_describe(struct job_pipeline *jp, const struct job_caller *caller,
                        const char *handle, const char *token, unsigned views, int pid,
                        struct job_state_info *ret, struct qdp_error *reterr);

/* Calls fn for the caller's states (every identity's with all, for operators only), under the
 * store's lock: fn must only copy. */
qdp_status job_list(struct job_pipeline *jp, const struct job_caller *caller, bool all,
                    void (*fn)(const struct job_state_info *info, void *arg), void *arg,
                    struct qdp_error *reterr);

/* Releases the state: by its token, or without one when the caller owns it. */
qdp_status job_release(struct job_pipeline *jp, const struct job_caller *caller, const char *handle,
                       const char *token, uint64_t *ret_freed, struct qdp_error *reterr);

qdp_status job_close_view(struct job_pipeline *jp, const char *handle, const char *token,
                          uint64_t lease, uint64_t *ret_freed, struct qdp_error *reterr);

/* A new state holding all of (handle, token) on device `device` (a name), owned by the caller. */
qdp_status job_gather(struct job_pipeline *jp, const struct job_caller *caller, const char *handle,
                      const char *token, const char *device, uint64_t ttl_seconds,
                      const char *label, struct job_state_info *ret, struct qdp_error *reterr);

/* A read of amplitudes [next, end) of a pinned state, chunk by chunk. */
struct job_fetch {
  struct runtime_state *state; /* pinned while non-NULL */
  uint64_t next, end, total;
  qdp_dtype dtype;
  unsigned esize; /* bytes per amplitude */
};
/* count 0: to the end. OUT_OF_RANGE past the state's amplitudes. */
qdp_status job_fetch_open(struct job_pipeline *jp, const char *handle, const char *token,
                          uint64_t offset, uint64_t count, struct job_fetch *ret,
                          struct qdp_error *reterr);
/* Reads the next n amplitudes into dst and moves on. */
qdp_status job_fetch_read(struct job_fetch *f, uint64_t n, void *dst, struct qdp_error *reterr);
void job_fetch_close(struct job_pipeline *jp, struct job_fetch *f); /* idempotent */

struct job_export_request {
  const char *handle, *token;
  const char *path;
  int fd; /* >= 0: the file the caller handed over for writing (taken); else written beneath: */
  const struct io_folder *folder; /* created and renamed there with the daemon's rights */
  bool overwrite;
};
/* Writes the state as a .npy file; *ret_bytes its size. */
qdp_status job_export(struct job_pipeline *jp, const struct job_export_request *req,
                      uint64_t *ret_bytes, struct qdp_error *reterr);

/* ---- registered regions ---- */

struct job_region_info {
  struct region_meta meta;
  char token[REGION_TOKEN_LEN];
  bool sealed; /* it cannot shrink (F_SEAL_SHRINK): no job checks it for a cut */
  bool frozen; /* sealed against writing too (F_SEAL_WRITE, F_SEAL_FUTURE_WRITE): read-only */
  bool pinned, writable;
};
struct job_region_request {
  int fd;           /* the shared memory the caller handed over: taken */
  const char *what; /* how messages name it */
  /* Mapped read-write MAP_SHARED, an output of job_fetch_into too (fd must be O_RDWR, handed over
   * for writing: the transport checks the ticket's access). */
  bool writable;
  /* Outlives the caller's process: never swept, only unregistered (a region one program
   * registers for others to name). */
  bool keep;
};

/* Maps the shared memory of req->fd whole, page-locks it when the backend wants that, and files
 * it under the caller and, unless req->keep, its process (caller->pid, the kernel's word: a
 * region of a process that exited without unregistering it is swept by job_expire; pid 0, a TCP
 * caller with no process on the node, never is); refused before anything is mapped past
 * max_regions or the caller's max_client_regions. */
qdp_status job_register_region(struct job_pipeline *jp, const struct job_caller *caller,
                               const struct job_region_request *req, struct job_region_info *ret,
                               struct qdp_error *reterr);

struct job_fetch_into_request {
  const char *handle, *token;        /* the state */
  uint64_t offset, count;            /* amplitudes, as job_fetch_open; count 0: to the end */
  const char *region, *region_token; /* a region the caller registered writable */
  uint64_t region_offset;            /* bytes into it */
};

struct job_fetch_into_result {
  uint64_t count, bytes; /* amplitudes and bytes written */
  qdp_dtype dtype;
};

/* Copies the amplitudes straight into the region's mapping (device to host on GPUs, a DMA when
 * the region is pinned), state and region pinned meanwhile. NOT_FOUND for an unknown state or
 * region (or a wrong token); PERMISSION_DENIED for a region of another identity;
 * FAILED_PRECONDITION for one registered without writable; OUT_OF_RANGE (need_bytes, free_bytes)
 * when the bytes do not fit at region_offset; DATA_LOSS when the region shrank under the write
 * (it is lost for every later job). */
qdp_status job_fetch_into(struct job_pipeline *jp, const struct job_caller *caller,
                          const struct job_fetch_into_request *req,
                          struct job_fetch_into_result *ret, struct qdp_error *reterr);
/* Unregisters a region of caller's (NULL: the daemon's own call, any region by handle and token):
 * PERMISSION_DENIED, naming its owner, for another identity's region even with its token;
 * an empty token unregisters the caller's own region by handle alone (regions.h). */
qdp_status job_unregister_region(struct job_pipeline *jp, const struct job_caller *caller,
                                 const char *handle, const char *token, uint64_t *ret_bytes,
                                 struct qdp_error *reterr);

/* ---- the kernel matrix (compute.c) ---- */

struct job_kernel_request {
  const char *a, *a_token; /* the states */
  const char *b, *b_token; /* b NULL or "": a with itself */
  bool overlaps;           /* <a_i|b_j> rather than |<a_i|b_j>|^2 */
  const char *region, *region_token; /* NULL or "": the values come back in the result */
  uint64_t region_offset;
  /* The form from inputs (a and b unset): encode->input's states (and input_b's, NULL: a with
   * itself, with encode's encoding, qubits, dtype and placement) encoded a piece at a time on one
   * device and kept nowhere (runtime_inputs_kernel: by blocks or by rows), the amplitudes held
   * within max_bytes of device memory (0: the resident form's tiles). encode's out, views and ttl
   * are not for this form. */
  const struct job_encode_request *encode;
  const struct job_input *input_b;
  uint64_t max_bytes;
  /* The caller's CUDA allocation to write the matrix into (NULL: a region or the result). */
  const struct job_output *out;
};

struct job_kernel_result {
  uint64_t rows, cols, bytes;
  qdp_dtype dtype;     /* FLOAT64/FLOAT32 for |.|^2, the states' dtype for overlaps */
  void *values;        /* without a region: malloc'd, `bytes` long, the caller frees it */
  char device[32];     /* the device that computed it */
  double compute_ms;
};

/* runtime_state_kernel on the two states, pinned meanwhile, into a region the caller registered
 * writable (its refusals as job_fetch_into's, field "region") or, with none, into host memory
 * the result hands over: RESOURCE_EXHAUSTED (field "region", need_bytes, free_bytes) past
 * inline_max bytes. NOT_FOUND for an unknown state or wrong token (field "a" or "b").
 * From inputs: runtime_inputs_kernel on the device the planner's SINGLE policy picks among
 * placement's devices, with the pieces that fit max_bytes (INVALID_ARGUMENT, field "max_bytes",
 * need_bytes for one row, when none does); an encode's refusals as Encode's;
 * INVALID_ARGUMENT for a policy other than auto or single (field "encode.placement.policy") or
 * an encode field this form has no use for. DATA_LOSS when a mapped input shrank meanwhile.
 * Into out: FAILED_PRECONDITION on the CPU backend, INVALID_ARGUMENT for a handle of the wrong
 * length, an offset not aligned to a value, too few bytes (need_bytes, free_bytes) or a region
 * besides; OUT_OF_RANGE past the allocation; NOT_FOUND for a GPU the mesh does not own. */
qdp_status job_kernel(struct job_pipeline *jp, const struct job_caller *caller,
                      const struct job_kernel_request *req, uint64_t inline_max,
                      struct job_kernel_result *ret, struct qdp_error *reterr);

/* ---- measurements (compute.c) ---- */

enum { /* proto Measurement */
  JOB_MEASURE_PROBABILITIES = 1,
  JOB_MEASURE_EXPECTATIONS = 2,
  JOB_MEASURE_SAMPLES = 3,
};
/* The most shots of one Measure (for every sample of the state together). */
#define JOB_MEASURE_SHOTS_MAX (UINT64_C(1) << 24)

struct job_measure_request {
  const char *handle, *token;
  int measurement;
  const uint32_t *qubits; /* PROBABILITIES: the qubits measured; none: every basis state */
  size_t nqubits;
  const char *const *paulis; /* EXPECTATIONS: strings of I, X, Y, Z, letter k on qubit k */
  size_t npaulis;
  uint64_t shots, seed; /* SAMPLES */
  const char *region, *region_token; /* NULL or "": the values come back in the result */
  uint64_t region_offset;
};

struct job_measure_result {
  uint64_t rows, cols, bytes; /* float64 values (int64 indices for SAMPLES), [rows][cols] */
  void *values;               /* without a region: malloc'd, the caller frees it */
  char device[32];
  double compute_ms;
};

/* runtime_state_measure (runtime_state_sample for SAMPLES) on the state, pinned meanwhile, into a
 * region or the result as job_kernel's values go. INVALID_ARGUMENT for an unknown measurement
 * ("measurement"), qubits or strings or shots with another measurement, no string, a string of
 * the wrong length or letter ("paulis"), shots 0 or past JOB_MEASURE_SHOTS_MAX in all ("shots"),
 * and the runtime's refusals. */
qdp_status job_measure(struct job_pipeline *jp, const struct job_caller *caller,
                       const struct job_measure_request *req, uint64_t inline_max,
                       struct job_measure_result *ret, struct qdp_error *reterr);

/* ---- the daemon ---- */

struct job_status {
  const char *backend, *topology_source, *collectives, *transport, *threads;
  int ranks;
  uint64_t rank_timeout_ms;
  char device_collectives[192];
  struct world_device *devices; /* every device of the world */
  size_t ndevices;
  struct runtime_link *links; /* this node's, nlocal x nlocal, row-major */
  size_t nlocal;
  struct world_rank_info *rank_info; /* ranks of them */
  uint64_t used_bytes;
  uint32_t states, leases, regions;
  uint64_t region_bytes;
  uint32_t max_qubits;
};
qdp_status job_status(struct job_pipeline *jp, struct job_status *ret, struct qdp_error *reterr);
void job_status_free(struct job_status *st); /* NULL-safe */
/* Ranks of the world marked lost (0 in a world of one): cheap, for health checks. */
int job_ranks_lost(struct job_pipeline *jp);

/* ---- sessions (session.c): states and regions that end with their client ---- */

/* What ending a session released. */
struct job_session_end {
  size_t states, regions;
  uint64_t bytes; /* the states' */
};

/* Opens a session of the caller, ending with its process (caller->pid, by its pidfd where there
 * is one) and, with heartbeat_ms, when no call names it for that long; refusals as session_open. */
qdp_status job_open_session(struct job_pipeline *jp, const struct job_caller *caller,
                            uint64_t heartbeat_ms, const char *label, struct session_info *ret,
                            struct qdp_error *reterr);
/* A heartbeat of the caller's session `id`; NOT_FOUND (field "session") once it has ended. */
qdp_status job_heartbeat(struct job_pipeline *jp, const struct job_caller *caller, const char *id,
                         struct session_info *ret, struct qdp_error *reterr);
/* Ends the caller's session `id` now and releases its states and regions (their view leases end
 * as they close); NOT_FOUND as job_heartbeat. Blocks while memory is freed: a worker's call. */
qdp_status job_close_session(struct job_pipeline *jp, const struct job_caller *caller,
                             const char *id, struct job_session_end *ret, struct qdp_error *reterr);

/* What one sweep of job_expire ended. */
struct job_expiry {
  size_t states;   /* released past their lifetime */
  size_t leases;   /* view leases of exited processes */
  size_t regions;  /* regions of exited processes, unregistered */
  size_t sessions; /* of exited processes or lapsed heartbeats: their states and regions released */
};

/* What job_expire reports as it goes, each call outside the locks (any may be NULL): every
 * region swept, before its payload ends, and every session ended, with why and what it
 * released. */
struct job_expire_report {
  void (*region)(const struct region_meta *meta, void *arg);
  void (*session)(const struct session_info *s, const char *why, const struct job_session_end *e,
                  void *arg);
  void *arg;
};

/* Releases the states past their lifetime, ends the leases and unregisters the regions of
 * processes gone for lease_grace, ends the sessions whose process exited or whose heartbeat
 * lapsed (releasing what they hold), as of now_unix_ms, and gives back device memory kept for
 * reuse that has gone unused (runtime_mesh_trim). report may be NULL. Blocks while memory is
 * freed and regions unpinned: a worker's call. */
void job_expire(struct job_pipeline *jp, int64_t now_unix_ms,
                const struct job_expire_report *report, struct job_expiry *ret);

#endif /* QDP_JOB_H */
