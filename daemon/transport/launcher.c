/* The launchers' environment (launcher.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher.h"

/* One row per variable a launcher sets, in the order local ranks are looked up. */
static const struct {
  const char *var;
  bool world;      /* set in every process started into an MPI world */
  bool local_rank; /* holds the process's index on its node */
} launcher_vars[] = {
    {"OMPI_COMM_WORLD_SIZE", true, false},       /* Open MPI's mpirun */
    {"OMPI_COMM_WORLD_LOCAL_RANK", false, true}, /* Open MPI's mpirun */
    {"SLURM_LOCALID", false, true},              /* srun, with or without MPI */
    {"MPI_LOCALRANKID", false, true},            /* MPICH's Hydra */
    {"PMIX_RANK", true, false},                  /* PMIx: srun --mpi=pmix, mpirun */
    {"PMIX_LOCAL_RANK", false, true},            /* PMIx */
    {"PMI_RANK", true, false},                   /* PMI-1/2: srun --mpi=pmi2 */
    {"PMI_SIZE", true, false},                   /* PMI-1/2 */
};

#define NVARS (sizeof launcher_vars / sizeof launcher_vars[0])

/* Every node has fewer processes than this: a larger index is not a local rank. */
#define LOCAL_RANK_LIMIT 1024

bool launcher_started_mpi(void) {
  for (size_t i = 0; i < NVARS; i++) {
    if (launcher_vars[i].world && getenv(launcher_vars[i].var)) {
      return true;
    }
  }
  return false;
}

int launcher_local_rank(void) {
  const char *v = NULL;
  for (size_t i = 0; !v && i < NVARS; i++) {
    v = launcher_vars[i].local_rank ? getenv(launcher_vars[i].var) : NULL;
  }
  char *end = NULL;
  unsigned long n = v ? strtoul(v, &end, 10) : 0;
  if (!v || end == v || *end != '\0' || n >= LOCAL_RANK_LIMIT) {
    return -1;
  }
  return (int)n;
}

void launcher_local_rank_names(char *buf, size_t size) {
  size_t total = 0, at = 0;
  for (size_t i = 0; i < NVARS; i++) {
    total += launcher_vars[i].local_rank;
  }
  buf[0] = '\0';
  for (size_t i = 0, k = 0; i < NVARS; i++) {
    if (!launcher_vars[i].local_rank) {
      continue;
    }
    const char *sep = k == 0 ? "" : k + 1 == total ? " or " : ", ";
    int w = snprintf(buf + at, size - at, "%s%s", sep, launcher_vars[i].var);
    if (w < 0 || (size_t)w >= size - at) {
      return; /* cut short: messages only */
    }
    at += (size_t)w;
    k++;
  }
}

const char *launcher_var_name(size_t i) {
  return i < NVARS ? launcher_vars[i].var : NULL;
}
