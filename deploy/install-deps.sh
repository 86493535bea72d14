#!/bin/sh
# Installs the Debian 12 packages qdp builds and runs with, when any is missing. Non-interactive,
# no recommends. CUDA and NCCL are not Debian packages: when /usr/local/cuda (or $QDP_TOOLKIT_DIR)
# has nvcc the build adds the CUDA backend, otherwise it builds the CPU backend alone. clang and
# its runtimes (libFuzzer, the sanitizers) build the fuzz harnesses of tests/fuzz. python3-venv
# makes the Python package's test environment (tests/python.sh) and python3-torch lets its torch
# tests run (without it they are skipped). prometheus (and its promtool) scrapes qdpd in
# tests/integration/test_prometheus.py and checks deploy/prometheus/alerts.yml.
set -eu
pkgs="meson ninja-build pkg-config gcc libc6-dev libgrpc-dev protobuf-c-compiler libprotobuf-c-dev
  libuv1-dev libmicrohttpd-dev libopenmpi-dev openmpi-bin check libsubunit-dev libsystemd-dev
  python3 python3-grpcio python3-protobuf python3-numpy python3-venv python3-torch iproute2 procps
  clang-14 libclang-rt-14-dev prometheus"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing:$missing" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >&2
