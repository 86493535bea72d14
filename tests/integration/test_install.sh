#!/bin/sh
# Integration: what `meson install` puts where, and that the service units run what it installed.
#   test_install.sh BUILD_DIR
# Installs into a fresh DESTDIR; checks the daemon, the CLI, the library and its headers, the
# units, the sysusers file and the config are there; that each unit's ExecStart names the
# installed qdpd and config; that the installed qdpd reads the installed config; the manual
# pages, the contract and the bash completion; and that
# `systemd-analyze verify` accepts the units (their paths taken under DESTDIR; skipped where
# systemd-analyze is missing).
set -eu
build=$1
dest=$(mktemp -d "${TMPDIR:-/tmp}/qdp-install.XXXXXX")
trap 'rm -rf "$dest"' EXIT
DESTDIR=$dest meson install -C "$build" --no-rebuild --quiet >/dev/null
opts=$(meson introspect "$build" --buildoptions)
opt() {
  printf '%s' "$opts" | python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]))' "$1"
}
prefix=$(opt prefix)
under() { case $1 in /*) echo "$1" ;; *) echo "$prefix/$1" ;; esac; }
sbindir=$(under "$(opt sbindir)")
bindir=$(under "$(opt bindir)")
sysconfdir=$(under "$(opt sysconfdir)")
unitdir=$(opt systemd_unit_dir)
[ -n "$unitdir" ] || unitdir="$prefix/lib/systemd/system"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

for f in "$sbindir/qdpd" "$bindir/qdpctl"; do
  [ -x "$dest$f" ] && ok "installed $f" || fail "$f is not installed"
done
for f in "$sysconfdir/qdp/qdpd.conf" "$unitdir/qdpd.service" "$unitdir/qdpd-world.service" \
  "$prefix/lib/sysusers.d/qdp.conf" "$(under "$(opt includedir)")/qdp/qdp.h" \
  "$(under "$(opt includedir)")/qdp/qdp_defs.h" "$(under "$(opt includedir)")/qdp/qdp_dlpack.h"; do
  [ -f "$dest$f" ] && ok "installed $f" || fail "$f is not installed"
done
ls "$dest$(under "$(opt libdir)")"/libqdp.so* >/dev/null 2>&1 && ok "installed libqdp" ||
  fail "libqdp is not installed"

# What a unit's ExecStart runs: the qdpd it names and the config it passes (continuation lines
# joined).
exec_of() {
  python3 - "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
line = next(l for l in text.splitlines() if l.startswith("ExecStart="))
m = re.search(r"(/\S*/qdpd)\s+--config\s+(\S+)", line)
print(f"{m.group(1)} {m.group(2)}" if m else "")
PY
}
for u in qdpd.service qdpd-world.service; do
  exe=$(exec_of "$dest$unitdir/$u")
  if [ "$exe" = "$sbindir/qdpd $sysconfdir/qdp/qdpd.conf" ]; then
    ok "$u runs $exe"
  else
    fail "$u runs '$exe', not the installed $sbindir/qdpd with $sysconfdir/qdp/qdpd.conf"
  fi
done
grep -q '^User=qdp$' "$dest$unitdir/qdpd.service" && grep -q '^CapabilityBoundingSet=$' \
  "$dest$unitdir/qdpd.service" && ok "qdpd.service runs as qdp with no capabilities" ||
  fail "qdpd.service does not run as an unprivileged qdp user without capabilities"
grep -q '^u qdp ' "$dest$prefix/lib/sysusers.d/qdp.conf" && ok "sysusers makes the qdp user" ||
  fail "the sysusers file makes no qdp user"

# The installed qdp.pc builds a program against the installed headers and library, which runs.
libdir=$(under "$(opt libdir)")
pc_dir=$dest$libdir/pkgconfig
if [ -f "$pc_dir/qdp.pc" ] && command -v pkg-config >/dev/null 2>&1 && command -v cc >/dev/null 2>&1; then
  flags=$(PKG_CONFIG_PATH=$pc_dir PKG_CONFIG_SYSROOT_DIR=$dest pkg-config --cflags --libs qdp)
  # A sanitized build's library needs its runtime in the program too (qdp.pc does not say so).
  san=$(opt b_sanitize)
  [ "$san" = none ] || flags="$flags -fsanitize=$san"
  printf '#include <qdp.h>\n#include <stdio.h>\nint main(void) { puts(qdp_version_string()); return 0; }\n' \
    >"$dest/hello.c"
  # shellcheck disable=SC2086 # flags is a list of arguments
  if cc "$dest/hello.c" -o "$dest/hello" $flags 2>"$dest/cc.log" &&
    LD_LIBRARY_PATH=$dest$libdir "$dest/hello" >"$dest/hello.out"; then
    ok "pkg-config --cflags --libs qdp builds and links a program (libqdp $(cat "$dest/hello.out"))"
  else
    fail "a program built with pkg-config's flags ($flags): $(cat "$dest/cc.log")"
  fi
else
  [ -f "$pc_dir/qdp.pc" ] && echo "skip: no pkg-config or cc" || fail "qdp.pc is not installed"
fi

if "$dest$sbindir/qdpd" --config "$dest$sysconfdir/qdp/qdpd.conf" --print-config >/dev/null; then
  ok "the installed qdpd reads the installed config"
else
  fail "the installed qdpd refuses the installed config"
fi

# Manual pages (rendered without a warning where groff is), qdpd.conf(5) naming every option
# qdpd --help lists, the contract, and the bash completion completing from the installed qdpctl.
mandir=$(under "$(opt mandir)")
datadir=$(under "$(opt datadir)")
for page in man8/qdpd.8 man1/qdpctl.1 man5/qdpd.conf.5; do
  f=$dest$mandir/$page
  if [ ! -f "$f" ]; then
    fail "$mandir/$page is not installed"
  elif command -v groff >/dev/null 2>&1 &&
    w=$(groff -man -Tutf8 -ww -z "$f" 2>&1; echo "exit $?") && [ "$w" != "exit 0" ]; then
    fail "groff on $page: $w"
  else
    ok "installed $mandir/$page"
  fi
done
missing=""
for o in $("$dest$sbindir/qdpd" --help | sed -n 's/^  --\([a-z_]*\) .*/\1/p'); do
  grep -q "^\.BI \"$(printf '%s' "$o" | sed 's/-/\\\\-/g') = \"" "$dest$mandir/man5/qdpd.conf.5" || missing="$missing $o"
done
[ -z "$missing" ] && ok "qdpd.conf(5) has every option of qdpd --help" ||
  fail "qdpd.conf(5) lacks:$missing"
for f in qdp.proto health.proto reflection.proto qdp.desc encodings.json; do
  [ -f "$dest$datadir/qdp/$f" ] && ok "installed $datadir/qdp/$f" || fail "$datadir/qdp/$f is not installed"
done
comp=$dest$datadir/bash-completion/completions/qdpctl
if [ ! -f "$comp" ]; then
  fail "the bash completion is not installed"
elif command -v bash >/dev/null 2>&1; then
  got=$(LD_LIBRARY_PATH=$dest$(under "$(opt libdir)") bash -c '. "$1"; COMP_WORDS=("$2" en); COMP_CWORD=1; _qdpctl
    a=${COMPREPLY[*]}; COMP_WORDS=("$2" encode --encoding iqp); COMP_CWORD=3; _qdpctl
    b=${COMPREPLY[*]}; COMP_WORDS=("$2" fetch --fo); COMP_CWORD=2; _qdpctl; echo "$a|$b|${COMPREPLY[*]}"' \
    _ "$comp" "$dest$bindir/qdpctl")
  [ "$got" = "encode|iqp iqp-z|--force" ] && ok "the bash completion completes commands, values and options" ||
    fail "the bash completion gave '$got', not 'encode|iqp iqp-z|--force'"
fi

if command -v systemd-analyze >/dev/null 2>&1; then
  for u in qdpd.service qdpd-world.service; do
    sed "s#$prefix/#$dest$prefix/#g" "$dest$unitdir/$u" >"$dest/$u"
    if out=$(systemd-analyze verify "$dest/$u" 2>&1) && [ -z "$out" ]; then
      ok "systemd-analyze verify $u"
    else
      fail "systemd-analyze verify $u: $out"
    fi
  done
else
  echo "skip: no systemd-analyze"
fi
[ "$fails" -eq 0 ] || { echo "$fails install check(s) failed" >&2; exit 1; }
echo "all install checks passed"
