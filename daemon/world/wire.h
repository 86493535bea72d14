/* wire.h — the messages between the ranks of a world and the tags they travel on. Internal to
 * world/.
 *
 * Every message is point to point and bounded in time (transport_io_within), so no rank can be
 * blocked for ever by another. The coordinator sends control messages on one tag, in order: a
 * fixed-size msg_header whose `type` says which of its typed bodies is filled, then the payloads
 * that body announces. Everything that belongs to one job or one read (replies, the all-gather of
 * norm blocks, the exchanges of the global-bit stages) goes on tags derived from its sequence
 * number, so a message a failed job left behind can never be taken for one of a later job.
 * Every rank runs the same build (world_start checks), so structs travel as they are.
 */
#ifndef QDP_WORLD_WIRE_H
#define QDP_WORLD_WIRE_H

#include <stdint.h>

#include "error.h"

#define TAG_CONTROL 1
/* Replies and peer traffic of sequence number s: 2 + 2k and 3 + 2k, k = s mod 16383, all within
 * TRANSPORT_TAG_MAX; a tag comes back only 16383 jobs later. */
#define TAG_SEQS 16383u

static inline int reply_tag(uint64_t seq) {
  return 2 + 2 * (int)(seq % TAG_SEQS);
}

static inline int peer_tag(uint64_t seq) {
  return 3 + 2 * (int)(seq % TAG_SEQS);
}

enum msg_type { MSG_JOB = 1, MSG_RELEASE = 2, MSG_READ = 3, MSG_STOP = 4, MSG_EXPORT = 5 };

/* MSG_JOB: the plan (plan_bytes: struct plan, its shards, its needs) follows, then payload_bytes:
 * the rank's window of the input, values [window_first, window_first + window_count) of the
 * flattened input; or with JOB_FROM_FILE the file's path and, after its NUL, the struct
 * runtime_file_id of the file the caller handed over (the rank opens the path, checks that it
 * found that very file, and reads its window itself, from byte file_offset + window_first * value
 * size on). */
struct msg_job {
  uint64_t plan_bytes;
  uint64_t window_first, window_count;
  uint64_t cols; /* input values per sample */
  uint64_t payload_bytes;
  uint64_t file_offset;
};
#define JOB_FROM_FILE 1u
#define JOB_DEVICE_GROUP 2u /* the job's collectives may use the world's device group */

/* MSG_READ: amplitudes [offset, offset + count) of the job's state, `bytes` of them. */
struct msg_read {
  uint64_t offset, count, bytes;
};

/* MSG_EXPORT: the zero-copy view of one shard of the job's state. */
struct msg_export {
  uint64_t shard;
};

/* MSG_STOP: flags STOP_LOST: a rank was lost, do not finalize MPI. MSG_RELEASE has no body. */
#define STOP_LOST 1u

struct msg_header {
  uint32_t type, flags;
  uint64_t job; /* the job, or the job whose state a READ, EXPORT or RELEASE is about */
  uint64_t seq; /* the sequence number the reply's tag comes from (a job's is the job) */
  union {
    struct msg_job run;
    struct msg_read read;
    struct msg_export view;
  } body;
};

/* Every answer: a job's outcome, a read's or view's (its data follows), a stop's acknowledgement.
 */
struct msg_reply {
  int32_t status;
  int32_t group_lost; /* this rank's device group was aborted: the coordinator stops using it */
  struct qdp_error err;
};

/* What each rank tells the others at start. Plans and errors travel as the structs themselves,
 * so the sizes must agree too. */
struct wire_mesh {
  char version[32];
  uint32_t sizes[4]; /* struct plan, plan_shard, plan_need, runtime_device_info */
  char host[64];
  uint32_t ndev, pad;
  /* followed by ndev struct runtime_device_info */
};

#endif /* QDP_WORLD_WIRE_H */
