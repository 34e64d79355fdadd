#!/usr/bin/env bash
# gpu-41-fused.sh — issue 41 items 2 and 5 on the device: the exact loss in one pass (src/cuda/loss_fused.cu)
# against the cuFFT path (SSB4D_CUDA_LOSS=cufft) on the committed tree, in two `run` calls:
#   a: build this tree with CUDA; ctest -L gpu (gpu_cuda: the fused loss vs the cuFFT path vs the CPU, the device
#      bytes of both paths to the byte); simulate the reference session (512² scan × 192² detector); ssb4d_gpu_bench
#      with the fused loss and with the cuFFT path (loss, release, redraw, fit, per-stage profile, device peak).
#   b: bench/tools/gpu-bits.sh (main's snapshot in .main-src against this tree: the GPU results' hashes), then
#      `ssb4d bench view --backend cuda` and `ssb4d plan --backend cuda` on the reference session.
# Carry: .device-deps .device-data (b: also .main-src .gpucmp). Records in $OUT.
set -uo pipefail
step=${1:?usage: gpu-41-fused.sh a|b}
root=$PWD
out=${OUT:-/tmp/out}
mkdir -p "$out"
. .device-deps/activate.sh >/dev/null
B=/tmp/b-new
build() {
  [ -x $B/ssb4d ] && return 0
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=ON -DSSB4D_TESTS=ON -DSSB4D_FUZZ=OFF \
    -DSSB4D_SHARED_DATA=$root/.device-data >/tmp/cfg.log 2>&1 && cmake --build $B -j16 >/tmp/bld.log 2>&1 ||
    { tail -30 /tmp/cfg.log /tmp/bld.log; exit 1; }
  echo "built $(date +%T) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
}
simulate() {
  [ -s /tmp/reference.qem ] && return 0
  t0=$(date +%s); $B/ssb4d simulate --preset reference --threads $(nproc) -q -o /tmp/reference.qem >/tmp/sim-ref.log 2>&1 ||
    tail /tmp/sim-ref.log
  echo "reference simulated in $(( $(date +%s) - t0 )) s"
}
args() {
  python3 - /tmp/reference.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("--kv", d["optics"]["voltage_kV"], "--semiangle", d["optics"]["semiangle_mrad"], "--step", d["scan"]["step_A"][0],
      "--det-sampling", d["detector"]["sampling_mrad"][0])
PY
}
case $step in
a)
  build
  (cd $B && timeout 150 ctest -L gpu -R gpu_cuda --output-on-failure -V) > "$out/ctest-gpu.log" 2>&1
  echo "ctest gpu rc $?"; grep -E "fused|device bytes|passed|FAIL|Passed|Failed" "$out/ctest-gpu.log" | head -30
  simulate
  a=$(args)
  for path in fused cufft; do
    env SSB4D_CUDA_LOSS=$path timeout 150 $B/tests/ssb4d_gpu_bench /tmp/reference.qem $a \
      -o "$out/gpu-bench-reference-$path.json" > "$out/gpu-bench-reference-$path.log" 2>&1
    echo "gpu bench ($path) rc $?"; grep -vE "^\s*$" "$out/gpu-bench-reference-$path.log" | tail -22
  done
  if [ $SECONDS -lt 190 ]; then # the group's share of L2: 32 pixels (33.7 MB at 512²) where time is left
    env SSB4D_CUDA_LOSS=fused SSB4D_CUDA_FUSED_GROUP=32 timeout $(( 280 - SECONDS )) $B/tests/ssb4d_gpu_bench \
      /tmp/reference.qem $a -o /tmp/g32.json > /tmp/g32.log 2>&1
    echo "gpu bench (fused, group 32) rc $?"; grep -E "exact_loss|release|batch8|breakdown" /tmp/g32.log
  fi
  ;;
b)
  build
  bash bench/tools/gpu-bits.sh > "$out/gpu-bits.log" 2>&1; echo "gpu-bits rc $?"; grep -E "IDENTICAL|rc|fit|tilt|passed|Failed" "$out/gpu-bits.log" | head -20
  simulate
  timeout 120 $B/ssb4d bench view --data /tmp/reference.qem --backend cuda -o "$out/view-reference.json" --force -q \
    > "$out/view-reference.log" 2>&1
  echo "bench view rc $?"; tail -8 "$out/view-reference.log"
  $B/ssb4d plan --shape 512x512x192x192 --bf 9265 --backend cuda > "$out/plan-reference.txt" 2>&1
  sed -n '/GPU memory/,$p' "$out/plan-reference.txt" | head -24
  ;;
esac
