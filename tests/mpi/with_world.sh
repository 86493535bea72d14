#!/bin/sh
# Runs one test against a real multi-rank qdpd world and a plain single-rank qdpd beside it:
#   with_world.sh WORLD QDPD [QDPD_ARGS...] -- COMMAND [ARGS...]
# WORLD is the number of ranks (mpirun -n WORLD on this host, shared memory between the ranks), or
# "two-hosts": 2 ranks on two simulated hosts joined over TCP (two_hosts.sh, beside this script).
# Every rank runs QDPD --devices $QDP_WORLD_DEVICES (default cpu:2) QDPD_ARGS; the reference runs
# QDPD --devices $QDP_REF_DEVICES (default cpu:1). QDPD may be a script that execs qdpd.
# COMMAND runs with QDP_TARGET (the world's coordinator), QDP_REF_TARGET (the reference),
# QDP_WORLD_LOG (every rank's log lines), QDP_WORLD_RANKS and QDP_TEST_DIR set. Afterwards rank 0
# (the pid in its lock file) gets SIGTERM, the way a world is stopped gracefully: it drains, tells
# the other ranks to stop, and mpirun exits; with QDP_WORLD_CLEAN_EXIT=1 that must happen within
# 20 s with status 0. A trap kills whatever is left and removes the folder. Exit: COMMAND's status,
# 77 when the world cannot be made here (two-hosts without root), 1 when a daemon misbehaves.
set -u
world=$1
qdpd=$2
shift 2
daemon_args=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  daemon_args="$daemon_args $1"
  shift
done
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)

dir=$(mktemp -d "${TMPDIR:-/tmp}/qdp-world.XXXXXX") || exit 1
chmod 755 "$dir"
ref_pid=
world_pid=

stop() { # PID: SIGTERM, up to 20 s, then SIGKILL
  [ -n "$1" ] || return 0
  kill -TERM "$1" 2>/dev/null
  i=0
  while kill -0 "$1" 2>/dev/null && [ "$i" -lt 200 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  kill -KILL "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

cleanup() {
  stop "$world_pid"
  stop "$ref_pid"
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# shellcheck disable=SC2086  # daemon_args is a word list on purpose
"$qdpd" --socket "$dir/ref.sock" --devices "${QDP_REF_DEVICES:-cpu:1}" $daemon_args 2>"$dir/ref.log" &
ref_pid=$!

case $world in
  two-hosts)
    ranks=2
    # shellcheck disable=SC2086
    sh "$here/two_hosts.sh" "$qdpd" --socket "$dir/world.sock" \
      --devices "${QDP_WORLD_DEVICES:-cpu:2}" $daemon_args \
      >"$dir/world.log" 2>&1 &
    ;;
  *)
    ranks=$world
    # --enable-recovery: Open MPI's default is to kill every rank when one dies; the coordinator
    # must outlive a lost rank and say so.
    # shellcheck disable=SC2086
    mpirun --enable-recovery -n "$ranks" --oversubscribe --bind-to none --mca pml ob1 \
      --mca btl self,vader \
      "$qdpd" --socket "$dir/world.sock" --devices "${QDP_WORLD_DEVICES:-cpu:2}" $daemon_args \
      >"$dir/world.log" 2>&1 &
    ;;
esac
world_pid=$!

wait_for() { # SOCKET LOG PID NAME
  i=0
  until [ -S "$1" ] && grep -q "listening on unix:" "$2" 2>/dev/null; do
    if ! kill -0 "$3" 2>/dev/null; then
      wait "$3"
      rc=$?
      if [ "$rc" -eq 77 ]; then
        sed -n 's/^two_hosts: SKIP/with_world: SKIP/p' "$2"
        exit 77
      fi
      echo "with_world: $4 exited ($rc) before listening; its log:" >&2
      cat "$2" >&2
      exit 1
    fi
    i=$((i + 1))
    if [ "$i" -gt 600 ]; then
      echo "with_world: $4 did not listen within 60 s; its log:" >&2
      cat "$2" >&2
      exit 1
    fi
    sleep 0.1
  done
}
wait_for "$dir/ref.sock" "$dir/ref.log" "$ref_pid" "the reference qdpd"
wait_for "$dir/world.sock" "$dir/world.log" "$world_pid" "the world"

QDP_TARGET="unix:$dir/world.sock" QDP_REF_TARGET="unix:$dir/ref.sock" \
  QDP_WORLD_LOG="$dir/world.log" QDP_WORLD_RANKS="$ranks" QDP_TEST_DIR="$dir" "$@"
rc=$?

# A graceful stop: SIGTERM to rank 0 only (a SIGTERM to mpirun makes Open MPI kill every rank
# within a second, drained or not).
kill -TERM "$(cat "$dir/world.sock.lock" 2>/dev/null)" 2>/dev/null
i=0
while kill -0 "$world_pid" 2>/dev/null && [ "$i" -lt 200 ]; do
  sleep 0.1
  i=$((i + 1))
done
if kill -0 "$world_pid" 2>/dev/null; then
  world_rc=timeout
else
  wait "$world_pid"
  world_rc=$?
  world_pid=
fi
echo "with_world: the world stopped with status $world_rc"
if [ "${QDP_WORLD_CLEAN_EXIT:-0}" = 1 ] && [ "$world_rc" != 0 ] && [ "$rc" -eq 0 ]; then
  echo "with_world: the world did not stop cleanly on SIGTERM to rank 0" >&2
  rc=1
fi
if [ "$rc" -ne 0 ]; then
  echo "with_world: the test failed ($rc); the world's log:" >&2
  cat "$dir/world.log" >&2
fi
exit "$rc"
