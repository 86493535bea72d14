/* bench_cli.h — what every benchmark's command line does besides its own options: --help (or -h)
 * prints its usage to stdout and exits 0; an option it does not know, one without its value or a
 * number out of its range is an error that names it (the usage on stderr, exit 2), never skipped
 * or read as 0. */
#ifndef BENCH_CLI_H
#define BENCH_CLI_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void bench_cli_help(int argc, char **argv, const char *usage) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage, stdout);
      exit(0);
    }
  }
}

/* "PROG: <message>", then the usage; exit 2. */
static inline void bench_cli_fail(const char *prog, const char *usage, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", prog);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n%s", usage);
  exit(2);
}

/* The value after option `opt` (NULL: there is none). */
static inline const char *bench_cli_value(const char *prog, const char *usage, const char *opt,
                                          const char *v) {
  if (!v) {
    bench_cli_fail(prog, usage, "%s needs a value", opt);
  }
  return v;
}

/* The value of option `opt`: a decimal number in [lo, hi]. */
static inline unsigned long long bench_cli_number(const char *prog, const char *usage,
                                                  const char *opt, const char *s,
                                                  unsigned long long lo, unsigned long long hi) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
    bench_cli_fail(prog, usage, "%s takes a number in %llu..%llu, not '%s'", opt, lo, hi, s);
  }
  return v;
}

#endif /* BENCH_CLI_H */
