#!/usr/bin/env bash
# Runs the codec benchmark (builds nothing) and writes bench/codec-<date>.jsonl; the table goes to
# stdout. Usage: bench/codec-bench.sh [BUILD_DIR] [extra ssb4d_codec_bench args...]
# Use a Release build without sanitizers for meaningful throughput.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
shift || true
bin=$build/ssb4d_codec_bench
[ -x "$bin" ] || bin=$build/bench/ssb4d_codec_bench
if [ ! -x "$bin" ]; then
  echo "codec-bench: no ssb4d_codec_bench in $build (cmake --build $build --target ssb4d_codec_bench)" >&2
  exit 2
fi
out=$here/codec-$(date -u +%Y%m%d).jsonl
"$bin" --json-out "$out" "$@"
echo "codec-bench: wrote $out"
