#!/bin/bash
# qdpd on the GPU, end to end: starts the daemon with --devices auto from an existing build
# folder, shows `qdpctl status`, runs the integration suite's encoding tests (every encoding,
# complex64 and complex128, single and batch, compared with the NumPy reference) and the region
# tests (encodes from page-locked regions, FetchInto) through it, a 30-qubit complex128 angle
# state (16 GiB) encoded and read back in part, and the end-to-end benchmark; then SIGTERM, which
# must exit 0.
# Usage: tests/gpu/daemon_gpu.sh BUILD_DIR OUT_DIR
# The daemon and qdpctl run with the carried libraries (.gpu/lib); Python runs without them.
set -uo pipefail
build=$(cd "${1:?usage: daemon_gpu.sh BUILD_DIR OUT_DIR}" && pwd)
out=${2:?usage: daemon_gpu.sh BUILD_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
libs="$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
py() { env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 python3 "$@"; }
dir=$(mktemp -d)
sock="$dir/qdpd.sock"
trap 'kill -KILL "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
LD_LIBRARY_PATH=$libs "$build/daemon/qdpd" --socket "$sock" --devices auto \
  2>"$out/qdpd-gpu.log" &
pid=$!
for _ in $(seq 300); do
  grep -q "listening on unix:" "$out/qdpd-gpu.log" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$out/qdpd-gpu.log"; exit 1; }
  sleep 0.1
done
# The Python tests call qdpctl themselves, without the carried libraries: give them a wrapper.
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libs" "$build/client/qdpctl/qdpctl" \
  > "$dir/qdpctl"
chmod +x "$dir/qdpctl"
export QDP_TARGET="unix:$sock" QDP_DESC="$build/proto/qdp.desc" QDPCTL="$dir/qdpctl"
export QDP_SOCKET="$sock" QDP_TEST_DIR="$dir"
ctl() { "$dir/qdpctl" "$@"; }
rc=0
step() {
  echo "== $1"
  shift
  "$@" || { echo "!! failed: exit $?"; rc=1; }
}
step "qdpctl status" ctl status
step "encoding tests through the GPU daemon" \
  env PYTHONPATH="$root/tests/integration:$root/tests/reference" PYTHONDONTWRITEBYTECODE=1 \
  bash -c "$(declare -f py); py \"\$0\"" "$root/tests/integration/test_encodings.py"
# Regions on the GPU are page-locked: encodes read them by DMA and FetchInto writes them by DMA.
step "registered regions and FetchInto through the GPU daemon" \
  env PYTHONPATH="$root/tests/integration:$root/tests/reference" PYTHONDONTWRITEBYTECODE=1 \
  bash -c "$(declare -f py); py \"\$0\" \"\$@\"" "$root/tests/integration/test_regions.py" \
  Regions.test_encodes_at_several_offsets_read_the_registered_slice \
  Regions.test_fetch_into_a_writable_memfd_and_shm_matches_fetch \
  Regions.test_unregister_while_encodes_read_is_safe
big() {
  py - <<'PY'
import os, sys, time
import numpy as np
sys.path.insert(0, os.path.join(os.environ["ROOT"], "tests", "integration"))
import qdpc
c = qdpc.Client()
n = 30
x = np.linspace(0.1, 3.0, n)
t0 = time.time()
s = c.encode("angle", n, x, dtype="complex128")
print(f"angle n={n} complex128: {s.bytes} B on {[sh.device for sh in s.shards]} "
      f"policy {s.policy}, encode {s.encode_ms:.2f} ms on the daemon, "
      f"round trip {1e3 * (time.time() - t0):.1f} ms")
idx = np.concatenate([np.arange(0, 4096), np.arange((1 << n) - 4096, 1 << n)])
got = np.concatenate([c.fetch(s, offset=0, count=4096), c.fetch(s, offset=(1 << n) - 4096, count=4096)])
b = idx[:, None] >> np.arange(n)[None, :] & 1
want = np.prod(np.where(b == 1, np.sin(x), np.cos(x)), axis=1)
err = np.max(np.abs(got - want)) / np.max(np.abs(want))
print(f"first and last 4096 amplitudes vs NumPy: max relative error {err:.2e}")
c.release(s)
assert err < 1e-12, err
PY
}
step "30-qubit angle state" env ROOT="$root" bash -c "$(declare -f py big); big"
# A registered region is page-locked on GPUs: the devices read it by DMA, so a shrink raises no
# fault; the job still finds it shrunk and answers DATA_LOSS, for concurrent jobs too.
shrink() {
  py - <<'PY'
import os, sys, threading, time
import grpc
import numpy as np
sys.path.insert(0, os.path.join(os.environ["ROOT"], "tests", "integration"))
import qdpc
c = qdpc.Client()
name = "/qdp-gpu-shrink-%d" % os.getpid()
x = np.random.default_rng(5).standard_normal(1 << 24)
with open("/dev/shm" + name, "wb") as f:
    f.write(x.tobytes())
reg = c.pb.RegisterRegionRequest(name=name)
reg.fd_ticket = c.hand_file("/dev/shm" + name)
info = c.call("RegisterRegion", reg)
print(f"region {info.handle}: {info.bytes} B, pinned {info.pinned}")
def req():
    m = c.pb.SharedMemory(region=info.handle, region_token=info.token, offset=0, length=x.nbytes)
    return c.request("amplitude", 24, None, input_dtype="float64", shm=m)
want = x / np.linalg.norm(x)
st = c.call("Encode", req()).state
ok = np.allclose(c.fetch(st, count=4096).real, want[:4096], rtol=0, atol=1e-12)
c.release(st)
print(f"before the cut: OK, first 4096 amplitudes right: {ok}")
codes = []
def job():
    for _ in range(4):
        try:
            s = c.call("Encode", req()).state
            good = np.allclose(c.fetch(s, count=4096).real, want[:4096], rtol=0, atol=1e-12)
            c.release(s)
            codes.append("OK" if good else "WRONG")
        except grpc.RpcError as e:
            codes.append(e.code().name)
ts = [threading.Thread(target=job) for _ in range(3)]
[t.start() for t in ts]
time.sleep(0.02)
os.truncate("/dev/shm" + name, 0)
[t.join() for t in ts]
try:
    c.call("Encode", req())
    after = "OK"
except grpc.RpcError as e:
    after = f"{e.code().name}: {e.details()}"
print(f"concurrent jobs while it was cut: {codes}")
print(f"after the cut: {after}")
c.call("UnregisterRegion", c.pb.RegionRef(handle=info.handle, token=info.token))
os.unlink("/dev/shm" + name)
assert ok and "WRONG" not in codes and set(codes) <= {"OK", "DATA_LOSS"}, codes
assert after.startswith("DATA_LOSS"), after
PY
}
step "a pinned region cut under concurrent jobs" env ROOT="$root" bash -c "$(declare -f py shrink); shrink"
step "end-to-end benchmark (GPU daemon)" env LD_LIBRARY_PATH="$libs" "$build/bench/qdpd_bench" \
  --seconds 2
for clients in 4 16; do
  step "16-qubit batches of 64 from a registered region, $clients clients" \
    env LD_LIBRARY_PATH="$libs" "$build/bench/qdpd_bench" --shm-batch 16:64 --clients "$clients" \
    --seconds 3
done
echo "== SIGTERM"
kill -TERM "$pid"
wait "$pid"
st=$?
echo "qdpd exit status $st"
[ "$st" -eq 0 ] || rc=1
[ ! -e "$sock" ] || { echo "socket left behind"; rc=1; }
exit $rc
