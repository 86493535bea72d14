/* world_bench — what a world of ranks adds to each job, and how a job scales over ranks.
 *
 * Run under mpirun (or alone, a world of one). Every rank builds a mesh of --devices (default
 * cpu:2); rank 0 times, for --jobs jobs of --encoding (angle, amplitude or iqp; default angle) with
 * --qubits qubits (default 4),
 *  - local:  plan + encode + release on rank 0's first device alone, no other rank involved;
 *  - world:  the same over the spread: with --all every device of the world, else rank 0's second
 *            device and the other ranks' devices (the largest power of two of them), so that the
 *            job goes to every other rank (with 2 ranks of cpu:2: one shard each);
 * and prints `bench op=... p50_us= p99_us=` lines, the state's collective, and the difference
 * world - local at p50 (for a small job: what planning across the world, sending the job, the
 * collectives and collecting the answers add) and local / world (for a large one: the scaling).
 * Amplitude input is --file PATH (float64, 2^qubits values from byte --offset on, on a filesystem
 * every rank sees: each rank reads only its window), else values made here. The other ranks
 * serve until rank 0 is done.
 *
 * Usage: mpirun -n 2 world_bench [--jobs N] [--devices SPEC] [--encoding E] [--qubits N]
 *                                [--all] [--host-collectives] [--probe] [--file PATH [--offset B]]
 *                                [--copy-threads N] [--cold]
 * --host-collectives keeps the ranks off NCCL (their collectives over MPI), for comparison;
 * --probe then times plain copies of the input as this process sees it. --copy-threads is the
 * mesh's copy_threads (runtime.h: 1, the encoding thread alone; 0, the default, auto). --cold
 * (one rank, with --file): before each local job the file's pages leave the page cache
 * (posix_fadvise DONTNEED on a fresh mapping), so each job reads the device; no warm-up and no
 * world series. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_cli.h"
#include "log.h"
#include "plan/plan.h"
#include "qdpk.h"
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

struct job {
  qdp_encoding encoding;
  uint32_t qubits;
  struct runtime_input in;
  uint32_t iqp_top_bits; /* the mesh's (plan_request.iqp_top_bits) */
};

/* Times `jobs` rounds of plan + encode + release over the devices in subset; fills t_plan and
 * t_job (microseconds, sorted) and *how (the states' collective). */
static int run(struct world *w, const struct job *job, const size_t *subset, size_t nsub, int jobs,
               double *t_plan, double *t_job, double *t_norm, double *t_encode,
               const char **how) {
  size_t ndev = world_device_count(w);
  struct plan_device *devs = calloc(ndev, sizeof *devs);
  if (!devs) {
    return -1;
  }
  for (int j = 0; j < jobs; j++) {
    struct qdp_error err = QDP_ERROR_INIT;
    struct plan *p = NULL;
    struct runtime_state *st = NULL;
    double t0 = now_us();
    world_plan_devices(w, devs);
    struct plan_request req = {.encoding = job->encoding,
                               .qubits = job->qubits,
                               .batch = 1,
                               .values_per_sample = job->in.cols,
                               .in_dtype = QDP_DTYPE_FLOAT64,
                               .out_dtype = QDP_DTYPE_COMPLEX128,
                               .policy = nsub > 1 ? PLAN_EVEN : PLAN_SINGLE,
                               .device_subset = subset,
                               .device_subset_count = nsub,
                               .iqp_top_bits = job->iqp_top_bits};
    struct plan_world pw = {.devices = devs, .count = ndev, .ranks = world_size(w)};
    if (plan_compute(&req, &pw, NULL, &p, &err) != QDP_OK) {
      fprintf(stderr, "world_bench: plan: %s\n", err.msg);
      free(devs);
      return -1;
    }
    double t1 = now_us();
    qdp_status rc = world_encode(w, p, &job->in, &st, &err);
    if (rc == QDP_OK) {
      *how = runtime_state_collective(st);
      t_norm[j] = runtime_state_norm_us(st);
      t_encode[j] = runtime_state_encode_ms(st) * 1e3;
    }
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
  qsort(t_norm, (size_t)jobs, sizeof *t_norm, cmp_double);
  qsort(t_encode, (size_t)jobs, sizeof *t_encode, cmp_double);
  free(devs);
  return 0;
}

/* --cold: each local job from a fresh mapping of the file, its pages dropped from the page cache
 * first; prints the median and each job's input rate. *mapped holds the last mapping. */
static int run_cold(struct world *w, struct job *job, const char *file, uint64_t offset,
                    size_t in_bytes, int jobs, void **mapped, double *tp, double *tj, double *tn,
                    double *te, const char **how) {
  size_t local[1] = {0};
  for (int j = 0; j < jobs; j++) {
    if (*mapped) {
      munmap(*mapped, offset + in_bytes);
      *mapped = NULL;
    }
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      fprintf(stderr, "world_bench: cannot open '%s': %s\n", file, strerror(errno));
      return 1;
    }
    int adv = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    void *map = mmap(NULL, offset + in_bytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (adv != 0 || map == MAP_FAILED) {
      fprintf(stderr, "world_bench: cannot drop and map '%s'\n", file);
      return 1;
    }
    *mapped = map;
    job->in.data = (const char *)map + offset;
    if (run(w, job, local, 1, 1, tp + j, tj + j, tn + j, te + j, how)) {
      return 1;
    }
    printf("bench op=cold encoding=%s qubits=%u job=%d us=%.1f input_gb_s=%.2f\n",
           qdp_encoding_name(job->encoding), job->qubits, j, tj[j], (double)in_bytes / tj[j] / 1e3);
  }
  qsort(tj, (size_t)jobs, sizeof *tj, cmp_double);
  printf("bench op=cold encoding=%s qubits=%u jobs=%d p50_us=%.1f input_gb_s=%.2f\n",
         qdp_encoding_name(job->encoding), job->qubits, jobs, tj[jobs / 2],
         (double)in_bytes / tj[jobs / 2] / 1e3);
  return 0;
}

static const char usage[] =
    "Usage: mpirun -n 2 world_bench [--jobs N] [--devices SPEC] [--encoding E] [--qubits N]\n"
    "                               [--all] [--host-collectives] [--probe]\n"
    "                               [--file PATH [--offset B]] [--copy-threads N] [--cold]\n"
    "Times what a world of ranks adds to a job: N jobs (default 5000) of E (angle, amplitude or\n"
    "iqp; default angle) with N qubits (default 4) on rank 0's first device alone, then over the\n"
    "world (every device with --all). Each rank's mesh is SPEC (default cpu:2). --file: amplitude\n"
    "input from a float64 file every rank sees, from byte B; --cold: one rank, the file's pages\n"
    "dropped before each job. --host-collectives keeps the ranks off NCCL; --probe times plain\n"
    "copies of the input; --copy-threads is the mesh's copy_threads (0: auto).\n";

/* The value after option o; v NULL: o ended the command line. */
static const char *value_of(const char *o, const char *v) {
  return bench_cli_value("world_bench", usage, o, v);
}

int main(int argc, char **argv) {
  int jobs = 5000, all = 0, host_collectives = 0, probe = 0, cold = 0;
  unsigned copy_threads = 0;
  const char *spec = "cpu:2", *file = NULL;
  uint64_t offset = 0;
  struct job job = {.encoding = QDP_ENCODING_ANGLE, .qubits = 4};
  bench_cli_help(argc, argv, usage);
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--all") == 0 || strcmp(argv[i], "--host-collectives") == 0 ||
        strcmp(argv[i], "--probe") == 0 || strcmp(argv[i], "--cold") == 0) {
      all |= strcmp(argv[i], "--all") == 0;
      host_collectives |= strcmp(argv[i], "--host-collectives") == 0;
      probe |= strcmp(argv[i], "--probe") == 0;
      cold |= strcmp(argv[i], "--cold") == 0;
      continue;
    }
    const char *o = argv[i];
    if (strcmp(o, "--jobs") == 0) {
      jobs = (int)bench_cli_number("world_bench", usage, o, value_of(o, v), 3, 100000000);
    } else if (strcmp(o, "--devices") == 0) {
      spec = value_of(o, v);
    } else if (strcmp(o, "--encoding") == 0) {
      const char *e = value_of(o, v);
      if (strcmp(e, "amplitude") && strcmp(e, "iqp") && strcmp(e, "angle")) {
        bench_cli_fail("world_bench", usage, "--encoding takes angle, amplitude or iqp, not '%s'",
                       e);
      }
      job.encoding = strcmp(e, "amplitude") == 0 ? QDP_ENCODING_AMPLITUDE
                     : strcmp(e, "iqp") == 0     ? QDP_ENCODING_IQP
                                                 : QDP_ENCODING_ANGLE;
    } else if (strcmp(o, "--qubits") == 0) {
      job.qubits = (uint32_t)bench_cli_number("world_bench", usage, o, value_of(o, v), 1, 34);
    } else if (strcmp(o, "--file") == 0) {
      file = value_of(o, v);
    } else if (strcmp(o, "--offset") == 0) {
      offset = bench_cli_number("world_bench", usage, o, value_of(o, v), 0, UINT64_MAX);
    } else if (strcmp(o, "--copy-threads") == 0) {
      copy_threads = (unsigned)bench_cli_number("world_bench", usage, o, value_of(o, v), 0, 32);
    } else {
      bench_cli_fail("world_bench", usage, "unknown option '%s'", o);
    }
    i++;
  }
  struct qdp_error err = QDP_ERROR_INIT;
  struct world *w = NULL;
  struct runtime_mesh *mesh = NULL;
  double *tp = NULL, *tj = NULL, *tn = NULL, *te = NULL, *wp = NULL, *wj = NULL, *wn = NULL,
         *we = NULL, *made = NULL;
  void *mapped = NULL;
  size_t mapped_bytes = 0;
  const char *how_local = "none", *how_world = "none";
  int rc = 1;
  log_set_level(4); /* warnings only: the ranks log every job at info */
  if (world_create(true, &argc, &argv, &w, &err) != QDP_OK) {
    fprintf(stderr, "world_bench: %s\n", err.msg);
    return 1;
  }
  struct runtime_mesh_config mc = {
      .devices = spec, .mem_fraction = 0.9, .copy_threads = copy_threads};
  qdp_status mrc = runtime_mesh_create(&mc, &mesh, &err);
  if (world_start(w, mrc, &err, mesh, 10000, !host_collectives, &err) != QDP_OK) {
    fprintf(stderr, "world_bench: %s\n", err.msg);
    goto out;
  }
  job.iqp_top_bits = runtime_mesh_iqp_top_bits(mesh);
  if (world_rank(w) == 0) {
    char dc[192];
    world_device_collectives(w, dc, sizeof dc);
    printf("bench op=world_start ranks=%d devices=%zu device_collectives=\"%s\"\n", world_size(w),
           world_device_count(w), dc);
  }
  if (world_rank(w) != 0) {
    static volatile sig_atomic_t never;
    rc = world_serve(w, &never, &err) == QDP_OK ? 0 : 1;
    goto out;
  }
  if (world_size(w) < 2 && !all) {
    fprintf(stderr, "world_bench: run it under mpirun -n 2 (or more), or give --all\n");
    goto out;
  }
  /* The input: angles, or amplitudes made here or mapped from the file every rank reads. */
  uint64_t cols = qdp_values_per_sample(job.encoding, job.qubits);
  size_t in_bytes = (size_t)cols * sizeof(double);
  job.in = (struct runtime_input){.dtype = QDP_DTYPE_FLOAT64, .rows = 1, .cols = cols};
  if (file) {
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    void *map = fd >= 0 ? mmap(NULL, offset + in_bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (fd >= 0) {
      close(fd);
    }
    if (map == MAP_FAILED) {
      fprintf(stderr, "world_bench: cannot map %zu B of '%s'\n", in_bytes, file);
      goto out;
    }
    mapped = map;
    mapped_bytes = offset + in_bytes;
    job.in.data = (const char *)map + offset;
    job.in.file = file;
    job.in.file_offset = offset;
  } else {
    made = malloc(in_bytes);
    if (!made) {
      goto out;
    }
    for (uint64_t i = 0; i < cols; i++) {
      made[i] = 0.1 + (double)(i % 97) * 0.01;
    }
    job.in.data = made;
  }
  /* Local: rank 0's first device. World: every device with --all, else rank 0's second device and
   * every other rank's devices; the largest power of two of them (even plans need 2^g devices). */
  size_t local[1] = {0}, spread[64];
  size_t nspread = 0, ndev = world_device_count(w);
  for (size_t i = all ? 0 : 1; i < ndev && nspread < 64; i++) {
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
  tn = calloc((size_t)jobs, sizeof *tn);
  wn = calloc((size_t)jobs, sizeof *wn);
  te = calloc((size_t)jobs, sizeof *te);
  we = calloc((size_t)jobs, sizeof *we);
  if (!tp || !tj || !wp || !wj || !tn || !wn || !te || !we) {
    goto out;
  }
  if (cold) {
    rc = run_cold(w, &job, file, offset, in_bytes, jobs, &mapped, tp, tj, tn, te, &how_local);
    goto out;
  }
  /* Warm-up, then the two series. */
  int warm = jobs < 10 ? 1 : 10;
  if (run(w, &job, local, 1, warm, tp, tj, tn, te, &how_local) ||
      run(w, &job, spread, pow2, warm, wp, wj, wn, we, &how_world) ||
      run(w, &job, local, 1, jobs, tp, tj, tn, te, &how_local) ||
      run(w, &job, spread, pow2, jobs, wp, wj, wn, we, &how_world)) {
    goto out;
  }
  size_t p50 = (size_t)jobs / 2, p99 = (size_t)jobs * 99 / 100;
  const char *enc = qdp_encoding_name(job.encoding);
  printf("bench op=local encoding=%s qubits=%u ranks=1 devices=1 jobs=%d plan_p50_us=%.1f "
         "p50_us=%.1f p99_us=%.1f encode_p50_us=%.1f collective=%s\n",
         enc, job.qubits, jobs, tp[p50], tj[p50], tj[p99], te[p50], how_local);
  printf("bench op=world encoding=%s qubits=%u ranks=%d devices=%zu jobs=%d plan_p50_us=%.1f "
         "p50_us=%.1f p99_us=%.1f encode_p50_us=%.1f collective=%s norm_p50_us=%.1f "
         "norm_p99_us=%.1f\n",
         enc, job.qubits, world_size(w), pow2, jobs, wp[p50], wj[p50], wj[p99], we[p50], how_world,
         wn[p50], wn[p99]);
  printf("bench op=overhead encoding=%s qubits=%u ranks=%d world_minus_local_p50_us=%.1f "
         "local_over_world=%.3f\n",
         enc, job.qubits, world_size(w), wj[p50] - tj[p50], tj[p50] / wj[p50]);
  if (probe) {
    /* How fast this process reads the input where it lies (a mapped file: the page cache), into
     * memory already touched: the ceiling of ingesting it here. */
    char *dst = malloc(in_bytes);
    for (int k = 0; dst && k < 3; k++) {
      memset(dst, k, in_bytes);
      double t0 = now_us();
      memcpy(dst, job.in.data, in_bytes);
      double us = now_us() - t0;
      printf("bench op=probe pass=%d read_gb_s=%.2f sum=%d\n", k, (double)in_bytes / us / 1e3,
             dst[in_bytes / 2]);
    }
    free(dst);
  }
  rc = 0;
out:
  free(made);
  if (mapped) {
    munmap(mapped, mapped_bytes);
  }
  free(tp);
  free(tj);
  free(tn);
  free(wn);
  free(te);
  free(we);
  free(wp);
  free(wj);
  world_destroy(w);
  runtime_mesh_destroy(mesh);
  return rc;
}
