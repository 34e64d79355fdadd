#!/usr/bin/env bash
# ssb4d virtual (docs/virtual.md): the five images of a small simulated dataset as float64 .npy,
# compared with an independent float64 numpy computation from the raw counts
# (lib/virtual_ref.py: BF and ADF exact, CoM 1e-9 mrad, iDPC 2e-5 of its largest value), the same
# for float32 data, a hot pixel, a given rotation with a mirrored detector and given angles; the
# same bytes for 1 and 2 threads and under a small --memory (small frame blocks); TIFF and PNG
# outputs; --help in the shared style; the overwrite rule; bad angles and bad input refused with
# one line and exit 2.
# Needs bash and /usr/bin/python3 with numpy (else skipped, 77).
# usage: virtual.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib/harness.sh"
PY=/usr/bin/python3
"$PY" -c 'import numpy' 2>/dev/null || { echo "SKIP: /usr/bin/python3 has no numpy"; exit 77; }
REF="$HERE/lib/virtual_ref.py"

"$BIN" simulate --preset tiny -o "$T/s.npy" --quiet >/dev/null || { echo "FAIL: simulate"; exit 1; }

# --- the images against numpy ---------------------------------------------------------------------
expect 0 "virtual --format npy" "wrote +$T/o/ \(5 files" -- "$BIN" virtual "$T/s.npy" -o "$T/o" --format npy --threads 2
"$PY" "$REF" "$T/s.npy" "$T/o" && ok || bad "counts: the images differ from numpy's"
for f in virtual_bf virtual_adf com_x com_y idpc; do
    [ -s "$T/o/$f.npy" ] && [ ! -e "$T/o/$f.tiff" ] && ok || bad "--format npy: $f.npy missing or a .tiff written"
done
grep -q '"idpc_unit":	"rad"' "$T/o/virtual.json" && ok || bad "virtual.json: iDPC not in rad"
# One thread, and small frame blocks under a small budget: the same bytes.
"$BIN" virtual "$T/s.npy" -o "$T/o1" --format npy --threads 1 -q >/dev/null 2>"$T/err1"
[ ! -s "$T/err1" ] && ok || bad "-q wrote on stderr: $(head -c 200 "$T/err1")"
"$BIN" virtual "$T/s.npy" -o "$T/om" --format npy --threads 2 --memory 2M -q >/dev/null 2>&1 ||
    bad "virtual --memory 2M failed"
for f in virtual_bf virtual_adf com_x com_y idpc; do
    cmp -s "$T/o/$f.npy" "$T/o1/$f.npy" && ok || bad "$f: 1 and 2 threads differ"
    cmp -s "$T/o/$f.npy" "$T/om/$f.npy" && ok || bad "$f: --memory 2M (small blocks) differs"
done

# Float32 data (its own sidecar), a hot pixel, rotation and a mirrored detector, given angles.
"$PY" - "$T" <<'PYEOF' || bad "could not write the float32 and hot-pixel copies"
import shutil, sys
import numpy as np
t = sys.argv[1]
c = np.load(t + '/s.npy')
np.save(t + '/f.npy', (c.astype(np.float32) * np.float32(0.37)))
h = c.copy()
h[:, :, 5, 7] = 60000
np.save(t + '/h.npy', h)
for n in ('f', 'h'):
    shutil.copy(t + '/s.json', t + '/%s.json' % n)
PYEOF
expect 0 "virtual of float32 data" "float32 values" -- "$BIN" virtual "$T/f.npy" -o "$T/of" --format npy
"$PY" "$REF" "$T/f.npy" "$T/of" && ok || bad "float32: the images differ from numpy's"
expect 0 "virtual with a hot pixel" "1 flagged pixel left out" -- "$BIN" virtual "$T/h.npy" -o "$T/oh" --format npy
"$PY" "$REF" "$T/h.npy" "$T/oh" && ok || bad "hot pixel: the images differ from numpy's"
grep -q '"flagged":	\[247\]' "$T/oh/virtual.json" && ok || bad "virtual.json does not list the hot pixel (5, 7) = 247"
expect 0 "virtual --rotation --flip and angles" "ADF +20.000 to 40.000 mrad" -- "$BIN" virtual "$T/s.npy" -o "$T/or" \
    --format npy --rotation 37 --flip --bf-outer 15 --bf-inner 3 --adf 20 40
"$PY" "$REF" "$T/s.npy" "$T/or" && ok || bad "rotated, mirrored, given angles: the images differ from numpy's"
grep -q '"flip":	true' "$T/or/virtual.json" && grep -q '"rotation_deg":	37' "$T/or/virtual.json" && ok ||
    bad "virtual.json does not record the rotation and flip"
expect 0 "--adf INNER,OUTER and an outer angle clamped" "the detector reaches" -- "$BIN" virtual "$T/s.npy" -o "$T/oc" \
    --format npy --adf 30,500
grep -q '"adf_mrad":	\[30, 42.77' "$T/oc/virtual.json" && ok || bad "the ADF outer angle was not clamped to the detector"

# --- TIFF and PNG (the default) ---------------------------------------------------------------------
expect 0 "virtual (tiff and png)" "wrote +$T/d/ \(10 files" -- "$BIN" virtual "$T/s.npy" -o "$T/d"
for f in virtual_bf virtual_adf com_x com_y idpc; do
    [ -s "$T/d/$f.tiff" ] && [ "$(od -An -tx1 -N4 "$T/d/$f.png" | tr -d ' ')" = 89504e47 ] && ok ||
        bad "$f: no .tiff or no .png"
done

# --- the overwrite rule ----------------------------------------------------------------------------
cp "$T/d/idpc.png" "$T/idpc.before"
one_line 2 "an existing output is refused" "already exists \(use --force" -- "$BIN" virtual "$T/s.npy" -o "$T/d"
cmp -s "$T/d/idpc.png" "$T/idpc.before" && ok || bad "a refused run touched idpc.png"
expect 0 "--force replaces" "wrote" -- "$BIN" virtual "$T/s.npy" -o "$T/d" --force

# --- malformed input: one line, exit 2 ---------------------------------------------------------------
one_line 2 "inner >= outer" "ADF inner angle 40 mrad is not below its outer angle 20" -- \
    "$BIN" virtual "$T/s.npy" -o "$T/x1" --adf 40 20
one_line 2 "equal angles" "not below" -- "$BIN" virtual "$T/s.npy" -o "$T/x1" --adf 20 20
one_line 2 "negative angle" "--adf inner angle -5 mrad is negative" -- "$BIN" virtual "$T/s.npy" -o "$T/x1" --adf -5 20
one_line 2 "negative BF angle" "--bf-outer angle -1 mrad is negative" -- "$BIN" virtual "$T/s.npy" -o "$T/x1" --bf-outer -1
one_line 2 "beyond the detector" "beyond the detector" -- "$BIN" virtual "$T/s.npy" -o "$T/x1" --adf 100 200
one_line 2 "not a number" "--adf 'a' 'b'" -- "$BIN" virtual "$T/s.npy" -o "$T/x1" --adf a b
one_line 2 "--adf without OUTER" "--adf needs two angles" -- "$BIN" virtual "$T/s.npy" -o "$T/x1" --adf 20
one_line 2 "bad --format" "--format 'gif'" -- "$BIN" virtual "$T/s.npy" -o "$T/x1" --format gif
one_line 2 "missing DATA file" "cannot open $T/nope.npy" -- "$BIN" virtual "$T/nope.npy" -o "$T/x1"
printf 'not a numpy file' >"$T/bad.npy"
one_line 2 "malformed DATA" "bad.npy" -- "$BIN" virtual "$T/bad.npy" -o "$T/x1"
one_line 2 "unknown flag" "unknown option.*--frobnicate" -- "$BIN" virtual --frobnicate
[ ! -e "$T/x1" ] && ok || bad "a refused run left an output folder"

# --- --help in the shared style ------------------------------------------------------------------------
"$BIN" virtual --help >"$T/help" 2>"$T/help.err" && [ ! -s "$T/help.err" ] && ok || bad "--help: not 0 or not on stdout"
grep -q "^exit status: 0 success, 1 internal error or out of memory, 2 usage error or bad input" "$T/help" && ok ||
    bad "--help lacks the exit statuses"
grep -qE -- "-q, --quiet" "$T/help" && grep -qE -- "^ +--force " "$T/help" && ok || bad "--help lacks -q or --force"
"$BIN" --help | grep -qE "^  virtual +[a-z]" && ok || bad "ssb4d --help does not list virtual"
finish virtual
