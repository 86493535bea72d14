#!/bin/bash
# Call 18: mesh_bench iqp (30 and 31 qubits) on one H200.
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
O=$OUT/r18; mkdir -p $O
timeout 200 /tmp/b/new18/bench/mesh_bench iqp > $O/mesh_bench_iqp.txt 2>&1; echo "mesh_bench iqp exit $?"
cat $O/mesh_bench_iqp.txt
