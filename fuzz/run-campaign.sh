#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS each and prints executions and findings.
#   fuzz/run-campaign.sh SECONDS [--parallel] [--build BUILD_DIR] [--jobs N]
# Targets come from BUILD_DIR/fuzz/targets (default: build). Each target's corpus grows in
# BUILD_DIR/fuzz/campaign/<target>/corpus (seeded from BUILD_DIR/fuzz/seeds/<target>), crash
# reproducers land in .../artifacts, the log in .../log. Exit status 1 if anything was found.
set -uo pipefail
usage() { echo "usage: $0 SECONDS [--parallel] [--build BUILD_DIR] [--jobs N]" >&2; exit 2; }
[ $# -ge 1 ] || usage
secs=$1; shift
[[ $secs =~ ^[0-9]+$ ]] || usage
here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build parallel=0 jobs=1
while [ $# -gt 0 ]; do
  case $1 in
    --parallel) parallel=1 ;;
    --build) build=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    *) usage ;;
  esac
  shift
done
build=$(cd "$build" && pwd) || exit 2   # absolute: each target runs in its own directory
bin=$build/fuzz/targets seeds=$build/fuzz/seeds camp=$build/fuzz/campaign
declare -A maxlen=([qem]=262144 [stream]=1100 [npy]=4096 [mib]=4096 [dm]=65536 [mrc]=8192 [empad]=16384)
targets=(qem stream npy mib dm mrc empad)
for t in "${targets[@]}"; do
  [ -x "$bin/fuzz_$t" ] || { echo "run-campaign: $bin/fuzz_$t missing (cmake --build $build)" >&2; exit 2; }
done

run_one() {
  local t=$1 d=$camp/$1
  mkdir -p "$d/corpus" "$d/artifacts"
  rm -f "$d"/fuzz-*.log
  # -jobs/-workers run several fuzzing processes on the same corpus; their logs go to fuzz-N.log.
  local extra=()
  [ "$jobs" -gt 1 ] && extra=(-jobs="$jobs" -workers="$jobs")
  (cd "$d" && ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     "$bin/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
     -max_len="${maxlen[$t]}" -print_final_stats=1 -artifact_prefix="$d/artifacts/" "${extra[@]}" \
     "$d/corpus" "$seeds/$t" >"$d/log" 2>&1) 2>>"$d/log"
  echo $? >"$d/rc"
}

start=$(date +%s)
if [ $parallel = 1 ]; then
  for t in "${targets[@]}"; do run_one "$t" & done
  wait
else
  for t in "${targets[@]}"; do run_one "$t"; done
fi

found=0
printf '%-8s %14s %10s %8s %6s  %s\n' target execs exec/s corpus rc findings
for t in "${targets[@]}"; do
  d=$camp/$t
  # With -jobs the stats are in the workers' logs (the main log repeats them): sum those.
  logs=("$d/log"); compgen -G "$d/fuzz-*.log" >/dev/null && logs=("$d"/fuzz-*.log)
  execs=$(cat "${logs[@]}" | awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}')
  rate=$(cat "${logs[@]}" | awk '/stat::average_exec_per_sec/ {s += $2} END {print s + 0}')
  ncorp=$(find "$d/corpus" -type f | wc -l)
  arts=$(find "$d/artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
         -o -name 'oom-*' \) | wc -l)
  rc=$(cat "$d/rc")
  what="none"
  if [ "$arts" -gt 0 ] || [ "$rc" != 0 ]; then
    found=1
    what="$arts artifact(s) in $d/artifacts; see $d/log"
    grep -h -m1 -E 'SUMMARY: |runtime error|check failed' "${logs[@]}" | sed 's/^/           /'
  fi
  printf '%-8s %14s %10s %8s %6s  %s\n' "$t" "$execs" "$rate" "$ncorp" "$rc" "$what"
done
echo "run-campaign: $(( $(date +%s) - start )) s"
exit $found
