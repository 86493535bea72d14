#!/bin/bash
# Call 26: chunked iqp with each chunk's high-part sums formed ahead by one block (S items), tiles
# one per item, the strided pass two chunks behind: test_qdpk iqp; qdpk_bench and mesh_bench iqp
# NEW and OLD (9bbf748); ncu DRAM bytes of the chunked kernels.
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new26; O=$OUT/r26; mkdir -p $O; P=.gpu/probe/probe26
t0=$SECONDS
CK_FORK=no CK_RUN_CASE=iqp timeout 120 $B/new/test_qdpk > $O/test_qdpk_iqp.txt 2>&1; echo "test_qdpk iqp exit $? t=$((SECONDS-t0)) s"; grep -E "%:|F:|E:" $O/test_qdpk_iqp.txt | tail -4
for r in 1 2; do for v in old new; do
  timeout 90 $B/$v/qdpk_bench --no-variants > $O/qdpk_bench-$v$r.txt 2>&1; echo "qdpk_bench $v $r exit $?"
  grep -E "op=(iqp|wht|iqp_after_first) .*n=(26|30) " $O/qdpk_bench-$v$r.txt | grep -v natural | cut -c30-150
done; done
for v in old new; do timeout 60 $B/$v/mesh_bench iqp > $O/mesh_bench_iqp-$v.txt 2>&1; echo "mesh_bench $v exit $?"; cat $O/mesh_bench_iqp-$v.txt; done
echo "t=$((SECONDS-t0)) s"
timeout 150 ncu -k regex:"iqp_whole_kernel|wht_direct" --launch-count 30 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  $P 26 0 1 > $O/ncu26.txt 2>&1; echo "ncu exit $?"
grep -E "  void|gpu__time|dram__bytes" $O/ncu26.txt | sed 's/(anonymous namespace):://g; s/(const T1.*//; s/(cplx.*//' | cut -c1-100 | paste - - - - | awk '{$1=$1};1' | sort | uniq -c | head -20
echo "t=$((SECONDS-t0)) s"
