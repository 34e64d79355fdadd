#!/usr/bin/env bash
# `mpirun -np N ssb4d ...` (issue 16, docs/scale.md): a distributed run gives one process's bits.
# On a small simulated scan whose BF pixels fall into uneven blocks for 2 and 3 ranks:
#   reconstruct  the phase.tiff bytes and the loss's bits (JSON, 17 digits) at np 1, 2, 3;
#   fit          the trace SHA-256, the loss and the phase.tiff, object.npy and calibration.json
#                bytes at np 1, 2, 3 (the fit's subsets split mid-block across ranks); the
#                exact-loss objective at np 3 (the loss's chain on those subsets);
#   fit-regions  at np 2 (a region's G, built distributed): regions.csv, defocus.png, regions.json;
#   session      the replay at np 3: its trace;
#   bench run    the whole session (fit, previews, 20 drags on BF subsets, releases, a region
#                refit): the G per-block hash, the phase and the trace at np 2 and 3;
#   faults       a rank whose DATA is unreadable (mpirun's MPMD form gives each rank its own
#                arguments) ends every rank within seconds with a non-zero status and no output;
#                a rank over its budget the same; an unknown flag on every rank the same; a rank
#                killed with SIGKILL (view_mpi.py) ends the job within seconds;
#   the viewer   `mpirun -np 2 ssb4d view`: the fit on start, previews, a drag, a region refit
#                over HTTP equal one process's viewer bit for bit (tests/mpi/view_mpi.py);
#   the plan     `plan --ranks` against the per-rank tracked peak that `--memory-report` prints.
# Rank 0 alone prints and writes. usage: mpi.sh SSB4D_BIN MPIEXEC
set -u
BIN=$1
MPIEXEC=${2:-mpirun}
. "$(dirname "$0")/../cli/lib/harness.sh"

# OpenMPI as root (CI containers) and with more ranks than cores (this 2-core machine); the
# environment (ASAN_OPTIONS, LSAN_OPTIONS) is passed to every rank.
MPI=("$MPIEXEC" --allow-run-as-root --oversubscribe --bind-to none -x ASAN_OPTIONS -x LSAN_OPTIONS -x OMP_NUM_THREADS)
export OMP_NUM_THREADS=1
num() { grep -o "\"$2\":-\{0,1\}[0-9.eE+-]*" "$1" | head -1 | cut -d: -f2; }
str() { grep -o "\"$2\":[[:space:]]*\"[^\"]*\"" "$1" | head -1 | cut -d: -f2- | tr -d '"[:space:]'; }

"$BIN" simulate --preset tiny --c10 -8 --c12 2 --phi12 25 -o "$T/s.npy" --quiet || { echo "simulate failed"; exit 1; }

# --- reconstruct ------------------------------------------------------------------------------
"$BIN" reconstruct "$T/s.npy" -o "$T/r1.tiff" --json --threads 1 >"$T/r1.json" 2>"$T/r1.err" && ok || { bad "reconstruct"; cat "$T/r1.err"; }
nbf=$(num "$T/r1.json" n_bf)
echo "# BF pixels: $nbf ($(( (nbf + 63) / 64 )) blocks of 64)"
for np in 1 2 3; do
    timeout 300 "${MPI[@]}" -np $np "$BIN" reconstruct "$T/s.npy" -o "$T/r.np$np.tiff" --json --threads 1 \
        >"$T/r.np$np.json" 2>"$T/r.np$np.err" && ok || { bad "np $np reconstruct"; cat "$T/r.np$np.err"; }
    cmp -s "$T/r1.tiff" "$T/r.np$np.tiff" && ok || bad "np $np: phase.tiff differs from one process"
    [ "$(num "$T/r1.json" loss)" = "$(num "$T/r.np$np.json" loss)" ] && ok ||
        bad "np $np: loss $(num "$T/r.np$np.json" loss) != $(num "$T/r1.json" loss)"
    [ "$(grep -c '"loss"' "$T/r.np$np.json")" = 1 ] && ok || bad "np $np: rank 0 alone prints (got $(grep -c '"loss"' "$T/r.np$np.json") summaries)"
done

# --- fit --------------------------------------------------------------------------------------
"$BIN" fit "$T/s.npy" -o "$T/f1" --json --threads 1 >"$T/f1.json" 2>"$T/f1.err" && ok || { bad "fit"; cat "$T/f1.err"; }
tr1=$(str "$T/f1/trials.json" trace_sha256)
echo "# one process: trace $tr1 loss $(num "$T/f1.json" loss)"
for np in 1 2 3; do
    timeout 600 "${MPI[@]}" -np $np "$BIN" fit "$T/s.npy" -o "$T/f.np$np" --json --threads 1 \
        >"$T/f.np$np.json" 2>"$T/f.np$np.err" && ok || { bad "np $np fit"; cat "$T/f.np$np.err"; }
    trn=$(str "$T/f.np$np/trials.json" trace_sha256)
    [ -n "$tr1" ] && [ "$tr1" = "$trn" ] && ok || bad "np $np: trace $trn != $tr1"
    [ "$(num "$T/f1.json" loss)" = "$(num "$T/f.np$np.json" loss)" ] && ok || bad "np $np: fit loss differs"
    for f in phase.tiff phase.png object.npy trials.json; do
        cmp -s "$T/f1/$f" "$T/f.np$np/$f" && ok || bad "np $np: $f differs from one process"
    done
    # calibration.json: the same but for the fit's wall time
    cmp -s <(grep -v '"seconds"' "$T/f1/calibration.json") <(grep -v '"seconds"' "$T/f.np$np/calibration.json") &&
        ok || bad "np $np: calibration.json differs from one process"
    echo "# np $np: trace $trn"
done

# the exact-loss objective: the loss's chain on the fit's subsets, split mid-block
"$BIN" fit "$T/s.npy" -o "$T/l1" --objective loss --threads 1 -q >/dev/null 2>"$T/l1.err" && ok || { bad "fit loss"; cat "$T/l1.err"; }
timeout 600 "${MPI[@]}" -np 3 "$BIN" fit "$T/s.npy" -o "$T/l3" --objective loss --threads 1 -q >/dev/null 2>"$T/l3.err" &&
    ok || { bad "np 3 fit --objective loss"; cat "$T/l3.err"; }
[ -n "$(str "$T/l1/trials.json" trace_sha256)" ] &&
    [ "$(str "$T/l1/trials.json" trace_sha256)" = "$(str "$T/l3/trials.json" trace_sha256)" ] && ok ||
    bad "np 3 fit --objective loss: trace differs"
cmp -s "$T/l1/phase.tiff" "$T/l3/phase.tiff" && ok || bad "np 3 fit --objective loss: phase.tiff differs"
echo "# --objective loss, np 3: trace $(str "$T/l3/trials.json" trace_sha256)"

# fit-regions (a region's own G, built distributed) and the session replay
"$BIN" fit-regions "$T/s.npy" --grid 1x1 -o "$T/g1" --threads 1 -q >/dev/null 2>"$T/g1.err" && ok || { bad "fit-regions"; cat "$T/g1.err"; }
timeout 600 "${MPI[@]}" -np 2 "$BIN" fit-regions "$T/s.npy" --grid 1x1 -o "$T/g2" --threads 1 -q >/dev/null 2>"$T/g2.err" &&
    ok || { bad "np 2 fit-regions"; cat "$T/g2.err"; }
for f in regions.csv defocus.png; do cmp -s "$T/g1/$f" "$T/g2/$f" && ok || bad "np 2 fit-regions: $f differs"; done
cmp -s <(grep -v '"seconds"' "$T/g1/regions.json") <(grep -v '"seconds"' "$T/g2/regions.json") && ok ||
    bad "np 2 fit-regions: regions.json differs"
"$BIN" session "$T/s.npy" --json --threads 1 -q >"$T/e1.json" 2>"$T/e1.err" && ok || { bad "session"; cat "$T/e1.err"; }
timeout 600 "${MPI[@]}" -np 3 "$BIN" session "$T/s.npy" --json --threads 1 -q >"$T/e3.json" 2>"$T/e3.err" &&
    ok || { bad "np 3 session"; cat "$T/e3.err"; }
[ -n "$(str "$T/e1.json" trace)" ] && [ "$(str "$T/e1.json" trace)" = "$(str "$T/e3.json" trace)" ] && ok ||
    bad "np 3 session: trace differs"

# --- the G, block by block --------------------------------------------------------------------
"$BIN" bench run --data "$T/s.npy" --repeat 1 -o "$T/b1.json" --threads 1 >/dev/null 2>"$T/b1.err" && ok || { bad "bench"; cat "$T/b1.err"; }
for np in 2 3; do
    timeout 600 "${MPI[@]}" -np $np "$BIN" bench run --data "$T/s.npy" --repeat 1 -o "$T/b$np.json" --threads 1 \
        >/dev/null 2>"$T/b$np.err" && ok || { bad "np $np bench"; cat "$T/b$np.err"; }
    for k in G_blocks phase trace; do
        [ -n "$(str "$T/b1.json" $k)" ] && [ "$(str "$T/b1.json" $k)" = "$(str "$T/b$np.json" $k)" ] && ok ||
            bad "bench np $np: hash $k $(str "$T/b$np.json" $k) != $(str "$T/b1.json" $k)"
    done
done
g1=$(str "$T/b1.json" G_blocks)
echo "# G per block: $g1"

# --- faults -----------------------------------------------------------------------------------
start=$(date +%s)
timeout 120 "${MPI[@]}" -np 1 "$BIN" reconstruct "$T/s.npy" -o "$T/x.tiff" --threads 1 : \
    -np 1 "$BIN" reconstruct "$T/missing.npy" -o "$T/x.tiff" --threads 1 >"$T/x.out" 2>"$T/x.err"
rc=$? took=$(( $(date +%s) - start ))
[ $rc -ne 0 ] && [ $rc -ne 124 ] && ok || bad "an unreadable file on rank 1: exit $rc (124: hung)"
[ $took -lt 60 ] && ok || bad "an unreadable file on rank 1: took ${took}s"
grep -q "missing.npy" "$T/x.err" && ok || { bad "no message names the missing file"; cat "$T/x.err"; }
[ ! -e "$T/x.tiff" ] && ok || bad "a failed job left x.tiff"
# over budget on one rank (its own --memory): the plan refuses there, and the job ends
timeout 120 "${MPI[@]}" -np 1 "$BIN" reconstruct "$T/s.npy" -o "$T/x.tiff" --threads 1 : \
    -np 1 "$BIN" reconstruct "$T/s.npy" -o "$T/x.tiff" --threads 1 --memory 2M >"$T/x.out" 2>"$T/x.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && ok || bad "over budget on rank 1: exit $rc"
grep -q "does not fit in 2.0 MiB: one rank of 2" "$T/x.err" && ok || { bad "over budget: no message"; cat "$T/x.err"; }
[ ! -e "$T/x.tiff" ] && ok || bad "over budget: a failed job left x.tiff"
timeout 120 "${MPI[@]}" -np 2 "$BIN" fit "$T/s.npy" --no-such-flag >"$T/y.out" 2>"$T/y.err"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && ok || bad "an unknown flag: exit $rc"

# --- the viewer: rank 0 serves, the others compute ---------------------------------------------
timeout 900 /usr/bin/python3 "$(dirname "$0")/view_mpi.py" "$BIN" "$MPIEXEC" "$T/s.npy" 2 >"$T/v.log" 2>&1 && ok ||
    { bad "the distributed viewer"; cat "$T/v.log"; }
grep '^ok' "$T/v.log" | sed 's/^/# view: /'

# --- the plan per rank against the measured per-rank peak ---------------------------------------
# fit --json (rank 0's) carries the session's plan of this rank (plan_make_rank) and the tracked
# peak it measured; `plan --ranks 2` plans the largest rank.
p1=$(num "$T/f.np2.json" planned_peak_bytes) m1=$(num "$T/f.np2.json" peak_tracked_bytes)
awk -v p="$p1" -v m="$m1" 'BEGIN { exit !(p > 0 && m > 0 && m <= 1.10 * p && m >= 0.5 * p) }' && ok ||
    bad "np 2 fit: rank 0 measured peak $m1 against its plan $p1"
echo "# np 2, rank 0: planned peak $p1 B, measured $m1 B"
"$BIN" plan "$T/s.npy" --ranks 2 --json >"$T/p2.json" 2>"$T/p2.err" && ok || { bad "plan --ranks 2"; cat "$T/p2.err"; }
grep -q '"ranks":[[:space:]]*2' "$T/p2.json" && ok || bad "plan --ranks 2: no ranks key"
finish mpi
