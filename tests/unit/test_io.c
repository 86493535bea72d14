/* Unit tests for daemon/io/: .npy headers, mapping files and shared memory, atomic export.
 *
 * The suite; its tests are in test_io_npy.c (headers), test_io_map.c (mapping files and shared
 * memory) and test_io_write.c (confinement folders, export), with what they share in
 * io_fixture.h. */
#include <check.h>
#include <stdlib.h>

#include "io_fixture.h"

static Suite *io_suite(void) {
  Suite *s = suite_create("io");
  TCase *parse = tcase_create("npy_parse");
  io_add_npy_parse(parse);
  suite_add_tcase(s, parse);

  TCase *hdr = tcase_create("npy_header");
  io_add_npy_header(hdr);
  suite_add_tcase(s, hdr);

  TCase *map = tcase_create("map_npy");
  io_add_map_npy(map);
  suite_add_tcase(s, map);

  TCase *shm = tcase_create("map_fd");
  io_add_map_fd(shm);
  suite_add_tcase(s, shm);

  TCase *fold = tcase_create("folders");
  tcase_set_timeout(fold, 60);
  io_add_folders(fold);
  suite_add_tcase(s, fold);

  TCase *wr = tcase_create("write_npy");
  tcase_set_timeout(wr, 60);
  io_add_write_npy(wr);
  suite_add_tcase(s, wr);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(io_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
