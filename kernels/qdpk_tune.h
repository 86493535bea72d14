/* qdpk_tune.h — launch-shape knobs of the CUDA encode kernels, for the benchmark that picks their
 * defaults (bench/qdpk_bench.cu). Not part of the kernel contract (qdpk_cuda.h): the daemon never
 * sets them, and every value gives the same results (the sum-of-squares tree does not depend on
 * them). A value that names no built variant (0 included) means the default. Set them before
 * launching, from the thread that launches.
 */
#ifndef QDPK_TUNE_H
#define QDPK_TUNE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Amplitudes one thread writes: 1, 4 or 16. */
extern int qdpk_tune_angle_per_thread;
extern int qdpk_tune_phase_per_thread;
extern int qdpk_tune_basis_per_thread;
extern int qdpk_tune_iqp_per_thread;
/* Amplitude pass 2: amplitudes (complex128) or amplitude pairs (complex64) per thread, 1, 2 or 4
 * (default 2); forward = 1 walks the blocks front to back instead of back to front; streaming = 1
 * reads and writes with evict-first cache hints (__ldcs, __stcs). */
extern int qdpk_tune_amplitude_per_thread;
extern int qdpk_tune_amplitude_forward;
extern int qdpk_tune_amplitude_streaming;
/* Sum of squares: loads in flight per thread, 4 or 8 (default: 8 where loads are at most two
 * values wide and rows are at least 2048 loads long, else 4; float4 loads always use 4). */
extern int qdpk_tune_sumsq_chunks;
/* Walsh-Hadamard strided passes of 4 stages or more: 1 (default) loads each tile straight into
 * the layout of its first stages (one regrouping through shared memory at most, stages across
 * lanes where they fall there); 2 loads it in the natural layout (up to three regroupings). */
extern int qdpk_tune_wht_load;

#ifdef __cplusplus
}
#endif
#endif /* QDPK_TUNE_H */
