#!/bin/sh
# Runs one integration test against a real qdpd:
#   with_qdpd.sh QDPD [QDPD_ARGS...] -- COMMAND [ARGS...]
# starts QDPD on a socket in a fresh `mktemp -d` folder (plus any QDPD_ARGS), waits until it says
# "listening on unix:..." and the socket exists, runs COMMAND with QDP_SOCKET, QDP_TARGET and
# QDP_TEST_DIR set, then stops the daemon with SIGTERM and requires exit status 0 and the socket
# gone. A trap kills the daemon and removes the folder whatever happens. Exit: COMMAND's status,
# or 1 when the daemon misbehaves.
set -u
qdpd=$1
shift
daemon_args=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  daemon_args="$daemon_args $1"
  shift
done
[ "${1:-}" = "--" ] && shift

dir=$(mktemp -d "${TMPDIR:-/tmp}/qdp-it.XXXXXX") || exit 1
chmod 755 "$dir"
sock="$dir/qdpd.sock"
log="$dir/qdpd.log"
pid=

# Running and not yet a zombie (kill -0 succeeds on a zombie until it is waited for).
alive() {
  [ -r "/proc/$1/stat" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]
}

cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck disable=SC2086  # daemon_args is a word list on purpose
"$qdpd" --socket "$sock" --devices cpu:4 $daemon_args 2>"$log" &
pid=$!

# Wait for readiness: the daemon prints the line after the socket is bound and serving.
i=0
until [ -S "$sock" ] && grep -q "listening on unix:" "$log" 2>/dev/null; do
  if ! alive "$pid"; then
    echo "with_qdpd: qdpd exited before listening; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  i=$((i + 1))
  if [ "$i" -gt 300 ]; then
    echo "with_qdpd: qdpd did not listen on $sock within 30 s; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done

QDP_SOCKET=$sock QDP_TARGET="unix:$sock" QDP_TEST_DIR=$dir QDPD_PID=$pid QDPD_LOG=$log "$@"
rc=$?

kill -TERM "$pid"
i=0
while alive "$pid"; do
  i=$((i + 1))
  if [ "$i" -gt 300 ]; then
    echo "with_qdpd: qdpd did not exit within 30 s of SIGTERM" >&2
    kill -KILL "$pid"
    rc=1
    break
  fi
  sleep 0.1
done
wait "$pid"
drc=$?
pid=
if [ "$drc" -ne 0 ]; then
  echo "with_qdpd: qdpd exited with status $drc after SIGTERM (expected 0)" >&2
  rc=1
fi
if [ -e "$sock" ]; then
  echo "with_qdpd: qdpd left its socket $sock behind" >&2
  rc=1
fi
if [ "$rc" -ne 0 ]; then
  echo "---- qdpd log ----" >&2
  tail -n 100 "$log" >&2
fi
exit "$rc"
