#!/usr/bin/env bash
# --rotation-from FILE (issue 32, docs/fit.md "Crystals"): the rotation and handedness of another
# acquisition at the same settings, held like --rotation. One simulated acquisition (tiny preset)
# gives a calibration file with a stated rotation of 25 deg; a second one, copied without its
# sidecar, takes it: calibrate writes 25 deg (rotation_source "given", from "--rotation-from"),
# reconstruct gives the same bytes as with --rotation 25, and fit holds it. Refused, each with
# one line and exit 2: a missing file, a broken one, a file whose rotation is a centre-of-mass
# measurement (its 180 deg branch open), and --rotation with --rotation-from. A file made at
# another kV gives one warning line and still works.
# usage: rotation_from.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"

"$BIN" simulate --preset tiny -o "$T/sim.npy" >/dev/null 2>&1 || { echo "FAIL: simulate"; exit 1; }
cp "$T/sim.npy" "$T/a.npy"
cp "$T/sim.npy" "$T/b.npy"
M="--kv 300 --semiangle 25 --scan-step 0.36609375"

# the first acquisition's calibration, with a settled (stated) rotation; and one measured only
expect 0 "calibrate a --rotation 25" "wrote" -- "$BIN" calibrate "$T/a.npy" $M --rotation 25 -o "$T/a.json"
expect 0 "calibrate a (centre of mass)" "wrote" -- "$BIN" calibrate "$T/a.npy" $M -o "$T/com.json"
grep -q '"centre of mass"\|"undetermined"' "$T/com.json" && ok || bad "com.json is not a measured rotation"

# calibrate b with a's rotation
expect 0 "calibrate b --rotation-from" "wrote" -- "$BIN" calibrate "$T/b.npy" $M --rotation-from "$T/a.json" -o "$T/b.json"
grep -q '"rotation_deg":[[:space:]]*25[,.0 ]' "$T/b.json" && ok || bad "b.json: rotation not 25: $(grep rotation_deg "$T/b.json")"
grep -q '"from":[[:space:]]*"--rotation-from"' "$T/b.json" && ok || bad "b.json: rotation_source.from: $(grep -A1 rotation_source "$T/b.json")"

# reconstruct: the same bytes as --rotation 25
expect 0 "reconstruct --rotation-from" "" -- "$BIN" reconstruct "$T/b.npy" $M --calibration "$T/b.json" --rotation-from "$T/a.json" -o "$T/r1.tiff" -q
expect 0 "reconstruct --rotation 25" "" -- "$BIN" reconstruct "$T/b.npy" $M --calibration "$T/b.json" --rotation 25 -o "$T/r2.tiff" -q
cmp -s "$T/r1.tiff" "$T/r2.tiff" && ok || bad "reconstruct: --rotation-from and --rotation 25 differ"

# fit holds it
expect 0 "fit --rotation-from" "" -- "$BIN" fit "$T/b.npy" $M --rotation-from "$T/a.json" -o "$T/f" --json -q
grep -q '"rotation_deg":[[:space:]]*25[,.0 ]' "$T/out" && ok || bad "fit: rotation not held at 25: $(grep -o '"rotation_deg":[^,]*' "$T/out" | head -2)"

# a fit's calibration file (rotation_source.method "fit", the handedness stated) does too
expect 0 "fit a" "" -- "$BIN" fit "$T/a.npy" $M -o "$T/fa" -q
expect 0 "calibrate b --rotation-from a fit's file" "wrote" -- "$BIN" calibrate "$T/b.npy" $M --rotation-from "$T/fa/calibration.json" -o "$T/fb.json"
ra=$(grep -o '"rotation_deg":[^,]*' "$T/fa/calibration.json" | head -1)
rb=$(grep -o '"rotation_deg":[^,]*' "$T/fb.json" | head -1)
[ -n "$ra" ] && [ "$ra" = "$rb" ] && ok || bad "a fit's rotation not carried: $ra / $rb"
grep -q '"flip":[[:space:]]*false' "$T/fb.json" && ok || bad "the fit's handedness not carried"

# refusals: one line, exit 2
one_line 2 "missing file" "rotation-from.*nothere.json" -- "$BIN" calibrate "$T/b.npy" $M --rotation-from "$T/nothere.json" -o "$T/x.json"
printf '{"schema": "ssb4d-calibration/1", "kv": ' >"$T/broken.json"
one_line 2 "broken file" "rotation-from.*broken.json" -- "$BIN" calibrate "$T/b.npy" $M --rotation-from "$T/broken.json" -o "$T/x.json"
one_line 2 "centre-of-mass rotation" "no settled rotation" -- "$BIN" fit "$T/b.npy" $M --rotation-from "$T/com.json" -o "$T/x"
one_line 2 "both" "--rotation or --rotation-from, not both" -- "$BIN" fit "$T/b.npy" $M --rotation 10 --rotation-from "$T/a.json" -o "$T/x"
[ ! -e "$T/x.json" ] && [ ! -e "$T/x" ] && ok || bad "a refused run left an output"

# another kV: a warning, and it still works
expect 0 "calibrate a at 200 kV" "wrote" -- "$BIN" calibrate "$T/a.npy" --kv 200 --semiangle 25 --scan-step 0.36609375 --rotation 25 -o "$T/a200.json"
expect 0 "another kV" "warning: --rotation-from .*a200.json was calibrated at kV 200, this data at 300" -- \
    "$BIN" calibrate "$T/b.npy" $M --rotation-from "$T/a200.json" -o "$T/b2.json"

finish rotation_from.sh
