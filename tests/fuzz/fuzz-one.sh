#!/bin/sh
# Runs one libFuzzer harness from its seed corpus:
#   fuzz-one.sh HARNESS SEED_DIR [LIBFUZZER_ARGS...]
# for QDP_FUZZ_SECONDS (15 by default) unless the arguments say otherwise (-runs=N,
# -max_total_time=S). New inputs go to a scratch corpus in a `mktemp -d` folder, removed at the end,
# so the seeds in the repository stay as they are; a crashing input is kept in QDP_FUZZ_ARTIFACTS
# (default: the current folder) as crash-<sha1>, and its path is printed. Exit: 0, or 1 when the
# harness found a crash, a leak or a timeout (libFuzzer's own 77 would read as a skip to meson).
set -u
harness=$1
seeds=$2
shift 2
scratch=$(mktemp -d "${TMPDIR:-/tmp}/qdp-fuzz.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM
artifacts=${QDP_FUZZ_ARTIFACTS:-.}
mkdir -p "$artifacts" || exit 1
name=$(basename "$harness")
dict=$(dirname "$0")/$name.dict
set -- -max_total_time="${QDP_FUZZ_SECONDS:-15}" -error_exitcode=1 -timeout_exitcode=1 \
  -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/$name-" "$@"
[ -f "$dict" ] && set -- -dict="$dict" "$@"
# Sanitizer reports abort the run (UBSan would otherwise print and go on).
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
  "$harness" "$@" "$scratch" "$seeds"
