/* The encodings' descriptors (qdp_encodings.h), made from qdp_defs.h's QDP_ENCODINGS, and the
 * name lookups of qdp_defs.h that read them. */
#include <stdio.h>
#include <string.h>

#include "qdp_encodings.h"

#define DESC(ID, number, name_, values, layout_, states, reduction_, exchange_, check_, dtypes_, \
             count_, noun_) \
  [number] = {.id = QDP_ENCODING_##ID, \
              .name = name_, \
              .layout = QDP_LAYOUT_##layout_, \
              .real = STATES_##states, \
              .reduction = QDP_REDUCTION_##reduction_, \
              .exchange = QDP_EXCHANGE_##exchange_, \
              .check = QDP_CHECK_##check_, \
              .dtypes = QDP_DTYPES_##dtypes_, \
              .count = count_, \
              .noun = noun_},
#define STATES_REAL true
#define STATES_COMPLEX false

static const struct qdp_encoding_desc table[QDP_ENCODING_COUNT] = {QDP_ENCODINGS(DESC)};

/* Every number indexes its own row: 1..rows, none twice (a repeat would leave a row empty). */
#define FITS(ID, number, ...) \
  _Static_assert((number) > 0 && (number) < QDP_ENCODING_COUNT, \
                 "QDP_ENCODINGS numbers its rows 1..rows: " #ID " is out of that range");
QDP_ENCODINGS(FITS)

const struct qdp_encoding_desc *qdp_encoding_desc(qdp_encoding e) {
  return (unsigned)e < QDP_ENCODING_COUNT && table[e].name ? &table[e] : NULL;
}

bool qdp_encoding_takes(const struct qdp_encoding_desc *e, qdp_dtype d) {
  return (unsigned)d < 32 && (e->dtypes >> d & 1u);
}

const char *qdp_encoding_name(qdp_encoding e) {
  const struct qdp_encoding_desc *d = qdp_encoding_desc(e);
  return d ? d->name : NULL;
}

qdp_encoding qdp_encoding_from_name(const char *name) {
  for (unsigned e = 1; name && e < QDP_ENCODING_COUNT; e++) {
    if (table[e].name && strcmp(name, table[e].name) == 0) {
      return (qdp_encoding)e;
    }
  }
  return QDP_ENCODING_UNSPECIFIED;
}

/* Appends s to buf at *at (snprintf's arithmetic: *at counts what the whole text needs). */
static void put(char *buf, size_t len, int *at, const char *s) {
  size_t used = (size_t)*at < len ? (size_t)*at : len;
  int n = snprintf(buf + used, len - used, "%s", s);
  *at += n > 0 ? n : 0;
}

int qdp_encoding_names(char *buf, size_t len, const char *last) {
  int at = 0;
  if (len) {
    buf[0] = '\0';
  }
  for (unsigned e = 1; e < QDP_ENCODING_COUNT; e++) {
    put(buf, len, &at, e == 1 ? "" : e + 1 == QDP_ENCODING_COUNT ? last : ", ");
    put(buf, len, &at, table[e].name ? table[e].name : "?");
  }
  return at;
}

int qdp_dtype_names(unsigned mask, char *buf, size_t len, const char *sep) {
  int at = 0;
  if (len) {
    buf[0] = '\0';
  }
  for (unsigned d = 0; d < 32; d++) {
    const char *name = mask >> d & 1u ? qdp_dtype_name((qdp_dtype)d) : NULL;
    if (name) {
      put(buf, len, &at, at ? sep : "");
      put(buf, len, &at, name);
    }
  }
  return at;
}

unsigned qdp_input_dtypes(void) {
  unsigned any = 0;
  for (unsigned e = 1; e < QDP_ENCODING_COUNT; e++) {
    any |= table[e].dtypes;
  }
  return any;
}

int qdp_input_dtypes_text(char *buf, size_t len) {
  unsigned every = ~0u;
  for (unsigned e = 1; e < QDP_ENCODING_COUNT; e++) {
    every &= table[e].dtypes;
  }
  int at = qdp_dtype_names(every, buf, len, " or ");
  for (unsigned e = 1; e < QDP_ENCODING_COUNT; e++) {
    unsigned more = table[e].dtypes & ~every;
    if (more) {
      char names[64];
      qdp_dtype_names(more, names, sizeof names, " or ");
      put(buf, len, &at, " (");
      put(buf, len, &at, table[e].name);
      put(buf, len, &at, " also ");
      put(buf, len, &at, names);
      put(buf, len, &at, ")");
    }
  }
  return at;
}
