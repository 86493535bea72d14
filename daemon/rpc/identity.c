/* Who a call is from (identity.h). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "identity.h"
#include "log.h"

/* ---- tokens ---------------------------------------------------------------------------------- */

/* Principals are identities in logs and in state owners: a short name, nothing to escape. */
static bool principal_ok(const char *p, size_t n) {
  if (n == 0 || n > 48) {
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (!(isalnum(ch) || ch == '.' || ch == '_' || ch == '-' || ch == '@')) {
      return false;
    }
  }
  return true;
}

static qdp_status add_token(struct rpc_tokens *ts, const char *principal, size_t pl,
                            const char *token, size_t tl, struct qdp_error *err) {
  struct rpc_token *t = realloc(ts->v, (ts->n + 1) * sizeof *t);
  if (!t) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for TCP tokens");
  }
  ts->v = t;
  t = &ts->v[ts->n];
  memcpy(t->principal, principal, pl);
  t->principal[pl] = '\0';
  t->token = strndup(token, tl);
  if (!t->token) {
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for TCP tokens");
  }
  ts->n++;
  if (tl < 16) {
    log_warning("rpc",
                "the TCP token of principal '%s' has %zu characters; 16 or more random "
                "ones are advised",
                t->principal, tl);
  }
  return QDP_OK;
}

/* The file must not be writable by others: whoever can change it can make themselves any
 * principal. */
qdp_status rpc_tokens_load(const struct config *cfg, struct rpc_tokens *t, struct qdp_error *err) {
  qdp_status rc = QDP_OK;
  if (cfg->tcp_token[0]) {
    rc = add_token(t, "tcp", 3, cfg->tcp_token, strlen(cfg->tcp_token), err);
  }
  if (rc != QDP_OK || !cfg->tcp_tokens_file[0]) {
    return rc;
  }
  const char *path = cfg->tcp_tokens_file;
  FILE *f = fopen(path, "re");
  if (!f) {
    int e = errno;
    return qdp_error_set_at(err, e == ENOENT ? QDP_ERR_NOT_FOUND : QDP_ERR_PERMISSION_DENIED, -1, e,
                            "tcp_tokens_file = '%s' cannot be read: %s", path, strerror(e));
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && (st.st_mode & 022)) {
    rc = qdp_error_set(err, QDP_ERR_PERMISSION_DENIED, "tcp_tokens_file",
                       "tcp_tokens_file = '%s' is writable by its group or others (mode %04o); "
                       "make it 0600 or 0640",
                       path, (unsigned)(st.st_mode & 07777));
    goto out;
  }
  char line[CONFIG_STR_MAX * 2];
  unsigned lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    size_t n = strcspn(line, "\r\n");
    line[n] = '\0';
    char *p = line + strspn(line, " \t");
    if (!*p || *p == '#') {
      continue;
    }
    size_t pl = strcspn(p, " \t");
    char *tok = p + pl + strspn(p + pl, " \t");
    size_t tl = strcspn(tok, " \t");
    if (!principal_ok(p, pl) || tl == 0 || tok[tl + strspn(tok + tl, " \t")] != '\0') {
      rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "tcp_tokens_file",
                         "%s:%u is not 'PRINCIPAL TOKEN' (a principal is 1 to 48 of "
                         "A-Z a-z 0-9 . _ - @; the token has no spaces)",
                         path, lineno);
      goto out;
    }
    for (size_t i = 0; i < t->n; i++) {
      if (strlen(t->v[i].principal) == pl && memcmp(t->v[i].principal, p, pl) == 0) {
        rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "tcp_tokens_file",
                           "%s:%u names principal '%.*s' a second time", path, lineno, (int)pl, p);
        goto out;
      }
    }
    QDP_TRY(rc, add_token(t, p, pl, tok, tl, err));
  }
out:
  fclose(f);
  return rc;
}

void rpc_tokens_free(struct rpc_tokens *t) {
  for (size_t i = 0; i < t->n; i++) {
    free(t->v[i].token);
  }
  free(t->v);
  *t = (struct rpc_tokens){0};
}

/* ---- calls ----------------------------------------------------------------------------------- */

/* Finds request metadata `key`; NULL when absent. */
static const grpc_slice *md_find(const grpc_metadata_array *md, const char *key) {
  for (size_t i = 0; i < md->count; i++) {
    if (grpc_slice_str_cmp(md->metadata[i].key, key) == 0) {
      return &md->metadata[i].value;
    }
  }
  return NULL;
}

/* The principal whose token the bearer value v (after "Bearer ") is, or NULL. Every token is
 * compared over its full length in constant time, and all of them always, so neither timing nor
 * order says which (or how much of one) matched. */
static const char *token_principal(const struct rpc_tokens *ts, const grpc_slice *v) {
  static const char prefix[] = "Bearer ";
  size_t pl = sizeof prefix - 1;
  size_t n = GRPC_SLICE_LENGTH(*v);
  const uint8_t *p = GRPC_SLICE_START_PTR(*v);
  if (n <= pl || memcmp(p, prefix, pl) != 0) {
    return NULL;
  }
  p += pl;
  n -= pl;
  const char *found = NULL;
  for (size_t t = 0; t < ts->n; t++) {
    const char *want = ts->v[t].token;
    size_t wl = strlen(want);
    unsigned diff = n != wl;
    for (size_t i = 0; i < wl; i++) {
      diff |= (unsigned)((uint8_t)want[i] ^ (i < n ? p[i] : 0));
    }
    if (diff == 0) {
      found = ts->v[t].principal;
    }
  }
  return found;
}

/* The call's label for logs: its identity, its process, and what it calls itself. */
static void label_call(struct rpc_call *c) {
  char label[64] = "";
  const grpc_slice *id = md_find(&c->md, "qdp-client");
  if (id) {
    size_t n =
        GRPC_SLICE_LENGTH(*id) < sizeof label - 1 ? GRPC_SLICE_LENGTH(*id) : sizeof label - 1;
    memcpy(label, GRPC_SLICE_START_PTR(*id), n);
    label[n] = '\0';
    for (size_t i = 0; i < n; i++) {
      unsigned char ch = (unsigned char)label[i];
      if (ch < 0x20 || ch == 0x7f || ch == '\'') {
        label[i] = '?'; /* it appears in log lines */
      }
    }
  }
  int k = c->tcp
              ? snprintf(c->client, sizeof c->client, "%s", c->owner[0] ? c->owner : c->peer)
              : snprintf(c->client, sizeof c->client, "%s pid %ld", c->owner, (long)c->ucred.pid);
  if (label[0] && k > 0 && (size_t)k < sizeof c->client) {
    snprintf(c->client + k, sizeof c->client - (size_t)k, " '%s'", label);
  }
}

void rpc_identify(struct rpc_call *c, struct rpc_listener *l, uid_t euid) {
  char *peer = grpc_call_get_peer(c->call);
  snprintf(c->peer, sizeof c->peer, "%s", peer ? peer : "unknown");
  gpr_free(peer);
  c->tcp = !rpc_listener_peer(l, c->peer, &c->ucred);
  if (!c->tcp) {
    rpc_peer_key(&c->ucred, c->owner, sizeof c->owner);
    c->operator= c->ucred.uid == 0 || c->ucred.uid == euid;
  }
  label_call(c);
}

/* Under mutual TLS, the subject of the caller's certificate (gRPC verified it against
 * tcp_tls_client_ca in the handshake, or there would be no call) as owner "x509:<subject>".
 * UNAUTHENTICATED when there is none, or one that cannot be an identity. */
static qdp_status x509_principal(struct rpc_call *c, struct qdp_error *err) {
  grpc_auth_context *ac = grpc_call_auth_context(c->call);
  const grpc_auth_property *p = NULL;
  if (ac) {
    grpc_auth_property_iterator it =
        grpc_auth_context_find_properties_by_name(ac, GRPC_X509_SUBJECT_PROPERTY_NAME);
    p = grpc_auth_property_iterator_next(&it);
  }
  qdp_status rc = QDP_OK;
  size_t room = sizeof c->owner - sizeof "x509:";
  if (!p || p->value_length == 0) {
    rc = qdp_error_set(err, QDP_ERR_UNAUTHENTICATED, "authorization",
                       "%s over TCP needs a client certificate with a subject, or the metadata "
                       "'authorization: Bearer <token>' with a token this daemon knows",
                       rpc_method_name(c));
    goto out;
  }
  bool printable = true;
  for (size_t i = 0; i < p->value_length; i++) {
    unsigned char ch = (unsigned char)p->value[i];
    printable &= ch >= 0x20 && ch < 0x7f && ch != '\'';
  }
  if (p->value_length > room || !printable) {
    rc = qdp_error_set(err, QDP_ERR_UNAUTHENTICATED, "authorization",
                       "the client certificate's subject (%zu characters) cannot be an identity: "
                       "one has at most %zu printable ASCII characters other than a quote; "
                       "present a token instead, or a certificate with a shorter subject",
                       p->value_length, room);
    goto out;
  }
  snprintf(c->owner, sizeof c->owner, "x509:%.*s", (int)p->value_length, p->value);
out:
  if (ac) {
    grpc_auth_context_release(ac);
  }
  return rc;
}

qdp_status rpc_authorize(struct rpc_call *c, const struct rpc_tokens *t, struct qdp_error *err) {
  if (!c->tcp) {
    return QDP_OK;
  }
  /* A token, when presented, decides (under mutual TLS too: the certificate let the connection
   * in, the token names whom the call acts for); a wrong one is refused, never passed over for
   * the certificate. Without a token, mutual TLS names the caller by its certificate. */
  const grpc_slice *auth = md_find(&c->md, "authorization");
  if (!auth && t->x509) {
    qdp_status rc = x509_principal(c, err);
    if (rc == QDP_OK) {
      label_call(c);
    }
    return rc;
  }
  const char *principal = auth ? token_principal(t, auth) : NULL;
  if (!principal) {
    return qdp_error_set(err, QDP_ERR_UNAUTHENTICATED, "authorization",
                         "%s over TCP needs the metadata 'authorization: Bearer <token>' with a "
                         "token this daemon knows (tcp_token, tcp_tokens_file)%s",
                         rpc_method_name(c),
                         t->x509 ? ", or no token and a client certificate" : "");
  }
  snprintf(c->owner, sizeof c->owner, "tcp:%s", principal);
  label_call(c);
  return QDP_OK;
}

static unsigned call_gone(const void *arg) {
  const struct rpc_call *c = arg;
  unsigned gone = atomic_load(&c->cancel_seen) ? JOB_CALLER_LEFT : 0;
  if (gpr_time_cmp(c->deadline, gpr_now(c->deadline.clock_type)) <= 0) {
    gone |= JOB_CALLER_LATE;
  }
  return gone;
}

/* The session a request names for what it makes (proto: OpenSession). */
static const char *call_session(const struct rpc_call *c) {
  switch (c->method) {
  case RPC_M_ENCODE:
    return ((const Qdp__EncodeRequest *)c->req)->session;
  case RPC_M_UPLOAD:
    return c->up.req ? c->up.req->session : NULL;
  case RPC_M_GATHER:
    return ((const Qdp__GatherRequest *)c->req)->session;
  case RPC_M_REGISTER_REGION:
    return ((const Qdp__RegisterRegionRequest *)c->req)->session;
  default:
    return NULL;
  }
}

struct job_caller rpc_caller(const struct rpc_call *c) {
  return (struct job_caller){.owner = c->owner,
                             .session = call_session(c),
                             .pid = c->tcp ? 0 : (int)c->ucred.pid,
                             .pidfd = c->tcp ? -1 : c->ucred.pidfd,
                             .operator= c->operator,
                             .gone = call_gone,
                             .arg = c};
}
