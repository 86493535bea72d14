#!/bin/sh
# Integration: the programs `meson install` puts in place run as installed, with no
# LD_LIBRARY_PATH: the installed qdpctl loads the libqdp installed beside it (whatever libdir the
# build was configured with, lib64 included) and `qdpctl status` reaches the installed qdpd.
#   test_installed_tools.sh BUILD_DIR WITH_QDPD_SH
# Installs into a fresh DESTDIR. A DESTDIR tree is the install moved elsewhere, so the loader
# finds libqdp there only the way it finds it in the real place without help: through the
# executable's own run path, relative to the executable. The test checks that libqdp.so.0
# resolves into the DESTDIR tree, not to a copy installed on this system, and not through the
# loader's cache, which only an ldconfig after a real install fills.
set -eu
build=$1
with_qdpd=$2
dest=$(mktemp -d "${TMPDIR:-/tmp}/qdp-installed.XXXXXX")
trap 'rm -rf "$dest"' EXIT
DESTDIR=$dest meson install -C "$build" --no-rebuild --quiet >/dev/null
intro() { # KIND KEY: one value of `meson introspect --KIND`
  meson introspect "$build" "--$1" | python3 -c '
import json, sys
kind, key = sys.argv[1], sys.argv[2]
data = json.load(sys.stdin)
print(data[key] if kind == "projectinfo" else next(o["value"] for o in data if o["name"] == key))
' "$1" "$2"
}
prefix=$(intro buildoptions prefix)
under() { case $1 in /*) echo "$1" ;; *) echo "$prefix/$1" ;; esac; }
bindir=$(under "$(intro buildoptions bindir)")
sbindir=$(under "$(intro buildoptions sbindir)")
libdir=$(under "$(intro buildoptions libdir)")
version=$(intro projectinfo version)
unset LD_LIBRARY_PATH
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# What the loader would load, as ldd reports it, without running the program.
got=$(LD_TRACE_LOADED_OBJECTS=1 "$dest$bindir/qdpctl" 2>&1 |
  sed -n 's/^[[:space:]]*libqdp\.so\.0 => \([^ ]*\).*/\1/p')
[ -e "$got" ] && got=$(realpath -s "$got")
want=$dest$libdir/libqdp.so.0
case $got in
  "$want") ok "the installed qdpctl loads $libdir/libqdp.so.0 (libdir $libdir)" ;;
  not | "") fail "the installed qdpctl cannot find libqdp.so.0 (installed in $libdir)" ;;
  *) fail "the installed qdpctl loads libqdp.so.0 from '$got', not the one installed with it" ;;
esac

# The installed qdpd on a socket of its own, the installed qdpctl asking it for its status.
# shellcheck disable=SC2016 # expanded by the inner shell
if out=$(sh "$with_qdpd" "$dest$sbindir/qdpd" -- sh -c '"$1" status' _ "$dest$bindir/qdpctl" 2>&1)
then
  first=$(printf '%s\n' "$out" | head -n 1)
  case $first in
    "qdpd $version at unix:"*": backend cpu"*) ok "installed qdpctl status: $first" ;;
    *) fail "installed qdpctl status printed '$first', not 'qdpd $version at ... backend cpu'" ;;
  esac
else
  fail "installed qdpctl status against the installed qdpd failed: $out"
fi
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed" >&2; exit 1; }
echo "the installed tools run without LD_LIBRARY_PATH"
