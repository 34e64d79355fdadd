#!/usr/bin/env bash
# fit-regions settles the 180 deg branch on its thinnest region (issue 32; docs/fit.md "Regions").
# A simulated Au wedge (tiny preset widened to a 64x64 scan, 1 to 5 cells = 0.41 to 2 nm along the
# scan columns, scan rotation 200 deg, no sidecar so the rotation is not given), fitted on a 1x2
# grid: the thin half settles the branch (|skewness| >= 1.5, confident) and the thick half is
# refitted with its rotation and handedness held (confident unless its phase does not look like a
# thin specimen's), so both end within 1 deg of the truth, the thick
# one's rotation_source "region 0:64,0:32" (quoted in regions.csv) and regions.json's
# branch_region naming the thin one. With --rotation-per-region (the behaviour before), the thick
# half's own fit is wrong or not confident, so this test can fail.
# usage: regions_branch.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

"$BIN" simulate --preset tiny --specimen au --scan 64 --scan-cells 6 --scan-rotation 200 --wedge 0.41:2 \
    --threads 2 -q -o "$T/w.npy" && ok || bad "simulate the wedge"
rm -f "$T/w.json" # the rotation is not given
M="--kv 300 --semiangle 25 --scan-step 0.3823125 --threads 2"

expect 0 "fit-regions" "region 1 \(rows 0:64, cols 0:32\) settles the 180 deg branch" -- \
    "$BIN" fit-regions "$T/w.npy" $M --grid 1x2 -o "$T/r"
grep -q "held from region 0:64,0:32" "$T/err" && ok || bad "no 'held from' line: $(cat "$T/err")"
"$PY" - "$T/r/regions.json" <<'PY' && ok || bad "the regions did not end on the thin region's branch: $(cat "$T/r/regions.json" | head -c 600)"
import json, sys
d = json.load(open(sys.argv[1]))
b, (thin, thick) = d['branch_region'], d['regions']
assert b['index'] == 0 and b['region'] == 'region 0:64,0:32' and b['skewness'] >= 1.5, b
for r in (thin, thick):
    assert abs((r['rotation_deg'] - 200 + 180) % 360 - 180) < 1, r['rotation_deg']
    assert r['flip'] is False and r['rotation_set_by'] == 0
assert thin['rotation_source'] == 'parallax' and thin['confident']
assert thick['rotation_source'] == thick['flip_source'] == 'region 0:64,0:32'
# the thick half (1.2-2 nm of Au) on the held branch: confident, or not only because its phase
# does not look like a thin specimen's (the thin model's C12 there: docs/fit.md "Confidence")
assert thick['confident'] or 'clear positive peaks' in thick['warning'], thick['warning']
assert d['not_confident'] == (0 if thick['confident'] else 1)
PY
grep -qE '^0,64,32,64,.*,"region 0:64,0:32",[01]$' "$T/r/regions.csv" && ok || bad "regions.csv: $(cat "$T/r/regions.csv")"

# each region on its own: the thick half's fit is not right, or not confident
expect 0 "fit-regions --rotation-per-region" "" -- \
    "$BIN" fit-regions "$T/w.npy" $M --grid 1x2 -o "$T/p" --rotation-per-region -q
"$PY" - "$T/p/regions.json" <<'PY' && ok || bad "--rotation-per-region: the thick half is right and confident on its own (the test shows nothing)"
import json, sys
d = json.load(open(sys.argv[1]))
thick = d['regions'][1]
assert d['branch_region'] is None and thick['rotation_set_by'] is None
right = abs((thick['rotation_deg'] - 200 + 180) % 360 - 180) < 1
assert not (right and thick['confident']), thick
PY

one_line 2 "--rotation-per-region on fit" "--rotation-per-region belongs to fit-regions" -- \
    "$BIN" fit "$T/w.npy" $M --rotation-per-region -o "$T/x"
"$BIN" fit-regions --help | grep -q -- "--rotation-per-region" && ok || bad "--help has no --rotation-per-region"

finish regions_branch.sh
