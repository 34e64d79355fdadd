#!/usr/bin/env bash
# One command line (issue 12, item 5), checked on every subcommand:
#   - `--help` exits 0 on stdout and lists -q/--quiet, --force where the command writes files,
#     and the exit statuses in the same words; `ssb4d --help` lists every command;
#   - an unknown flag exits 2 with exactly one line on stderr;
#   - -q and --quiet are accepted, and a quick real run with -q writes nothing on stderr;
#   - `ssb4d` alone is a usage error (exit 2) that shows the usage and points at `ssb4d demo`;
#   - one overwrite rule: an existing output is refused (exit 2, one line naming --force, the file
#     untouched) before any work — here before the microscope values, which are missing — and
#     --force replaces it;
#   - the README's first command runs the quick tests and ends by running the main job, names no
#     sanitizer option (CI gives SSB4D_SANITIZE through the environment), and .ci/run runs it and
#     the full ctest as written.
# usage: consistency.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: one check runs in another folder
SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/lib/harness.sh"

# Every subcommand ("bench" has its own: run, compare, sweep); W: those that write files.
CMDS=(import info verify simulate calibrate reconstruct fit demo fit-regions refine plan session view "bench run" "bench compare"
    "bench sweep" "bench view")
W=" import simulate calibrate reconstruct fit demo fit-regions refine session bench run bench sweep bench view "
COMMON="exit status: 0 success, 1 internal error or out of memory, 2 usage error or bad input"

# --- help, unknown flags, -q -----------------------------------------------------------------------
for c in "${CMDS[@]}"; do
    # shellcheck disable=SC2086 # "bench run" is two words
    "$BIN" $c --help >"$T/help" 2>"$T/help.err"
    rc=$?
    [ $rc -eq 0 ] && [ -s "$T/help" ] && [ ! -s "$T/help.err" ] && ok || bad "$c --help: rc=$rc or not on stdout"
    case $c in
    "bench compare") grep -qi "^exit status: 0 nothing regressed, 1 a regression" "$T/help" && ok ||
        bad "$c --help lacks its exit statuses" ;;
    *) grep -q "^$COMMON" "$T/help" && ok || bad "$c --help lacks the common exit-status line" ;;
    esac
    grep -qE -- "-q, --quiet" "$T/help" && ok || bad "$c --help does not list -q, --quiet"
    case $W in
    *" $c "*) grep -qE -- "^ +--force " "$T/help" && ok || bad "$c --help does not list --force" ;;
    esac
    grep -qE "SPEC|seed document" "$T/help" && bad "$c --help speaks of the SPEC or the seed document" || ok
    one_line 2 "$c: unknown flag" "unknown (option|subcommand).*--frobnicate" -- "$BIN" $c --frobnicate
    # -q before --help: an unknown -q would be refused before --help is reached.
    for q in -q --quiet; do
        expect 0 "$c accepts $q" "usage" -- "$BIN" $c $q --help
    done
done
expect 0 "bench --help" "exit status: 0 success" -- "$BIN" bench --help
one_line 2 "bench: unknown flag" "unknown subcommand" -- "$BIN" bench --frobnicate
"$BIN" --help >"$T/top" 2>&1 && ok || bad "ssb4d --help does not exit 0"
for c in import info verify simulate calibrate reconstruct fit demo fit-regions refine plan session bench; do
    grep -qE "^  $c +[a-z]" "$T/top" && ok || bad "ssb4d --help does not list $c"
done
grep -q "^$COMMON" "$T/top" && ok || bad "ssb4d --help lacks the exit statuses"

# --- ssb4d alone: a usage error that shows the way in ---------------------------------------------
"$BIN" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 2 ] && ok || bad "ssb4d alone exits $rc, not 2"
grep -q "^usage: ssb4d <command>" "$T/err" && grep -qE "^  ssb4d demo +[a-z]" "$T/err" &&
    grep -qE "^  ssb4d fit DATA -o DIR +the main job" "$T/err" && ok || bad "ssb4d alone: no usage or no pointer to demo / fit"
[ ! -s "$T/out" ] && ok || bad "ssb4d alone wrote on stdout"

# --- quick real runs with -q: nothing on stderr ----------------------------------------------------
quiet_run() { # DESCRIPTION -- command...: exit 0 and an empty stderr
    local what=$1
    shift 2
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    [ $rc -eq 0 ] && [ ! -s "$T/err" ] && ok || { bad "$what -q: rc=$rc, stderr: $(head -c 300 "$T/err")"; }
}
quiet_run "simulate" -- "$BIN" simulate --preset tiny --c10 -10 -o "$T/t.npy" -q
quiet_run "import" -- "$BIN" import "$T/t.npy" -o "$T/t.qem" --quiet
quiet_run "info" -- "$BIN" info "$T/t.qem" -q
quiet_run "verify" -- "$BIN" verify "$T/t.npy" "$T/t.qem" -q
quiet_run "calibrate" -- "$BIN" calibrate "$T/t.npy" -o "$T/cal.json" -q
quiet_run "reconstruct (truth from the sidecar)" -- "$BIN" reconstruct "$T/t.npy" -o "$T/p.tiff" -q
quiet_run "plan" -- "$BIN" plan "$T/t.qem" -q --memory 1G
quiet_run "fit" -- "$BIN" fit "$T/t.npy" -o "$T/f" --trials 8 --no-branch-check -q
quiet_run "fit-regions" -- "$BIN" fit-regions "$T/t.npy" --grid 1x1 -o "$T/g" --trials 8 --no-branch-check -q
[ "$(grep -c '^wrote ' "$T/out")" -eq 1 ] && ok || bad "fit-regions: the 'wrote' line is not a line of its own: $(tail -2 "$T/out")"
quiet_run "bench run" -- "$BIN" bench run --data "$T/t.qem" --repeat 1 -o "$T/rec.json" -q
quiet_run "bench compare" -- "$BIN" bench compare "$T/rec.json" "$T/rec.json" -q
# Without -q these say something on stderr (so the checks above can fail).
"$BIN" reconstruct "$T/t.npy" -o "$T/p2.tiff" 2>"$T/err" >/dev/null
grep -q "using the simulator's true aberrations" "$T/err" && ok || bad "reconstruct without -q has no note to drop"
"$BIN" plan "$T/t.qem" --memory 1G 2>"$T/err" >/dev/null
grep -q "calibrating" "$T/err" && ok || bad "plan without -q has no note to drop"

# --- one overwrite rule ----------------------------------------------------------------------------
# n.npy: data without a sidecar, so the microscope is unknown: an existing output must be refused
# before that is found out (and before any long work).
cp "$T/t.npy" "$T/n.npy"
echo keep >"$T/old.txt"
refused() { # DESCRIPTION FILE -- command...: exit 2, one line naming FILE and --force, FILE untouched
    local what=$1 file=$2
    shift 3
    cp "$T/old.txt" "$file"
    one_line 2 "$what: existing output" "$(basename "$file") already exists \(use --force to replace it" -- "$@"
    cmp -s "$T/old.txt" "$file" && ok || bad "$what: the existing output was changed"
}
refused "reconstruct -o" "$T/r.tiff" -- "$BIN" reconstruct "$T/n.npy" -o "$T/r.tiff"
refused "reconstruct default -o" "$T/phase.tiff" -- bash -c "cd '$T' && '$BIN' reconstruct n.npy"
refused "reconstruct --object" "$T/o.npy" -- "$BIN" reconstruct "$T/n.npy" -o "$T/r2.tiff" --object "$T/o.npy"
refused "calibrate -o" "$T/c.json" -- "$BIN" calibrate "$T/n.npy" -o "$T/c.json"
refused "import" "$T/i.qem" -- "$BIN" import "$T/n.npy" -o "$T/i.qem"
refused "simulate" "$T/s.npy" -- "$BIN" simulate --preset tiny -o "$T/s.npy"
mkdir -p "$T/fo" "$T/so" "$T/go"
refused "fit" "$T/fo/phase.tiff" -- "$BIN" fit "$T/n.npy" -o "$T/fo"
refused "fit-regions" "$T/go/regions.json" -- "$BIN" fit-regions "$T/n.npy" --grid 1x1 -o "$T/go"
mkdir -p "$T/ro"
refused "refine" "$T/ro/refine.json" -- "$BIN" refine "$T/n.npy" -o "$T/ro"
refused "session -o DIR" "$T/so/calibration.json" -- "$BIN" session "$T/n.npy" -o "$T/so"
refused "bench run -o" "$T/b.json" -- "$BIN" bench run --data "$T/n.npy" -o "$T/b.json"
refused "bench sweep -o" "$T/w.json" -- "$BIN" bench sweep --data "$T/n.npy" --loss-tile all -o "$T/w.json"
[ ! -e "$T/r2.tiff" ] && ok || bad "a refused reconstruct wrote its phase image"
# --force replaces
expect 0 "reconstruct --force" "phase image" -- "$BIN" reconstruct "$T/t.npy" -o "$T/r.tiff" --force -q
cmp -s "$T/old.txt" "$T/r.tiff" && bad "reconstruct --force did not replace the file" || ok
cmp -s "$T/p.tiff" "$T/r.tiff" && ok || bad "reconstruct --force wrote another image than a fresh run"
expect 0 "calibrate --force" "wrote" -- "$BIN" calibrate "$T/t.npy" -o "$T/c.json" --force -q
cmp -s "$T/cal.json" "$T/c.json" && ok || bad "calibrate --force wrote another file than a fresh run"
expect 0 "bench run --force" "record" -- "$BIN" bench run --data "$T/t.qem" --repeat 1 -o "$T/b.json" --force -q

# --- the README's first command ends with the main job; .ci/run runs the README's two commands ------
if [ -f "$SRC/README.md" ] && [ -f "$SRC/.ci/run" ]; then
    first=$(awk '/^```sh/ { getline; print; exit }' "$SRC/README.md")
    second=$(awk '/^```sh/ { getline; getline; print; exit }' "$SRC/README.md")
    case $first in
    *" && build/ssb4d fit --force") ok ;;
    *) bad "the README's first command does not end with the main job: $first" ;;
    esac
    grep -qxF -- "$first" "$SRC/.ci/run" && grep -qxF -- "$second" "$SRC/.ci/run" && ok ||
        bad ".ci/run does not run the README's two commands as written"
    # issue 39: a new user's first command names no sanitizer option and runs the quick tests; the
    # second is the whole suite; CI's sanitizers reach CMake through the environment instead
    case $first in
    *SSB4D_SANITIZE*) bad "the README's first command names SSB4D_SANITIZE: $first" ;;
    *" && ctest --test-dir build -L quick "*) ok ;;
    *) bad "the README's first command does not run ctest -L quick: $first" ;;
    esac
    [ "$second" = "ctest --test-dir build --output-on-failure -j2" ] && ok || bad "the README's second command is not the full ctest: $second"
    grep -qx "export SSB4D_SANITIZE=ON" "$SRC/.ci/run" && grep -q 'ENV{SSB4D_SANITIZE}' "$SRC/CMakeLists.txt" && ok ||
        bad "CI's SSB4D_SANITIZE=ON does not reach CMake through the environment"
    grep -qx "/ssb4d-fit/" "$SRC/.gitignore" && ok || bad ".gitignore does not ignore ssb4d-fit/"
fi

finish consistency.sh
