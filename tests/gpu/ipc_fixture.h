/* The fixture the CUDA IPC tests of the job pipeline share (tests/gpu/ipc_fixture.c, the
 * qdp_test_ipc library; test_ipc_input, test_ipc_output): a client process that owns one CUDA
 * allocation and a daemon's side in this process (mesh, world, state store, job pipeline) that
 * opens it by IPC handle. Plain programs, no Check.
 *
 * The contract:
 *  - main() returns qdpt_ipc_main(&spec) and touches CUDA nowhere before it: the client is forked
 *    first (a CUDA context does not survive fork), and an IPC handle cannot be opened by the
 *    process that exported it, hence the two processes.
 *  - The client allocates spec.alloc_bytes on cuda:0, fills them with spec.fill (run in the child;
 *    a test may call it again to know the initial bytes), exports the handle and then obeys
 *    commands: qdpt_ipc_client_read, qdpt_ipc_client_reset, and a quit qdpt_ipc_main sends last.
 *  - Without a CUDA device the client can export from, qdpt_ipc_main prints
 *    "<name>: no CUDA device the client could export from, skipping" and returns 77 (meson's
 *    skip). Otherwise it prints "<name>: <n> GPU(s)", calls spec.run with the daemon's side
 *    started, stops it, checks that the client exited with 0, prints "<name>: passed" or
 *    "<name>: FAILED" and returns 0 or 1. A daemon's side that cannot start is a failure.
 *  - CHECK(cond, fmt, ...) counts a failure and prints "<name>: FAIL file:line: message" on
 *    stderr; the test goes on.
 */
#ifndef QDP_TESTS_GPU_IPC_FIXTURE_H
#define QDP_TESTS_GPU_IPC_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "job/job.h"

struct qdpt_ipc {
  struct runtime_mesh *mesh;                      /* every GPU ("auto"), 256 MiB a device */
  struct world *world;                            /* a world of one rank */
  struct state_store *store;                      /* 1 GiB */
  struct job_pipeline *jp;                        /* at most 30 qubits, a batch of 2^20 */
  struct job_caller me;                           /* uid:0 */
  unsigned char handle[RUNTIME_IPC_HANDLE_BYTES]; /* the client's allocation */
  struct runtime_device_info gpu0;                /* the mesh's first device */
  /* The fixture's own. */
  int to_child, from_child;
  size_t alloc_bytes;
};

struct qdpt_ipc_spec {
  const char *name;                 /* the program's, in front of every line the fixture prints */
  size_t alloc_bytes;               /* the client's allocation */
  void (*fill)(unsigned char *buf); /* its initial bytes, alloc_bytes of them */
  void (*run)(struct qdpt_ipc *d);  /* the checks, with the daemon's side started */
};

/* The whole program: see the contract above. Returns main's exit status. */
int qdpt_ipc_main(const struct qdpt_ipc_spec *spec);

/* A failure of the test, printed with the program's name in front; see CHECK. */
void qdpt_ipc_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CHECK(cond, ...) \
  do { \
    if (!(cond)) { \
      qdpt_ipc_fail(__FILE__, __LINE__, __VA_ARGS__); \
    } \
  } while (0)

/* The whole state of one encode as d->me (req kept, fetched whole, released): malloc'd, its size
 * in *ret_bytes; NULL on failure, e holding why. */
unsigned char *qdpt_ipc_encode_read(struct qdpt_ipc *d, const struct job_encode_request *req,
                                    uint64_t *ret_bytes, struct qdp_error *e);

/* The client's allocation as it is now, alloc_bytes into buf. 0, or -1 where the client failed. */
int qdpt_ipc_client_read(struct qdpt_ipc *d, unsigned char *buf);

/* The client's allocation back to its initial bytes (spec.fill's). 0, or -1. */
int qdpt_ipc_client_reset(struct qdpt_ipc *d);

#endif
