#!/usr/bin/env bash
# `ssb4d import --gain` must not destroy float data (issue 39): the rounding error is judged
# against the values' own spread, and a quantisation whose error is half the spread or more is
# refused (one line, exit 2, nothing written); a value too large for the stored width is named
# as it was (the float and the gain), not as a clamped count. Files written by numpy.
#  * a summed image (values 12345.6 + [0, 4): a mean, not counts) at --gain auto: refused, where
#    it was stored as all ones with a 0.0003 e error;
#  * counts in units of 0.05 e imported at --gain 1: refused; at --gain 20: stored exactly;
#  * counts / 4 at --gain auto, and counts with read noise (EMPAD-like) at their gain: accepted;
#  * a frame of values beyond 2^32 and one at 70005.5: the message gives the value and the gain.
# usage: gain.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
PY=/usr/bin/python3
. "$(dirname "$0")/lib/harness.sh"

if ! $PY -c 'import numpy' 2>/dev/null; then
    echo "SKIP: Debian's python3 with numpy is needed"
    exit 77
fi
cd "$T"
$PY - <<'EOF'
import numpy as np
rng = np.random.default_rng(39)
img = (12345.6 + 4 * rng.random((24, 24))).astype(np.float32)   # a summed / averaged image
np.save('sum.npy', img.reshape(24, 24, 1, 1))
np.save('sum4.npy', np.ascontiguousarray(np.broadcast_to(img.reshape(24, 24, 1, 1), (24, 24, 4, 4))))
u = rng.poisson(2.0, (8, 8, 8, 8))
u[:, :, 2:6, 2:6] += rng.poisson(20.0, (8, 8, 4, 4))               # a bright disk
np.save('u.npy', u.astype(np.uint16))
np.save('tenth.npy', (u * 0.05).astype(np.float32))              # units of 0.05 e
np.save('quarter.npy', (u / 4.0).astype(np.float32))             # counts / a gain of 4
np.save('noisy.npy', ((u + rng.normal(0, 0.3, u.shape)) * 7.3).astype(np.float32))  # ADU, read noise
big = u.astype(np.float32); big[2, 3] *= 1e10                    # beyond 2^32 electrons
np.save('big.npy', big)
b2 = u.astype(np.float32); b2[2, 3] += 70005.5                   # beyond uint16
np.save('big2.npy', b2)
EOF

# Refusals: one line naming the file, why and what to do; exit 2; no output, no temporary.
one_line 2 "--gain auto on a summed image" "sum.npy: --gain auto refused.*12345.6.*variation over the scan.*every stored count 1.*--gain E" -- \
    "$BIN" import sum.npy -o s1.qem --gain auto --quiet
one_line 2 "--gain auto on a summed image, 4x4 frames, --hot-pixels none" "sum4.npy: --gain auto refused.*variation" -- \
    "$BIN" import sum4.npy -o s2.qem --gain auto --hot-pixels none --quiet
one_line 2 "--gain 1 on data in units of 0.05 e" "tenth.npy: quantising would destroy the data.*rms.*variation over the scan.*--gain E" -- \
    "$BIN" import tenth.npy -o s3.qem --gain 1 --quiet
one_line 2 "--gain 1 on data in units of 0.05 e, one pass (--hot-pixels none)" "tenth.npy: quantising would destroy" -- \
    "$BIN" import tenth.npy -o s4.qem --gain 1 --hot-pixels none --quiet
one_line 2 "a value beyond 2^32 electrons: named as the float and the gain" \
    "big.npy: value [0-9.e+]+ at scan position \(2, 3\), detector pixel \([0-9]+, [0-9]+\) is [0-9.e+]+ electrons at --gain 1, more than uint16" -- \
    "$BIN" import big.npy -o s5.qem --gain 1 --quiet
grep -q 4294967295 "$T/err" && bad "the clamped count 4294967295 is still reported" || ok
one_line 2 "a value beyond uint16: 70005.5 at --gain 1" "big2.npy: value 700[0-9.]+ at scan position \(2, 3\).*at --gain 1, more than uint16 holds \(65535\)" -- \
    "$BIN" import big2.npy -o s6.qem --gain 1 --quiet
ls s[1-6].qem 2>/dev/null && bad "a refused import left its output" || ok
ls | grep -q tmp && bad "a refused import left a temporary file: $(ls)" || ok

# Accepted: the right gain stores the counts exactly; read noise is not mistaken for damage.
expect 0 "--gain 20 on data in units of 0.05 e" "gain 20" -- "$BIN" import tenth.npy -o t.qem --gain 20 --hot-pixels none
expect 0 "the counts come back at --gain 20" "identical" -- "$BIN" verify -q u.npy t.qem
expect 0 "--gain auto on counts / 4" "gain 4" -- "$BIN" import quarter.npy -o q.qem --gain auto --hot-pixels none
expect 0 "the counts come back at gain 4" "identical" -- "$BIN" verify -q u.npy q.qem
expect 0 "counts with read noise (ADU) at their gain" "gain 0.1369863" -- \
    "$BIN" import noisy.npy -o n.qem --gain 0.1369863 --hot-pixels none
"$BIN" info n.qem --json >n.json 2>/dev/null
r=$(json_get n.json "[(round(p['rms_error_electrons'], 2), p['value_spread_electrons'] > 1) for p in d['processing'] if p['operation'] == 'gain_quantisation']" 2>&1)
case $r in "[(0.3"*", True)]"|"[(0.2"*", True)]") ok ;; *) bad "the .qem's gain_quantisation record (rms error ~0.3 e, spread > 1 e): $r" ;; esac

finish gain.sh
