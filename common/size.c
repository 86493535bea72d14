/* Byte counts as people read them: see qdp_size.h. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "qdp_size.h"

char *qdp_size_text(char *buf, size_t size, uint64_t bytes) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    snprintf(buf, size, "%" PRIu64 " B", bytes);
    return buf;
  }
  double x = (double)bytes;
  int u = -1;
  while (x >= 1024 && u < 5) {
    x /= 1024;
    u++;
  }
  /* One decimal unless it would be .0, judged as printed: 1023.96 KiB reads "1024 KiB". */
  char one[24];
  snprintf(one, sizeof one, "%.1f", x);
  size_t n = strlen(one);
  if (n >= 2 && one[n - 1] == '0' && one[n - 2] == '.') {
    one[n - 2] = '\0';
  }
  snprintf(buf, size, "%s %s", one, units[u]);
  return buf;
}

void qdp_size_text_pair(char *buf_a, char *buf_b, size_t size, uint64_t a, uint64_t b) {
  qdp_size_text(buf_a, size, a);
  qdp_size_text(buf_b, size, b);
  if (a != b && strcmp(buf_a, buf_b) == 0) {
    snprintf(buf_a, size, "%" PRIu64 " B", a);
    snprintf(buf_b, size, "%" PRIu64 " B", b);
  }
}
