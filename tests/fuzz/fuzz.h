/* fuzz.h — what the libFuzzer harnesses of tests/fuzz share: the entry point libFuzzer calls and
 * the check that turns a broken contract into a crash libFuzzer keeps the input of.
 *
 * A harness asserts the contract of the code it feeds (a refusal has a status and a message; a
 * plan tiles its state), not only the absence of memory errors: ASan and UBSan catch those.
 */
#ifndef QDP_FUZZ_H
#define QDP_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts with the broken condition and a formatted explanation; abort() is what libFuzzer
 * reports as a crash (and saves the input for). */
#define FUZZ_CHECK(cond, ...) \
  do { \
    if (!(cond)) { \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__); \
      fputc('\n', stderr); \
      abort(); \
    } \
  } while (0)

#endif /* QDP_FUZZ_H */
