#!/usr/bin/env bash
# `mpirun -np N ssb4d ... --backend cuda` (issue 17, docs/scale.md): one rank per GPU gives one
# GPU's bits. Run where the build has CUDA and MPI and a GPU is present (ctest mpi_cuda, label
# gpu; skipped with 77 otherwise). On a machine with one GPU every rank shares it, which proves
# the code path (the chain of block partials from the devices, the object's sequential sum, the
# band power) but not the speed-up. Against one GPU without mpirun, on the same small scan as
# tests/mpi/mpi.sh (1,201 BF pixels in 19 uneven blocks for 2 and 3 ranks):
#   reconstruct  phase.tiff bytes and the loss (17 digits) at np 1, 2, 3;
#   fit          the trace SHA-256, phase.tiff and object.npy at np 1, 2, 3 (the fit's subsets
#                split mid-block: the head pixels of a block begun on an earlier rank);
#   fit --objective loss at np 3; bench run (G per block, phase, trace) at np 2 and 3;
#   ranks on a host take GPUs in order of local rank (SSB4D_MPI_TRAFFIC prints each rank's).
# usage: gpu_mpi.sh SSB4D_BIN MPIEXEC
set -u
BIN=$1
MPIEXEC=${2:-mpirun}
. "$(dirname "$0")/../cli/lib/harness.sh"
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU here: skipped"; exit 77; }
MPI=("$MPIEXEC" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS)
export OMP_NUM_THREADS=2
num() { grep -o "\"$2\":-\{0,1\}[0-9.eE+-]*" "$1" | head -1 | cut -d: -f2; }
str() { grep -o "\"$2\":[[:space:]]*\"[^\"]*\"" "$1" | head -1 | cut -d: -f2- | tr -d '"[:space:]'; }
B=(--backend cuda --threads 2)

"$BIN" simulate --preset tiny --c10 -8 --c12 2 --phi12 25 -o "$T/s.npy" --quiet || { echo "simulate failed"; exit 1; }

# --- reconstruct ------------------------------------------------------------------------------
"$BIN" reconstruct "$T/s.npy" -o "$T/r1.tiff" --json "${B[@]}" >"$T/r1.json" 2>"$T/r1.err" && ok || { bad "reconstruct"; cat "$T/r1.err"; }
grep -q '"backend":[[:space:]]*"cuda"' "$T/r1.json" && ok || bad "one GPU: the backend is not cuda"
for np in 1 2 3; do
    timeout 300 "${MPI[@]}" -np $np "$BIN" reconstruct "$T/s.npy" -o "$T/r.np$np.tiff" --json "${B[@]}" \
        >"$T/r.np$np.json" 2>"$T/r.np$np.err" && ok || { bad "np $np reconstruct"; cat "$T/r.np$np.err"; }
    grep -q '"backend":[[:space:]]*"cuda"' "$T/r.np$np.json" && ok || bad "np $np: the backend is not cuda"
    cmp -s "$T/r1.tiff" "$T/r.np$np.tiff" && ok || bad "np $np: phase.tiff differs from one GPU"
    [ "$(num "$T/r1.json" loss)" = "$(num "$T/r.np$np.json" loss)" ] && ok ||
        bad "np $np: loss $(num "$T/r.np$np.json" loss) != $(num "$T/r1.json" loss)"
done
echo "# reconstruct, one GPU: loss $(num "$T/r1.json" loss)"

# --- fit --------------------------------------------------------------------------------------
"$BIN" fit "$T/s.npy" -o "$T/f1" --json "${B[@]}" >"$T/f1.json" 2>"$T/f1.err" && ok || { bad "fit"; cat "$T/f1.err"; }
tr1=$(str "$T/f1/trials.json" trace_sha256)
echo "# fit, one GPU: trace $tr1 loss $(num "$T/f1.json" loss)"
for np in 1 2 3; do
    timeout 600 "${MPI[@]}" -np $np "$BIN" fit "$T/s.npy" -o "$T/f.np$np" --json "${B[@]}" \
        >"$T/f.np$np.json" 2>"$T/f.np$np.err" && ok || { bad "np $np fit"; cat "$T/f.np$np.err"; }
    trn=$(str "$T/f.np$np/trials.json" trace_sha256)
    [ -n "$tr1" ] && [ "$tr1" = "$trn" ] && ok || bad "np $np: trace $trn != $tr1"
    for f in phase.tiff object.npy trials.json; do
        cmp -s "$T/f1/$f" "$T/f.np$np/$f" && ok || bad "np $np: $f differs from one GPU"
    done
done
"$BIN" fit "$T/s.npy" -o "$T/l1" --objective loss "${B[@]}" -q >/dev/null 2>"$T/l1.err" && ok || { bad "fit loss"; cat "$T/l1.err"; }
timeout 600 "${MPI[@]}" -np 3 "$BIN" fit "$T/s.npy" -o "$T/l3" --objective loss "${B[@]}" -q >/dev/null 2>"$T/l3.err" &&
    ok || { bad "np 3 fit --objective loss"; cat "$T/l3.err"; }
[ -n "$(str "$T/l1/trials.json" trace_sha256)" ] &&
    [ "$(str "$T/l1/trials.json" trace_sha256)" = "$(str "$T/l3/trials.json" trace_sha256)" ] && ok ||
    bad "np 3 fit --objective loss: trace differs"
cmp -s "$T/l1/phase.tiff" "$T/l3/phase.tiff" && ok || bad "np 3 fit --objective loss: phase.tiff differs"
echo "# --objective loss, one GPU and np 3: trace $(str "$T/l3/trials.json" trace_sha256)"

# --- the whole replayed session, and the G per block --------------------------------------------
"$BIN" bench run --data "$T/s.npy" --repeat 1 -o "$T/b1.json" "${B[@]}" >/dev/null 2>"$T/b1.err" && ok || { bad "bench"; cat "$T/b1.err"; }
for np in 2 3; do
    SSB4D_MPI_TRAFFIC=1 timeout 600 "${MPI[@]}" -x SSB4D_MPI_TRAFFIC -np $np "$BIN" bench run --data "$T/s.npy" \
        --repeat 1 -o "$T/b$np.json" "${B[@]}" >/dev/null 2>"$T/b$np.err" && ok || { bad "np $np bench"; cat "$T/b$np.err"; }
    for k in G_blocks phase trace; do
        [ -n "$(str "$T/b1.json" $k)" ] && [ "$(str "$T/b1.json" $k)" = "$(str "$T/b$np.json" $k)" ] && ok ||
            bad "bench np $np: hash $k $(str "$T/b$np.json" $k) != $(str "$T/b1.json" $k)"
    done
    grep -i "traffic\|rank" "$T/b$np.err" | head -4 | sed 's/^/# /'
done
echo "# G per block: $(str "$T/b1.json" G_blocks)"
finish mpi_cuda
