/* cuda_measure.c — measurements on a GPU (runtime/device.h: measure, abs2), on the launchers of
 * kernels/measure.cu. The measurement's small arrays (qubits, each string's Z mask and Y count)
 * go up into the tail of the scratch the executor gives; the window's values come down to the
 * host. */
#include "runtime/cuda_backend.h"

qdp_status cuda_measure(struct runtime_device *d, const struct qdpk_measure *m, const void *x,
                        uint64_t ld, const void *partner, uint64_t pld, uint64_t rows,
                        uint64_t first, uint64_t len, void *scratch, double *out,
                        struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  char *tail = (char *)scratch + qdpk_measure_scratch_bytes(m, len, rows);
  double *values = NULL;
  uint64_t *zmask = (uint64_t *)tail;
  uint32_t *ny = (uint32_t *)(tail + (size_t)m->cols * sizeof *zmask);
  uint32_t *qubits = ny + m->cols;
  QDP_TRY(rc, cuda_use_device(d, reterr));
  if (m->kind == QDPK_MEASURE_PAULI) {
    CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
           cudaMemcpyAsync(zmask, m->zmask, m->cols * sizeof *zmask, cudaMemcpyHostToDevice,
                           c->stream));
    CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
           cudaMemcpyAsync(ny, m->ny, m->cols * sizeof *ny, cudaMemcpyHostToDevice, c->stream));
  } else if (m->nq) {
    CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
           cudaMemcpyAsync(qubits, m->qubits, m->nq * sizeof *qubits, cudaMemcpyHostToDevice,
                           c->stream));
  }
  K_TRY(rc, reterr, d, "qdpk_measure",
        qdpk_measure(m, qubits, zmask, ny, x, ld, partner, pld, rows, first, len, scratch,
                     &values, c->stream));
  CU_TRY(rc, reterr, d, "cudaMemcpyAsync",
         cudaMemcpyAsync(out, values, rows * m->cols * sizeof(double), cudaMemcpyDeviceToHost,
                         c->stream));
  QDP_TRY(rc, cuda_finish(c, reterr));
out:
  if (rc != QDP_OK) {
    cuda_drain(c);
  }
  return rc;
}

qdp_status cuda_abs2(struct runtime_device *d, const void *x, uint64_t ld, uint64_t rows,
                     uint64_t count, qdp_dtype dt, void *scratch, double *out, uint64_t out_ld,
                     struct qdp_error *reterr) {
  struct cuda_device *c = cuda_of(d);
  qdp_status rc = QDP_OK;
  QDP_TRY(rc, cuda_use_device(d, reterr));
  K_TRY(rc, reterr, d, "qdpk_abs2", qdpk_abs2(x, ld, rows, count, dt, scratch, c->stream));
  CU_TRY(rc, reterr, d, "cudaMemcpy2DAsync",
         cudaMemcpy2DAsync(out, out_ld * sizeof(double), scratch, count * sizeof(double),
                           count * sizeof(double), rows, cudaMemcpyDeviceToHost, c->stream));
  QDP_TRY(rc, cuda_finish(c, reterr));
out:
  if (rc != QDP_OK) {
    cuda_drain(c);
  }
  return rc;
}
