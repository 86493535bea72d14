/* config_print.c — options as text: an effective value (a token masked), `qdpd --print-config`
 * with each value's source, and `qdpd --help`, all from the table.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "config_internal.h"
#include "log.h"

/* ---- printing ----------------------------------------------------------------------------------
 */

void config_format_value(const struct config *c, const struct config_option *o, bool mask,
                         char *buf, size_t len) {
  const char *p = (const char *)c + o->offset;
  switch (o->type) {
  case CONFIG_STRING:
    if (mask && strcmp(o->name, "tcp_token") == 0 && p[0]) {
      snprintf(buf, len, "(set, %zu characters)", strlen(p));
    } else {
      snprintf(buf, len, "%s", p);
    }
    break;
  case CONFIG_BOOL:
    snprintf(buf, len, "%s", *(const bool *)p ? "yes" : "no");
    break;
  case CONFIG_U64:
  case CONFIG_BYTES:
  case CONFIG_SECONDS:
    snprintf(buf, len, "%" PRIu64, *(const uint64_t *)p);
    break;
  case CONFIG_MODE:
    snprintf(buf, len, "%04" PRIo64, *(const uint64_t *)p);
    break;
  case CONFIG_DOUBLE:
    snprintf(buf, len, "%g", *(const double *)p);
    break;
  case CONFIG_LEVEL: {
    static const char *names[] = {"err", "warning", "notice", "info", "debug"};
    int l = *(const int *)p;
    snprintf(buf, len, "%s", l >= 3 && l <= 7 ? names[l - 3] : "?");
    break;
  }
  case CONFIG_LOG_FORMAT:
    snprintf(buf, len, "%s", *(const int *)p == LOG_FORMAT_JSON ? "json" : "text");
    break;
  }
}

void config_print(const struct config *c, FILE *f) {
  for (size_t i = 0; i < config_option_count(); i++) {
    const struct config_option *o = config_option_at(i);
    char v[CONFIG_STR_MAX + 32];
    config_format_value(c, o, true, v, sizeof v);
    char src[128];
    if (c->origin[i][0]) {
      snprintf(src, sizeof src, "%s %s", config_source_name(c->src[i]), c->origin[i]);
    } else {
      snprintf(src, sizeof src, "%s", config_source_name(c->src[i]));
    }
    fprintf(f, "%s = %s%*s# %s\n", o->name, v,
            (int)(strlen(v) + strlen(o->name) < 40 ? 40 - strlen(v) - strlen(o->name) : 1), "",
            src);
  }
}

void config_help(FILE *f, const char *prog) {
  fprintf(f,
          "Usage: %s [--help] [--version] [--print-config] [--NAME VALUE | --NAME=VALUE]...\n"
          "qdpd encodes classical data into quantum state vectors on this node's devices and\n"
          "serves them over gRPC. Every option below can also be set in the config file\n"
          "(NAME = VALUE) or in the environment (QDP_NAME); the command line wins over the\n"
          "environment, which wins over the file. Sizes take K, M, G, T (x1000) or Ki, Mi, Gi,\n"
          "Ti (x1024); durations take s, m, h, d. SIGHUP re-reads options marked [runtime].\n\n",
          prog);
  for (size_t i = 0; i < config_option_count(); i++) {
    const struct config_option *o = config_option_at(i);
    char flag[64];
    snprintf(flag, sizeof flag, "--%s %s", o->name, o->type == CONFIG_BOOL ? "[yes|no]" : o->unit);
    char env[64];
    config_env_name(o, env, sizeof env);
    fprintf(f, "  %-34s %s%s\n", flag, o->doc, o->runtime ? " [runtime]" : "");
    fprintf(f, "  %-34s default: '%s'; env %s%s%s\n", "", o->def, env, o->env_alias ? " or " : "",
            o->env_alias ? o->env_alias : "");
  }
}
