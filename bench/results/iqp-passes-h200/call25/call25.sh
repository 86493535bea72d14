#!/bin/bash
# Call 25: probe of the chunked iqp: A only, no waits, group 1 unchunked; ncu DRAM bytes and L2 hits.
export LD_LIBRARY_PATH=$PWD/.gpu/lib
P=.gpu/probe/probe25; O=$OUT/r25; mkdir -p $O
t0=$SECONDS
timeout 120 $P 26 > $O/probe26.txt 2>&1; echo "probe 26 exit $?"; cat $O/probe26.txt
timeout 120 $P 30 > $O/probe30.txt 2>&1; echo "probe 30 exit $?"; cat $O/probe30.txt
echo "t=$((SECONDS-t0)) s"
# ncu: the first pass kernels of one unchunked and one chunked (8) run at 26 qubits
timeout 200 ncu -k regex:"iqp_whole_kernel|wht_direct" --launch-skip 0 --launch-count 30 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_read.sum \
  $P 26 0 1 > $O/ncu26.txt 2>&1; echo "ncu exit $?"
grep -E "iqp_whole_kernel|wht_direct|gpu__time|dram__bytes|hit_rate|lookup_hit|op_read.sum" $O/ncu26.txt | sed 's/(anonymous namespace):://g' | cut -c1-160 | head -80
echo "t=$((SECONDS-t0)) s"
