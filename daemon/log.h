/* log.h — the daemon's one logger.
 *
 * Levels are syslog's, ERR (3) to DEBUG (7). A line goes to stderr with one write(2), so lines of
 * different threads never interleave. When stderr is the journal ($JOURNAL_STREAM names stderr's
 * device and inode) a line starts with the journal's `<N>` priority prefix:
 *   <4>qdpd r1 cuda:3 transport: peer access 3->5 unavailable, using host staging
 * otherwise with an ISO-8601 UTC timestamp and the level name:
 *   2025-01-31T12:00:00.123Z warning qdpd r1 cuda:3 transport: peer access ...
 * The rank appears once it is known (log_set_rank), the device when the caller names one.
 * With LOG_FORMAT_JSON every line is one JSON object instead, for collectors that parse lines
 * (the journal's prefix is not written then):
 *   {"ts":"2025-01-31T12:00:00.123Z","level":"warning","ident":"qdpd","rank":1,
 *    "device":"cuda:3","subsys":"transport","msg":"peer access 3->5 unavailable, ..."}
 * (on one line; rank, device and subsys only when known).
 * Under the journal, when its native socket is there, a record goes to it instead, as fields
 * journalctl can select on: MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, QDP_SUBSYS, QDP_RANK, QDP_DEVICE
 * and the caller's own (log_fields: QDP_METHOD, QDP_STATUS, QDP_CLIENT, ...), so that
 * `journalctl QDP_STATUS=RESOURCE_EXHAUSTED` works; a send that fails falls back to the stream.
 * In JSON lines the caller's fields are members too, named in lower case without QDP_
 * ("status").
 * Lines at INFO and DEBUG are shown only for the subsystems in log_set_subsys (all when empty).
 *
 * Any thread: the level, rank and filter are read atomically (the filter under a lock, so SIGHUP
 * may change it while other threads log); log_init runs on the main thread before other threads
 * start.
 */
#ifndef QDP_LOG_H
#define QDP_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_format { LOG_FORMAT_TEXT = 0, LOG_FORMAT_JSON = 1 };

enum log_level {
  LOG_LEVEL_ERR = 3,
  LOG_LEVEL_WARNING = 4,
  LOG_LEVEL_NOTICE = 5,
  LOG_LEVEL_INFO = 6,
  LOG_LEVEL_DEBUG = 7
};

/* Detects the journal on stderr; ident is the program name in every line ("qdpd"). */
void log_init(const char *ident);
/* Where lines go (default: 2, stderr). For tests. */
void log_set_fd(int fd);
/* Forces (1) or denies (0) the journal format; -1 detects it again. For tests. */
void log_set_journal(int on);
/* The journal's native socket records go to under the journal (log_init: the system's, when
 * it exists); "" for none (the stream only). For tests. */
void log_set_journal_socket(const char *path);
bool log_journal(void);

void log_set_level(int level);
int log_get_level(void);
/* The subsystems lines are filed under: each module that logs (main.c, rpc/, world/, transport/,
 * runtime/) under its own name, and gRPC's own lines under "grpc". The log_subsys option names
 * some of them (tests/unit/check_log_subsys.py holds the sources and deploy/qdpd.conf to this
 * list). */
#define LOG_SUBSYSTEMS "main,rpc,grpc,world,transport,runtime"
/* Whether the len bytes at name are one of LOG_SUBSYSTEMS. */
bool log_subsys_known(const char *name, size_t len);
/* Comma-separated subsystem names; NULL or "" = all. */
void log_set_subsys(const char *list);
void log_set_rank(int rank); /* -1: unknown (not printed) */
void log_set_format(enum log_format f);

/* "err", "warning", "notice", "info", "debug". */
const char *log_level_name(int level);
/* Whether a line of this level and subsystem would be written. */
bool log_enabled(int level, const char *subsys);

/* Writes one line (a trailing newline is added; embedded newlines become spaces). device may be
 * NULL ("cpu:0", "cuda:3"). */
void log_write(int level, const char *subsys, const char *device, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A field of a record: NAME as the journal takes it (upper case letters, digits and '_', not
 * starting with '_'; "QDP_STATUS") and its value (newlines become spaces). */
struct log_field {
  const char *name, *value;
};
/* log_write with fields: the n of f, for the journal and JSON lines (see above). */
void log_fields(int level, const char *subsys, const char *device, const struct log_field *f,
                size_t n, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define log_err(subsys, ...) log_write(LOG_LEVEL_ERR, subsys, NULL, __VA_ARGS__)
#define log_warning(subsys, ...) log_write(LOG_LEVEL_WARNING, subsys, NULL, __VA_ARGS__)
#define log_notice(subsys, ...) log_write(LOG_LEVEL_NOTICE, subsys, NULL, __VA_ARGS__)
#define log_info(subsys, ...) log_write(LOG_LEVEL_INFO, subsys, NULL, __VA_ARGS__)
#define log_debug(subsys, ...) log_write(LOG_LEVEL_DEBUG, subsys, NULL, __VA_ARGS__)

#endif /* QDP_LOG_H */
