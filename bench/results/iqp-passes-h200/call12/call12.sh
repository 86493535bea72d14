#!/bin/bash
# Call 12: the fused pass's last stage with half the shuffles (tile_lane_swap_stage): qdpk_bench
# before (4fef4a3) and after, interleaved; test_qdpk's iqp and wht cases.
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new12; O=$OUT/r12; mkdir -p $O
fin() { tar -C $OUT -czf $OUT/r12.tgz r12 && rm -rf $O; }
trap fin EXIT
t0=$SECONDS
for r in 1 2; do for v in old new; do
  timeout 30 $B/$v/qdpk_bench --no-variants > $O/qdpk_bench-$v$r.txt 2>&1; echo "qdpk_bench $v $r exit $?"
  grep -E "op=(iqp|iqp_after_first) .*n=(20|26|30) |op=iqp .*batch=(4096|1024)" $O/qdpk_bench-$v$r.txt | grep -v variant | cut -c1-110
done; done
for c in iqp wht; do
  CK_FORK=no CK_RUN_CASE=$c timeout 90 $B/new/test_qdpk > $O/test_qdpk_$c.txt 2>&1; echo "test_qdpk $c exit $? $((SECONDS-t0)) s"; grep -E "%:|F:|E:" $O/test_qdpk_$c.txt | tail -4
done
