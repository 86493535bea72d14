# Sourced by the GPU run scripts (bench/run-*.sh) after they set root, out and rc: records the GPUs
# and the commit in $out/gpu.txt, and defines run NAME LIMIT CMD..., which runs CMD within LIMIT
# seconds into $out/NAME.txt, prints its exit status, time and last ${TAIL:-40} lines, and sets rc=1
# when it fails.
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  # QDP_COMMIT: the commit the tree was built from (a copied tree may carry a stale .git).
  echo "commit ${QDP_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
} > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
run() {
  local name=$1 limit=$2
  shift 2
  local start
  start=$(date +%s)
  CK_FORK=no timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  local r=$?
  echo "== $name: exit $r ($(( $(date +%s) - start )) s)"
  tail -n "${TAIL:-40}" "$out/$name.txt"
  [ $r -eq 0 ] || rc=1
}
