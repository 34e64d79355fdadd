#!/bin/bash
# The fit study on the lent machine: build, then one study process per case on every core.
#   bench/device-study.sh OUT_NAME SECONDS "CASES" [study options...]
set -eu
name=$1 secs=$2 cases=$3
shift 3
. .device-deps/activate.sh >/dev/null
[ -x build/bench/ssb4d_fit_study ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSB4D_TESTS=OFF -DSSB4D_FUZZ=OFF >/dev/null
cmake --build build -j16 --target ssb4d_fit_study >/dev/null
start=$(date +%s)
bench/fit-study-xargs.sh build "$OUT/$name.jsonl" "$(nproc)" "$secs" "$cases" "$@" 2>"$OUT/$name.err" || true
echo "$name: $(wc -l <"$OUT/$name.jsonl") cases in $(( $(date +%s) - start )) s on $(nproc) cores"
