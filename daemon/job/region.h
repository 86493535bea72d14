/* region.h — a registered region as the pipeline holds it (the registry's payload). */
#ifndef QDP_JOB_REGION_H
#define QDP_JOB_REGION_H

#include <stdatomic.h>
#include <stdbool.h>

#include "io/map.h"
#include "runtime/runtime.h"

/* The whole object mapped once, page-locked for the devices when the backend wants that, read by
 * every job that names it and, when registered writable, written by FetchInto. */
struct job_region {
  struct io_mapping map;
  struct runtime_mesh *mesh;
  bool pinned;
  bool writable; /* mapped read-write: an output of FetchInto too */
  atomic_bool lost; /* it shrank under a job: its pages are zeros now, never to be read again */
};

/* The registry's payload_end: unpins and unmaps. */
void job_region_end(void *payload);

#endif /* QDP_JOB_REGION_H */
