/* Zero-copy views and gather against a running GPU qdpd with two GPUs (tests/gpu/views_gpu.sh
 * starts it, with lease_grace 1 and expire_interval 1), from a process of its own, through libqdp:
 *  1. a state sharded over cuda:0 and cuda:1; its views, opened here, copied back with cudaMemcpy,
 *     equal the daemon's Fetch bit for bit; DLPack tensors carry device ids 0 and 1;
 *  2. Release (from a second client) with the views open: the state is gone for clients, its
 *     memory still readable through the views and still counted on the devices; closing the
 *     views frees it (the devices' used bytes drop by the shards' bytes);
 *  3. a process that opens views and exits without closing them: its lease ends after the grace
 *     and the released state's memory is freed;
 *  4. Gather onto cuda:0 equals the sharded Fetch bit for bit.
 * Usage: views_client              (QDP_TARGET names the daemon)
 *        views_client hold REF     (opens the views of REF and exits without closing them)
 *        views_client world        (QDP_TARGET: the coordinator of 2 ranks on this node, rank r
 *                                   on cuda:r: views of a state across both ranks equal Fetch)
 * Exits 77 when this process does not see two GPUs or the daemon is not on two GPUs; 0 when
 * every check passes, 1 otherwise, printing one line per check. */
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "qdp.h"
#include "qdp_dlpack.h"

extern char **environ;

static int failures;

#define CHECK(cond, ...) \
  do { \
    int ok_ = (cond); \
    printf("%s ", ok_ ? "ok  " : "FAIL"); \
    printf(__VA_ARGS__); \
    printf("\n"); \
    fflush(stdout); \
    failures += !ok_; \
  } while (0)

#define QDP_OK_OR_DIE(expr) \
  do { \
    qdp_status rc_ = (expr); \
    if (rc_ != QDP_OK) { \
      printf("FAIL %s -> %s: %s\n", #expr, qdp_status_name(rc_), qdp_last_error()->msg); \
      exit(1); \
    } \
  } while (0)

static qdp_client *client_new(const char *name) {
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  o.client_name = name;
  qdp_client *c = NULL;
  QDP_OK_OR_DIE(qdp_client_create(&o, &c));
  return c;
}

/* The daemon's used bytes on device `name`. */
static uint64_t used_on(qdp_client *c, const char *name) {
  struct qdp_server_status *st = NULL;
  QDP_OK_OR_DIE(qdp_get_status(c, &st));
  uint64_t used = UINT64_MAX;
  for (size_t i = 0; i < st->ndevices; i++) {
    if (strcmp(st->devices[i]->name, name) == 0) {
      used = st->devices[i]->used_bytes;
    }
  }
  qdp_server_status_free(st);
  return used;
}

/* An angle state of n qubits, complex128, split evenly over devs[0] and devs[1] (NULL: cuda:0 and
 * cuda:1). */
static struct qdp_state_info *encode_two(qdp_client *c, unsigned n, const char *const *devs) {
  static const char *const gpus[] = {"cuda:0", "cuda:1"};
  double x[64];
  for (unsigned i = 0; i < n; i++) {
    x[i] = 0.1 + 0.11 * i;
  }
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_ANGLE;
  eo.qubits = n;
  eo.dtype = QDP_DTYPE_COMPLEX128;
  eo.policy = QDP_POLICY_EVEN;
  eo.devices = devs ? devs : gpus;
  eo.ndevices = 2;
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_INLINE;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.data = x;
  in.data_bytes = n * sizeof x[0];
  struct qdp_state_info *s = NULL;
  QDP_OK_OR_DIE(qdp_encode(c, &eo, &in, &s));
  return s;
}

static unsigned char *fetch_all(qdp_client *c, const struct qdp_state_info *s) {
  unsigned char *buf = malloc(s->bytes);
  QDP_OK_OR_DIE(qdp_fetch(c, s->handle, s->token, NULL, buf, s->bytes, NULL));
  return buf;
}

/* Copies every view back with cudaMemcpy and compares it with the fetched state. */
static int views_equal(const struct qdp_views *v, const unsigned char *want, size_t esize) {
  for (size_t i = 0; i < v->count; i++) {
    const struct qdp_shard *sh = v->views[i].shard;
    unsigned char *got = malloc(sh->bytes);
    cudaError_t err = cudaMemcpy(got, v->views[i].data, sh->bytes, cudaMemcpyDeviceToHost);
    int same = err == cudaSuccess && sh->rows == 1 &&
               memcmp(got, want + sh->first * esize, sh->bytes) == 0;
    free(got);
    if (!same) {
      printf("     shard %zu: %s\n", i,
             err == cudaSuccess ? "bytes differ" : cudaGetErrorName(err));
      return 0;
    }
  }
  return 1;
}

/* Runs this program as `views_client hold REF` and waits for it. */
static int run_holder(const char *self, const char *ref) {
  pid_t pid;
  char *argv[] = {(char *)self, (char *)"hold", (char *)ref, NULL};
  if (posix_spawn(&pid, self, NULL, NULL, argv, environ) != 0) {
    return -1;
  }
  int st = 0;
  return waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int hold(const char *ref) {
  char h[256];
  snprintf(h, sizeof h, "%s", ref);
  char *colon = strchr(h, ':');
  if (!colon) {
    return 2;
  }
  *colon = '\0';
  qdp_client *c = client_new("views-holder");
  const struct qdp_views *v = NULL;
  QDP_OK_OR_DIE(qdp_views_open(c, h, colon + 1, &v));
  printf("     holder pid %d opened %zu views under lease %" PRIu64 " and exits without closing\n",
         (int)getpid(), v->count, v->lease_id);
  fflush(stdout);
  _exit(0); /* no qdp_client_destroy: the lease stays open on the daemon */
}

/* A state across the two ranks of a world on this node (rank r on cuda:r): the view of rank 1's
 * shard is exported by rank 1's process, handed out by the coordinator, and opened here. */
static int world_views(void) {
  static const char *const devs[] = {"r0/cuda:0", "r1/cuda:1"};
  qdp_client *c = client_new("views-world");
  struct qdp_state_info *s = encode_two(c, 24, devs);
  CHECK(s->nshards == 2 && s->shards[0]->rank == 0 && s->shards[1]->rank == 1,
        "state of %" PRIu64 " B over rank 0 (%s) and rank 1 (%s)", s->bytes,
        s->shards[0]->device, s->shards[1]->device);
  unsigned char *want = fetch_all(c, s);
  const struct qdp_views *v = NULL;
  QDP_OK_OR_DIE(qdp_views_open(c, s->handle, s->token, &v));
  for (size_t i = 0; i < v->count; i++) {
    printf("     shard %zu: rank %d %s '%s' -> this process's GPU %d\n", i, v->views[i].shard->rank,
           v->views[i].shard->device, v->views[i].shard->uuid, v->views[i].device_id);
  }
  CHECK(v->count == 2 && v->views[0].device_id == 0 && v->views[1].device_id == 1,
        "views of both ranks' shards opened on GPUs 0 and 1");
  CHECK(views_equal(v, want, 16), "both views copied back equal Fetch bit for bit");
  QDP_OK_OR_DIE(qdp_views_close(c, s->handle));
  QDP_OK_OR_DIE(qdp_release(c, s->handle, s->token, NULL));
  free(want);
  qdp_state_info_free(s);
  qdp_client_destroy(c);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "hold") == 0) {
    return hold(argv[2]);
  }
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 2) {
    printf("SKIP: this process sees %d GPUs; views need two\n", ngpu);
    return 77;
  }
  if (argc == 2 && strcmp(argv[1], "world") == 0) {
    return world_views();
  }
  qdp_client *c = client_new("views-client");
  qdp_client *other = client_new("views-releaser");
  if (used_on(c, "cuda:1") == UINT64_MAX) {
    printf("SKIP: the daemon has no cuda:1\n");
    return 77;
  }
  const unsigned n = 26; /* 1 GiB complex128: 512 MiB per GPU */
  uint64_t base0 = used_on(c, "cuda:0"), base1 = used_on(c, "cuda:1");

  /* 1. Views equal Fetch; DLPack device ids. */
  struct qdp_state_info *s = encode_two(c, n, NULL);
  CHECK(s->nshards == 2 && strcmp(s->shards[0]->device, "cuda:0") == 0 &&
            strcmp(s->shards[1]->device, "cuda:1") == 0,
        "state of %" PRIu64 " B sharded over cuda:0 and cuda:1", s->bytes);
  unsigned char *want = fetch_all(c, s);
  const struct qdp_views *v = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  QDP_OK_OR_DIE(qdp_views_open(c, s->handle, s->token, &v));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK(v->count == 2 && v->lease_id != 0, "views opened: %zu shards, lease %" PRIu64 " (%.1f ms)",
        v->count, v->lease_id, (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
  for (size_t i = 0; i < v->count; i++) {
    printf("     shard %zu: %s '%s' -> this process's GPU %d, ipc offset %" PRIu64 "\n", i,
           v->views[i].shard->device, v->views[i].shard->uuid, v->views[i].device_id,
           v->views[i].shard->ipc_offset);
  }
  CHECK(views_equal(v, want, 16),
        "every view copied back with cudaMemcpy equals Fetch bit for bit");
  const struct qdp_views *again = NULL;
  QDP_OK_OR_DIE(qdp_views_open(c, s->handle, s->token, &again));
  CHECK(again == v, "a second open of the same handle returns the cached views");
  for (size_t i = 0; i < v->count; i++) {
    struct DLManagedTensor *t = NULL;
    QDP_OK_OR_DIE(qdp_view_dlpack(v, i, &t));
    CHECK(t->dl_tensor.device.device_type == kDLCUDA && t->dl_tensor.device.device_id == (int)i &&
              t->dl_tensor.data == v->views[i].data && t->dl_tensor.shape[0] == 1 &&
              t->dl_tensor.shape[1] == (int64_t)v->views[i].shard->count &&
              t->dl_tensor.dtype.code == kDLComplex && t->dl_tensor.dtype.bits == 128,
          "DLPack tensor of shard %zu: kDLCUDA device_id %d, shape [1, %" PRId64 "]", i,
          t->dl_tensor.device.device_id, t->dl_tensor.shape[1]);
    t->deleter(t);
  }
  struct qdp_state_info *d = NULL;
  QDP_OK_OR_DIE(qdp_describe(c, s->handle, s->token, &d));
  CHECK(d->leases == 1, "Describe counts %u open lease", d->leases);
  qdp_state_info_free(d);

  /* 2. Release with the views open, then close them. */
  uint64_t shard0 = s->shards[0]->bytes, shard1 = s->shards[1]->bytes;
  QDP_OK_OR_DIE(qdp_release(other, s->handle, s->token, NULL));
  CHECK(qdp_describe(c, s->handle, s->token, &d) == QDP_ERR_NOT_FOUND,
        "after Release the handle is gone for clients (NOT_FOUND)");
  CHECK(used_on(c, "cuda:0") == base0 + shard0 && used_on(c, "cuda:1") == base1 + shard1,
        "after Release the shards' memory is still held (used %" PRIu64 " / %" PRIu64 " B)",
        used_on(c, "cuda:0"), used_on(c, "cuda:1"));
  CHECK(views_equal(v, want, 16), "the views still read the state bit for bit after Release");
  QDP_OK_OR_DIE(qdp_views_close(c, s->handle));
  CHECK(used_on(c, "cuda:0") == base0 && used_on(c, "cuda:1") == base1,
        "closing the views freed the state: used %" PRIu64 " / %" PRIu64 " B, back to %" PRIu64
        " / %" PRIu64 " B",
        used_on(c, "cuda:0"), used_on(c, "cuda:1"), base0, base1);
  CHECK(qdp_views_close(c, s->handle) == QDP_ERR_NOT_FOUND, "a second close is NOT_FOUND");
  qdp_state_info_free(s);

  /* 3. A process that exits with its views open loses its lease after the grace. */
  s = encode_two(c, 24, NULL);
  char ref[256];
  snprintf(ref, sizeof ref, "%s:%s", s->handle, s->token);
  CHECK(run_holder(argv[0], ref) == 0, "a separate process opened the views and exited");
  QDP_OK_OR_DIE(qdp_describe(c, s->handle, s->token, &d));
  CHECK(d->leases == 1, "its lease outlives it for now (%u open)", d->leases);
  qdp_state_info_free(d);
  QDP_OK_OR_DIE(qdp_release(c, s->handle, s->token, NULL));
  CHECK(used_on(c, "cuda:0") == base0 + s->shards[0]->bytes, "released, still held by the lease");
  int waited = 0;
  while (used_on(c, "cuda:0") != base0 && waited < 150) {
    usleep(100 * 1000);
    waited++;
  }
  CHECK(used_on(c, "cuda:0") == base0 && used_on(c, "cuda:1") == base1,
        "the exited process's lease ended and the memory was freed after %.1f s", waited / 10.0);
  qdp_state_info_free(s);

  /* 4. Gather onto cuda:0. */
  s = encode_two(c, n, NULL);
  struct qdp_state_info *g = NULL;
  QDP_OK_OR_DIE(qdp_gather(c, s->handle, s->token, "cuda:0", 0, &g));
  CHECK(g->nshards == 1 && strcmp(g->shards[0]->device, "cuda:0") == 0 && g->bytes == s->bytes,
        "gathered onto %s: one shard of %" PRIu64 " B", g->shards[0]->device, g->bytes);
  unsigned char *sharded = fetch_all(c, s), *got = fetch_all(c, g);
  CHECK(memcmp(got, sharded, s->bytes) == 0,
        "the gathered state equals the sharded Fetch bit for bit");
  free(sharded);
  CHECK(qdp_gather(c, s->handle, s->token, "cuda:7", 0, &g) == QDP_ERR_INVALID_ARGUMENT,
        "gather onto an unknown device: %s", qdp_last_error()->msg);
  QDP_OK_OR_DIE(qdp_release(c, g->handle, g->token, NULL));
  QDP_OK_OR_DIE(qdp_release(c, s->handle, s->token, NULL));
  qdp_state_info_free(g);
  qdp_state_info_free(s);
  free(got);
  free(want);
  qdp_client_destroy(other);
  qdp_client_destroy(c);
  printf("%s: %d failure%s\n", failures ? "FAILED" : "PASSED", failures, failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
