#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/* A log line longer than this is cut; the message of a qdp_error is at most 1 KiB, and the
 * prefix is well under 128 bytes. */
#define LOG_LINE_MAX 2048

static char ident[32] = "qdpd";
static atomic_int level = LOG_LEVEL_INFO;
static atomic_int rank = -1;
static atomic_int out_fd = 2;
static atomic_int journal = 0;
static atomic_int format = LOG_FORMAT_TEXT;
/* Written on SIGHUP while other threads filter: guarded. */
static pthread_mutex_t subsys_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int subsys_set;
static char subsys_list[256];

static bool detect_journal(int fd) {
  const char *js = getenv("JOURNAL_STREAM");
  if (!js) {
    return false;
  }
  /* "DEV:INO" in decimal, as systemd writes it. */
  char *end = NULL;
  errno = 0;
  unsigned long long dev = strtoull(js, &end, 10);
  if (errno || end == js || *end != ':') {
    return false;
  }
  const char *ino_s = end + 1;
  unsigned long long ino = strtoull(ino_s, &end, 10);
  if (errno || end == ino_s || *end != '\0') {
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return false;
  }
  return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_init(const char *name) {
  snprintf(ident, sizeof ident, "%s", name ? name : "qdpd");
  atomic_store(&journal, detect_journal(atomic_load(&out_fd)));
}

void log_set_fd(int fd) {
  atomic_store(&out_fd, fd);
}

void log_set_journal(int on) {
  atomic_store(&journal, on < 0 ? detect_journal(atomic_load(&out_fd)) : on != 0);
}

bool log_journal(void) {
  return atomic_load(&journal) != 0;
}

void log_set_level(int l) {
  if (l < LOG_LEVEL_ERR) {
    l = LOG_LEVEL_ERR;
  }
  if (l > LOG_LEVEL_DEBUG) {
    l = LOG_LEVEL_DEBUG;
  }
  atomic_store(&level, l);
}

int log_get_level(void) {
  return atomic_load(&level);
}

void log_set_subsys(const char *list) {
  pthread_mutex_lock(&subsys_mu);
  snprintf(subsys_list, sizeof subsys_list, "%s", list ? list : "");
  atomic_store(&subsys_set, subsys_list[0] != '\0');
  pthread_mutex_unlock(&subsys_mu);
}

void log_set_rank(int r) {
  atomic_store(&rank, r);
}

void log_set_format(enum log_format f) {
  atomic_store(&format, f == LOG_FORMAT_JSON ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT);
}

const char *log_level_name(int l) {
  static const char *names[] = {"err", "warning", "notice", "info", "debug"};
  return l >= LOG_LEVEL_ERR && l <= LOG_LEVEL_DEBUG ? names[l - LOG_LEVEL_ERR] : "unknown";
}

static bool subsys_listed(const char *subsys) {
  if (!atomic_load(&subsys_set)) {
    return true;
  }
  if (!subsys) {
    return false;
  }
  bool found = false;
  size_t n = strlen(subsys);
  pthread_mutex_lock(&subsys_mu);
  const char *p = subsys_list;
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == n && strncmp(p, subsys, n) == 0) {
      found = true;
      break;
    }
    if (!comma) {
      break;
    }
    p = comma + 1;
  }
  pthread_mutex_unlock(&subsys_mu);
  return found;
}

bool log_enabled(int l, const char *subsys) {
  if (l > atomic_load(&level)) {
    return false;
  }
  /* Errors, warnings and notices always show: the filter narrows the chatter, not the faults. */
  return l <= LOG_LEVEL_NOTICE || subsys_listed(subsys);
}

/* The UTC time now as ISO 8601 with milliseconds ("2025-01-31T12:00:00.123Z"). */
static void now_iso(char *buf, size_t len) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

/* Appends s to buf[*n..len) as the inside of a JSON string: quotes, backslashes and control
 * characters escaped, other bytes as they are (messages are UTF-8 or ASCII). Stops short of len,
 * never cutting an escape. */
static void json_escape(char *buf, size_t len, size_t *n, const char *s) {
  for (; *s && *n + 7 < len; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      buf[(*n)++] = '\\';
      buf[(*n)++] = (char)ch;
    } else if (ch < 0x20) {
      *n += (size_t)snprintf(buf + *n, len - *n, "\\u%04x", ch);
    } else {
      buf[(*n)++] = (char)ch;
    }
  }
}

/* One JSON object for the record (see log.h), newline included, into line; its length. */
static size_t json_line(char *line, size_t len, int l, const char *subsys, const char *device,
                        const char *msg) {
  char ts[64];
  now_iso(ts, sizeof ts);
  size_t n = (size_t)snprintf(line, len, "{\"ts\":\"%s\",\"level\":\"%s\",\"ident\":\"", ts,
                              log_level_name(l));
  json_escape(line, len, &n, ident);
  int r = atomic_load(&rank);
  if (r >= 0 && n < len) {
    n += (size_t)snprintf(line + n, len - n, "\",\"rank\":%d", r);
  } else if (n < len) {
    line[n++] = '"';
  }
  const char *keys[] = {"device", "subsys", "msg"};
  const char *vals[] = {device, subsys, msg};
  for (size_t i = 0; i < 3; i++) {
    if (vals[i] && n + 16 < len) {
      n += (size_t)snprintf(line + n, len - n, ",\"%s\":\"", keys[i]);
      json_escape(line, len - 3, &n, vals[i]);
      line[n++] = '"';
    }
  }
  line[n++] = '}';
  line[n++] = '\n';
  return n;
}

static void write_all(const char *line, size_t n) {
  int fd = atomic_load(&out_fd);
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, line + off, n - off);
    if (w < 0 && errno == EINTR) {
      continue;
    }
    if (w <= 0) {
      break;
    }
    off += (size_t)w;
  }
}

void log_write(int l, const char *subsys, const char *device, const char *fmt, ...) {
  if (!log_enabled(l, subsys)) {
    return;
  }
  int saved_errno = errno;
  char line[LOG_LINE_MAX];
  size_t n = 0;
  if (atomic_load(&format) == LOG_FORMAT_JSON) {
    char msg[LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    write_all(line, json_line(line, sizeof line, l, subsys, device, msg));
    errno = saved_errno;
    return;
  }
  if (atomic_load(&journal)) {
    n = (size_t)snprintf(line, sizeof line, "<%d>%s", l, ident);
  } else {
    char ts[64];
    now_iso(ts, sizeof ts);
    n = (size_t)snprintf(line, sizeof line, "%s %s %s", ts, log_level_name(l), ident);
  }
  int r = atomic_load(&rank);
  if (r >= 0 && n < sizeof line) {
    n += (size_t)snprintf(line + n, sizeof line - n, " r%d", r);
  }
  if (device && n < sizeof line) {
    n += (size_t)snprintf(line + n, sizeof line - n, " %s", device);
  }
  if (subsys && n < sizeof line) {
    n += (size_t)snprintf(line + n, sizeof line - n, " %s:", subsys);
  }
  if (n < sizeof line) {
    line[n++] = ' ';
  }
  size_t body = n < sizeof line ? n : sizeof line - 1;
  if (n < sizeof line) {
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    n += m > 0 ? (size_t)m : 0;
  }
  if (n > sizeof line - 2) {
    n = sizeof line - 2; /* cut: keep room for the newline */
  }
  /* One line per record: a message with a newline in it would read as two records. */
  for (size_t i = body; i < n; i++) {
    if (line[i] == '\n' || line[i] == '\r') {
      line[i] = ' ';
    }
  }
  line[n++] = '\n';
  write_all(line, n);
  errno = saved_errno;
}
