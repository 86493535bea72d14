#!/bin/bash
# Call 24: as call 23, the chunked first pass's A items one tile each (not groups of 8 or 16).
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new24; O=$OUT/r24; mkdir -p $O
t0=$SECONDS
CK_FORK=no CK_RUN_CASE=iqp timeout 120 $B/new/test_qdpk > $O/test_qdpk_iqp.txt 2>&1; echo "test_qdpk iqp exit $? t=$((SECONDS-t0)) s"; grep -E "%:|F:|E:" $O/test_qdpk_iqp.txt | tail -4
for r in 1 2; do for v in old new; do
  [ $v = old ] && [ $r = 2 ] && continue
  timeout 90 $B/$v/qdpk_bench --no-variants > $O/qdpk_bench-$v$r.txt 2>&1; echo "qdpk_bench $v $r exit $?"
  grep -E "op=(iqp|wht|iqp_after_first) .*n=(26|30) " $O/qdpk_bench-$v$r.txt | grep -v natural | cut -c30-150
done; done
timeout 60 $B/new/mesh_bench iqp > $O/mesh_bench_iqp-new.txt 2>&1; echo "mesh_bench new exit $?"; cat $O/mesh_bench_iqp-new.txt
echo "t=$((SECONDS-t0)) s"
