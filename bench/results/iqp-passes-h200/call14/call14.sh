#!/bin/bash
# Call 14: HEAD + the simplified direct-load strided pass: every GPU test binary (test_qdpk with
# the CPU's transform bit for bit), qdpk_bench NEW and OLD (34c2970) interleaved, and the small
# job's round trip at log levels info and warning, fresh and after 60,000 jobs.
export LD_LIBRARY_PATH=$PWD/.gpu/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new14; O=$OUT/r14; mkdir -p $O
fin() { tar -C $OUT -czf $OUT/r14.tgz r14 && rm -rf $O; }
trap fin EXIT
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $O/gpu.txt 2>&1
for r in 1 2; do for v in old new; do
  bin=$B/bench/qdpk_bench; [ $v = old ] && bin=$B/old/qdpk_bench
  timeout 40 $bin --no-variants > $O/qdpk_bench-$v$r.txt 2>&1; echo "qdpk_bench $v $r exit $?"
  grep -E "op=(iqp|iqp_after_first|wht) .*n=(26|30) |op=wht_pass|op=copy" $O/qdpk_bench-$v$r.txt | grep -v natural | cut -c1-150
done; done
echo "t=$((SECONDS-t0)) s"
bash .gpu/smalljob.sh $B $O/smalljob; echo "t=$((SECONDS-t0)) s"
STEPS="tests" bash bench/run-gpu-steps.sh $B $B $O/steps > $O/steps.txt 2>&1; echo "steps exit $?"
grep -E "^==|passed|failed|exit|%:" $O/steps.txt | cut -c1-170 | tail -30; echo "t=$((SECONDS-t0)) s"
