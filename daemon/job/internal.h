/* internal.h — what the pipeline's files share: the pipeline itself and the steps every job that
 * makes or describes a state goes through. */
#ifndef QDP_JOB_INTERNAL_H
#define QDP_JOB_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "job.h"

struct job_pipeline {
  struct runtime_mesh *mesh;
  struct world *world;
  struct state_store *store;
  struct region_registry *regions;
  struct session_table *sessions;
  uint64_t lease_grace_ms; /* how long a region outlives its exited process */
  /* The devices' fixed facts (names, UUIDs) for naming shards: every rank's, planner order. */
  struct runtime_device_info *devs;
  size_t ndev;
  struct io_file_id own[8];
  size_t nown;
  atomic_uint_fast32_t max_qubits;
  atomic_uint_fast64_t max_batch;
  /* Upload memory held (job_upload_admit): every identity's, and each one's while it holds any. */
  atomic_uint_fast64_t upload_budget, client_upload_budget;
  pthread_mutex_t uploads_mu;
  uint64_t upload_held;
  struct job_upload_owner *upload_owners;
};

/* Sets up and ends the count of upload memory (upload.c). */
void job_uploads_init(struct job_pipeline *jp);
void job_uploads_end(struct job_pipeline *jp);

/* INVALID_ARGUMENT "<field>.handle is missing" for an empty handle. */
qdp_status job_check_handle(const char *handle, const char *field, struct qdp_error *reterr);

/* Refused with `when` in the message when the caller no longer waits: at the start
 * (only a passed deadline refuses) or before a commit (a caller that left as well). */
qdp_status job_check_caller(const struct job_caller *caller, bool committing,
                            struct qdp_error *reterr);

/* NOT_FOUND (field "session") unless the caller names no session or an open one of its own,
 * which the call then counts as a heartbeat (session.c). */
qdp_status job_check_session(struct job_pipeline *jp, const struct job_caller *caller,
                             struct qdp_error *reterr);

/* Ends the sessions session_sweep finds ended, releasing what they hold; returns how many. */
size_t job_sweep_sessions(struct job_pipeline *jp, int64_t now_unix_ms,
                          const struct job_expire_report *report);

/* Pins state (handle, token) into *ret (put back with state_store_put): NOT_FOUND and the other
 * refusals name `field`. */
qdp_status job_pin_state(struct job_pipeline *jp, const char *handle, const char *token,
                         const char *field, struct runtime_state **ret, struct qdp_error *reterr);

/* Fills info from a state's record and its payload (pinned by the caller). */
void job_info_fill(struct job_state_info *info, const struct state_meta *meta,
                   struct runtime_state *st);

/* Opens one new lease on info's pinned state for process pid (0: the caller's own), the exclusive
 * write lease when `write`, and marks the state written then (runtime_state_mark_written). */
qdp_status job_lease_state(struct job_pipeline *jp, const struct job_caller *caller, int pid,
                           bool write, struct job_state_info *info, struct qdp_error *reterr);
/* Opens views (enum job_views) of every shard of info's pinned state under one new lease
 * (job_lease_state): the handles and descriptors first, so that a refusal leaves no lease
 * behind. */
qdp_status job_open_views(struct job_pipeline *jp, const struct job_caller *caller, int pid,
                          unsigned views, struct job_state_info *info, struct qdp_error *reterr);

/* Commits a new state (Encode, Gather) under the reservation and describes it into *ret, pinned
 * from the commit on (a Release or expiry meanwhile frees it only at job_state_info_end), with
 * views when asked. res and st are consumed in every case (st destroyed on failure); the state
 * is released again when its views cannot be opened, since no one could receive its handle. */
qdp_status job_commit(struct job_pipeline *jp, const struct job_caller *caller,
                      struct state_reservation *res, struct runtime_state *st,
                      uint64_t ttl_seconds, const char *label, unsigned views, int pid,
                      struct job_state_info *ret, struct qdp_error *reterr);

/* ---- the kernel matrix from inputs (encode.c) ---- */

/* Its inputs resolved and its tile plans made (job_kernel's refusals from inputs), for
 * job_kernel_inputs_write, then job_kernel_inputs_close (which takes a NULL ki). */
struct job_kernel_inputs;
qdp_status job_kernel_inputs_open(struct job_pipeline *jp, const struct job_caller *caller,
                                  const struct job_kernel_request *req,
                                  struct job_kernel_inputs **ret, struct qdp_error *reterr);
/* The rows (a's samples), columns (b's, or a's) and the states' dtype. */
void job_kernel_inputs_shape(const struct job_kernel_inputs *ki, uint64_t *ret_rows,
                             uint64_t *ret_cols, qdp_dtype *ret_dtype);
/* The matrix into dst (host memory), DATA_LOSS when a mapped input shrank or changed since
 * job_kernel_inputs_open. */
qdp_status job_kernel_inputs_write(struct job_pipeline *jp, struct job_kernel_inputs *ki,
                                   bool overlaps, void *dst, const char **ret_device,
                                   struct qdp_error *reterr);
void job_kernel_inputs_close(struct job_pipeline *jp, struct job_kernel_inputs *ki);

/* ---- a caller's region written (region.c) ---- */

struct job_region;
/* The region a call (`method`, for messages) writes, pinned into *ret (put back by the caller
 * with region_registry_put, even on failure): the caller's own (a token alone is not enough to
 * write into another identity's memory), registered writable, and not lost. */
qdp_status job_output_region(struct job_pipeline *jp, const struct job_caller *caller,
                             const char *region, const char *token, const char *method,
                             struct job_region **ret, struct qdp_error *reterr);
/* OUT_OF_RANGE (field "region_offset" when `at` is past the end, else `field`; need_bytes and
 * free_bytes set) unless `bytes` fit in g at `at`; `what` says what they are ("8 amplitudes"). */
qdp_status job_region_fits(const struct job_region *g, const char *name, uint64_t at,
                           uint64_t bytes, const char *what, const char *field,
                           struct qdp_error *reterr);
/* write(arg, g's mapping + at) under the SIGBUS guard: a region cut meanwhile is marked lost and
 * the call DATA_LOSS. */
qdp_status job_region_write(struct job_region *g, const char *name, uint64_t at,
                            qdp_status (*write)(void *arg, void *dst, struct qdp_error *reterr),
                            void *arg, struct qdp_error *reterr);

/* ---- an encode into the caller's allocation (output.c) ---- */

/* The caller's allocation while its job runs: its GPU, then its mapping and what the runtime
 * writes. */
struct job_sink {
  size_t device; /* mesh index of its GPU (rank 0's, so also its planner index) */
  struct runtime_ipc_input ipc;
  struct runtime_output out;
};

/* Checks req->out against the request and the resolved input `in` (job_encode lists the
 * refusals), then finds its GPU: FAILED_PRECONDITION on the CPU backend or for a GPU the mesh
 * does not own. Opens nothing. */
qdp_status job_sink_find(struct job_pipeline *jp, const struct job_encode_request *req,
                         const struct runtime_input *in, struct job_sink *ret,
                         struct qdp_error *reterr);
/* The placement job_placement resolved (*count devices in subset, 0: none named), made the
 * state whole on sink's GPU: INVALID_ARGUMENT ("placement.devices") when it names another. */
qdp_status job_sink_place(const struct job_pipeline *jp, const struct job_sink *sink,
                          enum plan_policy *policy, size_t *subset, size_t *count,
                          struct qdp_error *reterr);
/* Opens the allocation for the job and fills sink->out for plan p: OUT_OF_RANGE for a range
 * past it, INVALID_ARGUMENT for one that overlaps a device input `in`. On failure what was
 * opened stays in sink, for job_sink_close. */
qdp_status job_sink_open(struct job_pipeline *jp, const struct job_output *o,
                         const struct runtime_input *in, const struct plan *p,
                         struct job_sink *sink, struct qdp_error *reterr);
/* job_sink_open's first half, for any writer: opens o's allocation on sink->device and checks
 * [offset, offset + bytes) against it (OUT_OF_RANGE), filling sink->out. */
qdp_status job_sink_open_range(struct job_pipeline *jp, const struct job_output *o,
                               struct job_sink *sink, struct qdp_error *reterr);
/* Closes what job_sink_open opened (the memory stays the caller's). Safe on a zeroed sink. */
void job_sink_close(struct job_pipeline *jp, struct job_sink *sink);

#endif /* QDP_JOB_INTERNAL_H */
