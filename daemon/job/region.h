/* region.h — a registered region as the pipeline holds it (the registry's payload). */
#ifndef QDP_JOB_REGION_H
#define QDP_JOB_REGION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "io/map.h"
#include "runtime/runtime.h"

/* The whole object mapped once, page-locked for the devices when the backend wants that, read by
 * every job that names it and, when registered writable, written by FetchInto. */
struct job_region {
  struct io_mapping map;
  struct runtime_mesh *mesh;
  bool pinned;
  bool writable; /* mapped read-write: an output of FetchInto too */
  atomic_bool lost; /* it shrank or changed under a job: its pages may be zeros or stale now */
  /* Writable and not sealed: its change time when the daemon last made all its pages writable in
   * its mapping (io_mapping_populate_write), so that its own writes move the time no more; a
   * write that finds another time populates again first. */
  _Atomic int64_t gen;
};

/* The registry's payload_end: unpins and unmaps. */
void job_region_end(void *payload);

#endif /* QDP_JOB_REGION_H */
