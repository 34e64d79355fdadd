#!/usr/bin/env bash
# --backend auto|cpu|cuda on every command that opens a session handle (fit, demo, fit-regions,
# reconstruct, view, session, bench run, bench view):
#   - every one lists it in --help, and refuses a bad value with one line and exit 2;
#   - `--backend cpu` runs and says "cpu" (reconstruct's --json and text, fit's --json);
#   - `--backend auto` runs and names the backend it took (cpu, or cuda where a GPU is present);
#   - `--backend cuda` either runs and says "cuda" (a CUDA build on a machine with a GPU) or exits 2
#     with one line that names CUDA, before any work — nothing else (no crash, no other status);
#   - the benchmark record and `ssb4d session --json` name the backend.
# usage: backend.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"

ONE_LINE_GREP=-qE # one_line (lib/harness.sh) with the case: the messages are checked as written
# backend_of FILE: the "backend" string of a JSON object printed on one line ("" when absent).
backend_of() { grep -o '"backend":"[a-z]*"' "$1" | head -1 | cut -d: -f2 | tr -d '"'; }

"$BIN" simulate --preset tiny --c10 -10 -o "$T/t.npy" -q || { echo "simulate failed"; exit 1; }
"$BIN" import "$T/t.npy" -o "$T/t.qem" -q >/dev/null || { echo "import failed"; exit 1; }

# --- help and bad values -------------------------------------------------------------------------
for c in fit demo fit-regions reconstruct view session "bench run" "bench view"; do
    # shellcheck disable=SC2086 # "bench run" is two words
    "$BIN" $c --help >"$T/help" 2>&1
    grep -qE -- "^ +--backend B +where the heavy passes run: auto \(CUDA when a GPU is present" "$T/help" && ok ||
        bad "$c --help does not list --backend"
    # shellcheck disable=SC2086
    one_line 2 "$c --backend bogus" "invalid value 'bogus' for --backend \(auto, cpu or cuda\)" -- \
        "$BIN" $c --backend bogus
done
one_line 2 "reconstruct --backend without a value" "needs a value" -- "$BIN" reconstruct "$T/t.npy" --backend
# The commands that open no session take no --backend.
one_line 2 "calibrate --backend" "unknown option.*--backend" -- "$BIN" calibrate "$T/t.npy" --backend cpu

# --- cpu -------------------------------------------------------------------------------------------
expect 0 "reconstruct --backend cpu --json" '"backend":"cpu"' -- \
    "$BIN" reconstruct "$T/t.npy" --backend cpu --json -o "$T/cpu.tiff" -q
expect 0 "reconstruct --backend cpu (text)" '^backend +cpu$' -- \
    "$BIN" reconstruct "$T/t.qem" --backend cpu -o "$T/cpu2.tiff" -q
expect 0 "fit --backend cpu --json" '"backend":"cpu"' -- \
    "$BIN" fit "$T/t.npy" --backend cpu --json -o "$T/fit-cpu" --trials 8 --no-branch-check -q

# --- auto: the CPU, or CUDA where a GPU is present -------------------------------------------------
"$BIN" reconstruct "$T/t.npy" --backend auto --json -o "$T/auto.tiff" -q >"$T/auto.json" 2>"$T/err"
rc=$?
auto=$(backend_of "$T/auto.json")
[ $rc -eq 0 ] && { [ "$auto" = cpu ] || [ "$auto" = cuda ]; } && ok ||
    bad "reconstruct --backend auto: rc=$rc, backend '$auto' ($(head -c 300 "$T/err"))"
"$BIN" reconstruct "$T/t.npy" --json -o "$T/default.tiff" -q >"$T/default.json" 2>/dev/null
[ "$(backend_of "$T/default.json")" = "$auto" ] && ok || bad "no --backend is not --backend auto"

# --- cuda: runs on CUDA, or one line naming CUDA and exit 2 -----------------------------------------
"$BIN" reconstruct "$T/t.npy" --backend cuda --json -o "$T/cuda.tiff" -q >"$T/cuda.json" 2>"$T/err"
rc=$?
if [ $rc -eq 0 ]; then
    [ "$(backend_of "$T/cuda.json")" = cuda ] && ok || bad "reconstruct --backend cuda ran but says '$(backend_of "$T/cuda.json")'"
    have_cuda=1
elif [ $rc -eq 2 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "^ssb4d reconstruct: .*CUDA" "$T/err"; then
    ok
    [ ! -e "$T/cuda.tiff" ] && ok || bad "a refused --backend cuda wrote its image"
    have_cuda=0
else
    bad "reconstruct --backend cuda: rc=$rc (want 0, or 2 with one line naming CUDA): $(head -3 "$T/err")"
    have_cuda=x
fi
if [ "$have_cuda" = 0 ]; then
    # Refused before any work: the built-in dataset is not simulated, no server is started, no
    # workload is made; the same one line everywhere.
    one_line 2 "demo --backend cuda" "^ssb4d demo: .*CUDA" -- "$BIN" demo --backend cuda -o "$T/demo"
    one_line 2 "fit --backend cuda" "^ssb4d fit: .*CUDA" -- "$BIN" fit "$T/t.npy" --backend cuda -o "$T/fc"
    one_line 2 "fit-regions --backend cuda" "^ssb4d fit-regions: .*CUDA" -- \
        "$BIN" fit-regions "$T/t.npy" --grid 1x1 --backend cuda -o "$T/rc"
    one_line 2 "view --backend cuda" "^ssb4d view: .*CUDA" -- "$BIN" view "$T/t.npy" --backend cuda --port 0
    one_line 2 "session --backend cuda" "^ssb4d session: .*CUDA" -- "$BIN" session "$T/t.qem" --backend cuda
    one_line 2 "bench run --backend cuda" "^ssb4d bench run: .*CUDA" -- \
        "$BIN" bench run --data "$T/t.qem" --repeat 1 --backend cuda -o "$T/bc.json"
    [ ! -e "$T/bc.json" ] && ok || bad "a refused bench run wrote its record"
    one_line 2 "bench view --backend cuda" "^ssb4d bench view: .*CUDA" -- \
        "$BIN" bench view --data "$T/t.qem" --backend cuda
fi

# --- the session replay and the benchmark record name the backend -----------------------------------
"$BIN" session "$T/t.qem" --backend auto --json -q >"$T/s.json" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && [ "$(backend_of "$T/s.json")" = "$auto" ] && ok ||
    bad "session --backend auto --json: rc=$rc, backend '$(backend_of "$T/s.json")' ($(head -c 300 "$T/err"))"
"$BIN" bench run --data "$T/t.qem" --repeat 1 --backend auto -o "$T/rec.json" -q >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && grep -qE "\"backend\":[[:space:]]*\"$auto\"" "$T/rec.json" && grep -q "^backend $auto$" "$T/out" && ok ||
    bad "bench run --backend auto: rc=$rc, no backend $auto in the record or the output ($(head -c 300 "$T/err"))"

finish backend.sh
