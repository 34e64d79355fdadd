#!/usr/bin/env bash
# bits.sh BIN [WORKDIR] — the hashes a refactor must leave unchanged: the demo's and the built-in
# fit's trace SHA-256 and phase images, and the phase images that the command-line tests make
# (reconstruct at the truth, 1x and auto-upsampled; a fit of the small preset, with --tilt too).
# Compare two builds: diff <(bench/bits.sh old/ssb4d) <(bench/bits.sh new/ssb4d).
set -euo pipefail
BIN=$(realpath "$1")
W=${2:-$(mktemp -d)}
mkdir -p "$W"
cd "$W"
h() { sha256sum "$1" | cut -c1-16; }
j() { /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['$1'][:16])"; }

"$BIN" demo --json 2>/dev/null | j trace_sha256 | sed 's/^/demo trace            /'
echo "demo phase.tiff       $(h ssb4d-demo/phase.tiff)"
"$BIN" fit --json -o builtin --force 2>/dev/null | j trace_sha256 | sed 's/^/fit (built-in) trace  /'
echo "fit (built-in) tiff   $(h builtin/phase.tiff)"
"$BIN" simulate --preset small -o s.npy --quiet --force
"$BIN" reconstruct s.npy -o r1.tiff --quiet >/dev/null 2>&1 || "$BIN" reconstruct s.npy -o r1.tiff >/dev/null
echo "reconstruct 1x tiff   $(h r1.tiff)"
"$BIN" reconstruct s.npy --upsample auto -o r2.tiff --quiet >/dev/null 2>&1 || "$BIN" reconstruct s.npy --upsample auto -o r2.tiff >/dev/null
echo "reconstruct auto tiff $(h r2.tiff)"
"$BIN" fit s.npy -o f --json --force 2>/dev/null | j trace_sha256 | sed 's/^/fit small trace       /'
echo "fit small tiff        $(h f/phase.tiff)"
echo "fit small object.npy  $(h f/object.npy)"
"$BIN" fit s.npy -o t --tilt --json --force 2>/dev/null | j trace_sha256 | sed 's/^/fit --tilt trace      /'
echo "fit --tilt tiff       $(h t/phase.tiff)"
