#!/bin/bash
# Call 16: the second pass of a two-pass iqp at 26 qubits timed on its own (pass2.cu).
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
O=$OUT/r16; mkdir -p $O
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/gpu.txt
timeout 60 /tmp/b/new16/pass2 > $O/pass2.txt 2>&1; echo "pass2 exit $?"; cat $O/pass2.txt
