/* The CPU table of encodings (qdpk.h): which kernel each encoding runs on this backend. */
#include "qdp_encodings.h"
#include "qdpk.h"

static int angle(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                 void *out) {
  qdpk_cpu_angle(s, x, in, in_stride, out);
  return 0;
}

static int phase(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                 void *out) {
  qdpk_cpu_phase(s, x, in, in_stride, out);
  return 0;
}

static int basis(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                 void *out) {
  qdpk_cpu_basis(s, x, in, in_stride, out);
  return 0;
}

static int iqp(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
               void *out) {
  return qdpk_cpu_iqp(s, x, in, in_stride, 1, out);
}

static int iqp_z(const struct qdpk_span *s, const void *x, qdp_dtype in, uint64_t in_stride,
                 void *out) {
  return qdpk_cpu_iqp(s, x, in, in_stride, 0, out);
}

static const struct qdpk_cpu_encoder table[QDP_ENCODING_COUNT] = {
    [QDP_ENCODING_AMPLITUDE] = {.name = "qdpk_cpu_amplitude", .scale = qdpk_cpu_amplitude},
    [QDP_ENCODING_ANGLE] = {.name = "qdpk_cpu_angle", .encode = angle},
    [QDP_ENCODING_BASIS] = {.name = "qdpk_cpu_basis", .encode = basis},
    [QDP_ENCODING_IQP] = {.name = "qdpk_cpu_iqp", .encode = iqp},
    [QDP_ENCODING_IQP_Z] = {.name = "qdpk_cpu_iqp", .encode = iqp_z},
    [QDP_ENCODING_PHASE] = {.name = "qdpk_cpu_phase", .encode = phase},
};

const struct qdpk_cpu_encoder *qdpk_cpu_encoder(qdp_encoding e) {
  return (unsigned)e < QDP_ENCODING_COUNT && table[e].name ? &table[e] : NULL;
}
