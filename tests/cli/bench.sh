#!/usr/bin/env bash
# bench.sh — `ssb4d bench run` and `bench sweep` on a tiny simulated workload: the record's keys,
# the same hashes in every repeat, compare passing on the record itself and failing on a record
# whose fit took twice as long or whose phase changed, every loss tile giving the same bits, and
# usage errors. Timings are recorded, never asserted.
BIN=$1
source "$(dirname "$0")/lib/harness.sh"

"$BIN" simulate --preset tiny -o "$T/tiny.qem" >/dev/null 2>&1 || { echo "simulate failed"; exit 1; }

expect 0 "bench run" "record $T/rec.json" -- "$BIN" bench run --data "$T/tiny.qem" --repeat 2 -o "$T/rec.json"
if [ -s "$T/rec.json" ]; then
    for key in '"schema":"ssb4d-bench/1"' '"git":' '"machine":' '"workload":' '"settings":' '"stages":' \
               '"hashes":' '"session_peak_bytes":' '"median":' '"runs":' '"repeat":2'; do
        tr -d ' \n\t' <"$T/rec.json" | grep -q -- "$key" && ok || bad "record lacks $key"
    done
    tr -d ' \n\t' <"$T/rec.json" | grep -qE '"G":"[0-9a-f]{64}"' && ok || bad "record has no G hash"
    tr -d ' \n\t' <"$T/rec.json" | grep -qE '"trace":"[0-9a-f]{64}"' && ok || bad "record has no trace hash"
    # A 32x32 scan has no region refit; every other stage is there.
    for st in load calibrate "G build" fit "preview" "20 drags" "3 releases" "save calibration"; do
        grep -qE "\"name\":[[:space:]]*\"$st" "$T/rec.json" && ok || bad "record lacks stage $st"
    done
    expect 0 "compare with itself" "bench compare: OK" -- "$BIN" bench compare "$T/rec.json" "$T/rec.json"
    # The fit twice as slow (every run of it doubled): compare fails and names the fit.
    python3 - "$T/rec.json" "$T/slow.json" "$T/hash.json" <<'PY' && ok || bad "could not derive records"
import json, sys
r = json.load(open(sys.argv[1]))
for s in r["stages"]:
    if s["name"] == "fit":
        s["seconds"] = {k: (v * 2 if isinstance(v, float) else [x * 2 for x in v]) for k, v in s["seconds"].items()}
json.dump(r, open(sys.argv[2], "w"))
r = json.load(open(sys.argv[1]))
r["hashes"]["phase"] = "0" * 64
json.dump(r, open(sys.argv[3], "w"))
PY
    expect 1 "compare: slower fit" "REGRESSED.*fit" -- "$BIN" bench compare "$T/rec.json" "$T/slow.json"
    expect 1 "compare: changed phase" "REGRESSED.*phase" -- "$BIN" bench compare "$T/rec.json" "$T/hash.json"
    expect 0 "compare: changed phase allowed" "OK" -- "$BIN" bench compare "$T/rec.json" "$T/hash.json" --allow-hash-change
fi

expect 0 "sweep" "every tile gives the same bits: yes" -- \
    "$BIN" bench sweep --data "$T/tiny.qem" --loss-tile 1,16,100,all --repeat 1 -o "$T/sweep.json"
grep -cE '"same_bits":[[:space:]]*true' "$T/sweep.json" 2>/dev/null | grep -qx 5 && ok || bad "sweep JSON: 5 rows with the same bits"

expect 2 "run without -o" "-o RECORD.json is required" -- "$BIN" bench run --data "$T/tiny.qem"
expect 2 "run: unknown workload" "unknown workload" -- "$BIN" bench run --workload huge -o "$T/x.json"
expect 2 "run: bad repeat" "invalid value '0' for --repeat" -- "$BIN" bench run --data "$T/tiny.qem" --repeat 0 -o "$T/x.json"
expect 2 "run: missing data" "cannot|no such|not found" -- "$BIN" bench run --data "$T/none.qem" -o "$T/x.json"
[ ! -e "$T/x.json" ] && ok || bad "a failed run left a record"
expect 2 "sweep: bad tile" "invalid loss tile 'x'" -- "$BIN" bench sweep --data "$T/tiny.qem" --loss-tile 16,x
expect 2 "sweep: no tiles" "--loss-tile LIST is required" -- "$BIN" bench sweep --data "$T/tiny.qem"
expect 2 "bench: unknown subcommand" "unknown subcommand" -- "$BIN" bench frobnicate
expect 0 "bench --help" "run.*compare.*sweep" -- "$BIN" bench --help
for sub in run compare sweep; do
    expect 0 "bench $sub --help" "usage: ssb4d bench $sub" -- "$BIN" bench $sub --help
done
finish bench
