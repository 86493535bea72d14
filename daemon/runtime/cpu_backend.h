/* cpu_backend.h — the CPU backend's ops that live outside cpu_device.c (its ops table). Internal
 * to runtime/: cpu_gram.c has the kernel matrix's block products, through a CBLAS loaded at the
 * first one ($QDP_BLAS, OpenBLAS, libblas.so.3) or, with none, qdp's own loops.
 *
 * Any thread; the library is chosen once a process, at the first product.
 */
#ifndef QDP_RUNTIME_CPU_BACKEND_H
#define QDP_RUNTIME_CPU_BACKEND_H

#include "runtime/device.h"

/* runtime/device.h's gram on host memory. FAILED_PRECONDITION, at every call, where QDP_BLAS names
 * a library that cannot be used. */
qdp_status cpu_gram(struct runtime_device *d, const void *a, uint64_t lda, uint64_t rows,
                    const void *b, uint64_t ldb, uint64_t cols, uint64_t len, qdp_dtype dt,
                    bool upper, bool real, void *g, struct qdp_error *reterr);

#endif /* QDP_RUNTIME_CPU_BACKEND_H */
