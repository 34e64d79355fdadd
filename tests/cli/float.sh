#!/usr/bin/env bash
# Float data (SPEC §4, issue 28): read as they are, never quantised silently.
#  * integer-valued float32 gives the integer path's bits: reconstruct's phase.tiff and loss, fit's
#    trace, phase.tiff and object.npy, from a .npy and from an HDF5 dataset (an independent
#    writer: numpy / h5py);
#  * float data with noise and negative values are fitted in place (the shared noise-free float
#    simulation too) and exported back value for value;
#  * import refuses float data without --gain, quantises with --gain E and says by how much (the
#    .qem then verifies equal to the counts for integer-valued data), estimates --gain auto;
#  * a mirrored detector (simulate --flip) is found by the fit and stated with --flip.
# usage: float.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
DATA=$2/sim
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
pass=0
cd "$T"
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok; else bad "$what"; fi; }
same() { cmp -s "$1" "$2"; }
jget() { $PY -c "import json,sys; d=json.load(open('$1')); print(d$2)"; }

if ! $PY -c 'import numpy, h5py' 2>/dev/null; then
    echo "SKIP: Debian's python3 with numpy and h5py is needed"
    exit 77
fi

"$BIN" simulate --preset tiny -o u.npy --quiet --force || { echo "FAIL: simulate"; exit 1; }
$PY - <<'EOF'
import numpy as np, h5py, json
u = np.load('u.npy')
np.save('f.npy', u.astype(np.float32))                      # integer-valued float32
with h5py.File('f.h5', 'w') as h:                            # an independent writer of HDF5
    h.create_dataset('/data/cube', data=u.astype(np.float32), chunks=(1, u.shape[1], u.shape[2], u.shape[3]))
rng = np.random.default_rng(7)
e = (u.astype(np.float64) + rng.normal(0, 0.5, u.shape)) * 7.3   # EMPAD-like: read noise, ADU
np.save('e.npy', e.astype(np.float32))
g = (u.astype(np.float64) / 4.0).astype(np.float32)          # counts divided by a gain of 4
np.save('g.npy', g)
m = u.transpose(0, 1, 3, 2).copy()                           # a mirrored detector
np.save('m.npy', m)
EOF
for f in f e g; do cp u.json $f.json; done
cp u.json f.h5.json
# the mirrored copy's sidecar says nothing of the handedness: the fit must find it
$PY -c "
import json; d=json.load(open('u.json')); d['detector'].pop('flip', None); json.dump(d, open('m.json', 'w'))"

# ---- integer-valued float32: the integer path's bits -----------------------------------------
"$BIN" reconstruct u.npy -o ru.tiff --json --quiet >ru.json 2>/dev/null
"$BIN" reconstruct f.npy -o rf.tiff --json --quiet >rf.json 2>/dev/null
"$BIN" reconstruct f.h5 -o rh.tiff --json --quiet >rh.json 2>/dev/null
check "reconstruct: float .npy phase.tiff = counts'" same ru.tiff rf.tiff
check "reconstruct: float HDF5 phase.tiff = counts'" same ru.tiff rh.tiff
check "reconstruct: float loss = counts'" test "$(jget ru.json "['loss']")" = "$(jget rf.json "['loss']")"
"$BIN" fit u.npy -o fu --json --force --quiet >fu.json 2>/dev/null
"$BIN" fit f.npy -o ff --json --force --quiet >ff.json 2>/dev/null
check "fit: float trace = counts'" test "$(jget fu.json "['trace_sha256']")" = "$(jget ff.json "['trace_sha256']")"
check "fit: float phase.tiff = counts'" same fu/phase.tiff ff/phase.tiff
check "fit: float object.npy = counts'" same fu/object.npy ff/object.npy

# ---- float data with noise and negative values ------------------------------------------------
"$BIN" fit e.npy -o fe --json --force --quiet >fe.json 2>fe.err
check "fit: EMPAD-like float data run ($(head -c 200 fe.err))" test -s fe/phase.tiff
check "fit: EMPAD-like C10 within 0.3 nm of the counts' fit" $PY -c "
import json; a=json.load(open('fu.json')); b=json.load(open('fe.json'))
assert abs(a['C10_nm']-b['C10_nm']) < 0.3 and abs(a['C12_nm']-b['C12_nm']) < 0.3, (a['C10_nm'], b['C10_nm'])"
"$BIN" export e.npy -o ee.npy --quiet
check "export: float values back bit for bit" $PY -c "
import numpy as np; a=np.load('e.npy'); b=np.load('ee.npy'); assert a.dtype==b.dtype and (a.view('u4')==b.view('u4')).all()"
if [ -f "$DATA/sim_A1_SrTiO3_300kV_noisefree_f32.npy" ]; then
    "$BIN" reconstruct "$DATA/sim_A1_SrTiO3_300kV_noisefree_f32.npy" --kv 300 --semiangle 25 \
        --scan-step 0.36609375 --rotation 0 --c10 -11.805 --c12 3 --phi12 30 -o a1f.tiff --json --quiet \
        >a1f.json 2>a1f.err
    check "reconstruct: the shared noise-free float32 simulation ($(head -c 200 a1f.err))" \
        $PY -c "import json,math; assert math.isfinite(json.load(open('a1f.json'))['loss'])"
fi

# ---- import: never silently, --gain states it ------------------------------------------------
"$BIN" import e.npy -o e.qem --quiet >/dev/null 2>e.err
rc=$?
check "import: float data without --gain refused (exit 2, one line naming --gain)" \
    sh -c "test $rc -eq 2 && test \$(wc -l <e.err) -eq 1 && grep -q -- '--gain' e.err && test ! -e e.qem"
"$BIN" import e.npy -o e.qem --gain 0.1369863 --json --quiet >ei.json 2>/dev/null
check "import --gain: a .qem with the quantisation error reported (negative values stored as 0)" $PY -c "
import json; q=json.load(open('ei.json'))['quantisation']
assert 0 < q['rms_error_electrons'] <= 0.5 and q['max_error_electrons'] > 0.5 and q['negative_values_stored_as_zero'] > 0, q"
"$BIN" info e.qem --json >einfo.json 2>/dev/null
check "info: the gain_quantisation record" $PY -c "
import json; p=[r for r in json.load(open('einfo.json'))['processing'] if r['operation']=='gain_quantisation']
assert p and p[0]['changes_measurements'] and 'rms_error_electrons' in p[0], p"
"$BIN" import f.npy -o f.qem --gain auto --json --quiet >fi.json 2>/dev/null
check "import --gain auto: integer-valued data at gain 1, error 0" $PY -c "
import json; q=json.load(open('fi.json'))['quantisation']
assert q['gain_electrons_per_unit']==1 and q['max_error_electrons']==0, q"
check "verify: the integer-valued float import equals the counts" "$BIN" verify u.npy f.qem --quiet
"$BIN" import g.npy -o g.qem --gain auto --json --quiet >gi.json 2>/dev/null
check "import --gain auto: counts/4 found at gain 4" $PY -c "
import json; q=json.load(open('gi.json'))['quantisation']
assert abs(q['gain_electrons_per_unit']-4) < 1e-6 and q['max_error_electrons'] < 1e-3, q"
check "verify: counts/4 at gain 4 are the counts" "$BIN" verify u.npy g.qem --quiet

# ---- a mirrored detector ------------------------------------------------------------------------
"$BIN" fit m.npy -o fm --json --force --quiet >fm.json 2>/dev/null
check "fit: a transposed detector found mirrored" test "$(jget fm.json "['flip']")" = "True"
check "fit: mirrored C10/C12 as unmirrored, phi12 scan frame alike" $PY -c "
import json; a=json.load(open('fu.json')); b=json.load(open('fm.json'))
d=(a['phi12_scan_deg']-b['phi12_scan_deg']+90)%180-90
assert abs(a['C10_nm']-b['C10_nm'])<0.2 and abs(a['C12_nm']-b['C12_nm'])<0.2 and abs(d)<3, (a, b)"
"$BIN" reconstruct m.npy --calibration fm/calibration.json -o rm.tiff --json --quiet >rm.json 2>/dev/null
check "reconstruct --calibration of the mirrored fit: the fit's loss" $PY -c "
import json; assert json.load(open('rm.json'))['loss']==json.load(open('fm.json'))['loss']"
"$BIN" reconstruct m.npy --no-flip --c10 -10 -o rn.tiff --json --quiet >rn.json 2>/dev/null
"$BIN" reconstruct m.npy --flip --c10 -10 -o rfl.tiff --json --quiet >rfl.json 2>/dev/null
check "reconstruct --flip: lower loss than --no-flip on the mirrored data" $PY -c "
import json; assert json.load(open('rfl.json'))['loss'] < json.load(open('rn.json'))['loss']"
"$BIN" import m.npy -o m.qem --flip --quiet >/dev/null 2>&1
"$BIN" info m.qem --json >minfo.json 2>/dev/null
check "import --flip: recorded in the .qem" test "$(jget minfo.json "['detector_flip']")" = "True"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
