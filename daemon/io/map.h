/* map.h — read-only mappings of inputs on the daemon's node (a client's shared memory, a file,
 * and through npy.h .npy files), and the confinement folders node-local paths are opened beneath.
 * Pure POSIX; no gRPC.
 *
 * Contract:
 *  - Every function may be called from any thread; a mapping belongs to its caller, who gives it
 *    back with io_unmap (NULL-safe, and safe on a zeroed or already unmapped mapping).
 *  - The daemon opens no node-local object by name for a caller: descriptors come either from
 *    the caller itself (handed over, state/tickets.h) or, for callers that cannot hand one over
 *    (TCP), from io_folder_open_file beneath a folder the operator configured. Functions taking a
 *    descriptor take it in every case: a mapping keeps it (closed by io_unmap) to tell later
 *    whether the object shrank; on failure it is closed.
 *  - Only regular files (which includes POSIX shm objects and memfds) are mapped; anything else
 *    is refused before it is read.
 *  - Statuses: INVALID_ARGUMENT (a malformed path or length, not a regular file), NOT_FOUND,
 *    PERMISSION_DENIED (outside a folder, or the daemon's own file), OUT_OF_RANGE (offset + length
 *    past the object's end), SYSTEM (any other failed system call; cause = errno). Messages quote
 *    user input in single quotes and carry the sizes; they never quote the object's bytes.
 *  - A mapping reads the object in place. If it shrinks afterwards, reading the lost pages raises
 *    SIGBUS (io/guard.h turns that into DATA_LOSS) and io_mapping_shrunk
 *    says so; `sealed` says it cannot shrink (a memfd with F_SEAL_SHRINK), `frozen` that its bytes
 *    cannot change at all (F_SEAL_WRITE or F_SEAL_FUTURE_WRITE as well).
 *  - An object that shrinks and grows back between two reads has its old size and new pages
 *    (zeros; page-locked memory keeps the old ones): its size says nothing. Its change time does
 *    (io_mapping_generation, io_mapping_changed), see there for what it does and does not catch.
 */
#ifndef QDP_IO_MAP_H
#define QDP_IO_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct io_mapping {
  const void *data; /* the first byte asked for */
  uint64_t bytes;   /* bytes readable at data */
  int sealed;       /* 1: the object can no longer shrink (F_SEAL_SHRINK) */
  /* private (fd is valid only while base is set): */
  void *base;
  size_t map_len;
  int fd;
  uint64_t file_end; /* the object's size needed for every mapped byte to exist */
  int frozen; /* 1: sealed and its bytes can no longer change (F_SEAL_WRITE, _FUTURE_WRITE) */
};

#define IO_MAPPING_INIT \
  { NULL, 0, 0, NULL, 0, -1, 0, 0 }

/* A file's identity: a descriptor names the same file as another when both match. */
struct io_file_id {
  uint64_t dev, ino;
};

/* A confinement folder: opened once, at start; paths beneath it are resolved from its descriptor
 * by the kernel (openat2 RESOLVE_BENEATH), never by checking a path and opening it again. */
struct io_folder {
  int fd;          /* -1: no folder configured */
  char path[4096]; /* as configured */
  char real[4096]; /* the same, symbolic links resolved */
};

#define IO_FOLDER_INIT \
  { -1, "", "" }

/* OK when `path` is absolute, not empty and shorter than PATH_MAX; INVALID_ARGUMENT naming
 * `field` otherwise. Server-side files are always named absolutely: the daemon's working
 * directory is nobody's business. */
qdp_status io_check_path(const char *path, const char *field, struct qdp_error *reterr);

/* io_map_fd's flags. */
enum {
  IO_MAP_WHOLE = 1u,    /* the entire object: offset and length ignored */
  IO_MAP_WRITABLE = 2u, /* read and write, MAP_SHARED (an output region): fd must be O_RDWR */
};

/* Maps `length` bytes at `offset` of the regular file or shared memory open on fd (taken),
 * read-only unless IO_MAP_WRITABLE (then writes at base reach the object); with IO_MAP_WHOLE,
 * the entire object (an empty object is INVALID_ARGUMENT, and base is its first byte). length 0
 * is refused; offset + length is checked against the object's size without overflow. `what`
 * describes the object in messages ("shared memory '/x'"). */
qdp_status io_map_fd(int fd, const char *what, uint64_t offset, uint64_t length, unsigned flags,
                     struct io_mapping *ret, struct qdp_error *reterr);

/* Whether the mapped object is now shorter than the mapping needs (it was truncated: some pages
 * read, or would read, as zeros). False for an unmapped mapping. */
bool io_mapping_shrunk(const struct io_mapping *m);

/* The object's change time (ns since the epoch, from fstat) into *ret_ns; false when the mapping
 * is unmapped or fstat fails.
 *
 * What changes it (Linux 6.18 on tmpfs, memfds and POSIX shm, and on ext4; a probe confirmed
 * each): ftruncate to any size (so a shrink that is grown back), fallocate and hole punching,
 * write(2), chmod, and the first write through a shared mapping to a page that mapping had not
 * written yet (the kernel's write-notify fault). What does not: reads (a read fault of a hole
 * included), later writes through a mapping whose page is already writable (a client rewriting
 * its region through its own mapping, and the daemon's writes after io_mapping_populate_write),
 * adding seals. So a comparison catches a shrink-then-grow between two reads, and any write(2),
 * but not a rewrite through a mapping: a client changing its bytes that way is changing its input,
 * which no size or time says. The time is the file system's clock: on a kernel with only coarse
 * (per tick) timestamps two changes within one tick of the snapshot read the same time; a
 * memfd sealed against shrinking (F_SEAL_SHRINK) needs no check at all. */
bool io_mapping_generation(const struct io_mapping *m, int64_t *ret_ns);

/* Whether the object changed since io_mapping_generation gave since_ns: its change time moved,
 * it shrank, or fstat fails (which says nothing good either). False for an unmapped mapping. */
bool io_mapping_changed(const struct io_mapping *m, int64_t since_ns);

/* Makes every page of a writable mapping present and writable in this process now
 * (MADV_POPULATE_WRITE; on kernels before 5.14, an atomic add of 0 to a byte of each page, which
 * changes nothing a writer meanwhile writes), so that the daemon's own writes later take no
 * write-notify fault and leave the change time alone. Allocates the object's holes. The caller
 * guards the range (a cut object faults). SYSTEM on another failure. */
qdp_status io_mapping_populate_write(struct io_mapping *m, struct qdp_error *reterr);

/* Whether every page of the mapping is present in this process's page tables now
 * (/proc/self/pagemap, whose present bit needs no privilege): 1 all present, 0 some page is not,
 * -1 when it cannot tell (no pagemap). A cut of the object takes its pages out of every mapping,
 * page-locked ones included (the locks keep the old pages alive for the devices), so a page-locked
 * mapping missing a page was cut since it was locked, unless this process touched that page since
 * the cut. */
int io_mapping_resident(const struct io_mapping *m);

/* Unmaps, closes its descriptor and resets *m. NULL-safe. */
void io_unmap(struct io_mapping *m);

/* The identity of the file open on fd; SYSTEM when fstat fails. */
qdp_status io_file_id_of(int fd, struct io_file_id *ret, struct qdp_error *reterr);

/* PERMISSION_DENIED (field) when fd is one of the n files in own (the daemon's socket, lock,
 * configuration, token file): no caller reads or replaces those through the daemon. */
qdp_status io_check_not_own(int fd, const struct io_file_id *own, size_t n, const char *field,
                            struct qdp_error *reterr);

/* Opens folder `path` (absolute) for io_folder_open_file; an empty path leaves f->fd -1 (no
 * folder). NOT_FOUND / PERMISSION_DENIED / INVALID_ARGUMENT (not a directory) naming `option`. */
qdp_status io_folder_open(const char *path, const char *option, struct io_folder *f,
                          struct qdp_error *reterr);
void io_folder_close(struct io_folder *f); /* NULL-safe; idempotent */

/* The part of absolute `path` below folder f (as configured or with links resolved), into rel
 * (PATH_MAX bytes); PERMISSION_DENIED naming `field` when path does not start with the folder. */
qdp_status io_folder_relative(const struct io_folder *f, const char *path, const char *field,
                              char *rel, struct qdp_error *reterr);

/* Opens absolute `path` beneath folder f with open(2) `flags` (O_CLOEXEC and O_NOCTTY added) by
 * openat2 with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS from the folder's descriptor: a '..' or a
 * symbolic link that leads out, swapped in at any time, makes it fail (PERMISSION_DENIED naming
 * field) instead of leading out. */
qdp_status io_folder_open_file(const struct io_folder *f, const char *path, int flags,
                               const char *field, int *ret_fd, struct qdp_error *reterr);

/* OK when fd is the file that `path` names beneath folder f (same identity); PERMISSION_DENIED
 * naming field otherwise: a descriptor a caller handed over must also be a file of the folder. */
qdp_status io_folder_check_fd(const struct io_folder *f, const char *path, int fd,
                              const char *field, struct qdp_error *reterr);

#endif /* QDP_IO_MAP_H */
