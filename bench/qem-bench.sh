#!/usr/bin/env bash
# Runs the .qem read benchmark (builds nothing) on one file and appends its JSON line to
# bench/qem-<UTC date>.jsonl; the table goes to stdout.
# Usage: bench/qem-bench.sh BUILD_DIR FILE.qem [--threads T] [--bf-fraction F] [--block-mib M]
# Use a Release build without sanitizers for meaningful throughput.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR FILE.qem [ssb4d_qem_bench args...]" >&2
  exit 2
fi
build=$1
file=$2
shift 2
bin=$build/ssb4d_qem_bench
[ -x "$bin" ] || bin=$build/bench/ssb4d_qem_bench
if [ ! -x "$bin" ]; then
  echo "qem-bench: no ssb4d_qem_bench in $build (cmake --build $build --target ssb4d_qem_bench)" >&2
  exit 2
fi
out=$here/qem-$(date -u +%Y%m%d).jsonl
"$bin" "$file" --json-out "$out" "$@"
echo "qem-bench: appended to $out"
