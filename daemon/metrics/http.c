/* http.c — the metrics listener on libmicrohttpd (http.h). */
#include "http.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

struct metrics_http {
  struct MHD_Daemon *mhd;
  struct metrics_http_ops ops;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *type,
                             char *body, size_t len, enum MHD_ResponseMemoryMode mode) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
  if (!r) {
    if (mode == MHD_RESPMEM_MUST_FREE) {
      free(body);
    }
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED) {
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  }
  enum MHD_Result ok = MHD_queue_response(conn, code, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result plain(struct MHD_Connection *conn, unsigned code, const char *text) {
  return reply(conn, code, "text/plain; charset=utf-8", (char *)text, strlen(text),
               MHD_RESPMEM_PERSISTENT);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls) {
  (void)version;
  (void)upload_data;
  (void)req_cls;
  struct metrics_http *h = cls;
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    *upload_data_size = 0; /* a body is not read: the answer is the same */
    return plain(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
  }
  if (strcmp(url, "/metrics") == 0) {
    struct metrics_text t = {0};
    h->ops.render(h->ops.arg, &t);
    if (t.failed || !t.buf) {
      metrics_text_free(&t);
      return plain(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "no memory for the metrics\n");
    }
    return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", t.buf, t.len,
                 MHD_RESPMEM_MUST_FREE);
  }
  if (strcmp(url, "/healthz") == 0) {
    return plain(conn, MHD_HTTP_OK, "ok\n");
  }
  if (strcmp(url, "/readyz") == 0) {
    return h->ops.ready(h->ops.arg) ? plain(conn, MHD_HTTP_OK, "ready\n")
                                    : plain(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "not ready\n");
  }
  return plain(conn, MHD_HTTP_NOT_FOUND, "not found: GET /metrics, /healthz or /readyz\n");
}

/* HOST:PORT or [V6]:PORT into host and port (both in buf). */
static bool split(const char *addr, char *buf, size_t size, char **host, char **port) {
  size_t n = strlen(addr);
  if (n == 0 || n >= size) {
    return false;
  }
  memcpy(buf, addr, n + 1);
  char *colon = strrchr(buf, ':');
  if (!colon || colon[1] == '\0') {
    return false;
  }
  *colon = '\0';
  *port = colon + 1;
  *host = buf;
  if (buf[0] == '[') {
    size_t hl = strlen(buf);
    if (hl < 3 || buf[hl - 1] != ']') {
      return false;
    }
    buf[hl - 1] = '\0';
    *host = buf + 1;
  }
  for (const char *p = *port; *p; p++) {
    if (*p < '0' || *p > '9') {
      return false;
    }
  }
  return atoi(*port) <= 65535;
}

static qdp_status bind_listen(const char *addr, int *ret_fd, int *ret_port,
                              struct qdp_error *err) {
  char buf[256], *host, *port;
  if (!split(addr, buf, sizeof buf, &host, &port)) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "metrics_listen",
                         "metrics_listen is '%s': give HOST:PORT (127.0.0.1:9464, [::1]:9464; "
                         "port 0 picks one)",
                         addr);
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                  *ai = NULL;
  int g = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
  if (g != 0) {
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "metrics_listen",
                         "metrics_listen '%s': host '%s' does not resolve (%s)", addr, host,
                         gai_strerror(g));
  }
  int fd = -1, e = 0;
  for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      e = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      e = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0) {
    return qdp_error_set(err, QDP_ERR_UNAVAILABLE, "metrics_listen",
                         "cannot listen for metrics on %s: %s", addr, strerror(e));
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  *ret_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  *ret_fd = fd;
  return QDP_OK;
}

qdp_status metrics_http_start(const char *listen_addr, const struct metrics_http_ops *ops,
                              struct metrics_http **ret, int *ret_port,
                              struct qdp_error *reterr) {
  int fd = -1, port = 0;
  qdp_status rc = bind_listen(listen_addr, &fd, &port, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  struct metrics_http *h = calloc(1, sizeof *h);
  if (!h) {
    close(fd);
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no host memory for the metrics listener");
  }
  h->ops = *ops;
  /* Scrapes are few: a handful of connections, each given 10 s to send its request. */
  h->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL,
                            on_request, h, MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_LIMIT, 16u, MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                            MHD_OPTION_END);
  if (!h->mhd) {
    close(fd);
    free(h);
    return qdp_error_set(reterr, QDP_ERR_UNAVAILABLE, "metrics_listen",
                         "libmicrohttpd could not serve metrics on %s", listen_addr);
  }
  *ret = h;
  if (ret_port) {
    *ret_port = port;
  }
  return QDP_OK;
}

void metrics_http_stop(struct metrics_http *h) {
  if (h) {
    MHD_stop_daemon(h->mhd); /* closes the listening socket */
    free(h);
  }
}
