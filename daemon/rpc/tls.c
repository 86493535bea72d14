/* TLS on the TCP listener (tls.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <uv.h>

#include "log.h"
#include "tls.h"

/* A PEM file larger than this is not a certificate chain, key or CA bundle anyone means. */
#define TLS_FILE_MAX (4u << 20)

struct rpc_tls {
  uv_mutex_t mu;
  bool mutual;
  /* The set read last and not yet handed to gRPC; the fetcher takes it. */
  grpc_ssl_server_certificate_config *next;
};

/* What one load read: the files' text, NUL-terminated. */
struct tls_files {
  char *cert, *key, *ca;
};

static void files_free(struct tls_files *f) {
  free(f->cert);
  if (f->key) {
    /* The key's bytes leave no copy in freed memory. */
    OPENSSL_cleanse(f->key, strlen(f->key));
    free(f->key);
  }
  free(f->ca);
  *f = (struct tls_files){0};
}

static qdp_status read_file(const char *opt, const char *path, char **ret, struct qdp_error *err) {
  size_t len = 0;
  int e = config_read_file(path, TLS_FILE_MAX, ret, &len);
  switch (e) {
  case 0:
    return QDP_OK;
  case EINVAL:
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, opt, "%s = '%s' is not a regular file", opt,
                         path);
  case EFBIG:
    return qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, opt,
                         "%s = '%s' has %zu bytes; a PEM file here has at most %u", opt, path, len,
                         TLS_FILE_MAX);
  case ENOMEM:
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, opt, "no memory to read %s = '%s'", opt,
                         path);
  default:
    return qdp_error_set_at(err,
                            e == ENOENT   ? QDP_ERR_NOT_FOUND
                            : e == EACCES ? QDP_ERR_PERMISSION_DENIED
                                          : QDP_ERR_INVALID_ARGUMENT,
                            -1, e, "%s = '%s' cannot be read: %s", opt, path, strerror(e));
  }
}

/* An encrypted key would make OpenSSL ask the terminal for its passphrase: there is none. */
static int no_passphrase(char *buf, int size, int rwflag, void *u) {
  (void)buf;
  (void)size;
  (void)rwflag;
  (void)u;
  return 0;
}

/* The first certificate of PEM text, or NULL. */
static X509 *first_cert(const char *pem) {
  BIO *b = BIO_new_mem_buf(pem, -1);
  X509 *x = b ? PEM_read_bio_X509(b, NULL, no_passphrase, NULL) : NULL;
  BIO_free(b);
  return x;
}

/* Reads the three files and checks them against one another. */
static qdp_status load(const struct config *cfg, struct tls_files *f, struct qdp_error *err) {
  qdp_status rc = QDP_OK;
  X509 *cert = NULL, *ca = NULL;
  EVP_PKEY *key = NULL;
  BIO *b = NULL;
  QDP_TRY(rc, read_file("tcp_tls_cert", cfg->tcp_tls_cert, &f->cert, err));
  QDP_TRY(rc, read_file("tcp_tls_key", cfg->tcp_tls_key, &f->key, err));
  if (cfg->tcp_tls_client_ca[0]) {
    QDP_TRY(rc, read_file("tcp_tls_client_ca", cfg->tcp_tls_client_ca, &f->ca, err));
  }
  cert = first_cert(f->cert);
  if (!cert) {
    rc = qdp_error_set(
        err, QDP_ERR_INVALID_ARGUMENT, "tcp_tls_cert",
        "tcp_tls_cert = '%s' holds no PEM certificate ('-----BEGIN CERTIFICATE-----')",
        cfg->tcp_tls_cert);
    goto out;
  }
  b = BIO_new_mem_buf(f->key, -1);
  key = b ? PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL) : NULL;
  if (!key) {
    rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "tcp_tls_key",
                       "tcp_tls_key = '%s' holds no PEM private key that can be read without a "
                       "passphrase",
                       cfg->tcp_tls_key);
    goto out;
  }
  if (X509_check_private_key(cert, key) != 1) {
    rc = qdp_error_set(
        err, QDP_ERR_INVALID_ARGUMENT, "tcp_tls_key",
        "tcp_tls_key = '%s' is not the private key of the certificate in tcp_tls_cert = "
        "'%s'",
        cfg->tcp_tls_key, cfg->tcp_tls_cert);
    goto out;
  }
  if (f->ca && !(ca = first_cert(f->ca))) {
    rc = qdp_error_set(err, QDP_ERR_INVALID_ARGUMENT, "tcp_tls_client_ca",
                       "tcp_tls_client_ca = '%s' holds no PEM certificate ('-----BEGIN "
                       "CERTIFICATE-----')",
                       cfg->tcp_tls_client_ca);
    goto out;
  }
  /* An expired certificate still loads (renewing it is the operator's next step, and a SIGHUP
   * takes the new one), but clients will refuse it: say so now rather than at each handshake. */
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    log_warning("rpc",
                "the certificate in tcp_tls_cert = '%s' has expired: TLS clients will refuse it",
                cfg->tcp_tls_cert);
  } else if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    log_warning("rpc",
                "the certificate in tcp_tls_cert = '%s' is not valid yet: TLS clients will "
                "refuse it until then",
                cfg->tcp_tls_cert);
  }
out:
  X509_free(cert);
  X509_free(ca);
  EVP_PKEY_free(key);
  BIO_free(b);
  ERR_clear_error();
  if (rc != QDP_OK) {
    files_free(f);
  }
  return rc;
}

/* A set for gRPC (which copies the text). */
static grpc_ssl_server_certificate_config *to_grpc(const struct tls_files *f) {
  grpc_ssl_pem_key_cert_pair pair = {.private_key = f->key, .cert_chain = f->cert};
  /* gRPC 1.51 asserts that a fetched set has root certificates even when it asks clients for
   * none: without mutual TLS the server's own chain stands in, and is never consulted (no client
   * certificate is requested, so none is verified against it). */
  return grpc_ssl_server_certificate_config_create(f->ca ? f->ca : f->cert, &pair, 1);
}

/* gRPC's threads, before each new handshake. */
static grpc_ssl_certificate_config_reload_status fetch(void *arg,
                                                       grpc_ssl_server_certificate_config **ret) {
  struct rpc_tls *t = arg;
  uv_mutex_lock(&t->mu);
  grpc_ssl_server_certificate_config *next = t->next;
  t->next = NULL;
  uv_mutex_unlock(&t->mu);
  if (!next) {
    return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
  }
  *ret = next; /* gRPC owns it now */
  return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
}

qdp_status rpc_tls_create(const struct config *cfg, struct rpc_tls **ret, struct qdp_error *err) {
  struct tls_files f = {0};
  qdp_status rc = load(cfg, &f, err);
  if (rc != QDP_OK) {
    return rc;
  }
  struct rpc_tls *t = calloc(1, sizeof *t);
  if (!t) {
    files_free(&f);
    return qdp_error_set(err, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "no memory for TLS");
  }
  uv_mutex_init(&t->mu);
  t->mutual = f.ca != NULL;
  t->next = to_grpc(&f);
  files_free(&f);
  *ret = t;
  return QDP_OK;
}

grpc_server_credentials *rpc_tls_credentials(struct rpc_tls *t) {
  grpc_ssl_server_credentials_options *o =
      grpc_ssl_server_credentials_create_options_using_config_fetcher(
          t->mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                    : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
          fetch, t);
  return grpc_ssl_server_credentials_create_with_options(o);
}

bool rpc_tls_mutual(const struct rpc_tls *t) {
  return t && t->mutual;
}

qdp_status rpc_tls_reload(struct rpc_tls *t, const struct config *cfg, struct qdp_error *err) {
  if (!cfg->tcp_tls_cert[0] || !!cfg->tcp_tls_client_ca[0] != t->mutual) {
    return qdp_error_set(
        err, QDP_ERR_FAILED_PRECONDITION, "tcp_tls_client_ca",
        "turning %s on or off takes a restart; the certificates in use stay",
        cfg->tcp_tls_cert[0] ? "mutual TLS (tcp_tls_client_ca)" : "TLS (tcp_tls_cert)");
  }
  struct tls_files f = {0};
  qdp_status rc = load(cfg, &f, err);
  if (rc != QDP_OK) {
    return rc;
  }
  grpc_ssl_server_certificate_config *next = to_grpc(&f);
  files_free(&f);
  uv_mutex_lock(&t->mu);
  grpc_ssl_server_certificate_config *old = t->next;
  t->next = next;
  uv_mutex_unlock(&t->mu);
  if (old) {
    grpc_ssl_server_certificate_config_destroy(old); /* never fetched: replaced */
  }
  return QDP_OK;
}

void rpc_tls_destroy(struct rpc_tls *t) {
  if (!t) {
    return;
  }
  if (t->next) {
    grpc_ssl_server_certificate_config_destroy(t->next);
  }
  uv_mutex_destroy(&t->mu);
  free(t);
}
