/* test_qdpk.c — every CUDA launcher of kernels/qdpk_cuda.h against its CPU twin (kernels/cpu).
 *
 * The CPU twins are the oracle: sumsq and wht must match them bit for bit (memcmp), basis exactly,
 * the other encodings within 1e-12 (complex128) or 1e-5 (complex64) of the largest reference
 * magnitude. Sizes spread from 1 to 26 qubits, with odd lengths that are not multiples of any block
 * or tile, odd row counts, rows beyond the 65535 grid-y limit, odd strides and misaligned inputs.
 * Sharded launches (first/count, shard-sized sumsq blocks, wht + butterfly) must give the bits of
 * one launch. The norm's fallback (per-row exponents, subnormal results of ldexp included) and the
 * closed forms' parameter check are compared with the CPU the same way. Outputs are poisoned with
 * NaN bytes before every launch, so an amplitude a kernel forgets to write fails the comparison.
 *
 * Check runs without fork (a CUDA context does not survive one); the binary exits 77 (a skip for
 * meson) when no CUDA device is usable.
 *
 * The suite; its tests are in one file per kernel family: test_qdpk_norm.c (sumsq, the norm's
 * fallback, amplitude), test_qdpk_closed.c (angle, phase, basis, iqp), test_qdpk_wht.c (wht,
 * butterfly) and test_qdpk_checks.c (the input checks, bad arguments), with what they share in
 * qdpk_fixture.h.
 */
#include <check.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "common.h"
#include "qdpk_fixture.h"

static Suite *qdpk_suite(void) {
  Suite *s = suite_create("qdpk_cuda");
  struct {
    const char *name;
    void (*add)(TCase *tc);
  } cases[] = {
      {"sumsq", qdpk_add_sumsq},
      {"amplitude", qdpk_add_amplitude},
      {"angle", qdpk_add_angle},
      {"phase", qdpk_add_phase},
      {"basis", qdpk_add_basis},
      {"iqp_phases", qdpk_add_iqp_phases},
      {"iqp", qdpk_add_iqp},
      {"wht", qdpk_add_wht},
      {"butterfly", qdpk_add_butterfly},
      {"find_nonfinite", qdpk_add_find_nonfinite},
      {"check_basis", qdpk_add_check_basis},
      {"check_params", qdpk_add_check_params},
      {"arguments", qdpk_add_arguments},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    TCase *tc = tcase_create(cases[i].name);
    suite_add_tcase(s, tc);
    cases[i].add(tc);
  }
  return s;
}

int main(void) {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    printf("no usable CUDA device (%s, %d devices): skipping\n", cudaGetErrorName(e), devices);
    return 77;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    printf("device 0: %s, %d multiprocessors, %zu MiB\n", prop.name, prop.multiProcessorCount,
           prop.totalGlobalMem >> 20);
  }
  t_start = seconds();
  /* One stream through every test (no fork), from the seed the inputs were always drawn from. */
  qdpt_rng_seed(0x9e3779b97f4a7c15ull);
  return qdpt_run_suite(qdpk_suite(), CK_NOFORK);
}
