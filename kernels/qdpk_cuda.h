/* qdpk_cuda.h — CUDA launchers of the encode kernels (the .cu files beside this header). Same
 * arguments and meaning as their CPU twins in qdpk.h, with device pointers, plus the stream to
 * launch on.
 *
 * A launcher never synchronizes and never allocates: it checks cudaGetLastError() right after its
 * launches and returns QDP_ERR_CUDA on failure (the CUDA error itself is left for the caller to
 * read with cudaGetLastError/cudaPeekAtLastError, which names it). 64-bit indexing throughout;
 * grids are sized so that no launch exceeds the grid limits, whatever the number of rows or
 * amplitudes. Any host thread, with the stream's device current.
 */
#ifndef QDPK_CUDA_H
#define QDPK_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "qdpk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Workspace bytes qdpk_sumsq needs for `rows` rows of an aligned block of `block` values. */
size_t qdpk_sumsq_workspace_bytes(uint64_t block, uint64_t rows);

/* ret_sums: device array of `rows` doubles, scale_log2 NULL or a device array of `rows` exponents
 * (see qdpk_cpu_sumsq; bit-identical to it). */
qdp_status qdpk_sumsq(const void *x, qdp_dtype in, uint64_t in_stride, uint64_t len, uint64_t block,
                      uint64_t rows, qdp_dtype out, const int32_t *scale_log2, void *workspace,
                      size_t workspace_bytes, double *ret_sums, cudaStream_t stream);

/* Each row's total over n parts (ascending, disjoint) along the tree over [0, 2^log2_total),
 * absent ranges zero, added in float when single: bit-identical to runtime/norm.h's
 * norm_combine. parts, vals and ret_totals (rows doubles) are device memory. */
qdp_status qdpk_norm_combine(const struct qdpk_norm_part *parts, size_t n, uint32_t log2_total,
                             int single, const double *vals, uint64_t row_stride, uint64_t rows,
                             double *ret_totals, cudaStream_t stream);

/* sumsq: device array of `rows` doubles; scale_log2: NULL or a device array of `rows` exponents
 * (see qdpk_cpu_amplitude). */
qdp_status qdpk_amplitude(const struct qdpk_span *s, const void *x, qdp_dtype in,
                          uint64_t in_stride, uint64_t len, const double *sumsq,
                          const int32_t *scale_log2, void *out, cudaStream_t stream);

qdp_status qdpk_angle(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                      void *out, cudaStream_t stream);

qdp_status qdpk_phase(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                      void *out, cudaStream_t stream);

qdp_status qdpk_basis(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                      void *out, cudaStream_t stream);

qdp_status qdpk_iqp_phases(const struct qdpk_span *s, const void *x, qdp_dtype in,
                           uint64_t in_stride, int pairs, void *out, cudaStream_t stream);

/* IQP whole (qdpk_cpu_iqp's contract and span rules; QDP_ERR_INVALID_ARGUMENT for another span):
 * the top K bits' stages in registers per low index, then the low bits' stages, all in one pass
 * that writes the state and the strided passes of qdpk_wht_from (iqp.cu gives the order). Values
 * agree with the CPU twin to rounding; bit-identical however the state is split. Dynamic shared
 * memory of about 70-86 KiB. */
qdp_status qdpk_iqp(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                    int pairs, void *out, cudaStream_t stream);

qdp_status qdpk_wht(void *data, qdp_dtype out, uint64_t count, uint64_t rows, cudaStream_t stream);

/* qdpk_wht's stages from_bit..log2(count)-1 only, the lower ones already applied (the same bits as
 * the whole transform then). */
qdp_status qdpk_wht_from(void *data, qdp_dtype out, uint64_t count, uint64_t rows,
                         uint32_t from_bit, cudaStream_t stream);

qdp_status qdpk_butterfly(void *a, void *b, qdp_dtype out, uint64_t count, cudaStream_t stream);

/* Device-side checks: write into *ret_found (device int) 1 and *ret_index (device uint64) the
 * first offending position, or 0. For inputs that already live on the GPU. */
qdp_status qdpk_find_nonfinite(const void *x, qdp_dtype in, uint64_t count, int *ret_found,
                               uint64_t *ret_index, cudaStream_t stream);

/* Writes the fault (enum qdpk_basis_fault) of the first bad row and that row, or QDPK_BASIS_OK. */
qdp_status qdpk_check_basis(const void *x, qdp_dtype in, uint64_t in_stride, uint64_t rows,
                            uint32_t qubits, int *ret_fault, uint64_t *ret_row,
                            cudaStream_t stream);

/* The closed forms' parameter check (qdpk_cpu_check_params): writes the fault (enum
 * qdpk_param_fault) of the first faulty row, that row and the value's column (cols for the sum),
 * or QDPK_PARAM_OK (row and column then 0). The sum itself is not reported. */
qdp_status qdpk_check_params(const void *x, qdp_dtype in, uint64_t in_stride, uint64_t cols,
                             uint64_t rows, qdp_dtype out, int summed, int *ret_fault,
                             uint64_t *ret_row, uint64_t *ret_col, cudaStream_t stream);

/* The kernel matrix's element-wise passes (gram.cu). gram_real: the real parts of x (`rows` rows
 * of `width` complex values, ldx values apart) into out (rows ldo values apart) as dt's real
 * type, the operands of the real products.
 * gram_add: g += h over n values (complex of dt, or its real type with `real`). gram_finish: the
 * [rows][cols] tile of g (cuBLAS's: conj(G) for complex products, G for real ones) into device
 * memory out ([rows][cols]) as qdpk_cpu_gram_finish writes it (|G|^2 as dt's real type, or G with
 * `overlaps`; `fill`: below the diagonal from above it), and with mirror (not NULL) the conjugate
 * transpose into mirror ([cols][rows]). */
qdp_status qdpk_gram_real(const void *x, uint64_t ldx, uint64_t rows, uint64_t width, qdp_dtype dt,
                          void *out, uint64_t ldo, cudaStream_t stream);
qdp_status qdpk_gram_add(void *g, const void *h, uint64_t n, qdp_dtype dt, int real,
                         cudaStream_t stream);
qdp_status qdpk_gram_finish(const void *g, uint64_t rows, uint64_t cols, qdp_dtype dt, int real,
                            int overlaps, int fill, void *out, void *mirror, cudaStream_t stream);

/* Measurements (measure.cu): the window's values of qdpk_cpu_measure, each leaf in this file's own
 * fixed order, at *ret_values inside scratch, [m->cols][rows] (scratch holds
 * qdpk_measure_scratch_bytes); m's qubits, zmask and ny arrays as device copies. qdpk_abs2:
 * |x|^2 of `count` amplitudes of each of `rows` rows (ld apart) into out ([rows][count] doubles,
 * device memory). */
size_t qdpk_measure_scratch_bytes(const struct qdpk_measure *m, uint64_t len, uint64_t rows);
qdp_status qdpk_measure(const struct qdpk_measure *m, const uint32_t *qubits_dev,
                        const uint64_t *zmask_dev, const uint32_t *ny_dev, const void *x,
                        uint64_t ld, const void *partner, uint64_t pld, uint64_t rows,
                        uint64_t first, uint64_t len, double *scratch, double **ret_values,
                        cudaStream_t stream);
qdp_status qdpk_abs2(const void *x, uint64_t ld, uint64_t rows, uint64_t count, qdp_dtype dt,
                     double *out, cudaStream_t stream);

/* The CUDA launchers of one encoding, as the runtime dispatches to them (encoders_cuda.c holds
 * one per row of QDP_ENCODINGS, qdp_defs.h), like the CPU's qdpk_cpu_encoder: a NORM reduction
 * has `scale` (pass 2, as qdpk_amplitude), every other encoding `encode`. */
struct qdpk_cuda_encoder {
  const char *name; /* how messages name the launcher: "qdpk_iqp" */
  qdp_status (*encode)(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                       void *out, cudaStream_t stream);
  qdp_status (*scale)(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                      uint64_t len, const double *sumsq, const int32_t *scale_log2, void *out,
                      cudaStream_t stream);
};

/* The CUDA launchers of encoding e; NULL for a number no row of the CUDA table has. */
const struct qdpk_cuda_encoder *qdpk_cuda_encoder(qdp_encoding e);

#ifdef __cplusplus
}
#endif
#endif /* QDPK_CUDA_H */
