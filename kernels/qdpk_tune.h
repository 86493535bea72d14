/* qdpk_tune.h — launch-shape knobs of the CUDA encode kernels, for the benchmark that picks their
 * defaults (bench/qdpk_bench.c). Not part of the kernel contract (qdpk_cuda.h): the daemon never
 * sets them. Each is the number of amplitudes one thread writes (1, 4 or 16; anything else falls
 * back to the default). Set them before launching, from the thread that launches.
 */
#ifndef QDPK_TUNE_H
#define QDPK_TUNE_H

#ifdef __cplusplus
extern "C" {
#endif

extern int qdpk_tune_angle_per_thread;
extern int qdpk_tune_phase_per_thread;
extern int qdpk_tune_basis_per_thread;
extern int qdpk_tune_iqp_per_thread;

#ifdef __cplusplus
}
#endif
#endif /* QDPK_TUNE_H */
