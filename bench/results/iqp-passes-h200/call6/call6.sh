#!/bin/bash
# Call 6: the cluster pass (26 and 30 qubits) on test_qdpk and qdpk_bench; then every GPU test and
# the Python suite on this build.
export LD_LIBRARY_PATH=$PWD/.gpu/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new6; O=$OUT/r6; mkdir -p $O
fin() { tar -C $OUT -czf $OUT/r6.tgz r6 && rm -rf $O; }
trap fin EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $O/gpu.txt 2>&1
t0=$SECONDS
CK_FORK=no timeout 200 $B/tests/gpu/test_qdpk > $O/test_qdpk.txt 2>&1; echo "test_qdpk exit $? $((SECONDS-t0)) s"; grep -E "%:|F:|E:" $O/test_qdpk.txt | tail -8
timeout 120 $B/bench/qdpk_bench --no-variants > $O/qdpk_bench.txt 2>&1; echo "qdpk_bench exit $? $((SECONDS-t0)) s"
grep -E "op=(iqp|wht)" $O/qdpk_bench.txt | cut -c1-170
for t in test_runtime_cuda test_ipc_input test_ipc_output test_views_cuda; do
  CK_FORK=no timeout 120 $B/tests/gpu/$t > $O/$t.txt 2>&1; echo "$t exit $? $((SECONDS-t0)) s"; tail -n 1 $O/$t.txt
done
timeout 200 bash tests/gpu/python_gpu.sh $B > $O/python_gpu.txt 2>&1; echo "python exit $? $((SECONDS-t0)) s"; tail -n 4 $O/python_gpu.txt
