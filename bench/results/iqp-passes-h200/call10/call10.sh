#!/bin/bash
# Call 10: ced9de0 (the direct loads the default) through the runtime's GPU tests, the daemon end
# to end, a world of two ranks and the Python suite.
export LD_LIBRARY_PATH=$PWD/.gpu/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new10; O=$OUT/r10; mkdir -p $O
fin() { rm -rf $O/daemon/state* 2>/dev/null; tar -C $OUT -czf $OUT/r10.tgz r10 && rm -rf $O; }
trap fin EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $O/gpu.txt 2>&1
STEPS="tests daemon world python" bash bench/run-gpu-steps.sh $B $B $O > $O/steps.txt 2>&1; echo "steps exit $?"
grep -E "^==|passed|failed|exit|shm-batch|amplitude-8q|iqp" $O/steps.txt | cut -c1-170 | tail -40
