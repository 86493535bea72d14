#!/bin/bash
# The multi-rank GPU run: the runtime's GPU suite (NCCL across ranks as threads, the bounded waits),
# a qdpd world of 2 ranks x 1 GPU against 1 rank x 2 GPUs through the daemon, and the scaling and
# collective figures of jobs across ranks (bench/world_bench) beside the bare kernels
# (mesh_bench ranks). Builds nothing; writes each output under OUT_DIR.
# Usage: bench/run-world.sh BUILD_DIR OUT_DIR [QUBITS]   (LD_LIBRARY_PATH pointing at .gpu/lib;
#        QUBITS of the large amplitude job, default 31: its 16 GiB float64 input is written to
#        $TMPDIR first; 0 leaves the large job out)
set -uo pipefail
build=${1:?usage: run-world.sh BUILD_DIR OUT_DIR [QUBITS]}
out=${2:?usage: run-world.sh BUILD_DIR OUT_DIR [QUBITS]}
big=${3:-31}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
rc=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# --bind-to none: a lone rank is otherwise bound to one core, which its GPUs' threads then share.
mpi="mpirun --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader"
. "$root/bench/run-common.sh"
run test_runtime_cuda 300 "$build/tests/gpu/test_runtime_cuda"
# numpy lives in the python on PATH there, not in /usr/bin/python3.
py=$(env -u LD_LIBRARY_PATH which python3)
run world_gpu 300 sh "$root/tests/gpu/world_gpu.sh" "$build/daemon/qdpd" "$build/proto/qdp.desc" "$py" \
  "$build/tests/gpu/views_client"
wb="$build/bench/world_bench"
# Small jobs: what the collective and the job's trip to the other rank add.
TAIL=4 run small-2r1-nccl 120 $mpi -n 2 "$wb" --devices local-rank --all --encoding amplitude --qubits 16 --jobs 2000
TAIL=4 run small-2r1-mpi 120 $mpi -n 2 "$wb" --devices local-rank --all --encoding amplitude --qubits 16 --jobs 2000 --host-collectives
TAIL=4 run small-1r2-nccl 120 $mpi -n 1 "$wb" --devices 0,1 --all --encoding amplitude --qubits 16 --jobs 2000
# A large job from a file every rank reads at its own offsets.
if [ "$big" -gt 0 ]; then
f=${TMPDIR:-/tmp}/qdp-world-amp-$big.f64
"$py" -c "
import numpy as np, sys
n = 1 << $big
with open('$f', 'wb') as fh:
    step = 1 << 26
    for at in range(0, n, step):
        fh.write((0.5 + np.arange(at, at + step, dtype=np.float64) % 1013 / 1013.0).tobytes())
" || rc=1
# How fast one process reads the mapped file into memory, with one thread and with two (each
# half): the ceiling of a job that ingests it.
"$py" -c "
import numpy as np, threading, time
m = np.memmap('$f', dtype=np.float64, mode='r')
h = len(m) // 2
dst = np.empty(h, dtype=np.float64)
dst2 = np.empty(h, dtype=np.float64)
for rep in range(2):
    t = time.perf_counter(); np.copyto(dst, m[:h]); one = time.perf_counter() - t
    t = time.perf_counter()
    th = [threading.Thread(target=np.copyto, args=(d, s)) for d, s in ((dst, m[:h]), (dst2, m[h:]))]
    [x.start() for x in th]; [x.join() for x in th]
    two = time.perf_counter() - t
    print(f'file_read pass={rep} one_thread_half_gb_s={h * 8 / one / 1e9:.2f} two_threads_whole_gb_s={2 * h * 8 / two / 1e9:.2f}')
" > "$out/file-read.txt" 2>&1
cat "$out/file-read.txt"
TAIL=4 run big-2r1 300 $mpi -n 2 "$wb" --devices local-rank --all --encoding amplitude --qubits "$big" --file "$f" --jobs 5
TAIL=4 run big-1r2 300 $mpi -n 1 "$wb" --devices 0,1 --all --encoding amplitude --qubits "$big" --file "$f" --jobs 5
rm -f "$f"
fi
# iqp at 30 qubits: the global-bit stage between the ranks over NCCL, over MPI, and between the
# GPUs of one process.
TAIL=4 run iqp-2r1-nccl 300 $mpi -n 2 "$wb" --devices local-rank --all --encoding iqp --qubits 30 --jobs 3
TAIL=4 run iqp-2r1-mpi 300 $mpi -n 2 "$wb" --devices local-rank --all --encoding iqp --qubits 30 --jobs 3 --host-collectives
TAIL=4 run iqp-1r2 300 $mpi -n 1 "$wb" --devices 0,1 --all --encoding iqp --qubits 30 --jobs 3
TAIL=12 run mesh_bench_ranks 300 $mpi -n 2 "$build/bench/mesh_bench" ranks
echo "== summary"
grep -h "op=world \|op=overhead" "$out"/small-*.txt "$out"/big-*.txt "$out"/iqp-*.txt
exit $rc
