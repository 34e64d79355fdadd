#!/usr/bin/env bash
# The replayed session on the device machine's CPU (16 cores, quiet): bb6ccd9 (.main-src) against this tree.
set -uo pipefail
. .device-deps/activate.sh
root=$PWD
for t in main br; do
  d=$root; [ $t = main ] && d=$root/.main-src
  ( cd $d && cmake -S . -B /tmp/c-$t -DCMAKE_BUILD_TYPE=Release -DSSB4D_CUDA=OFF -DSSB4D_MPI=OFF -DSSB4D_TESTS=OFF -DSSB4D_FUZZ=OFF >/tmp/cc-$t.log 2>&1 &&
    cmake --build /tmp/c-$t -j16 --target ssb4d >/tmp/cb-$t.log 2>&1 ) || { tail -20 /tmp/cc-$t.log /tmp/cb-$t.log; exit 1; }
done
grep -c mbranches /tmp/c-br/CMakeFiles/ssb4d_lib.dir/flags.make
lscpu | grep -E "Model name|^CPU\(s\)"
t0=$(date +%s); /tmp/c-br/ssb4d bench run --workload medium --cache /tmp/bc --repeat 1 --backend cpu -o /tmp/warm.json --force -q 2>&1 | tail -1; echo "simulated + one run in $(( $(date +%s) - t0 )) s"
ls -la /tmp/bc
for i in 1 2; do
  for t in main br; do
    /tmp/c-$t/ssb4d bench run --workload medium --cache /tmp/bc --repeat 3 --backend cpu -o $OUT/s-$t-$i.json --force -q 2>&1 | tail -1
  done
done
for i in 1 2; do /tmp/c-br/ssb4d bench compare $OUT/s-main-$i.json $OUT/s-br-$i.json | tail -30; done
