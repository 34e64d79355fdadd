#!/usr/bin/env bash
# Calibration files end to end (SPEC §4, §8): `calibrate -o cal.json`, aberrations and a thick
# model edited in, then `reconstruct --calibration cal.json` gives the same bytes every time and
# the same bytes as the equivalent explicit flags; the data identity is the file's SHA-256 (.npy)
# or the digest of the body checksums (.qem); a file from other data gives a warning and still
# works; broken files (truncated, wrong schema, version 99, C10 = "abc", NaN, 1e999, half a thick
# model) are refused with exit status 2, a message naming the problem and no output file.
# Needs only bash, sed, grep, cmp, dd, od and sha256sum (no python, no jq).
# usage: calibration.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"

# json_value FILE KEY: the text after "KEY": up to the next comma (or the whole [..] list).
json_value() {
    sed -n "s/.*\"$2\":[[:space:]]*\(\[[^]]*\]\|[^,]*\),\{0,1\}[[:space:]]*$/\1/p" "$1" | head -1 |
        tr -d ' []'
}

# Tiny simulated data, copied under a name without a sidecar so that only the calibration file
# and the flags say anything.
"$BIN" simulate --preset tiny -o "$T/sim.npy" >/dev/null 2>&1 || { echo "FAIL: simulate"; exit 1; }
cp "$T/sim.npy" "$T/d.npy"
M="--kv 300 --semiangle 25 --scan-step 0.36609375"
expect 0 "calibrate -o" "wrote" -- "$BIN" calibrate "$T/d.npy" $M -o "$T/cal0.json"
want_id="sha256:$(sha256sum "$T/d.npy" | cut -d' ' -f1)"
grep -q "\"data_identity\":[[:space:]]*\"$want_id\"" "$T/cal0.json" && ok ||
    bad "data_identity of a .npy is not its SHA-256 ($want_id)"
grep -q '"n_bf":[[:space:]]*[1-9]' "$T/cal0.json" && ok || bad "calibrate wrote no n_bf"

# Aberrations and a thick model, as a fit would record them.
AB='"aberrations": {"C10_nm": -9.8, "C12_nm": 2.1, "phi12_deg": 19.5, "C30_nm": 1000}'
TH='"thick": {"tilt_mrad": [1.5, -2], "thickness_nm": 5, "gain": 1.01}'
sed "s/\"loss\":/$AB, $TH, \"loss\":/" "$T/cal0.json" >"$T/cal.json"
grep -q C30_nm "$T/cal.json" && ok || bad "sed did not edit cal.json"

R="$BIN reconstruct --quiet"
expect 0 "reconstruct --calibration" "calibration file" -- $R "$T/d.npy" --calibration "$T/cal.json" -o "$T/a1.npy"
grep -q "thick model.*thickness 5 nm (calibration file)" "$T/out" && ok || bad "thick model not taken from the file"
grep -q "warning" "$T/err" && bad "warning for the file's own data: $(cat "$T/err")" || ok
expect 0 "reconstruct --calibration again" "calibration file" -- $R "$T/d.npy" --calibration "$T/cal.json" -o "$T/a2.npy"
cmp -s "$T/a1.npy" "$T/a2.npy" && ok || bad "two reconstructions from cal.json differ"

# The same with every value given as a flag (the file's numbers read back exactly).
rot=$(json_value "$T/cal.json" rotation_deg)
samp=$(json_value "$T/cal.json" sampling_mrad)
cen=$(json_value "$T/cal.json" centre_px)
sel=$(json_value "$T/cal.json" selection_radius_px)
[ -n "$rot" ] && [ -n "$samp" ] && [ -n "$cen" ] && [ -n "$sel" ] && ok ||
    bad "could not read rotation/sampling/centre/radius from cal.json"
expect 0 "reconstruct with flags" "loss" -- $R "$T/d.npy" $M --rotation "$rot" --det-sampling "$samp" \
    --centre "$cen" --bf-radius "$sel" --aberr C10=-9.8,C12=2.1,phi12=19.5,C30=1000 \
    --tilt 1.5,-2 --thickness 5 -o "$T/f.npy"
cmp -s "$T/a1.npy" "$T/f.npy" && ok || bad "--calibration and the equivalent flags differ"
# ... and the file's values do matter: without its aberrations the image is another one.
expect 0 "reconstruct with the plain calibration" "loss" -- $R "$T/d.npy" --calibration "$T/cal0.json" -o "$T/p.npy"
cmp -s "$T/a1.npy" "$T/p.npy" && bad "aberrations from cal.json had no effect" || ok
# Flags override the file (thickness 0 = standard SSB).
expect 0 "flag over file" '"thickness_nm":7,"tilt_mrad":\[1.5,-2\],"thick_source":"flags over calibration file"' -- \
    $R "$T/d.npy" --calibration "$T/cal.json" --thickness 7 --json -o "$T/t7.npy"
expect 0 "thickness 0 over file" "loss" -- $R "$T/d.npy" --calibration "$T/cal.json" --thickness 0 -o "$T/t0.npy"
expect 0 "thin from flags" "loss" -- $R "$T/d.npy" $M --rotation "$rot" --det-sampling "$samp" \
    --centre "$cen" --bf-radius "$sel" --aberr C10=-9.8,C12=2.1,phi12=19.5,C30=1000 -o "$T/t1.npy"
cmp -s "$T/t0.npy" "$T/t1.npy" && ok || bad "--thickness 0 over the file is not the thin reconstruction"

# Other data (one count changed): a warning, and it still works.
cp "$T/d.npy" "$T/d2.npy"
printf '\x07' | dd of="$T/d2.npy" bs=1 seek=5000 conv=notrunc 2>/dev/null
expect 0 "other data" "warning: .*cal.json was made from other data \(sha256:[0-9a-f]+… ≠ sha256:[0-9a-f]+…\)" -- \
    $R "$T/d2.npy" --calibration "$T/cal.json" -o "$T/o.npy"
[ -s "$T/o.npy" ] && ok || bad "no output for other data"
# An unknown identity on the file's side: no warning.
sed 's/"data_identity":[^,]*,/"data_identity": null,/' "$T/cal.json" >"$T/noid.json"
expect 0 "no identity" "loss" -- $R "$T/d2.npy" --calibration "$T/noid.json" -o "$T/o2.npy"
grep -q warning "$T/err" && bad "warning without an identity: $(cat "$T/err")" || ok
cmp -s "$T/o.npy" "$T/o2.npy" && ok || bad "the identity changed the reconstruction"

# .qem: the identity is the SHA-256 of the concatenated body checksums of the header.
expect 0 "import" "ratio" -- "$BIN" import -q "$T/d.npy" -o "$T/d.qem" --hot-pixels none
expect 0 "calibrate .qem" "wrote" -- "$BIN" calibrate "$T/d.qem" $M -o "$T/calq.json"
L=$(od -An -t u8 -j 8 -N 8 "$T/d.qem" | tr -d ' ')
sums=$(dd if="$T/d.qem" bs=1 skip=56 count="$L" 2>/dev/null | tr -d ' \n\t' |
    grep -o '"sha256":\[[^]]*\]' | sed 's/"sha256"://; s/[]["]//g; s/,//g')
qid="qem-body-sha256:$(printf '%s' "$sums" | sha256sum | cut -d' ' -f1)"
[ -n "$sums" ] && grep -q "\"data_identity\":[[:space:]]*\"$qid\"" "$T/calq.json" && ok ||
    bad "data_identity of a .qem is not the digest of its body checksums ($qid)"
expect 0 "qem with its own calibration" "loss" -- $R "$T/d.qem" --calibration "$T/calq.json" -o "$T/q.npy"
grep -q warning "$T/err" && bad "warning for the .qem's own calibration: $(cat "$T/err")" || ok
expect 0 "npy with the qem's calibration" "made from other data \(qem-body-sha256:" -- \
    $R "$T/d.npy" --calibration "$T/calq.json" -o "$T/q2.npy"
# calibrate --calibration other data: the warning, and its own identity recorded.
expect 0 "calibrate with other data's file" "made from other data" -- "$BIN" calibrate "$T/d2.npy" \
    --calibration "$T/cal.json" -o "$T/cal3.json"
grep -q "\"data_identity\":[[:space:]]*\"sha256:$(sha256sum "$T/d2.npy" | cut -d' ' -f1)\"" "$T/cal3.json" && ok ||
    bad "calibrate recorded the wrong identity"

# Broken files: exit 2, the problem named, no output written.
refused() {
    local what=$1 file=$2 pattern=$3
    rm -f "$T/never.npy"
    expect 2 "$what" "$pattern" -- $R "$T/d.npy" --calibration "$file" -o "$T/never.npy"
    [ -e "$T/never.npy" ] && bad "$what: an output was written" || ok
}
head -c 200 "$T/cal.json" >"$T/trunc.json"
refused "truncated" "$T/trunc.json" "trunc.json is not valid JSON"
: >"$T/empty.json"
refused "empty" "$T/empty.json" "empty.json"
sed 's/ssb4d.calibration/ssb4d.benchmark/' "$T/cal.json" >"$T/schema.json"
refused "wrong schema" "$T/schema.json" "not an ssb4d calibration file"
sed 's/"version":[[:space:]]*1,/"version": 99,/' "$T/cal.json" >"$T/v99.json"
refused "version 99" "$T/v99.json" "newer ssb4d.*version 99"
sed 's/"C10_nm": -9.8/"C10_nm": "abc"/' "$T/cal.json" >"$T/abc.json"
refused "C10 abc" "$T/abc.json" '"aberrations.C10_nm" must be a number'
sed 's/"C10_nm": -9.8/"C10_nm": NaN/' "$T/cal.json" >"$T/nan.json"
refused "C10 NaN" "$T/nan.json" "nan.json is not valid JSON"
sed 's/"rotation_deg":[[:space:]]*[^,]*,/"rotation_deg": 1e999,/' "$T/cal.json" >"$T/inf.json"
refused "rotation 1e999" "$T/inf.json" '"rotation_deg" = inf is out of range'
sed 's/"thickness_nm": 5/"thickness_nm": null/' "$T/cal.json" >"$T/half.json"
refused "half a thick model" "$T/half.json" '"thick.thickness_nm" is missing'
sed 's/"kv":[[:space:]]*300/"kv": "300"/' "$T/cal.json" >"$T/kvstr.json"
refused "kv as a string" "$T/kvstr.json" '"microscope.kv" must be a number'
refused "missing file" "$T/nope.json" "nope.json"
expect 2 "calibrate refuses version 99 too" "newer ssb4d" -- "$BIN" calibrate "$T/d.npy" --calibration "$T/v99.json" -o "$T/never.json"
[ -e "$T/never.json" ] && bad "calibrate wrote an output from a refused file" || ok

finish calibration.sh
