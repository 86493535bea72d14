/* The CUDA table of encodings (qdpk_cuda.h): which launcher each encoding runs on this backend. */
#include "qdp_encodings.h"
#include "qdpk_cuda.h"

static qdp_status iqp(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                      void *out, cudaStream_t stream) {
  return qdpk_iqp(s, x, in, in_stride, 1, out, stream);
}

static qdp_status iqp_z(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                        void *out, cudaStream_t stream) {
  return qdpk_iqp(s, x, in, in_stride, 0, out, stream);
}

static const struct qdpk_cuda_encoder table[QDP_ENCODING_COUNT] = {
    [QDP_ENCODING_AMPLITUDE] = {.name = "qdpk_amplitude", .scale = qdpk_amplitude},
    [QDP_ENCODING_ANGLE] = {.name = "qdpk_angle", .encode = qdpk_angle},
    [QDP_ENCODING_BASIS] = {.name = "qdpk_basis", .encode = qdpk_basis},
    [QDP_ENCODING_IQP] = {.name = "qdpk_iqp", .encode = iqp},
    [QDP_ENCODING_IQP_Z] = {.name = "qdpk_iqp", .encode = iqp_z},
    [QDP_ENCODING_PHASE] = {.name = "qdpk_phase", .encode = qdpk_phase},
};

const struct qdpk_cuda_encoder *qdpk_cuda_encoder(qdp_encoding e) {
  return (unsigned)e < QDP_ENCODING_COUNT && table[e].name ? &table[e] : NULL;
}
