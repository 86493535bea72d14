#!/bin/bash
# Call 21: call16's pass of 10 / 11 stages in 64-byte runs over 2^26, 2^28 and 2^30 values.
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
O=$OUT/r21; mkdir -p $O
for n in 26 28 30; do timeout 60 /tmp/b/new21/pass2 $n; done > $O/pass2.txt 2>&1; echo "exit $?"; cat $O/pass2.txt
