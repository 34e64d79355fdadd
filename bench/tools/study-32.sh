#!/bin/bash
# Issue 32's calibration study on the lent machine's cores (bench/fit-study-xargs.sh per case):
# thin specimens with nothing given, crystals (2–10 nm, and 10–20 nm tilted) with the rotation
# given, the standard fit's standard errors and confidence recorded in each line.
#   bench/tools/study-32.sh SECONDS THIN_CASES CRYSTAL_CASES [study options...]
set -u
secs=$1 thin=$2 cry=$3
shift 3
. .device-deps/activate.sh >/dev/null
cmake -S . -B build-study -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=OFF -DSSB4D_TESTS=OFF -DSSB4D_FUZZ=OFF >/dev/null &&
    cmake --build build-study -j16 --target ssb4d_fit_study >/dev/null || exit 1
n=$(nproc)
start=$(date +%s)
bench/fit-study-xargs.sh build-study "$OUT/thin.jsonl" $((n / 4)) "$secs" "$thin" "$@" 2>"$OUT/thin.err" &
bench/fit-study-xargs.sh build-study "$OUT/crystals.jsonl" $((n - n / 4)) "$secs" "$cry" --rotation-given "$@" 2>"$OUT/crystals.err"
wait
echo "thin $(wc -l <"$OUT/thin.jsonl"), crystals $(wc -l <"$OUT/crystals.jsonl") cases in $(( $(date +%s) - start )) s on $n cores"
