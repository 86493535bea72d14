/* qdp_encodings.h — what the daemon, the kernels' dispatch and the tests read of each encoding: one
 * descriptor per row of qdp_defs.h's QDP_ENCODINGS, indexed by the encoding's number. Not
 * installed (libqdp's clients read QDP_ENCODINGS itself). Constant data and pure functions: any
 * thread.
 */
#ifndef QDP_ENCODINGS_H
#define QDP_ENCODINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qdp_defs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The columns of QDP_ENCODINGS (qdp_defs.h says what each means). */
enum qdp_layout { QDP_LAYOUT_AMPLITUDES, QDP_LAYOUT_PARAMETERS };
enum qdp_reduction { QDP_REDUCTION_NONE, QDP_REDUCTION_NORM };
enum qdp_exchange { QDP_EXCHANGE_NONE, QDP_EXCHANGE_WHT };
enum qdp_check { QDP_CHECK_NONE, QDP_CHECK_FINITE, QDP_CHECK_FINITE_SUM, QDP_CHECK_INDEX };

#define QDP_DTYPES_FLOAT ((1u << QDP_DTYPE_FLOAT32) | (1u << QDP_DTYPE_FLOAT64))
#define QDP_DTYPES_FLOAT_INT64 (QDP_DTYPES_FLOAT | (1u << QDP_DTYPE_INT64))

struct qdp_encoding_desc {
  qdp_encoding id; /* QDP_ENCODING_UNSPECIFIED in the row of a number no encoding has */
  const char *name;
  enum qdp_layout layout;
  bool real; /* every amplitude of its states is real */
  enum qdp_reduction reduction;
  enum qdp_exchange exchange;
  enum qdp_check check;
  unsigned dtypes;   /* 1u << d for each input dtype d it takes */
  const char *count; /* a sample's values as help gives them: "N + N(N-1)/2" */
  const char *noun;  /* and what they are: "coefficients" */
};

/* One more than the largest encoding number: the size of every table indexed by encoding (the
 * numbers are 1..rows; encodings.c checks). */
#define QDP_ENCODING_ROW_(...) +1
enum { QDP_ENCODING_COUNT = 1 QDP_ENCODINGS(QDP_ENCODING_ROW_) };
#undef QDP_ENCODING_ROW_

/* The descriptor of e; NULL for QDP_ENCODING_UNSPECIFIED and numbers no encoding has. */
const struct qdp_encoding_desc *qdp_encoding_desc(qdp_encoding e);

/* Whether e takes input dtype d. */
bool qdp_encoding_takes(const struct qdp_encoding_desc *e, qdp_dtype d);

/* The encodings' names in number order, ", " between them and `last` before the final one
 * ("amplitude, angle, basis, iqp, iqp-z or phase" with " or "), into buf (always terminated).
 * Returns what the whole text needs, as snprintf. */
int qdp_encoding_names(char *buf, size_t len, const char *last);

/* The input dtypes some encoding takes (1u << d each): what an input may be before the encoding is
 * known. */
unsigned qdp_input_dtypes(void);
/* Those as people read them: the dtypes every encoding takes, then each encoding's others
 * ("float32 or float64 (basis also int64)"), into buf (always terminated). Returns what the whole
 * text needs. */
int qdp_input_dtypes_text(char *buf, size_t len);

/* The names of the dtypes in mask (1u << d each), in number order, `sep` between them ("float32
 * or float64" with " or "), into buf (always terminated). Returns what the whole text needs. */
int qdp_dtype_names(unsigned mask, char *buf, size_t len, const char *sep);

#ifdef __cplusplus
}
#endif
#endif /* QDP_ENCODINGS_H */
