/* test_state_store_concurrency.c — the store at scale and under threads (daemon/state/store.c):
 * lookups among ten thousand states cost about what they cost among a hundred, concurrent admit,
 * commit and release keep the totals, and concurrent admission never exceeds the budget. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "state/store.h"
#include "state_store_fixture.h"

/* ---- scale and concurrency ------------------------------------------------------------------- */

/* Seconds for `lookups` get/put pairs cycling over the n states of a fresh store. */
static double lookup_seconds(int n, int lookups) {
  struct state_store *s = make_store(0, 0, 0, 0);
  char(*h)[STATE_HANDLE_LEN] = calloc((size_t)n, STATE_HANDLE_LEN);
  char(*t)[STATE_TOKEN_LEN] = calloc((size_t)n, STATE_TOKEN_LEN);
  for (int i = 0; i < n; i++) {
    add_state(s, "a", 1, 0, h[i], t[i]);
  }
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int k = 0; k < lookups; k++) {
    void *p;
    int i = (int)(((unsigned)k * 7919u) % (unsigned)n);
    ck_assert_int_eq(state_store_get(s, h[i], t[i], &p, NULL, NULL), QDP_OK);
    state_store_put(s, p);
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  for (int i = 0; i < n; i += 2) {
    ck_assert_int_eq(state_store_release(s, h[i], t[i], NULL, NULL), QDP_OK);
  }
  ck_assert_uint_eq(usage_states(s), (uint32_t)(n / 2));
  free(h);
  free(t);
  state_store_destroy(s);
  ck_assert_int_eq(atomic_load(&destroy_calls), n);
  return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
}

START_TEST(test_ten_thousand_states_stay_fast) {
  /* The same number of lookups among 100 and among 10000 states: a hash table costs about the
   * same per lookup, a list scan 100 times more. The ratio, unlike a wall-clock bound, holds
   * under valgrind and on a loaded machine. */
  enum { LOOKUPS = 200000 };
  double small = lookup_seconds(100, LOOKUPS);
  double large = lookup_seconds(10000, LOOKUPS);
  ck_assert_double_lt(large, 8.0 * small + 0.05);
}
END_TEST

enum { THREADS = 8, ROUNDS = 2000 };

struct worker {
  struct state_store *s;
  int id;
  int kept; /* states this worker left committed */
  uint64_t kept_bytes;
  int refused;
};

static void *worker_main(void *arg) {
  struct worker *w = arg;
  char owner[16];
  snprintf(owner, sizeof owner, "w%d", w->id % 3);
  unsigned seed = (unsigned)w->id * 2654435761u;
  for (int i = 0; i < ROUNDS; i++) {
    seed = seed * 1103515245u + 12345u;
    uint64_t bytes = 1 + (seed >> 16) % 1000;
    struct state_reservation *r = NULL;
    if (state_store_admit(w->s, owner, bytes, &r, NULL) != QDP_OK) {
      w->refused++;
      continue;
    }
    char h[STATE_HANDLE_LEN], t[STATE_TOKEN_LEN];
    switch (i % 4) {
    case 0:
      state_reservation_cancel(r);
      break;
    case 1:
    case 2: {
      void *p = malloc(8);
      if (state_store_commit(w->s, r, p, payload_free, 0, "c", h, t, NULL) != QDP_OK) {
        free(p);
        break;
      }
      void *g = NULL;
      if (state_store_get(w->s, h, t, &g, NULL, NULL) == QDP_OK) {
        if (i % 4 == 1) {
          /* Release while pinned: destroy happens at the put below. */
          state_store_release(w->s, h, t, NULL, NULL);
        }
        state_store_put(w->s, g);
      }
      if (i % 4 == 2) {
        state_store_release(w->s, h, t, NULL, NULL);
      }
      break;
    }
    default: {
      void *p = malloc(8);
      if (state_store_commit(w->s, r, p, payload_free, 0, "k", h, t, NULL) == QDP_OK) {
        w->kept++;
        w->kept_bytes += bytes;
      } else {
        free(p);
      }
      break;
    }
    }
  }
  return NULL;
}

START_TEST(test_concurrent_admit_commit_release_keeps_totals) {
  struct state_store *s = make_store(0, 0, 0, 0);
  pthread_t th[THREADS];
  struct worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (struct worker){.s = s, .id = i};
    ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  int kept = 0;
  uint64_t kept_bytes = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    kept += w[i].kept;
    kept_bytes += w[i].kept_bytes;
    ck_assert_int_eq(w[i].refused, 0);
  }
  ck_assert_int_eq(kept, THREADS * ROUNDS / 4);
  ck_assert_uint_eq(usage_states(s), (uint32_t)kept);
  ck_assert_uint_eq(usage_bytes(s), kept_bytes);
  /* Every released state (cases 1 and 2) was destroyed exactly once. */
  ck_assert_int_eq(atomic_load(&destroy_calls), THREADS * ROUNDS / 2);
  struct tally tl = {0};
  state_store_foreach(s, count_fn, &tl);
  ck_assert_int_eq(tl.count, kept);
  ck_assert_uint_eq(tl.bytes, kept_bytes);
  state_store_destroy(s);
  ck_assert_int_eq(atomic_load(&destroy_calls), THREADS * ROUNDS / 2 + kept);
}
END_TEST

struct holder {
  struct state_store *s;
  int got;
  struct state_reservation *res[100];
};

static void *holder_main(void *arg) {
  struct holder *hd = arg;
  for (int i = 0; i < 100; i++) {
    if (state_store_admit(hd->s, "shared", 10, &hd->res[hd->got], NULL) == QDP_OK) {
      hd->got++;
    }
  }
  return NULL;
}

START_TEST(test_concurrent_admission_never_exceeds_budget) {
  /* 8 threads each try to hold 100 reservations of 10 B against a 2000 B budget: exactly 200
   * fit, whatever the interleaving. */
  struct state_store *s = make_store(2000, 0, 0, 0);
  pthread_t th[THREADS];
  struct holder *hd = calloc(THREADS, sizeof *hd);
  for (int i = 0; i < THREADS; i++) {
    hd[i].s = s;
    ck_assert_int_eq(pthread_create(&th[i], NULL, holder_main, &hd[i]), 0);
  }
  int got = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    got += hd[i].got;
  }
  ck_assert_int_eq(got, 200);
  ck_assert_uint_eq(usage_bytes(s), 2000);
  for (int i = 0; i < THREADS; i++) {
    for (int k = 0; k < hd[i].got; k++) {
      state_reservation_cancel(hd[i].res[k]);
    }
  }
  ck_assert_uint_eq(usage_bytes(s), 0);
  free(hd);
  state_store_destroy(s);
}
END_TEST

void state_store_add_concurrency(TCase *tc) {
  tcase_add_test(tc, test_ten_thousand_states_stay_fast);
  tcase_add_test(tc, test_concurrent_admit_commit_release_keeps_totals);
  tcase_add_test(tc, test_concurrent_admission_never_exceeds_budget);
}
