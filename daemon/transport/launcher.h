/* launcher.h — what MPI launchers (Open MPI's mpirun, srun with PMI or PMIx, MPICH's Hydra) tell
 * the processes they start, read from the environment in one place: whether this process was
 * started into an MPI world, and its index among the launcher's processes on its node.
 *
 * Reads the environment only; any thread (nothing here sets it).
 */
#ifndef QDP_LAUNCHER_H
#define QDP_LAUNCHER_H

#include <stdbool.h>
#include <stddef.h>

/* A launcher started this process into an MPI world (it should join one: MPI_Init). */
bool launcher_started_mpi(void);

/* This process's index among the launcher's processes on its node, from the first variable set of
 * those launcher_local_rank_names lists; -1 when none is set or its value is not a number below
 * 1024. */
int launcher_local_rank(void);

/* The variables launcher_local_rank reads, for messages: "A, B, C or D", into buf. */
void launcher_local_rank_names(char *buf, size_t size);

/* The i-th variable of all those read here (world and local-rank ones), NULL past the last: for
 * tests that clear the launcher's environment. */
const char *launcher_var_name(size_t i);

#endif /* QDP_LAUNCHER_H */
