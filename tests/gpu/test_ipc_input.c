/* CUDA IPC input through the job pipeline (daemon/job, runtime open_ipc): a child process (the
 * client) allocates device memory on cuda:0, fills it and exports its IPC handle; this process
 * (the daemon's side) encodes from the handle over every GPU of its mesh and compares the state
 * bit for bit with the same values sent inline: amplitude as one sample over even shards and as a
 * batch split by sample (shards on other GPUs read with peer copies), angle (parameters checked
 * on the host). A range past the allocation is OUT_OF_RANGE with the numbers, an unknown UUID
 * FAILED_PRECONDITION naming the GPUs owned.
 *
 * The two processes and the program around them are the fixture of tests/gpu/ipc_fixture.h (the
 * client forked before this process touches CUDA). Exits 77 without a GPU. A plain program, no
 * Check.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc_fixture.h"

#define AMP_COLS 1000 /* per sample, of 2^10 amplitudes */
#define AMP_ROWS 4
#define ANGLE_N 6
#define ANGLE_ROWS 8
#define AMP_AT 256 /* byte offsets of the two inputs in the client's allocation */
#define ANGLE_AT (AMP_AT + AMP_ROWS * AMP_COLS * 8)
#define ALLOC_BYTES (ANGLE_AT + ANGLE_ROWS * ANGLE_N * 8)

/* The client's allocation: values throughout, both inputs among them. */
static void values(unsigned char *buf) {
  double *x = (double *)buf;
  for (size_t i = 0; i < ALLOC_BYTES / 8; i++) {
    x[i] = 0.05 + 0.21 * (double)(i % 13) - 0.9 * (double)(i % 3 == 0);
  }
}

/* The same request from the handle and inline: the same bits. */
static void same_bits(struct qdpt_ipc *d, const char *what, struct job_encode_request req,
                      const double *inline_values) {
  struct qdp_error e = QDP_ERROR_INIT;
  uint64_t nb = 0, nv = 0;
  unsigned char *got = qdpt_ipc_encode_read(d, &req, &nb, &e);
  CHECK(got, "%s from the handle: %s", what, e.msg);
  req.input = (struct job_input){.source = QDP_SOURCE_VALUES,
                                 .dtype = QDP_DTYPE_FLOAT64,
                                 .rows = req.input.rows,
                                 .cols = req.input.cols,
                                 .values = inline_values,
                                 .bytes = req.input.rows * req.input.cols * 8,
                                 .fd = -1};
  unsigned char *want = qdpt_ipc_encode_read(d, &req, &nv, &e);
  CHECK(want, "%s inline: %s", what, e.msg);
  CHECK(got && want && nb == nv && memcmp(got, want, nb) == 0, "%s: the bits differ", what);
  printf("test_ipc_input: %s: %" PRIu64 " B %s\n", what, nb,
         got && want && memcmp(got, want, nb) == 0 ? "same bits" : "DIFFER");
  free(got);
  free(want);
}

static void run(struct qdpt_ipc *d) {
  static double host[ALLOC_BYTES / 8];
  values((unsigned char *)host);
  struct job_encode_request req = {.input = {.source = QDP_SOURCE_CUDA_IPC,
                                             .dtype = QDP_DTYPE_FLOAT64,
                                             .rows = 1,
                                             .cols = AMP_COLS,
                                             .ipc_handle = d->handle,
                                             .ipc_handle_len = 64,
                                             .device_uuid = d->gpu0.uuid,
                                             .offset = AMP_AT,
                                             .fd = -1},
                                   .encoding = QDP_ENCODING_AMPLITUDE,
                                   .qubits = 10,
                                   .placement = {.policy = PLAN_EVEN}};
  same_bits(d, "amplitude, one sample, even shards", req, host + AMP_AT / 8);
  req.input.rows = AMP_ROWS;
  req.placement.policy = PLAN_BATCH;
  same_bits(d, "amplitude, a batch split by sample", req, host + AMP_AT / 8);
  req.input.rows = ANGLE_ROWS;
  req.input.cols = ANGLE_N;
  req.input.offset = ANGLE_AT;
  req.encoding = QDP_ENCODING_ANGLE;
  req.qubits = ANGLE_N;
  same_bits(d, "angle, a batch", req, host + ANGLE_AT / 8);

  struct job_state_info st;
  struct qdp_error e = QDP_ERROR_INIT;
  req.input.offset = ALLOC_BYTES - 8; /* 8 rows of 6 values from the last one */
  CHECK(job_encode(d->jp, &d->me, &req, &st, &e) == QDP_ERR_OUT_OF_RANGE &&
            e.need_bytes == ANGLE_ROWS * ANGLE_N * 8,
        "past the allocation: %s", e.msg);
  req.input.offset = ANGLE_AT;
  req.input.device_uuid = "GPU-00000000-0000-0000-0000-000000000000";
  CHECK(job_encode(d->jp, &d->me, &req, &st, &e) == QDP_ERR_FAILED_PRECONDITION &&
            strstr(e.msg, d->gpu0.uuid),
        "unknown GPU: %s", e.msg);
}

int main(void) {
  struct qdpt_ipc_spec spec = {
      .name = "test_ipc_input", .alloc_bytes = ALLOC_BYTES, .fill = values, .run = run};
  return qdpt_ipc_main(&spec);
}
