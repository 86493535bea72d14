/* test_plan_worlds.c — plans over whole worlds: three ranks with different meshes each getting
 * their shards, AUTO's choice of single, even, capacity or batch from the world's budgets, and the
 * tiling invariant, needs and policy arithmetic over 4000 random worlds and requests (checked
 * against independent formulas). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "plan_fixture.h"

/* ---- multi-rank worlds ----------------------------------------------------------------------- */

START_TEST(test_three_ranks_with_different_meshes_each_get_their_shards) {
  /* Rank 0: 2 devices, rank 1: 4, rank 2: 1; listed out of order to exercise world order. */
  struct world_buf wb;
  memset(&wb, 0, sizeof wb);
  const int ranks[7] = {2, 1, 0, 1, 1, 0, 1};
  const int ords[7] = {0, 3, 1, 0, 2, 0, 1};
  const uint64_t budgets[7] = {40 * GIB, 20 * GIB, 80 * GIB, 20 * GIB,
                               20 * GIB, 80 * GIB, 20 * GIB};
  for (size_t i = 0; i < 7; i++) {
    wb.dev[i].rank = ranks[i];
    wb.dev[i].ordinal = ords[i];
    wb.dev[i].budget_bytes = budgets[i];
    snprintf(wb.dev[i].name, sizeof wb.dev[i].name, "r%d/cuda:%d", ranks[i], ords[i]);
  }
  wb.w.devices = wb.dev;
  wb.w.count = 7;
  wb.w.ranks = 3;
  struct plan_request r = req_for(QDP_ENCODING_AMPLITUDE, 32, PLAN_UNEVEN);
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(p->nshards, 7);
  const size_t world_pos[7] = {5, 2, 3, 6, 4, 1, 0}; /* (0,0) (0,1) (1,0) (1,1) (1,2) (1,3) (2,0) */
  for (size_t i = 0; i < 7; i++) {
    ck_assert_uint_eq(p->shards[i].device, world_pos[i]);
  }
  size_t idx[8];
  ck_assert_uint_eq(plan_rank_shards(p, 0, idx, 8), 2);
  ck_assert_uint_eq(idx[0], 0);
  ck_assert_uint_eq(idx[1], 1);
  ck_assert_uint_eq(plan_rank_shards(p, 1, idx, 8), 4);
  for (size_t i = 0; i < 4; i++) {
    ck_assert_uint_eq(idx[i], 2 + i);
    ck_assert_int_eq(p->shards[idx[i]].rank, 1);
    ck_assert_int_eq(p->shards[idx[i]].ordinal, (int)i);
  }
  ck_assert_uint_eq(plan_rank_shards(p, 2, idx, 8), 1);
  ck_assert_uint_eq(idx[0], 6);
  ck_assert_str_eq(p->needs[6].name, "r2/cuda:0");
  ck_assert_uint_eq(plan_rank_shards(p, 3, idx, 8), 0);
  /* A short buffer gets what fits; the return value still says how many. */
  idx[1] = 99;
  ck_assert_uint_eq(plan_rank_shards(p, 1, idx, 1), 4);
  ck_assert_uint_eq(idx[0], 2);
  ck_assert_uint_eq(idx[1], 99);
  ck_assert_uint_eq(plan_rank_shards(p, 1, NULL, 0), 4);
  plan_destroy(p);

  /* Capacity over the same world: weights 80 80 | 20 20 20 20 | 40 of 280 (GiB). */
  r.policy = PLAN_CAPACITY;
  p = compute_ok(&r, &wb.w);
  const uint64_t w8[7] = {80, 80, 20, 20, 20, 20, 40};
  for (size_t i = 0; i < 7; i++) {
    u128 num = (u128)(1ull << 32) * w8[i];
    uint64_t lo = (uint64_t)(num / 280);
    ck_assert_uint_ge(p->shards[i].count, lo);
    ck_assert_uint_le(p->shards[i].count, lo + 1);
  }
  /* Each rank's bytes sum to its shards' counts. */
  uint64_t per_rank[3] = {0, 0, 0};
  for (int k = 0; k < 3; k++) {
    size_t n = plan_rank_shards(p, k, idx, 8);
    for (size_t i = 0; i < n; i++) {
      per_rank[k] += p->shards[idx[i]].bytes;
    }
  }
  ck_assert_uint_eq(per_rank[0] + per_rank[1] + per_rank[2], p->total_bytes);
  plan_destroy(p);

  /* Even over rank 1's four devices, named by a subset. */
  size_t r1[4] = {3, 6, 4, 1};
  r.policy = PLAN_EVEN;
  r.device_subset = r1;
  r.device_subset_count = 4;
  p = compute_ok(&r, &wb.w);
  ck_assert_uint_eq(plan_rank_shards(p, 1, idx, 8), 4);
  ck_assert_uint_eq(plan_rank_shards(p, 0, idx, 8), 0);
  ck_assert_uint_eq(p->global_bits, 2);
  plan_destroy(p);
}
END_TEST

/* ---- AUTO ------------------------------------------------------------------------------------ */

START_TEST(test_auto_picks_single_even_capacity_or_batch) {
  struct world_buf wb;
  /* 30 qubits complex128 = 16 GiB: fits one 20 GiB device -> single on the largest budget. */
  uint64_t b4[4] = {20 * GIB, 24 * GIB, 24 * GIB, 20 * GIB};
  world1(&wb, "cuda", 4, b4);
  struct plan_request r = req_for(QDP_ENCODING_AMPLITUDE, 30, PLAN_AUTO);
  r.values_per_sample = 100;
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_SINGLE);
  ck_assert_uint_eq(p->shards[0].device, 1);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  /* 32 qubits = 64 GiB: no single device, 4 x 16 GiB fits -> even. */
  r.qubits = 32;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_EVEN);
  ck_assert_uint_eq(p->global_bits, 2);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  /* 2 of the 4 hold less than 16 GiB: even no longer fits, capacity does (80 GiB usable). */
  wb.dev[0].budget_bytes = 12 * GIB;
  wb.dev[3].budget_bytes = 12 * GIB;
  wb.dev[1].budget_bytes = 28 * GIB;
  wb.dev[2].budget_bytes = 28 * GIB;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_CAPACITY);
  ck_assert_int_eq(p->feasible, 1);
  ck_assert_uint_gt(p->shards[1].count, p->shards[0].count);
  plan_destroy(p);
  /* Three devices: no even set -> capacity. */
  uint64_t b3[3] = {30 * GIB, 30 * GIB, 30 * GIB};
  world1(&wb, "cuda", 3, b3);
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_CAPACITY);
  ck_assert_uint_eq(p->nshards, 3);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  /* A batch goes data parallel even when it would fit one device. */
  r.qubits = 10;
  r.batch = 5;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_BATCH);
  ck_assert_uint_eq(p->nshards, 3);
  plan_destroy(p);
  /* One device too small: it stays single and infeasible. */
  uint64_t b1[1] = {GIB};
  world1(&wb, "cuda", 1, b1);
  r.qubits = 30;
  r.batch = 1;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_SINGLE);
  ck_assert_int_eq(p->feasible, 0);
  plan_destroy(p);
}
END_TEST

START_TEST(test_auto_iqp_uses_even_over_the_largest_power_of_two_set) {
  /* iqp, 32 qubits complex128 = 64 GiB over 6 devices: no single fits; even over the 4 largest
   * (devices 1, 2, 4, 5), kept in world order. */
  uint64_t b[6] = {10 * GIB, 20 * GIB, 20 * GIB, 5 * GIB, 20 * GIB, 20 * GIB};
  struct world_buf wb;
  world1(&wb, "cuda", 6, b);
  struct plan_request r = req_for(QDP_ENCODING_IQP, 32, PLAN_AUTO);
  struct plan *p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_EVEN);
  ck_assert_uint_eq(p->global_bits, 2);
  const size_t want[4] = {1, 2, 4, 5};
  for (size_t i = 0; i < 4; i++) {
    ck_assert_uint_eq(p->shards[i].device, want[i]);
    ck_assert_uint_eq(p->shards[i].count, 1ull << 30);
  }
  /* 16 GiB shard + 256 MiB exchange buffer fits 20 GiB. */
  ck_assert_uint_eq(p->needs[0].need_bytes, 16 * GIB + PLAN_EXCHANGE_CHUNK_BYTES);
  ck_assert_int_eq(p->feasible, 1);
  plan_destroy(p);
  /* A small iqp state still goes to one device. */
  r = req_for(QDP_ENCODING_IQP_Z, 20, PLAN_AUTO);
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_SINGLE);
  plan_destroy(p);
  /* 64 GiB over budgets of 20, 20 and four of 12 GiB: even over the 4 largest needs 16 GiB on
   * 12; devices that take the top 3 bits alone get capacity over all 6 in blocks of 8 GiB (ends
   * at 0.227, 0.455, 0.591, 0.727, 0.864 of the state move to 2, 4, 5, 6, 7 eighths): 2, 2, 1, 1,
   * 1 and 1 blocks, which fit. Without them the infeasible even plan stands. */
  uint64_t b2[6] = {20 * GIB, 20 * GIB, 12 * GIB, 12 * GIB, 12 * GIB, 12 * GIB};
  world1(&wb, "cpu", 6, b2);
  r = req_for(QDP_ENCODING_IQP, 32, PLAN_AUTO);
  r.iqp_top_bits = 3;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_CAPACITY);
  ck_assert_int_eq(p->feasible, 1);
  ck_assert_uint_eq(p->global_bits, 0);
  const uint64_t blocks[6] = {2, 2, 1, 1, 1, 1};
  for (size_t i = 0; i < 6; i++) {
    ck_assert_uint_eq(p->shards[i].count, blocks[i] << 29);
  }
  plan_destroy(p);
  r.iqp_top_bits = 0;
  p = compute_ok(&r, &wb.w);
  ck_assert_int_eq(p->policy, PLAN_EVEN);
  ck_assert_int_eq(p->feasible, 0);
  plan_destroy(p);
}
END_TEST

/* ---- random sweep ---------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) { /* splitmix64: fixed seed, so failures reproduce */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Whether p's shards are 2^g > 1 equal ranges of the index in order (an independent formula for
 * the layout global_bits describes). */
static int equal_pow2_ranges(const struct plan *p) {
  const uint64_t k = p->nshards;
  if (k < 2 || (k & (k - 1)) != 0) {
    return 0;
  }
  for (size_t i = 0; i < k; i++) {
    if (p->shards[i].count != p->amplitudes / k || p->shards[i].first != i * (p->amplitudes / k)) {
      return 0;
    }
  }
  return 1;
}

START_TEST(test_random_plans_tile_the_state_exactly) {
  const qdp_encoding encs[4] = {QDP_ENCODING_AMPLITUDE, QDP_ENCODING_ANGLE, QDP_ENCODING_IQP,
                                QDP_ENCODING_BASIS};
  size_t checked = 0;
  for (int iter = 0; iter < 4000; iter++) {
    struct world_buf wb;
    const size_t d = 1 + rnd() % 12;
    uint64_t b[12];
    for (size_t i = 0; i < d; i++) {
      switch (rnd() % 4) {
      case 0:
        b[i] = 0;
        break;
      case 1:
        b[i] = rnd() % 4096;
        break;
      case 2:
        b[i] = rnd() % (64 * GIB);
        break;
      default:
        b[i] = rnd() >> (rnd() % 20);
        break;
      }
    }
    world1(&wb, "cuda", d, b);
    const qdp_encoding enc = encs[rnd() % 4];
    const uint32_t qubits = 1 + (uint32_t)(rnd() % 50);
    struct plan_request r = req_for(enc, qubits, (enum plan_policy)(rnd() % 6));
    if (enc == QDP_ENCODING_AMPLITUDE) {
      r.values_per_sample = 1 + rnd() % (1ull << qubits);
    }
    r.out_dtype = rnd() % 2 ? QDP_DTYPE_COMPLEX64 : QDP_DTYPE_COMPLEX128;
    r.batch = rnd() % 3 == 0 ? 1 + rnd() % 20 : 1;
    if (qubits > 40) {
      r.batch = 1; /* keep batch * 2^n * 16 within 64 bits */
    }
    r.staging_bytes = rnd() % 2 ? 0 : rnd() % GIB;
    const uint64_t n_amp = 1ull << qubits;
    const int sharded =
        r.policy == PLAN_EVEN || r.policy == PLAN_UNEVEN || r.policy == PLAN_CAPACITY;
    const int bad_request =
        sharded && (r.batch > 1 || d > n_amp || (r.policy == PLAN_EVEN && (d & (d - 1)) != 0));
    /* iqp splits a sample only into 2^g equal ranges: what the same placement of angle gives
     * (placement does not depend on the encoding) says whether it can. */
    int unequal = 0;
    if (!bad_request && enc == QDP_ENCODING_IQP && d > 1 &&
        (r.policy == PLAN_UNEVEN || r.policy == PLAN_CAPACITY)) {
      struct plan_request ra = r;
      ra.encoding = QDP_ENCODING_ANGLE;
      ra.values_per_sample = qubits;
      struct plan *pa = compute_ok(&ra, &wb.w);
      unequal = !equal_pow2_ranges(pa);
      plan_destroy(pa);
    }
    const int refuse = bad_request || unequal;
    struct plan *p = NULL;
    struct qdp_error e = QDP_ERROR_INIT;
    qdp_status rc = plan_compute(&r, &wb.w, NULL, &p, &e);
    if (refuse) {
      ck_assert_msg(rc == QDP_ERR_INVALID_ARGUMENT, "iter %d: want a refusal, got %s", iter,
                    qdp_status_name(rc));
      continue;
    }
    CK_OK_AT(rc, e, "iter %d: plan_compute", iter);
    assert_tiles(p, &wb.w);
    int all_fit = 1;
    for (size_t i = 0; i < p->nneeds; i++) {
      const struct plan_need *n = &p->needs[i];
      u128 sum = (u128)n->shard_bytes + n->staging_bytes + n->workspace_bytes;
      ck_assert(sum > UINT64_MAX ? n->need_bytes == UINT64_MAX : n->need_bytes == (uint64_t)sum);
      ck_assert_uint_eq(n->staging_bytes, r.staging_bytes);
      ck_assert_int_eq(n->fits, sum <= n->budget_bytes);
      all_fit &= n->fits;
    }
    ck_assert_int_eq(p->feasible, all_fit);
    ck_assert_int_eq(plan_check_feasible(p, NULL), all_fit ? QDP_OK : QDP_ERR_RESOURCE_EXHAUSTED);
    ck_assert_uint_eq(p->global_bits,
                      equal_pow2_ranges(p) ? (uint32_t)__builtin_ctzll(p->nshards) : 0);
    switch (p->policy) {
    case PLAN_EVEN:
      ck_assert_uint_eq((uint64_t)1 << p->global_bits, p->nshards);
      for (size_t i = 0; i < p->nshards; i++) {
        ck_assert_uint_eq(p->shards[i].count, n_amp >> p->global_bits);
      }
      break;
    case PLAN_UNEVEN:
      ck_assert_uint_eq(p->nshards, d);
      for (size_t i = 0; i < p->nshards; i++) {
        ck_assert_uint_eq(p->shards[i].count, n_amp / d + (i < n_amp % d));
      }
      break;
    case PLAN_BATCH: {
      const uint64_t k = r.batch < d ? r.batch : d;
      ck_assert_uint_eq(p->nshards, k);
      for (size_t i = 0; i < p->nshards; i++) {
        ck_assert_uint_eq(p->shards[i].rows, r.batch / k + (i < r.batch % k));
        ck_assert_uint_eq(p->shards[i].count, n_amp);
      }
      break;
    }
    case PLAN_CAPACITY: {
      /* Against quotas N * w_i / W in long double; where every quota is at least 1, largest
       * remainder keeps each count within one of it. */
      long double wsum = 0, q[12];
      int min_ok = 1;
      for (size_t i = 0; i < p->nshards; i++) {
        uint64_t bb = p->needs[i].budget_bytes;
        q[i] = bb > r.staging_bytes ? (long double)(bb - r.staging_bytes) : 0;
        wsum += q[i];
      }
      for (size_t i = 0; i < p->nshards; i++) {
        q[i] = wsum > 0 ? q[i] * (long double)n_amp / wsum : (long double)n_amp / p->nshards;
        min_ok &= q[i] >= 1;
      }
      for (size_t i = 0; min_ok && i < p->nshards; i++) {
        ck_assert_msg(fabsl((long double)p->shards[i].count - q[i]) < 1.0001L,
                      "iter %d: capacity shard %zu holds %llu, quota %Lf", iter, i,
                      (unsigned long long)p->shards[i].count, q[i]);
      }
      break;
    }
    case PLAN_SINGLE: {
      ck_assert_uint_eq(p->nshards, 1);
      for (size_t i = 0; i < d; i++) {
        ck_assert_uint_le(b[i], p->needs[0].budget_bytes);
      }
      break;
    }
    default:
      ck_abort_msg("iter %d: unresolved policy %d", iter, p->policy);
    }
    checked++;
    plan_destroy(p);
  }
  ck_assert_uint_gt(checked, 2000);
}
END_TEST

void plan_add_ranks(TCase *tc) {
  tcase_add_test(tc, test_three_ranks_with_different_meshes_each_get_their_shards);
}

void plan_add_auto(TCase *tc) {
  tcase_add_test(tc, test_auto_picks_single_even_capacity_or_batch);
  tcase_add_test(tc, test_auto_iqp_uses_even_over_the_largest_power_of_two_set);
}

void plan_add_invariants(TCase *tc) {
  tcase_add_test(tc, test_random_plans_tile_the_state_exactly);
}
