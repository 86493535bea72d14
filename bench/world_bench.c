/* world_bench — what a world of ranks adds to each job: the coordinator's plan across the world
 * plus sending the job to the ranks that own shards, collecting their answers and releasing, for a
 * small job whose own work is a few microseconds.
 *
 * Run under mpirun (each rank builds a cpu:2 mesh): rank 0 times, for N jobs of a 4-qubit angle
 * state,
 *  - local:  plan + encode + release on one device of rank 0, no other rank involved: rank 0's
 *            own share of the world job below;
 *  - world:  plan + encode + release over rank 0's second device and the other ranks' devices
 *            (the largest power of two of them): one shard on rank 0, the rest on the others, so
 *            the job goes to every other rank (with 2 ranks: one shard each);
 * and prints `bench op=... p50_us= p99_us=` lines and the overhead, world - local at p50: what
 * planning across the world, sending the job, waiting for the answers and releasing add to the
 * coordinator's own work. The other ranks serve until rank 0 is done.
 *
 * Usage: mpirun -n 2 world_bench [--jobs N] */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "plan/plan.h"
#include "runtime/runtime.h"
#include "world/world.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Times `jobs` rounds of plan + encode + release over the devices in subset; fills t_plan and
 * t_job (microseconds, sorted). */
static int run(struct world *w, const size_t *subset, size_t nsub, int jobs, double *t_plan,
               double *t_job) {
  size_t ndev = world_device_count(w);
  struct plan_device *devs = calloc(ndev, sizeof *devs);
  double x[4] = {0.1, 0.2, 0.3, 0.4};
  struct runtime_input in = {.data = x, .dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = 4};
  if (!devs) {
    return -1;
  }
  for (int j = 0; j < jobs; j++) {
    struct qdp_error err = QDP_ERROR_INIT;
    struct plan *p = NULL;
    struct runtime_state *st = NULL;
    double t0 = now_us();
    world_plan_devices(w, devs);
    struct plan_request req = {.encoding = QDP_ENCODING_ANGLE,
                               .qubits = 4,
                               .batch = 1,
                               .values_per_sample = 4,
                               .in_dtype = QDP_DTYPE_FLOAT64,
                               .out_dtype = QDP_DTYPE_COMPLEX128,
                               .policy = PLAN_EVEN,
                               .device_subset = subset,
                               .device_subset_count = nsub};
    struct plan_world pw = {.devices = devs, .count = ndev, .ranks = world_size(w)};
    if (plan_compute(&req, &pw, NULL, &p, &err) != QDP_OK) {
      fprintf(stderr, "world_bench: plan: %s\n", err.msg);
      free(devs);
      return -1;
    }
    double t1 = now_us();
    qdp_status rc = world_encode(w, p, &in, &st, &err);
    runtime_state_destroy(st);
    double t2 = now_us();
    plan_destroy(p);
    if (rc != QDP_OK) {
      fprintf(stderr, "world_bench: encode: %s\n", err.msg);
      free(devs);
      return -1;
    }
    t_plan[j] = t1 - t0;
    t_job[j] = t2 - t0;
  }
  qsort(t_plan, (size_t)jobs, sizeof *t_plan, cmp_double);
  qsort(t_job, (size_t)jobs, sizeof *t_job, cmp_double);
  free(devs);
  return 0;
}

int main(int argc, char **argv) {
  int jobs = 5000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--jobs") == 0) {
      jobs = (int)strtol(argv[i + 1], NULL, 10);
    }
  }
  if (jobs < 10) {
    jobs = 10;
  }
  struct qdp_error err = QDP_ERROR_INIT;
  struct world *w = NULL;
  struct runtime_mesh *mesh = NULL;
  double *tp = NULL, *tj = NULL, *wp = NULL, *wj = NULL;
  int rc = 1;
  log_set_level(4); /* warnings only: the ranks log every job at info */
  if (world_create(true, &argc, &argv, &w, &err) != QDP_OK) {
    fprintf(stderr, "world_bench: %s\n", err.msg);
    return 1;
  }
  struct runtime_mesh_config mc = {.devices = "cpu:2", .mem_fraction = 0.9};
  qdp_status mrc = runtime_mesh_create(&mc, &mesh, &err);
  if (world_start(w, mrc, &err, mesh, 10000, true, &err) != QDP_OK) {
    fprintf(stderr, "world_bench: %s\n", err.msg);
    goto out;
  }
  if (world_rank(w) != 0) {
    static volatile sig_atomic_t never;
    rc = world_serve(w, &never, &err) == QDP_OK ? 0 : 1;
    goto out;
  }
  if (world_size(w) < 2) {
    fprintf(stderr, "world_bench: run it under mpirun -n 2 (or more)\n");
    goto out;
  }
  /* Local: rank 0's first device. World: rank 0's second device and every other rank's devices,
   * the largest power of two of them (even plans need 2^g devices). */
  size_t local[1] = {0}, spread[64];
  size_t nspread = 0, ndev = world_device_count(w);
  for (size_t i = 1; i < ndev && nspread < 64; i++) {
    spread[nspread++] = i;
  }
  size_t pow2 = 1;
  while (pow2 * 2 <= nspread) {
    pow2 *= 2;
  }
  tp = calloc((size_t)jobs, sizeof *tp);
  tj = calloc((size_t)jobs, sizeof *tj);
  wp = calloc((size_t)jobs, sizeof *wp);
  wj = calloc((size_t)jobs, sizeof *wj);
  if (!tp || !tj || !wp || !wj) {
    goto out;
  }
  /* Warm-up, then the two series. */
  if (run(w, local, 1, 10, tp, tj) || run(w, spread, pow2, 10, wp, wj) ||
      run(w, local, 1, jobs, tp, tj) || run(w, spread, pow2, jobs, wp, wj)) {
    goto out;
  }
  size_t p50 = (size_t)jobs / 2, p99 = (size_t)jobs * 99 / 100;
  printf("bench op=local ranks=1 devices=1 jobs=%d plan_p50_us=%.1f p50_us=%.1f p99_us=%.1f\n",
         jobs, tp[p50], tj[p50], tj[p99]);
  printf("bench op=world ranks=%d devices=%zu jobs=%d plan_p50_us=%.1f p50_us=%.1f p99_us=%.1f\n",
         world_size(w), pow2, jobs, wp[p50], wj[p50], wj[p99]);
  printf("bench op=overhead ranks=%d plan_broadcast_p50_us=%.1f target_us=1000 %s\n", world_size(w),
         wj[p50] - tj[p50], wj[p50] - tj[p50] <= 1000 ? "met" : "missed");
  rc = 0;
out:
  free(tp);
  free(tj);
  free(wp);
  free(wj);
  world_destroy(w);
  runtime_mesh_destroy(mesh);
  return rc;
}
