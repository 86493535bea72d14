/* The MPI transport under mpirun: one Check program that every rank runs, the tests in the same
 * order on every rank (Check runs them in the order added), so the collectives inside match.
 * Check must not fork once MPI is initialized (CK_NOFORK). Only rank 0 prints Check's summary;
 * the other ranks print their failures, and every rank exits non-zero when any rank failed.
 *
 * Usage: mpirun -n N test_transport_mpi N   (N, the size mpirun was asked for, is checked).
 * With QDP_TEST_EXPECT_DISTINCT_HOSTS=1 (rank 0's environment decides for all) every rank must
 * report a different host name: the runs across hosts (tests/mpi/two_hosts.sh) set it.
 */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "common.h"
#include "transport.h"

static struct transport *t;
static int expected_size;

/* CK_OK on behalf of this rank: a failure names it. */
#define CK_RANK_OK(expr, err) CK_OK_AT(expr, err, "rank %d", transport_rank(t))

/* A byte that depends on who wrote it and where, so a block in the wrong place or a piece
 * written twice shows. */
static unsigned char pattern(int who, size_t i) {
  uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)(who + 1) * 0xD1B54A32D192ED03ull;
  return (unsigned char)(x >> 56);
}

static void fill(unsigned char *p, size_t n, int who) {
  for (size_t i = 0; i < n; i++) {
    p[i] = pattern(who, i);
  }
}

/* The first index where p differs from who's pattern, or n. */
static size_t first_bad(const unsigned char *p, size_t n, int who) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] != pattern(who, i)) {
      return i;
    }
  }
  return n;
}

static void set_chunk(size_t bytes) {
  struct qdp_error e = QDP_ERROR_INIT;
  CK_RANK_OK(transport_set_chunk_bytes(t, bytes, &e), e);
}

/* Every test ends with the default piece size, whatever it changed. */
static void restore_chunk(void) {
  transport_set_chunk_bytes(t, TRANSPORT_CHUNK_DEFAULT, NULL);
}

/* ---- the world ---- */

START_TEST(test_world_has_the_ranks_mpirun_started) {
  struct qdp_error e = QDP_ERROR_INIT;
  int rank = transport_rank(t), size = transport_size(t);
  ck_assert_int_eq(size, expected_size);
  ck_assert_int_eq(transport_kind(t), TRANSPORT_MPI);
  ck_assert_str_eq(transport_kind_name(t), "mpi");
  /* Open MPI on one host grants MPI_THREAD_MULTIPLE. */
  ck_assert_str_eq(transport_threads_name(transport_threads(t)), "multiple");
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  ck_assert_int_eq(rank, world_rank);
  int32_t mine = rank, all[64];
  ck_assert_int_le(size, 64);
  CK_RANK_OK(transport_allgather(t, &mine, sizeof mine, all, &e), e);
  for (int r = 0; r < size; r++) {
    ck_assert_int_eq(all[r], r);
  }
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  ck_assert_str_eq(transport_host(t), host);
  CK_RANK_OK(transport_barrier(t, &e), e);
}
END_TEST

START_TEST(test_ranks_on_different_hosts_report_different_host_names) {
  struct qdp_error e = QDP_ERROR_INIT;
  int size = transport_size(t);
  /* Rank 0 decides, so every rank takes the same path through the collectives. */
  int32_t expect = 0;
  if (transport_rank(t) == 0) {
    const char *v = getenv("QDP_TEST_EXPECT_DISTINCT_HOSTS");
    expect = v != NULL && strcmp(v, "1") == 0;
  }
  CK_RANK_OK(transport_bcast(t, &expect, sizeof expect, 0, &e), e);
  if (!expect) {
    return;
  }
  enum { HOST_BYTES = 256 };
  char mine[HOST_BYTES] = {0};
  char *all = calloc((size_t)size, HOST_BYTES);
  ck_assert_ptr_nonnull(all);
  ck_assert_uint_lt(strlen(transport_host(t)), HOST_BYTES);
  snprintf(mine, sizeof mine, "%s", transport_host(t));
  CK_RANK_OK(transport_allgather(t, mine, HOST_BYTES, all, &e), e);
  ck_assert_str_eq(all + (size_t)transport_rank(t) * HOST_BYTES, transport_host(t));
  for (int a = 0; a < size; a++) {
    const char *ha = all + (size_t)a * HOST_BYTES;
    ck_assert_msg(ha[0] != '\0', "rank %d reports an empty host name", a);
    for (int b = a + 1; b < size; b++) {
      const char *hb = all + (size_t)b * HOST_BYTES;
      ck_assert_msg(strcmp(ha, hb) != 0, "ranks %d and %d both report host '%s'", a, b, ha);
    }
  }
  free(all);
}
END_TEST

START_TEST(test_second_transport_joins_the_initialized_world_without_finalizing) {
  struct qdp_error e = QDP_ERROR_INIT;
  struct transport *u = NULL;
  CK_RANK_OK(transport_mpi_create(NULL, NULL, &u, &e), e);
  ck_assert_int_eq(transport_rank(u), transport_rank(t));
  ck_assert_int_eq(transport_size(u), transport_size(t));
  /* Messages on one communicator never match receives on the other. */
  uint64_t a = 5 + (uint64_t)transport_rank(t), b = 0;
  CK_RANK_OK(transport_allreduce_u64(u, &a, 1, TRANSPORT_SUM, &b, &e), e);
  transport_destroy(u);
  int finalized = 1;
  MPI_Finalized(&finalized);
  ck_assert_int_eq(finalized, 0);
  uint64_t n = (uint64_t)transport_size(t);
  ck_assert_uint_eq(b, 5 * n + n * (n - 1) / 2);
  CK_RANK_OK(transport_barrier(t, &e), e);
}
END_TEST

/* ---- broadcast ---- */

static void bcast_from_every_root(size_t bytes) {
  struct qdp_error e = QDP_ERROR_INIT;
  unsigned char *buf = malloc(bytes);
  ck_assert_ptr_nonnull(buf);
  for (int root = 0; root < transport_size(t); root++) {
    if (transport_rank(t) == root) {
      fill(buf, bytes, root);
    } else {
      memset(buf, 0, bytes);
    }
    CK_RANK_OK(transport_bcast(t, buf, bytes, root, &e), e);
    ck_assert_uint_eq(first_bad(buf, bytes, root), bytes);
  }
  free(buf);
}

START_TEST(test_bcast_from_every_root_reaches_every_rank) {
  bcast_from_every_root(((size_t)1 << 20) + 3);
}
END_TEST

START_TEST(test_bcast_in_small_pieces_reassembles_the_message) {
  /* 4093 is prime, so no piece boundary falls on a power of two. */
  set_chunk(4093);
  bcast_from_every_root(((size_t)1 << 20) + 3);
  restore_chunk();
}
END_TEST

START_TEST(test_bcast_bytes_of_nothing_gives_an_empty_valid_buffer) {
  struct qdp_error e = QDP_ERROR_INIT;
  int root = transport_size(t) - 1;
  void *buf = NULL;
  size_t bytes = transport_rank(t) == root ? 0 : 99;
  CK_RANK_OK(transport_bcast_bytes(t, &buf, &bytes, root, &e), e);
  ck_assert_uint_eq(bytes, 0);
  if (transport_rank(t) == root) {
    ck_assert_ptr_null(buf);
  } else {
    ck_assert_ptr_nonnull(buf);
    free(buf);
  }
}
END_TEST

static void bcast_bytes_of_mib(size_t bytes, int root) {
  struct qdp_error e = QDP_ERROR_INIT;
  unsigned char *src = NULL;
  void *buf = NULL;
  size_t got = 0;
  if (transport_rank(t) == root) {
    src = malloc(bytes);
    ck_assert_ptr_nonnull(src);
    fill(src, bytes, root);
    buf = src;
    got = bytes;
  }
  CK_RANK_OK(transport_bcast_bytes(t, &buf, &got, root, &e), e);
  ck_assert_uint_eq(got, bytes);
  ck_assert_uint_eq(first_bad(buf, got, root), bytes);
  if (transport_rank(t) == root) {
    ck_assert_ptr_eq(buf, src);
  }
  free(buf);
}

START_TEST(test_bcast_bytes_of_several_mib_arrives_whole) {
  bcast_bytes_of_mib((size_t)5 * 1024 * 1024 + 7, 1);
  bcast_bytes_of_mib((size_t)3 * 1024 * 1024 + 1, 0);
}
END_TEST

START_TEST(test_bcast_bytes_in_small_pieces_arrives_whole) {
  set_chunk(65521);
  bcast_bytes_of_mib((size_t)5 * 1024 * 1024 + 7, transport_size(t) - 1);
  restore_chunk();
}
END_TEST

/* ---- all-gather ---- */

static void allgather_blocks(size_t bytes) {
  struct qdp_error e = QDP_ERROR_INIT;
  int size = transport_size(t);
  unsigned char *mine = malloc(bytes), *all = malloc(bytes * (size_t)size);
  ck_assert_ptr_nonnull(mine);
  ck_assert_ptr_nonnull(all);
  fill(mine, bytes, transport_rank(t));
  memset(all, 0, bytes * (size_t)size);
  CK_RANK_OK(transport_allgather(t, mine, bytes, all, &e), e);
  for (int r = 0; r < size; r++) {
    ck_assert_uint_eq(first_bad(all + (size_t)r * bytes, bytes, r), bytes);
  }
  free(mine);
  free(all);
}

START_TEST(test_allgather_puts_each_rank_block_in_rank_order) {
  allgather_blocks(12345);
}
END_TEST

START_TEST(test_allgather_in_pieces_puts_each_piece_in_place) {
  /* 12345 B in 1000 B pieces: 13 calls with a resized receive type, the last of 345 B. */
  set_chunk(1000);
  allgather_blocks(12345);
  set_chunk(1);
  allgather_blocks(17);
  restore_chunk();
}
END_TEST

START_TEST(test_allgather_f64_keeps_every_bit_of_every_partial) {
  struct qdp_error e = QDP_ERROR_INIT;
  int size = transport_size(t), rank = transport_rank(t);
  /* Partials an MPI reduction could round differently: the caller gets them bit for bit. */
  double mine[3] = {1.0 / (rank + 3), -0.0, 4.9406564584124654e-324 * (rank + 1)};
  double all[3 * 64];
  CK_RANK_OK(transport_allgather_f64(t, mine, 3, all, &e), e);
  for (int r = 0; r < size; r++) {
    double want[3] = {1.0 / (r + 3), -0.0, 4.9406564584124654e-324 * (r + 1)};
    ck_assert_mem_eq(all + 3 * r, want, sizeof want);
  }
}
END_TEST

static void allgatherv_sizes(void) {
  struct qdp_error e = QDP_ERROR_INIT;
  struct transport_gathered g;
  int size = transport_size(t), rank = transport_rank(t);
  /* Rank 0 gives nothing; the others give different, odd sizes. */
  size_t bytes = rank == 0 ? 0 : (size_t)rank * rank * 100003 + 17;
  unsigned char *mine = bytes ? malloc(bytes) : NULL;
  if (bytes) {
    ck_assert_ptr_nonnull(mine);
    fill(mine, bytes, rank);
  }
  CK_RANK_OK(transport_allgatherv(t, mine, bytes, &g, &e), e);
  ck_assert_int_eq(g.count, size);
  size_t off = 0;
  for (int r = 0; r < size; r++) {
    size_t len = r == 0 ? 0 : (size_t)r * r * 100003 + 17;
    ck_assert_uint_eq(g.lengths[r], len);
    ck_assert_uint_eq(g.offsets[r], off);
    ck_assert_uint_eq(first_bad(g.data + off, len, r), len);
    off += len;
  }
  ck_assert_uint_eq(g.total, off);
  transport_gathered_fini(&g);
  free(mine);
}

START_TEST(test_allgatherv_with_a_different_size_per_rank) {
  allgatherv_sizes();
}
END_TEST

START_TEST(test_allgatherv_larger_than_one_call_broadcasts_each_blob) {
  /* A piece below the total takes the path used past INT_MAX: one chunked broadcast per rank. */
  set_chunk(9973);
  allgatherv_sizes();
  restore_chunk();
}
END_TEST

/* ---- integer reduction ---- */

START_TEST(test_allreduce_u64_sums_and_picks_exactly) {
  struct qdp_error e = QDP_ERROR_INIT;
  int rank = transport_rank(t);
  uint64_t n = (uint64_t)transport_size(t);
  /* Values above 2^53, where a reduction through doubles would lose the low bits. */
  uint64_t mine[3] = {((uint64_t)1 << 60) + (uint64_t)rank, 1000 - (uint64_t)rank,
                      (uint64_t)rank * 3 + 1};
  uint64_t sum[3], lo[3], hi[3];
  CK_RANK_OK(transport_allreduce_u64(t, mine, 3, TRANSPORT_SUM, sum, &e), e);
  CK_RANK_OK(transport_allreduce_u64(t, mine, 3, TRANSPORT_MIN, lo, &e), e);
  /* In place and in 8-byte pieces: one MPI call per element. */
  set_chunk(8);
  memcpy(hi, mine, sizeof hi);
  CK_RANK_OK(transport_allreduce_u64(t, hi, 3, TRANSPORT_MAX, hi, &e), e);
  restore_chunk();
  ck_assert_uint_eq(sum[0], n * ((uint64_t)1 << 60) + n * (n - 1) / 2);
  ck_assert_uint_eq(sum[1], 1000 * n - n * (n - 1) / 2);
  ck_assert_uint_eq(sum[2], 3 * n * (n - 1) / 2 + n);
  ck_assert_uint_eq(lo[0], (uint64_t)1 << 60);
  ck_assert_uint_eq(lo[1], 1000 - (n - 1));
  ck_assert_uint_eq(hi[0], ((uint64_t)1 << 60) + n - 1);
  ck_assert_uint_eq(hi[1], 1000);
  ck_assert_uint_eq(hi[2], 3 * (n - 1) + 1);
}
END_TEST

/* ---- agree ---- */

START_TEST(test_agree_when_all_pass_is_ok) {
  struct qdp_error e = QDP_ERROR_INIT;
  CK_RANK_OK(transport_agree(t, QDP_OK, NULL, &e), e);
  CK_RANK_OK(e.code, e);
}
END_TEST

START_TEST(test_agree_gives_every_rank_the_first_failing_rank_message) {
  struct qdp_error mine = QDP_ERROR_INIT, e = QDP_ERROR_INIT;
  int rank = transport_rank(t);
  qdp_status st = QDP_OK;
  /* Rank 1 runs out of device memory; in a world of 3, rank 2 fails too, later in rank order. */
  if (rank == 1) {
    st = qdp_error_set_at(&mine, QDP_ERR_RESOURCE_EXHAUSTED, 1, 2,
                          "cuda:1 needs 36507222016 B but its budget is 30923764531 B");
    snprintf(mine.field, sizeof mine.field, "qubits");
    mine.need_bytes = 36507222016ull;
    mine.free_bytes = 30923764531ull;
  } else if (rank == 2) {
    st = qdp_error_set(&mine, QDP_ERR_INVALID_ARGUMENT, "input", "rank 2's slice is short");
  }
  CK_STATUS(transport_agree(t, st, &mine, &e), QDP_ERR_RESOURCE_EXHAUSTED, e);
  CK_STATUS(e.code, QDP_ERR_RESOURCE_EXHAUSTED, e);
  ck_assert_int_eq(e.rank, 1);
  ck_assert_int_eq(e.device, 1);
  ck_assert_int_eq(e.cause, 2);
  ck_assert_uint_eq(e.need_bytes, 36507222016ull);
  ck_assert_uint_eq(e.free_bytes, 30923764531ull);
  ck_assert_str_eq(e.field, "qubits");
  ck_assert_str_eq(e.msg, "rank 1: cuda:1 needs 36507222016 B but its budget is 30923764531 B");
}
END_TEST

START_TEST(test_agree_when_only_the_last_rank_fails) {
  struct qdp_error e = QDP_ERROR_INIT;
  int last = transport_size(t) - 1;
  qdp_status st = transport_rank(t) == last ? QDP_ERR_NOT_FOUND : QDP_OK;
  /* No detail given: the status name travels instead. */
  CK_STATUS(transport_agree(t, st, NULL, &e), QDP_ERR_NOT_FOUND, e);
  ck_assert_int_eq(e.rank, last);
  char want[64];
  snprintf(want, sizeof want, "rank %d: failed with QDP_ERR_NOT_FOUND", last);
  ck_assert_msg(strncmp(e.msg, want, strlen(want)) == 0, "got '%s', want '%s...'", e.msg, want);
}
END_TEST

/* ---- point to point ---- */

/* Every ordered pair (a, b), one after the other on every rank, so a rendezvous send always has
 * its receive coming and the schedule cannot deadlock. */
static void send_recv_every_pair(size_t base) {
  struct qdp_error e = QDP_ERROR_INIT;
  int size = transport_size(t), rank = transport_rank(t);
  for (int a = 0; a < size; a++) {
    for (int b = 0; b < size; b++) {
      if (a == b || (rank != a && rank != b)) {
        continue;
      }
      size_t bytes = base + (size_t)a * 7 + (size_t)b;
      int tag = a * 16 + b;
      unsigned char *buf = malloc(bytes);
      ck_assert_ptr_nonnull(buf);
      if (rank == a) {
        fill(buf, bytes, a * 100 + b);
        CK_RANK_OK(transport_send(t, buf, bytes, b, tag, &e), e);
        CK_RANK_OK(transport_send(t, NULL, 0, b, tag, &e), e); /* an empty message is one too */
      } else {
        memset(buf, 0, bytes);
        CK_RANK_OK(transport_recv(t, buf, bytes, a, tag, &e), e);
        ck_assert_uint_eq(first_bad(buf, bytes, a * 100 + b), bytes);
        CK_RANK_OK(transport_recv(t, NULL, 0, a, tag, &e), e);
      }
      free(buf);
    }
  }
}

START_TEST(test_send_recv_between_every_pair) {
  send_recv_every_pair(300001);
}
END_TEST

START_TEST(test_send_recv_in_small_pieces_between_every_pair) {
  set_chunk(4096);
  send_recv_every_pair(300001);
  restore_chunk();
}
END_TEST

START_TEST(test_recv_of_a_shorter_message_names_both_sizes) {
  struct qdp_error e = QDP_ERROR_INIT;
  unsigned char buf[120] = {0};
  if (transport_rank(t) == 0) {
    CK_RANK_OK(transport_send(t, buf, 100, 1, 7, &e), e);
  } else if (transport_rank(t) == 1) {
    CK_STATUS(transport_recv(t, buf, 120, 0, 7, &e), QDP_ERR_INVALID_ARGUMENT, e);
    ck_assert_int_eq(e.rank, 1);
    ck_assert_ptr_nonnull(strstr(e.msg, "had 100 B where 120 B were due"));
  }
  CK_RANK_OK(transport_barrier(t, &e), e);
}
END_TEST

START_TEST(test_recv_of_a_longer_message_is_an_mpi_truncate_error) {
  struct qdp_error e = QDP_ERROR_INIT;
  unsigned char buf[200] = {0};
  if (transport_rank(t) == 0) {
    CK_RANK_OK(transport_send(t, buf, 200, 1, 8, &e), e);
  } else if (transport_rank(t) == 1) {
    CK_STATUS(transport_recv(t, buf, 120, 0, 8, &e), QDP_ERR_MPI, e);
    ck_assert_int_eq(e.cause, MPI_ERR_TRUNCATE);
    ck_assert_int_eq(e.rank, 1);
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(MPI_ERR_TRUNCATE, text, &len);
    ck_assert_msg(strstr(e.msg, text) != NULL, "'%s' lacks MPI's text '%s'", e.msg, text);
    ck_assert_ptr_nonnull(strstr(e.msg, "longer than expected"));
  }
  /* The communicator survives an error (MPI_ERRORS_RETURN): the world goes on. */
  CK_RANK_OK(transport_barrier(t, &e), e);
}
END_TEST

START_TEST(test_invalid_peers_tags_and_roots_are_refused_locally) {
  struct qdp_error e = QDP_ERROR_INIT;
  int rank = transport_rank(t), size = transport_size(t);
  char c = 0;
  CK_STATUS(transport_send(t, &c, 1, rank, 0, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "peer");
  CK_STATUS(transport_send(t, &c, 1, size, 0, &e), QDP_ERR_INVALID_ARGUMENT, e);
  CK_STATUS(transport_recv(t, &c, 1, (rank + 1) % size, TRANSPORT_TAG_MAX + 1, &e),
            QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "tag");
  CK_STATUS(transport_recv(t, &c, 1, (rank + 1) % size, -1, &e), QDP_ERR_INVALID_ARGUMENT, e);
  CK_STATUS(transport_bcast(t, &c, 1, size, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "root");
}
END_TEST

/* ---- a message over 2 GiB ---- */

static uint64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  uint64_t kib = 0;
  if (!f) {
    return 0;
  }
  while (fgets(line, sizeof line, f)) {
    unsigned long long v;
    if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  fclose(f);
  return kib * 1024;
}

START_TEST(test_send_recv_past_int_max_bytes) {
  struct qdp_error e = QDP_ERROR_INIT;
  int last = transport_size(t) - 1, rank = transport_rank(t);
  /* Over 2 GiB when the machine can hold the two buffers twice over (sender, receiver, and the
   * shared-memory transport's own copies); otherwise 2^28 B, with the chunking still exercised by
   * a piece size below it (the arithmetic past INT_MAX is unit-tested in tests/unit). */
  uint64_t bytes = 0;
  if (rank == 0) {
    bytes = mem_available() >= ((uint64_t)10 << 30) ? ((uint64_t)1 << 31) + 4099
                                                    : ((uint64_t)1 << 28) + 4099;
    printf("transport_mpi: %d ranks, point-to-point message of %llu B\n", transport_size(t),
           (unsigned long long)bytes);
    fflush(stdout);
  }
  CK_RANK_OK(transport_bcast(t, &bytes, sizeof bytes, 0, &e), e);
  if (bytes < ((uint64_t)1 << 31)) {
    set_chunk((size_t)1 << 26);
  }
  if (rank == 0 || rank == last) {
    unsigned char *buf = malloc(bytes);
    ck_assert_ptr_nonnull(buf);
    /* 64-bit words of their index: cheap to write and to check over 2 GiB. */
    uint64_t words = bytes / 8;
    if (rank == 0) {
      for (uint64_t i = 0; i < words; i++) {
        memcpy(buf + i * 8, &i, 8);
      }
      memset(buf + words * 8, 0x5a, bytes - words * 8);
      CK_RANK_OK(transport_send(t, buf, bytes, last, 99, &e), e);
    } else {
      memset(buf, 0, bytes);
      CK_RANK_OK(transport_recv(t, buf, bytes, 0, 99, &e), e);
      uint64_t bad = words;
      for (uint64_t i = 0; i < words; i++) {
        uint64_t v;
        memcpy(&v, buf + i * 8, 8);
        if (v != i) {
          bad = i;
          break;
        }
      }
      ck_assert_uint_eq(bad, words);
      for (uint64_t i = words * 8; i < bytes; i++) {
        ck_assert_uint_eq(buf[i], 0x5a);
      }
    }
    free(buf);
  }
  restore_chunk();
  CK_RANK_OK(transport_barrier(t, &e), e);
}
END_TEST

/* ---- bounded point to point ---- */

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

START_TEST(test_io_within_exchanges_with_every_peer_at_once) {
  /* Every rank sends to and receives from every other rank in one call, in pieces, large enough
   * for the rendezvous protocol: sends and receives are posted together, so nobody waits. */
  struct qdp_error e = QDP_ERROR_INIT;
  int rank = transport_rank(t), size = transport_size(t);
  size_t bytes = 3 * 65536 + 17;
  set_chunk(65536);
  unsigned char *out = malloc(bytes), *in = malloc((size_t)size * bytes);
  struct transport_io *items = calloc(2 * (size_t)size, sizeof *items);
  ck_assert_ptr_nonnull(out);
  ck_assert_ptr_nonnull(in);
  ck_assert_ptr_nonnull(items);
  fill(out, bytes, rank);
  size_t k = 0;
  for (int p = 0; p < size; p++) {
    if (p == rank) {
      continue;
    }
    items[k++] = (struct transport_io){.buf = out, .bytes = bytes, .peer = p, .tag = 11, .send = 1};
    items[k++] =
        (struct transport_io){.buf = in + (size_t)p * bytes, .bytes = bytes, .peer = p, .tag = 11};
  }
  int pinned = -1;
  CK_RANK_OK(transport_io_within(t, items, k, 10000, &pinned, &e), e);
  ck_assert_int_eq(pinned, 0);
  for (size_t i = 0; i < k; i++) {
    ck_assert_int_eq(items[i].done, 1);
  }
  for (int p = 0; p < size; p++) {
    if (p != rank) {
      ck_assert_uint_eq(first_bad(in + (size_t)p * bytes, bytes, p), bytes);
    }
  }
  free(items);
  free(in);
  free(out);
  restore_chunk();
  CK_RANK_OK(transport_barrier(t, &e), e);
}
END_TEST

START_TEST(test_io_within_names_the_silent_peer_after_the_timeout) {
  /* Rank 0 waits 300 ms for a message rank 1 never sends: UNAVAILABLE naming rank 1, within a
   * bounded time, the receive cancelled; then the same tag carries a real message intact. */
  struct qdp_error e = QDP_ERROR_INIT;
  int rank = transport_rank(t);
  char buf[32] = {0};
  if (rank == 0) {
    struct transport_io item = {.buf = buf, .bytes = sizeof buf, .peer = 1, .tag = 12};
    double t0 = mono_s();
    CK_STATUS(transport_io_within(t, &item, 1, 300, NULL, &e), QDP_ERR_UNAVAILABLE, e);
    double took = mono_s() - t0;
    ck_assert_double_ge(took, 0.3);
    ck_assert_double_lt(took, 5.0); /* generous: a loaded CI machine may be slow to schedule */
    ck_assert_int_eq(e.rank, 1);
    ck_assert_int_eq(item.done, 0);
    ck_assert_msg(strstr(e.msg, "rank 1 did not send 32 B (tag 12)"), "%s", e.msg);
  }
  CK_RANK_OK(transport_barrier(t, &e), e);
  if (rank == 1) {
    fill((unsigned char *)buf, sizeof buf, 1);
    struct transport_io item = {.buf = buf, .bytes = sizeof buf, .peer = 0, .tag = 12, .send = 1};
    CK_RANK_OK(transport_io_within(t, &item, 1, 10000, NULL, &e), e);
  } else if (rank == 0) {
    struct transport_io item = {.buf = buf, .bytes = sizeof buf, .peer = 1, .tag = 12};
    CK_RANK_OK(transport_io_within(t, &item, 1, 10000, NULL, &e), e);
    ck_assert_uint_eq(first_bad((unsigned char *)buf, sizeof buf, 1), sizeof buf);
  }
  CK_RANK_OK(transport_barrier(t, &e), e);
}
END_TEST

START_TEST(test_io_within_reports_a_size_mismatch) {
  struct qdp_error e = QDP_ERROR_INIT;
  unsigned char buf[64] = {0};
  if (transport_rank(t) == 0) {
    struct transport_io item = {.buf = buf, .bytes = 40, .peer = 1, .tag = 13, .send = 1};
    CK_RANK_OK(transport_io_within(t, &item, 1, 10000, NULL, &e), e);
  } else if (transport_rank(t) == 1) {
    struct transport_io item = {.buf = buf, .bytes = 64, .peer = 0, .tag = 13};
    CK_STATUS(transport_io_within(t, &item, 1, 10000, NULL, &e), QDP_ERR_INVALID_ARGUMENT, e);
    ck_assert_msg(strstr(e.msg, "expected a piece of 64 B from rank 0, tag 13, and got 40 B"), "%s",
                  e.msg);
  }
  CK_RANK_OK(transport_barrier(t, &e), e);
}
END_TEST

static Suite *transport_mpi_suite(void) {
  Suite *s = suite_create("transport_mpi");
  TCase *tc = tcase_create("mpi");
  tcase_add_test(tc, test_world_has_the_ranks_mpirun_started);
  tcase_add_test(tc, test_ranks_on_different_hosts_report_different_host_names);
  tcase_add_test(tc, test_second_transport_joins_the_initialized_world_without_finalizing);
  tcase_add_test(tc, test_bcast_from_every_root_reaches_every_rank);
  tcase_add_test(tc, test_bcast_in_small_pieces_reassembles_the_message);
  tcase_add_test(tc, test_bcast_bytes_of_nothing_gives_an_empty_valid_buffer);
  tcase_add_test(tc, test_bcast_bytes_of_several_mib_arrives_whole);
  tcase_add_test(tc, test_bcast_bytes_in_small_pieces_arrives_whole);
  tcase_add_test(tc, test_allgather_puts_each_rank_block_in_rank_order);
  tcase_add_test(tc, test_allgather_in_pieces_puts_each_piece_in_place);
  tcase_add_test(tc, test_allgather_f64_keeps_every_bit_of_every_partial);
  tcase_add_test(tc, test_allgatherv_with_a_different_size_per_rank);
  tcase_add_test(tc, test_allgatherv_larger_than_one_call_broadcasts_each_blob);
  tcase_add_test(tc, test_allreduce_u64_sums_and_picks_exactly);
  tcase_add_test(tc, test_agree_when_all_pass_is_ok);
  tcase_add_test(tc, test_agree_gives_every_rank_the_first_failing_rank_message);
  tcase_add_test(tc, test_agree_when_only_the_last_rank_fails);
  tcase_add_test(tc, test_send_recv_between_every_pair);
  tcase_add_test(tc, test_send_recv_in_small_pieces_between_every_pair);
  tcase_add_test(tc, test_recv_of_a_shorter_message_names_both_sizes);
  tcase_add_test(tc, test_recv_of_a_longer_message_is_an_mpi_truncate_error);
  tcase_add_test(tc, test_invalid_peers_tags_and_roots_are_refused_locally);
  tcase_add_test(tc, test_io_within_exchanges_with_every_peer_at_once);
  tcase_add_test(tc, test_io_within_names_the_silent_peer_after_the_timeout);
  tcase_add_test(tc, test_io_within_reports_a_size_mismatch);
  tcase_add_test(tc, test_send_recv_past_int_max_bytes);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  struct qdp_error e = QDP_ERROR_INIT;
  if (transport_mpi_create(&argc, &argv, &t, &e) != QDP_OK) {
    fprintf(stderr, "test_transport_mpi: %s\n", e.msg);
    return EXIT_FAILURE;
  }
  char *end = NULL;
  unsigned long want = argc > 1 ? strtoul(argv[1], &end, 10) : 0;
  if (argc < 2 || *end != '\0' || want < 2 || want > 64) {
    fprintf(stderr, "usage: mpirun -n N %s N (2 <= N <= 64)\n", argv[0]);
    transport_destroy(t);
    return EXIT_FAILURE;
  }
  expected_size = (int)want;
  int rank = transport_rank(t);

  SRunner *sr = srunner_create(transport_mpi_suite());
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, rank == 0 ? CK_ENV : CK_SILENT);
  int failed = srunner_ntests_failed(sr);
  if (rank != 0 && failed > 0) {
    TestResult **tr = srunner_failures(sr);
    for (int i = 0; i < failed; i++) {
      fprintf(stderr, "rank %d: %s:%d: %s: %s\n", rank, tr_lfile(tr[i]), tr_lno(tr[i]),
              tr_tcname(tr[i]), tr_msg(tr[i]));
    }
    free(tr);
  }
  srunner_free(sr);

  /* Every rank returns non-zero when any rank failed, so no failure hides behind mpirun. */
  uint64_t mine = (uint64_t)failed, all = 0;
  if (transport_allreduce_u64(t, &mine, 1, TRANSPORT_SUM, &all, &e) != QDP_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, e.msg);
    all = mine + 1;
  }
  if (rank == 0 && all > mine) {
    printf("transport_mpi: %llu failures on other ranks\n", (unsigned long long)(all - mine));
  }
  transport_destroy(t);
  return all ? EXIT_FAILURE : EXIT_SUCCESS;
}
