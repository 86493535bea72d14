/* config_sources.c — where values come from, lowest precedence first: the config file (read and
 * parsed line by line), the environment (QDP_<NAME> and aliases) and the command line; and
 * config_load, which applies them in that order.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_internal.h"

/* The config file is a few kilobytes; anything past this is not a config file. */
#define CONFIG_FILE_MAX (1u << 20)

/* ---- the file ----------------------------------------------------------------------------------
 */

static const char *trim(char *s, size_t *len) {
  size_t n = *len;
  while (n > 0 && isspace((unsigned char)*s)) {
    s++;
    n--;
  }
  while (n > 0 && isspace((unsigned char)s[n - 1])) {
    n--;
  }
  *len = n;
  return s;
}

qdp_status config_parse_text(struct config *c, const char *text, size_t len, const char *origin,
                             struct qdp_error *reterr) {
  size_t lineno = 0;
  size_t pos = 0;
  while (pos < len) {
    lineno++;
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
    char line[1024];
    if (n >= sizeof line) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                           "%s:%zu: line is %zu bytes long; the limit is %zu", origin, lineno, n,
                           sizeof line - 1);
    }
    memcpy(line, text + pos, n);
    line[n] = '\0';
    pos += n + (nl ? 1 : 0);
    if (memchr(line, '\0', n)) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL, "%s:%zu: line holds a NUL byte",
                           origin, lineno);
    }

    size_t ln = n;
    char *l = (char *)trim(line, &ln);
    l[ln] = '\0';
    if (ln == 0 || l[0] == '#') {
      continue;
    }
    char *eq = strchr(l, '=');
    if (!eq) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                           "%s:%zu: expected 'key = value', got '%s'", origin, lineno, l);
    }
    size_t kn = (size_t)(eq - l);
    char *key = (char *)trim(l, &kn);
    key[kn] = '\0';
    size_t vn = strlen(eq + 1);
    char *val = (char *)trim(eq + 1, &vn);
    val[vn] = '\0';
    if (vn >= 2 && val[0] == '"' && val[vn - 1] == '"') {
      val[vn - 1] = '\0';
      val++;
    }
    char where[80];
    snprintf(where, sizeof where, "%s:%zu", origin, lineno);
    if (strcmp(key, "config") == 0) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "config",
                           "%s: 'config' cannot be set inside a config file", where);
    }
    qdp_status rc = config_set(c, key, val, CONFIG_SRC_FILE, where, reterr);
    if (rc != QDP_OK) {
      qdp_error_prefix(reterr, "%s", where);
      return rc;
    }
  }
  return QDP_OK;
}

int config_read_file(const char *path, size_t max, char **ret, size_t *ret_len) {
  *ret = NULL;
  *ret_len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return errno;
  }
  int e = 0;
  char *buf = NULL;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    e = EINVAL;
    goto out;
  }
  *ret_len = (size_t)st.st_size;
  if ((uint64_t)st.st_size > max) {
    e = EFBIG;
    goto out;
  }
  buf = malloc((size_t)st.st_size + 1);
  if (!buf) {
    e = ENOMEM;
    goto out;
  }
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r <= 0) {
      e = r < 0 ? errno : EIO;
      goto out;
    }
    got += (size_t)r;
  }
  buf[got] = '\0';
  *ret = buf;
  buf = NULL;
out:
  free(buf);
  close(fd);
  return e;
}

qdp_status config_load_file(struct config *c, const char *path, bool must_exist,
                            struct qdp_error *reterr) {
  char *buf = NULL;
  size_t len = 0;
  int e = config_read_file(path, CONFIG_FILE_MAX, &buf, &len);
  if (e == ENOENT && !must_exist) {
    return QDP_OK;
  }
  if (e == EINVAL || e == EFBIG) {
    return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, "config",
                         "config file '%s' is not a regular file of at most %u bytes", path,
                         CONFIG_FILE_MAX);
  }
  if (e == ENOMEM) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, "config",
                         "no memory for the %zu bytes of config file '%s'", len, path);
  }
  if (e != 0) {
    return qdp_error_set_at(reterr, e == ENOENT ? QDP_ERR_NOT_FOUND : QDP_ERR_SYSTEM, -1, e,
                            "cannot read config file '%s': %s", path, strerror(e));
  }
  qdp_status rc = config_parse_text(c, buf, len, path, reterr);
  free(buf);
  return rc;
}

/* ---- environment and command line --------------------------------------------------------------
 */

static const char *env_lookup(char *const *envp, const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; envp && envp[i]; i++) {
    if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=') {
      return envp[i] + n + 1;
    }
  }
  return NULL;
}

qdp_status config_apply_env(struct config *c, char *const *envp, struct qdp_error *reterr) {
  for (size_t i = 0; i < config_option_count(); i++) {
    const struct config_option *o = config_option_at(i);
    if (strcmp(o->name, "config") == 0) {
      continue; /* read by config_load before the file */
    }
    char name[64];
    config_env_name(o, name, sizeof name);
    const char *v = env_lookup(envp, name);
    const char *which = name;
    if (!v && o->env_alias) {
      v = env_lookup(envp, o->env_alias);
      which = o->env_alias;
    }
    if (v) {
      qdp_status rc = config_set(c, o->name, v, CONFIG_SRC_ENV, which, reterr);
      if (rc != QDP_OK) {
        qdp_error_prefix(reterr, "environment %s", which);
        return rc;
      }
    }
  }
  return QDP_OK;
}

qdp_status config_apply_args(struct config *c, int argc, char *const *argv,
                             enum config_action *ret_action, struct qdp_error *reterr) {
  enum config_action action = CONFIG_RUN;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      action = CONFIG_HELP;
      continue;
    }
    if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
      action = action == CONFIG_RUN ? CONFIG_VERSION : action;
      continue;
    }
    if (strcmp(a, "--print-config") == 0) {
      action = action == CONFIG_RUN ? CONFIG_PRINT : action;
      continue;
    }
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                           "unexpected argument '%s' (options are --name value or --name=value)",
                           a);
    }
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    const struct config_option *o = config_find_n(name, nlen);
    if (!o) {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, NULL,
                           "unknown option '%.*s' (qdpd --help lists them)", (int)(nlen + 2), a);
    }
    const char *value;
    if (eq) {
      value = eq + 1;
    } else if (o->type == CONFIG_BOOL) {
      /* A bare boolean flag means yes; a following boolean word is its value. */
      bool b;
      if (i + 1 < argc && config_parse_bool(argv[i + 1], o->name, &b, NULL) == QDP_OK) {
        value = argv[++i];
      } else {
        value = "yes";
      }
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return qdp_error_set(reterr, QDP_ERR_INVALID_ARGUMENT, o->name, "option '--%s' needs a value",
                           o->name);
    }
    qdp_status rc = config_set(c, o->name, value, CONFIG_SRC_ARG, NULL, reterr);
    if (rc != QDP_OK) {
      return rc;
    }
  }
  if (ret_action) {
    *ret_action = action;
  }
  return QDP_OK;
}

qdp_status config_load(struct config *c, int argc, char *const *argv, char *const *envp,
                       enum config_action *ret_action, struct qdp_error *reterr) {
  config_defaults(c);
  /* The command line first, on a scratch copy, only to learn --config: the file must be read
   * before the environment and the command line so that they override it. */
  struct config *scratch = malloc(sizeof *scratch);
  if (!scratch) {
    return qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL,
                         "no memory for the configuration (%zu bytes)", sizeof *scratch);
  }
  config_defaults(scratch);
  enum config_action action = CONFIG_RUN;
  qdp_status rc = config_apply_args(scratch, argc, argv, &action, reterr);
  bool must_exist = false;
  if (rc == QDP_OK) {
    size_t ci = config_option_index(config_find("config"));
    const char *env_cfg = env_lookup(envp, "QDP_CONFIG");
    if (scratch->src[ci] == CONFIG_SRC_ARG) {
      rc = config_set(c, "config", scratch->config, CONFIG_SRC_ARG, NULL, reterr);
      must_exist = true;
    } else if (env_cfg) {
      rc = config_set(c, "config", env_cfg, CONFIG_SRC_ENV, "QDP_CONFIG", reterr);
      must_exist = true;
    }
  }
  free(scratch);
  if (rc != QDP_OK) {
    return rc;
  }
  /* An empty --config means: read no file at all. */
  if (c->config[0]) {
    rc = config_load_file(c, c->config, must_exist, reterr);
    if (rc != QDP_OK) {
      return rc;
    }
  }
  rc = config_apply_env(c, envp, reterr);
  if (rc == QDP_OK) {
    rc = config_apply_args(c, argc, argv, &action, reterr);
  }
  if (rc == QDP_OK && action == CONFIG_RUN) {
    rc = config_check(c, reterr);
  }
  if (rc == QDP_OK && ret_action) {
    *ret_action = action;
  }
  return rc;
}
