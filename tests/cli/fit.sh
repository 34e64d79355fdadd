#!/usr/bin/env bash
# `ssb4d fit`, `ssb4d fit-regions` and `ssb4d demo --help` end to end on tiny simulated data:
# the fit recovers the simulator's truth (mid-plane C10 within 0.3 nm on this 32x32 scan, C12
# within 0.2 nm, phi12 within 3 deg), writes its five outputs, --json carries the documented
# keys, `reconstruct --calibration DIR/calibration.json` reproduces phase.tiff byte for byte, the
# same seed gives the same trace with 1 and 2 threads, a region fit and fit-regions keep the
# full-field calibration, and bad flags / existing outputs are refused before any work with
# exit status 2 and no output.
# usage: fit.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"

# num FILE KEY: the number after "KEY": in a one-line JSON object.
num() { sed -n "s/.*\"$2\":\(-\{0,1\}[0-9.eE+-]*\).*/\1/p" "$1" | head -1; }
# within A B TOL: |A - B| <= TOL
within() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }'; }

"$BIN" simulate --preset tiny --c10 -10 --c12 2 --phi12 20 -o "$T/t.npy" --quiet || { echo "simulate failed"; exit 1; }

# --- the fit, its outputs and its JSON ----------------------------------------------------------
"$BIN" fit "$T/t.npy" -o "$T/f" --json --threads 2 >"$T/f.json" 2>"$T/f.err"
rc=$?
[ $rc -eq 0 ] && ok || { bad "fit exit $rc"; cat "$T/f.err"; }
for f in phase.tiff phase.png object.npy calibration.json trials.json; do
    [ -s "$T/f/$f" ] && ok || bad "fit did not write $f"
done
for k in C10_nm C12_nm phi12_deg loss rotation_deg branch_flipped n_bf evaluations seconds; do
    grep -q "\"$k\":" "$T/f.json" && ok || bad "--json lacks $k"
done
c10=$(num "$T/f.json" C10_nm); c12=$(num "$T/f.json" C12_nm); phi=$(num "$T/f.json" phi12_deg)
within "$c10" -9.80475 0.3 && ok || bad "C10 $c10, truth -9.805 at the mid-plane"
within "$c12" 2 0.2 && ok || bad "C12 $c12, truth 2"
within "$phi" 20 3 && ok || bad "phi12 $phi, truth 20"
grep -q '"branch_flipped":false' "$T/f.json" && ok || bad "branch flipped on the right branch"
grep -qE '"stage":[[:space:]]*"global"' "$T/f/trials.json" &&
    grep -qE '"stage":[[:space:]]*"nelder-mead-full"' "$T/f/trials.json" &&
    ok || bad "trials.json lacks the global / full Nelder-Mead stages"
grep -q '"best_trials"' "$T/f/calibration.json" && grep -q '"seed"' "$T/f/calibration.json" && ok ||
    bad "calibration.json lacks the search settings"
grep -qE '"data_identity":[[:space:]]*"sha256:' "$T/f/calibration.json" && ok || bad "calibration.json lacks the data identity"

# --- the calibration file reproduces the image bit for bit --------------------------------------
"$BIN" reconstruct "$T/t.npy" --calibration "$T/f/calibration.json" -o "$T/re.tiff" --quiet >/dev/null 2>&1 &&
    cmp -s "$T/re.tiff" "$T/f/phase.tiff" && ok || bad "reconstruct --calibration does not reproduce phase.tiff"

# --- determinism: 1 thread, same trace -----------------------------------------------------------
"$BIN" fit "$T/t.npy" -o "$T/f1" --json --threads 1 >"$T/f1.json" 2>/dev/null
h2=$(sed -n 's/.*"trace_sha256":"\([0-9a-f]*\)".*/\1/p' "$T/f.json")
h1=$(sed -n 's/.*"trace_sha256":"\([0-9a-f]*\)".*/\1/p' "$T/f1.json")
[ -n "$h1" ] && [ "$h1" = "$h2" ] && ok || bad "trace differs between 1 and 2 threads ($h1 vs $h2)"
cmp -s "$T/f/phase.tiff" "$T/f1/phase.tiff" && ok || bad "phase.tiff differs between 1 and 2 threads"
"$BIN" fit "$T/t.npy" -o "$T/f7" --json --seed 7 --trials 50 >"$T/f7.json" 2>/dev/null
h7=$(sed -n 's/.*"trace_sha256":"\([0-9a-f]*\)".*/\1/p' "$T/f7.json")
[ -n "$h7" ] && [ "$h7" != "$h2" ] && ok || bad "another seed gave the same trace"

# --- refusals before any work ---------------------------------------------------------------------
expect 2 "existing outputs" "already exists" -- "$BIN" fit "$T/t.npy" -o "$T/f"
expect 2 "range syntax" "--range" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --range C10=5
expect 2 "range order" "LO < HI" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --range C10=5:-5
expect 2 "range absurd" "absurd" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --range C12=-5:5
expect 2 "range name" "--range" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --range C99=0:1
expect 2 "lock name" "--lock" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --lock C30
expect 2 "start outside" "outside its range" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --start 0,12,0
expect 2 "trials zero" "--trials" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --trials 0
expect 2 "seed negative" "--seed" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --seed -3
expect 2 "fit radius" "--fit-radius" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --fit-radius 1.5
expect 2 "region syntax" "--region" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --region 0:10
expect 2 "region small" "at least 32x32" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --region 0:20,0:32
expect 2 "region outside" "outside|beyond|exceeds|within" -- "$BIN" fit "$T/t.npy" -o "$T/x1" --region 0:40,0:40
expect 2 "two DATA" "at most one" -- "$BIN" fit "$T/t.npy" "$T/t.npy"
expect 2 "missing DATA" "cannot|no such" -- "$BIN" fit "$T/nothing.npy" -o "$T/x2"
expect 2 "demo takes no DATA" "no DATA" -- "$BIN" demo "$T/t.npy"
expect 2 "fit-regions needs a grid" "--grid" -- "$BIN" fit-regions "$T/t.npy" -o "$T/x3"
expect 2 "fit-regions grid syntax" "--grid" -- "$BIN" fit-regions "$T/t.npy" --grid 4
expect 2 "fit-regions small cells" "at least 32x32" -- "$BIN" fit-regions "$T/t.npy" -o "$T/x4" --grid 2x2
[ ! -e "$T/x1" ] && [ ! -e "$T/x2" ] && [ ! -e "$T/x4" ] && ok || bad "a refused run left outputs or an empty folder"
for c in fit demo fit-regions; do
    expect 0 "$c --help" "usage: ssb4d $c" -- "$BIN" "$c" --help
done

# --- region fit and fit-regions on the whole (32x32) scan -----------------------------------------
"$BIN" fit "$T/t.npy" -o "$T/r" --region 0:32,0:32 --json >"$T/r.json" 2>/dev/null && ok || bad "region fit failed"
grep -q '"region":\[0,32,0,32\]' "$T/r.json" && ok || bad "region missing from the JSON"
rc10=$(num "$T/r.json" C10_nm)
[ "$rc10" = "$c10" ] && ok || bad "the whole-scan region fit differs from the full fit ($rc10 vs $c10)"
"$BIN" fit-regions "$T/t.npy" -o "$T/g" --grid 1x1 --quiet >"$T/g.out" 2>&1 && ok || { bad "fit-regions failed"; cat "$T/g.out"; }
for f in regions.json regions.csv defocus.png; do
    [ -s "$T/g/$f" ] && ok || bad "fit-regions did not write $f"
done
[ "$(wc -l <"$T/g/regions.csv")" -eq 2 ] && grep -q "^0,32,0,32," "$T/g/regions.csv" && ok || bad "regions.csv rows"

finish fit.sh
