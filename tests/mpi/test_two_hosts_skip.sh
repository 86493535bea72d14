#!/bin/sh
# two_hosts.sh where a network namespace can be made but not entered: in a chroot whose / is a
# plain folder, not a mount point, `ip netns exec` cannot remount / and fails. two_hosts.sh must
# exit 77 with that reason and leave nothing behind: no namespace and no /run/netns mount.
#   test_two_hosts_skip.sh TWO_HOSTS_SH TEST_BINARY
# The chroot is built in a private mount namespace (unshare --mount) from read-only bind mounts of
# this system's /usr and /etc, so every mount it makes ends with that namespace and the folder
# left behind holds only empty mount points. Needs root; exits 77 without it.
set -u
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: a chroot and a mount namespace need root (uid $(id -u))"
  exit 77
fi
unshare --mount true 2>/dev/null || { echo "SKIP: 'unshare --mount' cannot run here"; exit 77; }
two_hosts=$(realpath "$1")
bin=$(realpath "$2")

if [ "${QDP_TWO_HOSTS_SKIP_ROOT:-}" = "" ]; then
  root=$(mktemp -d "${TMPDIR:-/tmp}/qdp2h-chroot.XXXXXX") || exit 1
  # Removed from this namespace, where nothing was ever mounted on it.
  trap 'rm -rf "$root"' EXIT
  QDP_TWO_HOSTS_SKIP_ROOT=$root unshare --mount --propagation private sh "$0" "$two_hosts" "$bin"
  exit $?
fi

# Inside the private mount namespace: the chroot.
set -e
root=$QDP_TWO_HOSTS_SKIP_ROOT
for d in bin sbin lib lib32 lib64 libx32; do
  if [ -L "/$d" ]; then
    ln -s "$(readlink "/$d")" "$root/$d"
  elif [ -d "/$d" ]; then
    mkdir "$root/$d"
    mount --bind "/$d" "$root/$d"
    mount -o remount,bind,ro "$root/$d"
  fi
done
# The fresh /run and /tmp first: the checkout may lie beneath either, and its folders are bound
# over them next.
mkdir -p "$root/proc" "$root/sys" "$root/run" "$root/tmp"
mount -t proc proc "$root/proc"
mount --bind /sys "$root/sys"
mount -t tmpfs tmpfs "$root/run"
mount -t tmpfs tmpfs "$root/tmp"
for d in /usr /etc /dev "$(dirname "$two_hosts")" "$(dirname "$bin")"; do
  mkdir -p "$root$d"
  mount --bind "$d" "$root$d"
  mount -o remount,bind,ro "$root$d"
done
set +e

chroot "$root" sh "$two_hosts" "$bin" 2 >"$root/tmp/out.log" 2>&1
rc=$?
sed 's/^/  | /' "$root/tmp/out.log"
fails=0
if [ "$rc" -eq 77 ] && grep -q "^two_hosts: SKIP: cannot enter " "$root/tmp/out.log"; then
  echo "ok: two_hosts.sh skipped (77) and said why"
else
  echo "FAIL: two_hosts.sh exited $rc, not 77 with the reason 'cannot enter'"
  fails=$((fails + 1))
fi
left=$(chroot "$root" awk '$5 ~ /^\/run\/netns/ { print $5 }' /proc/self/mountinfo)
if [ -z "$left" ] && [ ! -e "$root/run/netns" ]; then
  echo "ok: no /run/netns mount or namespace left"
else
  echo "FAIL: left behind: ${left:-no mount} $(ls -A "$root/run/netns" 2>/dev/null)"
  fails=$((fails + 1))
fi
[ "$fails" -eq 0 ]
