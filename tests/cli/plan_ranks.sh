#!/usr/bin/env bash
# ssb4d plan --ranks N|auto (issue 16): the plan of one rank of a distributed session.
#   (a) --help documents --ranks; bad values (0, -1, 65537, abc, 1.5, 2x, '', ' 2', +3) exit 2 with
#       one stderr line naming --ranks;
#   (b) --ranks 1 is today's plan: the same JSON as no --ranks, the same text but the smallest-N lines;
#   (c) 1024x1024x256x256 with 16,000 BF pixels under 64G a rank: auto plans the smallest N (2: one
#       process fits only by streaming), --ranks 4 shows the largest rank's share (63 of 250 blocks,
#       4032 planes of 1024 x 513 complex64) and a smaller per-rank peak; the JSON's ranks, per_rank,
#       smallest_ranks; the machine-count table at the end;
#   (d) when even one block a rank does not fit: "no rank count fits" and exit 3; a rank count
#       that does not fit exits 3 with "does not fit";
#   (e) DATA (tiny .qem): --ranks 2 plans its largest rank.
# usage: plan_ranks.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"

SHAPE=(--shape 1024x1024x256x256 --bf 16000 --memory 64G --threads 2)

# --- (a) help and bad values -------------------------------------------------------------------------
"$BIN" plan --help >"$T/help" 2>&1
grep -q -- "--ranks N|auto" "$T/help" && ok || bad "plan --help does not document --ranks"
for v in 0 -1 65537 100000000000000000000 abc 1.5 2x '' ' 2' +3 auto2; do
    one_line 2 "plan --ranks '$v'" "invalid value .* for --ranks" -- "$BIN" plan "${SHAPE[@]}" --ranks "$v"
done
expect 2 "plan --ranks without a value" "needs a value" -- "$BIN" plan "${SHAPE[@]}" --ranks

# --- (b) --ranks 1 is today's plan ---------------------------------------------------------------------
"$BIN" plan --shape 512x512x192x192 --bf 8939 --memory 6G --threads 2 --json >"$T/p0.json"
"$BIN" plan --shape 512x512x192x192 --bf 8939 --memory 6G --threads 2 --json --ranks 1 >"$T/p1.json"
cmp -s "$T/p0.json" "$T/p1.json" && ok || bad "--ranks 1 gives another JSON than no --ranks"
[ "$(json_get "$T/p1.json" 'd["ranks"], d["mode"], d["per_rank"]["local_blocks"]')" = "1 streaming 140" ] && ok ||
    bad "--ranks 1 JSON: $(json_get "$T/p1.json" 'd["ranks"], d["mode"], d["per_rank"]')"
"$BIN" plan --shape 512x512x192x192 --bf 8939 --memory 6G --threads 2 >"$T/t0.txt"
"$BIN" plan --shape 512x512x192x192 --bf 8939 --memory 6G --threads 2 --ranks 1 >"$T/t1.txt"
grep -q "^smallest rank count for 6.00 GiB a rank: [0-9]" "$T/t1.txt" && ok || bad "--ranks 1 does not print the smallest N"
grep -v "^smallest rank count\|^one process also fits\|^$" "$T/t1.txt" >"$T/t1s.txt"
grep -v "^$" "$T/t0.txt" | cmp -s - "$T/t1s.txt" && ok || bad "--ranks 1 prints another plan than no --ranks"

# --- (c) the 1024^2 scan under 64G a rank --------------------------------------------------------------
"$BIN" plan "${SHAPE[@]}" --ranks auto >"$T/auto.txt" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && ok || bad "--ranks auto: rc=$rc"
grep -q "^distributed over 2 ranks: every figure below is one rank's, the largest: 125 of 250 blocks" "$T/auto.txt" &&
    ok || bad "--ranks auto does not plan 2 ranks: $(head -3 "$T/auto.txt")"
grep -q "^smallest rank count for 64.00 GiB a rank: 2 (planned above)" "$T/auto.txt" && ok ||
    bad "--ranks auto: no smallest-N line"
grep -q "^one process also fits, streaming G" "$T/auto.txt" && ok || bad "--ranks auto: one process streams, not said"
grep -q "^stage (per rank, GiB)" "$T/auto.txt" && ok || bad "--ranks auto: the stage table does not say per rank"
grep -q "^calibrate .*rank 0 only" "$T/auto.txt" && ok || bad "--ranks auto: the calibration is not rank 0's"
grep -q "^machines a distributed session needs" "$T/auto.txt" && grep -qE "^  1024x1024 x 256x256 +[0-9]+ +1 +1 +1$" "$T/auto.txt" &&
    grep -qE "^  2048x2048 x 256x256( +[0-9]+){4}$" "$T/auto.txt" && grep -q "16000 BF" "$T/auto.txt" && ok ||
    bad "the machine-count table is missing or odd: $(grep -A8 '^machines a' "$T/auto.txt")"
"$BIN" plan "${SHAPE[@]}" --ranks auto --json >"$T/auto.json" && ok || bad "--ranks auto --json failed"
[ "$(json_get "$T/auto.json" 'd["ranks"], d["smallest_ranks"], d["fits"], d["mode"], d["one_process_streams"]')" = \
    "2 2 True resident True" ] && ok || bad "--ranks auto JSON: $(json_get "$T/auto.json" 'd["ranks"], d["smallest_ranks"], d["fits"]')"
[ "$(json_get "$T/auto.json" 'len(d["machines_ranks"]), d["machines_ranks"][0]')" = \
    "12 {'scan': 1024, 'n_bf': 16000, 'ram_gb': 64, 'ranks': 2}" ] && ok ||
    bad "machines_ranks: $(json_get "$T/auto.json" 'd["machines_ranks"][:2]')"
"$BIN" plan "${SHAPE[@]}" --ranks 4 --json >"$T/r4.json"
rc=$?
[ $rc -eq 0 ] && ok || bad "--ranks 4: rc=$rc"
# 63 blocks = 4032 pixels, each plane 1024 x 513 complex64
[ "$(json_get "$T/r4.json" 'd["ranks"], d["per_rank"]["local_blocks"], d["per_rank"]["bf_pixels"], d["per_rank"]["stored_planes"], d["g_bytes"] == 4032 * 1024 * 513 * 8, d["per_rank"]["g_bytes"] == d["g_bytes"]')" = \
    "4 63 4032 4032 True True" ] && ok || bad "--ranks 4 per_rank: $(json_get "$T/r4.json" 'd["per_rank"]')"
[ "$(json_get "$T/r4.json" 'd["session_peak_bytes"] < 34 * 2**30 and d["session_peak_bytes"] > 9.77 * 2**30 + d["g_bytes"]')" = True ] &&
    ok || bad "--ranks 4: per-rank peak $(json_get "$T/r4.json" 'd["session_peak_bytes"] / 2**30') GiB"
[ "$(json_get "$T/r4.json" 'd["session_peak_bytes"] < json.load(open(sys.argv[1].replace("r4", "auto")))["session_peak_bytes"]')" = True ] &&
    ok || bad "4 ranks do not need less a rank than 2"
"$BIN" plan "${SHAPE[@]}" --ranks 4 >"$T/r4.txt"
grep -q "^distributed over 4 ranks: .* 63 of 250 blocks of 64 BF" "$T/r4.txt" && grep -q "^smallest rank count for 64.00 GiB a rank: 2$" "$T/r4.txt" &&
    ok || bad "--ranks 4 text: $(head -3 "$T/r4.txt")"

# --- (d) nothing fits ----------------------------------------------------------------------------------
expect 3 "--ranks auto under 8G (less than the encoded data and a block)" "^no rank count fits 8.00 GiB a rank: even 250 ranks" -- \
    "$BIN" plan --shape 1024x1024x256x256 --bf 16000 --memory 8G --ranks auto
expect 3 "--ranks 2 under 20G" "budget 20.00 GiB a rank: does not fit: one rank of 2 holds 8000 of 16000" -- \
    "$BIN" plan --shape 1024x1024x256x256 --bf 16000 --memory 20G --ranks 2
"$BIN" plan --shape 1024x1024x256x256 --bf 16000 --memory 8G --ranks auto --json >"$T/none.json"
[ "$(json_get "$T/none.json" 'd["smallest_ranks"], "even 250 ranks" in d["smallest_ranks_reason"], d["fits"]')" = "None True False" ] && ok ||
    bad "no rank count fits, JSON: $(json_get "$T/none.json" 'd.get("smallest_ranks"), d.get("smallest_ranks_reason")')"

# --- (e) DATA --------------------------------------------------------------------------------------------
"$BIN" simulate --preset tiny -o "$T/t.qem" --quiet || { echo "simulate failed"; exit 1; }
expect 0 "plan DATA --ranks 2" "^distributed over 2 ranks" -- "$BIN" plan "$T/t.qem" --ranks 2 --memory 1G --threads 2 -q
grep -qE "^  this data +1 +1 +1 +1$" "$T/out" && ok || bad "plan DATA: no 'this data' row: $(grep 'this data' "$T/out")"

finish plan_ranks
