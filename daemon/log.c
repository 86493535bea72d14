#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
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
/* The journal's native socket: its address (set before threads start, or by tests) and one
 * datagram socket to send from, made on first use. */
#define JOURNAL_SOCKET "/run/systemd/journal/socket"
static char journal_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static atomic_int journal_fd = -1;
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
  struct stat st;
  log_set_journal_socket(atomic_load(&journal) && stat(JOURNAL_SOCKET, &st) == 0 &&
                                 S_ISSOCK(st.st_mode)
                             ? JOURNAL_SOCKET
                             : "");
}

void log_set_journal_socket(const char *path) {
  snprintf(journal_path, sizeof journal_path, "%s", path ? path : "");
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

/* Whether the comma-separated list holds the n bytes at name as one of its items. */
static bool list_has(const char *list, const char *name, size_t n) {
  for (const char *p = list;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == n && strncmp(p, name, n) == 0) {
      return true;
    }
    if (!comma) {
      return false;
    }
    p = comma + 1;
  }
}

bool log_subsys_known(const char *name, size_t len) {
  return len > 0 && list_has(LOG_SUBSYSTEMS, name, len);
}

static bool subsys_listed(const char *subsys) {
  if (!atomic_load(&subsys_set)) {
    return true;
  }
  if (!subsys) {
    return false;
  }
  pthread_mutex_lock(&subsys_mu);
  bool found = list_has(subsys_list, subsys, strlen(subsys));
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
  int64_t ms = clock_unix_ms();
  time_t s = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&s, &tm);
  snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
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
                        const struct log_field *f, size_t nf, const char *msg) {
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
  for (size_t i = 0; i < 3 + nf; i++) {
    char key[64];
    const char *v = i < 3 ? vals[i] : f[i - 3].value;
    if (i < 3) {
      snprintf(key, sizeof key, "%s", keys[i]);
    } else { /* QDP_STATUS -> status */
      const char *name = f[i - 3].name;
      name += strncmp(name, "QDP_", 4) == 0 ? 4 : 0;
      size_t k = 0;
      for (; name[k] && k + 1 < sizeof key; k++) {
        key[k] = (char)(name[k] >= 'A' && name[k] <= 'Z' ? name[k] - 'A' + 'a' : name[k]);
      }
      key[k] = '\0';
    }
    if (v && n + 16 + strlen(key) < len) {
      n += (size_t)snprintf(line + n, len - n, ",\"%s\":\"", key);
      json_escape(line, len - 3, &n, v);
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

/* Appends NAME=value\n to buf[*n..len), newlines in the value as spaces; false when it does not
 * fit. */
static bool journal_field(char *buf, size_t len, size_t *n, const char *name, const char *value) {
  size_t nl = strlen(name), vl = strlen(value);
  if (*n + nl + vl + 2 > len) {
    return false;
  }
  memcpy(buf + *n, name, nl);
  buf[*n + nl] = '=';
  for (size_t i = 0; i < vl; i++) {
    buf[*n + nl + 1 + i] = value[i] == '\n' || value[i] == '\r' ? ' ' : value[i];
  }
  *n += nl + vl + 2;
  buf[*n - 1] = '\n';
  return true;
}

/* The record as one datagram of the journal's native protocol; false when it could not be
 * sent (the caller writes the line to the stream instead). */
static bool journal_send(int l, const char *subsys, const char *device, const struct log_field *f,
                         size_t nf, const char *msg) {
  if (!journal_path[0]) {
    return false;
  }
  int fd = atomic_load(&journal_fd);
  if (fd < 0) {
    int nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int expect = -1;
    if (nfd < 0) {
      return false;
    }
    if (atomic_compare_exchange_strong(&journal_fd, &expect, nfd)) {
      fd = nfd;
    } else {
      close(nfd);
      fd = expect;
    }
  }
  char buf[LOG_LINE_MAX + 1024], num[16];
  size_t n = 0;
  snprintf(num, sizeof num, "%d", l);
  bool ok = journal_field(buf, sizeof buf, &n, "PRIORITY", num) &&
            journal_field(buf, sizeof buf, &n, "SYSLOG_IDENTIFIER", ident) &&
            journal_field(buf, sizeof buf, &n, "MESSAGE", msg);
  int r = atomic_load(&rank);
  if (ok && r >= 0) {
    snprintf(num, sizeof num, "%d", r);
    ok = journal_field(buf, sizeof buf, &n, "QDP_RANK", num);
  }
  if (ok && subsys) {
    ok = journal_field(buf, sizeof buf, &n, "QDP_SUBSYS", subsys);
  }
  if (ok && device) {
    ok = journal_field(buf, sizeof buf, &n, "QDP_DEVICE", device);
  }
  for (size_t i = 0; ok && i < nf; i++) {
    ok = !f[i].value || journal_field(buf, sizeof buf, &n, f[i].name, f[i].value);
  }
  if (!ok) {
    return false;
  }
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, journal_path, strlen(journal_path) + 1);
  return sendto(fd, buf, n, MSG_NOSIGNAL, (struct sockaddr *)&sa, sizeof sa) == (ssize_t)n;
}

static void vlog(int l, const char *subsys, const char *device, const struct log_field *f,
                 size_t nf, const char *fmt, va_list ap) {
  int saved_errno = errno;
  char line[LOG_LINE_MAX];
  size_t n = 0;
  int fmt_kind = atomic_load(&format);
  if (fmt_kind == LOG_FORMAT_JSON || (atomic_load(&journal) && journal_path[0])) {
    char msg[LOG_LINE_MAX];
    va_list copy; /* the stream below formats again when the journal's socket fails */
    va_copy(copy, ap);
    vsnprintf(msg, sizeof msg, fmt, copy);
    va_end(copy);
    if (fmt_kind == LOG_FORMAT_JSON) {
      write_all(line, json_line(line, sizeof line, l, subsys, device, f, nf, msg));
      errno = saved_errno;
      return;
    }
    for (char *p = msg; *p; p++) { /* one record: its message on one line */
      if (*p == '\n' || *p == '\r') {
        *p = ' ';
      }
    }
    if (journal_send(l, subsys, device, f, nf, msg)) {
      errno = saved_errno;
      return;
    }
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
    int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
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

void log_write(int l, const char *subsys, const char *device, const char *fmt, ...) {
  if (!log_enabled(l, subsys)) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vlog(l, subsys, device, NULL, 0, fmt, ap);
  va_end(ap);
}

void log_fields(int l, const char *subsys, const char *device, const struct log_field *f, size_t nf,
                const char *fmt, ...) {
  if (!log_enabled(l, subsys)) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vlog(l, subsys, device, f, nf, fmt, ap);
  va_end(ap);
}
