#!/usr/bin/env bash
# gpu-41-before.sh — issue 41's baseline on the committed kernels, in one `run` call: build this tree
# with CUDA, simulate the reference session (512² scan × 192² detector), then on it: ssb4d_gpu_bench
# (calibration, G build, loss, release, redraw medians), `ssb4d bench view --backend cuda` (the
# viewer's first image, drags and releases over HTTP) and `ssb4d plan --backend cuda` (the device
# model) beside the bench's measured device peak. Carry: .device-deps .device-data. Records in $OUT.
set -uo pipefail
root=$PWD
out=${OUT:-/tmp/out}
mkdir -p "$out"
. .device-deps/activate.sh >/dev/null
TREES=new NOREF=1 bash bench/tools/gpu-31.sh build 2>&1 | grep -E "built|NVIDIA|simulated" 
B=/tmp/b-new/ssb4d
t0=$(date +%s); $B simulate --preset reference --threads $(nproc) -q -o /tmp/reference.qem >/tmp/sim-ref.log 2>&1 || tail /tmp/sim-ref.log
echo "reference simulated in $(( $(date +%s) - t0 )) s"; ls -la /tmp/reference.qem
a=$(python3 - /tmp/reference.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("--kv", d["optics"]["voltage_kV"], "--semiangle", d["optics"]["semiangle_mrad"], "--step", d["scan"]["step_A"][0],
      "--det-sampling", d["detector"]["sampling_mrad"][0])
PY
)
timeout 200 /tmp/b-new/tests/ssb4d_gpu_bench /tmp/reference.qem $a -o "$out/gpu-bench-reference.json" > "$out/gpu-bench-reference.log" 2>&1
echo "gpu bench rc $?"; tail -25 "$out/gpu-bench-reference.log"
timeout 200 $B bench view --data /tmp/reference.qem --backend cuda -o "$out/view-reference.json" --force -q > "$out/view-reference.log" 2>&1
echo "bench view rc $?"; tail -12 "$out/view-reference.log"
$B plan --shape 512x512x192x192 --bf 9265 --backend cuda > "$out/plan-reference.txt" 2>&1; sed -n '/GPU memory/,$p' "$out/plan-reference.txt" | head -24
