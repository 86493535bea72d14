#!/bin/bash
# Call 8: strided passes loaded straight into their first layout (variant=direct) beside the default.
# tests with both.
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new8; O=$OUT/r8; mkdir -p $O
fin() { tar -C $OUT -czf $OUT/r8.tgz r8 && rm -rf $O; }
trap fin EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $O/gpu.txt 2>&1
t0=$SECONDS
for r in 1 2; do
  timeout 120 $B/bench/qdpk_bench --no-variants > $O/qdpk_bench$r.txt 2>&1; echo "qdpk_bench $r exit $? $((SECONDS-t0)) s"
  grep -E "op=(copy|iqp|wht|wht_pass|iqp_after_first) .*n=(26|30|0) " $O/qdpk_bench$r.txt | grep -v iqp_reference | cut -c1-150
done
CK_FORK=no CK_RUN_CASE=wht timeout 200 $B/tests/gpu/test_qdpk > $O/test_qdpk_wht.txt 2>&1; echo "test_qdpk wht exit $? $((SECONDS-t0)) s"; grep -E "%:|F:|E:" $O/test_qdpk_wht.txt | tail -5
