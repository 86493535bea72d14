#!/bin/bash
# Call 23: iqp with the first strided pass chunked inside the first pass (read back from L2):
# test_qdpk's iqp cases (chunked against unchunked, bit for bit); qdpk_bench and mesh_bench iqp,
# NEW and OLD (9bbf748) interleaved; test_qdpk's wht cases (26 qubits against the CPU);
# test_runtime_cuda.
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new23; O=$OUT/r23; mkdir -p $O
t0=$SECONDS
CK_FORK=no CK_RUN_CASE=iqp timeout 120 $B/new/test_qdpk > $O/test_qdpk_iqp.txt 2>&1; echo "test_qdpk iqp exit $? t=$((SECONDS-t0)) s"; grep -E "%:|F:|E:" $O/test_qdpk_iqp.txt | tail -4
for r in 1 2; do for v in old new; do
  timeout 90 $B/$v/qdpk_bench --no-variants > $O/qdpk_bench-$v$r.txt 2>&1; echo "qdpk_bench $v $r exit $?"
  grep -E "op=(iqp|wht|iqp_after_first) .*n=(26|30) " $O/qdpk_bench-$v$r.txt | grep -v natural | cut -c1-170
done; done
for v in old new; do timeout 60 $B/$v/mesh_bench iqp > $O/mesh_bench_iqp-$v.txt 2>&1; echo "mesh_bench $v exit $?"; cat $O/mesh_bench_iqp-$v.txt; done
echo "t=$((SECONDS-t0)) s"
CK_FORK=no timeout 200 $B/new/test_runtime_cuda > $O/test_runtime_cuda.txt 2>&1; echo "test_runtime_cuda exit $? t=$((SECONDS-t0)) s"; grep -E "%:|F:|E:" $O/test_runtime_cuda.txt | tail -4
CK_FORK=no CK_RUN_CASE=wht timeout 200 $B/new/test_qdpk > $O/test_qdpk_wht.txt 2>&1; echo "test_qdpk wht exit $? t=$((SECONDS-t0)) s"; grep -E "%:|F:|E:" $O/test_qdpk_wht.txt | tail -4
