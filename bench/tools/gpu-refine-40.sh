#!/usr/bin/env bash
# gpu-refine-40.sh — issue 40's refine on the GPU, in one `run` call (docs/refine.md "Backends"):
# build this tree with CUDA, run the GPU tests of the refinement (`ctest -L gpu -R refine`), then
# time `ssb4d refine` per iteration on the CPU (all cores) and on CUDA at 64² positions (and 256²
# unless SMALL_ONLY=1) of a simulated small-detector scan (64² detector: the model grid 128²,
# 10 cells of SrTiO3, 3 slices), with the device peak and, beside each figure, the FFT floor of one
# gradient pass (flops and bytes of its transforms). Carry: .device-deps .device-data. Records in $OUT.
set -uo pipefail
root=$PWD
out=${OUT:-/tmp/out}
mkdir -p "$out"
. .device-deps/activate.sh >/dev/null
B=/tmp/b-refine
t0=$(date +%s)
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=ON -DSSB4D_TESTS=ON -DSSB4D_FUZZ=OFF \
    -DSSB4D_SHARED_DATA=$root/.device-data >/tmp/cfg-refine.log 2>&1 && cmake --build $B -j16 >/tmp/bld-refine.log 2>&1 ) ||
  { tail -40 /tmp/cfg-refine.log /tmp/bld-refine.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/gpu.txt"
timeout ${TEST_S:-120} ctest --test-dir $B -L gpu -R refine --output-on-failure > "$out/ctest-gpu-refine.log" 2>&1
echo "ctest rc $?"; grep -E "minibatch|whole|FAIL|Passed|Failed|tests passed" "$out/ctest-gpu-refine.log" | head -40
sizes="64"; [ -n "${SMALL_ONLY:-}" ] || sizes="64 256"
for N in $sizes; do
  t0=$(date +%s)
  $B/ssb4d simulate --preset small --scan $N --scan-cells $((N / 8)) --detector 64 --cells-z 10 --threads $(nproc) -q --force \
    -o /tmp/r$N.qem >/tmp/sim-$N.log 2>&1 || { tail /tmp/sim-$N.log; continue; }
  echo "simulated ${N}² in $(( $(date +%s) - t0 )) s"
  # 256²: minibatches of 256 (the solver's Adam step on the host runs over the object once per
  # minibatch); the CPU there only with CPU256=1 (about 2 minutes an iteration on 16 cores)
  bks="cpu cuda"; extra=""
  [ $N = 256 ] && { extra="--batch ${BATCH256:-256}"; [ -n "${CPU256:-}" ] || bks=cuda; }
  for bk in $bks; do
    timeout ${REFINE_S:-100} $B/ssb4d refine /tmp/r$N.qem --backend $bk --threads $(nproc) --iterations 2 --slices 3 \
      --thickness-range 2:6 $extra --json --force -q -o /tmp/ref-$bk-$N > "$out/refine-$bk-$N.json" 2>"$out/refine-$bk-$N.err"
    echo "refine $bk ${N}² rc $?"; tail -2 "$out/refine-$bk-$N.err"
  done
done
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, math, os, sys
out = sys.argv[1]
print("refine per iteration (2 iterations; 256²: minibatches of 256, seconds_per_iteration of the main solve), device peak, FFT floor of one gradient pass")
print("H100 floor: FP32 ~ 67 TFLOP/s, HBM ~ 3.35 TB/s; a pass: 4·ns transforms of the n-point grid per position")
for N in (64, 256):
    for bk in ("cpu", "cuda"):
        p = os.path.join(out, f"refine-{bk}-{N}.json")
        try:
            d = json.load(open(p))
        except Exception as e:
            print(f"{N}² {bk}: no record ({e.__class__.__name__})"); continue
        n = d["probe_shape"][0] * d["probe_shape"][1]; ns = d["slices"]
        r = d["region"]; npos = (r[1] - r[0]) * (r[3] - r[2])
        ffts = npos * 4 * ns
        flops = ffts * 5 * n * math.log2(n); byts = ffts * 16 * n
        print(f"{N}² {bk:4s}: {d['seconds_per_iteration']:.3f} s/iteration, device peak {d['device_peak_bytes']/2**30:.3f} GiB, "
              f"host tracked peak {d['peak_tracked_bytes']/2**30:.3f} GiB, grid {d['probe_shape']}, {ns} slices, "
              f"{npos} positions; floor {flops/1e9:.1f} GFLOP ({flops/67e12*1e3:.2f} ms), {byts/1e9:.2f} GB "
              f"({byts/3.35e12*1e3:.2f} ms); backend {d['backend']}, nll {d['nll']:.5f}, C10 {d['C10_nm']:.3f} nm, "
              f"t {d['thickness_nm']:.3f} nm")
PY
