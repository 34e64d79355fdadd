#!/usr/bin/env bash
# refine_bench.sh — `ssb4d refine`'s speed and memory at 64² and 256² positions on this CPU, each
# beside its floor (issue 40, "Speed and memory"; docs/refine.md "Costs"):
#   * a simulated 256² scan of the small preset (64² detector; SrTiO3 8 cells = 3.1 nm, beam
#     tilt (2, -1) mrad), fitted once (its calibration file seeds the refinements);
#   * `ssb4d refine --iterations 2 --slices 2 --threads T` on the central 64² region and on the
#     whole 256² scan, under /usr/bin/time -v (CPU time, peak RSS), with --memory-report (the
#     tracked peak) and --json (seconds_per_iteration: wall clock of one pass of the solve);
#   * `ssb4d plan --refine` for the same region (the tracked bytes it predicts);
#   * the FFT floor: this machine's FFTW float 128² complex transform (FFTW_ESTIMATE, one core,
#     CPU time) times the transforms a 2-pass run makes (docs/refine.md "Costs").
# Writes OUT (default bench/refine-cpu-<date>.txt) with the commands, the machine and its load.
# usage: bench/tools/refine_bench.sh SSB4D_BIN WORKDIR [OUT] [THREADS]
#        (REUSE=1: take refine's outputs already in WORKDIR instead of running them again)
set -eu
BIN=$(realpath "$1")
W=$2
OUT=${3:-bench/refine-cpu-$(date -u +%Y%m%d).txt}
TH=${4:-1}
mkdir -p "$W"
OUT=$(realpath -m "$OUT")
cd "$W"
log() { echo "$*" | tee -a "$OUT"; }
: >"$OUT"
log "# ssb4d refine on this CPU: 64^2 and 256^2 positions (bench/tools/refine_bench.sh, $(date -u +%FT%TZ))"
log "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, \
$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)"
log "ssb4d: $("$BIN" --version 2>/dev/null | head -1)"

# the FFT rate: one core, CPU time, the transform refine plans (FFTW_ESTIMATE, float, complex 2-D)
cat >fft_rate.c <<'EOF'
#include <fftw3.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv)
{
    int n = atoi(argv[1]), reps = atoi(argv[2]);
    fftwf_complex *a = fftwf_malloc(sizeof(fftwf_complex) * n * n);
    for (int i = 0; i < n * n; i++) a[i][0] = (float)(i % 7), a[i][1] = 0;
    fftwf_plan f = fftwf_plan_dft_2d(n, n, a, a, FFTW_FORWARD, FFTW_ESTIMATE);
    fftwf_plan b = fftwf_plan_dft_2d(n, n, a, a, FFTW_BACKWARD, FFTW_ESTIMATE);
    struct timespec t0, t1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    for (int r = 0; r < reps; r++) { fftwf_execute(f); fftwf_execute(b); }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    printf("%.3f\n", s / (2.0 * reps) * 1e6);
    return 0;
}
EOF
cc -O2 fft_rate.c -o fft_rate -lfftw3f -lm
FFT_US=$(./fft_rate 128 3000)
log "FFTW float 128x128 complex transform (FFTW_ESTIMATE, in place, one core): $FFT_US us CPU each"
log "  (5 n log2 n = 1.147 MFLOP: $(awk -v u="$FFT_US" 'BEGIN {printf "%.1f", 1.147e6 / (u * 1e-6) / 1e9}') GFLOP/s)"

[ -f s256.npy ] || "$BIN" simulate --preset small --scan 256 --cells-z 8 --tilt 2,-1 -o s256.npy -q --force
[ -f fit256/calibration.json ] || "$BIN" fit s256.npy -o fit256 -q --force >/dev/null
for R in 64 256; do
    if [ "$R" = 64 ]; then REG=96:160,96:160; else REG=0:256,0:256; fi
    CMD=("$BIN" refine s256.npy --calibration fit256/calibration.json --region "$REG" --slices 2 --thickness 3.1
         --thickness-range 1:8 --iterations 2 --threads "$TH" -o "ref$R" --force --json --memory-report)
    log ""
    log "== $R^2 positions: ${CMD[*]}"
    if [ -n "${REUSE:-}" ] && [ -s "ref$R.json" ] && [ -s "load$R.txt" ]; then
        log "(REUSE: the outputs of an earlier run of this command in $W)"
    else
        echo "load before: $(cat /proc/loadavg)" >"load$R.txt"
        /usr/bin/time -v "${CMD[@]}" >"ref$R.json" 2>"ref$R.err"
        echo "load after:  $(cat /proc/loadavg)" >>"load$R.txt"
    fi
    tee -a "$OUT" <"load$R.txt"
    "$BIN" plan s256.npy --refine "$REG" --slices 2 --threads "$TH" --json >"plan$R.json" 2>/dev/null || true
    /usr/bin/python3 - "ref$R.json" "ref$R.err" "plan$R.json" "$FFT_US" <<'PYEOF' | tee -a "$OUT"
import json, re, sys
rec = json.load(open(sys.argv[1]))
err = open(sys.argv[2]).read()
plan = json.load(open(sys.argv[3]))["refine"]
fft_us = float(sys.argv[4])
def t(key):
    m = re.search(re.escape(key) + r".*: ([0-9.:]+)%?[ \t]*$", err, re.M)
    return m.group(1) if m else "?"
cpu = float(t("User time")) + float(t("System time"))
npos = (rec["region"][1] - rec["region"][0]) * (rec["region"][3] - rec["region"][2])
n = rec["probe_shape"][0] * rec["probe_shape"][1]
ns = rec["slices"]
# 2 passes: pass 1 the object (2N forward + 2N backward per position); pass 2 the object again
# and the global parameters joining: the loss at the start, 2 per parameter for its curvature
# (6 parameters), 1 or 2 line-search trials: 14-15 forward-only passes of 2N transforms
ffts = (4 * ns + 4 * ns + 15 * 2 * ns) * npos
floor = ffts * fft_us * 1e-6
print(f"positions {npos}, model grid {rec['probe_shape']}, object {rec['object_shape']}, {ns} slices")
print(f"refine: {rec['refine_seconds']:.1f} s wall; seconds_per_iteration (wall) {rec['seconds_per_iteration']:.1f} s")
m = re.search(r"session peak +([0-9.]+) \(footprint ([0-9.]+)\)", err)
print(f"command: {cpu:.1f} s CPU, {t('Elapsed')} wall, {t('Percent of CPU')} % of a CPU; memory report: session "
      f"peak {m.group(1) if m else '?'} GiB tracked, footprint {m.group(2) if m else '?'} GiB (the process's "
      f"high-water mark, reset per stage: time -v's maximum RSS is the last stage's)")
print(f"CPU per iteration (the command's CPU less about 1 % for calibrating, loading and saving, / 2): "
      f"{0.99 * cpu / 2:.1f} s")
print(f"tracked: refine's peak {rec['refine_peak_tracked_bytes']} bytes ({rec['refine_peak_tracked_bytes'] / 2**30:.3f} "
      f"GiB), the plan's {plan['peak_bytes']} (patterns {plan['patterns_bytes']}, workspace {plan['workspace_bytes']}, "
      f"frames {plan['frames_bytes']})")
print(f"floor: {ffts / npos / 2:.0f} transforms per position per iteration (2-pass average; an object-only pass "
      f"{4 * ns}), {ffts * 1.147e6 / 2 / 1e9:.0f} GFLOP per iteration; at {fft_us:.1f} us each {floor / 2:.1f} s CPU "
      f"per iteration: measured / floor = {0.99 * cpu / floor:.2f}")
obj = rec["object_shape"][0] * rec["object_shape"][1] * ns
batches = -(-npos // 32)
print(f"bytes per iteration (estimates): patterns {npos * plan['valid_pixels'] * 4 / 2**20:.0f} MiB per pass over "
      f"the positions (8.5 passes an iteration on average); object crops per position and object pass "
      f"{ns * n * (8 + 4 + 16) / 2**10:.0f} KiB (transmission read, gradient crop written, summed into the double "
      f"gradient); Adam's step per minibatch over its crops' bounding box (shuffled positions: about the whole "
      f"object, {obj * 28 / 2**20:.1f} MiB) x {batches} minibatches = {obj * 28 * batches / 2**30:.1f} GiB an object pass")
PYEOF
done
