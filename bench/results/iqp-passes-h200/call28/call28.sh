#!/bin/bash
# Call 28: the final build (the fused pass as two functions, no chunked schedule) through every
# GPU test binary, the GPU daemon end to end, a world of two ranks and the Python suite; then
# qdpk_bench and mesh_bench iqp NEW and OLD (9bbf748) interleaved.
export LD_LIBRARY_PATH=$PWD/.gpu/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new28; O=$OUT/r28; mkdir -p $O
fin() { rm -rf $O/steps/daemon/state* 2>/dev/null; tar -C $OUT -czf $OUT/r28.tgz r28 && rm -rf $O; }
trap fin EXIT
t0=$SECONDS
for r in 1 2; do for v in old new; do
  d=$B/old; [ $v = new ] && d=$B/bench
  timeout 90 $d/qdpk_bench --no-variants > $O/qdpk_bench-$v$r.txt 2>&1; echo "qdpk_bench $v $r exit $?"
  grep -E "op=(iqp|iqp_phases|wht|iqp_after_first) .*n=(26|30) " $O/qdpk_bench-$v$r.txt | grep -v natural | cut -c30-150
done; done
for v in old new; do d=$B/old; [ $v = new ] && d=$B/bench; timeout 60 $d/mesh_bench iqp > $O/mesh_bench_iqp-$v.txt 2>&1; echo "mesh_bench $v exit $?"; cat $O/mesh_bench_iqp-$v.txt; done
echo "t=$((SECONDS-t0)) s"
STEPS="tests daemon world python" bash bench/run-gpu-steps.sh $B $B $O/steps > $O/steps.txt 2>&1; echo "steps exit $?"
grep -E "^==|passed|failed|exit|shm-batch|amplitude-8q|health|same_bits|WORSE" $O/steps.txt | cut -c1-170 | tail -45; echo "t=$((SECONDS-t0)) s"
