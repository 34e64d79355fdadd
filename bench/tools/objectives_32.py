#!/usr/bin/python3
"""Which objective's optimum lies nearest the truth on crystals (issue 32, item 2): reads
fit-study records made with `ssb4d_fit_study --rotation-given --objectives` and prints, per
thickness stratum, how often each optimum is right by SPEC 6.1 (C10 inside the slab +-0.2 nm, C12
within 0.2 nm or 5 % above 4 nm, phi12 within 3 deg when C12 >= 1 nm; the rotation is given), the
median |C12 error|, and where the thick model's own thickness optimum lies against the true
thickness (the band fraction scanned along the thickness at the true aberrations and tilt).

usage: bench/tools/objectives_32.py FILE.jsonl [FILE.jsonl ...]
"""
import json
import statistics
import sys

NAMES = [('thin_band', 'thin band (the standard fit)'), ('thin_loss', 'thin exact loss'),
         ('thick_truth', 'thick band, thickness and tilt held at the truth'),
         ('thick_T', 'thick band, thickness held, tilt searched'), ('thick_joint', 'thick band, joint search (--tilt)'),
         ('parallax', 'parallax (tilt-corrected BF) estimate')]


def optimum(r, key):
    if key == 'parallax':
        p = r['parallax']
        return [p['C10_nm'], p['C12_nm'], p['phi12_deg_scan']]
    return r['objectives'][key]


def wrap(d, p):
    return (d + p / 2) % p - p / 2


def judge(x, r, t):
    c12 = t[1]
    d12 = x[1] - c12
    tol12 = max(0.2, 0.05 * c12) if c12 > 4 else 0.2
    ok12 = abs(d12) <= tol12
    okphi = c12 < 1 or abs(wrap(x[2] - t[2], 180)) <= 3
    tr = r['truth']
    ok10 = tr['C10_nm_entrance'] - 0.2 <= x[0] <= tr['C10_nm_exit'] + 0.2
    return ok10 and ok12 and okphi, ok12 and okphi, abs(d12)


def main(files):
    recs = []
    for f in files:
        for line in open(f):
            r = json.loads(line)
            if 'objectives' in r:
                recs.append(r)
    strata = sorted({r['strata']['thickness'] for r in recs})
    print('| stratum | optimum | cases | SPEC 6.1 right | C12 and phi12 right | median abs C12 error (nm) |')
    print('|---|---|---|---|---|---|')
    for s in strata:
        rs = [r for r in recs if r['strata']['thickness'] == s]
        for key, label in NAMES:
            j = [judge(optimum(r, key), r, r['objectives']['truth_scan']) for r in rs]
            print('| %s | %s | %d | %d | %d | %.2f |' % (s, label, len(rs), sum(a for a, _, _ in j),
                                                          sum(b for _, b, _ in j), statistics.median(c for _, _, c in j)))
    print()
    print('| specimen | stratum | cases | band fraction at the truth: thin > thick | thick optimum / true thickness (median, range) |')
    print('|---|---|---|---|---|')
    for sp in ('Au', 'SrTiO3'):
        for s in strata:
            rs = [r for r in recs if r['specimen'] == sp and r['strata']['thickness'] == s]
            if not rs:
                continue
            better = sum(r['objectives']['band_fraction_truth'][0] > r['objectives']['band_fraction_truth'][1] for r in rs)
            ratio = [max(r['objectives']['band_T_scan'], key=lambda p: p[1])[0] for r in rs]
            print('| %s | %s | %d | %d | %.3g (%.3g-%.3g) |' % (sp, s, len(rs), better, statistics.median(ratio),
                                                              min(ratio), max(ratio)))


if __name__ == '__main__':
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
