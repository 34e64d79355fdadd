#!/usr/bin/env bash
# gpu-verify-40-41.sh — after gpu-final-40-41.sh's fixes, in one short `run` call: build with CUDA, `ctest -L gpu`
# (-E mpi), then the reference session (512² × 192²) with the default (cuFFT) loss path and the device start:
# ssb4d_gpu_bench and `ssb4d bench view --backend cuda`. Carry: .device-deps .device-data. Records in $OUT.
set -uo pipefail
root=$PWD
out=${OUT:-/tmp/out}
mkdir -p "$out"
el() { echo "[$SECONDS s] $*"; }
. .device-deps/activate.sh >/dev/null
B=/tmp/b-new
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=ON -DSSB4D_TESTS=ON -DSSB4D_FUZZ=OFF \
    -DSSB4D_SHARED_DATA=$root/.device-data >/tmp/cfg.log 2>&1 && cmake --build $B -j16 >/tmp/bld.log 2>&1 ) ||
  { tail -40 /tmp/cfg.log /tmp/bld.log; exit 1; }
el built; nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
( timeout 150 ctest --test-dir $B -L gpu -E mpi --timeout 140 --output-on-failure -V > "$out/ctest-gpu.log" 2>&1; echo "ctest rc $?" >> "$out/ctest-gpu.log" ) &
ct=$!
$B/ssb4d simulate --preset reference --threads $(nproc) -q -o /tmp/reference.qem >/tmp/sim-ref.log 2>&1 || tail /tmp/sim-ref.log
el "reference simulated"
wait $ct; el "ctest done"; grep -E "tests passed|Failed|\*\*\*|Passed|ctest rc|^whole|FAIL" "$out/ctest-gpu.log" | head -24
a=$(python3 - /tmp/reference.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("--kv", d["optics"]["voltage_kV"], "--semiangle", d["optics"]["semiangle_mrad"], "--step", d["scan"]["step_A"][0],
      "--det-sampling", d["detector"]["sampling_mrad"][0])
PY
)
cat /tmp/reference.qem > /dev/null
[ $SECONDS -lt 200 ] && { timeout $(( 270 - SECONDS )) $B/tests/ssb4d_gpu_bench /tmp/reference.qem $a -o "$out/gpu-bench-reference.json" \
  > "$out/gpu-bench-reference.log" 2>&1; el "gpu bench rc $?"; grep -vE "^\s*$" "$out/gpu-bench-reference.log" | head -14; }
[ $SECONDS -lt 265 ] && { timeout $(( 290 - SECONDS )) $B/ssb4d bench view --data /tmp/reference.qem --backend cuda -o "$out/view-reference.json" \
  --force -q > "$out/view-reference.log" 2>&1; el "bench view rc $?"; tail -5 "$out/view-reference.log"; }
el end
