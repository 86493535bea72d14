#!/bin/sh
# The Python package's tests (client/python/tests) against a real qdpd of ./build, in a virtual
# environment build/pyenv made from Debian's python3 (/usr/bin/python3, as the integration tests
# use) with the system's site packages, so Debian's python3-grpcio, -protobuf, -numpy and -torch
# are used and PyPI supplies only what they lack (pytest). The package is installed as a user
# installs it, `pip install ./client/python`, from a fresh copy of the folder so that no build
# leftovers are read. Writes build/python-logs/junit.xml, which .ci/run counts test by test.
set -eu
cd "$(dirname "$0")/.."
py=/usr/bin/python3
env=build/pyenv
logs=build/python-logs
rm -rf "$logs"
mkdir -p "$logs"
if [ ! -x "$env/bin/python" ] || [ ! -x "$env/bin/pytest" ]; then
  rm -rf "$env"
  "$py" -m venv --system-site-packages "$env"
  "$env/bin/python" -m pip install -q --disable-pip-version-check pytest
fi
src=$(mktemp -d "${TMPDIR:-/tmp}/qdp-python.XXXXXX")
trap 'rm -rf "$src"' EXIT
cp -R client/python/pyproject.toml client/python/README.md client/python/qdp "$src/"
"$env/bin/python" -m pip install -q --disable-pip-version-check \
  "$src"
# Run from the build folder: the tests import the installed package, not the source tree.
cd build
QDPD="$PWD/daemon/qdpd" QDP_FRESH_DESC="$PWD/proto/qdp.desc" PYTHONDONTWRITEBYTECODE=1 \
  "pyenv/bin/python" -m pytest -q -p no:cacheprovider --junitxml=python-logs/junit.xml \
  ../client/python/tests
