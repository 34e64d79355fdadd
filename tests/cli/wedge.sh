#!/usr/bin/env bash
# ssb4d simulate --wedge T0:T1 (issue 32; docs/simulate.md): the thickness rises along the scan
# columns, each column simulated at its own whole number of unit cells. A tiny wedge of 1 to 5
# cells (0.39 to 1.95 nm): its sidecar records the wedge and each column's cells; its first
# column is bit for bit the uniform 1-cell simulation's first column and its last the uniform
# 5-cell simulation's (counts, with the same seed, detector oversampling and grid; and the phase
# ground truth); the middle columns differ from both. Bad values are refused with one line.
# usage: wedge.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"
PY=/usr/bin/python3
[ -x "$PY" ] && "$PY" -c "import numpy" 2>/dev/null || { echo "SKIP: no numpy"; exit 77; }

S="--preset tiny --det-oversample 1 --grid 126 --threads 2 -q"
"$BIN" simulate $S --wedge 0.39:1.95 -o "$T/w.npy" && ok || bad "simulate --wedge"
"$BIN" simulate $S --cells-z 1 -o "$T/u1.npy" && ok || bad "simulate 1 cell"
"$BIN" simulate $S --thickness 1.95 -o "$T/u5.npy" && ok || bad "simulate 5 cells"

[ "$(json_get "$T/w.json" "d['specimen']['wedge']['cells_per_column'][0], d['specimen']['wedge']['cells_per_column'][-1], d['specimen']['wedge']['thickness_nm']")" = "1 5 [0.39, 1.95]" ] &&
    ok || bad "sidecar's wedge: $(json_get "$T/w.json" "d['specimen'].get('wedge')")"
[ "$(json_get "$T/w.json" "d['specimen']['cells'], d['specimen']['n_slices']")" = "5 10" ] &&
    ok || bad "sidecar's thickest column: $(json_get "$T/w.json" "d['specimen']['cells'], d['specimen']['n_slices']")"

"$PY" - "$T" <<'PY' && ok || bad "the wedge's ends are not the uniform simulations' columns"
import sys
import numpy as np
t = sys.argv[1]
w, u1, u5 = (np.load('%s/%s.npy' % (t, n)) for n in ('w', 'u1', 'u5'))
p, p1, p5 = (np.load('%s/%s_phase.npy' % (t, n)) for n in ('w', 'u1', 'u5'))
assert np.array_equal(w[:, 0], u1[:, 0]) and np.array_equal(w[:, -1], u5[:, -1])
assert np.array_equal(p[:, 0], p1[:, 0]) and np.array_equal(p[:, -1], p5[:, -1])
mid = w.shape[1] // 2  # 3 cells: neither
assert not np.array_equal(w[:, mid], u1[:, mid]) and not np.array_equal(w[:, mid], u5[:, mid])
PY

for bad in "1" "1:" ":2" "0:2" "-1:2" "1:nan" "a:b" "1:2e6"; do
    one_line 2 "--wedge $bad" "--wedge" -- "$BIN" simulate --preset tiny --wedge "$bad" -o "$T/x.npy"
done
one_line 2 "--wedge with --thickness" "--wedge or --thickness, not both" -- \
    "$BIN" simulate --preset tiny --wedge 1:2 --thickness 3 -o "$T/x.npy"
one_line 2 "--wedge with --cells-z" "--wedge or --cells-z, not both" -- \
    "$BIN" simulate --preset tiny --cells-z 2 --wedge 1:2 -o "$T/x.npy"
[ ! -e "$T/x.npy" ] && ok || bad "a refused run left an output"
"$BIN" simulate --help | grep -q -- "--wedge T0:T1" && ok || bad "--help has no --wedge"

finish wedge.sh
