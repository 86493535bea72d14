#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

void qdp_error_clear(struct qdp_error *e) {
  if (e) {
    *e = (struct qdp_error)QDP_ERROR_INIT;
  }
}

static void set_msg(struct qdp_error *e, const char *fmt, va_list ap) {
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
}

qdp_status qdp_error_set(struct qdp_error *e, qdp_status code, const char *field, const char *fmt,
                         ...) {
  if (!e) {
    return code;
  }
  e->struct_size = sizeof *e;
  e->code = code;
  snprintf(e->field, sizeof e->field, "%s", field ? field : "");
  va_list ap;
  va_start(ap, fmt);
  set_msg(e, fmt, ap);
  va_end(ap);
  return code;
}

qdp_status qdp_error_set_at(struct qdp_error *e, qdp_status code, int device, int cause,
                            const char *fmt, ...) {
  if (!e) {
    return code;
  }
  e->struct_size = sizeof *e;
  e->code = code;
  e->device = device;
  e->cause = cause;
  va_list ap;
  va_start(ap, fmt);
  set_msg(e, fmt, ap);
  va_end(ap);
  return code;
}

void qdp_error_prefix(struct qdp_error *e, const char *fmt, ...) {
  if (!e) {
    return;
  }
  char prefix[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  /* Shift the old message right and put the prefix in front; the tail is cut if it must be. */
  size_t plen = strlen(prefix), mlen = strnlen(e->msg, sizeof e->msg - 1);
  if (plen + 2 >= sizeof e->msg) {
    plen = sizeof e->msg - 3;
  }
  size_t keep = mlen < sizeof e->msg - plen - 3 ? mlen : sizeof e->msg - plen - 3;
  memmove(e->msg + plen + 2, e->msg, keep);
  e->msg[plen + 2 + keep] = '\0';
  memcpy(e->msg, prefix, plen);
  e->msg[plen] = ':';
  e->msg[plen + 1] = ' ';
}
