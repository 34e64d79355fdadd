#!/usr/bin/env bash
# ssb4d refine (docs/refine.md, SPEC §13): the door, not the engine's accuracy. --help in the shared
# style; a run on a small region of the tiny simulated dataset (--iterations 2): every output
# exists with its shape (slices.npy float32 N x rows x cols, probe.npy complex64), the --json
# record's keys, refine.json the same record, the calibration file's "refine" section and its
# refined values; a second run seeded by that file's fit; the overwrite rule; bad input (a
# missing file, --slices 0/-1/1e9, --thickness-range 5:1, a region outside the scan, ...) refused
# with one line and exit 2, leaving no output and no folder behind.
# Needs bash and /usr/bin/python3 with numpy (else skipped, 77).
# usage: refine.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib/harness.sh"
PY=/usr/bin/python3
"$PY" -c 'import numpy' 2>/dev/null || { echo "SKIP: /usr/bin/python3 has no numpy"; exit 77; }

"$BIN" simulate --preset tiny -o "$T/s.npy" --quiet >/dev/null || { echo "FAIL: simulate"; exit 1; }

# --- --help ------------------------------------------------------------------------------------------
expect 0 "refine --help" "usage: ssb4d refine DATA" -- "$BIN" refine --help
for opt in --region --slices --thickness --thickness-range --iterations --batch --loss --no-aberrations \
    --no-tilt --bin --seed --threads --memory --calibration --output --force --json "exit status"; do
    grep -q -- "$opt" "$T/out" && ok || bad "--help does not mention $opt"
done
"$BIN" --help | grep -qE '^  refine ' && ok || bad "ssb4d --help does not list refine"

# --- a run on a small region ---------------------------------------------------------------------------
OUT="$T/r"
"$BIN" refine "$T/s.npy" --region 4:20,6:22 --slices 3 --iterations 2 --thickness-range 2:8 --threads 2 \
    -o "$OUT" --json >"$T/rec.json" 2>"$T/err"
rc=$?
[ "$rc" -eq 0 ] && ok || { bad "refine --json: rc=$rc"; head -5 "$T/err"; }
for f in projected_phase.tiff projected_phase.png slices.npy probe.npy calibration.json refine.json; do
    [ -s "$OUT/$f" ] && ok || bad "$f missing or empty"
done
ls -A "$OUT" | grep -q '^\.refine-staging' && bad "the staging folder was left behind" || ok
"$PY" - "$T/rec.json" "$OUT" <<'PYEOF' && ok || bad "the record, refine.json, the arrays or the calibration file"
import json, sys
import numpy as np
rec = json.load(open(sys.argv[1]))
out = sys.argv[2]
keys = ["C10_nm", "C12_nm", "phi12_deg", "phi12_probe_deg", "phi12_scan_deg", "rotation_deg", "flip",
        "tilt_mrad", "tilt_scan_mrad", "thickness_nm", "slices", "nll", "nll_expected", "nll_history",
        "confident", "warning", "region", "seconds"]
missing = [k for k in keys if k not in rec]
assert not missing, missing
assert rec["region"] == [4, 20, 6, 22], rec["region"]
assert rec["slices"] == 3, rec["slices"]
assert rec["phi12_deg"] == rec["phi12_scan_deg"]
assert len(rec["tilt_mrad"]) == 2 and len(rec["tilt_scan_mrad"]) == 2
assert isinstance(rec["nll_history"], list) and isinstance(rec["flip"], bool)
assert 2 <= rec["thickness_nm"] <= 8, rec["thickness_nm"]
assert rec["confident"] or rec["warning"], "not confident without a warning"
assert json.load(open(out + "/refine.json")).keys() == rec.keys()
sl = np.load(out + "/slices.npy")
assert sl.dtype == np.float32 and sl.shape == (3,) + tuple(rec["object_shape"]), (sl.dtype, sl.shape)
pr = np.load(out + "/probe.npy")
assert pr.dtype == np.complex64 and pr.shape == tuple(rec["probe_shape"]), (pr.dtype, pr.shape)
cal = json.load(open(out + "/calibration.json"))
r = cal["refine"]
assert r["slices"] == 3 and r["region"] == [4, 20, 6, 22] and r["loss"] == "poisson", r
assert cal["aberrations"]["C10_nm"] == rec["C10_nm"] and cal["aberrations"]["C12_nm"] == rec["C12_nm"]
assert cal["thick"]["thickness_nm"] == rec["thickness_nm"]
assert cal["thick"]["tilt_mrad"] == rec["tilt_scan_mrad"], (cal["thick"], rec["tilt_scan_mrad"])
assert rec["tilt_refined"] is True and rec["thickness_refined"] is True, rec
assert r["tilt_refined"] is True and r["thickness_refined"] is True, r
PYEOF
# One slice has no depth: the tilt and the thickness repeat the start, and the record, the
# calibration file and the text say so.
"$BIN" refine "$T/s.npy" --region 4:20,6:22 --slices 1 --iterations 2 --threads 1 -o "$T/one" --json \
    >"$T/one.json" 2>/dev/null && ok || bad "refine --slices 1: rc=$?"
"$PY" - "$T/one.json" "$T/one/calibration.json" <<'PYEOF' && ok || bad "one slice: tilt_refined/thickness_refined"
import json, sys
rec, cal = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert rec["slices"] == 1 and rec["tilt_refined"] is False and rec["thickness_refined"] is False, rec
assert cal["refine"]["tilt_refined"] is False and cal["refine"]["thickness_refined"] is False, cal["refine"]
PYEOF
expect 0 "one slice: the text says what was not refined" \
    "not refined +the tilt and the thickness \(the start's values: one slice has no depth\)" -- \
    "$BIN" refine "$T/s.npy" --region 4:20,6:22 --slices 1 --iterations 2 --threads 2 -o "$T/one" --force
# ssb4d plan --refine predicts the refinement's tracked peak (the "refine" stage over the stage
# before it) to the byte, and its grids (docs/refine.md "Data and memory").
"$BIN" plan "$T/s.npy" --refine 4:20,6:22 --slices 3 --threads 2 --json >"$T/plan.json" 2>/dev/null \
    && ok || bad "plan --refine: rc=$?"
"$PY" - "$T/rec.json" "$T/plan.json" <<'PYEOF' && ok || bad "plan --refine against the run"
import json, sys
rec, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))["refine"]
assert plan["peak_bytes"] == rec["refine_peak_tracked_bytes"], (plan, rec["refine_peak_tracked_bytes"])
assert plan["object_shape"] == rec["object_shape"] and plan["grid"] == rec["probe_shape"], (plan, rec)
assert plan["slices"] == 3 and plan["positions"] == 256 and plan["fits"], plan
PYEOF
# --threads 1: one thread's FFT buffers, as the run with --threads 1 holds
"$BIN" plan "$T/s.npy" --refine 4:20,6:22 --slices 1 --threads 1 --json >"$T/plan1.json" 2>/dev/null \
    && ok || bad "plan --refine --threads 1: rc=$?"
"$PY" -c "import json,sys; p=json.load(open(sys.argv[1]))['refine']; r=json.load(open(sys.argv[2])); \
assert p['threads'] == 1 and p['peak_bytes'] == r['refine_peak_tracked_bytes'], (p, r['refine_peak_tracked_bytes'])" \
    "$T/plan1.json" "$T/one.json" && ok || bad "plan --refine --threads 1 against the one-thread run"
expect 2 "plan --refine with a bad region" "invalid value" -- "$BIN" plan "$T/s.npy" --refine 4:2,0:8
expect 2 "plan --refine --shape without the microscope" "needs --kv" -- \
    "$BIN" plan --shape 32x32x48x48 --bf 300 --refine all
# The same run refused over its outputs, then replaced with --force.
one_line 2 "outputs exist" "already exists \(use --force" -- \
    "$BIN" refine "$T/s.npy" --region 4:20,6:22 --iterations 2 -o "$OUT" -q
expect 0 "--force replaces" "wrote" -- "$BIN" refine "$T/s.npy" --region 4:20,6:22 --iterations 2 -o "$OUT" --force -q
# Seeded by the file's fit: the second run reads it, and says so.
expect 0 "seeded by a calibration file's fit" "seeded by +the calibration file's fit" -- \
    "$BIN" refine "$T/s.npy" --calibration "$OUT/calibration.json" --region 0:16,0:16 --iterations 2 -o "$T/r2" -q
"$PY" -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); \
assert abs(a['C10_nm']-b['C10_nm']) < 1.0 and b['seeded_by'].startswith('the calibration'), (a['C10_nm'], b)" \
    "$OUT/refine.json" "$T/r2/refine.json" && ok || bad "the seeded run did not start from the file's C10"

# --- bad input: one line, exit 2, nothing written ----------------------------------------------------------
bad_run() { # DESCRIPTION PATTERN ARGS...
    local what=$1 pattern=$2
    shift 2
    one_line 2 "$what" "$pattern" -- "$BIN" refine "$@" -o "$T/bad" --iterations 2
    [ ! -e "$T/bad" ] && ok || { bad "$what: $T/bad left behind"; rm -rf "$T/bad"; }
}
bad_run "missing file" "cannot open .*nope\.npy" "$T/nope.npy"
bad_run "--slices 0" "--slices must be" "$T/s.npy" --slices 0
bad_run "--slices -1" "--slices must be" "$T/s.npy" --slices -1
bad_run "--slices 1e9" "--slices must be" "$T/s.npy" --slices 1e9
bad_run "--thickness-range 5:1" "--thickness-range 5:1 is empty" "$T/s.npy" --thickness-range 5:1
bad_run "--thickness-range x" "--thickness-range must be" "$T/s.npy" --thickness-range 1:abc
bad_run "--thickness outside the range" "outside the thickness range" "$T/s.npy" --thickness 50
bad_run "region outside" "outside the 32x32 scan" "$T/s.npy" --region 0:40,0:8
bad_run "region empty" "--region must be" "$T/s.npy" --region 8:8,0:8
bad_run "--iterations 0" "--iterations must be" "$T/s.npy" --iterations 0
bad_run "--loss" "--loss must be poisson or amplitude" "$T/s.npy" --loss l2
bad_run "--bin 3" "--bin must be" "$T/s.npy" --bin 3
bad_run "--memory" "memory" "$T/s.npy" --memory 12Q
bad_run "two DATA" "exactly one DATA" "$T/s.npy" "$T/s.npy"
bad_run "unknown option" "unknown option" "$T/s.npy" --frobnicate
bad_run "no calibration file" "cannot|no such" "$T/s.npy" --calibration "$T/nope.json"

finish refine
