/* norm.h — the amplitude norm as one fixed tree, whatever the sharding. Pure functions.
 *
 * The sum of squares of a sample is defined as the pairwise tree over [0, 2^n) (kernels/qdpk.h).
 * A shard covers any range; it splits its range into maximal aligned power-of-two blocks, computes
 * each block's exact subtree with the kernel, and the blocks of all shards are combined here along
 * the same tree. So 1, 2, 4 or 8 shards, or uneven ones, give the same bits as one device.
 */
#ifndef QDP_RUNTIME_NORM_H
#define QDP_RUNTIME_NORM_H

#include <stddef.h>
#include <stdint.h>

struct norm_block {
  uint64_t first; /* aligned to 2^log2 */
  uint32_t log2;
  double sum; /* the block's subtree */
};

/* Most blocks a range of a 2^63-amplitude index space splits into. */
#define NORM_BLOCKS_MAX 128

/* Splits [lo, hi) into maximal aligned power-of-two blocks, ascending; returns how many (sums 0).
 */
size_t norm_split(uint64_t lo, uint64_t hi, struct norm_block *ret_blocks);

/* Combines disjoint blocks (ascending by first) within [0, 2^log2_total) along the pairwise tree;
 * missing ranges are zero. single: add in float (COMPLEX64 states), else double. */
double norm_combine(const struct norm_block *blocks, size_t n, uint32_t log2_total, int single);

#endif /* QDP_RUNTIME_NORM_H */
