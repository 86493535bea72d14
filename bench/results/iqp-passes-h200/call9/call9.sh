#!/bin/bash
# Call 9: the direct-load default on every kernel test and the runtime's; qdpk_bench and
# mesh_bench iqp, 9b9ee55 (OLD) beside it; the fused pass's stall reasons (ncu).
export LD_LIBRARY_PATH=$PWD/.gpu/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new9; A=/tmp/b/old9; O=$OUT/r9; mkdir -p $O
fin() { tar -C $OUT -czf $OUT/r9.tgz r9 && rm -rf $O; }
trap fin EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $O/gpu.txt 2>&1
t0=$SECONDS
for r in 1 2; do
  for v in old new; do
    b=$A; [ $v = new ] && b=$B
    timeout 60 $b/bench/qdpk_bench --no-variants > $O/qdpk_bench-$v$r.txt 2>&1; echo "qdpk_bench $v $r exit $? $((SECONDS-t0)) s"
    grep -E "op=(copy|iqp|wht|iqp_after_first) .*n=(26|30|0) " $O/qdpk_bench-$v$r.txt | cut -c1-150
    timeout 60 $b/bench/mesh_bench iqp > $O/mesh_iqp-$v$r.txt 2>&1; echo "mesh_bench iqp $v $r exit $?"; grep -v "^$" $O/mesh_iqp-$v$r.txt | cut -c1-200 | tail -4
  done
done
grep "op=wht_pass" $O/qdpk_bench-new1.txt | cut -c1-150
CK_FORK=no timeout 200 $B/tests/gpu/test_qdpk > $O/test_qdpk.txt 2>&1; echo "test_qdpk exit $? $((SECONDS-t0)) s"; grep -E "%:|F:|E:" $O/test_qdpk.txt | tail -5
CK_FORK=no timeout 100 $B/tests/gpu/test_runtime_cuda > $O/test_runtime_cuda.txt 2>&1; echo "test_runtime_cuda exit $? $((SECONDS-t0)) s"; tail -n 1 $O/test_runtime_cuda.txt
# 20 qubits: 3 + 200 launches of the fused kernel, 26 qubits: 23 with the natural load, then these.
timeout 120 ncu -k regex:iqp_whole_kernel --launch-skip 226 --launch-count 1 \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,smsp__inst_executed.sum,gpu__time_duration.sum \
  $B/bench/qdpk_bench --no-variants > $O/ncu_stalls.txt 2>&1; echo "ncu exit $? $((SECONDS-t0)) s"
grep -E "stalled|inst_executed|duration" $O/ncu_stalls.txt | head -40
