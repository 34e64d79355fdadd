#!/usr/bin/env bash
# ssb4d plan --backend cuda and --device-memory (issue 31, item 4): the GPU's memory to the byte.
#   (a) plan --help documents --backend and --device-memory; bad --device-memory values exit 2
#       with one line naming it, on plan and on a session command;
#   (b) 256x256 scan, 3000 BF pixels, --backend cuda: the JSON's device table: G's 3000 planes of
#       256 x 129 complex64 (792,576,000 bytes), the passes in the session's order, each "after" at
#       least the one before, the last the peak = planes + work buffers; without a GPU the
#       release's own bytes are those worked out here from device.c's buffers (51.6 MiB; cuFFT's
#       work area estimated as the larger transform's output) and the text says so;
#   (c) --device-memory below the peak: exit 3, the text names the need, the budget and
#       --backend cpu; a budget above it fits (exit 0);
#   (d) --backend cpu: no GPU section, no "device" in the JSON;
#   (e) DATA: plan --backend cuda prints the GPU table; a run with --backend cuda and a 1M
#       --device-memory either stops at the G build with one line naming the need, the budget
#       and --backend cpu (a GPU here) or, without a GPU, with the usual one line naming CUDA;
#       --backend cpu ignores --device-memory.
# usage: plan_device.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"

SHAPE=(--shape 256x256x128x128 --bf 3000 --upsample 2 --memory 8G --threads 2)

# --- (a) help and bad values -------------------------------------------------------------------------
"$BIN" plan --help >"$T/help" 2>&1
grep -qE -- "^ +--backend B +where the heavy passes run" "$T/help" && ok || bad "plan --help does not list --backend"
grep -qE -- "^ +--device-memory SIZE +the GPU memory" "$T/help" && ok || bad "plan --help does not list --device-memory"
for v in 0 abc 1x -5 ''; do
    one_line 2 "plan --device-memory '$v'" "invalid value .* for --device-memory" -- \
        "$BIN" plan "${SHAPE[@]}" --device-memory "$v"
done
one_line 2 "fit --device-memory abc" "invalid value 'abc' for --device-memory" -- "$BIN" fit x.npy --device-memory abc

# --- (b) the device table -----------------------------------------------------------------------------
"$BIN" plan "${SHAPE[@]}" --backend cuda --device-memory 64G --json >"$T/d.json"
rc=$?
[ $rc -eq 0 ] && ok || bad "plan --backend cuda --device-memory 64G --json: rc=$rc"
[ "$(json_get "$T/d.json" 'd["device"]["planes"], d["device"]["planes_bytes"]')" = "3000 792576000" ] && ok ||
    bad "G's planes on the device: $(json_get "$T/d.json" 'd["device"]["planes"], d["device"]["planes_bytes"]')"
[ "$(json_get "$T/d.json" '" ".join(s["name"].split()[0] for s in d["device"]["stages"])')" = \
    "fit: fit: fit: fit: fit: fit: fit: fit: drag release object" ] && ok ||
    bad "the passes: $(json_get "$T/d.json" '[s["name"] for s in d["device"]["stages"]]')"
[ "$(json_get "$T/d.json" 'all(a["after_bytes"] <= b["after_bytes"] for a, b in zip(d["device"]["stages"], d["device"]["stages"][1:]))')" = True ] &&
    ok || bad "a pass's held bytes fall: the buffers are kept"
[ "$(json_get "$T/d.json" 'd["device"]["stages"][-1]["after_bytes"] == d["device"]["peak_bytes"] == d["device"]["planes_bytes"] + d["device"]["work_bytes"]')" = True ] &&
    ok || bad "peak != last pass's held bytes or != planes + work"
[ "$(json_get "$T/d.json" 'd["device"]["fits"], d["device"]["budget_bytes"], d["device"]["budget_from"]')" = \
    "True 68719476736 --device-memory" ] && ok || bad "fits 64G: $(json_get "$T/d.json" 'd["device"]["fits"]')"
if [ "$(json_get "$T/d.json" 'd["device"]["fft_work_estimated"]')" = True ]; then
    # release, f = 1 on 256 x 256 (nb = 256*129 = 33024 bins, npix = 65536, 64 pixels in flight):
    # tab (3*3000 + 512 + 5*3000) * 8 = 196096; spec 64*33024*8 = 16908288; valid 64;
    # real 64*65536*4 = 16777216; sums, bpart 2*65536*8 = 1048576 each; fin 16;
    # acc 33024*16 = 528384; F 65536*8 = 524288; out 65536*4 = 262144; cuFFT's one work area, the
    # larger of the C2R's (estimate 16777216) and the C2C's (524288)
    want=$((196096 + 16908288 + 64 + 16777216 + 2 * 1048576 + 16 + 16777216 + 528384 + 524288 + 262144))
    [ "$(json_get "$T/d.json" '[s["bytes"] for s in d["device"]["stages"] if s["name"] == "release"][0]')" = "$want" ] && ok ||
        bad "the release's own bytes: $(json_get "$T/d.json" '[s for s in d["device"]["stages"] if s["name"] == "release"]') (want $want)"
    "$BIN" plan "${SHAPE[@]}" --backend cuda >"$T/d.txt"
    grep -q "cuFFT's work area .* (estimated: no GPU here)" "$T/d.txt" && ok || bad "no GPU: the estimate is not said"
    grep -q "nothing to compare it with" "$T/d.txt" && ok || bad "no GPU, no --device-memory: no comparison expected"
fi
grep -q "^GPU memory (--backend cuda)" <("$BIN" plan "${SHAPE[@]}" --backend cuda) && ok || bad "no GPU section in the text"

# --- (c) a budget below the peak ----------------------------------------------------------------------
expect 3 "plan --device-memory 512M" "does not fit: the session needs 1\.[0-9]+ GiB of GPU memory and --device-memory is 512\.0 MiB: use --backend cpu" -- \
    "$BIN" plan "${SHAPE[@]}" --backend cuda --device-memory 512M
expect 0 "plan --device-memory 2G" "fits --device-memory 2\.00 GiB" -- "$BIN" plan "${SHAPE[@]}" --backend cuda --device-memory 2G

# --- (d) the CPU ---------------------------------------------------------------------------------------
"$BIN" plan "${SHAPE[@]}" --backend cpu >"$T/c.txt"
grep -q "GPU memory" "$T/c.txt" && bad "--backend cpu printed a GPU section" || ok
"$BIN" plan "${SHAPE[@]}" --backend cpu --json >"$T/c.json"
[ "$(json_get "$T/c.json" '"device" in d')" = False ] && ok || bad "--backend cpu --json has a device object"

# --- (e) data ------------------------------------------------------------------------------------------
"$BIN" simulate --preset tiny --c10 -10 -o "$T/t.npy" -q || { echo "simulate failed"; exit 1; }
"$BIN" import "$T/t.npy" -o "$T/t.qem" -q >/dev/null || { echo "import failed"; exit 1; }
expect 0 "plan DATA --backend cuda" "session peak on the GPU" -- "$BIN" plan "$T/t.qem" --backend cuda -q --memory 1G
expect 0 "reconstruct --backend cpu --device-memory 1M" "wrote|phase" -- \
    "$BIN" reconstruct "$T/t.npy" --backend cpu --device-memory 1M -o "$T/cpu.tiff"
"$BIN" reconstruct "$T/t.npy" --backend cuda --device-memory 1M -o "$T/g.tiff" -q >"$T/out" 2>"$T/err"
rc=$?
if [ $rc -eq 2 ] && grep -q "^ssb4d reconstruct: .*CUDA" "$T/err"; then # no GPU or no CUDA backend here
    [ "$(wc -l <"$T/err")" -eq 1 ] && ok || bad "no GPU: more than one line: $(cat "$T/err")"
else
    [ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] &&
        grep -qE "needs [0-9.]+ [MG]iB of GPU memory for this session \(G's planes .*, work buffers and cuFFT's work area .*\) but the budget \(--device-memory\) is 1\.0 MiB: use --backend cpu" "$T/err" &&
        ok || bad "--device-memory 1M on a GPU: rc=$rc (want 1 and one line): $(cat "$T/err")"
    [ ! -e "$T/g.tiff" ] && ok || bad "a refused run wrote its image"
fi

finish plan_device.sh
