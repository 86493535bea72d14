/* config_parse.c — the parsers of option values: range-checked integers, sizes with their
 * suffixes, durations, octal modes, numbers, booleans, log levels and formats. Each names the
 * field and the value it refuses.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_internal.h"
#include "log.h"

/* ---- number parsers ----------------------------------------------------------------------------
 */

/* Digits only: strtoull alone would take a sign, leading blanks and "0x". */
static qdp_status digits(const char *s, size_t *ret_len, uint64_t *ret, const char *field,
                         const char *whole, struct qdp_error *reterr) {
  uint64_t v = 0;
  size_t i = 0;
  for (; isdigit((unsigned char)s[i]); i++) {
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                           "%s = '%s' does not fit 64 bits", field, whole);
    }
    v = v * 10 + d;
  }
  if (i == 0) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s = '%s' is not a non-negative integer", field, whole);
  }
  *ret_len = i;
  *ret = v;
  return QDP_OK;
}

static qdp_status in_range(uint64_t v, uint64_t min, uint64_t max, const char *field,
                           const char *whole, struct qdp_error *reterr) {
  if (v < min || v > max) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s = '%s' (%" PRIu64 ") is outside [%" PRIu64 ", %" PRIu64 "]", field,
                         whole, v, min, max);
  }
  return QDP_OK;
}

qdp_status config_parse_u64(const char *s, uint64_t min, uint64_t max, const char *field,
                            uint64_t *ret, struct qdp_error *reterr) {
  uint64_t v;
  size_t n;
  qdp_status rc = digits(s, &n, &v, field, s, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  if (s[n] != '\0') {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s = '%s' has trailing characters after the number", field, s);
  }
  rc = in_range(v, min, max, field, s, reterr);
  if (rc == QDP_OK) {
    *ret = v;
  }
  return rc;
}

qdp_status config_parse_mode(const char *s, const char *field, uint64_t *ret,
                             struct qdp_error *reterr) {
  uint64_t v = 0;
  size_t n = 0;
  for (; s[n] >= '0' && s[n] <= '7' && n < 5; n++) {
    v = v * 8 + (uint64_t)(s[n] - '0');
  }
  if (n == 0 || s[n] != '\0' || v > 0777) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                         "%s = '%s' is not permission bits in octal (0000 to 0777, e.g. 0660)",
                         field, s);
  }
  *ret = v;
  return QDP_OK;
}

struct unit {
  const char *sfx;
  uint64_t mul;
};

/* A number, optionally blanks, and one of the n units' suffixes: the number times its factor,
 * within [min, max]. kind and use name the suffixes in the refusal of any other. */
static qdp_status parse_scaled(const char *s, const struct unit *units, size_t nunits,
                               const char *kind, const char *use, uint64_t min, uint64_t max,
                               const char *field, uint64_t *ret, struct qdp_error *reterr) {
  uint64_t v;
  size_t n;
  qdp_status rc = digits(s, &n, &v, field, s, reterr);
  if (rc != QDP_OK) {
    return rc;
  }
  const char *sfx = s + n;
  while (*sfx == ' ') {
    sfx++;
  }
  for (size_t i = 0; i < nunits; i++) {
    if (strcmp(sfx, units[i].sfx) == 0) {
      if (v > UINT64_MAX / units[i].mul) {
        return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                             "%s = '%s' does not fit 64 bits", field, s);
      }
      rc = in_range(v * units[i].mul, min, max, field, s, reterr);
      if (rc == QDP_OK) {
        *ret = v * units[i].mul;
      }
      return rc;
    }
  }
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                       "%s = '%s' has an unknown %s suffix '%s' (use %s)", field, s, kind, sfx,
                       use);
}

qdp_status config_parse_bytes(const char *s, uint64_t min, uint64_t max, const char *field,
                              uint64_t *ret, struct qdp_error *reterr) {
  static const struct unit units[] = {
      {"", 1},    {"B", 1},    {"K", 1000ull},          {"KB", 1000ull},
      {"Ki", KI}, {"KiB", KI}, {"M", 1000000ull},       {"MB", 1000000ull},
      {"Mi", MI}, {"MiB", MI}, {"G", 1000000000ull},    {"GB", 1000000000ull},
      {"Gi", GI}, {"GiB", GI}, {"T", 1000000000000ull}, {"TB", 1000000000000ull},
      {"Ti", TI}, {"TiB", TI},
  };
  return parse_scaled(s, units, sizeof units / sizeof units[0], "size",
                      "B, K, M, G, T or Ki, Mi, Gi, Ti", min, max, field, ret, reterr);
}

qdp_status config_parse_seconds(const char *s, uint64_t min, uint64_t max, const char *field,
                                uint64_t *ret, struct qdp_error *reterr) {
  static const struct unit units[] = {
      {"", 1}, {"s", 1}, {"m", 60}, {"min", 60}, {"h", 3600}, {"d", 86400},
  };
  return parse_scaled(s, units, sizeof units / sizeof units[0], "time", "s, m, h or d", min, max,
                      field, ret, reterr);
}

qdp_status config_parse_double(const char *s, double min, double max, const char *field,
                               double *ret, struct qdp_error *reterr) {
  char *end = NULL;
  errno = 0;
  if (!*s || isspace((unsigned char)*s)) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field, "%s = '%s' is not a number",
                         field, s);
  }
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field, "%s = '%s' is not a number",
                         field, s);
  }
  if (v < min || v > max) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field, "%s = '%s' is outside [%g, %g]",
                         field, s, min, max);
  }
  *ret = v;
  return QDP_OK;
}

qdp_status config_parse_bool(const char *s, const char *field, bool *ret,
                             struct qdp_error *reterr) {
  static const char *yes[] = {"1", "yes", "true", "on"};
  static const char *no[] = {"0", "no", "false", "off"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0) {
      *ret = true;
      return QDP_OK;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *ret = false;
      return QDP_OK;
    }
  }
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                       "%s = '%s' is not a boolean (yes/no, true/false, on/off, 1/0)", field, s);
}

qdp_status config_parse_level(const char *s, const char *field, int *ret,
                              struct qdp_error *reterr) {
  static const struct {
    const char *name;
    int level;
  } names[] = {
      {"err", 3},   {"error", 3}, {"warning", 4}, {"warn", 4}, {"notice", 5}, {"info", 6},
      {"debug", 7}, {"3", 3},     {"4", 4},       {"5", 5},    {"6", 6},      {"7", 7},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strcasecmp(s, names[i].name) == 0) {
      *ret = names[i].level;
      return QDP_OK;
    }
  }
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                       "%s = '%s' is not a log level (err, warning, notice, info, debug or 3..7)",
                       field, s);
}

qdp_status config_parse_log_format(const char *s, const char *field, int *ret,
                                   struct qdp_error *reterr) {
  if (strcasecmp(s, "text") == 0 || strcasecmp(s, "json") == 0) {
    *ret = strcasecmp(s, "json") == 0 ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT;
    return QDP_OK;
  }
  return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, field,
                       "%s = '%s' is not a log format (text or json)", field, s);
}
