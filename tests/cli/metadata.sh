#!/usr/bin/env bash
# Metadata kept (issue 28): what a reader finds (kV, camera length, dwell, every other value)
# reaches the .qem, `info`, the calibration file and `ssb4d.values`; a stated value wins over the
# file's and `info` says which counts. The acquisition is an EMPAD .xml + .raw written by the
# independent writer of tests/formats/test_empad.py around the tiny simulation's patterns.
# usage: metadata.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
pass=0
cd "$T"
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else echo "FAIL: $what"; fail=$((fail + 1)); fi; }

if ! $PY -c 'import numpy' 2>/dev/null; then
    echo "SKIP: Debian's python3 with numpy is needed"
    exit 77
fi
"$BIN" simulate --preset tiny -o u.npy --quiet --force || { echo "FAIL: simulate"; exit 1; }
PYTHONPATH="$HERE/formats" $PY - <<'EOF'
import numpy as np, test_empad
u = np.load('u.npy')                      # (32, 32, 48, 48) counts
n = u.shape[0] * u.shape[1]
raw = np.zeros((n, 130, 128), dtype=np.float32)
raw[:, :48, :48] = u.reshape(n, 48, 48)   # the patterns in the corner of EMPAD's 128x128
raw[:, 128:, :] = 9.0e6                   # the footer rows, which must not be read
test_empad.write('.', 'e.raw', raw)
test_empad.write('.', 'e.xml', test_empad.xml_v122('e.raw', u.shape[0], u.shape[1]))
EOF

# the .qem: the reader's values recorded, and shown by info
"$BIN" import e.xml -o e.qem --gain 1 --hot-pixels none --quiet >/dev/null 2>imp.err
check "import of the EMPAD acquisition ($(head -c 200 imp.err))" test -s e.qem
"$BIN" info e.qem --json >info.json 2>/dev/null
check "info: kV, camera length (m -> mm) and dwell (ms -> us) from the .xml" $PY -c "
import json; c=json.load(open('info.json'))['calibration']
assert c['kv']==300 and abs(c['camera_length_mm']-369)<1e-9 and abs(c['dwell_us']-1500)<1e-9, c"
check "info: the reader's other values kept (source_metadata)" $PY -c "
import json; m=json.load(open('info.json'))['source_metadata']
assert any(k.startswith('empad_xml/') for k in m) and m.get('empad_raw_file')=='e.raw', list(m)[:8]"
check "info: the quantisation at gain 1 of integer-valued floats: no error" $PY -c "
import json; p=[r for r in json.load(open('info.json'))['processing'] if r['operation']=='gain_quantisation'][0]
assert p['max_error_electrons']==0 and p['gain_electrons_per_unit']==1, p"
# a stated value wins, and info says which counts
"$BIN" import e.xml -o o.qem --gain 1 --camera-length 185 --dwell 20 --quiet >/dev/null 2>&1
"$BIN" info o.qem >o.txt 2>/dev/null
"$BIN" info o.qem --json >o.json 2>/dev/null
check "info: the override counts, the file's value beside it" $PY -c "
import json; d=json.load(open('o.json')); s=d['calibration_sources']['camera_length_mm']
assert d['calibration']['camera_length_mm']==185 and s['file']==369 and s['override']==185 and s['used']=='override', s"
check "info (text): says which one is used" grep -q "camera_length_mm: 185 mm (ssb4d import --camera-length) is used; the file recorded 369 mm" o.txt
# in place: calibrate reads the .xml, its calibration file carries the acquisition
"$BIN" calibrate e.xml --semiangle 25 --scan-step 0.366 -o e.cal.json --quiet >/dev/null 2>cal.err
check "calibrate of the .xml in place ($(head -c 200 cal.err))" test -s e.cal.json
check "calibration file: acquisition format, camera length, dwell" $PY -c "
import json; a=json.load(open('e.cal.json'))['acquisition']
assert a['format']=='empad' and abs(a['camera_length_mm']-369)<1e-9 and abs(a['dwell_us']-1500)<1e-9, a"
check "calibration file: the kV the .xml states" $PY -c "
import json; assert json.load(open('e.cal.json'))['microscope']['kv']==300"
# export: the same frames back (footer rows dropped), as the .qem decodes them
"$BIN" export e.xml -o x.npy --quiet
"$BIN" export e.qem -o q.npy --quiet
check "export: the .xml's frames equal the .qem's counts and the simulation's" $PY -c "
import numpy as np; x=np.load('x.npy'); q=np.load('q.npy'); u=np.load('u.npy')
assert x.shape==(32,32,128,128) and (x[:,:,:48,:48]==u).all() and (x[:,:,48:,:]==0).all() and (q==x).all()"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
