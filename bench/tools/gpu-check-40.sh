#!/usr/bin/env bash
# gpu-check-40.sh — on the device, from the repository root, in one `run` call (issues 39–40):
# build the last landed snapshot (.main-src: `git archive f5062cf`) and this tree with CUDA;
# the GPU's CLI hashes in both (reconstruct, fit, fit --tilt, and this tree's
# `reconstruct --estimator transfer` on the GPU against the CPU); ctest -L gpu here; then
# `ssb4d refine` (CPU engine) on 16 cores: per-pass time at 1, 4 and 16 threads and the same
# bits for each. Carry: .device-deps .device-data .main-src. Results under $OUT.
set -uo pipefail
. .device-deps/activate.sh >/dev/null
root=$PWD
out=${OUT:-/tmp/out}
mkdir -p "$out"
for t in old new; do
  d=$root; [ $t = old ] && d=$root/.main-src
  ( cd $d && cmake -S . -B /tmp/b-$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=ON -DSSB4D_TESTS=ON \
      -DSSB4D_FUZZ=OFF -DSSB4D_SHARED_DATA=$root/.device-data >/tmp/cfg-$t.log 2>&1 &&
    cmake --build /tmp/b-$t -j16 >/tmp/bld-$t.log 2>&1 ) || { tail -30 /tmp/cfg-$t.log /tmp/bld-$t.log; exit 1; }
  echo "built $t $(date +%T)"
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $out/device.txt
cd /tmp && /tmp/b-new/ssb4d simulate --preset small -o s.npy --quiet --force
for t in old new; do
  mkdir -p /tmp/c-$t && cd /tmp/c-$t
  B=/tmp/b-$t/ssb4d
  { $B reconstruct /tmp/s.npy --backend cuda -o r1.tiff >/dev/null 2>&1; sha256sum r1.tiff
    $B reconstruct /tmp/s.npy --backend cuda --upsample auto -o r2.tiff >/dev/null 2>&1; sha256sum r2.tiff
    $B fit /tmp/s.npy --backend cuda -o f --json --force 2>/dev/null | python3 -c "import json,sys; print('fit', json.load(sys.stdin)['trace_sha256'])"
    $B fit /tmp/s.npy --backend cuda --tilt -o t --json --force 2>/dev/null | python3 -c "import json,sys; print('tilt', json.load(sys.stdin)['trace_sha256'])"
  } > $out/cli-$t.txt 2>&1
done
diff $out/cli-old.txt $out/cli-new.txt && echo "GPU CLI HASHES IDENTICAL (old vs new)"
cd /tmp/c-new
B=/tmp/b-new/ssb4d
$B reconstruct /tmp/s.npy --backend cuda --estimator transfer -o tg.npy --force >/dev/null 2>&1
$B reconstruct /tmp/s.npy --backend cpu --estimator transfer -o tc.npy --force >/dev/null 2>&1
python3 - <<'PY' | tee $out/transfer.txt
import numpy as np
a = np.load('/tmp/c-new/tg.npy'); b = np.load('/tmp/c-new/tc.npy')
d = np.abs(a - b).max(); r = np.abs(b).max()
print('estimator transfer, GPU vs CPU: max |diff| %.3g of max |value| %.3g (%.2e)' % (d, r, d / r))
PY
cd $root
ctest --test-dir /tmp/b-new -L gpu --output-on-failure > $out/ctest-gpu.txt 2>&1; echo "ctest -L gpu rc $?"; tail -5 $out/ctest-gpu.txt
cd /tmp && $B simulate --preset small --thickness 3 --tilt 2,-1 --aberr C12=2,phi12=20 -o xs.npy --quiet --force 2>/dev/null || \
  $B simulate --preset small --thickness 3 --tilt 2,-1 -o xs.npy --quiet --force
$B fit xs.npy -o xf --force >/dev/null 2>&1
for th in 1 4 16; do
  /usr/bin/time -f "threads $th: %e s wall, %M KiB max RSS" $B refine xs.npy --calibration xf/calibration.json \
    --region 0:32,0:32 --threads $th -o /tmp/rf$th --force --json > $out/refine-t$th.json 2> $out/refine-t$th.err
  tail -1 $out/refine-t$th.err
  sha256sum /tmp/rf$th/slices.npy | cut -c1-16
done | tee $out/refine-threads.txt
