#!/bin/bash
# Call 11: Nsight Compute on iqp's fused first pass at 30 qubits (the default build, 4fef4a3's
# kernels): stall reasons by SASS instruction, for whoever takes that pass next.
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
B=/tmp/b/new11; O=$OUT/r11; mkdir -p $O
fin() { tar -C $OUT -czf $OUT/r11.tgz r11 && rm -rf $O; }
trap fin EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $O/gpu.txt 2>&1
# 20 qubits: 203 launches of the fused kernel; 26: 46; 30: 8 with the natural load, then these.
timeout 300 ncu -k regex:iqp_whole_kernel --launch-skip 257 --launch-count 1 --import-source no \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section InstructionStats --section SourceCounters -o /tmp/fused $B/bench/qdpk_bench --no-variants > $O/ncu_run.txt 2>&1
echo "ncu exit $?"
ncu -i /tmp/fused.ncu-rep --page details > $O/details.txt 2>&1; echo "details $?"
ncu -i /tmp/fused.ncu-rep --page source --csv --print-source sass > $O/source_sass.csv 2>&1; echo "source $? $(wc -l < $O/source_sass.csv) lines"
grep -E "Duration|Stall|stall|Registers|Occupancy" $O/details.txt | head -30
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $O/gpu.txt 2>&1
