#!/bin/sh
# The package as pip builds it at the repository's root (pyproject.toml: meson-python), on the CPU
# backend, and the wheel deploy/repair-wheel.py makes of it:
#   test_wheel.sh SOURCE_DIR WORK_DIR
# 1. `pip wheel .` in a fresh virtual environment of Debian's python3 (pip fetches meson-python
#    and meson into its isolated build environment): check_wheel.py reads what the wheel holds.
# 2. That wheel installed (--no-deps; grpcio, protobuf and NumPy are Debian's, through
#    --system-site-packages) into the same, still empty, environment: the console scripts qdpd and
#    qdpctl run the bundled binaries (qdpd --version prints meson.build's version), qdpctl and
#    its libqdp resolve with LD_LIBRARY_PATH unset, libqdp from the package's qdp/_lib,
#    qdp._tools.binary names the installed files, and a qdpd started through the console script
#    (with_qdpd.sh: it must also stop cleanly on SIGTERM) serves encodes that agree with
#    tests/reference/qdpref.py (encode.py).
# 3. deploy/repair-wheel.py's wheel (check_wheel.py --repaired) installed into a second fresh
#    environment: ldd finds every library of its binaries with LD_LIBRARY_PATH unset; then, in a
#    root holding the installed package and only the libraries the repair's policy expects on a
#    target (glibc's, libstdc++ and libgcc_s, OpenSSL 3), entered through unshare and chroot,
#    qdpd and qdpctl start and qdpd serves encode.py's checks to a client outside. Where no
#    namespace can be made (not root, and no user namespaces) that root is skipped, said so.
# Writes WORK_DIR afresh (its meson-logs are in WORK_DIR/meson). QDP_WHEEL=0 skips the test (exit
# 77), and so does QDP_PYTHON=0, which says PyPI cannot be reached.
set -u
src=$(cd "$1" && pwd)
work=$2
here=$src/tests/wheel
if [ "${QDP_WHEEL:-1}" = 0 ] || [ "${QDP_PYTHON:-1}" = 0 ]; then
  echo "SKIP: QDP_WHEEL=0 or QDP_PYTHON=0: no wheel is built (pip fetches meson-python from PyPI)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
version=$(sed -n "s/^ *version : '\([^']*\)'.*/\1/p" "$src/meson.build" | head -1)
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
pid=
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Every library an ELF file loads with LD_LIBRARY_PATH unset, as "soname => path".
resolve() { env -u LD_LIBRARY_PATH -u LD_PRELOAD ldd "$1"; }

# 1. The wheel.
"$py" -m venv --system-site-packages "$work/env" || exit 1
env=$work/env
start=$(date +%s)
if ! "$env/bin/pip" wheel --no-deps --disable-pip-version-check -w "$work/dist" \
  --config-settings=setup-args=-Dcuda=disabled --config-settings=build-dir="$work/meson" \
  --config-settings=compile-args=-j2 "$src" >"$work/pip-wheel.log" 2>&1; then
  cat "$work/pip-wheel.log" >&2
  echo "FAIL: pip wheel failed (log above; PyPI is needed for meson-python: QDP_WHEEL=0 skips)" >&2
  exit 1
fi
whl=$(ls "$work"/dist/qdp-*.whl)
ok "pip wheel built $(basename "$whl") in $(($(date +%s) - start)) s"
"$py" "$here/check_wheel.py" "$whl" "$src" || fail "the wheel's contents (above)"

# 2. Installed, and run through its console scripts.
"$env/bin/pip" install -q --no-deps --disable-pip-version-check "$whl" || exit 1
pkg=$("$env/bin/python" -c 'import os, qdp; print(os.path.dirname(qdp.__file__))')
case $pkg in "$env"/*) ok "qdp is imported from the environment: $pkg" ;;
  *) fail "qdp is imported from $pkg, not from $env" ;; esac
out=$(env -u LD_LIBRARY_PATH "$env/bin/qdpd" --version 2>&1)
[ "$out" = "qdpd $version" ] && ok "qdpd --version: $out" ||
  fail "qdpd --version printed '$out', not 'qdpd $version'"
out=$(env -u LD_LIBRARY_PATH "$env/bin/qdpctl" --version 2>&1)
[ "$out" = "qdpctl (libqdp $version)" ] && ok "qdpctl --version: $out" ||
  fail "qdpctl --version printed '$out'"
env -u LD_LIBRARY_PATH "$env/bin/qdpctl" --help 2>&1 | grep -q '^Usage: qdpctl' &&
  ok "qdpctl --help prints its usage" || fail "qdpctl --help printed no usage"
libs=$(resolve "$pkg/_bin/qdpctl")
echo "$libs" | grep -q "libqdp.so.0 => $pkg/_bin/../_lib/libqdp.so.0 " &&
  ok "qdpctl loads the bundled libqdp: $(echo "$libs" | grep libqdp)" ||
  fail "qdpctl does not load $pkg/_lib/libqdp.so.0: $libs"
for f in "$pkg/_bin/qdpd" "$pkg/_bin/qdpctl" "$pkg/_lib/libqdp.so.0"; do
  resolve "$f" | grep -q "not found" && fail "ldd $f: $(resolve "$f" | grep 'not found')" ||
    ok "ldd $(basename "$f"): every library found"
done
out=$("$env/bin/python" -c '
import importlib.metadata, qdp, qdp._tools as t
print(t.binary("qdpd"), t.binary("qdpctl"), qdp.__version__, importlib.metadata.version("qdp"))')
[ "$out" = "$pkg/_bin/qdpd $pkg/_bin/qdpctl $version $version" ] &&
  ok "qdp._tools.binary names the bundled files; qdp's version and the installed one: $version" ||
  fail "qdp._tools.binary and the versions: '$out'"
PYTHONPATH=$src/tests/reference sh "$src/tests/integration/with_qdpd.sh" "$env/bin/qdpd" \
  --devices cpu:1 -- "$env/bin/python" "$here/encode.py" &&
  ok "qdpd started through its console script serves encodes that agree with qdpref" ||
  fail "encodes against qdpd started through the console script"

# 3. Repaired.
if ! "$py" "$src/deploy/repair-wheel.py" "$whl" -w "$work/repaired"; then
  echo "FAIL: deploy/repair-wheel.py failed" >&2
  exit 1
fi
rwhl=$(ls "$work"/repaired/qdp-*.whl)
"$py" "$here/check_wheel.py" "$rwhl" "$src" --repaired || fail "the repaired wheel's contents"
"$py" -m venv --system-site-packages "$work/env2" || exit 1
env2=$work/env2
"$env2/bin/pip" install -q --no-deps --disable-pip-version-check "$rwhl" || exit 1
pkg2=$("$env2/bin/python" -c 'import os, qdp; print(os.path.dirname(qdp.__file__))')
count=$(find "$pkg2/_bin" "$pkg2/_lib" -type f | wc -l)
missing=$(find "$pkg2/_bin" "$pkg2/_lib" -type f -exec sh -c \
  'env -u LD_LIBRARY_PATH -u LD_PRELOAD ldd "$1" | sed -n "s|^|$1: |; /not found/p"' sh {} \;)
[ -z "$missing" ] && ok "ldd finds every library of the $count files in qdp/_bin and qdp/_lib" ||
  fail "ldd of the repaired package: $missing"

# The target's root: the package, and of the system only what the policy expects.
root=$work/root
sysdir=$(dirname "$(resolve "$pkg2/_bin/qdpd" | sed -n 's/^\tlibc.so.6 => \([^ ]*\) .*/\1/p')")
mkdir -p "$root/lib64" "$root$sysdir" "$root/proc" "$root/run"
cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
for l in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libstdc++.so.6 \
  libgcc_s.so.1 libssl.so.3 libcrypto.so.3; do
  [ -e "$sysdir/$l" ] && cp -L "$sysdir/$l" "$root$sysdir/"
done
cp -R "$pkg2" "$root/qdp"
ns="-m -p -f --kill-child --mount-proc=$root/proc"
[ "$(id -u)" -eq 0 ] || ns="-r $ns"
# shellcheck disable=SC2086 # ns is a word list on purpose
if ! unshare $ns true 2>/dev/null; then
  echo "skipped: the target's root (unshare $ns fails here: neither root nor user namespaces)"
else
  in_root() { unshare $ns chroot "$root" "$@"; }
  for b in qdpd qdpctl; do
    out=$(in_root "/qdp/_bin/$b" --version 2>&1) && ok "in the target's root: $b --version: $out" ||
      fail "in the target's root, $b --version: $out"
    out=$(in_root /lib64/ld-linux-x86-64.so.2 --list "/qdp/_bin/$b" 2>&1) &&
      ! echo "$out" | grep -q 'not found' && ok "in the target's root, $b's libraries resolve" ||
      fail "in the target's root, $b's libraries: $out"
  done
  # shellcheck disable=SC2086
  unshare $ns chroot "$root" /qdp/_bin/qdpd --socket /run/qdpd.sock --devices cpu:1 \
    2>"$work/root-qdpd.log" &
  pid=$!  # unshare's, which ignores SIGTERM while it waits for qdpd, its child
  i=0
  until grep -q "listening on unix:" "$work/root-qdpd.log" 2>/dev/null || [ $i -ge 300 ] ||
    ! kill -0 "$pid" 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
  done
  if ! grep -q "listening on unix:" "$work/root-qdpd.log"; then
    fail "qdpd in the target's root did not listen: $(tail -5 "$work/root-qdpd.log")"
  elif QDP_TARGET=unix:$root/run/qdpd.sock PYTHONPATH=$src/tests/reference \
    "$env2/bin/python" "$here/encode.py"; then
    ok "qdpd in the target's root serves encodes that agree with qdpref"
  else
    fail "encodes against qdpd in the target's root (its log: $(tail -5 "$work/root-qdpd.log"))"
  fi
  child=$(ps -o pid= --ppid "$pid" | tr -d ' ')
  [ -n "$child" ] && kill -TERM "$child"
  wait "$pid"  # unshare ends when qdpd has
  pid=
  if grep -q "listening on unix:" "$work/root-qdpd.log"; then
    grep -q "qdpd main: stopped" "$work/root-qdpd.log" && ok "qdpd in the target's root stopped" ||
      fail "qdpd in the target's root did not stop cleanly on SIGTERM"
  fi
fi
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed" >&2; exit 1; }
echo "the wheel builds, installs, runs and serves; repaired, it runs with the expected libraries"
