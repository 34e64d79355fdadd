#!/usr/bin/env bash
# --memory SIZE on every command (issue 5): block / group sizes and how G is held follow from the
# budget, and the results do not. On tiny simulated data (.qem):
#   (a) reconstruct gives byte-identical phase and object files under three budgets: ample (G
#       resident), one that streams most of G, and one just above the job's smallest budget;
#   (b) fit under its own three budgets (ample; the smallest its refusal names, and that plus 3/4
#       of G, both streaming) gives the same trial trace, C10, C12, phi12, rotation and images, with
#       the tracked peak inside the budget; 0.1 MiB below its smallest it is refused; fit --tilt the same
#       thick-sample fit with G streamed as resident; fit-regions the same regions.csv at the
#       smallest budget its refusal names; calibrate the same calibration; verify the same verdict;
#   (c) a budget below the smallest exits 2 with one "does not fit" line naming the smallest
#       budget and writes nothing;
#   (d) bad values (abc, -1, 0, 12Q) exit 2 naming --memory on every command;
#   (e) session --json and plan --json carry the documented keys and stage fields; plan exits 3
#       with the smallest budget when the reference workload does not fit in 1G, 0 in 24G.
# usage: memory.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"

# num FILE KEY / str FILE KEY: the number / string after the first "KEY": of a one-line JSON object.
num() { grep -o "\"$2\":-\{0,1\}[0-9.eE+-]*" "$1" | head -1 | cut -d: -f2; }
str() { grep -o "\"$2\":\"[^\"]*\"" "$1" | head -1 | cut -d: -f2 | tr -d '"'; }
have_python=0
command -v python3 >/dev/null 2>&1 && have_python=1

"$BIN" simulate --preset tiny -o "$T/t.qem" --quiet || { echo "simulate failed"; exit 1; }
"$BIN" simulate --preset tiny -o "$T/n.npy" --quiet || { echo "simulate failed"; exit 1; }
Q=$T/t.qem
run() { "$BIN" "$@" --threads 2 --quiet; } # the plan depends on the thread count: keep it fixed

# --- the three budgets ---------------------------------------------------------------------------
run reconstruct "$Q" --memory 4G -o "$T/p_big.tiff" --object "$T/o_big.npy" --json >"$T/r_big.json" 2>"$T/err" ||
    { bad "reconstruct --memory 4G failed"; cat "$T/err"; }
[ "$(str "$T/r_big.json" g_mode)" = resident ] && ok || bad "4G does not hold G resident"
need=$(num "$T/r_big.json" resident_memory_bytes)
[ -n "$need" ] || { echo "reconstruct --json lacks resident_memory_bytes"; exit 1; }
stream=$((need * 45 / 100)) # well below what G resident needs
run reconstruct "$Q" --memory "$stream" -o "$T/p_stream.tiff" --object "$T/o_stream.npy" --json >"$T/r_stream.json" 2>"$T/err" ||
    { bad "reconstruct --memory $stream failed"; cat "$T/err"; }
[ "$(str "$T/r_stream.json" g_mode)" = streaming ] && ok || bad "--memory $stream does not stream G"
"$BIN" plan "$Q" --memory "$stream" --region 0x0 --upsample 1 --preview-precision float --threads 2 --json \
    >"$T/plan_stream.json" 2>/dev/null
grep -q '"fits":true' "$T/plan_stream.json" && [ "$(str "$T/plan_stream.json" mode)" = streaming ] && ok ||
    bad "ssb4d plan does not call --memory $stream a streaming plan"
least=$(num "$T/r_stream.json" min_memory_bytes)
low=$((least + least / 50)) # 2 % above the smallest budget
[ "$low" -lt "$stream" ] && ok || bad "the smallest budget $least is not below the streaming one $stream"
run reconstruct "$Q" --memory "$low" -o "$T/p_low.tiff" --object "$T/o_low.npy" --json >"$T/r_low.json" 2>"$T/err" ||
    { bad "reconstruct --memory $low failed"; cat "$T/err"; }
[ "$(str "$T/r_low.json" g_mode)" = streaming ] && ok || bad "--memory $low does not stream G"
n_stream=$(num "$T/r_stream.json" n_resident); n_low=$(num "$T/r_low.json" n_resident)
[ -n "$n_low" ] && [ "$n_low" -lt "$n_stream" ] && ok || bad "a smaller budget held no fewer planes ($n_low vs $n_stream)"
peak=$(num "$T/r_low.json" peak_tracked_bytes)
[ -n "$peak" ] && awk -v p="$peak" -v b="$low" 'BEGIN { exit !(p <= b) }' && ok || bad "tracked peak $peak above the budget $low"
echo "budgets: 4G (resident), $stream bytes (streaming, $n_stream planes held), $low bytes (smallest $least, $n_low held)"

# --- (a) reconstruct: the same bits ----------------------------------------------------------------
for b in stream low; do
    cmp -s "$T/p_big.tiff" "$T/p_$b.tiff" && ok || bad "reconstruct phase differs between 4G and the $b budget"
    cmp -s "$T/o_big.npy" "$T/o_$b.npy" && ok || bad "reconstruct object differs between 4G and the $b budget"
    [ "$(num "$T/r_big.json" loss)" = "$(num "$T/r_$b.json" loss)" ] && ok || bad "reconstruct loss differs ($b)"
done

# --- (b) fit, fit-regions, calibrate, verify: the same results --------------------------------------
# A short, deterministic search (8 candidates around the parallax estimate, no branch check). The
# fit holds more than reconstruct (the parallax's per-pixel spectra, the band objective's
# tables), all planned: its own budgets are 4G, the smallest its refusal names (MiB, rounded up)
# and that plus 3/4 of G (streaming); 0.1 MiB below the smallest it is refused.
quick=(--trials 8 --no-branch-check)
run fit "$Q" --memory 4G -o "$T/f_big" "${quick[@]}" --json >"$T/f_big.json" 2>"$T/err" ||
    { bad "fit --memory 4G failed"; cat "$T/err"; }
smallest() { grep -o 'smallest budget is [0-9.]* MiB' "$T/err" | grep -o '[0-9.]*' | awk '{ printf "%d", $1 * 1048576 }'; }
expect 2 "fit in 1M" "smallest budget is [0-9.]+ MiB" -- run fit "$Q" --memory 1M -o "$T/f_none" "${quick[@]}"
flow=$(smallest)
fg=$(num "$T/f_big.json" g_bytes)
[ -n "$flow" ] && [ -n "$fg" ] && ok || { echo "no smallest fit budget or g_bytes ($flow, $fg)"; exit 1; }
[ "$flow" -gt "$low" ] && ok || bad "the fit's smallest budget $flow is not above reconstruct's $low (spectra not planned?)"
fstream=$((flow + fg * 3 / 4)) # a quarter of G or so streamed: each pass rebuilds it
echo "fit budgets: 4G, $fstream bytes (streaming), $flow bytes (its smallest)"
for b in stream low; do
    case $b in stream) mem=$fstream ;; low) mem=$flow ;; esac
    run fit "$Q" --memory "$mem" -o "$T/f_$b" "${quick[@]}" --json >"$T/f_$b.json" 2>"$T/err" ||
        { bad "fit --memory $mem failed"; cat "$T/err"; }
    peak=$(num "$T/f_$b.json" peak_tracked_bytes)
    [ -n "$peak" ] && [ "$peak" -le "$mem" ] && ok || bad "fit: tracked peak $peak above the budget $mem"
done
h=$(str "$T/f_big.json" trace_sha256)
[ -n "$h" ] && ok || bad "fit --json lacks trace_sha256"
for b in stream low; do
    [ "$(str "$T/f_$b.json" g_mode)" = streaming ] && ok || bad "fit under the $b budget does not stream G"
    [ "$(str "$T/f_$b.json" trace_sha256)" = "$h" ] && ok || bad "fit trace differs between 4G and the $b budget"
    for k in C10_nm C12_nm phi12_deg rotation_deg loss; do
        [ "$(num "$T/f_$b.json" $k)" = "$(num "$T/f_big.json" $k)" ] && ok || bad "fit $k differs ($b budget)"
    done
    cmp -s "$T/f_big/phase.tiff" "$T/f_$b/phase.tiff" && cmp -s "$T/f_big/object.npy" "$T/f_$b/object.npy" && ok ||
        bad "fit images differ between 4G and the $b budget"
done
expect 2 "fit below its smallest budget" "does not fit in .*smallest budget is" -- \
    run fit "$Q" --memory $((flow - 104858)) -o "$T/f_under" "${quick[@]}"
[ ! -e "$T/f_under" ] && ok || bad "a refused fit left its output folder"
# fit-regions: its smallest budget is the one its refusal names (MiB, rounded up).
expect 2 "fit-regions in 1M" "smallest budget is [0-9.]+ MiB" -- \
    run fit-regions "$Q" --regions 0:32,0:32 --memory 1M -o "$T/g_none" "${quick[@]}"
glow=$(smallest)
for b in big low; do
    case $b in big) mem=4G ;; low) mem=$glow ;; esac
    run fit-regions "$Q" --regions 0:32,0:32 --memory "$mem" -o "$T/g_$b" "${quick[@]}" >/dev/null 2>"$T/err" ||
        { bad "fit-regions --memory $mem failed"; cat "$T/err"; }
done
cmp -s "$T/g_big/regions.csv" "$T/g_low/regions.csv" && ok || bad "fit-regions differs between 4G and $glow bytes"
# fit --tilt: the band objective reads G in groups like every other pass, so a streamed G gives
# the resident G's thick-sample fit. Its ~1,200 evaluations each rebuild every streamed plane, so
# the budget streams as few as it can: the largest of flow + 15/16, 14/16, ... of G that streams.
ftilt=$fstream
for f in 15 14 13 12; do
    mem=$((flow + fg * f / 16))
    run fit "$Q" --memory "$mem" -o "$T/probe" --force "${quick[@]}" --json >"$T/probe.json" 2>/dev/null &&
        [ "$(str "$T/probe.json" g_mode)" = streaming ] && { ftilt=$mem; break; }
done
for b in big stream; do
    case $b in big) mem=4G ;; stream) mem=$ftilt ;; esac
    run fit "$Q" --tilt --memory "$mem" -o "$T/t_$b" "${quick[@]}" --json >"$T/t_$b.json" 2>"$T/err" ||
        { bad "fit --tilt --memory $mem failed"; cat "$T/err"; }
done
tilt() { grep -o '"tilt_mrad":\[[^]]*\]' "$1"; }
[ "$(str "$T/t_stream.json" g_mode)" = streaming ] && ok || bad "fit --tilt under the stream budget does not stream G"
[ -n "$(tilt "$T/t_big.json")" ] && [ "$(tilt "$T/t_big.json")" = "$(tilt "$T/t_stream.json")" ] && ok ||
    bad "fit --tilt: tilt_mrad differs between 4G and the stream budget"
for k in thickness_nm gain C10_nm C12_nm phi12_deg; do
    [ -n "$(num "$T/t_big.json" $k)" ] && [ "$(num "$T/t_stream.json" $k)" = "$(num "$T/t_big.json" $k)" ] && ok ||
        bad "fit --tilt $k differs between 4G and the stream budget"
done
cmp -s "$T/t_big/phase.tiff" "$T/t_stream/phase.tiff" && ok || bad "fit --tilt images differ between 4G and the stream budget"
for mem in 4G 1M; do
    "$BIN" calibrate "$Q" --memory $mem --threads 2 -o "$T/cal_$mem.json" >/dev/null 2>"$T/err" ||
        { bad "calibrate --memory $mem failed"; cat "$T/err"; }
done
cmp -s "$T/cal_4G.json" "$T/cal_1M.json" && ok || bad "calibrate differs between 4G and 1M (frame blocks)"
expect 0 "verify in 1M" "identical" -- "$BIN" verify "$T/n.npy" "$Q" --memory 1M --threads 2 --quiet
expect 0 "info --check in 1M" "verified" -- "$BIN" info "$Q" --check --memory 1M
expect 2 "import below its read blocks" "does not fit.*import" -- "$BIN" import "$T/n.npy" -o "$T/i.qem" --memory 2M -q
[ ! -e "$T/i.qem" ] && ok || bad "a refused import left its output"
expect 0 "import in 64M" "n.npy -> " -- "$BIN" import "$T/n.npy" -o "$T/i.qem" --memory 64M -q
expect 2 "simulate beyond the budget" "does not fit.*needs about" -- "$BIN" simulate --preset tiny -o "$T/s.qem" --memory 2M --quiet
[ ! -e "$T/s.qem" ] && ok || bad "a refused simulate left its output"

# --- (c) below the smallest budget: exit 2, one line, no output --------------------------------------
expect 2 "reconstruct below the smallest budget" "does not fit in .*smallest budget is" -- \
    run reconstruct "$Q" --memory 1M -o "$T/p_none.tiff"
[ "$(wc -l <"$T/err")" -le 2 ] && ok || bad "more than the one refusal line (and the sidecar note) on stderr"
[ ! -e "$T/p_none.tiff" ] && ok || bad "a refused reconstruct wrote its image"
expect 2 "fit below the smallest budget" "does not fit in .*smallest budget is" -- run fit "$Q" --memory 1M -o "$T/f_none"
[ ! -e "$T/f_none" ] && ok || bad "a refused fit left its output folder"

# --- (d) bad values -----------------------------------------------------------------------------------
for v in abc -1 0 12Q; do
    expect 2 "reconstruct --memory $v" "--memory" -- "$BIN" reconstruct "$Q" --memory "$v"
    expect 2 "fit --memory $v" "--memory" -- "$BIN" fit "$Q" --memory "$v" -o "$T/bad"
    expect 2 "calibrate --memory $v" "--memory" -- "$BIN" calibrate "$Q" --memory "$v"
    expect 2 "import --memory $v" "--memory" -- "$BIN" import "$T/n.npy" -o "$T/bad.qem" --memory "$v"
    expect 2 "info --memory $v" "--memory" -- "$BIN" info "$Q" --memory "$v"
    expect 2 "verify --memory $v" "--memory" -- "$BIN" verify "$T/n.npy" "$Q" --memory "$v"
    expect 2 "simulate --memory $v" "--memory" -- "$BIN" simulate --preset tiny -o "$T/bad.npy" --memory "$v"
    expect 2 "plan --memory $v" "--memory" -- "$BIN" plan "$Q" --memory "$v"
    expect 2 "session --memory $v" "--memory" -- "$BIN" session "$Q" --memory "$v"
done
[ ! -e "$T/bad" ] && [ ! -e "$T/bad.qem" ] && [ ! -e "$T/bad.npy" ] && ok || bad "a bad --memory left outputs"
for c in reconstruct fit demo fit-regions calibrate import info verify simulate; do
    "$BIN" $c --help 2>&1 | grep -q -- "--memory" && ok || bad "$c --help does not document --memory"
done

# --- (e) session and plan JSON ---------------------------------------------------------------------------
echo '{"drags": 2, "releases": 1, "region": null, "save": false}' >"$T/script.json"
"$BIN" session "$Q" --memory 4G --threads 2 --script "$T/script.json" --json >"$T/session.json" 2>"$T/err" ||
    { bad "session failed"; cat "$T/err"; }
"$BIN" plan "$Q" --threads 2 --json >"$T/plan.json" 2>/dev/null || bad "plan of the tiny data does not fit"
if [ $have_python = 1 ]; then
    python3 - "$T/session.json" "$T/plan.json" <<'EOF' && ok || bad "session / plan JSON keys"
import json, sys
top = ["encoded_bytes", "g_bytes", "resident_bytes", "session_peak_bytes", "fits", "stages"]
for path, stage_keys in ((sys.argv[1], ["name", "peak_bytes", "after_bytes", "cache_bytes", "rss_peak_bytes", "seconds"]),
                         (sys.argv[2], ["name", "peak_bytes", "after_bytes", "cache_bytes"])):
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    assert len(lines) == 1, f"{path}: {len(lines)} lines, want one JSON object"
    d = json.loads(lines[0])
    missing = [k for k in top if k not in d]
    assert not missing, f"{path}: lacks {missing}"
    assert d["stages"], f"{path}: no stages"
    for s in d["stages"]:
        missing = [k for k in stage_keys if k not in s]
        assert not missing, f"{path}: stage {s.get('name')} lacks {missing}"
EOF
else
    for k in encoded_bytes g_bytes resident_bytes session_peak_bytes fits stages; do
        grep -q "\"$k\":" "$T/session.json" && grep -q "\"$k\":" "$T/plan.json" && ok || bad "session / plan JSON lacks $k"
    done
    for k in name peak_bytes after_bytes cache_bytes rss_peak_bytes seconds; do
        grep -q "\"$k\":" "$T/session.json" && ok || bad "session stages lack $k"
    done
fi
# --- (f) the plan equals the session on a crystal whose parallax has alternatives --------------------
# The small preset: the fit's start has four seeds (the parallax and three aliased alternatives), and a
# 1x script's releases are the fused pass (the image and the exact loss at once). Every stage's peak
# and after are planned to the byte.
if [ "$have_python" = 1 ]; then
    "$BIN" simulate --preset small -o "$T/s.qem" --quiet || bad "simulate small"
    echo '{"upsample": 1, "drags": 2, "releases": 2}' >"$T/s1.json"
    "$BIN" session "$T/s.qem" --threads 2 --script "$T/s1.json" --json >"$T/s1.out" 2>"$T/err" ||
        { bad "session small 1x failed"; cat "$T/err"; }
    python3 - "$T/s1.out" <<'EOF' && ok || bad "small 1x session: a stage differs from its plan"
import json, sys
d = json.load(open(sys.argv[1]))
off = [(s["name"], s["peak_bytes"] - s["planned_peak_bytes"], s["after_bytes"] - s["planned_after_bytes"])
       for s in d["stages"] if s["peak_bytes"] != s["planned_peak_bytes"] or s["after_bytes"] != s["planned_after_bytes"]]
print("  stages off the plan (name, peak, after bytes):", off or "none")
assert not off and d["session_peak_bytes"] == d["planned_session_peak_bytes"]
EOF
fi
expect 3 "plan: the reference workload in 1G" "smallest budget" -- \
    "$BIN" plan --shape 512x512x192x192 --bf 8939 --memory 1G
expect 0 "plan: the reference workload in 24G" "fits" -- "$BIN" plan --shape 512x512x192x192 --bf 8939 --memory 24G

finish memory
