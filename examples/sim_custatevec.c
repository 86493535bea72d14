/* sim_custatevec.c — cuStateVec on a state that qdpd serves, in place, from C.
 *
 * Encodes an angle state through libqdp on one GPU of the daemon, opens its shard writable
 * (qdp_views_open_mode with QDP_VIEWS_WRITE: the exclusive write lease, during which the daemon
 * serves no read of the state), applies L layers of RY(t) on every qubit with
 * custatevecApplyMatrix on the daemon's own memory, computes every <Z_k> with
 * custatevecComputeExpectationsOnPauliBasis, closes the views (qdp_views_close waits for the GPU
 * and returns the lease), then fetches the first amplitudes through the daemon and compares
 * both with the closed form.
 *
 * The angle state is the product state prod_k (cos x_k |0> + sin x_k |1>), qubit k being bit k
 * of the amplitude index; RY(t) turns cos a|0> + sin a|1> into cos(a + t/2)|0> + sin(a + t/2)|1>,
 * so after L layers a_k = x_k + L t / 2, amplitude b is prod_k (b_k ? sin a_k : cos a_k) and
 * <Z_k> = cos(2 a_k).
 *
 * cuStateVec (libcustatevec.so.1) and the CUDA runtime (libcudart) are loaded with dlopen at run
 * time, so the program builds without cuQuantum or CUDA. The few cuStateVec types and entry
 * points it uses are declared below from cuStateVec's public C API (custatevec.h of cuQuantum
 * 24.x / 25.x): handles are opaque pointers, enums are C ints.
 *
 * Build (from the repository root, with a libqdp build in BUILD, e.g. build/):
 *   cc -O2 -o sim_custatevec examples/sim_custatevec.c -Iclient/libqdp -Icommon \
 *      -IBUILD/client/libqdp -LBUILD/client/libqdp -lqdp -ldl -lm -Wl,-rpath,BUILD/client/libqdp
 * Run (QDP_TARGET names a GPU qdpd on this node; LD_LIBRARY_PATH must reach libcustatevec.so.1
 * and the cuBLAS it needs, e.g. a cuQuantum wheel's cuquantum/lib):
 *   ./sim_custatevec [QUBITS=20] [LAYERS=5] [T=0.37]
 * Exits 0 when every <Z_k> and fetched amplitude is within 1e-10 of the closed form, 1 on a
 * failure (printed with what to do), 2 on a mismatch.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qdp.h"

/* ---- cuStateVec and CUDA runtime declarations (loaded at run time) ------------------------ */

typedef struct custatevecContext *custatevecHandle_t; /* opaque */
typedef int custatevecStatus_t;                       /* CUSTATEVEC_STATUS_SUCCESS = 0 */
typedef int cudaDataType_t;                           /* library_types.h */
typedef int custatevecComputeType_t;
typedef int custatevecMatrixLayout_t;
typedef int custatevecPauli_t;

enum { SIM_CUDA_C_32F = 4, SIM_CUDA_C_64F = 5 };             /* cudaDataType_t */
enum { SIM_COMPUTE_32F = 1 << 2, SIM_COMPUTE_64F = 1 << 4 }; /* custatevecComputeType_t */
enum { SIM_LAYOUT_ROW = 1 };                                 /* custatevecMatrixLayout_t */
enum { SIM_PAULI_I = 0, SIM_PAULI_X = 1, SIM_PAULI_Y = 2, SIM_PAULI_Z = 3 };

struct custatevec_api {
  void *lib, *cudart;
  custatevecStatus_t (*create)(custatevecHandle_t *handle);
  custatevecStatus_t (*destroy)(custatevecHandle_t handle);
  size_t (*get_version)(void);
  const char *(*error_name)(custatevecStatus_t status);
  custatevecStatus_t (*apply_matrix_workspace)(custatevecHandle_t handle, cudaDataType_t sv_type,
                                               uint32_t n_index_bits, const void *matrix,
                                               cudaDataType_t matrix_type,
                                               custatevecMatrixLayout_t layout, int32_t adjoint,
                                               uint32_t n_targets, uint32_t n_controls,
                                               custatevecComputeType_t compute,
                                               size_t *workspace_bytes);
  custatevecStatus_t (*apply_matrix)(custatevecHandle_t handle, void *sv, cudaDataType_t sv_type,
                                     uint32_t n_index_bits, const void *matrix,
                                     cudaDataType_t matrix_type, custatevecMatrixLayout_t layout,
                                     int32_t adjoint, const int32_t *targets, uint32_t n_targets,
                                     const int32_t *controls, const int32_t *control_values,
                                     uint32_t n_controls, custatevecComputeType_t compute,
                                     void *workspace, size_t workspace_bytes);
  custatevecStatus_t (*expectations_pauli)(custatevecHandle_t handle, const void *sv,
                                           cudaDataType_t sv_type, uint32_t n_index_bits,
                                           double *values, const custatevecPauli_t **paulis,
                                           uint32_t n_arrays, const int32_t **basis_bits,
                                           const uint32_t *n_basis_bits);
  int (*set_device)(int ordinal);
  int (*synchronize)(void);
  int (*cuda_malloc)(void **ptr, size_t bytes);
  int (*cuda_free)(void *ptr);
  const char *(*cuda_error)(int err);
};

static void *sym(void *lib, const char *name, const char *libname) {
  void *p = dlsym(lib, name);
  if (!p)
    fprintf(stderr, "sim_custatevec: %s has no %s (%s): a cuQuantum or CUDA too old?\n", libname,
            name, dlerror());
  return p;
}

static void *open_first(const char *const *names, char *why, size_t why_len) {
  why[0] = '\0';
  for (size_t i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    if (h)
      return h;
    snprintf(why + strlen(why), why_len - strlen(why), "%s%s", why[0] ? "; " : "", dlerror());
  }
  return NULL;
}

static int load_api(struct custatevec_api *a) {
  static const char *const cusv_names[] = {"libcustatevec.so.1", "libcustatevec.so", NULL};
  static const char *const cudart_names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                             NULL};
  char why[2048];
  memset(a, 0, sizeof *a);
  a->lib = open_first(cusv_names, why, sizeof why);
  if (!a->lib) {
    fprintf(stderr,
            "sim_custatevec: cannot load cuStateVec (%s).\n"
            "Install NVIDIA cuQuantum (e.g. pip install custatevec-cu12, or the cuQuantum SDK) and "
            "put the folder holding libcustatevec.so.1 (a wheel's cuquantum/lib) and its cuBLAS "
            "on LD_LIBRARY_PATH.\n",
            why);
    return -1;
  }
  a->cudart = open_first(cudart_names, why, sizeof why);
  if (!a->cudart) {
    fprintf(stderr,
            "sim_custatevec: cannot load the CUDA runtime (%s): put libcudart.so of CUDA 12 or "
            "13 on LD_LIBRARY_PATH.\n",
            why);
    return -1;
  }
  int ok = 1;
#define LOAD(field, lib, name, libname) \
  do { \
    *(void **)&a->field = sym(a->lib, name, libname); \
    ok = ok && a->field != NULL; \
  } while (0)
  LOAD(create, lib, "custatevecCreate", "libcustatevec");
  LOAD(destroy, lib, "custatevecDestroy", "libcustatevec");
  LOAD(get_version, lib, "custatevecGetVersion", "libcustatevec");
  LOAD(error_name, lib, "custatevecGetErrorName", "libcustatevec");
  LOAD(apply_matrix_workspace, lib, "custatevecApplyMatrixGetWorkspaceSize", "libcustatevec");
  LOAD(apply_matrix, lib, "custatevecApplyMatrix", "libcustatevec");
  LOAD(expectations_pauli, lib, "custatevecComputeExpectationsOnPauliBasis", "libcustatevec");
  LOAD(set_device, cudart, "cudaSetDevice", "libcudart");
  LOAD(synchronize, cudart, "cudaDeviceSynchronize", "libcudart");
  LOAD(cuda_malloc, cudart, "cudaMalloc", "libcudart");
  LOAD(cuda_free, cudart, "cudaFree", "libcudart");
  LOAD(cuda_error, cudart, "cudaGetErrorString", "libcudart");
#undef LOAD
  return ok ? 0 : -1;
}

static int cusv_failed(const struct custatevec_api *a, custatevecStatus_t st, const char *call) {
  if (st == 0)
    return 0;
  fprintf(stderr, "sim_custatevec: %s failed with %s (%d)\n", call, a->error_name(st), st);
  return 1;
}

static int cuda_failed(const struct custatevec_api *a, int err, const char *call) {
  if (err == 0)
    return 0;
  fprintf(stderr, "sim_custatevec: %s failed with CUDA error %d (%s)\n", call, err,
          a->cuda_error(err));
  return 1;
}

static int qdp_failed(qdp_status st, const char *call) {
  if (st == QDP_OK)
    return 0;
  const struct qdp_errinfo *e = qdp_last_error();
  fprintf(stderr, "sim_custatevec: %s failed with %s%s%s%s: %s\n", call, qdp_status_name(st),
          e->field[0] ? " (field " : "", e->field, e->field[0] ? ")" : "", e->msg);
  if (st == QDP_ERR_UNAVAILABLE)
    fprintf(stderr, "Is a GPU qdpd running on this node? Set QDP_TARGET=unix:/path/qdpd.sock.\n");
  return 1;
}

/* ---- the program ---------------------------------------------------------------------------- */

/* Applies `layers` layers of RY(t) on every qubit to the state vector at sv (2^n complex128 on the
 * current device), then every <Z_k> into z[k]. */
static int simulate(const struct custatevec_api *a, void *sv, uint32_t n, int layers, double t,
                    double *z) {
  custatevecHandle_t h = NULL;
  if (cusv_failed(a, a->create(&h), "custatevecCreate"))
    return 1;
  /* RY(t), row-major complex128: [[c, -s], [s, c]] with c = cos(t/2), s = sin(t/2). */
  const double c = cos(t / 2), s = sin(t / 2);
  const double ry[8] = {c, 0, -s, 0, s, 0, c, 0};
  void *work = NULL;
  size_t have = 0;
  int rc = 1;
  for (int l = 0; l < layers; l++) {
    for (uint32_t q = 0; q < n; q++) {
      int32_t target = (int32_t)q;
      size_t need = 0;
      if (cusv_failed(a,
                      a->apply_matrix_workspace(h, SIM_CUDA_C_64F, n, ry, SIM_CUDA_C_64F,
                                                SIM_LAYOUT_ROW, 0, 1, 0, SIM_COMPUTE_64F, &need),
                      "custatevecApplyMatrixGetWorkspaceSize"))
        goto out;
      if (need > have) {
        if (work)
          a->cuda_free(work);
        work = NULL;
        if (cuda_failed(a, a->cuda_malloc(&work, need), "cudaMalloc"))
          goto out;
        have = need;
      }
      if (cusv_failed(
              a,
              a->apply_matrix(h, sv, SIM_CUDA_C_64F, n, ry, SIM_CUDA_C_64F, SIM_LAYOUT_ROW, 0,
                              &target, 1, NULL, NULL, 0, SIM_COMPUTE_64F, need ? work : NULL, need),
              "custatevecApplyMatrix"))
        goto out;
    }
  }
  {
    custatevecPauli_t zop = SIM_PAULI_Z;
    const custatevecPauli_t **ops = calloc(n, sizeof *ops);
    const int32_t **bits = calloc(n, sizeof *bits);
    uint32_t *nbits = calloc(n, sizeof *nbits);
    int32_t *qubit = calloc(n, sizeof *qubit);
    if (!ops || !bits || !nbits || !qubit) {
      fprintf(stderr, "sim_custatevec: out of host memory\n");
      free(ops), free(bits), free(nbits), free(qubit);
      goto out;
    }
    for (uint32_t k = 0; k < n; k++) {
      qubit[k] = (int32_t)k;
      ops[k] = &zop;
      bits[k] = &qubit[k];
      nbits[k] = 1;
    }
    custatevecStatus_t st = a->expectations_pauli(h, sv, SIM_CUDA_C_64F, n, z, ops, n, bits, nbits);
    free(ops), free(bits), free(nbits), free(qubit);
    if (cusv_failed(a, st, "custatevecComputeExpectationsOnPauliBasis"))
      goto out;
  }
  if (cuda_failed(a, a->synchronize(), "cudaDeviceSynchronize"))
    goto out;
  rc = 0;
out:
  if (work)
    a->cuda_free(work);
  a->destroy(h);
  return rc;
}

int main(int argc, char **argv) {
  uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 20;
  int layers = argc > 2 ? atoi(argv[2]) : 5;
  double t = argc > 3 ? strtod(argv[3], NULL) : 0.37;
  if (n < 1 || n > 40 || layers < 0) {
    fprintf(stderr, "usage: %s [QUBITS 1-40] [LAYERS >= 0] [T]\n", argv[0]);
    return 1;
  }
  struct custatevec_api a;
  if (load_api(&a))
    return 1;
  printf("cuStateVec %zu, libqdp %s\n", a.get_version(), qdp_version_string());

  double *x = malloc(n * sizeof *x);
  double *z = malloc(n * sizeof *z);
  if (!x || !z)
    return 1;
  for (uint32_t k = 0; k < n; k++)
    x[k] = -1.3 + 2.6 * k / (n > 1 ? n - 1 : 1);

  qdp_client *c = NULL;
  if (qdp_failed(qdp_client_create(NULL, &c), "qdp_client_create"))
    return 1;
  struct qdp_encode_opts opts = QDP_ENCODE_OPTS_INIT;
  opts.encoding = QDP_ENCODING_ANGLE;
  opts.qubits = n;
  opts.dtype = QDP_DTYPE_COMPLEX128;
  opts.policy = QDP_POLICY_SINGLE; /* one GPU: each gate is one cuStateVec call on one shard */
  struct qdp_input in = QDP_INPUT_INIT;
  in.kind = QDP_INPUT_INLINE;
  in.dtype = QDP_DTYPE_FLOAT64;
  in.rows = 1;
  in.cols = n;
  in.data = x;
  in.data_bytes = n * sizeof *x;
  struct qdp_state_info *st = NULL;
  int rc = 1;
  if (qdp_failed(qdp_encode(c, &opts, &in, &st), "qdp_encode"))
    goto done;
  printf("encoded %s: angle, %u qubits, complex128, %zu shard(s)\n", st->handle, n, st->nshards);

  const struct qdp_views *v = NULL;
  if (qdp_failed(qdp_views_open_mode(c, st->handle, st->token, QDP_VIEWS_WRITE, &v),
                 "qdp_views_open_mode(QDP_VIEWS_WRITE)")) {
    fprintf(stderr,
            "The write lease needs a GPU qdpd on this node and no other view of the "
            "state open.\n");
    goto release;
  }
  if (v->count != 1) {
    fprintf(stderr,
            "sim_custatevec: the state has %zu shards; this example simulates one shard "
            "(encode with policy single). qdp.sim in Python handles sharded states.\n",
            v->count);
    qdp_views_close(c, st->handle);
    goto release;
  }
  if (cuda_failed(&a, a.set_device(v->views[0].device_id), "cudaSetDevice")) {
    qdp_views_close(c, st->handle);
    goto release;
  }
  int sim_rc = simulate(&a, v->views[0].data, n, layers, t, z);
  /* Waits for the view's device and returns the lease: the daemon reads the new amplitudes. */
  if (qdp_failed(qdp_views_close(c, st->handle), "qdp_views_close") || sim_rc)
    goto release;

  rc = 0;
  double worst = 0;
  for (uint32_t k = 0; k < n; k++) {
    double want = cos(2 * (x[k] + layers * t / 2));
    double err = fabs(z[k] - want);
    worst = err > worst ? err : worst;
    if (k < 4 || k == n - 1)
      printf("<Z_%u> = %+.15f  closed form %+.15f  |diff| %.1e\n", k, z[k], want, err);
  }
  enum { FETCHED = 8 };
  double amp[2 * FETCHED];
  struct qdp_fetch_opts fo = QDP_FETCH_OPTS_INIT;
  uint64_t count = ((uint64_t)1 << n) < FETCHED ? (uint64_t)1 << n : FETCHED;
  fo.count = count;
  if (qdp_failed(qdp_fetch(c, st->handle, st->token, &fo, amp, sizeof amp, NULL), "qdp_fetch")) {
    rc = 1;
    goto release;
  }
  for (uint64_t b = 0; b < count; b++) {
    double want = 1;
    for (uint32_t k = 0; k < n; k++) {
      double ak = x[k] + layers * t / 2;
      want *= (b >> k) & 1 ? sin(ak) : cos(ak);
    }
    double err = hypot(amp[2 * b] - want, amp[2 * b + 1]);
    worst = err > worst ? err : worst;
    printf("psi[%llu] = %+.15e %+.1ei  closed form %+.15e  |diff| %.1e\n", (unsigned long long)b,
           amp[2 * b], amp[2 * b + 1], want, err);
  }
  printf("max |diff| %.2e: %s\n", worst, worst <= 1e-10 ? "OK (<= 1e-10)" : "MISMATCH");
  if (worst > 1e-10)
    rc = 2;

release:
  qdp_release(c, st->handle, st->token, NULL);
  qdp_state_info_free(st);
done:
  qdp_client_destroy(c);
  free(x);
  free(z);
  return rc;
}
