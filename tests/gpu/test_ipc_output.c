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
 * The child is forked before this process touches CUDA (a context does not survive fork); an IPC
 * handle cannot be opened by the process that exported it, hence the two processes. Exits 77
 * without a GPU. A plain program, no Check.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "job/job.h"

#define MIB (UINT64_C(1) << 20)
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

static int failures;

#define CHECK(cond, ...) \
  do { \
    if (!(cond)) { \
      failures++; \
      fprintf(stderr, "test_ipc_output: FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__); \
      fputc('\n', stderr); \
    } \
  } while (0)

static int io_all(int fd, void *buf, size_t n, int writing) {
  for (size_t done = 0; done < n;) {
    ssize_t k =
        writing ? write(fd, (char *)buf + done, n - done) : read(fd, (char *)buf + done, n - done);
    if (k <= 0) {
      return -1;
    }
    done += (size_t)k;
  }
  return 0;
}

/* The allocation as the client fills it: input values at IN_AT, poison everywhere else. */
static void initial(unsigned char *buf) {
  memset(buf, POISON, ALLOC_BYTES);
  double *x = (double *)(buf + IN_AT);
  for (size_t i = 0; i < AMP_ROWS * AMP_COLS; i++) {
    x[i] = 0.05 + 0.21 * (double)(i % 13) - 0.9 * (double)(i % 3 == 0);
  }
}

/* The client: its allocation's handle written to `out`, then commands from `in` until 'Q': 'R'
 * writes the whole allocation back, 'I' restores it to its initial bytes. Writes a 0 byte alone
 * when there is no GPU. */
static int client(int in, int out) {
  static unsigned char host[ALLOC_BYTES];
  int n = 0;
  unsigned char ok = 0, cmd = 0;
  void *dev = NULL;
  cudaIpcMemHandle_t h;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    return write(out, &ok, 1) == 1 ? 0 : 1;
  }
  initial(host);
  if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&dev, ALLOC_BYTES) != cudaSuccess ||
      cudaMemcpy(dev, host, ALLOC_BYTES, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaIpcGetMemHandle(&h, dev) != cudaSuccess) {
    return write(out, &ok, 1) == 1 ? 2 : 1;
  }
  ok = 1;
  if (write(out, &ok, 1) != 1 || write(out, &h, sizeof h) != (ssize_t)sizeof h) {
    return 1;
  }
  while (read(in, &cmd, 1) == 1 && cmd != 'Q') {
    if (cmd == 'R') {
      if (cudaMemcpy(host, dev, ALLOC_BYTES, cudaMemcpyDeviceToHost) != cudaSuccess ||
          io_all(out, host, ALLOC_BYTES, 1) != 0) {
        return 3;
      }
      continue;
    }
    initial(host);
    if (cudaMemcpy(dev, host, ALLOC_BYTES, cudaMemcpyHostToDevice) != cudaSuccess ||
        write(out, &ok, 1) != 1) {
      return 3;
    }
  }
  cudaFree(dev);
  return 0;
}

struct side {
  struct runtime_mesh *mesh;
  struct world *world;
  struct state_store *store;
  struct job_pipeline *jp;
  int to_child, from_child;
  unsigned char handle[64];
  struct runtime_device_info gpu0;
};

static int start(struct side *d) {
  struct qdp_error e = QDP_ERROR_INIT;
  struct runtime_mesh_config mc = {.devices = "auto", .device_budget_bytes = 256 * MIB};
  struct state_store_limits lim = {.budget_bytes = 1024 * MIB};
  if (runtime_mesh_create(&mc, &d->mesh, &e) != QDP_OK ||
      world_create(false, NULL, NULL, &d->world, &e) != QDP_OK ||
      world_start(d->world, QDP_OK, NULL, d->mesh, 1000, false, &e) != QDP_OK ||
      state_store_create(&lim, &d->store, &e) != QDP_OK) {
    fprintf(stderr, "test_ipc_output: %s\n", e.msg);
    return -1;
  }
  struct job_deps deps = {.mesh = d->mesh, .world = d->world, .store = d->store};
  if (job_pipeline_create(&deps, &d->jp, &e) != QDP_OK) {
    fprintf(stderr, "test_ipc_output: %s\n", e.msg);
    return -1;
  }
  job_set_limits(d->jp, 30, 1 << 20);
  runtime_mesh_device_info(d->mesh, 0, &d->gpu0);
  return 0;
}

static void stop(struct side *d) {
  job_pipeline_destroy(d->jp);
  state_store_destroy(d->store);
  world_destroy(d->world);
  runtime_mesh_destroy(d->mesh);
}

static const struct job_caller me = {.owner = "uid:0"};

/* The client's allocation as it is now (ALLOC_BYTES into buf). */
static int client_read(struct side *d, unsigned char *buf) {
  unsigned char cmd = 'R';
  return write(d->to_child, &cmd, 1) == 1 ? io_all(d->from_child, buf, ALLOC_BYTES, 0) : -1;
}

static int client_reset(struct side *d) {
  unsigned char cmd = 'I', ack = 0;
  return write(d->to_child, &cmd, 1) == 1 && read(d->from_child, &ack, 1) == 1 ? 0 : -1;
}

/* The state of req kept and fetched whole (malloc'd; NULL on failure, e holding why). */
static unsigned char *kept_state(struct side *d, struct job_encode_request req, uint64_t *ret_bytes,
                                 struct qdp_error *e) {
  struct job_state_info st;
  struct job_fetch f;
  req.out = NULL;
  if (job_encode(d->jp, &me, &req, &st, e) != QDP_OK) {
    return NULL;
  }
  char handle[STATE_HANDLE_LEN], token[STATE_TOKEN_LEN];
  memcpy(handle, st.meta.handle, sizeof handle);
  memcpy(token, st.token, sizeof token);
  job_state_info_end(d->jp, &st, true);
  unsigned char *buf = NULL;
  if (job_fetch_open(d->jp, handle, token, 0, 0, &f, e) == QDP_OK) {
    *ret_bytes = f.total * f.esize;
    buf = malloc(*ret_bytes);
    if (buf && job_fetch_read(&f, f.total, buf, e) != QDP_OK) {
      free(buf);
      buf = NULL;
    }
  }
  job_fetch_close(d->jp, &f);
  job_release(d->jp, &me, handle, token, NULL, e);
  return buf;
}

/* Nothing stored, no device holding a byte. */
static void check_idle(struct side *d, const char *what) {
  uint64_t bytes = 1;
  uint32_t states = 1;
  state_store_usage(d->store, &bytes, &states);
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
static void same_bits(struct side *d, const char *what, struct job_encode_request req) {
  static unsigned char before[ALLOC_BYTES], after[ALLOC_BYTES];
  struct qdp_error e = QDP_ERROR_INIT;
  struct job_state_info st;
  uint64_t nb = 0;
  unsigned char *want = kept_state(d, req, &nb, &e);
  CHECK(want, "%s kept: %s", what, e.msg);
  CHECK(client_reset(d) == 0 && client_read(d, before) == 0, "%s: the client", what);
  qdp_status rc = job_encode(d->jp, &me, &req, &st, &e);
  CHECK(rc == QDP_OK, "%s into the allocation: %s", what, e.msg);
  if (rc == QDP_OK) {
    CHECK(st.meta.handle[0] == 0 && st.token[0] == 0 && st.plan->nshards == 1 &&
              st.plan->total_bytes == nb,
          "%s: a reply with handle '%s', %zu shards, %" PRIu64 " B", what, st.meta.handle,
          st.plan->nshards, st.plan->total_bytes);
    job_state_info_end(d->jp, &st, true);
  }
  check_idle(d, what);
  CHECK(client_read(d, after) == 0, "%s: the client", what);
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
static void refused(struct side *d, const char *what, const struct job_encode_request *req,
                    qdp_status want, const char *field) {
  static unsigned char after[ALLOC_BYTES], initial_bytes[ALLOC_BYTES];
  struct qdp_error e = QDP_ERROR_INIT;
  struct job_state_info st;
  initial(initial_bytes);
  CHECK(client_reset(d) == 0, "%s: the client", what);
  qdp_status rc = job_encode(d->jp, &me, req, &st, &e);
  CHECK(rc == want && strcmp(e.field, field) == 0, "%s: %s (field '%s') %s, not %s '%s'", what,
        qdp_status_name(rc), e.field, e.msg, qdp_status_name(want), field);
  check_idle(d, what);
  CHECK(client_read(d, after) == 0 && memcmp(after, initial_bytes, ALLOC_BYTES) == 0,
        "%s: a refused encode wrote into the allocation", what);
  printf("test_ipc_output: %s: %s %s\n", what, qdp_status_name(rc), e.msg);
}

static void run(struct side *d) {
  static double host[ALLOC_BYTES / 8];
  initial((unsigned char *)host);
  struct job_output out = {.ipc_handle = d->handle,
                           .ipc_handle_len = 64,
                           .offset = OUT_AT,
                           .bytes = OUT_BYTES,
                           .device_uuid = d->gpu0.uuid};
  struct job_encode_request req = {.input = {.source = JOB_INPUT_VALUES,
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
  dev.input = (struct job_input){.source = JOB_INPUT_CUDA_IPC,
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
  int to_child[2], to_parent[2];
  if (pipe(to_child) != 0 || pipe(to_parent) != 0) {
    return 1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    _exit(client(to_child[0], to_parent[1]));
  }
  struct side d = {.to_child = to_child[1], .from_child = to_parent[0]};
  unsigned char ok = 0;
  if (read(d.from_child, &ok, 1) != 1 || !ok) {
    waitpid(pid, NULL, 0);
    printf("test_ipc_output: no CUDA device the client could export from, skipping\n");
    return 77;
  }
  if (io_all(d.from_child, d.handle, sizeof d.handle, 0) != 0) {
    return 1;
  }
  if (start(&d) == 0) {
    printf("test_ipc_output: %zu GPU%s\n", runtime_mesh_count(d.mesh),
           runtime_mesh_count(d.mesh) == 1 ? "" : "s");
    run(&d);
  } else {
    failures++;
  }
  stop(&d);
  unsigned char quit = 'Q';
  if (write(d.to_child, &quit, 1) != 1) {
    failures++;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the client exited with %d", status);
  printf("test_ipc_output: %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
