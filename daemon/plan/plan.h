/* plan.h — placement planning: where each shard of a state goes and what every device must hold.
 *
 * The daemon plans a job before it allocates anything (docs/design.md: one job end to end,
 * placement): validate the request, resolve the policy, cut the state (or the batch) into
 * contiguous shards over the device set, and count per device the shard bytes + input staging +
 * workspace against the device's budget.
 * A plan is computed for any valid request, feasible or not, so a dry run can show the arithmetic;
 * plan_check_feasible turns an infeasible plan into a refusal that names the numbers.
 *
 * Pure C: no CUDA, no MPI, no I/O, no logging, no globals; deterministic (the same request and
 * world give the same plan on every rank). Any thread; reentrant.
 *
 * Statuses: INVALID_ARGUMENT for a bad request (reterr->field names the request field, the message
 * the value and what was expected); INTERNAL for an inconsistent world (a runtime bug, not the
 * client's); RESOURCE_EXHAUSTED for a failed host allocation (plan_compute) or an infeasible plan
 * (plan_check_feasible).
 *
 * Invariants of every plan: the shards tile [0, batch) x [0, 2^qubits) exactly (no gap, no
 * overlap), are ordered by (row_first, first), each holds count >= 1 and rows >= 1, their bytes sum
 * to total_bytes, and no device holds more than one shard. The caller owns the plan and frees it
 * with plan_destroy.
 */
#ifndef QDP_PLAN_H
#define QDP_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "error.h"
#include "qdp_defs.h"

/* The hard ceiling on qubits whatever the configuration says: 2^60 complex64 amplitudes are 2^63
 * bytes, the last power of two a uint64 byte count can hold. */
#define PLAN_MAX_QUBITS 60

/* A NORM reduction's (amplitude's) workspace: one double per row for the shard's sum of squares,
 * plus one double per PLAN_NORM_LEAF amplitudes of the shard for the partial sums of the first
 * reduction level (the tree reduces each leaf block to one partial, then the partials to the row's
 * sum). */
#define PLAN_NORM_LEAF 1024u

/* IQP's Walsh-Hadamard stages over the global bits pair each shard with a partner shard; the pair
 * exchanges its data in chunks of at most this many bytes, so the receive buffer stays bounded
 * whatever the shard size (256 MiB keeps each transfer long enough to reach link bandwidth). */
#define PLAN_EXCHANGE_CHUNK_BYTES (256ull << 20)

enum plan_policy {
  PLAN_AUTO = 0, /* numbers = proto Policy */
  PLAN_SINGLE = 1,
  PLAN_EVEN = 2,
  PLAN_UNEVEN = 3,
  PLAN_CAPACITY = 4,
  PLAN_BATCH = 5
};

/* "auto", "single", "even", "uneven", "capacity", "batch"; "unknown" for any other value. */
const char *plan_policy_name(enum plan_policy p);
/* Inverse of plan_policy_name: 1 and *ret set when the name is known, else 0. */
int plan_policy_from_name(const char *name, enum plan_policy *ret);

struct plan_device {     /* one device of the world as the planner sees it */
  int rank;              /* MPI rank that owns it (0 in a world of one) */
  int ordinal;           /* device ordinal on that rank */
  char name[32];         /* "cpu:0", "cuda:1"; "r1/cuda:0" when the world has several ranks */
  uint64_t budget_bytes; /* what qdp may hold on it now (configured budget minus bytes in use) */
};

/* devices: any order; the planner walks them by (rank, ordinal). Every rank is in [0, ranks) and
 * no (rank, ordinal) pair appears twice. */
struct plan_world {
  const struct plan_device *devices;
  size_t count;
  int ranks;
  /* Optional [count][count]: the cost of an exchange between devices i and j over what joins
   * them (lower is faster, e.g. NVLink 1, PCIe 2, no peer path 3); NULL: every pair alike. */
  const uint8_t *link_cost;
};

/* A zero field means "no limit of its own"; max_qubits is capped at PLAN_MAX_QUBITS in any case.
 * A NULL plan_limits means no limits beyond the hard ceiling. */
struct plan_limits {
  uint32_t max_qubits;
  uint64_t max_batch;
  uint64_t max_state_bytes;
};

struct plan_request {
  qdp_encoding encoding;
  uint32_t qubits;
  uint64_t batch;             /* samples, >= 1 */
  uint64_t values_per_sample; /* input values per sample as given */
  qdp_dtype in_dtype, out_dtype;
  enum plan_policy policy;
  const size_t *device_subset; /* indices into world->devices, in the order shards take them;
                                  NULL or a count of 0 = every device, in world order */
  size_t device_subset_count;
  uint64_t staging_bytes; /* per device used for input staging (runtime's figure) */
  /* 1: the state is written into memory its caller owns (an encode into the caller's own
   * allocation), not into shards the daemon allocates: the needs count no shard bytes. */
  int output_external;
  /* The top bits of an iqp state that every device of the world transforms alone (the runtime's
   * figure: 3 on the CPU and CUDA backends): shards whose edges fall on multiples of
   * 2^(qubits - them) need no exchange over those bits. */
  uint32_t iqp_top_bits;
};

struct plan_shard {
  size_t device; /* index into world->devices */
  int rank, ordinal;
  uint64_t first, count;    /* amplitude range [first, first + count) within each sample */
  uint64_t row_first, rows; /* sample range */
  uint64_t bytes;           /* count * rows * sizeof(out dtype) */
};

struct plan_need { /* per device of the plan, in shard order (needs[i] is shards[i]'s device) */
  size_t device;
  int rank, ordinal;
  char name[32];
  uint64_t shard_bytes; /* the shard's bytes; 0 when the output is external */
  uint64_t staging_bytes, workspace_bytes;
  uint64_t need_bytes; /* the sum of the three; UINT64_MAX if it overflows */
  uint64_t budget_bytes;
  int fits; /* need_bytes <= budget_bytes */
};

struct plan {
  enum plan_policy policy; /* resolved (never AUTO) */
  qdp_encoding encoding;
  uint32_t qubits;
  uint64_t batch;
  qdp_dtype in_dtype, out_dtype;
  uint64_t amplitudes;  /* 2^qubits */
  uint32_t global_bits; /* g when the shards are 2^g equal ranges in index order, else 0 */
  uint64_t total_bytes; /* batch * 2^qubits * sizeof(out dtype) */
  int feasible;         /* every need fits */
  size_t nshards;
  struct plan_shard *shards; /* ordered by (row_first, first) */
  size_t nneeds;
  struct plan_need *needs;
  int ranks;              /* the world's rank count when planned */
  uint64_t staging_bytes; /* the request's per-device staging figure */
  int output_external;    /* the request's: needs hold shard_bytes 0 */
  /* An encoding with a WHT exchange (iqp, iqp-z): min(qubits, the request's iqp_top_bits), the top
   * bits the devices transform alone (the exchange runs over the global bits below them); 0 for
   * the other encodings. */
  uint32_t iqp_top_bits;
};

/* Checks the request against the world and the limits without placing anything: encoding, qubits,
 * batch, values per sample, dtypes, policy, device subset, total size, and what the policy needs
 * of the device set (EVEN: a power-of-two set no larger than 2^qubits; UNEVEN/CAPACITY: no more
 * devices than amplitudes; none but BATCH/SINGLE/AUTO with batch > 1). Whether iqp's ranges suit
 * its global-bit exchange is known only once they are placed: plan_compute checks it.
 * INVALID_ARGUMENT with the field set; INTERNAL for an inconsistent world;
 * RESOURCE_EXHAUSTED if the duplicate check cannot get its few bytes of host memory. */
qdp_status plan_validate(const struct plan_request *req, const struct plan_world *world,
                         const struct plan_limits *lim, struct qdp_error *reterr);

/* Validates, resolves the policy, places the shards and computes every device's need. Succeeds for
 * any valid request, feasible or not (plan->feasible says which), so a dry run can show the
 * arithmetic; INVALID_ARGUMENT for bad requests; RESOURCE_EXHAUSTED only for host allocation.
 *
 * Policies, over the device set S (D devices, N = 2^qubits amplitudes, B = batch):
 *  SINGLE    one shard on the device of S with the largest budget (ties: earliest in S).
 *  EVEN      D = 2^g equal shards of N / 2^g amplitudes; global_bits = g. With link costs and
 *            4 <= D <= 8, the devices take the shards in the order that makes the global-bit
 *            stages cheapest (each stage as slow as its worst pair; ties keep S's order).
 *  UNEVEN    D contiguous ranges: the first N mod D get ceil(N / D) amplitudes, the rest floor.
 *  CAPACITY  D contiguous ranges proportional to each device's usable bytes (budget minus
 *            staging; all-zero usable bytes count as equal), largest-remainder rounding, and a
 *            device whose quota rounds to zero takes one amplitude from the largest shard.
 *  BATCH     whole samples: K = min(D, B) devices (the K largest budgets, kept in S's order), the
 *            first B mod K get ceil(B / K) samples, the rest floor. With B = 1 it is SINGLE.
 *  AUTO      B > 1: BATCH. Else SINGLE when it fits; else EVEN over S when D is a power of two
 *            and that fits; else CAPACITY (over the N largest budgets when D > N). iqp/iqp-z use
 *            EVEN over the 2^k largest budgets, 2^k the largest power of two <= min(D, N); when
 *            that does not fit and the devices take its top K >= 1 bits alone, CAPACITY over the
 *            min(D, N, 2^K) largest.
 * Any plan whose shards are 2^g equal ranges gets global_bits = g. An iqp/iqp-z plan that splits
 * a sample into anything else (UNEVEN over a D that is no power of two, CAPACITY over unequal
 * room) needs devices that transform its top K = iqp_top_bits bits alone (K >= 1): its edges are
 * then moved to the nearest multiples of 2^(n-K), or to the other neighbour where only that keeps
 * the shard within its budget (each shard keeps at least one such block, so at most 2^K shards),
 * and no shard exchanges anything. Without them (K = 0), or over more than 2^K
 * devices, it is refused, INVALID_ARGUMENT on placement.policy with the ranges it made: its
 * Walsh-Hadamard stages exchange between equal shard pairs.
 */
qdp_status plan_compute(const struct plan_request *req, const struct plan_world *world,
                        const struct plan_limits *lim, struct plan **ret_plan,
                        struct qdp_error *reterr);

/* QDP_OK when feasible; else RESOURCE_EXHAUSTED with a message naming, per device that does not
 * fit, what was needed (shard + staging + workspace) and what was available, followed by a hint
 * (lower 'qubits', use complex64, add devices); the list ends in "..." when the message would pass
 * its size. reterr's need_bytes/free_bytes/device/rank are those of the worst device (the largest
 * shortfall; ties: earliest in the plan). */
qdp_status plan_check_feasible(const struct plan *p, struct qdp_error *reterr);

void plan_destroy(struct plan *p); /* NULL-safe */

/* Part of the state of p (one shard, of one rank) for an encode that writes it into memory its
 * caller holds (output external): `rows` samples (the first `rows` of an input that starts where
 * they do) and amplitudes [first, first + count) of each, on p's device. A whole state (first 0,
 * count 2^qubits) is a window of any encoding; a range of one only of an encoding whose
 * amplitudes are each a function of its sample's parameters alone (no norm over the sample, no
 * transform across it: whether is plan_windows_amplitudes). INVALID_ARGUMENT for anything else;
 * RESOURCE_EXHAUSTED without host memory. */
qdp_status plan_window(const struct plan *p, uint64_t rows, uint64_t first, uint64_t count,
                       struct plan **ret, struct qdp_error *reterr);
/* Whether plan_window takes a range of amplitudes of encoding e. */
bool plan_windows_amplitudes(qdp_encoding e);

/* The shards a rank owns (each rank materializes only its own): writes up to `cap` indices into
 * p->shards, in shard order, to ret_idx (which may be NULL when cap is 0) and returns how many the
 * rank owns in all, which may exceed cap. */
size_t plan_rank_shards(const struct plan *p, int rank, size_t *ret_idx, size_t cap);

/* Workspace a device needs beyond its shard and staging (bytes, saturating at UINT64_MAX), by what
 * the encoding's row needs (common/qdp_encodings.h):
 *  a NORM reduction (amplitude)  8 * rows * (1 + ceil(count / PLAN_NORM_LEAF)): the row's sum of
 *                   squares and the partial sums of the first reduction level;
 *  a WHT exchange (iqp, iqp-z)  min(s->bytes, PLAN_EXCHANGE_CHUNK_BYTES) when p->global_bits >
 *                   p->iqp_top_bits: the receive buffer of the pairwise global-bit exchange; else
 *                   0 (in place);
 *  neither (angle, phase, basis)  0: every amplitude is computed in closed form in place. */
uint64_t plan_workspace_bytes(const struct plan *p, const struct plan_shard *s);

#endif /* QDP_PLAN_H */
