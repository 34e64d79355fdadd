#!/usr/bin/env bash
# Results in both frames on a mirrored detector (issue 39): the scan-frame φ12 and tilt that the
# fits find are printed, written to --json and to the calibration file in the probe (detector)
# frame too, through the library's one conversion (ssb4d_phi12_to_probe, ssb4d_vector_to_probe),
# which takes the handedness into account. A tiny acquisition on a mirrored detector (simulate
# --flip: every frame transposed), scan rotation 20 deg, C12 3 nm at phi12 30 deg in the
# simulator's detector frame, so 90 - 30 = 60 deg in the recorded (transposed) detector frame:
#   * the standard fit and the thick fit (--tilt) report the same probe-frame phi12, near 60;
#   * for a mirrored detector probe + scan = 90 + rotation (mod 180), as ssb4d.h says;
#   * the thick model's tilt_probe_mrad turned back into the scan frame (a detector vector d
#     lies at R(rotation) swap(d) in the scan frame, SPEC §5.1) is tilt_mrad;
#   * the calibration file records the same probe-frame phi12 as the JSON.
# Before the fix the command line's own conversions ignored the flip (phi12 probe = scan -
# rotation = 30 here, the tilt unswapped).
# usage: frames.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"

"$BIN" simulate --preset tiny --flip --scan-rotation 20 --c12 3 --phi12 30 --tilt 2,-1 -o "$T/s.npy" -q ||
    { echo "FAIL: simulate"; exit 1; }
expect 0 "fit" "" -- "$BIN" fit "$T/s.npy" --json -q -o "$T/a"
cp "$T/out" "$T/a.json"
expect 0 "fit --tilt" "" -- "$BIN" fit "$T/s.npy" --tilt --json -q -o "$T/b"
cp "$T/out" "$T/b.json"

check() { # check DESCRIPTION PYTHON-EXPRESSION (over a, b: the two JSON objects; c: b's calibration file)
    local py=/usr/bin/python3
    [ -x "$py" ] || py=python3
    if "$py" - "$T/a.json" "$T/b.json" "$T/b/calibration.json" <<PY; then ok; else bad "$1"; fi
import json, math, sys
a, b, c = (json.load(open(p)) for p in sys.argv[1:4])
def w(x):  # into [-90, 90)
    return (x + 90.0) % 180.0 - 90.0
ok = bool($2)
if not ok:
    print('a:', {k: a.get(k) for k in ('phi12_deg', 'phi12_probe_deg', 'rotation_deg', 'flip')})
    print('b:', {k: b.get(k) for k in ('phi12_deg', 'phi12_probe_deg', 'rotation_deg', 'flip', 'tilt_mrad', 'tilt_probe_mrad')})
sys.exit(0 if ok else 1)
PY
}
check "both fits keep the stated mirror" "a['flip'] is True and b['flip'] is True"
check "standard fit: probe + scan = 90 + rotation" \
    "abs(w(a['phi12_probe_deg'] + a['phi12_deg'] - 90 - a['rotation_deg'])) < 1e-6"
check "thick fit: probe + scan = 90 + rotation" \
    "abs(w(b['phi12_probe_deg'] + b['phi12_deg'] - 90 - b['rotation_deg'])) < 1e-6"
check "standard fit's probe-frame phi12 near the truth (60 deg)" "abs(w(a['phi12_probe_deg'] - 60)) < 3"
check "thick fit's probe-frame phi12 near the truth (60 deg)" "abs(w(b['phi12_probe_deg'] - 60)) < 3"
check "thick fit: tilt_probe_mrad back in the scan frame is tilt_mrad" "(lambda r, p, s: \
    abs(math.cos(r) * p[1] - math.sin(r) * p[0] - s[0]) < 1e-9 and \
    abs(math.sin(r) * p[1] + math.cos(r) * p[0] - s[1]) < 1e-9)(math.radians(b['rotation_deg']), \
    b['tilt_probe_mrad'], b['tilt_mrad'])"
check "the calibration file's probe-frame phi12 is the JSON's" \
    "abs(c['fit']['phi12_probe_deg'] - b['phi12_probe_deg']) < 1e-6"
finish frames
