/* Unit tests of daemon/transport in a world of one: every collective is a copy, agree returns the
 * caller's own status, point-to-point has no peer, and the chunking arithmetic that cuts MPI calls
 * below INT_MAX; the launcher's environment; and the device-collective policy where it makes no
 * group. The MPI family is tested under mpirun in tests/mpi.
 */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives.h"
#include "common.h"
#include "launcher.h"
#include "transport.h"

static struct transport *t;

/* What a refusal prints for a call given no error to fill. */
static const struct qdp_error no_err = QDP_ERROR_INIT;

static void setup(void) {
  struct qdp_error e = QDP_ERROR_INIT;
  CK_OK(transport_local_create(&t, &e), e);
}

static void teardown(void) {
  transport_destroy(t);
  t = NULL;
}

/* ---- identity ---- */

START_TEST(test_local_world_is_rank_0_of_1_on_this_host) {
  char host[256] = {0};
  ck_assert_int_eq(gethostname(host, sizeof host - 1), 0);
  ck_assert_int_eq(transport_rank(t), 0);
  ck_assert_int_eq(transport_size(t), 1);
  ck_assert_int_eq(transport_kind(t), TRANSPORT_LOCAL);
  ck_assert_str_eq(transport_kind_name(t), "local");
  ck_assert_str_eq(transport_host(t), host);
  ck_assert_int_eq(transport_threads(t), TRANSPORT_THREADS_MULTIPLE);
  ck_assert_str_eq(transport_threads_name(transport_threads(t)), "multiple");
  ck_assert_str_eq(transport_threads_name(TRANSPORT_THREADS_FUNNELED), "funneled");
  ck_assert_str_eq(transport_threads_name((enum transport_threads)9), "unknown");
  ck_assert_uint_eq(transport_chunk_bytes(t), (size_t)1 << 30);
}
END_TEST

#if QDP_TEST_NO_MPI
START_TEST(test_mpi_create_without_mpi_is_unimplemented) {
  struct transport *m = NULL;
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(transport_mpi_create(NULL, NULL, &m, &e), QDP_ERR_UNIMPLEMENTED, e);
  ck_assert_ptr_null(m);
  ck_assert_ptr_nonnull(strstr(e.msg, "without MPI"));
}
END_TEST
#endif

/* ---- the launcher's environment ---- */

/* The variables that say a process was started into a world, each of which must do so alone. */
static const char *const world_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                         "PMI_SIZE"};
#define NVARS(a) (sizeof(a) / sizeof(a)[0])

/* Clears every variable launcher.c reads; the local-rank ones are pinned by name below. */
static void unset_launcher(void) {
  for (size_t i = 0; launcher_var_name(i); i++) {
    unsetenv(launcher_var_name(i));
  }
}

/* Each world variable alone says a launcher started us; a local rank alone does not (srun without
 * MPI sets SLURM_LOCALID). */
START_TEST(test_launcher_started_mpi_by_any_world_variable) {
  unset_launcher();
  ck_assert(!launcher_started_mpi());
  for (size_t i = 0; i < NVARS(world_vars); i++) {
    setenv(world_vars[i], "2", 1);
    ck_assert_msg(launcher_started_mpi(), "%s", world_vars[i]);
    unsetenv(world_vars[i]);
  }
  setenv("SLURM_LOCALID", "0", 1);
  ck_assert(!launcher_started_mpi());
  unset_launcher();
}
END_TEST

/* The first local-rank variable set wins; a value that is not a small number is none. */
START_TEST(test_launcher_local_rank_in_order_and_checked) {
  unset_launcher();
  ck_assert_int_eq(launcher_local_rank(), -1);
  setenv("PMIX_LOCAL_RANK", "3", 1);
  ck_assert_int_eq(launcher_local_rank(), 3);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  ck_assert_int_eq(launcher_local_rank(), 1);
  const char *bad[] = {"", "x", "1x", "1024"};
  for (size_t i = 0; i < NVARS(bad); i++) {
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", bad[i], 1);
    ck_assert_msg(launcher_local_rank() == -1, "'%s'", bad[i]);
  }
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1023", 1);
  ck_assert_int_eq(launcher_local_rank(), 1023);
  char names[160];
  launcher_local_rank_names(names, sizeof names);
  ck_assert_str_eq(names,
                   "OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID or PMIX_LOCAL_RANK");
  launcher_local_rank_names(names, 12); /* cut short, still a string */
  ck_assert_uint_lt(strlen(names), 12);
  unset_launcher();
}
END_TEST

/* ---- the device-collective policy where no group is made ---- */

START_TEST(test_collectives_policy_says_why_there_is_no_group) {
  struct collectives_group g;
  int ords[2] = {0, 1};
  collectives_local_group(ords, 1, false, &g);
  ck_assert_ptr_null(g.comm);
  ck_assert_str_eq(g.desc, "none (one GPU)");
  collectives_local_group(ords, 2, true, &g);
  ck_assert_ptr_null(g.comm);
  ck_assert_str_eq(g.desc, "host (configured)");
  collectives_group_fini(&g);
  /* A world where some device is not a GPU, or some rank configured host reductions. */
  collectives_world_group(t, false, true, 2, 0, ords, 2, 1000, &g);
  ck_assert_ptr_null(g.comm);
  ck_assert_str_eq(g.desc, "mpi (not every device of the world is a GPU)");
  collectives_world_group(t, true, false, 2, 0, ords, 2, 1000, &g);
  ck_assert_ptr_null(g.comm);
  ck_assert_str_eq(g.desc, "mpi (host_collectives is set on some rank)");
  collectives_group_aborted(&g, 2);
  ck_assert_str_eq(g.desc, "mpi (the NCCL group across ranks was aborted on rank 2)");
  collectives_group_fini(&g);
  /* No group fits no job. */
  size_t members[2] = {0, 1};
  ck_assert(!collectives_job_fits(NULL, members, 2, 2));
}
END_TEST

/* ---- collectives are copies ---- */

START_TEST(test_bcast_keeps_the_root_buffer) {
  struct qdp_error e = QDP_ERROR_INIT;
  unsigned char buf[37];
  for (size_t i = 0; i < sizeof buf; i++) {
    buf[i] = (unsigned char)(i * 7 + 1);
  }
  CK_OK(transport_bcast(t, buf, sizeof buf, 0, &e), e);
  for (size_t i = 0; i < sizeof buf; i++) {
    ck_assert_uint_eq(buf[i], (unsigned char)(i * 7 + 1));
  }
  CK_OK(transport_bcast(t, NULL, 0, 0, &e), e);
}
END_TEST

START_TEST(test_bcast_refuses_a_root_outside_the_world) {
  struct qdp_error e = QDP_ERROR_INIT;
  char c = 'x';
  CK_STATUS(transport_bcast(t, &c, 1, 1, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "root");
  ck_assert_ptr_nonnull(strstr(e.msg, "(1)"));
  CK_STATUS(transport_bcast(t, &c, 1, -1, NULL), QDP_ERR_INVALID_ARGUMENT, no_err);
}
END_TEST

START_TEST(test_bcast_refuses_a_null_buffer_with_bytes) {
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(transport_bcast(t, NULL, 5, 0, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "buf");
  ck_assert_ptr_nonnull(strstr(e.msg, "(5)"));
}
END_TEST

START_TEST(test_bcast_bytes_on_the_root_leaves_the_message) {
  struct qdp_error e = QDP_ERROR_INIT;
  char msg[] = "job 7";
  void *buf = msg;
  size_t bytes = sizeof msg;
  CK_OK(transport_bcast_bytes(t, &buf, &bytes, 0, &e), e);
  ck_assert_ptr_eq(buf, msg);
  ck_assert_uint_eq(bytes, sizeof msg);
  ck_assert_str_eq(msg, "job 7");
  CK_STATUS(transport_bcast_bytes(t, &buf, &bytes, 2, &e), QDP_ERR_INVALID_ARGUMENT, e);
  CK_STATUS(transport_bcast_bytes(t, NULL, &bytes, 0, &e), QDP_ERR_INVALID_ARGUMENT, e);
}
END_TEST

START_TEST(test_allgather_copies_mine) {
  struct qdp_error e = QDP_ERROR_INIT;
  uint32_t mine[3] = {0xdeadbeef, 7, 0}, ret[3] = {1, 1, 1};
  CK_OK(transport_allgather(t, mine, sizeof mine, ret, &e), e);
  ck_assert_uint_eq(ret[0], 0xdeadbeef);
  ck_assert_uint_eq(ret[1], 7);
  ck_assert_uint_eq(ret[2], 0);
  CK_STATUS(transport_allgather(t, mine, sizeof mine, NULL, &e), QDP_ERR_INVALID_ARGUMENT, e);
}
END_TEST

START_TEST(test_allgather_f64_is_bit_exact) {
  struct qdp_error e = QDP_ERROR_INIT;
  /* -0.0, a subnormal and a value with every mantissa bit set: a conversion would change one. */
  double mine[3] = {-0.0, 4.9406564584124654e-324, 0.1 + 0.2}, ret[3] = {1, 1, 1};
  CK_OK(transport_allgather_f64(t, mine, 3, ret, &e), e);
  ck_assert_mem_eq(ret, mine, sizeof mine);
  CK_STATUS(transport_allgather_f64(t, mine, SIZE_MAX / 4, ret, &e), QDP_ERR_INVALID_ARGUMENT, e);
}
END_TEST

START_TEST(test_allreduce_u64_of_one_rank_is_mine_for_every_op) {
  struct qdp_error e = QDP_ERROR_INIT;
  const uint64_t mine[2] = {UINT64_MAX, 3};
  for (int op = TRANSPORT_SUM; op <= TRANSPORT_MAX; op++) {
    uint64_t ret[2] = {0, 0};
    CK_OK(transport_allreduce_u64(t, mine, 2, (enum transport_op)op, ret, &e), e);
    ck_assert_uint_eq(ret[0], UINT64_MAX);
    ck_assert_uint_eq(ret[1], 3);
  }
  CK_STATUS(transport_allreduce_u64(t, mine, 2, (enum transport_op)7, NULL, &e),
            QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "op");
}
END_TEST

START_TEST(test_allgatherv_returns_one_blob_at_offset_0) {
  struct qdp_error e = QDP_ERROR_INIT;
  struct transport_gathered g;
  const char mine[] = "shard table";
  CK_OK(transport_allgatherv(t, mine, sizeof mine, &g, &e), e);
  ck_assert_int_eq(g.count, 1);
  ck_assert_uint_eq(g.total, sizeof mine);
  ck_assert_uint_eq(g.offsets[0], 0);
  ck_assert_uint_eq(g.lengths[0], sizeof mine);
  ck_assert_mem_eq(g.data, mine, sizeof mine);
  transport_gathered_fini(&g);
  ck_assert_ptr_null(g.data);
  ck_assert_ptr_null(g.offsets);
  ck_assert_int_eq(g.count, 0);
  transport_gathered_fini(&g); /* twice is harmless */
}
END_TEST

START_TEST(test_allgatherv_of_nothing_gives_a_valid_empty_result) {
  struct qdp_error e = QDP_ERROR_INIT;
  struct transport_gathered g;
  CK_OK(transport_allgatherv(t, NULL, 0, &g, &e), e);
  ck_assert_int_eq(g.count, 1);
  ck_assert_uint_eq(g.total, 0);
  ck_assert_uint_eq(g.lengths[0], 0);
  ck_assert_ptr_nonnull(g.data);
  transport_gathered_fini(&g);
}
END_TEST

START_TEST(test_allgatherv_refuses_a_null_blob_with_bytes_and_returns_zeroed) {
  struct qdp_error e = QDP_ERROR_INIT;
  struct transport_gathered g;
  memset(&g, 0xab, sizeof g);
  CK_STATUS(transport_allgatherv(t, NULL, 3, &g, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_ptr_null(g.data);
  ck_assert_ptr_null(g.offsets);
  ck_assert_int_eq(g.count, 0);
  ck_assert_str_eq(e.field, "buf");
  /* In a world of one the rank prefix is left out: the message is the rank's own. */
  ck_assert_ptr_null(strstr(e.msg, "rank 0: "));
}
END_TEST

/* ---- agree ---- */

START_TEST(test_agree_all_ok_is_ok_and_leaves_reterr) {
  struct qdp_error e = QDP_ERROR_INIT;
  snprintf(e.msg, sizeof e.msg, "untouched");
  CK_OK(transport_agree(t, QDP_OK, NULL, &e), e);
  ck_assert_str_eq(e.msg, "untouched");
}
END_TEST

START_TEST(test_agree_returns_my_failure_with_its_numbers) {
  struct qdp_error mine = QDP_ERROR_INIT, e = QDP_ERROR_INIT;
  qdp_error_set_at(&mine, QDP_ERR_RESOURCE_EXHAUSTED, 3, 2,
                   "cuda:3 needs 4096 B but its budget is 1024 B");
  snprintf(mine.field, sizeof mine.field, "qubits");
  mine.need_bytes = 4096;
  mine.free_bytes = 1024;
  CK_STATUS(transport_agree(t, QDP_ERR_RESOURCE_EXHAUSTED, &mine, &e), QDP_ERR_RESOURCE_EXHAUSTED,
            e);
  CK_STATUS(e.code, QDP_ERR_RESOURCE_EXHAUSTED, e);
  ck_assert_str_eq(e.msg, "cuda:3 needs 4096 B but its budget is 1024 B");
  ck_assert_str_eq(e.field, "qubits");
  ck_assert_int_eq(e.rank, 0);
  ck_assert_int_eq(e.device, 3);
  ck_assert_int_eq(e.cause, 2);
  ck_assert_uint_eq(e.need_bytes, 4096);
  ck_assert_uint_eq(e.free_bytes, 1024);
}
END_TEST

START_TEST(test_agree_without_detail_names_the_status) {
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(transport_agree(t, QDP_ERR_NOT_FOUND, NULL, &e), QDP_ERR_NOT_FOUND, e);
  CK_STATUS(e.code, QDP_ERR_NOT_FOUND, e);
  ck_assert_ptr_nonnull(strstr(e.msg, "QDP_ERR_NOT_FOUND"));
  CK_STATUS(transport_agree(t, QDP_ERR_NOT_FOUND, NULL, NULL), QDP_ERR_NOT_FOUND, no_err);
}
END_TEST

/* ---- point to point ---- */

START_TEST(test_send_and_recv_have_no_peer_in_a_world_of_one) {
  struct qdp_error e = QDP_ERROR_INIT;
  char c = 0;
  CK_STATUS(transport_send(t, &c, 1, 0, 0, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "peer");
  ck_assert_ptr_nonnull(strstr(e.msg, "itself"));
  CK_STATUS(transport_recv(t, &c, 1, 1, 0, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_ptr_nonnull(strstr(e.msg, "not a rank"));
  CK_STATUS(transport_recv(t, &c, 1, -1, 0, &e), QDP_ERR_INVALID_ARGUMENT, e);
}
END_TEST

/* ---- chunking ---- */

START_TEST(test_io_within_has_no_peer_in_a_world_of_one) {
  struct qdp_error e = QDP_ERROR_INIT;
  char c = 0;
  /* Nothing to do is done. */
  CK_OK(transport_io_within(t, NULL, 0, 100, NULL, &e), e);
  struct transport_io item = {.buf = &c, .bytes = 1, .peer = 0, .tag = 1};
  CK_STATUS(transport_io_within(t, &item, 1, 100, NULL, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "peer");
  item.peer = 1;
  CK_STATUS(transport_io_within(t, &item, 1, 100, NULL, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "peer");
  ck_assert_int_eq(item.done, 0);
}
END_TEST

START_TEST(test_chunk_count_and_lengths_by_hand) {
  ck_assert_uint_eq(transport_chunk_count(0, 3), 0);
  ck_assert_uint_eq(transport_chunk_len(0, 3, 0), 0);
  ck_assert_uint_eq(transport_chunk_count(10, 3), 4);
  ck_assert_uint_eq(transport_chunk_len(10, 3, 0), 3);
  ck_assert_uint_eq(transport_chunk_len(10, 3, 2), 3);
  ck_assert_uint_eq(transport_chunk_len(10, 3, 3), 1);
  ck_assert_uint_eq(transport_chunk_len(10, 3, 4), 0);
  ck_assert_uint_eq(transport_chunk_count(12, 3), 4);
  ck_assert_uint_eq(transport_chunk_len(12, 3, 3), 3);
  ck_assert_uint_eq(transport_chunk_count(2, 5), 1);
  ck_assert_uint_eq(transport_chunk_len(2, 5, 0), 2);
  ck_assert_uint_eq(transport_chunk_count(7, 0), 0);
}
END_TEST

START_TEST(test_chunks_of_a_message_over_2_gib_stay_below_int_max) {
  /* 2^31 + 5 bytes in 1 GiB pieces: 1 GiB, 1 GiB, 5 B. */
  size_t bytes = ((size_t)1 << 31) + 5, chunk = TRANSPORT_CHUNK_DEFAULT;
  ck_assert_uint_eq(transport_chunk_count(bytes, chunk), 3);
  ck_assert_uint_eq(transport_chunk_len(bytes, chunk, 0), (size_t)1 << 30);
  ck_assert_uint_eq(transport_chunk_len(bytes, chunk, 1), (size_t)1 << 30);
  ck_assert_uint_eq(transport_chunk_len(bytes, chunk, 2), 5);
  /* The largest chunk MPI accepts, INT_MAX: 2^31 + 5 = INT_MAX + 6 -> INT_MAX then 6. */
  ck_assert_uint_eq(transport_chunk_count(bytes, INT_MAX), 2);
  ck_assert_uint_eq(transport_chunk_len(bytes, INT_MAX, 1), 6);
}
END_TEST

START_TEST(test_chunks_near_size_max_do_not_wrap) {
  /* SIZE_MAX = 2^64 - 1 = (2^34 - 1) * 2^30 + (2^30 - 1). */
  size_t chunk = (size_t)1 << 30;
  ck_assert_uint_eq(transport_chunk_count(SIZE_MAX, chunk), (size_t)1 << 34);
  ck_assert_uint_eq(transport_chunk_len(SIZE_MAX, chunk, ((size_t)1 << 34) - 1), chunk - 1);
  ck_assert_uint_eq(transport_chunk_len(SIZE_MAX, chunk, ((size_t)1 << 34) - 2), chunk);
  ck_assert_uint_eq(transport_chunk_count(SIZE_MAX, SIZE_MAX), 1);
  ck_assert_uint_eq(transport_chunk_count(SIZE_MAX, 1), SIZE_MAX);
  ck_assert_uint_eq(transport_chunk_len(SIZE_MAX, SIZE_MAX, 0), SIZE_MAX);
}
END_TEST

START_TEST(test_chunks_tile_the_message_exactly) {
  /* Against a direct walk: pieces are full but the last, cover every byte once, none empty. */
  for (size_t bytes = 0; bytes < 200; bytes++) {
    for (size_t chunk = 1; chunk < 40; chunk++) {
      size_t n = transport_chunk_count(bytes, chunk), sum = 0, walked = 0;
      for (size_t left = bytes; left > 0; left -= left < chunk ? left : chunk) {
        walked++;
      }
      ck_assert_uint_eq(n, walked);
      for (size_t i = 0; i < n; i++) {
        size_t len = transport_chunk_len(bytes, chunk, i);
        ck_assert_uint_gt(len, 0);
        ck_assert_uint_le(len, chunk);
        if (i + 1 < n) {
          ck_assert_uint_eq(len, chunk);
        }
        sum += len;
      }
      ck_assert_uint_eq(sum, bytes);
    }
  }
}
END_TEST

START_TEST(test_set_chunk_bytes_accepts_1_to_int_max_only) {
  struct qdp_error e = QDP_ERROR_INIT;
  CK_STATUS(transport_set_chunk_bytes(t, 0, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_str_eq(e.field, "chunk_bytes");
  CK_STATUS(transport_set_chunk_bytes(t, (size_t)INT_MAX + 1, &e), QDP_ERR_INVALID_ARGUMENT, e);
  ck_assert_ptr_nonnull(strstr(e.msg, "2147483648"));
  ck_assert_uint_eq(transport_chunk_bytes(t), TRANSPORT_CHUNK_DEFAULT);
  CK_OK(transport_set_chunk_bytes(t, INT_MAX, &e), e);
  ck_assert_uint_eq(transport_chunk_bytes(t), (size_t)INT_MAX);
  CK_OK(transport_set_chunk_bytes(t, 1, &e), e);
  ck_assert_uint_eq(transport_chunk_bytes(t), 1);
}
END_TEST

static Suite *transport_suite(void) {
  Suite *s = suite_create("transport");
  TCase *tc = tcase_create("local");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_local_world_is_rank_0_of_1_on_this_host);
#if QDP_TEST_NO_MPI
  tcase_add_test(tc, test_mpi_create_without_mpi_is_unimplemented);
#endif
  tcase_add_test(tc, test_launcher_started_mpi_by_any_world_variable);
  tcase_add_test(tc, test_launcher_local_rank_in_order_and_checked);
  tcase_add_test(tc, test_collectives_policy_says_why_there_is_no_group);
  tcase_add_test(tc, test_bcast_keeps_the_root_buffer);
  tcase_add_test(tc, test_bcast_refuses_a_root_outside_the_world);
  tcase_add_test(tc, test_bcast_refuses_a_null_buffer_with_bytes);
  tcase_add_test(tc, test_bcast_bytes_on_the_root_leaves_the_message);
  tcase_add_test(tc, test_allgather_copies_mine);
  tcase_add_test(tc, test_allgather_f64_is_bit_exact);
  tcase_add_test(tc, test_allreduce_u64_of_one_rank_is_mine_for_every_op);
  tcase_add_test(tc, test_allgatherv_returns_one_blob_at_offset_0);
  tcase_add_test(tc, test_allgatherv_of_nothing_gives_a_valid_empty_result);
  tcase_add_test(tc, test_allgatherv_refuses_a_null_blob_with_bytes_and_returns_zeroed);
  tcase_add_test(tc, test_agree_all_ok_is_ok_and_leaves_reterr);
  tcase_add_test(tc, test_agree_returns_my_failure_with_its_numbers);
  tcase_add_test(tc, test_agree_without_detail_names_the_status);
  tcase_add_test(tc, test_send_and_recv_have_no_peer_in_a_world_of_one);
  tcase_add_test(tc, test_io_within_has_no_peer_in_a_world_of_one);
  tcase_add_test(tc, test_set_chunk_bytes_accepts_1_to_int_max_only);
  suite_add_tcase(s, tc);
  TCase *tk = tcase_create("chunking");
  tcase_add_test(tk, test_chunk_count_and_lengths_by_hand);
  tcase_add_test(tk, test_chunks_of_a_message_over_2_gib_stay_below_int_max);
  tcase_add_test(tk, test_chunks_near_size_max_do_not_wrap);
  tcase_add_test(tk, test_chunks_tile_the_message_exactly);
  suite_add_tcase(s, tk);
  return s;
}

int main(void) {
  return qdpt_run_suite(transport_suite(), CK_FORK_GETENV);
}
