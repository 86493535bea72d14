#!/bin/sh
# The Python package's tests (client/python/tests) against a real qdpd of ./build, in a virtual
# environment build/pyenv made from Debian's python3 (/usr/bin/python3, as the integration tests
# use) with the system's site packages, so Debian's python3-grpcio, -protobuf, -numpy and -torch
# are used and PyPI supplies only what they lack: pytest, pyarrow for the Parquet and Arrow
# tests of test_readers.py (Debian 12 has no python3-pyarrow; its wheel is 50 MB, 156 MB
# installed, about 5 s to fetch and install), PennyLane and Qiskit for test_interop.py
# (about 300 MB with SciPy; 16 s from pip's cache, under a minute cold) and Qiskit Aer for its
# bridge tests (the CPU wheel, 14 MB; qiskit-aer-gpu is for the GPU bench), scikit-learn for
# test_sklearn.py and the digits example (about 55 MB more on that SciPy), and
# kubernetes-validate for tests/deploy's check of deploy/kubernetes (22 MB of schemas; it runs
# with this suite, in this environment). pyarrow 26 and later need NumPy 2, and Debian's is
# 1.24, which its torch is built against: hence pyarrow<26. The package is installed as a user
# installs it, `pip install ./client/python`, from a fresh copy of the folder so that no build
# leftovers are read. Writes build/python-logs/junit.xml, which .ci/run counts test by test.
set -eu
cd "$(dirname "$0")/.."
py=/usr/bin/python3
env=build/pyenv
logs=build/python-logs
rm -rf "$logs"
mkdir -p "$logs"
if [ ! -x "$env/bin/python" ]; then
  rm -rf "$env"
  "$py" -m venv --system-site-packages "$env"
fi
if ! "$env/bin/python" -c \
    'import pytest, pyarrow.parquet, pennylane, qiskit, qiskit_aer, sklearn, kubernetes_validate' \
    2>/dev/null; then
  # NumPy stays Debian's, which its torch is built against: a constraint, never an upgrade.
  "$env/bin/python" -c 'import numpy; print("numpy==" + numpy.__version__)' > "$env/constraints"
  "$env/bin/python" -m pip install -q --disable-pip-version-check -c "$env/constraints" \
    pytest 'pyarrow<26' pennylane qiskit qiskit-aer scikit-learn kubernetes-validate
fi
src=$(mktemp -d "${TMPDIR:-/tmp}/qdp-python.XXXXXX")
trap 'rm -rf "$src"' EXIT
cp -R client/python/pyproject.toml client/python/README.md client/python/qdp "$src/"
"$env/bin/python" -m pip install -q --disable-pip-version-check \
  "$src"
# Run from the build folder: the tests import the installed package, not the source tree.
cd build
QDPD="$PWD/daemon/qdpd" QDP_FRESH_DESC="$PWD/proto/qdp.desc" PYTHONDONTWRITEBYTECODE=1 \
  QDP_LIBQDP="$PWD/client/libqdp/libqdp.so.0" \
  "pyenv/bin/python" -m pytest -q -p no:cacheprovider --junitxml=python-logs/junit.xml \
  ../client/python/tests ../tests/deploy
