#!/usr/bin/env bash
# gpu-41-start.sh — issue 41 item 1 (the session starts on the GPU), in one `run` call: build this
# tree with CUDA, the GPU's start tests (gpu_gstart, then the rest of `ctest -L gpu`), simulate the
# reference session (512² scan × 192² detector, as gpu-41-before.sh), then on it:
# ssb4d_gstart_bench (the streams' upload alone, the device calibration, the device G build with and
# without the host copy of G's planes), the session's calibrate and G build through ssb4d_gpu_bench's
# first lines with the device start and with SSB4D_CPU_START=1 (the CPU's start, the baseline, in
# the same lease), and `ssb4d bench view --backend cuda` (the viewer's first image).
# Carry: .device-deps .device-data. Records in $OUT.
set -uo pipefail
root=$PWD
out=${OUT:-/tmp/out}
mkdir -p "$out"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
. .device-deps/activate.sh >/dev/null
TREES=new NOREF=1 bash bench/tools/gpu-31.sh build 2>&1 | grep -E "built|NVIDIA|simulated|error" | tee "$out/build.txt"
B=/tmp/b-new
git -C "$root" log -1 --format='commit %h %s' > "$out/commit.txt" 2>/dev/null || true
el; timeout 60 $B/tests/test_gstart > "$out/test-gstart.log" 2>&1; echo "test_gstart rc $?"; tail -12 "$out/test-gstart.log"
el; t0=$(date +%s); $B/ssb4d simulate --preset reference --threads $(nproc) -q -o /tmp/reference.qem >/tmp/sim-ref.log 2>&1 || tail /tmp/sim-ref.log
echo "reference simulated in $(( $(date +%s) - t0 )) s"; ls -la /tmp/reference.qem
a=$(python3 - /tmp/reference.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("--kv", d["optics"]["voltage_kV"], "--semiangle", d["optics"]["semiangle_mrad"], "--step", d["scan"]["step_A"][0],
      "--det-sampling", d["detector"]["sampling_mrad"][0])
PY
)
cat /tmp/reference.qem > /dev/null # in page cache
el; timeout 90 $B/tests/ssb4d_gstart_bench /tmp/reference.qem $a -o "$out/gstart-reference.json" > "$out/gstart-reference.log" 2>&1
echo "gstart bench rc $?"; cat "$out/gstart-reference.log"
# the session's stages (the bench's first line): the device start, then the CPU's start
for mode in device cpu; do
  el; env $([ $mode = cpu ] && echo SSB4D_CPU_START=1) timeout 45 stdbuf -oL $B/tests/ssb4d_gpu_bench /tmp/reference.qem $a --repeat 1 \
    -o "$out/gpu-bench-$mode.json" > "$out/gpu-bench-$mode.log" 2>&1
  echo "session ($mode start): $(grep -m1 'calibrate' "$out/gpu-bench-$mode.log")"
done
el; timeout 60 $B/ssb4d bench view --data /tmp/reference.qem --backend cuda -o "$out/view-reference.json" --force -q > "$out/view-reference.log" 2>&1
echo "bench view rc $?"; tail -6 "$out/view-reference.log"
el; timeout 100 ctest --test-dir $B -L gpu -E mpi --timeout 90 --output-on-failure > "$out/ctest-gpu.log" 2>&1
echo "ctest -L gpu rc $?"; grep -E "tests passed|Failed|FAIL|Passed|Timeout|Skipped" "$out/ctest-gpu.log" | head -20
el
