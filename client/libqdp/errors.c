/* The per-thread error record behind qdp_last_error(): a thread-local struct, so that calls made
 * at the same time from many threads each keep their own details, and recording an error never
 * allocates (the failure being reported may be out-of-memory). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "libqdp_int.h"

static __thread struct qdp_errinfo tls_err = QDP_ERRINFO_INIT;

struct qdp_errinfo *qdp__err(void) {
  return &tls_err;
}

const struct qdp_errinfo *qdp_last_error(void) {
  return &tls_err;
}

void qdp__err_reset(void) {
  tls_err = (struct qdp_errinfo)QDP_ERRINFO_INIT;
  snprintf(tls_err.code_name, sizeof tls_err.code_name, "%s", qdp_status_name(QDP_OK));
}

qdp_status qdp__err_local(qdp_status code, int cause, const char *field, const char *fmt, ...) {
  struct qdp_errinfo *e = &tls_err;
  *e = (struct qdp_errinfo)QDP_ERRINFO_INIT;
  e->code = code;
  e->cause = cause;
  snprintf(e->code_name, sizeof e->code_name, "%s", qdp_status_name(code));
  snprintf(e->field, sizeof e->field, "%s", field ? field : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return code;
}

qdp_status qdp__err_nomem(const char *what) {
  return qdp__err_local(QDP_ERR_SYSTEM, ENOMEM, NULL, "libqdp ran out of memory while %s.", what);
}

qdp_status qdp__errno_status(int err, qdp_status otherwise) {
  if (err == ENOENT || err == ENOTDIR) {
    return QDP_ERR_NOT_FOUND;
  }
  if (err == EACCES || err == EPERM || err == EROFS) {
    return QDP_ERR_PERMISSION_DENIED;
  }
  if (err == EEXIST) {
    return QDP_ERR_ALREADY_EXISTS;
  }
  return otherwise;
}
