/* An encode into a client's CUDA allocation through the job pipeline (job_encode with out, the
 * runtime writing into memory opened by runtime_mesh_open_ipc): a child process (the client)
 * allocates device memory on cuda:0 holding an input area and a poisoned output area, exports its
 * IPC handle and reads the allocation back on request; this process (the daemon's side) encodes
 * into it. The client sees the bits the same job gives as a state (inline input: an amplitude
 * batch in complex128, angle in complex64; CUDA IPC input from the same allocation), written only
 * in the state's range, and nothing kept or reserved after. Refusals leave the allocation as it
 * was: too few bytes offered (INVALID_ARGUMENT), a range past the allocation
 * (OUT_OF_RANGE), an output that shares bytes with the input (INVALID_ARGUMENT), an unknown UUID
 * (FAILED_PRECONDITION), and with two GPUs a device named other than the allocation's.
 *
 * The two processes and the program around them are the fixture of tests/gpu/ipc_fixture.h (the
 * client forked before this process touches CUDA; 'R' and 'I' its reads and resets). Exits 77
 * without a GPU. A plain program, no Check.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc_fixture.h"

#define AMP_QUBITS 10
#define AMP_COLS 1000 /* per sample, of 2^10 amplitudes */
#define AMP_ROWS 4
#define ANGLE_N 8
#define ANGLE_ROWS 3
#define IN_AT 256          /* byte offsets in the client's allocation: the input values */
#define OUT_AT (64 * 1024) /* the output area, poisoned, 64 KiB: the amplitude state exactly */
#define OUT_BYTES (AMP_ROWS * (1u << AMP_QUBITS) * 16)
#define ALLOC_BYTES (OUT_AT + OUT_BYTES + 4096)
#define POISON 0xa5

/* The allocation as the client fills it: input values at IN_AT, poison everywhere else. */
static void initial(unsigned char *buf) {
  memset(buf, POISON, ALLOC_BYTES);
  double *x = (double *)(buf + IN_AT);
  for (size_t i = 0; i < AMP_ROWS * AMP_COLS; i++) {
    x[i] = 0.05 + 0.21 * (double)(i % 13) - 0.9 * (double)(i % 3 == 0);
  }
}

/* The state of req kept and fetched whole (malloc'd; NULL on failure, e holding why). */
static unsigned char *kept_state(struct qdpt_ipc *d, struct job_encode_request req,
                                 uint64_t *ret_bytes, struct qdp_error *e) {
  req.out = NULL;
  return qdpt_ipc_encode_read(d, &req, ret_bytes, e);
}

/* Nothing stored, no device holding a byte. */
static void check_idle(struct qdpt_ipc *d, const char *what) {
  uint64_t bytes = 1;
  uint32_t states = 1;
  state_store_usage(d->store, &bytes, &states, NULL);
  CHECK(bytes == 0 && states == 0, "%s: the store holds %" PRIu32 " states, %" PRIu64 " B", what,
        states, bytes);
  for (size_t i = 0; i < runtime_mesh_count(d->mesh); i++) {
    struct runtime_device_info info;
    runtime_mesh_device_info(d->mesh, i, &info);
    CHECK(info.used_bytes == 0, "%s: %s holds %" PRIu64 " B", what, info.name, info.used_bytes);
  }
}

/* req into the client's allocation at out->offset: the kept state's bits there, the layout in
 * the reply, every other byte of the allocation as it was. */
static void same_bits(struct qdpt_ipc *d, const char *what, struct job_encode_request req) {
  static unsigned char before[ALLOC_BYTES], after[ALLOC_BYTES];
  struct qdp_error e = QDP_ERROR_INIT;
  struct job_state_info st;
  uint64_t nb = 0;
  unsigned char *want = kept_state(d, req, &nb, &e);
  CHECK(want, "%s kept: %s", what, e.msg);
  CHECK(qdpt_ipc_client_reset(d) == 0 && qdpt_ipc_client_read(d, before) == 0, "%s: the client",
        what);
  qdp_status rc = job_encode(d->jp, &d->me, &req, &st, &e);
  CHECK(rc == QDP_OK, "%s into the allocation: %s", what, e.msg);
  if (rc == QDP_OK) {
    CHECK(st.meta.handle[0] == 0 && st.token[0] == 0 && st.plan->nshards == 1 &&
              st.plan->total_bytes == nb,
          "%s: a reply with handle '%s', %zu shards, %" PRIu64 " B", what, st.meta.handle,
          st.plan->nshards, st.plan->total_bytes);
    job_state_info_end(d->jp, &st, true);
  }
  check_idle(d, what);
  CHECK(qdpt_ipc_client_read(d, after) == 0, "%s: the client", what);
  uint64_t at = req.out->offset;
  bool same = want && memcmp(after + at, want, nb) == 0;
  bool around = memcmp(after, before, at) == 0 &&
                memcmp(after + at + nb, before + at + nb, ALLOC_BYTES - at - nb) == 0;
  CHECK(same, "%s: the bits differ from the kept state's", what);
  CHECK(around, "%s: bytes outside [%" PRIu64 ", %" PRIu64 ") changed", what, at, at + nb);
  printf("test_ipc_output: %s: %" PRIu64 " B %s\n", what, nb,
         same && around ? "same bits, nothing else written" : "WRONG");
  free(want);
}

/* req refused with want and field, the allocation as the client made it. */
static void refused(struct qdpt_ipc *d, const char *what, const struct job_encode_request *req,
                    qdp_status want, const char *field) {
  static unsigned char after[ALLOC_BYTES], initial_bytes[ALLOC_BYTES];
  struct qdp_error e = QDP_ERROR_INIT;
  struct job_state_info st;
  initial(initial_bytes);
  CHECK(qdpt_ipc_client_reset(d) == 0, "%s: the client", what);
  qdp_status rc = job_encode(d->jp, &d->me, req, &st, &e);
  CHECK(rc == want && strcmp(e.field, field) == 0, "%s: %s (field '%s') %s, not %s '%s'", what,
        qdp_status_name(rc), e.field, e.msg, qdp_status_name(want), field);
  check_idle(d, what);
  CHECK(qdpt_ipc_client_read(d, after) == 0 && memcmp(after, initial_bytes, ALLOC_BYTES) == 0,
        "%s: a refused encode wrote into the allocation", what);
  printf("test_ipc_output: %s: %s %s\n", what, qdp_status_name(rc), e.msg);
}

static void run(struct qdpt_ipc *d) {
  static double host[ALLOC_BYTES / 8];
  initial((unsigned char *)host);
  struct job_output out = {.ipc_handle = d->handle,
                           .ipc_handle_len = 64,
                           .offset = OUT_AT,
                           .bytes = OUT_BYTES,
                           .device_uuid = d->gpu0.uuid};
  struct job_encode_request req = {.input = {.source = QDP_SOURCE_VALUES,
                                             .dtype = QDP_DTYPE_FLOAT64,
                                             .rows = AMP_ROWS,
                                             .cols = AMP_COLS,
                                             .values = host + IN_AT / 8,
                                             .bytes = AMP_ROWS * AMP_COLS * 8,
                                             .fd = -1},
                                   .out = &out,
                                   .encoding = QDP_ENCODING_AMPLITUDE,
                                   .qubits = AMP_QUBITS};
  same_bits(d, "amplitude batch, complex128, inline input", req);
  struct job_encode_request angle = req;
  angle.input.rows = ANGLE_ROWS;
  angle.input.cols = ANGLE_N;
  angle.input.bytes = ANGLE_ROWS * ANGLE_N * 8;
  angle.encoding = QDP_ENCODING_ANGLE;
  angle.qubits = ANGLE_N;
  angle.output_dtype = QDP_DTYPE_COMPLEX64;
  out.offset = OUT_AT + 8; /* complex64: any multiple of 8 */
  same_bits(d, "angle batch, complex64, offset by one amplitude", angle);
  out.offset = OUT_AT;
  struct job_encode_request dev = req;
  dev.input = (struct job_input){.source = QDP_SOURCE_CUDA_IPC,
                                 .dtype = QDP_DTYPE_FLOAT64,
                                 .rows = AMP_ROWS,
                                 .cols = AMP_COLS,
                                 .ipc_handle = d->handle,
                                 .ipc_handle_len = 64,
                                 .device_uuid = d->gpu0.uuid,
                                 .offset = IN_AT,
                                 .fd = -1};
  same_bits(d, "amplitude batch, CUDA IPC input from the same allocation", dev);

  out.bytes = OUT_BYTES - 16;
  refused(d, "one amplitude short", &req, QDP_ERR_INVALID_ARGUMENT, "out.bytes");
  out.bytes = UINT64_C(1) << 40; /* past any allocation's end, however the driver rounds it */
  refused(d, "past the allocation", &req, QDP_ERR_OUT_OF_RANGE, "out.bytes");
  out.bytes = OUT_BYTES;
  out.offset = IN_AT; /* over the input it reads */
  refused(d, "over its own input", &dev, QDP_ERR_INVALID_ARGUMENT, "out");
  out.offset = OUT_AT;
  out.device_uuid = "GPU-00000000-0000-0000-0000-000000000000";
  refused(d, "an unknown GPU", &req, QDP_ERR_FAILED_PRECONDITION, "out.device_uuid");
  out.device_uuid = d->gpu0.uuid;
  if (runtime_mesh_count(d->mesh) > 1) {
    struct runtime_device_info gpu1;
    runtime_mesh_device_info(d->mesh, 1, &gpu1);
    const char *names[1] = {gpu1.name};
    req.placement = (struct job_placement){.devices = names, .ndevices = 1};
    refused(d, "another GPU named", &req, QDP_ERR_INVALID_ARGUMENT, "placement.devices");
  }
}

int main(void) {
  struct qdpt_ipc_spec spec = {
      .name = "test_ipc_output", .alloc_bytes = ALLOC_BYTES, .fill = initial, .run = run};
  return qdpt_ipc_main(&spec);
}
