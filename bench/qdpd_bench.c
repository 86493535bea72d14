/* qdpd_bench — the daemon end to end, through libqdp, against a running qdpd (QDP_TARGET):
 *  - round trip of a small job (8-qubit amplitude, 256 float64 values inline): p50 and p99, beside
 *    the round trip of Health, the daemon's cheapest call (the transport's floor, same run);
 *  - jobs per second with C concurrent clients, each on its own connection;
 *  - Fetch throughput of a large state over the same channel.
 * Each encode is followed by a release (not timed) so the store never fills. Prints one
 * machine-readable line per figure: `bench op=... key=value ...`.
 *
 * With --shm-batch Q:B it measures instead batches of B samples of Q qubits (float64 to complex128)
 * encoded by C clients from one registered shared-memory region of 16 such batches (the daemon
 * maps and pins it once), each state released once encoded: vectors per second and input GB/s.
 *
 * Usage: qdpd_bench [--jobs N] [--clients C] [--seconds S] [--fetch-qubits Q] [--shm-batch Q:B] */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_cli.h"
#include "qdp.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void die(const char *what) {
  const struct qdp_errinfo *e = qdp_last_error();
  fprintf(stderr, "qdpd_bench: %s: %s: %s\n", what, qdp_strerror(e->code), e->msg);
  exit(1);
}

static qdp_client *connect_client(void) {
  struct qdp_client_opts o = QDP_CLIENT_OPTS_INIT;
  qdp_client *c = NULL;
  if (qdp_client_create(&o, &c) != QDP_OK) {
    die("connect");
  }
  return c;
}

/* One small job: encode 256 values as an 8-qubit amplitude state, then release it. Returns the
 * encode round trip in microseconds. */
static double small_job(qdp_client *c, const double *x) {
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_AMPLITUDE;
  eo.qubits = 8;
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_INLINE;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.data = x;
  in.data_bytes = 256 * sizeof *x;
  struct qdp_state_info *s = NULL;
  double t0 = now_us();
  if (qdp_encode(c, &eo, &in, &s) != QDP_OK) {
    die("encode");
  }
  double dt = now_us() - t0;
  if (qdp_release(c, s->handle, s->token, NULL) != QDP_OK) {
    die("release");
  }
  qdp_state_info_free(s);
  return dt;
}

struct worker {
  double seconds;
  const double *x;
  uint64_t jobs;
};

static void *worker_main(void *arg) {
  struct worker *w = arg;
  qdp_client *c = connect_client();
  double end = now_us() + w->seconds * 1e6;
  while (now_us() < end) {
    small_job(c, w->x);
    w->jobs++;
  }
  qdp_client_destroy(c);
  return NULL;
}

/* Runs fn on each of n items of `size` bytes, one client thread each, and waits for them all. */
static int run_clients(void *items, unsigned long n, size_t size, void *(*fn)(void *),
                       pthread_t *tid) {
  for (unsigned long i = 0; i < n; i++) {
    if (pthread_create(&tid[i], NULL, fn, (char *)items + i * size) != 0) {
      fprintf(stderr, "qdpd_bench: cannot start client thread %lu\n", i);
      return 1;
    }
  }
  for (unsigned long i = 0; i < n; i++) {
    pthread_join(tid[i], NULL);
  }
  return 0;
}

/* ---- batches from a registered region ---- */

#define SHM_SLICES 16

struct shm_worker {
  double seconds;
  const struct qdp_region_info *region;
  uint32_t qubits;
  uint64_t batch, slice_bytes;
  unsigned index;
  uint64_t jobs;
};

static void *shm_worker_main(void *arg) {
  struct shm_worker *w = arg;
  qdp_client *c = connect_client();
  double end = now_us() + w->seconds * 1e6;
  for (uint64_t k = w->index; now_us() < end; k++) {
    struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
    eo.encoding = QDP_ENCODING_AMPLITUDE;
    eo.qubits = w->qubits;
    eo.dtype = QDP_DTYPE_COMPLEX128;
    struct qdp_input in = QDP_INPUT_INIT;
    in.kind = QDP_INPUT_SHM;
    in.dtype = QDP_DTYPE_FLOAT64;
    in.rows = w->batch;
    in.cols = UINT64_C(1) << w->qubits;
    in.region = w->region->handle;
    in.region_token = w->region->token;
    in.offset = (k % SHM_SLICES) * w->slice_bytes;
    in.length = w->slice_bytes;
    struct qdp_state_info *s = NULL;
    if (qdp_encode(c, &eo, &in, &s) != QDP_OK) {
      die("encode from the region");
    }
    if (qdp_release(c, s->handle, s->token, NULL) != QDP_OK) {
      die("release");
    }
    qdp_state_info_free(s);
    w->jobs++;
  }
  qdp_client_destroy(c);
  return NULL;
}

static int shm_batches(uint32_t qubits, uint64_t batch, unsigned long clients,
                       unsigned long seconds) {
  uint64_t slice = batch * (UINT64_C(1) << qubits) * sizeof(double);
  uint64_t bytes = SHM_SLICES * slice;
  char name[64];
  snprintf(name, sizeof name, "/qdpd-bench-%d", (int)getpid());
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
    perror("qdpd_bench: shared memory");
    return 1;
  }
  double *x = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (x == MAP_FAILED) {
    perror("qdpd_bench: mmap");
    return 1;
  }
  for (uint64_t i = 0; i < bytes / sizeof *x; i++) {
    x[i] = 0.25 + (double)(i % 1013) / 1013.0;
  }
  qdp_client *c = connect_client();
  struct qdp_region_info region = QDP_REGION_INFO_INIT;
  double r0 = now_us();
  if (qdp_region_register(c, name, 0, -1, &region) != QDP_OK) {
    die("register the region");
  }
  double reg_ms = (now_us() - r0) / 1e3;
  struct shm_worker *w = calloc(clients, sizeof *w);
  pthread_t *tid = calloc(clients, sizeof *tid);
  if (!w || !tid) {
    return 1;
  }
  /* A short warm-up fills the daemon's buffer cache and the GPU's first allocations. */
  struct shm_worker warm = {
      .seconds = 0.5, .region = &region, .qubits = qubits, .batch = batch, .slice_bytes = slice};
  shm_worker_main(&warm);
  double t0 = now_us();
  for (unsigned long i = 0; i < clients; i++) {
    w[i] = (struct shm_worker){.seconds = (double)seconds,
                               .region = &region,
                               .qubits = qubits,
                               .batch = batch,
                               .slice_bytes = slice,
                               .index = (unsigned)i};
  }
  if (run_clients(w, clients, sizeof *w, shm_worker_main, tid) != 0) {
    return 1;
  }
  uint64_t total = 0;
  for (unsigned long i = 0; i < clients; i++) {
    total += w[i].jobs;
  }
  double elapsed = (now_us() - t0) / 1e6;
  /* The target is one H200's, for the shape it was set for (docs/performance.md, "The daemon end
   * to end"). */
  printf("bench op=shm-batch qubits=%u batch=%" PRIu64 " clients=%lu batches=%" PRIu64
         " seconds=%.2f vectors_per_s=%.0f input_GBps=%.2f region_pinned=%d register_ms=%.1f%s\n",
         qubits, batch, clients, total, elapsed, (double)(total * batch) / elapsed,
         (double)(total * slice) / elapsed / 1e9, region.pinned, reg_ms,
         qubits == 16 && batch == 64 ? " target_vectors_per_s=95000" : "");
  qdp_region_unregister(c, region.handle, region.token);
  qdp_client_destroy(c);
  munmap(x, bytes);
  close(fd);
  shm_unlink(name);
  free(w);
  free(tid);
  return 0;
}

static const char usage[] =
    "Usage: qdpd_bench [--jobs N] [--clients C] [--seconds S] [--fetch-qubits Q]\n"
    "       qdpd_bench --shm-batch QUBITS:BATCH [--clients C] [--seconds S]\n"
    "Times the qdpd at QDP_TARGET (default unix:/run/qdp/qdpd.sock) through libqdp: an 8-qubit\n"
    "inline amplitude job's round trip beside Health's (p50, p99; --jobs of each, default 2000),\n"
    "jobs per second from C clients over S seconds (default 16, 3), and Fetch of a Q-qubit state\n"
    "(default 26). --shm-batch instead encodes batches of BATCH samples of QUBITS qubits from one\n"
    "registered shared-memory region: vectors per second and input GB/s. One `bench op=...` line\n"
    "per figure.\n";

int main(int argc, char **argv) {
  unsigned long jobs = 2000, clients = 16, seconds = 3, fetch_qubits = 26;
  unsigned shm_qubits = 0;
  unsigned long shm_batch = 0;
  bench_cli_help(argc, argv, usage);
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 == argc) {
      bench_cli_fail("qdpd_bench", usage, "%s needs a value", argv[i]);
    }
    if (strcmp(argv[i], "--shm-batch") == 0) {
      if (sscanf(argv[i + 1], "%u:%lu", &shm_qubits, &shm_batch) != 2 || shm_qubits < 1 ||
          shm_qubits > 30 || shm_batch < 1 || shm_batch > 65536) {
        bench_cli_fail("qdpd_bench", usage,
                       "--shm-batch takes QUBITS:BATCH (1..30:1..65536, e.g. 16:64), not '%s'",
                       argv[i + 1]);
      }
      continue;
    }
    if (strcmp(argv[i], "--jobs") == 0) {
      jobs = bench_cli_number("qdpd_bench", usage, argv[i], argv[i + 1], 1, 10000000);
    } else if (strcmp(argv[i], "--clients") == 0) {
      clients = bench_cli_number("qdpd_bench", usage, argv[i], argv[i + 1], 1, 1024);
    } else if (strcmp(argv[i], "--seconds") == 0) {
      seconds = bench_cli_number("qdpd_bench", usage, argv[i], argv[i + 1], 1, 3600);
    } else if (strcmp(argv[i], "--fetch-qubits") == 0) {
      fetch_qubits = bench_cli_number("qdpd_bench", usage, argv[i], argv[i + 1], 1, 34);
    } else {
      bench_cli_fail("qdpd_bench", usage, "unknown option '%s'", argv[i]);
    }
  }
  if (shm_qubits) {
    return shm_batches(shm_qubits, shm_batch, clients, seconds);
  }
  double x[256];
  for (int i = 0; i < 256; i++) {
    x[i] = 0.5 + (double)(i % 17) / 17.0;
  }

  /* Round trip, one client, after a warm-up; Health first, as the floor. */
  qdp_client *c = connect_client();
  for (int i = 0; i < 200; i++) {
    small_job(c, x);
  }
  double *lat = malloc(jobs * sizeof *lat);
  if (!lat) {
    return 1;
  }
  for (unsigned long i = 0; i < jobs; i++) {
    qdp_health h;
    double t0 = now_us();
    if (qdp_get_health(c, &h) != QDP_OK) {
      die("health");
    }
    lat[i] = now_us() - t0;
  }
  qsort(lat, jobs, sizeof *lat, cmp_double);
  double health_p50 = lat[jobs / 2];
  printf("bench op=roundtrip job=health n=%lu p50_us=%.1f p99_us=%.1f min_us=%.1f\n", jobs,
         lat[jobs / 2], lat[jobs * 99 / 100], lat[0]);
  for (unsigned long i = 0; i < jobs; i++) {
    lat[i] = small_job(c, x);
  }
  qsort(lat, jobs, sizeof *lat, cmp_double);
  printf(
      "bench op=roundtrip job=amplitude-8q-inline n=%lu p50_us=%.1f p99_us=%.1f min_us=%.1f "
      "vs_health=%.2f target_p50_us=100\n",
      jobs, lat[jobs / 2], lat[jobs * 99 / 100], lat[0], lat[jobs / 2] / health_p50);
  free(lat);

  /* Throughput with concurrent clients. */
  struct worker *w = calloc(clients, sizeof *w);
  pthread_t *tid = calloc(clients, sizeof *tid);
  if (!w || !tid) {
    return 1;
  }
  double t0 = now_us();
  for (unsigned long i = 0; i < clients; i++) {
    w[i] = (struct worker){.seconds = (double)seconds, .x = x};
  }
  if (run_clients(w, clients, sizeof *w, worker_main, tid) != 0) {
    return 1;
  }
  uint64_t total = 0;
  for (unsigned long i = 0; i < clients; i++) {
    total += w[i].jobs;
  }
  double elapsed = (now_us() - t0) / 1e6;
  printf("bench op=throughput clients=%lu jobs=%" PRIu64 " seconds=%.2f jobs_per_s=%.0f\n", clients,
         total, elapsed, (double)total / elapsed);
  free(w);
  free(tid);

  /* Fetch throughput: an angle state (cheap to encode) read back whole. */
  double angles[34];
  for (unsigned long k = 0; k < fetch_qubits; k++) {
    angles[k] = 0.1 * (double)(k + 1);
  }
  struct qdp_encode_opts eo = QDP_ENCODE_OPTS_INIT;
  eo.encoding = QDP_ENCODING_ANGLE;
  eo.qubits = (uint32_t)fetch_qubits;
  eo.dtype = QDP_DTYPE_COMPLEX128;
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_INLINE;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.data = angles;
  in.data_bytes = fetch_qubits * sizeof angles[0];
  struct qdp_state_info *s = NULL;
  if (qdp_encode(c, &eo, &in, &s) != QDP_OK) {
    die("encode for fetch");
  }
  size_t bytes = (size_t)s->bytes;
  void *buf = malloc(bytes);
  if (!buf) {
    return 1;
  }
  memset(buf, 0, bytes); /* fault the pages in before timing */
  double best = 0;
  for (int rep = 0; rep < 3; rep++) {
    struct qdp_fetch_opts fo = QDP_FETCH_OPTS_INIT;
    size_t got = 0;
    double f0 = now_us();
    if (qdp_fetch(c, s->handle, s->token, &fo, buf, bytes, &got) != QDP_OK || got != bytes) {
      die("fetch");
    }
    double gbps = (double)bytes / ((now_us() - f0) * 1e3);
    best = gbps > best ? gbps : best;
  }
  printf("bench op=fetch bytes=%zu best_GBps=%.2f target_GBps=1\n", bytes, best);
  qdp_release(c, s->handle, s->token, NULL);
  qdp_state_info_free(s);
  free(buf);
  qdp_client_destroy(c);
  return 0;
}
