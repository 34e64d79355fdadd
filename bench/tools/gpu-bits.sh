#!/usr/bin/env bash
# gpu-bits.sh — on the device, from the repository root: build an older snapshot (.main-src, e.g. `git archive REV`) and this tree with CUDA, run bench/tools/gpu_bits.c (copied over tests/gpu/bench_cuda.c) and the CLI on the GPU in both, and diff the hashes; then ctest -L gpu. Carry .device-deps .device-data .gpucmp (gpu_bits.c, bench_cuda.c, this script) .main-src. Used for issue 30 (bench/issue30-gpu-bits-20261206.txt).
# On the device: build main's snapshot (.main-src) and this tree with the CUDA backend, the driver in place of
# tests/gpu/bench_cuda.c, and compare the GPU results' hashes; then the CLI on the GPU.
set -uo pipefail
. .device-deps/activate.sh
root=$PWD
for t in main br; do
  d=$root; [ $t = main ] && d=$root/.main-src
  cp .gpucmp/gpubits.c $d/tests/gpu/bench_cuda.c
  ( cd $d && cmake -S . -B /tmp/b-$t -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=ON -DSSB4D_TESTS=ON -DSSB4D_FUZZ=OFF -DSSB4D_SHARED_DATA=$root/.device-data >/tmp/cfg-$t.log 2>&1 &&
    cmake --build /tmp/b-$t -j16 >/tmp/bld-$t.log 2>&1 ) || { tail -30 /tmp/cfg-$t.log /tmp/bld-$t.log; exit 1; }
  echo "built $t $(date +%T)"
done
for t in main br; do /tmp/b-$t/tests/ssb4d_gpu_bench > $OUT/gpubits-$t.txt 2>&1; echo "$t rc $?"; done
diff $OUT/gpubits-main.txt $OUT/gpubits-br.txt && echo "GPU DRIVER BITS IDENTICAL"
cd /tmp && /tmp/b-main/ssb4d simulate --preset small -o s.npy --quiet --force
for t in main br; do
  mkdir -p /tmp/c-$t && cd /tmp/c-$t
  B=/tmp/b-$t/ssb4d
  { $B reconstruct /tmp/s.npy --backend cuda -o r1.tiff >/dev/null 2>&1; sha256sum r1.tiff
    $B reconstruct /tmp/s.npy --backend cuda --upsample auto -o r2.tiff >/dev/null 2>&1; sha256sum r2.tiff
    $B reconstruct /tmp/s.npy --backend cuda --aberr C30=2000,C21=100 --thickness 10 --tilt 1,-1 -o r3.tiff >/dev/null 2>&1; sha256sum r3.tiff
    $B fit /tmp/s.npy --backend cuda -o f --json --force 2>/dev/null | python3 -c "import json,sys; print('fit', json.load(sys.stdin)['trace_sha256'])"
    $B fit /tmp/s.npy --backend cuda --tilt -o t --json --force 2>/dev/null | python3 -c "import json,sys; print('tilt', json.load(sys.stdin)['trace_sha256'])"
    sha256sum f/phase.tiff t/phase.tiff; } > $OUT/cli-$t.txt 2>&1
done
diff $OUT/cli-main.txt $OUT/cli-br.txt && echo "GPU CLI BITS IDENTICAL"
cat $OUT/gpubits-br.txt $OUT/cli-br.txt
cd $root
git checkout -- tests/gpu/bench_cuda.c 2>/dev/null || cp .gpucmp/bench_cuda.c tests/gpu/bench_cuda.c
cmake --build /tmp/b-br -j16 >/tmp/bld2.log 2>&1 || tail -20 /tmp/bld2.log
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 ctest --test-dir /tmp/b-br -L gpu --output-on-failure 2>&1 | tail -25
