#include "runtime/norm.h"

size_t norm_split(uint64_t lo, uint64_t hi, struct norm_block *ret_blocks) {
  size_t n = 0;
  while (lo < hi) {
    /* The largest block that starts aligned at lo and does not pass hi. */
    uint32_t lg = lo ? (uint32_t)__builtin_ctzll(lo) : 63;
    while (lg > 0 && (hi - lo) < (UINT64_C(1) << lg)) {
      lg--;
    }
    ret_blocks[n++] = (struct norm_block){.first = lo, .log2 = lg, .sum = 0};
    lo += UINT64_C(1) << lg;
  }
  return n;
}

static double tree(const struct norm_block *b, size_t n, size_t *cursor, uint64_t lo, uint32_t lg,
                   int single) {
  if (*cursor >= n || b[*cursor].first - lo >= (UINT64_C(1) << lg)) {
    return 0.0; /* nothing of this subtree was given: all zeros */
  }
  if (b[*cursor].first == lo && b[*cursor].log2 == lg) {
    return b[(*cursor)++].sum;
  }
  uint64_t half = UINT64_C(1) << (lg - 1);
  double left = tree(b, n, cursor, lo, lg - 1, single);
  double right = tree(b, n, cursor, lo + half, lg - 1, single);
  if (single) {
    float s = (float)left + (float)right;
    return s;
  }
  return left + right;
}

double norm_combine(const struct norm_block *blocks, size_t n, uint32_t log2_total, int single) {
  size_t cursor = 0;
  return tree(blocks, n, &cursor, 0, log2_total, single);
}
