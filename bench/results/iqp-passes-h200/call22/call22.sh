#!/bin/bash
# Call 22: the direct-load strided pass built for each run length (CL a template parameter):
# test_qdpk's wht and iqp cases; qdpk_bench (two rounds) and mesh_bench iqp, NEW and OLD
# (c692515) interleaved.
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new22; O=$OUT/r22; mkdir -p $O
t0=$SECONDS
for r in 1 2; do for v in old new; do
  timeout 60 $B/$v/qdpk_bench --no-variants > $O/qdpk_bench-$v$r.txt 2>&1; echo "qdpk_bench $v $r exit $?"
  grep -E "op=(iqp|wht) .*n=(26|30) |op=wht_pass" $O/qdpk_bench-$v$r.txt | grep -v natural | cut -c40-150
done; done
for v in old new; do timeout 60 $B/$v/mesh_bench iqp > $O/mesh_bench_iqp-$v.txt 2>&1; echo "mesh_bench $v"; cat $O/mesh_bench_iqp-$v.txt; done
echo "t=$((SECONDS-t0)) s"
for c in wht iqp; do
  CK_FORK=no CK_RUN_CASE=$c timeout 200 $B/new/test_qdpk > $O/test_qdpk_$c.txt 2>&1; echo "test_qdpk $c exit $? t=$((SECONDS-t0)) s"; grep -E "%:|F:|E:" $O/test_qdpk_$c.txt | tail -4
done
