#!/bin/sh
# Follows the README on a fresh Debian 12 as a newcomer would, and says which step worked.
#
#   sudo sh deploy/fresh-debian.sh [ROOT]
#
# Run by hand, as root, on a Debian or Ubuntu machine that reaches deb.debian.org and PyPI; it is
# not part of CI. It makes a minimal Debian 12 (bookworm) root with debootstrap (installed with
# apt-get when missing) in ROOT (default: a new folder under /var/tmp), copies this working tree
# into its /root/qdp (the files git tracks or would track, so no build folder), mounts /proc,
# /sys and /dev there, and runs in it, as root in /root/qdp with a clean environment:
#   1. each command of the README's "From Python" shell block, word for word, each in a shell of
#      its own, in the root as debootstrap left it; then that section's first Python block with
#      ~/qdp-venv/bin/python3, the environment's python3, as the README says to run it;
#   2. each command of the README's "Quick start" block (whose package installs then find most
#      of their packages installed by step 1);
#   3. `meson install -C build`, then the installed qdpd and qdpctl (`qdpctl status`) and a program
#      built with `pkg-config --cflags --libs qdp`, none with LD_LIBRARY_PATH.
# The blocks are read from README.md, so this tests the README itself. Every step runs whatever
# the one before left; after each, the processes it left in the root are killed. At the end it
# prints each step (for the README's commands, the command itself), ok or FAILED with its status
# and time, and the tail of its output; the whole logs stay in a folder it names. The mounts are
# undone on every exit, and the root is deleted unless QDP_FRESH_KEEP=1.
#
# The README's commands see HOME, PATH, LANG and TERM, and these when set here: QDP_SANITIZE,
# QDP_FUZZ, QDP_PYTHON and QDP_FUZZ_SECONDS (which tests/run-all.sh reads: QDP_SANITIZE=0
# QDP_FUZZ=0 shortens the test command a lot on a small machine) and http_proxy, https_proxy,
# no_proxy. A site whose HTTPS goes through a proxy with a CA of its own keeps that CA in
# /usr/local/share/ca-certificates: those files are copied into the root, where Debian's
# ca-certificates adds them when the README's commands install it. QDP_FRESH_MIRROR chooses the
# Debian mirror (default http://deb.debian.org/debian).
#
# Exit: 0 when every step worked, 1 when one failed, 2 when the root could not be made.
set -u
cd "$(dirname "$0")/.." || exit 2
src=$(pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "fresh-debian: needs root (debootstrap, chroot, mounts); run it with sudo" >&2
  exit 2
fi
mirror=${QDP_FRESH_MIRROR:-http://deb.debian.org/debian}
root=${1:-}
[ -n "$root" ] || root=$(mktemp -d /var/tmp/qdp-fresh.XXXXXX) || exit 2
mkdir -p "$root" && root=$(realpath "$root") || exit 2
if [ "$root" = / ] || [ -n "$(ls -A "$root")" ]; then
  echo "fresh-debian: $root is not an empty folder" >&2
  exit 2
fi
# It becomes /: every user must be able to enter it (mktemp -d made it 0700).
chmod 755 "$root" || exit 2
logs=$(mktemp -d /var/tmp/qdp-fresh-logs.XXXXXX) || exit 2
summary=$logs/summary

# Processes whose root is the new root: what the steps started and left running.
kill_inside() {
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -KILL "${p#/proc/}" 2>/dev/null
  done
  sleep 0.2
}
# Mount points at or under the root, deepest first.
mounts_inside() {
  awk -v r="$root" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | sort -ru
}
cleanup() {
  kill_inside
  # A folder can hold several mounts stacked on it: a few rounds.
  for _ in 1 2 3; do
    for m in $(mounts_inside); do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
    done
  done
  if [ -n "$(mounts_inside)" ]; then
    echo "fresh-debian: mounts are left under $root; it is not deleted" >&2
  elif [ "${QDP_FRESH_KEEP:-0}" = 1 ]; then
    echo "fresh-debian: the root is kept in $root"
  else
    rm -rf --one-file-system "$root"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

if ! command -v debootstrap >/dev/null 2>&1; then
  echo "fresh-debian: installing debootstrap"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends debootstrap; } >"$logs/debootstrap-install.log" 2>&1 || {
    tail -n 20 "$logs/debootstrap-install.log" >&2
    exit 2
  }
fi
echo "fresh-debian: debootstrap bookworm into $root (logs in $logs)"
if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$logs/debootstrap.log" 2>&1; then
  tail -n 20 "$logs/debootstrap.log" >&2
  exit 2
fi

# The working tree as a clone would have it: tracked and untracked files, not the ignored ones.
mkdir "$root/root/qdp"
git -C "$src" ls-files -z --cached --others --exclude-standard |
  (cd "$src" && xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' _) |
  (cd "$src" && tar --null -T - -cf -) | tar -xf - -C "$root/root/qdp" || exit 2
cp /etc/resolv.conf "$root/etc/resolv.conf"
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
# The root a mount point of its own, as / is on a machine (`ip netns exec` needs that).
mount --bind "$root" "$root" &&
  mount -t proc proc "$root/proc" &&
  mount -t sysfs sysfs "$root/sys" &&
  mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev" || exit 2

# The README's code blocks: the Nth block of LANG in the section whose title starts with TITLE.
block() { # TITLE LANG N
  awk -v title="## $1" -v open="\`\`\`$2" -v n="$3" '
    /^## / { insec = (index($0, title) == 1); next }
    inblock && $0 == "```" { exit }
    inblock { print; next }
    insec && $0 == open && ++k == n { inblock = 1 }
  ' "$src/README.md"
}
py_sh=$(block "From Python" sh 1)
py_code=$(block "From Python" python 1)
quick=$(block "Quick start" sh 1)
for b in py_sh py_code quick; do
  eval "[ -n \"\$$b\" ]" || { echo "fresh-debian: README.md lacks the block '$b'" >&2; exit 2; }
done

passenv=""
for v in QDP_SANITIZE QDP_FUZZ QDP_PYTHON QDP_FUZZ_SECONDS http_proxy https_proxy no_proxy; do
  eval "[ -n \"\${$v+set}\" ]" && passenv="$passenv $v=$(eval "printf '%s' \"\$$v\"")"
done
n=0
failed=0
step() { # TITLE SCRIPT: runs SCRIPT with sh in /root/qdp inside the root
  n=$((n + 1))
  printf '%s\n' "$2" >"$root/tmp/step-$n.sh"
  echo "fresh-debian: step $n: $1"
  t0=$(date +%s)
  # shellcheck disable=SC2086 # passenv is a list of NAME=VALUE words
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin $passenv \
    /bin/sh -c 'cd /root/qdp && exec sh "$1"' _ "/tmp/step-$n.sh" \
    </dev/null >"$logs/step-$n.log" 2>&1 &
  # Waited for in the background, so that a signal stops the run at once (the trap then kills
  # what is left inside).
  wait $!
  rc=$?
  secs=$(($(date +%s) - t0))
  kill_inside
  if [ "$rc" -eq 0 ]; then
    r="ok"
  else
    r="FAILED (exit $rc)"
    failed=$((failed + 1))
  fi
  {
    echo "== step $n: $1: $r, $secs s"
    tail -n "${QDP_FRESH_TAIL:-15}" "$logs/step-$n.log" | sed 's/^/   | /'
  } >>"$summary"
  echo "fresh-debian: step $n: $r, $secs s"
}
# Each command of a README block (its lines but blank and comment lines) as a step of its own.
commands() { # SECTION BLOCK
  printf '%s\n' "$2" | while IFS= read -r line; do
    case $line in '' | '#'*) continue ;; esac
    printf '%s\n' "$line"
  done >"$logs/commands.txt"
  while IFS= read -r line; do
    step "$1: $line" "$line"
  done <"$logs/commands.txt"
}

# 1. From Python: its commands, then its example with the environment's python3.
commands "From Python" "$py_sh"
printf '%s\n' "$py_code" >"$root/tmp/readme-example.py"
# shellcheck disable=SC2088 # the step's shell expands ~, inside the root
step "From Python: its first Python block, with ~/qdp-venv/bin/python3" \
  '~/qdp-venv/bin/python3 /tmp/readme-example.py'

# 2. Each Quick start command.
commands "Quick start" "$quick"

# 3. The install, and what it installed run as installed.
step "meson install -C build; the installed qdpd, qdpctl status and a program using libqdp" '
set -e
meson install -C build
unset LD_LIBRARY_PATH
dir=$(mktemp -d)
qdpd --socket "$dir/s" --devices cpu:1 2>"$dir/log" &
i=0
while [ ! -S "$dir/s" ] && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
QDP_TARGET=unix:$dir/s qdpctl status
printf "#include <qdp.h>\n#include <stdio.h>\n%s\n" \
  "int main(void) { puts(qdp_version_string()); return 0; }" >"$dir/hello.c"
cc "$dir/hello.c" -o "$dir/hello" $(pkg-config --cflags --libs qdp)
echo "a program linked with libqdp: libqdp $("$dir/hello")"'

echo
echo "fresh-debian: Debian 12 (bookworm, $mirror) in $root; logs in $logs"
cat "$summary"
echo "fresh-debian: $((n - failed)) of $n steps ok"
[ "$failed" -eq 0 ] || exit 1
