/* Whether the daemon serves (health.h): the answers, and the Watch streams.
 *
 * Watchers are on the server's list (watch_mu) from their arrival to their end. A change is
 * found by rpc_health_sweep, which the loop runs every second and right when a drain starts;
 * each watcher has at most one message in flight (gRPC allows one send at a time), and its
 * completion (the completion-queue thread) sends what changed meanwhile, or ends the stream. The
 * list's reference to a call passes to rpc_finish when it ends.
 */
#include <string.h>

#include "health.h"
#include "health.pb-c.h"
#include "qdp_wire.h"
#include "server_state.h"

int rpc_serving_status(struct rpc_server *s, const char *service) {
  if (atomic_load(&s->shutting_down)) {
    return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING; /* every one */
  }
  if (service && service[0] && strcmp(service, "qdp.Qdp") != 0) {
    return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
  }
  return job_ranks_lost(s->jobs)
             ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
             : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
}

static const char *service_of(const struct rpc_call *c) {
  const Grpc__Health__V1__HealthCheckRequest *req =
      (const Grpc__Health__V1__HealthCheckRequest *)c->req;
  return req && req->service ? req->service : "";
}

static void on_watch_sent(struct rpc_server *s, struct rpc_ev *e);

/* Sends `status` (watch_mu held; no message of c in flight). False when it could not start. */
static bool send_status(struct rpc_call *c, int status) {
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
  grpc_byte_buffer *bb = qdp_wire_pack(&r.base);
  if (!bb) {
    return false;
  }
  c->watch_sent = status;
  c->watch_sending = rpc_send_message(c, bb, on_watch_sent);
  return c->watch_sending;
}

/* Takes c off the list (watch_mu held); the caller then ends it with rpc_finish. */
static void unlist(struct rpc_server *s, struct rpc_call *c) {
  for (struct rpc_call **p = &s->watchers; *p; p = &(*p)->watch_next) {
    if (*p == c) {
      *p = c->watch_next;
      break;
    }
  }
  c->watch_next = NULL;
}

/* What c needs now (watch_mu held, nothing in flight): an end (its client left, the send
 * failed, or the drain's NOT_SERVING went out), a new status, or nothing. True when it ended:
 * the caller calls rpc_finish after dropping the lock. */
static bool step(struct rpc_server *s, struct rpc_call *c, bool failed) {
  if (failed || atomic_load(&c->cancel_seen) ||
      (atomic_load(&s->shutting_down) &&
       c->watch_sent == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING)) {
    unlist(s, c);
    return true;
  }
  int now = rpc_serving_status(s, service_of(c));
  if (now != c->watch_sent && !send_status(c, now)) {
    unlist(s, c);
    return true;
  }
  return false;
}

static void on_watch_sent(struct rpc_server *s, struct rpc_ev *e) {
  struct rpc_call *c = e->call;
  uv_mutex_lock(&s->watch_mu);
  grpc_byte_buffer_destroy(c->sending);
  c->sending = NULL;
  c->watch_sending = false;
  bool end = step(s, c, !e->ok);
  uv_mutex_unlock(&s->watch_mu);
  if (end) {
    rpc_finish(c, NULL, NULL); /* the list's reference */
  }
  rpc_call_unref(c); /* this batch's */
}

void rpc_health_answer(struct rpc_call *c) {
  Qdp__HealthReply r = QDP__HEALTH_REPLY__INIT;
  r.status = atomic_load(&c->srv->shutting_down) ? QDP__HEALTH_REPLY__SERVING_STATUS__NOT_SERVING
                                                 : QDP__HEALTH_REPLY__SERVING_STATUS__SERVING;
  rpc_finish(c, qdp_wire_pack(&r.base), NULL);
}

void rpc_health_check(struct rpc_call *c) {
  struct qdp_error err = QDP_ERROR_INIT;
  if (c->unpack_rc != QDP_OK) {
    rpc_finish(c, NULL, &c->err);
    return;
  }
  const char *service = service_of(c);
  if (service[0] && strcmp(service, "qdp.Qdp") != 0) {
    qdp_error_set(&err, QDP_ERR_NOT_FOUND, "service",
                  "no service '%.64s' here: ask for \"\" (the daemon) or \"qdp.Qdp\"", service);
    rpc_finish(c, NULL, &err);
    return;
  }
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)rpc_serving_status(c->srv, "");
  rpc_finish(c, qdp_wire_pack(&r.base), NULL);
}

void rpc_health_watch(struct rpc_call *c) {
  struct rpc_server *s = c->srv;
  if (c->unpack_rc != QDP_OK) {
    rpc_finish(c, NULL, &c->err);
    return;
  }
  rpc_watch_close(c); /* so that a client that leaves is seen at once */
  uv_mutex_lock(&s->watch_mu);
  c->watch_next = s->watchers;
  s->watchers = c;
  c->watch_sent = -1;
  bool end = step(s, c, false);
  uv_mutex_unlock(&s->watch_mu);
  if (end) {
    rpc_finish(c, NULL, NULL);
  }
}

void rpc_health_sweep(struct rpc_server *s) {
  for (;;) {
    struct rpc_call *ended = NULL;
    uv_mutex_lock(&s->watch_mu);
    for (struct rpc_call *c = s->watchers; c; c = c->watch_next) {
      if (!c->watch_sending && step(s, c, false)) {
        ended = c;
        break; /* the list changed: finish this one outside the lock, then look again */
      }
    }
    uv_mutex_unlock(&s->watch_mu);
    if (!ended) {
      return;
    }
    rpc_finish(ended, NULL, NULL);
  }
}
