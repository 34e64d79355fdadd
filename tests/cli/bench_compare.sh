#!/usr/bin/env bash
# `ssb4d bench compare OLD NEW` (SPEC §10) on hand-written records: exit 0 when nothing
# regressed, 1 on a slower stage, a grown memory metric, a changed hash or a missing stage, 2 on
# a missing, malformed or foreign file and on bad usage (one line on stderr).
# usage: bench_compare.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"

if ! "$BIN" bench compare --help >/dev/null 2>&1; then
    echo "skip: ssb4d bench not wired yet"
    exit 0
fi

# record FILE [LOAD_S] [FIT_S] [LOAD_PEAK_BYTES] [PHASE_HASH] [SCHEMA]: a two-stage record.
record() {
    local f=$1 load_s=${2:-1.0} fit_s=${3:-7.0} peak=${4:-3221225472}
    local phase=${5:-\"2222222222222222222222222222222222222222222222222222222222222222\"}
    local schema=${6:-ssb4d-bench/1}
    cat >"$f" <<JSON
{
  "schema": "$schema",
  "date": "2026-12-03T14:00:00Z",
  "git": {"revision": "unknown", "dirty": null},
  "machine": {"cpu": "test cpu", "cores": 2, "ram_bytes": 8589934592, "gpu": null,
              "driver": null, "os": "Linux test x86_64"},
  "workload": {"name": "small", "identity": "sha256:00", "shape": [128, 128, 64, 64],
               "n_bf": 1869, "n_stored": 1869, "encoded_bytes": 30000000, "g_bytes": 124780544},
  "settings": {"threads": 2, "memory_budget_bytes": 0, "repeat": 3, "upsample": 2,
               "preview_precision": "float", "mode": "resident", "loss_tile": "default"},
  "stages": [
    {"name": "load", "seconds": {"median": $load_s, "min": $load_s, "max": $load_s, "runs": [$load_s]},
     "peak_bytes": $peak, "after_bytes": 1073741824, "cache_bytes": 0,
     "rss_peak_bytes": 3500000000, "device_peak_bytes": 0},
    {"name": "fit", "seconds": {"median": $fit_s, "min": $fit_s, "max": $fit_s, "runs": [$fit_s]},
     "peak_bytes": 1073741824, "after_bytes": 1073741824, "cache_bytes": 0,
     "rss_peak_bytes": 1500000000, "device_peak_bytes": 0}
  ],
  "session_peak_bytes": 3758096384, "session_rss_peak_bytes": 4294967296,
  "fit": {"C10_nm": -10.0, "C12_nm": 2.0, "phi12_deg": 30.0, "loss": null},
  "hashes": {"G": "1111111111111111111111111111111111111111111111111111111111111111",
             "phase": $phase, "trace": null}
}
JSON
}

# The command under test (a function, so a BIN path with spaces survives).
C() { "$BIN" bench compare "$@"; }
record "$T/old.json"

# Verdicts.
record "$T/same.json"
expect 0 "identical records" "bench compare: OK \(2 stages" -- C "$T/old.json" "$T/same.json"
expect 0 "table names the stages" "^fit .*ok" -- C "$T/old.json" "$T/same.json"
record "$T/slow.json" 1.2
expect 1 "load +20 %" "REGRESSED: load time \+20\.0%" -- C "$T/old.json" "$T/slow.json"
expect 0 "load +20 % with --time-ratio 0.3" "OK" -- C "$T/old.json" "$T/slow.json" --time-ratio 0.3
record "$T/bit-slow.json" 1.05
expect 0 "load +5 %" "OK" -- C "$T/old.json" "$T/bit-slow.json"
record "$T/fast-old.json" 0.001 && record "$T/fast-new.json" 0.002
expect 0 "1 ms stage doubled: not judged" "not judged" -- C "$T/fast-old.json" "$T/fast-new.json"
expect 1 "1 ms stage doubled, --min-seconds 0" "REGRESSED: load time" -- \
    C "$T/fast-old.json" "$T/fast-new.json" --min-seconds 0
record "$T/fat.json" 1.0 7.0 3579139413 # 3 GiB * 1.11: +11 %, +0.33 GiB
expect 1 "peak +11 % and +0.33 GiB" "REGRESSED: load peak_bytes" -- C "$T/old.json" "$T/fat.json"
expect 0 "peak +11 % with --mem-abs 0.5" "OK" -- C "$T/old.json" "$T/fat.json" --mem-abs 0.5
expect 0 "peak +11 % with --mem-ratio 0.2" "OK" -- C "$T/old.json" "$T/fat.json" --mem-ratio 0.2
record "$T/small-peak-old.json" 1.0 7.0 214748365 && record "$T/small-peak-new.json" 1.0 7.0 322122547
expect 0 "peak +50 % but +0.1 GiB" "OK" -- C "$T/small-peak-old.json" "$T/small-peak-new.json"
record "$T/phase.json" 1.0 7.0 3221225472 \"3333333333333333333333333333333333333333333333333333333333333333\"
expect 1 "changed phase hash" "REGRESSED: phase hash changed" -- C "$T/old.json" "$T/phase.json"
expect 0 "changed phase hash, allowed" "changed \(allowed\)" -- \
    C "$T/old.json" "$T/phase.json" --allow-hash-change
record "$T/nophase.json" 1.0 7.0 3221225472 null
expect 0 "null phase hash not compared" "not compared" -- C "$T/old.json" "$T/nophase.json"
# A stage of OLD missing from NEW fails; a stage only NEW has is reported.
sed '/"name": "fit"/,/}$/d' "$T/old.json" | sed 's/"rss_peak_bytes": 3500000000, "device_peak_bytes": 0},/"rss_peak_bytes": 3500000000, "device_peak_bytes": 0}/' >"$T/nofit.json"
expect 1 "stage missing in new" "REGRESSED: stage fit missing" -- C "$T/old.json" "$T/nofit.json"
expect 0 "stage only in new" "new stage" -- C "$T/nofit.json" "$T/old.json"
sed 's/"name": "small"/"name": "medium"/' "$T/old.json" >"$T/medium.json"
expect 0 "other workload: warned, compared" "warning: workloads differ" -- C "$T/old.json" "$T/medium.json"

# Bad files: exit 2, one line naming the file.
record "$T/v2.json" 1.0 7.0 3221225472 null ssb4d-bench/2
printf '{"schema": "ssb4d-bench/1", "stages": [' >"$T/broken.json"
printf '{"schema": "ssb4d-bench/1"}' >"$T/nostages.json"
expect 2 "missing file" "ssb4d bench compare: cannot open .*nope.json" -- C "$T/old.json" "$T/nope.json"
expect 2 "malformed JSON" "broken.json is not valid JSON" -- C "$T/broken.json" "$T/old.json"
expect 2 "other schema" "v2.json has schema \"ssb4d-bench/2\"" -- C "$T/old.json" "$T/v2.json"
expect 2 "no stages" "nostages.json has no \"stages\"" -- C "$T/old.json" "$T/nostages.json"

# Usage.
expect 0 "help" "exit status: 0" -- C --help
expect 2 "no files" "two files expected" -- C
expect 2 "one file" "two files expected" -- C "$T/old.json"
expect 2 "three files" "two files expected" -- C "$T/old.json" "$T/old.json" "$T/old.json"
expect 2 "bad --time-ratio" "--time-ratio wants a number" -- C "$T/old.json" "$T/old.json" --time-ratio abc
expect 2 "negative --time-ratio" "--time-ratio wants a number" -- C "$T/old.json" "$T/old.json" --time-ratio -1
expect 2 "bad --mem-abs" "--mem-abs wants a number" -- C "$T/old.json" "$T/old.json" --mem-abs 1GiB
expect 2 "missing --min-seconds value" "missing value" -- C "$T/old.json" "$T/old.json" --min-seconds
expect 2 "unknown flag" "unknown option --bogus" -- C --bogus "$T/old.json" "$T/old.json"
# Usage errors are one line on stderr.
C "$T/old.json" --time-ratio abc >"$T/o" 2>"$T/e"
[ "$(wc -l <"$T/e")" -eq 1 ] && ok || bad "usage error is not one stderr line: $(cat "$T/e")"

finish bench_compare
