/* csv.c — text input files for libqdp: whether a file's leading bytes are text, and a CSV table
 * read into values as the Python package's reader (qdp.readers) reads one, so that a file gives
 * the same samples whichever client encodes it. Two differences, both refusals where that reader
 * goes on: a quoted field left open at the end of the file, and a column of a table with a header
 * that mixes numbers and text (the reader drops it, which changes every sample's width). */
#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "libqdp_int.h"

/* ---- text or not ---- */

/* The bytes a UTF-8 sequence led by b takes (0: b leads none), and the range of its second byte
 * that excludes overlong forms, surrogates and code points past U+10FFFF. */
static size_t utf8_len(unsigned char b, unsigned char *lo, unsigned char *hi) {
  *lo = 0x80;
  *hi = 0xbf;
  if (b >= 0xc2 && b <= 0xdf) {
    return 2;
  }
  if (b >= 0xe0 && b <= 0xef) {
    *lo = b == 0xe0 ? 0xa0 : 0x80;
    *hi = b == 0xed ? 0x9f : 0xbf;
    return 3;
  }
  if (b >= 0xf0 && b <= 0xf4) {
    *lo = b == 0xf0 ? 0x90 : 0x80;
    *hi = b == 0xf4 ? 0x8f : 0xbf;
    return 4;
  }
  return 0;
}

bool qdp__looks_like_text(const unsigned char *buf, size_t n, bool whole) {
  size_t i = 0;
  while (i < n) {
    unsigned char b = buf[i];
    if ((b >= 0x20 && b < 0x7f) || (b >= '\t' && b <= '\r')) {
      i++;
      continue;
    }
    unsigned char lo, hi;
    size_t len = utf8_len(b, &lo, &hi);
    if (len == 0) {
      return false;
    }
    for (size_t k = 1; k < len; k++) {
      if (i + k == n) {
        return !whole; /* a sequence the end of a partial read cut */
      }
      unsigned char c = buf[i + k];
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xbf)) {
        return false;
      }
    }
    i += len;
  }
  return true;
}

/* ---- numbers ---- */

/* strtod in the "C" locale whatever the program's LC_NUMERIC says: a CSV's decimal point is '.'. */
static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void make_c_locale(void) {
  c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

static size_t digits(const char *s) {
  size_t n = 0;
  while (s[n] >= '0' && s[n] <= '9') {
    n++;
  }
  return n;
}

/* The text to convert: s, or a copy in tmp without the underscores Python allows between two
 * digits ("1_000"); NULL for an underscore anywhere else. */
static const char *number_text(const char *s, char *tmp, size_t size) {
  if (!strchr(s, '_')) {
    return s;
  }
  size_t o = 0;
  for (const char *r = s; *r; r++) {
    if (*r != '_') {
      if (o + 1 == size) {
        return NULL;
      }
      tmp[o++] = *r;
    } else if (r == s || r[-1] < '0' || r[-1] > '9' || r[1] < '0' || r[1] > '9') {
      return NULL;
    }
  }
  tmp[o] = '\0';
  return tmp;
}

/* Python's float(): [sign] (digits [. [digits]] | . digits) [e [sign] digits], or inf, infinity,
 * nan in any case; no hexadecimal, no "nan(...)". */
static bool is_float_text(const char *s) {
  s += *s == '+' || *s == '-';
  if (strcasecmp(s, "inf") == 0 || strcasecmp(s, "infinity") == 0 || strcasecmp(s, "nan") == 0) {
    return true;
  }
  size_t whole = digits(s), frac = 0;
  s += whole;
  if (*s == '.') {
    frac = digits(++s);
    s += frac;
  }
  if (whole + frac == 0) {
    return false;
  }
  if (*s == 'e' || *s == 'E') {
    s++;
    s += *s == '+' || *s == '-';
    size_t e = digits(s);
    if (e == 0) {
      return false;
    }
    s += e;
  }
  return *s == '\0';
}

/* Why a field is not a value of the asked type. */
enum bad_value { VALUE_OK, NOT_A_NUMBER, NOT_AN_INTEGER, INT64_RANGE };

/* The field s (trimmed, not empty) as a value of dtype into out. */
static enum bad_value to_value(const char *s, qdp_dtype dtype, void *out) {
  char tmp[128];
  if (!(s = number_text(s, tmp, sizeof tmp))) {
    return NOT_A_NUMBER;
  }
  if (dtype == QDP_DTYPE_INT64) {
    const char *d = s + (*s == '+' || *s == '-');
    if (*d == '\0' || d[digits(d)] != '\0') {
      return is_float_text(s) ? NOT_AN_INTEGER : NOT_A_NUMBER;
    }
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE) {
      return INT64_RANGE;
    }
    int64_t x = v;
    memcpy(out, &x, sizeof x);
    return VALUE_OK;
  }
  if (!is_float_text(s)) {
    return NOT_A_NUMBER;
  }
  /* Out of range is inf or 0, as in Python; judging inf is the daemon's job. */
  double v = strtod_l(s, NULL, c_locale);
  if (dtype == QDP_DTYPE_FLOAT32) {
    float f = (float)v;
    memcpy(out, &f, sizeof f);
  } else {
    memcpy(out, &v, sizeof v);
  }
  return VALUE_OK;
}

/* ---- records ---- */

/* Reads records (Python's csv module, its default dialect: ',' between fields, '"' quoting, a
 * doubled quote for a quote, \n, \r\n or \r ending a record outside quotes). */
struct lexer {
  const char *p, *end;
  uint64_t line; /* the line p is on, from 1 */
  char *text;    /* the record's fields, unquoted and trimmed, each ended by a NUL */
  size_t len, cap;
  size_t *field; /* nfields offsets into text */
  size_t nfields, fcap;
};

static bool put_char(struct lexer *lx, char c) {
  if (lx->len == lx->cap) {
    size_t cap = lx->cap ? 2 * lx->cap : 256;
    char *t = realloc(lx->text, cap);
    if (!t) {
      return false;
    }
    lx->text = t;
    lx->cap = cap;
  }
  lx->text[lx->len++] = c;
  return true;
}

/* The ASCII whitespace Python's strip() takes. */
static bool is_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Ends the field that starts at text[start], trimmed of whitespace. */
static bool end_field(struct lexer *lx, size_t start) {
  size_t a = start, b = lx->len;
  while (a < b && is_space(lx->text[a])) {
    a++;
  }
  while (b > a && is_space(lx->text[b - 1])) {
    b--;
  }
  if (a > start) {
    memmove(lx->text + start, lx->text + a, b - a);
  }
  lx->len = start + (b - a);
  if (lx->nfields == lx->fcap) {
    size_t cap = lx->fcap ? 2 * lx->fcap : 16;
    size_t *f = realloc(lx->field, cap * sizeof *f);
    if (!f) {
      return false;
    }
    lx->field = f;
    lx->fcap = cap;
  }
  lx->field[lx->nfields++] = start;
  return put_char(lx, '\0');
}

/* Steps over the line end at p (\r\n, \n or \r), counting it. */
static void line_end(struct lexer *lx) {
  if (*lx->p == '\r' && lx->p + 1 < lx->end && lx->p[1] == '\n') {
    lx->p++;
  }
  lx->p++;
  lx->line++;
}

static const char *field_text(const struct lexer *lx, size_t j) {
  return lx->text + lx->field[j];
}

static int no_memory(void) {
  qdp__err_nomem("reading a CSV file");
  return -1;
}

/* The next record that is not an empty line into lx's fields, *ret_line the line it starts on:
 * 1, or 0 at the end of the text, or -1 on failure (recorded). */
static int next_record(struct lexer *lx, const char *path, uint64_t *ret_line) {
  while (lx->p < lx->end && (*lx->p == '\n' || *lx->p == '\r')) {
    line_end(lx); /* an empty line is no record, as in Python's csv */
  }
  if (lx->p == lx->end) {
    return 0;
  }
  *ret_line = lx->line;
  lx->len = lx->nfields = 0;
  for (;;) {
    size_t start = lx->len;
    if (*lx->p == '"') {
      uint64_t opened = lx->line;
      lx->p++;
      for (;;) {
        if (lx->p == lx->end) {
          qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                         "Line %" PRIu64 " of '%s' opens a quoted field that is never closed.",
                         opened, path);
          return -1;
        }
        char c = *lx->p;
        if (c == '"' && (lx->p + 1 == lx->end || lx->p[1] != '"')) {
          lx->p++;
          break;
        }
        lx->p += c == '"' ? 2 : 1; /* a doubled quote is one quote */
        lx->line += c == '\n' || (c == '\r' && (lx->p == lx->end || *lx->p != '\n'));
        if (!put_char(lx, c)) {
          return no_memory();
        }
      }
    }
    /* Unquoted text, or what follows a closing quote, runs to the next ',' or line end. */
    while (lx->p < lx->end && *lx->p != ',' && *lx->p != '\n' && *lx->p != '\r') {
      if (!put_char(lx, *lx->p++)) {
        return no_memory();
      }
    }
    if (!end_field(lx, start)) {
      return no_memory();
    }
    if (lx->p == lx->end) {
      return 1;
    }
    if (*lx->p != ',') {
      line_end(lx);
      return 1;
    }
    lx->p++;
  }
}

/* ---- the table ---- */

/* What the rows said of one column. */
struct column {
  uint64_t numbers;           /* fields that are numbers (of the asked type or not) */
  uint64_t bad_row, bad_line; /* the first field that is not a value (bad_row UINT64_MAX: none) */
  enum bad_value why;
  char bad_text[48];
  uint64_t empty_row, empty_line; /* the first empty field (empty_row UINT64_MAX: none) */
};

/* A field's text for a message (size >= 8): what fits, whole UTF-8 characters, control
 * characters and bytes that are not UTF-8 as \xNN, "..." when cut. */
static void quote_text(const char *s, char *out, size_t size) {
  size_t o = 0;
  while (*s && o + 8 <= size) { /* room for one more character of 4 bytes, then "..." */
    const unsigned char *u = (const unsigned char *)s;
    unsigned char lo = 0, hi = 0;
    size_t n = u[0] >= 0x80 ? utf8_len(u[0], &lo, &hi) : 1;
    for (size_t k = 1; k < n; k++) {
      if (u[k] < (k == 1 ? lo : 0x80) || u[k] > (k == 1 ? hi : 0xbf)) {
        n = 0; /* stops at the NUL that ends s too */
        break;
      }
    }
    if (n == 0 || u[0] < 0x20 || u[0] == 0x7f) {
      o += (size_t)snprintf(out + o, size - o, "\\x%02x", u[0]);
      s++;
    } else {
      memcpy(out + o, s, n);
      o += n;
      s += n;
    }
  }
  snprintf(out + o, size - o, "%s", *s ? "..." : "");
}

/* "column 2 ('b')" with a header, "column 2" without. */
static void column_name(char *const *names, size_t j, char *out, size_t size) {
  if (names) {
    char q[48];
    quote_text(names[j], q, sizeof q);
    snprintf(out, size, "column %zu ('%s')", j, q);
  } else {
    snprintf(out, size, "column %zu", j);
  }
}

/* The header row's names, kept while the rows are read: the next record overwrites a record's
 * fields. */
static char **copy_names(const struct lexer *lx) {
  char **names = calloc(lx->nfields, sizeof *names);
  for (size_t j = 0; names && j < lx->nfields; j++) {
    if (!(names[j] = strdup(field_text(lx, j)))) {
      for (size_t k = 0; k < j; k++) {
        free(names[k]);
      }
      free(names);
      return NULL;
    }
  }
  return names;
}

/* A header is a first row with a field that is not a number (Python's float() fails on it). */
static bool is_header(const struct lexer *lx) {
  for (size_t j = 0; j < lx->nfields; j++) {
    double v;
    const char *s = field_text(lx, j);
    if (*s && to_value(s, QDP_DTYPE_FLOAT64, &v) != VALUE_OK) {
      return true;
    }
  }
  return false;
}

/* Reads one data row into vals (one value of es bytes per field; 0 for a field that is empty or
 * not a value, noted in cols). */
static void take_row(const struct lexer *lx, qdp_dtype dtype, unsigned es, uint64_t row,
                     uint64_t line, unsigned char *vals, struct column *cols) {
  for (size_t j = 0; j < lx->nfields; j++) {
    const char *s = field_text(lx, j);
    struct column *c = &cols[j];
    enum bad_value why = *s ? to_value(s, dtype, vals + j * es) : VALUE_OK;
    if (!*s || why != VALUE_OK) {
      memset(vals + j * es, 0, es);
    }
    if (!*s && c->empty_row == UINT64_MAX) {
      c->empty_row = row;
      c->empty_line = line;
    }
    c->numbers += *s && why != NOT_A_NUMBER;
    if (why != VALUE_OK && c->bad_row == UINT64_MAX) {
      c->bad_row = row;
      c->bad_line = line;
      c->why = why;
      quote_text(s, c->bad_text, sizeof c->bad_text);
    }
  }
}

/* The refusal of column j's first field that is not a value. */
static qdp_status bad_field(const char *path, char *const *names, size_t j,
                            const struct column *c) {
  char col[128];
  column_name(names, j, col, sizeof col);
  static const char *const what[] = {
      [NOT_A_NUMBER] = "not a number",
      [NOT_AN_INTEGER] = "not an integer, which int64 values must be",
      [INT64_RANGE] = "outside int64's range",
  };
  return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1,
                        c->why == NOT_A_NUMBER ? "input.path" : "input.dtype",
                        "Row %" PRIu64 " (line %" PRIu64 "), %s of '%s' is '%s', %s%s.", c->bad_row,
                        c->bad_line, col, path, c->bad_text, what[c->why],
                        names && c->why == NOT_A_NUMBER
                            ? "; the column holds numbers elsewhere: fix the value, or remove "
                              "the column if it is not a feature"
                            : "");
}

/* Which columns are kept (with a header, a column of text alone is left out), or the table's
 * first problem, recorded: a field that is not a value, no numeric column, an empty field. */
static qdp_status choose_columns(const char *path, char *const *names, size_t width,
                                 const struct column *cols, bool *keep, size_t *ret_kept) {
  size_t kept = 0;
  for (size_t j = 0; j < width; j++) {
    const struct column *c = &cols[j];
    keep[j] = c->bad_row == UINT64_MAX;
    if (!keep[j] && (!names || c->numbers > 0)) {
      return bad_field(path, names, j, c);
    }
    kept += keep[j];
  }
  if (kept == 0) {
    char list[600];
    size_t o = 0;
    for (size_t j = 0; j < width && o < sizeof list; j++) {
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%.40s", j ? ", " : "", names[j]);
    }
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                          "'%s' has no numeric column; its columns: %s.", path, list);
  }
  size_t first = SIZE_MAX; /* row-major: the lowest row, then the lowest column */
  for (size_t j = 0; j < width; j++) {
    if (keep[j] && cols[j].empty_row != UINT64_MAX &&
        (first == SIZE_MAX || cols[j].empty_row < cols[first].empty_row)) {
      first = j;
    }
  }
  if (first != SIZE_MAX) {
    char col[128];
    column_name(names, first, col, sizeof col);
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                          "Row %" PRIu64 " (line %" PRIu64
                          "), %s of '%s' is empty: every value must be given (fill it, or drop "
                          "the row).",
                          cols[first].empty_row, cols[first].empty_line, col, path);
  }
  *ret_kept = kept;
  return QDP_OK;
}

/* The line ends in text: a bound on its rows, to size the values once. */
static uint64_t count_lines(const char *text, size_t len) {
  uint64_t n = 1;
  for (size_t i = 0; i < len; i++) {
    n += text[i] == '\n' || (text[i] == '\r' && (i + 1 == len || text[i + 1] != '\n'));
  }
  return n;
}

/* The data rows after the first record (the header, or row 0, already in lx), into vals. */
static qdp_status read_rows(struct lexer *lx, const char *path, qdp_dtype dtype, size_t width,
                            bool header, uint64_t first_line, unsigned char *vals,
                            struct column *cols, uint64_t *ret_rows) {
  const unsigned es = qdp_dtype_size(dtype);
  uint64_t rows = 0, line = first_line;
  int more = 1;
  if (header) {
    more = next_record(lx, path, &line);
  }
  for (; more == 1; more = next_record(lx, path, &line)) {
    if (lx->nfields != width) {
      return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                            "Row %" PRIu64 " (line %" PRIu64
                            ") of '%s' has %zu field%s; %s has "
                            "%zu.",
                            rows, line, path, lx->nfields, lx->nfields == 1 ? "" : "s",
                            header ? "the header" : "row 0", width);
    }
    take_row(lx, dtype, es, rows, line, vals + rows * width * es, cols);
    rows++;
  }
  *ret_rows = rows;
  return more < 0 ? qdp__err()->code : QDP_OK;
}

qdp_status qdp__csv_parse(const char *path, const char *text, size_t len, qdp_dtype dtype,
                          struct qdp__csv *ret) {
  if (dtype == QDP_DTYPE_UNSPECIFIED) {
    dtype = QDP_DTYPE_FLOAT64;
  }
  if (dtype != QDP_DTYPE_FLOAT32 && dtype != QDP_DTYPE_FLOAT64 && dtype != QDP_DTYPE_INT64) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.dtype",
                          "'%s' is CSV, read as float32, float64 or int64 values, not %s.", path,
                          qdp_dtype_name(dtype) ? qdp_dtype_name(dtype) : "an unknown type");
  }
  const char *nul = memchr(text, '\0', len);
  if (nul) {
    return qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                          "'%s' holds a NUL byte at byte %zu (line %" PRIu64
                          "), so it is not text.",
                          path, (size_t)(nul - text), count_lines(text, (size_t)(nul - text)));
  }
  pthread_once(&c_locale_once, make_c_locale);
  if (!c_locale) {
    return qdp__err_nomem("making the C locale numbers are read in");
  }
  struct lexer lx = {.p = text, .end = text + len, .line = 1};
  if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) {
    lx.p += 3; /* a byte-order mark, as spreadsheets write one */
  }
  const unsigned es = qdp_dtype_size(dtype);
  char **names = NULL;
  struct column *cols = NULL;
  unsigned char *vals = NULL;
  bool *keep = NULL;
  size_t width = 0, kept = 0;
  uint64_t line = 0, rows = 0, cap = 0;
  qdp_status rc = QDP_OK;
  int got = next_record(&lx, path, &line);
  if (got <= 0) {
    rc = got < 0 ? qdp__err()->code
                 : qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                                  "'%s' is empty: CSV input needs a row of values.", path);
    goto out;
  }
  width = lx.nfields;
  const bool header = is_header(&lx);
  /* At most one row per line: one allocation holds them all. */
  cap = count_lines(lx.p, (size_t)(lx.end - lx.p)) + 1;
  cols = calloc(width, sizeof *cols);
  keep = calloc(width, sizeof *keep);
  vals = cap <= SIZE_MAX / es / width ? malloc((size_t)(cap * width * es)) : NULL;
  if (!cols || !keep || !vals || (header && !(names = copy_names(&lx)))) {
    rc = qdp__err_nomem("reading a CSV file");
    goto out;
  }
  for (size_t j = 0; j < width; j++) {
    cols[j].bad_row = cols[j].empty_row = UINT64_MAX;
  }
  rc = read_rows(&lx, path, dtype, width, header, line, vals, cols, &rows);
  if (rc == QDP_OK && rows == 0) {
    rc = qdp__err_local(QDP_ERR_INVALID_ARGUMENT, -1, "input.path",
                        "'%s' has a header row and no rows of values.", path);
  }
  if (rc == QDP_OK) {
    rc = choose_columns(path, names, width, cols, keep, &kept);
  }
  if (rc != QDP_OK) {
    goto out;
  }
  /* Leaves out the columns of text, row by row, in place: what is kept only moves forward. */
  size_t o = 0;
  for (uint64_t i = 0; i < rows; i++) {
    for (size_t j = 0; j < width; j++) {
      if (keep[j]) {
        memmove(vals + o, vals + (i * width + j) * es, es);
        o += es;
      }
    }
  }
  *ret = (struct qdp__csv){.dtype = dtype, .rows = rows, .cols = kept, .values = vals};
  vals = NULL;
out:
  for (size_t j = 0; names && j < width; j++) {
    free(names[j]);
  }
  free(names);
  free(cols);
  free(keep);
  free(vals);
  free(lx.text);
  free(lx.field);
  return rc;
}
