/* The CUDA IPC tests' fixture: the client process, the daemon's side, the program around them
 * (ipc_fixture.h has the contract). */
#include "ipc_fixture.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define MIB (UINT64_C(1) << 20)

static const char *name = "ipc_fixture";
static int failures;

void qdpt_ipc_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  failures++;
  fprintf(stderr, "%s: FAIL %s:%d: ", name, file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

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

/* The client: its allocation's handle written to `out`, then commands from `in` until 'Q' (or
 * the pipe's end): 'R' writes the whole allocation back, 'I' restores it to its initial bytes and
 * answers one byte. Writes a 0 byte alone when there is no GPU. */
static int client(const struct qdpt_ipc_spec *spec, int in, int out) {
  int n = 0;
  unsigned char ok = 0, cmd = 0;
  void *dev = NULL;
  cudaIpcMemHandle_t h;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    return write(out, &ok, 1) == 1 ? 0 : 1;
  }
  unsigned char *host = malloc(spec->alloc_bytes);
  if (!host) {
    return write(out, &ok, 1) == 1 ? 2 : 1;
  }
  spec->fill(host);
  if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&dev, spec->alloc_bytes) != cudaSuccess ||
      cudaMemcpy(dev, host, spec->alloc_bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaIpcGetMemHandle(&h, dev) != cudaSuccess) {
    return write(out, &ok, 1) == 1 ? 2 : 1;
  }
  _Static_assert(sizeof h == RUNTIME_IPC_HANDLE_BYTES, "a CUDA IPC handle's size");
  ok = 1;
  if (write(out, &ok, 1) != 1 || write(out, &h, sizeof h) != (ssize_t)sizeof h) {
    return 1;
  }
  while (read(in, &cmd, 1) == 1 && cmd != 'Q') {
    if (cmd == 'R') {
      if (cudaMemcpy(host, dev, spec->alloc_bytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
          io_all(out, host, spec->alloc_bytes, 1) != 0) {
        return 3;
      }
      continue;
    }
    spec->fill(host);
    if (cudaMemcpy(dev, host, spec->alloc_bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
        write(out, &ok, 1) != 1) {
      return 3;
    }
  }
  cudaFree(dev);
  free(host);
  return 0;
}

int qdpt_ipc_client_read(struct qdpt_ipc *d, unsigned char *buf) {
  unsigned char cmd = 'R';
  return write(d->to_child, &cmd, 1) == 1 ? io_all(d->from_child, buf, d->alloc_bytes, 0) : -1;
}

int qdpt_ipc_client_reset(struct qdpt_ipc *d) {
  unsigned char cmd = 'I', ack = 0;
  return write(d->to_child, &cmd, 1) == 1 && read(d->from_child, &ack, 1) == 1 ? 0 : -1;
}

static int start(struct qdpt_ipc *d) {
  struct qdp_error e = QDP_ERROR_INIT;
  struct runtime_mesh_config mc = {.devices = "auto", .device_budget_bytes = 256 * MIB};
  struct state_store_limits lim = {.budget_bytes = 1024 * MIB};
  if (runtime_mesh_create(&mc, &d->mesh, &e) != QDP_OK ||
      world_create(false, NULL, NULL, &d->world, &e) != QDP_OK ||
      world_start(d->world, QDP_OK, NULL, d->mesh, 1000, false, &e) != QDP_OK ||
      state_store_create(&lim, &d->store, &e) != QDP_OK) {
    fprintf(stderr, "%s: %s\n", name, e.msg);
    return -1;
  }
  struct job_deps deps = {.mesh = d->mesh, .world = d->world, .store = d->store};
  if (job_pipeline_create(&deps, &d->jp, &e) != QDP_OK) {
    fprintf(stderr, "%s: %s\n", name, e.msg);
    return -1;
  }
  job_set_limits(d->jp, 30, 1 << 20);
  runtime_mesh_device_info(d->mesh, 0, &d->gpu0);
  return 0;
}

static void stop(struct qdpt_ipc *d) {
  job_pipeline_destroy(d->jp);
  state_store_destroy(d->store);
  world_destroy(d->world);
  runtime_mesh_destroy(d->mesh);
}

unsigned char *qdpt_ipc_encode_read(struct qdpt_ipc *d, const struct job_encode_request *req,
                                    uint64_t *ret_bytes, struct qdp_error *e) {
  struct job_state_info st;
  struct job_fetch f;
  if (job_encode(d->jp, &d->me, req, &st, e) != QDP_OK) {
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
  job_release(d->jp, &d->me, handle, token, NULL, e);
  return buf;
}

int qdpt_ipc_main(const struct qdpt_ipc_spec *spec) {
  name = spec->name;
  int to_child[2], to_parent[2];
  if (pipe(to_child) != 0 || pipe(to_parent) != 0) {
    return 1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    _exit(client(spec, to_child[0], to_parent[1]));
  }
  struct qdpt_ipc d = {.me = {.owner = "uid:0"},
                       .to_child = to_child[1],
                       .from_child = to_parent[0],
                       .alloc_bytes = spec->alloc_bytes};
  unsigned char ok = 0;
  if (read(d.from_child, &ok, 1) != 1 || !ok) {
    waitpid(pid, NULL, 0);
    printf("%s: no CUDA device the client could export from, skipping\n", name);
    return 77;
  }
  if (io_all(d.from_child, d.handle, sizeof d.handle, 0) != 0) {
    return 1;
  }
  if (start(&d) == 0) {
    printf("%s: %zu GPU%s\n", name, runtime_mesh_count(d.mesh),
           runtime_mesh_count(d.mesh) == 1 ? "" : "s");
    spec->run(&d);
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
  printf("%s: %s\n", name, failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
