#!/bin/sh
# Runs an MPI test program over 2 ranks on two simulated hosts: two network namespaces joined by a
# veth pair, each rank in its own namespace with its own host name (UTS namespace), Open MPI over
# TCP between them, so the cross-host path (oob and btl over TCP, no shared memory) runs for real.
#
# Usage: two_hosts.sh TEST_BINARY [ARG...]   (ARG defaults to "2", the world size the test checks)
#
# Exits 77 (meson's SKIP), with the reason, when the namespaces cannot be made or used: not root,
# no /proc, no `ip`, `unshare` or `mpirun`, the kernel refuses a namespace or a veth pair, or a
# namespace cannot be entered (`ip netns exec` in a chroot whose / is not a mount point).
# Otherwise exits with mpirun's status. The namespaces, the processes left in them, the /run/netns
# mount that `ip netns add` made and the temporary files go away on any exit.
#
# The test program sees QDP_TEST_EXPECT_DISTINCT_HOSTS=1: the ranks must report different host
# names.
set -u

skip() {
  echo "two_hosts: SKIP: $*"
  exit 77
}

if [ $# -lt 1 ]; then
  echo "usage: $0 TEST_BINARY [ARG...]" >&2
  exit 2
fi
bin=$1
shift
if [ $# -eq 0 ]; then
  set -- 2
fi
case $bin in
  /*) ;;
  *) bin=$(pwd)/$bin ;;
esac
if [ ! -x "$bin" ]; then
  echo "two_hosts: $bin is not an executable" >&2
  exit 2
fi

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (uid $(id -u))"
for cmd in ip unshare mpirun; do
  command -v "$cmd" >/dev/null 2>&1 || skip "no '$cmd' command on PATH"
done

# Unique per run, so parallel or leftover runs never collide. The subnet lives only inside the two
# namespaces; an uncommon one keeps it apart from anything a reader might confuse it with.
ns_a=qdp2h-a-$$
ns_b=qdp2h-b-$$
subnet=10.201.77.0/24
addr_a=10.201.77.1
addr_b=10.201.77.2
host_a=qdp2h-a-$$
host_b=qdp2h-b-$$
tmp=

# Whether /run/netns is a mount point. `ip netns add` makes it one (a bind mount of itself) when it
# is not; that mount is undone on exit when it was not there before and no namespace is left in it.
netns_run=/run/netns
is_mount() {
  awk -v p="$1" '$5 == p { found = 1 } END { exit !found }' /proc/self/mountinfo
}
if [ ! -r /proc/self/mountinfo ] || [ ! -e /proc/self/ns/net ]; then
  skip "/proc is not mounted: network namespaces need /proc/self/ns/net"
fi
netns_run_existed=no
[ -d "$netns_run" ] && netns_run_existed=yes
netns_run_mounted=no
is_mount "$netns_run" && netns_run_mounted=yes

cleanup() {
  for ns in "$ns_b" "$ns_a"; do
    # What mpirun started in the namespace (mpirun, its daemon, the ranks), when a signal or a
    # timeout cut the run short; after a normal end there is nothing left.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null
    done
    ip netns del "$ns" 2>/dev/null
  done
  if [ "$netns_run_mounted" = no ] && is_mount "$netns_run" &&
    [ -z "$(ls -A "$netns_run" 2>/dev/null)" ]; then
    umount "$netns_run" 2>/dev/null || echo "two_hosts: cannot unmount $netns_run" >&2
  fi
  [ "$netns_run_existed" = no ] && rmdir "$netns_run" 2>/dev/null
  [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

tmp=$(mktemp -d "${TMPDIR:-/tmp}/qdp2h.XXXXXX") || exit 1

# Namespaces of earlier runs whose shell was killed before its trap ran (SIGKILL): their owner is
# gone, so nothing else uses them.
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(qdp2h-[ab]-[0-9][0-9]*\).*/\1/p'); do
  owner=${ns##*-}
  if ! kill -0 "$owner" 2>/dev/null; then
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null
    done
    ip netns del "$ns" 2>/dev/null
  fi
done

# Each step's own error is the reason given when it is refused.
try() { # WHAT COMMAND...: runs COMMAND, skips with WHAT and its error output when it fails
  what=$1
  shift
  "$@" >"$tmp/probe.log" 2>&1 || skip "$what: $(tr '\n' ' ' <"$tmp/probe.log")"
}
try "'ip netns add $ns_a' failed" ip netns add "$ns_a"
try "'ip netns add $ns_b' failed" ip netns add "$ns_b"
# The pair is created with its ends already inside the namespaces: no name in the root namespace.
try "cannot create a veth pair between $ns_a and $ns_b" \
  ip link add veth0 netns "$ns_a" type veth peer name veth0 netns "$ns_b"
# What the ranks are started with: entering a namespace remounts / as a slave, which fails where /
# is not a mount point (a chroot into a plain folder), and a host name of its own.
try "cannot enter $ns_a ('ip netns exec' then 'unshare --uts')" \
  ip netns exec "$ns_a" unshare --uts /bin/sh -c "hostname $host_a"

set -e
ip -n "$ns_a" addr add "$addr_a/24" dev veth0
ip -n "$ns_b" addr add "$addr_b/24" dev veth0
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
  ip -n "$ns" link set veth0 up
done
set +e

printf '%s slots=1\n%s slots=1\n' "$addr_a" "$addr_b" >"$tmp/hostfile"

# Stands in for ssh: mpirun calls it as "AGENT HOST COMMAND..." to start its daemon on HOST; it
# runs COMMAND the way a remote shell would, inside HOST's namespace and under HOST's name.
cat >"$tmp/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do
  case \$1 in
    -*) shift ;;
    *) break ;;
  esac
done
host=\$1
shift
case \$host in
  $addr_a) ns=$ns_a name=$host_a ;;
  $addr_b) ns=$ns_b name=$host_b ;;
  *) echo "two_hosts agent: unknown host '\$host'" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" unshare --uts /bin/sh -c 'hostname "\$1" && shift && exec /bin/sh -c "\$*"' \\
  sh "\$name" "\$@"
EOF
chmod +x "$tmp/agent"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export QDP_TEST_EXPECT_DISTINCT_HOSTS=1 CK_FORK=no

echo "two_hosts: $ns_a ($addr_a, $host_a) <-> $ns_b ($addr_b, $host_b) over $subnet"
start=$(date +%s)
# mpirun itself runs on the first host, so rank 0 is local to it and rank 1 is started through
# the agent. In the background and waited for: a signal (meson's timeout) interrupts the wait, so
# the trap deletes the namespaces at once instead of after mpirun's own shutdown.
ip netns exec "$ns_a" unshare --uts /bin/sh -c 'hostname "$1" && shift && exec "$@"' sh "$host_a" \
  mpirun -n 2 --bind-to none --hostfile "$tmp/hostfile" \
  --mca plm_rsh_agent "$tmp/agent" \
  --mca pml ob1 --mca btl self,tcp \
  --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
  -x QDP_TEST_EXPECT_DISTINCT_HOSTS -x CK_FORK \
  "$bin" "$@" &
wait $!
rc=$?
echo "two_hosts: mpirun exited $rc after $(($(date +%s) - start)) s"
exit $rc
