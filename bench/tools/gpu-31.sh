#!/usr/bin/env bash
# gpu-31.sh — issue 31's measurements on the device, before (.main-src: `git archive REV`, with
# this tree's tests/gpu/bench_cuda.c copied in) and after (this tree), side by side on one card.
#
#   bench/tools/gpu-31.sh build|bench|view|check|ncu|final   (each step fits one `run` call; a warm machine keeps /tmp)
#
# build: both trees with -DSSB4D_CUDA=ON (/tmp/b-old, /tmp/b-new); simulate medium (256²×128²)
#        and reference (512²×192²) into /tmp/*.qem.
# bench: ssb4d_gpu_bench on both sizes, old then new (records $OUT/gpu-{old,new}-{medium,reference}.json).
# view:  ssb4d bench view --backend cuda on reference (drags and releases over HTTP), old and new.
# ncu:   Nsight Compute's speed-of-light and memory sections of the loss's kernels in a fit.
# check: the fit's trace hash on the GPU, old and new (the loss's bits); ctest -L gpu; the device
#        plan; a bench run record's device_peak_bytes; compute-sanitizer memcheck on test_cuda --quick.
# TREES=new: the new tree alone (build, bench). Carry: .device-deps .device-data .main-src.
set -uo pipefail
. .device-deps/activate.sh >/dev/null
root=$PWD
out=${OUT:-/tmp/out}
mkdir -p "$out"
step=${1:?usage: gpu-31.sh build|bench|view|check}
sim() { # PRESET
  [ -f /tmp/$1.qem ] || /tmp/b-new/ssb4d simulate --preset $1 --threads $(nproc) -q -o /tmp/$1.qem >/tmp/sim-$1.log 2>&1 ||
    { tail /tmp/sim-$1.log; return 1; }
}
args() { # PRESET: the bench's optics from the simulation's sidecar
  python3 - /tmp/$1.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("--kv", d["optics"]["voltage_kV"], "--semiangle", d["optics"]["semiangle_mrad"], "--step", d["scan"]["step_A"][0],
      "--det-sampling", d["detector"]["sampling_mrad"][0])
PY
}
case $step in
build)
  t0=$(date +%s)
  for t in ${TREES:-old new}; do
    d=$root; [ $t = old ] && d=$root/.main-src
    ( cd $d && cmake -S . -B /tmp/b-$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=ON -DSSB4D_TESTS=ON \
        -DSSB4D_FUZZ=OFF -DSSB4D_SHARED_DATA=$root/.device-data >/tmp/cfg-$t.log 2>&1 &&
      cmake --build /tmp/b-$t -j8 >/tmp/bld-$t.log 2>&1 ) || { tail -30 /tmp/cfg-$t.log /tmp/bld-$t.log; exit 1; } &
  done
  wait
  echo "built both in $(( $(date +%s) - t0 )) s"
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv | tee "$out/gpu.txt"
  t0=$(date +%s); sim medium && { [ -n "${NOREF:-}" ] || sim reference; }; echo "simulated in $(( $(date +%s) - t0 )) s"
  ls -la /tmp/*.qem ;;
bench)
  for p in ${PRESETS:-medium reference}; do
    a=$(args $p)
    for t in ${TREES:-old new}; do
      echo "== $t $p"
      /tmp/b-$t/tests/ssb4d_gpu_bench /tmp/$p.qem $a -o "$out/gpu-$t-$p.json" 2>&1 | tee "$out/bench-$t-$p.log"
    done
  done ;;
view)
  for t in old new; do
    echo "== $t"
    /tmp/b-$t/ssb4d bench view --data /tmp/${PRESET:-reference}.qem --backend cuda -o "$out/view-$t.json" --force -q \
      >"$out/view-$t.log" 2>&1 || { tail "$out/view-$t.log"; }
    tail -8 "$out/view-$t.log"
  done ;;
check)
  a=$(args medium)
  for t in old new; do
    /tmp/b-$t/ssb4d fit /tmp/medium.qem --backend cuda -o /tmp/fit-$t --json --force 2>/dev/null |
      python3 -c "import json,sys; d=json.load(sys.stdin); print('$t fit trace', d['trace_sha256'], d.get('loss'))"
  done
  timeout 300 ctest --test-dir /tmp/b-new -L gpu --output-on-failure >"$out/ctest-gpu.log" 2>&1
  grep -E "device bytes|tests passed|Failed|FAIL|mpi_cuda:|gpu_cuda" "$out/ctest-gpu.log" | head -20
  # the device plan with cuFFT's own work figures, and a bench record's device_peak_bytes
  /tmp/b-new/ssb4d plan --shape 512x512x192x192 --bf 9265 --backend cuda 2>&1 | sed -n '/GPU memory/,$p' | head -22
  /tmp/b-new/ssb4d bench run --data /tmp/medium.qem --backend cuda --repeat 1 -o "$out/run-medium.json" --force -q \
    >"$out/run-medium.log" 2>&1; echo "bench run rc $?"
  python3 -c "import json; d=json.load(open('$out/run-medium.json')); print([(s['name'], s['device_peak_bytes']) for s in d['stages']])"
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout 200 "$cs" --tool memcheck --error-exitcode 9 /tmp/b-new/tests/test_cuda --quick >"$out/memcheck.log" 2>&1
  echo "compute-sanitizer memcheck exit $?"; tail -3 "$out/memcheck.log" ;;
final) # the last check, lean: the new tree's GPU tests, memcheck, the device plan, a record's device peaks
  TREES=new NOREF=1 bash "$0" build | head -3
  timeout 240 ctest --test-dir /tmp/b-new -L gpu --output-on-failure >"$out/ctest-gpu.log" 2>&1
  grep -E "device bytes|tests passed|Failed|FAIL|mpi_cuda:|passed \(" "$out/ctest-gpu.log" | head -20
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout 150 "$cs" --tool memcheck --error-exitcode 9 /tmp/b-new/tests/test_cuda --quick >"$out/memcheck.log" 2>&1
  echo "compute-sanitizer memcheck exit $?"; tail -2 "$out/memcheck.log"
  /tmp/b-new/ssb4d plan --shape 512x512x192x192 --bf 9265 --backend cuda 2>&1 | sed -n '/GPU memory/,$p' | head -22
  /tmp/b-new/ssb4d bench run --data /tmp/medium.qem --backend cuda --repeat 1 -o "$out/run-medium.json" --force -q \
    >"$out/run-medium.log" 2>&1; echo "bench run rc $?"
  python3 -c "import json; d=json.load(open('$out/run-medium.json')); print([(s['name'], s['device_peak_bytes']) for s in d['stages']])" ;;
ncu) # where the loss's kernels stand against the card (Nsight Compute, clocks left alone)
  n=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$n" ] || { echo "no ncu"; exit 0; }
  a=$(args ${PRESET:-reference})
  timeout 400 "$n" --clock-control none -k regex:'k_correct_pix|k_phase_sum|k_finish|regular_fft|vector_fft|fft' \
    --launch-skip ${SKIP:-400} --launch-count ${COUNT:-6} --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section LaunchStats --section Occupancy \
    /tmp/b-new/ssb4d fit /tmp/${PRESET:-reference}.qem --backend cuda -o /tmp/ncu-fit --force -q >"$out/ncu.txt" 2>&1
  echo "ncu exit $?"
  grep -E "^  [a-zA-Z_].*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|L2 Hit|L1/TEX Hit" "$out/ncu.txt" | head -80 ;;
esac
