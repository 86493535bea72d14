#!/bin/bash
# Call 27: chunked iqp, lags scaled to a wave of tiles: test_qdpk iqp, then chunk stages x lag.
export LD_LIBRARY_PATH=$PWD/.gpu/lib
O=$OUT/r27; mkdir -p $O; P=.gpu/probe/probe27
CK_FORK=no CK_RUN_CASE=iqp timeout 120 .gpu/probe/bin/test_qdpk > $O/test_qdpk_iqp.txt 2>&1; echo "test_qdpk iqp exit $?"; grep -E "%:|F:|E:" $O/test_qdpk_iqp.txt | tail -4
timeout 100 $P 26 > $O/probe26.txt 2>&1; echo "exit $?"; cat $O/probe26.txt
timeout 200 $P 30 > $O/probe30.txt 2>&1; echo "exit $?"; cat $O/probe30.txt
