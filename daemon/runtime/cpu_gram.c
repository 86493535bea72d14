/* cpu_gram.c — the kernel matrix's block products on the CPU backend (runtime/device.h: gram)
 * through a CBLAS.
 *
 * The library is loaded at the first product, not linked, as cuda_gram.c loads cuBLAS: qdpd runs
 * where there is none. The first of $QDP_BLAS (a path or soname; "none": qdp's own loops),
 * OpenBLAS (Debian's libopenblas0-pthread or libopenblas0) and libblas.so.3 (Debian's reference
 * libblas3, which has the cblas_ symbols too) that opens with every symbol is used; with none of
 * them the products are qdp's loops (qdpk_cpu_gram). A QDP_BLAS that cannot be used fails every
 * kernel instead: a library someone named is never silently replaced. The log says which, once.
 *
 * The contract is g = conj(A) B^T on row-major operands (qdpk_cpu_gram). CBLAS has no conjugate
 * without a transpose, so ZGEMM computes A B^H (ZHERK its upper half for a tile with itself), the
 * conjugate of g, and the imaginary parts are negated after: exact, and rows x cols work beside
 * the product's rows x cols x len. Real operands (DGEMM, DSYRK) need none. A tile with itself gets
 * zeros below the diagonal, as the loops leave there (gram_add sums whole tiles).
 *
 * Threads: the BLAS's own count (OpenBLAS: the cores, or OPENBLAS_NUM_THREADS), however many cpu
 * devices there are. A product's bits depend on that count (OpenBLAS splits it among its threads),
 * so one count for the machine keeps a kernel's bits the same in every daemon on it, whatever its
 * --devices cpu:N; and the products of several devices at once do not multiply the threads:
 * OpenBLAS's threads are one pool that concurrent calls share (0.3.21, Debian 12's, also takes its
 * threaded GEMMs one call at a time). Every call for a tile has the same arguments, so each tile
 * has the same bits on any sharding (kernel.c).
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "qdpk.h"
#include "runtime/cpu_backend.h"

/* cblas.h's values, the same in every implementation. */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112, CONJ_TRANS = 113, UPPER = 121 };

typedef void gemm_complex(int order, int ta, int tb, int m, int n, int k, const void *alpha,
                          const void *a, int lda, const void *b, int ldb, const void *beta, void *c,
                          int ldc);
typedef void herk_double(int order, int uplo, int t, int n, int k, double alpha, const void *a,
                         int lda, double beta, void *c, int ldc);
typedef void herk_float(int order, int uplo, int t, int n, int k, float alpha, const void *a,
                        int lda, float beta, void *c, int ldc);
typedef void gemm_double(int order, int ta, int tb, int m, int n, int k, double alpha,
                         const double *a, int lda, const double *b, int ldb, double beta, double *c,
                         int ldc);
typedef void gemm_float(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                        int lda, const float *b, int ldb, float beta, float *c, int ldc);
typedef void syrk_double(int order, int uplo, int t, int n, int k, double alpha, const double *a,
                         int lda, double beta, double *c, int ldc);
typedef void syrk_float(int order, int uplo, int t, int n, int k, float alpha, const float *a,
                        int lda, float beta, float *c, int ldc);

static struct {
  void *lib; /* NULL: qdp's loops, or with `error` no product at all */
  gemm_complex *zgemm, *cgemm;
  herk_double *zherk;
  herk_float *cherk;
  gemm_double *dgemm;
  gemm_float *sgemm;
  syrk_double *dsyrk;
  syrk_float *ssyrk;
  char error[768]; /* why kernels fail: a QDP_BLAS that cannot be used; "" otherwise */
} blas;

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static const struct {
  void **slot;
  const char *name;
} blas_syms[] = {{(void **)&blas.zgemm, "cblas_zgemm"}, {(void **)&blas.cgemm, "cblas_cgemm"},
                 {(void **)&blas.zherk, "cblas_zherk"}, {(void **)&blas.cherk, "cblas_cherk"},
                 {(void **)&blas.dgemm, "cblas_dgemm"}, {(void **)&blas.sgemm, "cblas_sgemm"},
                 {(void **)&blas.dsyrk, "cblas_dsyrk"}, {(void **)&blas.ssyrk, "cblas_ssyrk"}};

/* Opens `name` with every symbol into blas; false with why (dlerror's words) when it cannot. */
static bool blas_open(const char *name, char *why, size_t size) {
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(why, size, "%s", dlerror());
    return false;
  }
  for (size_t i = 0; i < sizeof blas_syms / sizeof blas_syms[0]; i++) {
    *blas_syms[i].slot = dlsym(lib, blas_syms[i].name);
    if (!*blas_syms[i].slot) {
      snprintf(why, size, "%s has no %s", name, blas_syms[i].name);
      dlclose(lib);
      return false;
    }
  }
  blas.lib = lib;
  /* OpenBLAS says what it is: its version, the core it chose, its threads. */
  const char *(*config)(void) = (const char *(*)(void))dlsym(lib, "openblas_get_config");
  int (*threads)(void) = (int (*)(void))dlsym(lib, "openblas_get_num_threads");
  if (config && threads) {
    log_info("runtime", "kernel matrices on the CPU backend use %s (%s), %d threads", config(),
             name, threads());
  } else {
    log_info("runtime", "kernel matrices on the CPU backend use the CBLAS of %s", name);
  }
  return true;
}

static void blas_load(void) {
  const char *env = getenv("QDP_BLAS");
  char why[512];
  if (env && strcmp(env, "none") == 0) {
    log_info("runtime", "kernel matrices on the CPU backend use qdp's own loops (QDP_BLAS=none)");
    return;
  }
  if (env && env[0]) {
    if (!blas_open(env, why, sizeof why)) {
      snprintf(blas.error, sizeof blas.error,
               "QDP_BLAS=%s cannot be used: %s; set QDP_BLAS to a CBLAS library "
               "(libopenblas.so.0), to none for qdp's own loops, or unset it",
               env, why);
      log_err("runtime", "kernel matrices on the CPU backend fail: %s", blas.error);
    }
    return;
  }
  const char *names[] = {"libopenblas.so.0", "libblas.so.3"};
  char tried[sizeof names / sizeof names[0]][sizeof why];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (blas_open(names[i], tried[i], sizeof tried[i])) {
      return;
    }
  }
  log_notice("runtime",
             "kernel matrices on the CPU backend use qdp's own loops: no CBLAS was found (%s; %s); "
             "install libopenblas0-pthread, or set QDP_BLAS to a CBLAS library, for faster ones",
             tried[0], tried[1]);
}

/* The product into g as CBLAS lays it: see the file's comment. */
static void product(const void *a, int lda, int rows, const void *b, int ldb, int cols, int len,
                    bool dbl, bool upper, bool real, void *g) {
  static const double one[2] = {1, 0}, zero[2] = {0, 0};
  static const float onef[2] = {1, 0}, zerof[2] = {0, 0};
  if (real && upper) {
    if (dbl) {
      blas.dsyrk(ROW_MAJOR, UPPER, NO_TRANS, rows, len, 1, a, lda, 0, g, cols);
    } else {
      blas.ssyrk(ROW_MAJOR, UPPER, NO_TRANS, rows, len, 1, a, lda, 0, g, cols);
    }
  } else if (real) {
    if (dbl) {
      blas.dgemm(ROW_MAJOR, NO_TRANS, TRANS, rows, cols, len, 1, a, lda, b, ldb, 0, g, cols);
    } else {
      blas.sgemm(ROW_MAJOR, NO_TRANS, TRANS, rows, cols, len, 1, a, lda, b, ldb, 0, g, cols);
    }
  } else if (upper) {
    if (dbl) {
      blas.zherk(ROW_MAJOR, UPPER, NO_TRANS, rows, len, 1, a, lda, 0, g, cols);
    } else {
      blas.cherk(ROW_MAJOR, UPPER, NO_TRANS, rows, len, 1, a, lda, 0, g, cols);
    }
  } else {
    (dbl ? blas.zgemm : blas.cgemm)(ROW_MAJOR, NO_TRANS, CONJ_TRANS, rows, cols, len,
                                    dbl ? (const void *)one : onef, a, lda, b, ldb,
                                    dbl ? (const void *)zero : zerof, g, cols);
  }
}

/* What CBLAS left into what qdpk_cpu_gram writes: complex entries conjugated (0 - x, so that an
 * exact zero, as ZHERK's diagonal has, stays +0 as the loops give it), and for a tile with itself
 * zeros below the diagonal. */
static void tidy(void *g, uint64_t rows, uint64_t cols, bool dbl, bool upper, bool real) {
  size_t vs = (dbl ? sizeof(double) : sizeof(float)) * (real ? 1 : 2);
  for (uint64_t i = 0; i < rows; i++) {
    char *row = (char *)g + i * cols * vs;
    uint64_t first = upper ? i : 0;
    memset(row, 0, first * vs);
    for (uint64_t j = first; !real && j < cols; j++) {
      if (dbl) {
        double *im = (double *)(row + j * vs) + 1;
        *im = 0 - *im;
      } else {
        float *im = (float *)(row + j * vs) + 1;
        *im = 0 - *im;
      }
    }
  }
}

qdp_status cpu_gram(struct runtime_device *d, const void *a, uint64_t lda, uint64_t rows,
                    const void *b, uint64_t ldb, uint64_t cols, uint64_t len, qdp_dtype dt,
                    bool upper, bool real, void *g, struct qdp_error *reterr) {
  pthread_once(&blas_once, blas_load);
  if (blas.error[0]) {
    return qdp_error_set_at(reterr, QDP_ERR_FAILED_PRECONDITION, d->info.ordinal, -1,
                            "the kernel matrix on %s needs a CBLAS: %s", d->info.name, blas.error);
  }
  /* A tile CBLAS cannot take (sizes past its int, a tile with itself that is not square) is the
   * loops', which take any; kernel.c's tiles never are. */
  bool fits = rows <= INT_MAX && cols <= INT_MAX && len <= INT_MAX && lda <= INT_MAX &&
              ldb <= INT_MAX && (!upper || rows == cols);
  if (!blas.lib || !fits) {
    qdpk_cpu_gram(a, lda, rows, b, ldb, cols, len, dt, upper, real, g);
    return QDP_OK;
  }
  bool dbl = dt == QDP_DTYPE_COMPLEX128;
  product(a, (int)lda, (int)rows, b, (int)ldb, (int)cols, (int)len, dbl, upper, real, g);
  tidy(g, rows, cols, dbl, upper, real);
  return QDP_OK;
}
