#!/usr/bin/env bash
# `import --hot-pixels` as the user sees it: what `info` says was done to the flagged pixels
# (policy, how many were flagged, whether their counts were replaced; human and --json), and what
# `verify` says about a file whose flagged pixels were replaced: the replaced values are the
# import's recorded step, not damage, while a real difference is still reported as one.
# usage: hot_pixels.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
G=$2/qem-golden
. "$(dirname "$0")/lib/harness.sh"

# 16x16 scans of a 12x12 detector (uint16): pixel (4, 5) hot (100x its neighbours), pixel (8, 2)
# dead (always 0). Written without NumPy. With --diff, one count of a valid pixel is changed.
make_npy() {
    python3 - "$@" <<'PY'
import struct, sys
R, C, DR, DC = 16, 16, 12, 12
hdr = "{'descr': '<u2', 'fortran_order': False, 'shape': (%d, %d, %d, %d), }" % (R, C, DR, DC)
pad = (64 - (10 + len(hdr) + 1) % 64) % 64
out = bytearray(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(hdr) + pad + 1) + hdr.encode() + b' ' * pad + b'\n')
vals = []
for t in range(R * C):
    for k in range(DR * DC):
        v = 20 + (t * 7 + k * 13) % 21
        if k == 4 * DC + 5: v *= 100
        if k == 8 * DC + 2: v = 0
        vals.append(v)
if len(sys.argv) > 2:                      # scan (3, 4), pixel (1, 1): a valid pixel
    vals[(3 * C + 4) * DR * DC + 1 * DC + 1] += 1
out += struct.pack('<%dH' % len(vals), *vals)
open(sys.argv[1], 'wb').write(out)
PY
}
make_npy "$T/hot.npy"
make_npy "$T/changed.npy" --diff

# json FILE EXPR: evaluates a Python expression over the JSON object j read from FILE.
json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"; }

for p in median zero none; do
    expect 0 "import --hot-pixels $p" "hot pixels +--hot-pixels $p" -- "$BIN" import -q "$T/hot.npy" -o "$T/$p.qem" --hot-pixels $p
done

# info: the policy, the flagged pixels by origin, and whether their counts were replaced.
expect 0 "info: median flagged" "flagged +2 pixels, marked invalid \(0 by the source's mask, 2 found hot or dead at import\)" -- "$BIN" info "$T/median.qem"
expect 0 "info: median replaced" "hot pixels +median at import: the counts of the 2 flagged pixels were replaced by the median of their valid 3x3 neighbours" -- "$BIN" info "$T/median.qem"
expect 0 "info: zero replaced" "hot pixels +zero at import: the counts of the 2 flagged pixels were set to 0" -- "$BIN" info "$T/zero.qem"
expect 0 "info: none kept" "hot pixels +none at import: no hot/dead detection; no count replaced" -- "$BIN" info "$T/none.qem"
expect 0 "info: none flagged nothing" "flagged +0 pixels \(0 by the source's mask, 0 found" -- "$BIN" info "$T/none.qem"
# A .qem not written by ssb4d import (the reference writer, with a mask): nothing recorded.
expect 0 "info: no import record" "hot pixels +no import record.*no count replaced" -- "$BIN" info "$G/u16-masked-20x30x33x17.qem"

"$BIN" info --json "$T/median.qem" >"$T/m.json" 2>&1
json "$T/m.json" "j['flagged_pixels'] == 2 and j['hot_pixels'] == {'policy': 'median', 'flagged_by_file': 0,
  'flagged_by_totals': 2, 'counts_replaced': True, 'method': 'median_3x3_valid_neighbours',
  'replaced_pixels': 2, 'markers_stored_as_zero': 0}" && ok || bad "info --json, median: $(cat "$T/m.json")"
"$BIN" info --json "$T/zero.qem" >"$T/z.json" 2>&1
json "$T/z.json" "j['hot_pixels']['policy'] == 'zero' and j['hot_pixels']['counts_replaced'] and
  j['hot_pixels']['method'] == 'zero'" && ok || bad "info --json, zero: $(cat "$T/z.json")"
"$BIN" info --json "$T/none.qem" >"$T/n.json" 2>&1
json "$T/n.json" "j['flagged_pixels'] == 0 and j['hot_pixels']['policy'] == 'none' and
  not j['hot_pixels']['counts_replaced'] and j['hot_pixels']['replaced_pixels'] == 0" &&
    ok || bad "info --json, none: $(cat "$T/n.json")"
"$BIN" info --json "$G/u16-masked-20x30x33x17.qem" >"$T/g.json" 2>&1
json "$T/g.json" "j['flagged_pixels'] == 36 and j['hot_pixels']['policy'] is None and
  j['hot_pixels']['flagged_by_file'] is None and not j['hot_pixels']['counts_replaced']" &&
    ok || bad "info --json, reference file: $(cat "$T/g.json")"

# verify: the replaced values are counted apart and said to be the import's step.
expect 0 "verify median" "identical in every compared count \(36352\); 512 values of the 2 flagged pixels whose counts the import replaced \(--hot-pixels median, recorded in the file\) were not compared" -- "$BIN" verify -q "$T/hot.npy" "$T/median.qem"
expect 0 "verify zero" "identical in every compared count.*--hot-pixels zero" -- "$BIN" verify -q "$T/hot.npy" "$T/zero.qem"
expect 0 "verify none compares all" "identical: 36864 counts compared" -- "$BIN" verify -q "$T/hot.npy" "$T/none.qem"
expect 0 "verify --strict none" "identical: 36864 counts compared" -- "$BIN" verify -q --strict "$T/hot.npy" "$T/none.qem"
# --strict compares them too: they differ (exit 3), but not as damage.
expect 3 "verify --strict median" "512 of 36864 counts differ between .*, all in the 2 flagged pixels whose counts the import replaced \(--hot-pixels median, recorded in the file\); every other count is identical" -- "$BIN" verify -q --strict "$T/hot.npy" "$T/median.qem"
grep -q DIFFER "$T/out" && bad "verify --strict calls replaced pixels a difference in the data: $(cat "$T/out")" || ok
grep -q "pixel (4, 5): original [0-9]*, .*median.qem [0-9]* (a flagged pixel replaced at import)" "$T/err" &&
    ok || bad "verify --strict does not mark the listed replaced values: $(head -3 "$T/err")"
"$BIN" verify -q --strict --json "$T/hot.npy" "$T/median.qem" >"$T/v.json" 2>&1
json "$T/v.json" "not j['identical'] and j['differences'] == 512 and j['differences_in_replaced'] == 512 and
  j['hot_pixels'] == 'median' and j['flagged_values_changed_at_import']" && ok || bad "verify --json: $(cat "$T/v.json")"
# A real difference in a valid pixel is still one, named, with or without --strict.
expect 3 "verify finds a real difference" "1 of 36352 counts DIFFER" -- "$BIN" verify -q "$T/changed.npy" "$T/median.qem"
grep -q "scan (3, 4) pixel (1, 1): original [0-9]*, .*median.qem [0-9]*$" "$T/err" && ok || bad "real difference not listed: $(cat "$T/err")"
expect 3 "verify --strict finds a real difference" "513 of 36864 counts DIFFER .*\(512 of them in the 2 flagged pixels" -- "$BIN" verify -q --strict "$T/changed.npy" "$T/median.qem"

# The help says what is kept and what is replaced.
"$BIN" import --help >"$T/help" 2>&1
grep -q "except those of" "$T/help" && grep -q "median (default)" "$T/help" && grep -q "none: no hot/dead" "$T/help" &&
    ok || bad "import --help does not say which counts are replaced"

finish hot_pixels.sh
