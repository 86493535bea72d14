/* cuda_gram.c — the kernel matrix's ops on a GPU (runtime/device.h: gram, real_rows, gram_add,
 * gram_finish).
 *
 * The block products are cuBLAS's: ZHERK/CHERK for a tile of a state with itself (the Hermitian
 * half, half the work), ZGEMM/CGEMM otherwise; for states whose amplitudes are all real,
 * DSYRK/DGEMM (SSYRK/SGEMM) on their real parts (real_rows: a quarter of the work). qdp's rows
 * are row-major [rows][ld], which cuBLAS reads as column-major [ld][rows]: a tile A' of len x
 * rows. B'^H A' (and A'^H A' for the half) then lands, read back row-major, as conj(A^H B): the
 * ops keep complex products conjugated and gram_finish takes the conjugate back
 * (kernels/gram.cu). cuBLAS is deterministic for one shape on
 * one GPU (no atomics by default), and the executor gives every block the same shape.
 *
 * libcublas is loaded when the first kernel matrix is asked for, not linked: qdpd runs (and
 * encodes) where it is missing, and a kernel there is FAILED_PRECONDITION saying how to get it.
 * One handle per device, made on first use and kept, used under the device's blas lock (a
 * handle's stream is its state).
 */
#include <dlfcn.h>
#include <inttypes.h>

#include <cublas_v2.h>

#include "runtime/cuda_backend.h"

struct cublas_api {
  void *lib;
  __typeof__(cublasCreate_v2) *create;
  __typeof__(cublasDestroy_v2) *destroy;
  __typeof__(cublasSetStream_v2) *set_stream;
  __typeof__(cublasZgemm_v2) *zgemm;
  __typeof__(cublasCgemm_v2) *cgemm;
  __typeof__(cublasZherk_v2) *zherk;
  __typeof__(cublasCherk_v2) *cherk;
  __typeof__(cublasDgemm_v2) *dgemm;
  __typeof__(cublasSgemm_v2) *sgemm;
  __typeof__(cublasDsyrk_v2) *dsyrk;
  __typeof__(cublasSsyrk_v2) *ssyrk;
  char error[256]; /* why it could not be loaded; "" when loaded */
};

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static struct cublas_api blas;

/* Where libcublas is looked for: $QDP_CUBLAS, then the loader's paths, then the toolkit's. */
static void blas_load(void) {
  const char *names[] = {getenv("QDP_CUBLAS"), "libcublas.so.13", "libcublas.so.12",
                         "/usr/local/cuda/lib64/libcublas.so.13", "libcublas.so"};
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !blas.lib; i++) {
    if (names[i] && names[i][0]) {
      blas.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    }
  }
  if (!blas.lib) {
    snprintf(blas.error, sizeof blas.error,
             "cuBLAS (libcublas.so.13) was not found: install the CUDA toolkit's libcublas, or "
             "pip install nvidia-cublas and set QDP_CUBLAS to its libcublas.so.13");
    return;
  }
  const struct {
    void **slot;
    const char *name;
  } syms[] = {{(void **)&blas.create, "cublasCreate_v2"},
              {(void **)&blas.destroy, "cublasDestroy_v2"},
              {(void **)&blas.set_stream, "cublasSetStream_v2"},
              {(void **)&blas.zgemm, "cublasZgemm_v2"},
              {(void **)&blas.cgemm, "cublasCgemm_v2"},
              {(void **)&blas.zherk, "cublasZherk_v2"},
              {(void **)&blas.cherk, "cublasCherk_v2"},
              {(void **)&blas.dgemm, "cublasDgemm_v2"},
              {(void **)&blas.sgemm, "cublasSgemm_v2"},
              {(void **)&blas.dsyrk, "cublasDsyrk_v2"},
              {(void **)&blas.ssyrk, "cublasSsyrk_v2"}};
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(blas.lib, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(blas.error, sizeof blas.error, "the cuBLAS found has no %s", syms[i].name);
      dlclose(blas.lib);
      blas.lib = NULL;
      return;
    }
  }
}

static qdp_status blas_failed(const struct runtime_device *d, cublasStatus_t st, const char *call,
                              struct qdp_error *err) {
  return qdp_error_set(err, QDP_ERR_CUDA, NULL, "%s on %s failed: cuBLAS status %d", call,
                       d->info.name, (int)st);
}

/* The device's handle on its work stream, with the blas lock held; NULL and err set on failure
 * (the lock then released). */
static cublasHandle_t blas_take(struct cuda_device *c, struct qdp_error *err) {
  pthread_once(&blas_once, blas_load);
  if (!blas.lib) {
    qdp_error_set(err, QDP_ERR_FAILED_PRECONDITION, NULL, "the kernel matrix on %s needs %s",
                  c->base.info.name, blas.error);
    return NULL;
  }
  pthread_mutex_lock(&c->blas_lock);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (!c->blas) {
    cublasHandle_t h = NULL;
    st = blas.create(&h);
    c->blas = h;
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = blas.set_stream((cublasHandle_t)c->blas, c->stream);
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    pthread_mutex_unlock(&c->blas_lock);
    blas_failed(&c->base, st, "cublasCreate", err);
    return NULL;
  }
  return (cublasHandle_t)c->blas;
}

void cuda_gram_destroy(struct cuda_device *c) {
  if (c->blas && blas.lib) {
    (void)blas.destroy((cublasHandle_t)c->blas);
  }
  c->blas = NULL;
}

/* The block product on handle h: see the file's comment for the layouts. */
static cublasStatus_t product(cublasHandle_t h, const void *a, int lda, int n, const void *b,
                              int ldb, int m, int k, qdp_dtype dt, bool upper, bool real, void *g,
                              const char **ret_call) {
  bool dbl = dt == QDP_DTYPE_COMPLEX128;
  if (real && upper) {
    const double one = 1, zero = 0;
    const float onef = 1, zerof = 0;
    *ret_call = dbl ? "cublasDsyrk" : "cublasSsyrk";
    return dbl ? blas.dsyrk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, n, k, &one, a, lda, &zero, g, n)
               : blas.ssyrk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, n, k, &onef, a, lda, &zerof,
                            g, n);
  }
  if (real) {
    const double one = 1, zero = 0;
    const float onef = 1, zerof = 0;
    *ret_call = dbl ? "cublasDgemm" : "cublasSgemm";
    return dbl ? blas.dgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, b, ldb, a, lda, &zero, g, m)
               : blas.sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &onef, b, ldb, a, lda, &zerof,
                            g, m);
  }
  if (upper) {
    const double one = 1, zero = 0;
    const float onef = 1, zerof = 0;
    *ret_call = dbl ? "cublasZherk" : "cublasCherk";
    return dbl ? blas.zherk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_C, n, k, &one, a, lda, &zero, g, n)
               : blas.cherk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_C, n, k, &onef, a, lda, &zerof,
                            g, n);
  }
  const cuDoubleComplex one = {1, 0}, zero = {0, 0};
  const cuComplex onef = {1, 0}, zerof = {0, 0};
  *ret_call = dbl ? "cublasZgemm" : "cublasCgemm";
  return dbl ? blas.zgemm(h, CUBLAS_OP_C, CUBLAS_OP_N, m, n, k, &one, b, ldb, a, lda, &zero, g, m)
             : blas.cgemm(h, CUBLAS_OP_C, CUBLAS_OP_N, m, n, k, &onef, b, ldb, a, lda, &zerof, g,
                          m);
}

qdp_status cuda_gram(struct runtime_device *d, const void *a, uint64_t lda, uint64_t rows,
                     const void *b, uint64_t ldb, uint64_t cols, uint64_t len, qdp_dtype dt,
                     bool upper, bool real, void *g, struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  QDP_TRY(rc, cuda_use_device(d, reterr));
  if (rows > INT32_MAX || cols > INT32_MAX || len > INT32_MAX || lda > INT32_MAX ||
      ldb > INT32_MAX) {
    return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL,
                         "a kernel tile of %" PRIu64 " x %" PRIu64 " over %" PRIu64
                         " amplitudes is past cuBLAS's 32-bit sizes",
                         rows, cols, len);
  }
  cublasHandle_t h = blas_take(c, reterr);
  if (!h) {
    rc = reterr ? reterr->code : QDP_ERR_FAILED_PRECONDITION;
    goto out;
  }
  const char *call = "";
  cublasStatus_t st = product(h, a, (int)lda, (int)rows, b, (int)ldb, (int)cols, (int)len, dt,
                              upper, real, g, &call);
  pthread_mutex_unlock(&c->blas_lock);
  if (st != CUBLAS_STATUS_SUCCESS) {
    rc = blas_failed(d, st, call, reterr);
    goto out;
  }
  QDP_TRY(rc, cuda_finish(c, reterr));
out:
  if (rc != QDP_OK) {
    cuda_drain(c);
  }
  return rc;
}

qdp_status cuda_real_rows(struct runtime_device *d, void *dst, uint64_t dst_pitch, const void *src,
                          uint64_t src_pitch, uint64_t width, uint64_t rows, qdp_dtype dt,
                          struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  unsigned es = qdp_dtype_size(dt);
  QDP_TRY(rc, cuda_use_device(d, reterr));
  K_TRY(rc, reterr, d, "qdpk_gram_real",
        qdpk_gram_real(src, src_pitch / es, rows, width, dt, dst, dst_pitch / (es / 2),
                       c->stream));
  QDP_TRY(rc, cuda_finish(c, reterr));
out:
  if (rc != QDP_OK) {
    cuda_drain(c);
  }
  return rc;
}

qdp_status cuda_gram_add(struct runtime_device *d, void *g, const void *h, uint64_t n,
                         qdp_dtype dt, bool real, struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  QDP_TRY(rc, cuda_use_device(d, reterr));
  K_TRY(rc, reterr, d, "qdpk_gram_add", qdpk_gram_add(g, h, n, dt, real, c->stream));
  QDP_TRY(rc, cuda_finish(c, reterr));
out:
  if (rc != QDP_OK) {
    cuda_drain(c);
  }
  return rc;
}

qdp_status cuda_gram_finish(struct runtime_device *d, const void *g, uint64_t rows, uint64_t cols,
                            qdp_dtype dt, bool real, bool overlaps, bool fill, void *scratch,
                            void *out, void *mirror, uint64_t pitch_bytes,
                            struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  size_t es = qdp_dtype_size(dt) / (overlaps ? 1 : 2);
  char *tile = scratch, *back = tile + rows * cols * es;
  QDP_TRY(rc, cuda_use_device(d, reterr));
  K_TRY(rc, reterr, d, "qdpk_gram_finish",
        qdpk_gram_finish(g, rows, cols, dt, real, overlaps, fill, tile, mirror ? back : NULL,
                         c->stream));
  CU_TRY(rc, reterr, d, "cudaMemcpy2DAsync",
         cudaMemcpy2DAsync(out, pitch_bytes, tile, cols * es, cols * es, rows,
                           cudaMemcpyDefault, c->stream));
  if (mirror) {
    CU_TRY(rc, reterr, d, "cudaMemcpy2DAsync",
           cudaMemcpy2DAsync(mirror, pitch_bytes, back, rows * es, rows * es, cols,
                             cudaMemcpyDefault, c->stream));
  }
  QDP_TRY(rc, cuda_finish(c, reterr));
out:
  if (rc != QDP_OK) {
    cuda_drain(c);
  }
  return rc;
}
