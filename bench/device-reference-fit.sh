#!/usr/bin/env bash
# device-reference-fit.sh — on the lent GPU machine (its CPUs): build, simulate the reference
# workload (512² scan × 192² detector) straight into .qem, fit it, and leave the fit's JSON in
# $OUT. The fit's trace SHA-256 is the same for any thread count (SPEC §9), so it checks a
# refactor against bench/fit-reference-*.json without 20 minutes of simulation here.
# Run from the repository root with carry [".device-deps"]:
#   bash bench/device-reference-fit.sh
. .device-deps/activate.sh # before -e: its check for missing libraries ends in a grep
set -euo pipefail
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSB4D_TESTS=OFF -DSSB4D_FUZZ=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
W=${TMPDIR:-/tmp}/ssb4d-ref
mkdir -p "$W" "$OUT"
t0=$(date +%s.%N)
build/ssb4d simulate --preset reference -o "$W/ref.qem" --quiet --force
t1=$(date +%s.%N)
build/ssb4d fit "$W/ref.qem" --sidecar "$W/ref.json" -o "$W/fit" --force --quiet --json >"$OUT/fit-reference.json"
t2=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" -v c="$t2" -v n="$(nproc)" 'BEGIN { printf "simulate %.1f s, fit %.1f s on %d CPUs\n", b - a, c - b, n }' | tee "$OUT/times.txt"
grep -o '"trace_sha256":"[0-9a-f]*"' "$OUT/fit-reference.json"
