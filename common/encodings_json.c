/* Writes the encodings table (qdp_encodings.h) as JSON on standard output, for the clients that
 * cannot read C: the build installs it beside qdp.desc (share/qdp/encodings.json), and the tests
 * check the NumPy reference and the manual pages against it. values_per_sample[k] is
 * qdp_values_per_sample for k + 1 qubits (1..63); the other members are the table's columns. */
#include <stdio.h>
#include <stdlib.h>

#include "qdp_encodings.h"

static void str(const char *key, const char *s) {
  printf("\"%s\": \"", key);
  for (const char *p = s; *p; p++) {
    printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
  }
  printf("\"");
}

int main(void) {
  static const char *const layouts[] = {
      [QDP_LAYOUT_AMPLITUDES] = "amplitudes", [QDP_LAYOUT_PARAMETERS] = "parameters"};
  static const char *const reductions[] = {
      [QDP_REDUCTION_NONE] = "none", [QDP_REDUCTION_NORM] = "norm"};
  static const char *const exchanges[] = {[QDP_EXCHANGE_NONE] = "none", [QDP_EXCHANGE_WHT] = "wht"};
  static const char *const checks[] = {[QDP_CHECK_NONE] = "none",
                                       [QDP_CHECK_FINITE] = "finite",
                                       [QDP_CHECK_FINITE_SUM] = "finite_sum",
                                       [QDP_CHECK_INDEX] = "index"};
  printf("{\"schema\": 1, \"encodings\": [");
  for (unsigned e = 1; e < QDP_ENCODING_COUNT; e++) {
    const struct qdp_encoding_desc *d = qdp_encoding_desc((qdp_encoding)e);
    if (!d) {
      fprintf(stderr, "qdp-encodings-json: no encoding has number %u\n", e);
      return EXIT_FAILURE;
    }
    printf("%s\n  {", e > 1 ? "," : "");
    str("name", d->name);
    printf(", \"number\": %u, ", e);
    str("layout", layouts[d->layout]);
    printf(", \"real\": %s, ", d->real ? "true" : "false");
    str("reduction", reductions[d->reduction]);
    printf(", ");
    str("exchange", exchanges[d->exchange]);
    printf(", ");
    str("check", checks[d->check]);
    printf(", \"dtypes\": [");
    for (unsigned t = 0, first = 1; t < 32; t++) {
      if (qdp_encoding_takes(d, (qdp_dtype)t) && qdp_dtype_name((qdp_dtype)t)) {
        printf("%s\"%s\"", first ? "" : ", ", qdp_dtype_name((qdp_dtype)t));
        first = 0;
      }
    }
    printf("], ");
    str("count", d->count);
    printf(", ");
    str("noun", d->noun);
    printf(", \"values_per_sample\": [");
    for (uint32_t n = 1; n <= 63; n++) {
      printf("%s%llu", n > 1 ? ", " : "",
             (unsigned long long)qdp_values_per_sample((qdp_encoding)e, n));
    }
    printf("]}");
  }
  printf("\n]}\n");
  return ferror(stdout) ? EXIT_FAILURE : EXIT_SUCCESS;
}
