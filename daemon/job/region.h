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
  /* Pinned and not sealed: its change time when its pages were last found to be those it pinned
   * (job_region_check_pinned). */
  _Atomic int64_t pin_gen;
};

/* For a pinned region that is not sealed, before a job reads or writes it: when its change time
 * moved since its pages were last verified, whether they are still the object's (the daemon's
 * mapping of them all present: io_mapping_resident); a region cut since it was pinned (the devices
 * would read or write its old pages) is lost, DATA_LOSS naming it and `field`. OK otherwise, and
 * for every other region. */
qdp_status job_region_check_pinned(struct job_region *g, const char *name, const char *field,
                                   struct qdp_error *err);

/* The registry's payload_end: unpins and unmaps. */
void job_region_end(void *payload);

#endif /* QDP_JOB_REGION_H */
