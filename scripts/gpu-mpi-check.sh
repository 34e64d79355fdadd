#!/usr/bin/env bash
# gpu-mpi-check.sh — the distributed session on the CUDA backend (issue 17, docs/scale.md), in
# one call on a machine with NVIDIA GPUs: build with CUDA and MPI, run the GPU tests (ctest -L
# gpu: gpu_cuda and mpi_cuda), then for each workload replay the session (`ssb4d bench run
# --backend cuda`) on one GPU without mpirun and under `mpirun -np N` for each N, and compare
# the G per-block, phase and trace hashes. With fewer GPUs than ranks the ranks share them
# (local rank modulo the GPUs): that checks the bits, not the speed-up.
#
#   scripts/gpu-mpi-check.sh OUT_DIR [--sizes medium,reference,1024] [--nps "1 2"] [--no-tests] [--no-gpu1]
#
# --no-gpu1: no run without mpirun (the hashes are then compared with np's first value).
#
# 1024 is the reference acquisition (192² detector, same step) over a 1024² scan: about 77 GB of
# counts, simulated straight into .qem. On the lent device: carry .device-deps
# (../shared/tools/device-deps.sh), .device-mpi (scripts/device-mpi-deps.sh) and .device-data.
# Records: OUT_DIR/run-SIZE-{gpu1,npN}.json, logs OUT_DIR/*.log, OUT_DIR/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-mpi-check.sh OUT_DIR [--sizes LIST] [--nps LIST] [--no-tests]}
shift
sizes=medium nps="1 2" tests=1 gpu1=1
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) sizes=$2; shift ;;
    --nps) nps=$2; shift ;;
    --no-tests) tests=0 ;;
    --no-gpu1) gpu1=0 ;;
    *) echo "gpu-mpi-check: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
exec > >(tee "$out/summary.txt") 2>&1
[ -f .device-deps/activate.sh ] && . .device-deps/activate.sh
[ -f .device-mpi/activate.sh ] && . .device-mpi/activate.sh
data=$PWD/../shared/data
[ -d .device-data ] && data=$PWD/.device-data
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
ncpu=$(nproc)
t0=$(date +%s)
cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=ON -DSSB4D_MPI=ON -DSSB4D_TESTS=ON \
  -DSSB4D_FUZZ=OFF -DSSB4D_SHARED_DATA="$data" >"$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j"$ncpu" >"$out/build.log" 2>&1 || { tail -30 "$out/configure.log" "$out/build.log"; exit 1; }
echo "gpu-mpi-check: built in $(( $(date +%s) - t0 )) s"
grep -E "MPI|CUDA backend" "$out/configure.log" | head -5
nvidia-smi --query-gpu=index,name,memory.total --format=csv | tee "$out/gpu.txt"
MPIEXEC=$(command -v mpirun || command -v mpiexec)
rc=0
if [ $tests = 1 ]; then
  ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tee "$out/ctest-gpu.log" | tail -60 || rc=1
  grep -q "100% tests passed" "$out/ctest-gpu.log" || rc=1
fi
str() { grep -o "\"$2\":[[:space:]]*\"[^\"]*\"" "$1" | head -1 | cut -d: -f2- | tr -d '"[:space:]'; }
for size in ${sizes//,/ }; do
  f=/tmp/gpu-mpi-$size.qem
  case $size in
    1024) sim=(--preset reference --scan 1024 --scan-cells 96) ;;
    *) sim=(--preset "$size") ;;
  esac
  t0=$(date +%s)
  [ -f $f ] || build-gpu/ssb4d simulate "${sim[@]}" --threads "$ncpu" -q -o $f >"$out/sim-$size.log" 2>&1 ||
    { echo "gpu-mpi-check: simulate $size failed"; tail "$out/sim-$size.log"; rc=1; continue; }
  echo "gpu-mpi-check: $size simulated in $(( $(date +%s) - t0 )) s ($(du -h $f | cut -f1) encoded)"
  base=$out/run-$size-gpu1.json
  if [ $gpu1 = 1 ]; then
    t0=$(date +%s)
    build-gpu/ssb4d bench run --data $f --backend cuda --repeat 1 --threads "$ncpu" -o "$base" \
      --force -q >"$out/run-$size-gpu1.log" 2>&1 || { echo "bench run $size failed"; tail "$out/run-$size-gpu1.log"; rc=1; }
    echo "== $size, one GPU, no mpirun ($(( $(date +%s) - t0 )) s)"; tail -16 "$out/run-$size-gpu1.log"
  else
    set -- $nps
    base=$out/run-$size-np$1.json
  fi
  for np in $nps; do
    t0=$(date +%s)
    SSB4D_MPI_TRAFFIC=1 "$MPIEXEC" --allow-run-as-root --oversubscribe --bind-to none -x SSB4D_MPI_TRAFFIC -np $np \
      build-gpu/ssb4d bench run --data $f --backend cuda --repeat 1 --threads $(( ncpu / np )) \
      -o "$out/run-$size-np$np.json" --force -q >"$out/run-$size-np$np.log" 2>&1 ||
      { echo "mpirun -np $np bench run $size failed"; tail "$out/run-$size-np$np.log"; rc=1; }
    echo "== $size, np $np ($(( $(date +%s) - t0 )) s)"; tail -16 "$out/run-$size-np$np.log"
    for k in G_blocks phase trace; do
      a=$(str "$base" $k) b=$(str "$out/run-$size-np$np.json" $k)
      if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "  $k same: $a"; else echo "  $k DIFFERS: $a vs $b"; rc=1; fi
    done
  done
done
tar -C "$out" -czf "$out.tgz" . 2>/dev/null # the device tool brings back a few files: all of them in one
exit $rc
