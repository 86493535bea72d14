#!/bin/bash
# Call 20: c692515 through every GPU test binary, the GPU daemon end to end, a world of two ranks and
# the Python suite on the GPU node.
export LD_LIBRARY_PATH=$PWD/.gpu/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new20; O=$OUT/r20; mkdir -p $O
fin() { rm -rf $O/steps/daemon/state* 2>/dev/null; tar -C $OUT -czf $OUT/r20.tgz r20 && rm -rf $O; }
trap fin EXIT
t0=$SECONDS
STEPS="tests daemon world python" bash bench/run-gpu-steps.sh $B $B $O/steps > $O/steps.txt 2>&1; echo "steps exit $?"
grep -E "^==|passed|failed|exit|shm-batch|amplitude-8q|health|same_bits|WORSE" $O/steps.txt | cut -c1-170 | tail -45; echo "t=$((SECONDS-t0)) s"
