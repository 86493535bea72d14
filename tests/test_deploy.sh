#!/bin/sh
# What deploy/install-deps.sh installs, and what the README says the tests fetch.
#   test_deploy.sh SOURCE_DIR BUILD_DIR
# - The plain set (the quick start's) holds the Debian package of every library this build found
#   through pkg-config, of protoc-c and mpirun and of the libraries qdpd loads at run time (looked
#   up with dpkg -S), and none of the test tools (clang, Prometheus, torch); deploy/quickstart.sh
#   installs that set, tests/run-all.sh the one with --tests, which holds the plain and the
#   --python sets and the test tools.
# - The README's Quick start, where the test command is, says that the Python tests fetch from
#   PyPI every package tests/python.sh installs with pip.
# Exits 77 without dpkg (not a Debian system).
set -u
src=$1
build=$2
if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "SKIP: no dpkg-query: not a Debian system"
  exit 77
fi
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
deps() { sh "$src/deploy/install-deps.sh" "$@" --list | sort -u; }
plain=$(deps) || fail "install-deps.sh --list failed"
python=$(deps --python) || fail "install-deps.sh --python --list failed"
tests=$(deps --tests) || fail "install-deps.sh --tests --list failed"
has() { printf '%s\n' "$1" | grep -qx "$2"; }

# The package that owns a file, as dpkg knows it (architecture qualifier dropped).
owner() { dpkg -S "$1" 2>/dev/null | sed -n '1s/:.*//p'; }
found=$(meson introspect "$build" --dependencies | python3 -c '
import json, sys
print("\n".join(d["name"] for d in json.load(sys.stdin)))')
for name in $found; do
  [ "$name" = threads ] && continue
  pc=$(pkg-config --path "$name" 2>/dev/null)
  [ -n "$pc" ] || { fail "no pkg-config file for the dependency '$name'"; continue; }
  pkg=$(owner "$(realpath "$pc")")
  if [ -z "$pkg" ]; then
    fail "no Debian package owns $pc (dependency '$name')"
  elif has "$plain" "$pkg"; then
    ok "dependency '$name' ($pkg) is in the plain set"
  else
    fail "dependency '$name' comes from $pkg, which install-deps.sh's plain set lacks"
  fi
done
for prog in protoc-c mpirun; do
  path=$(command -v "$prog") || { fail "no $prog on PATH"; continue; }
  pkg=$(owner "$(realpath "$path")")
  has "$plain" "$pkg" && ok "$prog ($pkg) is in the plain set" ||
    fail "$prog comes from '$pkg', which install-deps.sh's plain set lacks"
done
# What qdpd loads at run time rather than links: the CPU backend's BLAS (daemon/runtime/cpu_gram.c).
so=libopenblas.so.0
lib=$(/sbin/ldconfig -p | sed -n "s/^[[:space:]]*$so (.*) => //p" | head -1)
if [ -z "$lib" ]; then
  fail "the loader finds no $so, which qdpd loads: run deploy/install-deps.sh"
else
  pkg=$(owner "$(realpath "$lib")")
  has "$plain" "$pkg" && ok "$so ($pkg), which qdpd loads, is in the plain set" ||
    fail "$so, which qdpd loads, comes from '$pkg', which install-deps.sh's plain set lacks"
fi
for pkg in clang-14 prometheus python3-torch; do
  has "$plain" "$pkg" && fail "the plain set installs $pkg, which only the tests need" ||
    ok "the plain set leaves out $pkg"
  has "$tests" "$pkg" && ok "the --tests set has $pkg" || fail "the --tests set lacks $pkg"
done
for pkg in $plain $python; do
  has "$tests" "$pkg" || fail "the --tests set lacks $pkg of the plain or the --python set"
done
grep -qx 'sh deploy/install-deps.sh' "$src/deploy/quickstart.sh" &&
  ok "quickstart.sh installs the plain set" ||
  fail "quickstart.sh does not run 'sh deploy/install-deps.sh'"
grep -qx 'sh deploy/install-deps.sh --tests' "$src/tests/run-all.sh" &&
  ok "run-all.sh installs the --tests set" ||
  fail "run-all.sh does not run 'sh deploy/install-deps.sh --tests'"

# The packages tests/python.sh has pip install (the arguments after the constraints file), and
# the README's Quick start section, where the test command is documented.
pypi=$(sed -n '/pip install .*-c "\$env\/constraints"/,/[^\\]$/p' "$src/tests/python.sh" |
  sed '1d; s/[\\'"'"']//g' | tr ' ' '\n' | sed -n 's/^\([A-Za-z][A-Za-z0-9_-]*\).*/\1/p')
quick=$(sed -n '/^## Quick start/,/^## /p' "$src/README.md")
[ -n "$pypi" ] || fail "found no pip install of test packages in tests/python.sh"
printf '%s' "$quick" | grep -q 'PyPI' && ok "the Quick start says the tests use PyPI" ||
  fail "the README's Quick start does not say that the Python tests need PyPI"
for p in $pypi; do
  printf '%s' "$quick" | grep -qi "\b$p\b" && ok "the Quick start names $p" ||
    fail "the README's Quick start does not name $p, which tests/python.sh fetches from PyPI"
done
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed" >&2; exit 1; }
echo "install-deps.sh's sets and the README agree with what the build and the tests use"
