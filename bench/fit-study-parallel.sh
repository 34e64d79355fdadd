#!/bin/sh
# Run ssb4d_fit_study over many processes (one thread each; the cases are independent, so the
# records are the same as one process's, in another order). Used on the lent 16-core machine.
#   bench/fit-study-parallel.sh BUILD_DIR OUT_DIR PROCS [study options...]
# writes OUT_DIR/part-K.jsonl and OUT_DIR/part-K.err for K in 0..PROCS-1; N from --n (default 120).
set -eu
build=$1 out=$2 procs=$3
shift 3
n=120
prev=
for a in "$@"; do
    [ "$prev" = "--n" ] && n=$a
    prev=$a
done
mkdir -p "$out"
k=0
while [ "$k" -lt "$procs" ]; do
    cases=$(awk -v n="$n" -v p="$procs" -v k="$k" 'BEGIN { s = ""; for (i = k; i < n; i += p) s = s (s == "" ? "" : ",") i; print s }')
    "$build/bench/ssb4d_fit_study" --threads 1 --cases "$cases" "$@" >"$out/part-$k.jsonl" 2>"$out/part-$k.err" &
    k=$((k + 1))
done
wait
