# harness.sh — what the command-line test scripts share (sourced, not run: CTest runs only
# tests/cli/*.sh). A temporary folder $T removed on exit, pass/fail counters and `expect`.
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# expect RC DESCRIPTION PATTERN -- command...: exit status RC and PATTERN in stdout+stderr.
expect() {
    local want=$1 what=$2 pattern=$3
    shift 4
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" -ne "$want" ] || ! cat "$T/out" "$T/err" | grep -qiE -- "$pattern"; then
        bad "$what: rc=$rc (want $want), pattern '$pattern'"
        cat "$T/out" "$T/err" | head -5
    else
        ok
    fi
}

# one_line RC DESCRIPTION PATTERN -- command...: exit RC and exactly one stderr line, matching
# PATTERN (case-insensitive as expect; a script that needs the case sets ONE_LINE_GREP=-qE).
one_line() {
    local want=$1 what=$2 pattern=$3
    shift 4
    "$@" >"$T/out" 2>"$T/err"
    local rc=$? n
    n=$(wc -l <"$T/err")
    if [ "$rc" -ne "$want" ] || [ "$n" -ne 1 ] || ! grep "${ONE_LINE_GREP:--qiE}" -- "$pattern" "$T/err"; then
        bad "$what: rc=$rc (want $want), $n stderr lines (want 1), pattern '$pattern'"
        head -5 "$T/err"
    else
        ok
    fi
}

# json_get FILE EXPR: a value of the JSON object in FILE (EXPR in Python over d), with Debian's
# python3 where it is there.
json_get() {
    local py=/usr/bin/python3
    [ -x "$py" ] || py=python3
    "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}

# finish NAME: prints the counts; the script's exit status is 0 only when nothing failed.
finish() {
    echo "$1: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
