/* session.c — sessions as jobs see them (job.h): the table says which sessions live and ended
 * (state/sessions.h); ending one releases the states and regions that recorded its id. */
#include <stddef.h>

#include "clock.h"
#include "internal.h"

qdp_status job_check_session(struct job_pipeline *jp, const struct job_caller *caller,
                             struct qdp_error *err) {
  if (!caller->session || !caller->session[0]) {
    return QDP_OK;
  }
  return session_touch(jp->sessions, caller->owner, caller->session, "session", clock_unix_ms(),
                       NULL, err);
}

qdp_status job_open_session(struct job_pipeline *jp, const struct job_caller *caller,
                            uint64_t heartbeat_ms, const char *label, struct session_info *ret,
                            struct qdp_error *err) {
  return session_open(jp->sessions, caller->owner, caller->pid, caller->pidfd, heartbeat_ms,
                      label, clock_unix_ms(), ret, err);
}

qdp_status job_heartbeat(struct job_pipeline *jp, const struct job_caller *caller, const char *id,
                         struct session_info *ret, struct qdp_error *err) {
  return session_touch(jp->sessions, caller->owner, id, "session", clock_unix_ms(), ret, err);
}

/* Releases what session `id` holds. */
static void end_members(struct job_pipeline *jp, const char *id, struct job_session_end *ret) {
  ret->states = state_store_end_session(jp->store, id, &ret->bytes);
  ret->regions = region_registry_end_session(jp->regions, id, NULL, NULL);
}

qdp_status job_close_session(struct job_pipeline *jp, const struct job_caller *caller,
                             const char *id, struct job_session_end *ret, struct qdp_error *err) {
  *ret = (struct job_session_end){0};
  qdp_status rc = session_close(jp->sessions, caller->owner, id, NULL, err);
  if (rc == QDP_OK) {
    end_members(jp, id, ret);
  }
  return rc;
}

struct sweep {
  struct job_pipeline *jp;
  const struct job_expire_report *report;
};

static void on_ended(const struct session_info *s, const char *why, void *arg) {
  struct sweep *w = arg;
  struct job_session_end e;
  end_members(w->jp, s->id, &e);
  if (w->report->session) {
    w->report->session(s, why, &e, w->report->arg);
  }
}

size_t job_sweep_sessions(struct job_pipeline *jp, int64_t now_unix_ms,
                          const struct job_expire_report *report) {
  struct sweep w = {.jp = jp, .report = report};
  return session_sweep(jp->sessions, now_unix_ms, on_ended, &w);
}
