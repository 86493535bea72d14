#!/bin/bash
# Call 17: bench/two_gpu_bench.py on one H200 (its two-GPU parts say they need two; DDP's two
# ranks on GPU 0 over gloo), through run-gpu-steps.sh STEPS=two.
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new17; O=$OUT/r17; mkdir -p $O
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/gpu.txt
STEPS=two BASELINE=/nonexistent bash bench/run-gpu-steps.sh $B $B $O > $O/steps.txt 2>&1; echo "steps exit $?"
cat $O/steps.txt | cut -c1-250
