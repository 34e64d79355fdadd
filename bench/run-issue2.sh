#!/usr/bin/env bash
# Reproduces the issue-2 figures: G build, exact loss per candidate and object time for the
# `small` and `medium` presets (median of REPEAT runs), plus the medium --memory-report table.
# usage: bench/run-issue2.sh [BIN] [WORKDIR] [REPEAT]   (writes JSON lines on stdout)
set -euo pipefail
BIN=${1:-build/ssb4d}
WORK=${2:-/tmp/ssb4d-bench}
REPEAT=${3:-3}
mkdir -p "$WORK"
for preset in small medium; do
    [ -f "$WORK/$preset.npy" ] || "$BIN" simulate --preset "$preset" -o "$WORK/$preset.npy" --quiet
    for i in $(seq "$REPEAT"); do
        "$BIN" reconstruct "$WORK/$preset.npy" -o "$WORK/$preset-phase.npy" --force --quiet --json |
            sed "s/^{/{\"workload\":\"$preset\",\"repeat\":$i,\"machine\":\"$(nproc) cores\",/"
    done
done
"$BIN" reconstruct "$WORK/medium.npy" -o "$WORK/medium-phase.npy" --force --quiet --memory-report 2>&1 >/dev/null |
    sed 's/^/# /'
