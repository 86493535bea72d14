/* CUDA IPC input through the job pipeline (daemon/job, runtime open_ipc): a child process (the
 * client) allocates device memory on cuda:0, fills it and exports its IPC handle; this process
 * (the daemon's side) encodes from the handle over every GPU of its mesh and compares the state
 * bit for bit with the same values sent inline: amplitude as one sample over even shards and as a
 * batch split by sample (shards on other GPUs read with peer copies), angle (parameters checked
 * on the host). A range past the allocation is OUT_OF_RANGE with the numbers, an unknown UUID
 * FAILED_PRECONDITION naming the GPUs owned.
 *
 * The child is forked before this process touches CUDA (a context does not survive fork); an
 * IPC handle cannot be opened by the process that exported it, hence the two processes. Exits 77
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
#define AMP_COLS 1000 /* per sample, of 2^10 amplitudes */
#define AMP_ROWS 4
#define ANGLE_N 6
#define ANGLE_ROWS 8
#define AMP_AT 256 /* byte offsets of the two inputs in the child's allocation */
#define ANGLE_AT (AMP_AT + AMP_ROWS * AMP_COLS * 8)
#define ALLOC_BYTES (ANGLE_AT + ANGLE_ROWS * ANGLE_N * 8)

static int failures;

#define CHECK(cond, ...)                                    \
  do {                                                      \
    if (!(cond)) {                                          \
      failures++;                                           \
      fprintf(stderr, "test_ipc_input: FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                         \
      fputc('\n', stderr);                                  \
    }                                                       \
  } while (0)

static void values(double *buf) {
  for (size_t i = 0; i < ALLOC_BYTES / 8; i++) {
    buf[i] = 0.05 + 0.21 * (double)(i % 13) - 0.9 * (double)(i % 3 == 0);
  }
}

/* The client: one allocation holding both inputs, its handle written to `out`, kept alive until
 * a byte arrives on `in`. Writes a 0 byte alone when there is no GPU. */
static int client(int in, int out) {
  int n = 0;
  unsigned char ok = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    return write(out, &ok, 1) == 1 ? 0 : 1;
  }
  static double host[ALLOC_BYTES / 8];
  void *dev = NULL;
  cudaIpcMemHandle_t h;
  values(host);
  if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&dev, ALLOC_BYTES) != cudaSuccess ||
      cudaMemcpy(dev, host, ALLOC_BYTES, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaIpcGetMemHandle(&h, dev) != cudaSuccess) {
    return write(out, &ok, 1) == 1 ? 2 : 1;
  }
  ok = 1;
  if (write(out, &ok, 1) != 1 || write(out, &h, sizeof h) != (ssize_t)sizeof h ||
      read(in, &ok, 1) != 1) {
    return 1;
  }
  cudaFree(dev);
  return 0;
}

struct daemon_side {
  struct runtime_mesh *mesh;
  struct world *world;
  struct state_store *store;
  struct job_pipeline *jp;
};

static int start(struct daemon_side *d) {
  struct qdp_error e = QDP_ERROR_INIT;
  struct runtime_mesh_config mc = {.devices = "auto", .device_budget_bytes = 256 * MIB};
  struct state_store_limits lim = {.budget_bytes = 1024 * MIB};
  if (runtime_mesh_create(&mc, &d->mesh, &e) != QDP_OK ||
      world_create(false, NULL, NULL, &d->world, &e) != QDP_OK ||
      world_start(d->world, QDP_OK, NULL, d->mesh, 1000, false, &e) != QDP_OK ||
      state_store_create(&lim, &d->store, &e) != QDP_OK) {
    fprintf(stderr, "test_ipc_input: %s\n", e.msg);
    return -1;
  }
  struct job_deps deps = {.mesh = d->mesh, .world = d->world, .store = d->store};
  if (job_pipeline_create(&deps, &d->jp, &e) != QDP_OK) {
    fprintf(stderr, "test_ipc_input: %s\n", e.msg);
    return -1;
  }
  job_set_limits(d->jp, 30, 1 << 20);
  return 0;
}

static void stop(struct daemon_side *d) {
  job_pipeline_destroy(d->jp);
  state_store_destroy(d->store);
  world_destroy(d->world);
  runtime_mesh_destroy(d->mesh);
}

static const struct job_caller me = {.owner = "uid:0"};

/* The whole state of one encode, malloc'd (NULL on failure, e holding why). */
static unsigned char *encode_read(struct daemon_side *d, const struct job_encode_request *req,
                                  uint64_t *ret_bytes, struct qdp_error *e) {
  struct job_state_info st;
  struct job_fetch f;
  if (job_encode(d->jp, &me, req, &st, e) != QDP_OK) {
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

/* The same request from the handle and inline: the same bits. */
static void same_bits(struct daemon_side *d, const char *what, struct job_encode_request req,
                      const double *inline_values) {
  struct qdp_error e = QDP_ERROR_INIT;
  uint64_t nb = 0, nv = 0;
  unsigned char *got = encode_read(d, &req, &nb, &e);
  CHECK(got, "%s from the handle: %s", what, e.msg);
  req.input = (struct job_input){.source = JOB_INPUT_VALUES, .dtype = QDP_DTYPE_FLOAT64,
                                 .rows = req.input.rows, .cols = req.input.cols,
                                 .values = inline_values,
                                 .bytes = req.input.rows * req.input.cols * 8, .fd = -1};
  unsigned char *want = encode_read(d, &req, &nv, &e);
  CHECK(want, "%s inline: %s", what, e.msg);
  CHECK(got && want && nb == nv && memcmp(got, want, nb) == 0, "%s: the bits differ", what);
  printf("test_ipc_input: %s: %" PRIu64 " B %s\n", what, nb,
         got && want && memcmp(got, want, nb) == 0 ? "same bits" : "DIFFER");
  free(got);
  free(want);
}

static void run(struct daemon_side *d, const unsigned char *handle) {
  static double host[ALLOC_BYTES / 8];
  struct runtime_device_info gpu0;
  values(host);
  runtime_mesh_device_info(d->mesh, 0, &gpu0);
  struct job_encode_request req = {
      .input = {.source = JOB_INPUT_CUDA_IPC, .dtype = QDP_DTYPE_FLOAT64, .rows = 1,
                .cols = AMP_COLS, .ipc_handle = handle, .ipc_handle_len = 64,
                .device_uuid = gpu0.uuid, .offset = AMP_AT, .fd = -1},
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
  CHECK(job_encode(d->jp, &me, &req, &st, &e) == QDP_ERR_OUT_OF_RANGE &&
            e.need_bytes == ANGLE_ROWS * ANGLE_N * 8,
        "past the allocation: %s", e.msg);
  req.input.offset = ANGLE_AT;
  req.input.device_uuid = "GPU-00000000-0000-0000-0000-000000000000";
  CHECK(job_encode(d->jp, &me, &req, &st, &e) == QDP_ERR_FAILED_PRECONDITION &&
            strstr(e.msg, gpu0.uuid),
        "unknown GPU: %s", e.msg);
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
  unsigned char ok = 0, handle[64];
  if (read(to_parent[0], &ok, 1) != 1 || !ok) {
    waitpid(pid, NULL, 0);
    printf("test_ipc_input: no CUDA device the client could export from, skipping\n");
    return 77;
  }
  if (read(to_parent[0], handle, sizeof handle) != (ssize_t)sizeof handle) {
    return 1;
  }
  struct daemon_side d = {0};
  if (start(&d) == 0) {
    printf("test_ipc_input: %zu GPU%s\n", runtime_mesh_count(d.mesh),
           runtime_mesh_count(d.mesh) == 1 ? "" : "s");
    run(&d, handle);
  } else {
    failures++;
  }
  stop(&d);
  ok = 1;
  if (write(to_child[1], &ok, 1) != 1) {
    failures++;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the client exited with %d", status);
  printf("test_ipc_input: %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
