#!/usr/bin/env bash
# Bad input gets one clear error line on stderr and exit status 2, never a crash.
# usage: errors.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
DATA=$2/sim
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
pass=0

# expect_error DESCRIPTION PATTERN -- command...
expect_error() {
    local what=$1 pattern=$2
    shift 3
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    local lines
    lines=$(wc -l <"$T/err")
    if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qiE "$pattern" "$T/err"; then
        echo "FAIL: $what: rc=$rc, $lines stderr lines:"
        cat "$T/err"
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
}

# write_npy FILE DESCR SHAPE BYTES: a .npy of zeros
write_npy() {
    local f=$1 descr=$2 shape=$3 bytes=$4
    local dict="{'descr': '$descr', 'fortran_order': False, 'shape': $shape, }"
    local total=$((10 + ${#dict} + 1))
    local padded=$(((total + 63) / 64 * 64))
    local hlen=$((padded - 10))
    {
        printf '\x93NUMPY\x01\x00'
        printf "\\x$(printf %02x $((hlen & 255)))\\x$(printf %02x $((hlen >> 8)))"
        printf '%s' "$dict"
        printf '%*s' $((padded - total)) ''
        printf '\n'
        head -c "$bytes" /dev/zero
    } >"$f"
}

A1="$DATA/sim_A1_SrTiO3_300kV_counts.npy"
M="--kv 300 --semiangle 25 --scan-step 0.366"

expect_error "missing file" "cannot open|no such" -- "$BIN" reconstruct "$T/nope.npy" $M
# float32 data are read as they are (tests/cli/float.sh); a NaN among them is refused, named
write_npy "$T/nan.npy" "<f4" "(8, 8, 16, 16)" 0
head -c $((8 * 8 * 16 * 16 * 4)) /dev/zero | tr '\0' '\377' >>"$T/nan.npy"
expect_error "float NaN" "NaN" -- "$BIN" reconstruct "$T/nan.npy" $M -o "$T/nan.tiff"
expect_error "semiangle <= 0" "semi" -- "$BIN" reconstruct "$A1" --kv 300 --semiangle 0 --scan-step 0.366
expect_error "semiangle < 0 (calibrate)" "semi" -- "$BIN" calibrate "$A1" --kv 300 --semiangle -5 --scan-step 0.366
expect_error "bad number" "invalid" -- "$BIN" reconstruct "$A1" $M --c10 abc
expect_error "unknown option" "unknown option" -- "$BIN" reconstruct "$A1" $M --frobnicate
expect_error "bad upsample" "upsample" -- "$BIN" reconstruct "$A1" $M --upsample 5
expect_error "no data" "DATA" -- "$BIN" reconstruct
expect_error "unknown command" "unknown command" -- "$BIN" frobnicate
expect_error "bad image extension" "extension" -- "$BIN" reconstruct "$A1" $M --c10 -11 -o "$T/x.jpg" --quiet
write_npy "$T/zeros.npy" "<u2" "(8, 8, 16, 16)" $((8 * 8 * 16 * 16 * 2))
expect_error "BF disk not found (all zero)" "disk|counts" -- "$BIN" reconstruct "$T/zeros.npy" $M
write_npy "$T/2d.npy" "<u2" "(64, 64)" $((64 * 64 * 2))
expect_error "2-D array" "4-D" -- "$BIN" reconstruct "$T/2d.npy" $M
write_npy "$T/trunc.npy" "<u2" "(8, 8, 16, 16)" 1000
expect_error "truncated npy" "truncated" -- "$BIN" reconstruct "$T/trunc.npy" $M
write_npy "$T/f8.npy" "<f8" "(8, 8, 16, 16)" $((8 * 8 * 16 * 16 * 8))
expect_error "float64 dtype" "dtype" -- "$BIN" calibrate "$T/f8.npy" $M
printf 'not a numpy file at all' >"$T/garbage.npy"
expect_error "garbage file" "magic|npy" -- "$BIN" reconstruct "$T/garbage.npy" $M
printf '{"schema": "ssb4d.calibration", "version": 99}' >"$T/future.json"
expect_error "future calibration" "newer|version" -- "$BIN" reconstruct "$A1" $M --calibration "$T/future.json"
printf '{broken' >"$T/broken.json"
expect_error "malformed calibration" "json|malformed|parse" -- "$BIN" reconstruct "$A1" $M --calibration "$T/broken.json"
expect_error "scan rotation not finite" "scan-rotation" -- "$BIN" simulate --preset tiny --scan-rotation nan -o "$T/r.npy"
expect_error "scan rotation infinite" "scan-rotation" -- "$BIN" simulate --preset tiny --scan-rotation -inf -o "$T/r.npy"
expect_error "scan rotation absurd" "scan-rotation" -- "$BIN" simulate --preset tiny --scan-rotation 1e5 -o "$T/r.npy"
expect_error "scan rotation not a number" "scan-rotation" -- "$BIN" simulate --preset tiny --scan-rotation 30deg -o "$T/r.npy"
expect_error "even detector oversampling" "det-oversample" -- "$BIN" simulate --preset tiny --det-oversample 4 -o "$T/r.npy"
expect_error "grid below the oversampled detector" "grid" -- "$BIN" simulate --preset tiny --det-oversample 3 --grid 126 -o "$T/r.npy"
if ls "$T"/r*.npy "$T"/r.json >/dev/null 2>&1; then
    echo "FAIL: a refused simulate left output behind"
    fail=$((fail + 1))
fi
# A missing or unreadable input file is the first thing every command reports: one line naming
# the file, exit 2, before microscope values (none are given here), sidecars, calibration files
# or outputs are looked at, and without creating any output.
N=$T/nope.npy
expect_error "reconstruct: missing file before the unknown kV" "cannot open .*nope.npy" -- "$BIN" reconstruct "$N"
expect_error "fit: missing file" "cannot open .*nope.npy" -- "$BIN" fit "$N" -o "$T/fit-out"
expect_error "fit-regions: missing file" "cannot open .*nope.npy" -- "$BIN" fit-regions "$N" --grid 2x2 -o "$T/regions-out"
expect_error "calibrate: missing file" "cannot open .*nope.npy" -- "$BIN" calibrate "$N"
expect_error "plan: missing file" "cannot open .*nope.npy" -- "$BIN" plan "$N"
expect_error "session: missing file" "cannot open .*nope.npy" -- "$BIN" session "$N" -o "$T/session-out"
expect_error "info: missing file" "cannot open .*nope.qem" -- "$BIN" info "$T/nope.qem"
expect_error "verify: missing original" "cannot open .*nope.npy" -- "$BIN" verify "$N" "$DATA/../qem-golden/u8-poisson-16x16x12x12.qem"
expect_error "verify: missing .qem" "cannot open .*nope.qem" -- "$BIN" verify "$A1" "$T/nope.qem"
expect_error "import: missing file" "cannot open .*nope.npy" -- "$BIN" import "$N" -o "$T/nope-out.qem"
expect_error "import: missing file before the missing -o" "cannot open .*nope.npy" -- "$BIN" import "$N"
# fit without DATA fits the built-in dataset: a --calibration or --sidecar for it would be ignored,
# so it is refused (before the simulation) rather than silently dropped.
expect_error "fit: --calibration without DATA" "calibration applies to DATA" -- "$BIN" fit --calibration "$T/nope.json" -o "$T/fit-out"
expect_error "fit: --sidecar without DATA" "sidecar applies to DATA" -- "$BIN" fit --sidecar "$T/nope.json" -o "$T/fit-out"
expect_error "bench run: missing --data" "cannot open .*nope.npy" -- "$BIN" bench run --data "$N" -o "$T/rec.json"
expect_error "bench sweep: missing --data" "cannot open .*nope.npy" -- "$BIN" bench sweep --data "$N" --loss-tile all
# ... also before other problems that a later step would find: a broken calibration file, an
# existing output, a missing sidecar
printf '{broken' >"$T/broken.json"
expect_error "missing file before a broken --calibration" "cannot open .*nope.npy" -- "$BIN" reconstruct "$N" --calibration "$T/broken.json"
expect_error "missing file before a missing --sidecar" "cannot open .*nope.npy" -- "$BIN" fit "$N" --sidecar "$T/nope.json" -o "$T/fit-out"
: >"$T/exists.qem"
expect_error "missing file before an existing output" "cannot open .*nope.npy" -- "$BIN" import "$N" -o "$T/exists.qem"
for out in fit-out regions-out session-out nope-out.qem rec.json; do
    if [ -e "$T/$out" ]; then
        echo "FAIL: a run on a missing file created $out"
        fail=$((fail + 1))
    fi
done
# A folder or a FIFO is not a data file (the FIFO must not hang the check).
mkdir "$T/folder"
for cmd in reconstruct calibrate plan session info; do
    expect_error "$cmd: a folder" "cannot open .*folder: it is a folder" -- "$BIN" $cmd "$T/folder"
done
expect_error "import: a folder" "cannot open .*folder: it is a folder" -- "$BIN" import "$T/folder" -o "$T/f.qem"
mkfifo "$T/fifo"
expect_error "reconstruct: a FIFO" "cannot open .*fifo: not a regular file" -- timeout 20 "$BIN" reconstruct "$T/fifo" $M
# Without read permission (root reads everything, so only as another user).
if [ "$(id -u)" -ne 0 ]; then
    cp "$A1" "$T/locked.npy" && chmod 000 "$T/locked.npy"
    expect_error "reconstruct: no read permission" "cannot open .*locked.npy: permission denied" -- "$BIN" reconstruct "$T/locked.npy" $M
fi

# An unrecognised input (a text file named .npy) is reported first, as a missing one is: the one
# and only error line names the file, before the unknown kV, semi-angle and scan step, outputs or
# calibration files are looked at (issue 29).
echo hello >"$T/text.npy"
for cmd in fit reconstruct calibrate info plan session view; do
    expect_error "$cmd: a text file named .npy" "text.npy" -- timeout 60 "$BIN" $cmd "$T/text.npy"
done
expect_error "fit-regions: a text file named .npy" "text.npy" -- "$BIN" fit-regions "$T/text.npy" --grid 2x2 -o "$T/regions-out"
expect_error "export: a text file named .npy" "text.npy" -- "$BIN" export "$T/text.npy" -o "$T/x-out.npy"
expect_error "import: a text file named .npy" "text.npy" -- "$BIN" import "$T/text.npy" -o "$T/x-out.qem"
expect_error "verify: a text file named .npy" "text.npy" -- "$BIN" verify "$T/text.npy" "$DATA/../qem-golden/u8-poisson-16x16x12x12.qem"
expect_error "bench run: a text file named .npy" "text.npy" -- "$BIN" bench run --data "$T/text.npy" -o "$T/rec.json"
# ... before an existing output too (calibrate's s.calibration.json beside DATA)
: >"$T/text.calibration.json"
expect_error "calibrate: a text file before its existing output" "text.npy" -- "$BIN" calibrate "$T/text.npy"
rm -f "$T/text.calibration.json"
for cmd in fit reconstruct calibrate info; do
    expect_error "$cmd: missing file, the only line" "cannot open .*nope.npy" -- "$BIN" $cmd "$T/nope.npy"
done
# One prefix "ssb4d CMD:" on every line, the shared helpers' too.
expect_error "fit: a bad --kv value, prefixed" "^ssb4d fit: invalid value 'abc' for --kv" -- "$BIN" fit "$T/nope.npy" --kv abc
expect_error "reconstruct: unknown kV, prefixed" "^ssb4d reconstruct: the accelerating voltage" -- "$BIN" reconstruct "$T/zeros.npy"
# Every missing microscope value is asked for at once (issue 39), in one line; one alone as before.
expect_error "fit: all three unknown, one line" "the accelerating voltage, the convergence semi-angle and the scan step are unknown: give --kv \(kV\), --semiangle \(mrad\) and --scan-step \(Angstrom\)" -- "$BIN" fit "$T/zeros.npy"
expect_error "fit: two unknown, one line" "the convergence semi-angle and the scan step are unknown: give --semiangle \(mrad\) and --scan-step" -- "$BIN" fit "$T/zeros.npy" --kv 300
expect_error "fit: one unknown" "the scan step is unknown: give --scan-step" -- "$BIN" fit "$T/zeros.npy" --kv 300 --semiangle 25
expect_error "demo: a bad --range, prefixed demo" "^ssb4d demo: --range" -- "$BIN" demo --range C10=5:1
expect_error "fit-regions: a bad --trials, prefixed" "^ssb4d fit-regions: --trials" -- "$BIN" fit-regions "$T/zeros.npy" --grid 2x2 --trials 0
expect_error "plan: a bad --memory, prefixed" "^ssb4d plan: invalid value" -- "$BIN" plan --memory 1x

# A flag that contradicts what the files record: one warning line with both values, the flag wins.
"$BIN" simulate --preset tiny -o "$T/tiny.npy" --quiet || { echo "FAIL: simulate tiny"; fail=$((fail + 1)); }
"$BIN" reconstruct "$T/tiny.npy" --kv 30 -o "$T/kv30.npy" --quiet >"$T/out" 2>"$T/err"
n=$(grep -c "warning: --kv 30 differs from .*tiny.json's 300 kV; using 30 kV" "$T/err")
if [ "$n" -ne 1 ] || [ "$(wc -l <"$T/err")" -ne 1 ] || ! grep -q "^ssb4d reconstruct: warning" "$T/err"; then
    echo "FAIL: --kv 30 over the sidecar's 300 kV: $n matching warnings:"; cat "$T/err"; fail=$((fail + 1))
else pass=$((pass + 1)); fi
"$BIN" fit-regions "$T/tiny.npy" --grid 1x1 --trials 4 --kv 200 -o "$T/kvr" --quiet >"$T/out" 2>"$T/err"
n=$(grep -c "warning: --kv 200 differs from .*tiny.json's 300 kV; using 200 kV" "$T/err")
[ "$n" -eq 1 ] && pass=$((pass + 1)) || { echo "FAIL: fit-regions --kv 200: $n warnings"; cat "$T/err"; fail=$((fail + 1)); }
"$BIN" reconstruct "$T/tiny.npy" --kv 301 -o "$T/kv301.npy" --quiet >"$T/out" 2>"$T/err" # within 1 %
grep -q "warning" "$T/err" && { echo "FAIL: a warning for --kv 301 over 300"; fail=$((fail + 1)); } || pass=$((pass + 1))

# No "//" in what a run prints when -o ends in a slash.
"$BIN" fit "$T/tiny.npy" --trials 4 -o "$T/slash/" >"$T/out" 2>"$T/err"
if grep -q "//" "$T/out" "$T/err" || [ ! -s "$T/slash/phase.png" ]; then
    echo "FAIL: fit -o DIR/ printed a '//' path or wrote nothing:"; grep "//" "$T/out" "$T/err"; fail=$((fail + 1))
else pass=$((pass + 1)); fi
expect_error "fit -o DIR/ again: no // in the refusal" "$T/slash/phase.tiff already exists" -- "$BIN" fit "$T/tiny.npy" --trials 4 -o "$T/slash/"
grep -q "//" "$T/err" && { echo "FAIL: // in the refusal"; fail=$((fail + 1)); } || pass=$((pass + 1))

# demo -o DIR follows --force: an existing output is refused (before the simulation), --force replaces it.
mkdir -p "$T/demo" && : >"$T/demo/phase.png"
expect_error "demo -o DIR with an existing output" "phase.png already exists \(use --force" -- "$BIN" demo -o "$T/demo" --trials 4
"$BIN" demo -o "$T/demo" --trials 4 --force -q >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 0 ] && [ -s "$T/demo/phase.png" ] && pass=$((pass + 1)) || { echo "FAIL: demo -o DIR --force: rc=$rc"; cat "$T/err"; fail=$((fail + 1)); }

# No output file may be left behind by a failed run.
if ls "$T"/*.tiff "$T"/*.tmp* >/dev/null 2>&1; then
    echo "FAIL: a failed run left output behind"
    fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
