/* clock.h — the daemon's two clocks, each read here and nowhere else, each in one unit.
 *
 * clock_mono_ns: CLOCK_MONOTONIC in nanoseconds, for every duration, timeout and age (a job's
 * phases, a wait for another rank, an idle upload, a ticket's lifetime, what is kept for reuse).
 * Timestamps of it are stored in nanoseconds (`_ns` fields); a figure in another unit (a limit in
 * milliseconds, a timing reported in ms or us) is converted where it meets them, with the
 * CLOCK_NS_PER_* factors.
 *
 * clock_unix_ms: CLOCK_REALTIME in Unix milliseconds, for instants that leave the process or are
 * compared with ones that did (a state's creation and expiry, a lease's opening, a log line's
 * time). Never for a duration: the wall clock may step.
 *
 * Any thread.
 */
#ifndef QDP_CLOCK_H
#define QDP_CLOCK_H

#include <stdint.h>
#include <time.h>

#define CLOCK_NS_PER_US UINT64_C(1000)
#define CLOCK_NS_PER_MS UINT64_C(1000000)
#define CLOCK_NS_PER_S UINT64_C(1000000000)

static inline uint64_t clock_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * CLOCK_NS_PER_S + (uint64_t)ts.tv_nsec;
}

static inline int64_t clock_unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / (long)CLOCK_NS_PER_MS;
}

#endif /* QDP_CLOCK_H */
