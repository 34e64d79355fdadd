#!/usr/bin/env bash
# gpu-final-40-41.sh — issues 40 and 41 on the merged tree, in ONE `run` call (the session's device time is
# short): build with CUDA; `ctest -L gpu` (the GPU start, the fused loss, refine's minibatch against the CPU)
# beside the reference simulation; then on the reference session (512² × 192², 9,265 BF): the GPU start's
# bench, ssb4d_gpu_bench with the fused loss, `ssb4d bench view --backend cuda`; refine per iteration on
# CPU and CUDA at 64² positions. Each step has a time guard. Carry: .device-deps .device-data. Records in $OUT.
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
el built; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
( timeout 240 ctest --test-dir $B -L gpu -E mpi --timeout 200 --output-on-failure > "$out/ctest-gpu.log" 2>&1; echo "ctest rc $?" >> "$out/ctest-gpu.log" ) &
ct=$!
$B/ssb4d simulate --preset reference --threads $(nproc) -q -o /tmp/reference.qem >/tmp/sim-ref.log 2>&1 || tail /tmp/sim-ref.log
el "reference simulated"
wait $ct; el "ctest -L gpu done"; grep -E "tests passed|Failed|\*\*\*|Passed|Skipped|ctest rc" "$out/ctest-gpu.log" | head -24
a=$(python3 - /tmp/reference.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("--kv", d["optics"]["voltage_kV"], "--semiangle", d["optics"]["semiangle_mrad"], "--step", d["scan"]["step_A"][0],
      "--det-sampling", d["detector"]["sampling_mrad"][0])
PY
)
cat /tmp/reference.qem > /dev/null
timeout 60 $B/tests/ssb4d_gstart_bench /tmp/reference.qem $a -o "$out/gstart-reference.json" > "$out/gstart-reference.log" 2>&1
el "gstart bench rc $?"; tail -20 "$out/gstart-reference.log"
[ $SECONDS -lt 400 ] && { SSB4D_CUDA_LOSS=fused timeout $(( 470 - SECONDS )) $B/tests/ssb4d_gpu_bench /tmp/reference.qem $a \
  -o "$out/gpu-bench-reference-fused.json" > "$out/gpu-bench-reference-fused.log" 2>&1
  el "gpu bench (fused) rc $?"; grep -vE "^\s*$" "$out/gpu-bench-reference-fused.log" | tail -24; }
[ $SECONDS -lt 460 ] && { SSB4D_CUDA_LOSS=fused timeout $(( 520 - SECONDS )) $B/ssb4d bench view --data /tmp/reference.qem --backend cuda \
  -o "$out/view-reference.json" --force -q > "$out/view-reference.log" 2>&1; el "bench view rc $?"; tail -6 "$out/view-reference.log"; }
[ $SECONDS -lt 520 ] && { $B/ssb4d simulate --preset small --scan 64 --scan-cells 8 --detector 64 --cells-z 10 --threads $(nproc) -q \
    --force -o /tmp/r64.qem >/tmp/sim-64.log 2>&1
  for bk in cuda cpu; do
    timeout $(( 580 - SECONDS )) $B/ssb4d refine /tmp/r64.qem --backend $bk --threads $(nproc) --iterations 2 --slices 3 \
      --thickness-range 2:6 --json --force -q -o /tmp/ref-$bk-64 > "$out/refine-$bk-64.json" 2>"$out/refine-$bk-64.err"
    el "refine $bk 64² rc $?"; tail -2 "$out/refine-$bk-64.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in ('backend','seconds_per_iteration','device_peak_bytes','nll','C10_nm','thickness_nm','confident')})" "$out/refine-$bk-64.json" 2>/dev/null
  done; }
el end
