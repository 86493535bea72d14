/* io_fixture.h — what the tests of daemon/io (test_io*.c) share: hand-made .npy images, a
 * temporary folder, files written by hand, and .npy files mapped as the daemon maps them
 * (io_fixture.c); and the function of each part that adds its tests to a tcase of test_io.c's
 * suite.
 */
#ifndef QDP_TESTS_IO_FIXTURE_H
#define QDP_TESTS_IO_FIXTURE_H

#include <check.h>
#include <stddef.h>

#include "io/map.h"
#include "io/npy.h"

/* A .npy image: magic, version major.0, the length field and `dict` verbatim, then `data_len`
 * bytes of data (0x11 each). The caller frees *ret. */
size_t make_npy(unsigned major, const char *dict, size_t data_len, unsigned char **ret);

/* The temporary folder of a test: made by make_tmpdir, emptied and removed by remove_tmpdir. */
extern char tmpdir[256];

void make_tmpdir(void);
void remove_tmpdir(void);

/* Writes n bytes of buf to a new file at path. */
void write_file(const char *path, const void *buf, size_t n);

/* Maps the .npy file at path as the daemon maps a file handed to it: opened here, then mapped
 * from its descriptor. A file that cannot be opened gives the status open(2) means. */
qdp_status map_path(const char *path, struct io_mapping *m, struct qdp_npy *h,
                    struct qdp_error *err);

/* Each adds the tests of one tcase (its name) to tc. */
void io_add_npy_parse(TCase *tc); /* test_io_npy.c */
void io_add_npy_header(TCase *tc);
void io_add_map_npy(TCase *tc); /* test_io_map.c */
void io_add_map_fd(TCase *tc);
void io_add_folders(TCase *tc); /* test_io_write.c */
void io_add_write_npy(TCase *tc);

#endif
