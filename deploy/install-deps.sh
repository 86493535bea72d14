#!/bin/sh
# Installs the Debian 12 packages qdp needs, when any is missing. Non-interactive, no recommends.
#   install-deps.sh            what building and running qdpd, qdpctl and libqdp need (the quick
#                              start: deploy/quickstart.sh)
#   install-deps.sh --python   that and what the Python package `qdp` uses from Debian
#   install-deps.sh --tests    all that and what the test suites need (tests/run-all.sh, CI)
#   install-deps.sh ... --list prints the packages, one a line, and installs nothing
#
# Building and running: the compiler, meson and ninja, the libraries qdpd and libqdp link (gRPC,
# protobuf-c, libuv, libmicrohttpd, and OpenSSL's libcrypto, with which qdpd checks its TLS
# certificate and key before gRPC takes them), check (the unit tests are part of every build), Open MPI
# (without it qdpd builds, but cannot run as a world of ranks, and the mpi suite is not defined:
# a build configured before it was installed stays without it), dpkg-dev (meson's default
# libdir is Debian's multiarch folder only where dpkg-architecture is found), and Python 3 with
# NumPy (the build embeds the wire contract with a Python script; the quick start prints the state
# with NumPy); and OpenBLAS, which qdpd loads at the first kernel matrix on the CPU backend (without
# it, qdp's own loops compute those products, slower). CUDA and NCCL are not Debian packages: when
# /usr/local/cuda (or $QDP_TOOLKIT_DIR) has nvcc the build adds the CUDA backend, otherwise it
# builds the CPU backend alone.
#
# Python: python3-venv (a virtual environment, with pip, that sees Debian's packages through
# --system-site-packages) and Debian's gRPC, protobuf and torch, which pip would otherwise fetch
# (torch as a build that does not match Debian's NumPy).
#
# Testing adds: clang and its runtimes (libFuzzer, the sanitizers) for the fuzz harnesses of
# tests/fuzz; prometheus (and its promtool), which scrapes qdpd in
# tests/integration/test_prometheus.py and checks deploy/prometheus/alerts.yml; iproute2 for the
# simulated hosts of the mpi suite; procps and libsystemd-dev; patchelf, with which
# deploy/repair-wheel.py sets the run paths in a wheel (the wheel suite repairs the one it
# builds); libblas3, Debian's reference CBLAS, on which tests/unit/test_runtime_blas.c runs the
# CPU backend's products besides OpenBLAS; openssl, the command with which the TLS tests make
# their CAs and certificates. The integration suite's independent client uses
# Debian's Python gRPC and protobuf, and the Python package's tests (tests/python.sh) its virtual
# environment, with more packages from PyPI.
set -eu
build_pkgs="meson ninja-build pkg-config gcc libc6-dev dpkg-dev libgrpc-dev protobuf-c-compiler
  libprotobuf-c-dev libuv1-dev libmicrohttpd-dev libssl-dev libopenmpi-dev openmpi-bin check libsubunit-dev
  python3 python3-numpy libopenblas0-pthread"
python_pkgs="python3-venv python3-grpcio python3-protobuf python3-torch"
test_pkgs="iproute2 procps libsystemd-dev clang-14 libclang-rt-14-dev prometheus patchelf libblas3
  openssl"
python=no
tests=no
list=no
for arg in "$@"; do
  case $arg in
    --python) python=yes ;;
    --tests) tests=yes ;;
    --list) list=yes ;;
    *)
      echo "install-deps.sh: unknown argument '$arg' (expected --python, --tests, --list)" >&2
      exit 2
      ;;
  esac
done
pkgs=$build_pkgs
[ "$python" = yes ] || [ "$tests" = yes ] && pkgs="$pkgs $python_pkgs"
[ "$tests" = yes ] && pkgs="$pkgs $test_pkgs"
if [ "$list" = yes ]; then
  # shellcheck disable=SC2086 # a word list on purpose
  printf '%s\n' $pkgs
  exit 0
fi
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
