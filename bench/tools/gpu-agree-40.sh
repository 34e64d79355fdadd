#!/usr/bin/env bash
# gpu-agree-40.sh — issue 40's GPU refinement against the CPU's own rounding spread, in one `run`
# call (docs/refine.md "Backends"). Builds this tree twice: with CUDA (B), and CPU-only with
# -march=native -ffp-contract=fast (F: the same arithmetic, rounded differently by fused
# multiply-adds). Then `ctest -L gpu -E mpi`, compute-sanitizer memcheck on the refinement's and
# the device start's GPU tests, and for a few simulated cases the whole refinement three ways from
# one calibration: CPU (B), CPU (F) and CUDA (B, twice: its bits repeat). If the GPU's distance
# from the CPU is of the size of F's, the GPU path is as right as the CPU is; the summary prints
# both. Carry: .device-deps .device-data. Records in $OUT.
set -uo pipefail
root=$PWD
out=${OUT:-/tmp/out}
mkdir -p "$out"
el() { echo "[$SECONDS s] $*"; }
. .device-deps/activate.sh >/dev/null
B=/tmp/b-agree F=/tmp/f-agree
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=ON -DSSB4D_TESTS=ON -DSSB4D_FUZZ=OFF \
    -DSSB4D_SHARED_DATA=$root/.device-data >/tmp/cfg.log 2>&1 && cmake --build $B -j16 >/tmp/bld.log 2>&1 ) ||
  { tail -40 /tmp/cfg.log /tmp/bld.log; exit 1; }
( cmake -S . -B $F -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=OFF -DSSB4D_TESTS=OFF -DSSB4D_FUZZ=OFF \
    -DCMAKE_C_FLAGS="-march=native -ffp-contract=fast" >/tmp/cfgf.log 2>&1 && cmake --build $F -j16 --target ssb4d >/tmp/bldf.log 2>&1 ) ||
  { tail -20 /tmp/cfgf.log /tmp/bldf.log; }
el built; nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"; git log --oneline -1 | tee "$out/commit.txt"
( timeout ${CTEST_S:-200} ctest --test-dir $B -L gpu -E mpi --timeout 190 --output-on-failure -V > "$out/ctest-gpu.log" 2>&1
  echo "ctest rc $?" >> "$out/ctest-gpu.log" ) &
ct=$!
# the cases: (name, simulate arguments); tiny preset: 32² scan, 48² detector
cases=(
  "thin --specimen srtio3 --cells-z 1 --c10 -3 --c12 1.5 --phi12 30 --scan-rotation 20"
  "srtio3-3.9nm --specimen srtio3 --cells-z 10 --c10 -4 --c12 1.5 --phi12 30 --tilt 2,-1 --scan-rotation 20"
  "au-10.6nm --specimen au --cells-z 26 --c10 -5 --c12 2 --phi12 20 --scan-rotation 30"
)
for c in "${cases[@]}"; do
  set -- $c; name=$1; shift
  d=/tmp/agree/$name; mkdir -p $d
  $B/ssb4d simulate --preset tiny "$@" --dose 1e4 --seed 7 --threads 16 -q --force -o $d/sim.npy >$d/log 2>&1 || { tail -3 $d/log; continue; }
  $B/ssb4d fit $d/sim.npy --tilt --json -q --force --threads 16 -o $d/fit > $out/$name-fit.json 2>>$d/log
  for v in cpu fma cuda cuda2; do
    bin=$B/ssb4d bk=cpu
    [ $v = fma ] && bin=$F/ssb4d
    [ ${v#cuda} != $v ] && bk=cuda
    [ -x $bin ] || continue
    timeout ${REFINE_S:-200} $bin refine $d/sim.npy --calibration $d/fit/calibration.json --backend $bk --threads 16 \
      --json -q --force -o $d/r-$v > $out/$name-$v.json 2>$out/$name-$v.err
    el "$name $v rc $?"
  done
done
wait $ct; el "ctest done"; grep -E "tests passed|Failed|\*\*\*|Passed|ctest rc|^whole|FAIL" "$out/ctest-gpu.log" | head -24
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
  for t in test_refine_cuda test_gstart; do
    ( cd $B/tests && timeout ${SAN_S:-150} $CS --tool memcheck --leak-check full ./$t > "$out/memcheck-$t.log" 2>&1
      echo "rc $?" >> "$out/memcheck-$t.log" )
    el "memcheck $t: $(grep -E 'ERROR SUMMARY|LEAK SUMMARY' "$out/memcheck-$t.log" | head -2 | tr '\n' ' ') $(tail -1 "$out/memcheck-$t.log")"
  done
else el "no compute-sanitizer"; fi
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, math, os, sys
out = sys.argv[1]
keys = ("C10_nm", "C12_nm", "phi12_probe_deg", "thickness_nm")
def get(name, v):
    try:
        return json.load(open(os.path.join(out, f"{name}-{v}.json")))
    except Exception:
        return None
for name in ("thin", "srtio3-3.9nm", "au-10.6nm"):
    r = {v: get(name, v) for v in ("cpu", "fma", "cuda", "cuda2")}
    for v, d in r.items():
        if d:
            print(f"{name:13s} {v:5s}: C10 {d['C10_nm']:.4f} C12 {d['C12_nm']:.4f} phi12 {d['phi12_probe_deg']:.3f} "
                  f"tilt {d['tilt_probe_mrad'][0]:.3f},{d['tilt_probe_mrad'][1]:.3f} t {d['thickness_nm']:.4f} "
                  f"dev/exp {d['nll']/d['nll_expected']:.4f} conf {d['confident']} {d.get('backend')} {d['seconds']:.1f} s")
    c = r["cpu"]
    for v in ("fma", "cuda"):
        if c and r[v]:
            e = r[v]
            dt = math.hypot(e['tilt_probe_mrad'][0] - c['tilt_probe_mrad'][0], e['tilt_probe_mrad'][1] - c['tilt_probe_mrad'][1])
            print(f"{name:13s} |{v} - cpu|: C10 {abs(e['C10_nm']-c['C10_nm']):.4f} nm, C12 {abs(e['C12_nm']-c['C12_nm']):.4f} nm, "
                  f"tilt {dt:.3f} mrad, t {abs(e['thickness_nm']-c['thickness_nm'])/c['thickness_nm']*100:.2f} %, "
                  f"dev {abs(e['nll']-c['nll'])/c['nll']*100:.2f} %")
    if r["cuda"] and r["cuda2"]:
        print(f"{name:13s} cuda repeat identical: {all(r['cuda'][k] == r['cuda2'][k] for k in keys + ('nll',))}")
PY
el end
