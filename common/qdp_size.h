/* qdp_size.h — byte counts as people read them, for messages: "512 B", "10.4 GiB", "16 TiB"
 * (binary units, one decimal unless it is .0). Exact counts travel beside them where a program
 * needs them (an error's need_bytes and free_bytes, --json); this text is for a person. Pure,
 * any thread; not part of libqdp's public API. */
#ifndef QDP_SIZE_H
#define QDP_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Enough for any uint64_t: "1023.9 KiB" at most 10 characters, "18446744073709551615 B" 22. */
#define QDP_SIZE_TEXT 32

/* Writes the text of `bytes` into buf (size bytes, QDP_SIZE_TEXT is enough) and returns buf. */
char *qdp_size_text(char *buf, size_t size, uint64_t bytes);

/* The texts of two figures a message compares (needed and free, say): as qdp_size_text, or both
 * exact ("8397808 B", "8397807 B") where they differ but would read the same. */
void qdp_size_text_pair(char *buf_a, char *buf_b, size_t size, uint64_t a, uint64_t b);

/* The text of `bytes` in a buffer that lives until the end of the enclosing block: for the
 * arguments of one message, e.g. qdp_error_set(..., "%s", QDP_SIZE_STR(n)). */
#define QDP_SIZE_STR(bytes) qdp_size_text((char[QDP_SIZE_TEXT]){0}, QDP_SIZE_TEXT, (bytes))

#endif
