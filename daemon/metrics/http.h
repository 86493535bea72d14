/* http.h — the metrics listener: GET /metrics (the Prometheus text), /healthz (the process
 * answers) and /readyz (it serves: not draining, no rank of its world lost) over HTTP/1.1, on
 * libmicrohttpd's own thread. Off unless the operator names an address (metrics_listen). It
 * serves counts only (docs/metrics.md): no state, token or file is reachable through it.
 */
#ifndef QDP_METRICS_HTTP_H
#define QDP_METRICS_HTTP_H

#include <stdbool.h>

#include "error.h"
#include "metrics.h"

struct metrics_http;

struct metrics_http_ops {
  void (*render)(void *arg, struct metrics_text *t); /* appends the metrics; the HTTP thread */
  bool (*ready)(void *arg);                          /* /readyz; the HTTP thread */
  void *arg;
};

/* Binds `listen` ("HOST:PORT", "[V6]:PORT"; port 0 picks one, given in *ret_port) and serves
 * until metrics_http_stop. INVALID_ARGUMENT (field "metrics_listen") for an address that does not
 * parse or resolve; UNAVAILABLE naming it when it cannot be bound. */
qdp_status metrics_http_start(const char *listen, const struct metrics_http_ops *ops,
                              struct metrics_http **ret, int *ret_port,
                              struct qdp_error *reterr);
/* Stops serving (waits for the requests in flight) and frees h. NULL-safe. */
void metrics_http_stop(struct metrics_http *h);

#endif /* QDP_METRICS_HTTP_H */
