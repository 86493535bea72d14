#!/bin/bash
# Call 13: store patterns for a two-pass iqp at 26 qubits (probe), and qdpk_bench's passes.
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new13; O=$OUT/r13; mkdir -p $O
fin() { tar -C $OUT -czf $OUT/r13.tgz r13 && rm -rf $O; }
trap fin EXIT
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv > $O/clocks.txt
timeout 60 $B/probe > $O/probe.txt 2>&1; echo "probe exit $?"; cat $O/probe.txt
timeout 60 $B/qdpk_bench --no-variants > $O/qdpk_bench.txt 2>&1; echo "qdpk_bench exit $?"
grep -E "op=(iqp|iqp_after_first) .*n=(26|30) |op=wht_pass|op=copy" $O/qdpk_bench.txt | grep -v natural | cut -c1-150
