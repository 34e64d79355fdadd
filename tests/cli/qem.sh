#!/usr/bin/env bash
# `ssb4d import`, `info` and `verify` end to end on real files: every golden .qem verifies
# against its .npy, every bad one is refused by info and verify, an import round-trips
# exactly, a changed count is found, existing outputs are kept, and reconstruct gives the same
# phase image from the .npy and from its .qem.
# usage: qem.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
G=$2/qem-golden
SIM=$2/sim
. "$(dirname "$0")/lib/harness.sh"

# Golden files: each verifies against its .npy (every count), each bad file is refused.
for q in "$G"/*.qem; do
    case $q in
    *.bad.qem)
        expect 2 "info refuses $(basename "$q")" "ssb4d info: .+" -- "$BIN" info --check "$q"
        base=${q%%.*}
        expect 2 "verify refuses $(basename "$q")" "ssb4d verify: .+" -- "$BIN" verify -q "$base.npy" "$q"
        ;;
    *)
        expect 0 "verify $(basename "$q")" "identical" -- "$BIN" verify -q "${q%.qem}.npy" "$q"
        expect 0 "info $(basename "$q")" "compression" -- "$BIN" info --check "$q"
        ;;
    esac
done

# Import round trip (no hot-pixel change): verify compares every count, --strict too.
U8=$G/u8-poisson-16x16x12x12.npy
expect 0 "import u8" "ratio" -- "$BIN" import -q "$U8" -o "$T/u8.qem" --hot-pixels none --kv 200 --scan-step 0.5
expect 0 "verify import" "identical: 36864 counts" -- "$BIN" verify -q --strict "$U8" "$T/u8.qem"
"$BIN" info --json "$T/u8.qem" >"$T/info.json" 2>&1
grep -q '"dtype":"uint8"' "$T/info.json" && grep -q '"kv":200' "$T/info.json" &&
    grep -q '"scan_step_A":\[0.5,0.5\]' "$T/info.json" && ok || bad "info --json fields: $(cat "$T/info.json")"

# The output exists: refused (and kept), replaced with --force.
cp "$T/u8.qem" "$T/keep.qem"
expect 2 "existing output refused" "exists.*--force" -- "$BIN" import -q "$U8" -o "$T/u8.qem"
cmp -s "$T/u8.qem" "$T/keep.qem" && ok || bad "a refused import changed the existing file"
expect 0 "--force replaces" "ratio" -- "$BIN" import -q "$U8" -o "$T/u8.qem" --force --hot-pixels none

# One count changed in the original: verify exits 3 and names the position.
python3 - "$U8" "$T/changed.npy" <<'PY'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
hl = b[8] | b[9] << 8
off = 10 + hl + ((3 * 16 + 5) * 144 + 7 * 12 + 2)   # scan (3,5), pixel (7,2)
b[off] = (b[off] + 1) % 256
open(sys.argv[2], 'wb').write(b)
PY
expect 3 "verify finds a changed count" "scan \(3, 5\) pixel \(7, 2\)" -- "$BIN" verify -q "$T/changed.npy" "$T/u8.qem"
expect 3 "verify finds a shape mismatch" "shapes differ" -- "$BIN" verify -q "$G/u16-mixed-23x24x9x9.npy" "$T/u8.qem"

# Raw input: the same counts as a headerless file.
python3 - "$U8" "$T/u8.raw" <<'PY'
import sys
b = open(sys.argv[1], 'rb').read()
hl = b[8] | b[9] << 8
open(sys.argv[2], 'wb').write(b[10 + hl:])
PY
expect 0 "import raw" "raw" -- "$BIN" import -q "$T/u8.raw" -o "$T/raw.qem" --shape 16,16,12,12 --dtype uint8 --hot-pixels none
expect 0 "raw import equals npy" "identical" -- "$BIN" verify -q --strict "$U8" "$T/raw.qem"
expect 2 "raw without shape" "shape" -- "$BIN" import -q "$T/u8.raw" -o "$T/raw2.qem" --format raw
expect 2 "raw with a wrong shape" "size|bytes|shape" -- "$BIN" import -q "$T/u8.raw" -o "$T/raw2.qem" --shape 16,16,12,13 --dtype uint8

# Bad invocations: one line, exit 2, no output.
expect 2 "import without -o" "output" -- "$BIN" import "$U8"
expect 2 "import bad --hot-pixels" "hot-pixels" -- "$BIN" import "$U8" -o "$T/x.qem" --hot-pixels maybe
expect 2 "import bad --format" "format" -- "$BIN" import "$U8" -o "$T/x.qem" --format tiff
expect 2 "import bad --shape" "shape" -- "$BIN" import "$U8" -o "$T/x.qem" --shape 1,2,3
expect 2 "import bad --kv" "kv" -- "$BIN" import "$U8" -o "$T/x.qem" --kv -3
expect 2 "import missing input" "cannot open|no such" -- "$BIN" import "$T/nope.npy" -o "$T/x.qem"
expect 2 "import float npy" "float|dtype" -- "$BIN" import "$SIM/sim_A1_SrTiO3_300kV_noisefree_f32.npy" -o "$T/x.qem"
expect 2 "info on a .npy" "qem|magic" -- "$BIN" info "$U8"
expect 2 "verify with one file" "two files" -- "$BIN" verify "$U8"
[ -e "$T/x.qem" ] && bad "a failed import left x.qem" || ok
ls "$T" | grep -q tmp && bad "a failed run left a temporary file: $(ls "$T")" || ok

# What import writes, export reads (issue 39): odd scan shapes, 1x9 and 9x1 included, round-trip
# .npy (written by numpy) -> import -> export -> the same array; a scan below 2x2 is still
# refused, by name, where it would be reconstructed.
for s in 1x9 9x1 3x5; do
    /usr/bin/python3 -c "
import numpy as np, sys
r, c = map(int, '$s'.split('x'))
a = np.random.default_rng(r * 10 + c).poisson(3.0, (r, c, 7, 6)).astype(np.uint16)
a[0, -1, 2, 3] = 4000    # one large count in the last frame
np.save('$T/odd$s.npy', a)" || bad "writing odd$s.npy"
    expect 0 "import a $s scan" "ratio" -- "$BIN" import -q "$T/odd$s.npy" -o "$T/odd$s.qem" --hot-pixels none
    expect 0 "export the $s .qem" "${s}x7x6 uint16" -- "$BIN" export "$T/odd$s.qem" -o "$T/odd$s.out.npy"
    /usr/bin/python3 -c "
import numpy as np, sys
a, b = np.load('$T/odd$s.npy'), np.load('$T/odd$s.out.npy')
sys.exit(0 if a.shape == b.shape and a.dtype == b.dtype and (a == b).all() else 1)" &&
        ok || bad "export of the $s .qem differs from the .npy imported"
done
expect 2 "reconstruct refuses a 1x9 scan" "too small.*2x2" -- "$BIN" reconstruct "$T/odd1x9.qem" --kv 300 --semiangle 25 --scan-step 1 --det-sampling 1 -o "$T/odd.npy"
[ -e "$T/odd.npy" ] && bad "a refused reconstruct left odd.npy" || ok

# Every command that takes DATA takes .qem: reconstruct gives the same phase from both.
A1=$SIM/sim_A1_SrTiO3_300kV_counts.npy
# The .npy finds its sidecar by name; the .qem is given the same one.
M="--sidecar $SIM/sim_A1_SrTiO3_300kV.json --c10 -11 --quiet"
expect 0 "import A1" "ratio" -- "$BIN" import -q "$A1" -o "$T/a1.qem"
"$BIN" reconstruct "$A1" $M -o "$T/p_npy.npy" >/dev/null 2>"$T/err" || bad "reconstruct npy: $(cat "$T/err")"
"$BIN" reconstruct "$T/a1.qem" $M -o "$T/p_qem.npy" >/dev/null 2>"$T/err" || bad "reconstruct qem: $(cat "$T/err")"
cmp -s "$T/p_npy.npy" "$T/p_qem.npy" && ok || bad "phase from .qem differs from phase from .npy"
expect 0 "calibrate a .qem" "BF disk" -- "$BIN" calibrate "$T/a1.qem" --kv 300 --semiangle 25 --scan-step 0.366

# Same input, 1 or 2 threads: the same file, byte for byte (SPEC §9).
"$BIN" import -q "$A1" -o "$T/t1.qem" --threads 1 >/dev/null 2>&1
"$BIN" import -q "$A1" -o "$T/t2.qem" --threads 2 >/dev/null 2>&1
cmp -s "$T/t1.qem" "$T/t2.qem" && ok || bad "import with 1 and 2 threads wrote different files"

# The simulator writes the same counts straight into a .qem as into a .npy.
"$BIN" simulate --preset tiny --scan 16 --quiet -o "$T/sim.npy" 2>"$T/err" || bad "simulate npy: $(cat "$T/err")"
"$BIN" simulate --preset tiny --scan 16 --quiet -o "$T/simq.qem" 2>"$T/err" || bad "simulate qem: $(cat "$T/err")"
expect 0 "simulate -o .qem equals -o .npy" "identical: 589824 counts" -- "$BIN" verify -q --strict "$T/sim.npy" "$T/simq.qem"

finish qem.sh
