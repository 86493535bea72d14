#!/bin/bash
# The package as a user installs it, from a repaired wheel (deploy/repair-wheel.py), on a GPU node
# that has no package registry: installed with `pip install --no-deps --no-index --target`, and
# run with LD_LIBRARY_PATH unset (no .gpu/lib: the wheel's qdp/_lib and the node's own libraries
# alone; qdpd links the CUDA runtime statically, libcuda is the driver's, NCCL the node's) and
# PYTHONPATH at the installed package (never client/python of this tree). In order, each into
# OUT_DIR:
#   install.txt        the install, which qdp Python imports and the bundled qdpd's version
#   ldd.txt            every ELF file of qdp/_bin and qdp/_lib resolves; the libraries it takes
#                      from the node
#   cold-start.txt     COLD_RUNS times (default 5): a new `python3 -c` with no daemon running, in
#                      a fresh XDG_RUNTIME_DIR, `import qdp` and `qdp.encode([1, 2, 3, 4],
#                      "amplitude", 2)`, which starts the private daemon from the wheel's
#                      qdp/_bin/qdpd: the whole process's time (op=py-cold-start ms=), the import's
#                      and the encode call's; the state checked against [1,2,3,4]/sqrt(30) and
#                      the daemon's program checked to be the wheel's. Each run's private daemon
#                      log is cold-N.qdpd.log. With a GPU, two fresh processes also time `import
#                      torch` and torch's first CUDA allocation (op=py-cuda-start), the part of a
#                      cold start that is the client's own CUDA context.
#   loader-start.txt   bench/loader_start.py LOADER_ARGS: qdp.torch.loader's DataLoader workers
#                      through the private daemon, from their start to their first batch, by
#                      the method the loader picks and by spawn; with a GPU also
#                      loader-start-host.txt, the same into host memory (--device cpu)
#   python-suite.txt   client/python/tests (and python-suite.xml), with QDPD at the wheel's qdpd
#                      and tests/reference on PYTHONPATH; the GPU tests run where the daemon's
#                      --devices auto finds GPUs (the session's gpu_daemon) and skip elsewhere.
#                      SUITE_LIMIT (default 420) seconds at most. QDP_FRESH_DESC, when set, is
#                      the descriptor set test_wire.py compares the package's with.
# then prints a summary, and exits 1 when a check failed (a missed target is printed, not failed).
# Every step ends within BUDGET seconds (default 570) of the start. Without a GPU (a CPU wheel, or
# no driver) the same steps run on the CPU backend and the GPU-only parts say that they were
# skipped. Builds nothing; writes nothing outside OUT_DIR but a temporary folder it removes.
# Usage: bench/gpu-wheel.sh WHEEL OUT_DIR      (PYTHON: the interpreter, default python3)
set -uo pipefail
wheel=${1:?usage: gpu-wheel.sh WHEEL OUT_DIR}
out=${2:?usage: gpu-wheel.sh WHEEL OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
[ -f "$wheel" ] || { echo "gpu-wheel.sh: no wheel at $wheel" >&2; exit 2; }
wheel=$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/qdp-gpu-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
site=$work/site
fails=()
fail() { fails+=("$*"); echo "FAIL: $*"; }
# Every run of the package: none of the variables that would pick a daemon or a qdpd, or that
# would lend the binaries libraries; the package from the wheel alone; not in this tree.
clean=(env -u LD_LIBRARY_PATH -u LD_PRELOAD -u QDPD -u QDP_TARGET -u QDP_SOCKET -u QDP_AUTOSTART
  PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1)
cd "$work" || exit 1
# The qdpd processes running now (a private daemon's, a system service's).
qdpds() { grep -lx qdpd /proc/[0-9]*/comm 2>/dev/null | wc -l; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
# Every step ends by BUDGET seconds (default 570) after the start, so that one call of at most ten
# minutes brings its outputs back whatever hangs: limit N is N seconds, or what is left if less.
deadline=$(($(date +%s) + ${BUDGET:-570}))
limit() {
  local l=$((deadline - $(date +%s) - 5))
  [ "$l" -gt "$1" ] && l=$1
  [ "$l" -lt 1 ] && l=1
  echo "$l"
}

{
  echo "wheel $wheel"
  sha256sum "$wheel"
  echo "commit ${QDP_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1 ||
    echo "no GPU: nvidia-smi fails or is missing"
  "$py" -c 'import sys; print("python", sys.version.split()[0], sys.executable)'
  for m in torch numpy grpc google.protobuf pytest; do
    "${clean[@]}" "$py" -c "import $m as m; print('$m', m.__version__)" 2>&1 | tail -n 1
  done
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
gpu=0
nvidia-smi -L > /dev/null 2>&1 && gpu=1

# 1. Install.
echo "== install"
# The interpreter's pip, else the one on PATH: a wheel tagged py3-none installs alike with either.
pip=("$py" -m pip)
"${pip[@]}" --version > /dev/null 2>&1 || pip=(pip)
"${pip[@]}" --version > "$out/install.txt" 2>&1
if ! "${pip[@]}" install --no-deps --no-index --disable-pip-version-check --target "$site" \
  "$wheel" >> "$out/install.txt" 2>&1; then
  cat "$out/install.txt"
  echo "FAIL: pip install of $wheel (above)"
  exit 1
fi
pkg=$site/qdp
"${clean[@]}" "$py" -c '
import qdp, qdp._tools as t
print("qdp", qdp.__version__, "from", qdp.__file__)
print("bundled qdpd", t.binary("qdpd"))' >> "$out/install.txt" 2>&1
"${clean[@]}" "$pkg/_bin/qdpd" --version >> "$out/install.txt" 2>&1
tail -n 3 "$out/install.txt"
grep -qx "qdp .* from $pkg/__init__.py" "$out/install.txt" ||
  fail "qdp is not imported from the wheel's $pkg (install.txt)"
grep -qx "bundled qdpd $pkg/_bin/qdpd" "$out/install.txt" ||
  fail "qdp._tools.binary('qdpd') is not $pkg/_bin/qdpd (install.txt)"
# The suite is this tree's: a wheel built from other sources of the package may fail it for that.
if differ=$(diff -rq --exclude=_bin --exclude=_lib --exclude=__pycache__ \
  "$root/client/python/qdp" "$pkg" 2>&1); then
  echo "the wheel's Python files are this tree's client/python/qdp" | tee -a "$out/install.txt"
else
  echo "the wheel's Python files differ from this tree's client/python/qdp (a wheel of other" \
    "sources: rebuild it if the suite fails for that):" | tee -a "$out/install.txt"
  echo "$differ" | sed 's/^/  /' | tee -a "$out/install.txt"
fi

# 2. Libraries, as the loader finds them with LD_LIBRARY_PATH unset.
echo "== ldd"
cuda_wheel=0
: > "$out/ldd.txt"
for f in $(find "$pkg/_bin" "$pkg/_lib" -type f | sort); do
  head -c 4 "$f" | grep -q ELF || continue
  libs=$(env -u LD_LIBRARY_PATH -u LD_PRELOAD ldd "$f" 2>&1)
  echo "$libs" | awk -v n="$(basename "$f")" '{print n ": " $0}' >> "$out/ldd.txt"
  if echo "$libs" | grep -q "not found"; then
    fail "ldd $f: $(echo "$libs" | grep 'not found' | tr -s '\t\n' '  ')"
  fi
  case $f in */_bin/qdpd) echo "$libs" | grep -q libnccl && cuda_wheel=1 ;; esac
done
from_node=$(grep "=> /" "$out/ldd.txt" | grep -v "=> $pkg/" | awk '{print $2, $4}' | sort -u)
echo "$(cut -d: -f1 "$out/ldd.txt" | sort -u | wc -l) ELF files; the libraries they take from" \
  "the node, not the wheel:" | tee -a "$out/ldd.txt"
echo "$from_node" | sed 's/^/  /' | tee -a "$out/ldd.txt"
echo "$from_node" | grep -q "/.gpu/" && fail "a library comes from a .gpu folder (ldd.txt)"
[ "$cuda_wheel" = 1 ] && echo "the wheel's qdpd is a CUDA build (it links NCCL)" ||
  echo "the wheel's qdpd is a CPU build (no NCCL)"
[ $gpu = 1 ] && [ $cuda_wheel = 0 ] && fail "a GPU node, but the wheel's qdpd has no CUDA backend"

# 3. Cold start: a new process, no daemon, the plain encode.
echo "== cold start"
cold='
import time
t0 = time.perf_counter()
import json, os, shutil, sys
import numpy as np
import qdp
t1 = time.perf_counter()
psi = qdp.encode([1, 2, 3, 4], "amplitude", 2)
t2 = time.perf_counter()
got = psi.cpu().numpy() if hasattr(psi, "cpu") else np.asarray(psi)
want = np.array([1.0, 2.0, 3.0, 4.0]) / np.sqrt(30.0)
folder = os.path.join(os.environ["XDG_RUNTIME_DIR"], "qdp")
with open(os.path.join(folder, "local.json")) as f:
    pid = json.load(f)["qdpd_pid"]
shutil.copy(os.path.join(folder, "local.log"), sys.argv[1])
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "encode_ms": (t2 - t1) * 1e3,
                  "type": type(psi).__module__ + "." + type(psi).__name__,
                  "device": str(psi.device) if hasattr(psi, "cpu") else "numpy",
                  "dtype": str(got.dtype),
                  "max_err": float(np.abs(got - want).max()),
                  "qdpd": os.readlink(f"/proc/{pid}/exe")}))
'
: > "$out/cold-start.txt"
for i in $(seq "${COLD_RUNS:-5}"); do
  xdg=$work/xdg-$i
  mkdir -m 700 "$xdg"
  before=$(qdpds)
  t=$(date +%s%N)
  line=$(cd "$work" && XDG_RUNTIME_DIR=$xdg timeout "$(limit 60)" "${clean[@]}" "$py" -c "$cold" \
    "$out/cold-$i.qdpd.log" 2> "$out/cold-$i.stderr.txt" | tail -n 1)
  rc=$?
  wall=$(ms_since "$t")
  if [ $rc -ne 0 ]; then
    echo "bench op=py-cold-start ms=$wall error=\"exit $rc\" qdpds_before=$before" |
      tee -a "$out/cold-start.txt"
    fail "cold start $i: exit $rc: $(tail -n 3 "$out/cold-$i.stderr.txt" | tr '\n' ' ')"
    [ $rc -eq 124 ] && { echo "  (no more cold starts: this one timed out)"; break; }
  elif ! echo "$line" | "$py" -c '
import json, sys
r = json.loads(sys.stdin.read())
bad = []
if not r["max_err"] <= 1e-12:
    bad.append("the state is not [1,2,3,4]/sqrt(30)")
if r["qdpd"] != sys.argv[2]:
    bad.append("the private daemon ran " + r["qdpd"] + ", not " + sys.argv[2])
print("bench op=py-cold-start device=%s ms=%s import_ms=%.1f encode_ms=%.1f max_err=%.3g "
      "type=%s dtype=%s qdpds_before=%s%s" % (
          r["device"], sys.argv[1], r["import_ms"], r["encode_ms"], r["max_err"], r["type"],
          r["dtype"], sys.argv[3], " error=\"%s\"" % "; ".join(bad) if bad else ""))
sys.exit(1 if bad else 0)' "$wall" "$pkg/_bin/qdpd" "$before" | tee -a "$out/cold-start.txt"; then
    fail "cold start $i: $(tail -n 1 "$out/cold-start.txt")"
  fi
  # Other qdpd processes (a service, another user's) are not this run's private daemon, whose
  # folder is new; they share the machine, so they are counted.
  [ "$before" = 0 ] || echo "  ($before other qdpd process(es) were running)"
  # The private daemon stops 2 s after its last user and removes its folder: wait for that, so
  # that the next run finds none.
  t=$(date +%s%N)
  while [ -e "$xdg/qdp" ] && [ "$(ms_since "$t")" -lt 20000 ]; do sleep 0.1; done
  [ -e "$xdg/qdp" ] && fail "cold start $i: the private daemon did not stop within 20 s"
done
if [ $gpu = 1 ]; then
  for i in 1 2; do
    (cd "$work" && "${clean[@]}" "$py" -c '
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
t2 = time.perf_counter()
print("bench op=py-cuda-start import_torch_ms=%.1f ms=%.1f" % ((t1 - t0) * 1e3, (t2 - t1) * 1e3))
') 2>&1 | tail -n 1 | tee -a "$out/cold-start.txt"
  done
else
  echo "skipped: torch's CUDA start (no GPU here)" | tee -a "$out/cold-start.txt"
fi

# 4. DataLoader workers through the private daemon: batches on the data set's own device (a GPU
# daemon's: CUDA tensors), and on a GPU node also into host memory, where neither the workers nor
# this process start CUDA.
echo "== loader start"
loader() {  # NAME ARGS...: bench/loader_start.py ARGS with a private daemon of its own
  XDG_RUNTIME_DIR=$(mktemp -d "$work/xdg-loader.XXXXXX") timeout "$(limit 150)" "${clean[@]}" \
    PYTHONPATH="$site:$root/tests/reference" "$py" "$root/bench/loader_start.py" "${@:2}" \
    > "$out/$1.txt" 2>&1 || fail "bench/loader_start.py ${*:2} ($1.txt)"
  cat "$out/$1.txt"
  grep -q "op=private-daemon qdpd=$pkg/_bin/qdpd " "$out/$1.txt" ||
    fail "the loader's private daemon is not the wheel's qdpd ($1.txt)"
}
# shellcheck disable=SC2086 # LOADER_ARGS is a list of arguments
loader loader-start ${LOADER_ARGS:-}
if [ $gpu = 1 ]; then
  # shellcheck disable=SC2086
  loader loader-start-host --device cpu --methods auto --runs 2 ${LOADER_ARGS:-}
else
  echo "skipped: the loader into host memory beside CUDA tensors (no GPU here)"
fi

# 5. The package's suite against the wheel.
suite_limit=$(limit "${SUITE_LIMIT:-420}")
echo "== python suite (up to $suite_limit s)"
start=$(date +%s)
(cd "$work" && XDG_RUNTIME_DIR=$(mktemp -d "$work/xdg-suite.XXXXXX") \
  timeout "$suite_limit" "${clean[@]}" QDPD="$pkg/_bin/qdpd" \
  PYTHONPATH="$site:$root/tests/reference" "$py" -m pytest -q -p no:cacheprovider -rs \
  --junitxml="$out/python-suite.xml" "$root/client/python/tests") > "$out/python-suite.txt" 2>&1
rc=$?
echo "exit $rc ($(($(date +%s) - start)) s)"
grep -E "^(SKIPPED|FAILED|ERROR)" "$out/python-suite.txt" | head -n 40
last=$(tail -n 1 "$out/python-suite.txt")  # the closing line; a cut-off run ends mid-line
echo "$last"
[ $rc -eq 0 ] || fail "the Python suite: exit $rc (python-suite.txt)"
# The GPU tests, and the tests that skipped for want of a GPU (which on a GPU node means that the
# daemon or torch did not find it).
gpu_tests=$("$py" - "$out/python-suite.xml" <<'EOF' 2>/dev/null
import sys
import xml.etree.ElementTree as ET
cases = list(ET.parse(sys.argv[1]).iter("testcase"))
gpu = [c for c in cases if c.get("classname", "").endswith("test_gpu")]
skipped = sum(1 for c in gpu if c.find("skipped") is not None)
bad = sum(1 for c in gpu if c.find("failure") is not None or c.find("error") is not None)
unseen = sum(1 for c in cases if c.find("skipped") is not None and
             "no GPU" in (c.find("skipped").get("message") or ""))
print(f"{len(gpu) - skipped - bad} passed, {bad} failed, {skipped} skipped; "
      f"{unseen} test(s) of the suite skipped for want of a GPU")
EOF
)
echo "test_gpu.py: ${gpu_tests:-no result (python-suite.xml)}"
if [ $gpu = 1 ]; then
  case $gpu_tests in "0 passed"* | "") fail "no test of test_gpu.py passed on a GPU node" ;; esac
  case $gpu_tests in *"; 0 test(s)"*) ;;
    *) fail "tests skipped for want of a GPU on a GPU node: $gpu_tests" ;; esac
else
  echo "skipped: the GPU tests need a GPU (they ran against the CPU backend where they could)"
fi

# Summary.
echo "== summary"
"$py" - "$out" "$gpu" <<'EOF'
import pathlib
import re
import statistics
import sys

out, gpu = pathlib.Path(sys.argv[1]), sys.argv[2] == "1"


def figures(name, op):
    rows = []
    for line in (out / name).read_text().splitlines():
        if line.startswith(f"bench op={op} ") and "error=" not in line:
            rows.append({k: v for k, v in re.findall(r"(\w+)=(\S+)", line)})
    return rows


cold = figures("cold-start.txt", "py-cold-start")
if cold:
    wall = [float(r["ms"]) for r in cold]
    enc = [float(r["encode_ms"]) for r in cold]
    target = 3000 if gpu else 1500
    print(f"cold start ({len(cold)} runs, result on {cold[0]['device']}): process "
          f"{statistics.median(wall):.0f} ms median, {max(wall):.0f} max; encode call "
          f"{statistics.median(enc):.0f} ms median, {max(enc):.0f} max; target <= {target} ms: "
          f"{'met' if max(wall) <= target else 'MISSED'}")
cuda = figures("cold-start.txt", "py-cuda-start")
if cuda:
    print("  of which a client's own: import torch "
          f"{statistics.median(float(r['import_torch_ms']) for r in cuda):.0f} ms, first CUDA "
          f"allocation {statistics.median(float(r['ms']) for r in cuda):.0f} ms (medians)")
for r in figures("loader-start.txt", "private-daemon-start"):
    print(f"private daemon start (LocalDaemon().start(), cold): {float(r['ms']):.0f} ms")
for name in ("loader-start.txt", "loader-start-host.txt"):
    if not (out / name).exists():
        continue
    device = {r["pick"]: r["device"] for r in figures(name, "loader-start")}
    for r in figures(name, "loader-start-median"):
        print(f"loader workers ({r['workers']}, {r['method']}, picked by {r['pick']}; batches "
              f"on {device.get(r['pick'], '?')}; {r['runs']} runs, medians): all up "
              f"{float(r['started_ms_median']):.0f} ms, first batch "
              f"{float(r['ms_median']):.0f} ms, one from every worker "
              f"{float(r['all_ms_median']):.0f} ms, next epoch's first "
              f"{float(r['next_epoch_ms_median']):.0f} ms"
              f"{'; target well under 1000 ms' if r['pick'] == 'auto' else ''}")
EOF
echo "python suite: $last"
if [ ${#fails[@]} -gt 0 ]; then
  printf '%s failure(s):\n' "${#fails[@]}"
  printf '  %s\n' "${fails[@]}"
  exit 1
fi
echo "every check passed"
