#!/bin/sh
# One ssb4d_fit_study process per case, PROCS at a time (the cases are independent; one process
# each balances the load where a few cases cost minutes). The records go to OUT_FILE, one line
# per finished case, whatever the order; a case killed by the time limit leaves no line.
#   bench/fit-study-xargs.sh BUILD_DIR OUT_FILE PROCS SECONDS "CASES" [study options...]
set -u
build=$1 out=$2 procs=$3 secs=$4 cases=$5
shift 5
tmp=$(mktemp -d)
echo "$cases" | tr ' ,' '\n\n' | grep . |
    timeout "$secs" xargs -P "$procs" -I{} sh -c "\"$build/bench/ssb4d_fit_study\" --threads 1 --cases {} $* >\"$tmp/c{}.jsonl\" 2>\"$tmp/c{}.err\""
cat "$tmp"/c*.jsonl | grep '"i"' >"$out"
cat "$tmp"/c*.err >&2
rm -rf "$tmp"
