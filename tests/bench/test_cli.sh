#!/bin/sh
# The benchmarks' command lines (bench_cli.h): --help prints a usage to stdout and exits 0; an
# unknown option exits 2 with a message that names it. Runs no benchmark.
# Usage: tests/bench/test_cli.sh BENCH...
set -u
fails=0
for b in "$@"; do
  name=$(basename "$b")
  out=$("$b" --help 2>/dev/null)
  rc=$?
  if [ "$rc" -ne 0 ] || [ "${out#Usage: }" = "$out" ]; then
    echo "FAIL: $name --help: exit $rc, stdout '$(echo "$out" | head -n 1)'" >&2
    fails=$((fails + 1))
  else
    echo "ok: $name --help"
  fi
  err=$("$b" --no-such-option 1 2>&1 >/dev/null)
  rc=$?
  case "$err" in
  *"'--no-such-option'"*) named=1 ;;
  *) named=0 ;;
  esac
  if [ "$rc" -ne 2 ] || [ "$named" -ne 1 ]; then
    echo "FAIL: $name --no-such-option: exit $rc, stderr '$(echo "$err" | head -n 1)'" >&2
    fails=$((fails + 1))
  else
    echo "ok: $name refuses --no-such-option: $(echo "$err" | head -n 1)"
  fi
done
[ "$fails" -eq 0 ] || exit 1
