#!/usr/bin/env bash
# gpu-check.sh — the CUDA backend on a machine with an NVIDIA GPU, in one call (docs/gpu.md):
# build with -DSSB4D_CUDA=ON, run the GPU tests (ctest -L gpu) and compute-sanitizer on the quick
# test, simulate `medium` (and, with --reference, `reference`) straight into .qem, and time the
# session's stages on the GPU (and on the CPU for the agreement figures) with ssb4d_gpu_bench.
#
#   scripts/gpu-check.sh OUT_DIR [--reference] [--no-tests] [--gpu-only]
#
# --gpu-only: medium on the GPU alone (no CPU agreement run, no viewer or replay on medium).
#
# On the lent device machine (no Debian libraries there): carry .device-deps (made by
# ../shared/tools/device-deps.sh) and .device-data (a copy of ../shared/data); this script sources
# .device-deps/activate.sh when it is there. Records: OUT_DIR/gpu-*.json, logs OUT_DIR/*.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-check.sh OUT_DIR [--reference] [--no-tests]}
shift
reference=0 tests=1 gpuonly=0
for a in "$@"; do
  case $a in
    --reference) reference=1 ;;
    --no-tests) tests=0 ;;
    --gpu-only) gpuonly=1 ;;
    *) echo "gpu-check: unknown option $a" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
if [ -f .device-deps/activate.sh ]; then
  # a machine still warm from an earlier call keeps an older unpacked set: start again
  [ -e /opt/ssb4d-deps/.unpacked ] && [ -n "$(find .device-deps -name '*.deb' -newer /opt/ssb4d-deps/.unpacked)" ] &&
    rm -rf /opt/ssb4d-deps
  . .device-deps/activate.sh
fi
data=$PWD/../shared/data
[ -d .device-data ] && data=$PWD/.device-data
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
nproc=$(nproc)
t0=$(date +%s)
cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=ON -DSSB4D_TESTS=ON \
  -DSSB4D_FUZZ=OFF -DSSB4D_SHARED_DATA="$data" >"$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j"$nproc" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "gpu-check: built in $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,power.limit --format=csv | tee "$out/gpu.txt"
rc=0
if [ $tests = 1 ]; then
  ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tee "$out/ctest-gpu.log" | tail -40 || rc=1
  grep -q "100% tests passed" "$out/ctest-gpu.log" || rc=1
  if command -v compute-sanitizer >/dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    "$cs" --tool memcheck --error-exitcode 9 build-gpu/tests/test_cuda --quick >"$out/memcheck.log" 2>&1
    echo "gpu-check: compute-sanitizer memcheck exit $?"; tail -3 "$out/memcheck.log"
  fi
fi
bench() { # NAME PRESET [--cpu]
  local name=$1 preset=$2; shift 2
  local f=/tmp/gpu-check-$name.qem
  t0=$(date +%s)
  [ -f $f ] || build-gpu/ssb4d simulate --preset "$preset" --threads "$nproc" -q -o $f >"$out/sim-$name.log" 2>&1 ||
    { echo "gpu-check: simulate $preset failed"; tail "$out/sim-$name.log"; return 1; }
  echo "gpu-check: simulated $preset in $(( $(date +%s) - t0 )) s"
  local args
  args=$(python3 - "${f%.qem}.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["optics"]["voltage_kV"], d["optics"]["semiangle_mrad"], d["scan"]["step_A"][0], d["detector"]["sampling_mrad"][0])
PY
)
  set -- $args "$@"
  build-gpu/tests/ssb4d_gpu_bench $f --kv $1 --semiangle $2 --step $3 --det-sampling $4 "${@:5}" \
    -o "$out/gpu-$name.json" 2>&1 | tee "$out/bench-$name.log"
}
view() { # NAME: the viewer's drags and releases over HTTP on the CUDA backend (ssb4d bench view)
  build-gpu/ssb4d bench view --data /tmp/gpu-check-$1.qem --backend cuda -o "$out/view-$1.json" --force -q \
    >"$out/view-$1.log" 2>&1 || { echo "gpu-check: bench view $1 failed"; tail "$out/view-$1.log"; return 1; }
  tail -12 "$out/view-$1.log"
}
session() { # NAME: the replayed session (ssb4d bench run) on the CUDA backend
  build-gpu/ssb4d bench run --data /tmp/gpu-check-$1.qem --backend cuda --repeat 3 -o "$out/run-$1.json" --force -q \
    >"$out/run-$1.log" 2>&1 || { echo "gpu-check: bench run $1 failed"; tail "$out/run-$1.log"; return 1; }
  tail -25 "$out/run-$1.log"
}
if [ $gpuonly = 1 ]; then
  bench medium medium || rc=1
else
  bench medium medium --cpu || rc=1
  view medium || rc=1
  session medium || rc=1
fi
if [ $reference = 1 ]; then
  bench reference reference || rc=1
  view reference || rc=1
fi
exit $rc
