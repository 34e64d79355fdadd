#!/usr/bin/python3
"""The fit's confidence rule (src/fit/standard.c confidence(), issue 32) applied to fit-study
records, per thickness stratum: how many fits are right by SPEC 6.1 (ok_spec), how many the rule
calls confident, and how many of those are right. The records hold every input of the rule (the
old criteria's verdict, the standard errors, the disk halves' split, the skewness, the parallax's
rotation), so records made before a change of the rule's thresholds can be re-judged; on records
made by the current code the recomputed verdict must equal the recorded one (printed).

usage: bench/tools/confidence_32.py FILE.jsonl [FILE.jsonl ...]
"""
import json
import math
import sys

SE_TOL_HALF = True      # 2 sigma inside the tolerance
SPLIT_C12_OK = 0.3      # nm
SKEW_SETTLED = 1.5
ROT_AGREE_SIGMA = 3.5


def base_confident(r):
    """The criteria before issue 32 (contrast, rotation and handedness determined, branch settled
    for a searched rotation), as recorded: the recorded verdict is a superset of them."""
    return bool(r['fit']['confident'])


def confident(r):
    fi = r['fit']
    if not base_confident(r):
        return False, 'earlier criteria'
    c12 = fi['C12_nm']
    tol = [0.2, max(0.2, 0.05 * c12), 3.0 if c12 >= 1 else math.inf, 1.0]
    for j, v in enumerate(fi['se']):
        if v is not None and not (2 * v <= tol[j]):
            return False, 'standard error'
    sp = fi['disk_split'][1]
    if sp is not None and not (abs(sp) <= SPLIT_C12_OK):
        return False, 'disk halves'
    px = r['parallax']
    if fi['rotation_source'] != 'given' and px['sigma'][3] is not None:
        d = abs(((px['rotation_deg'] - fi['rotation_deg'] + 90) % 180) - 90)
        if d > max(ROT_AGREE_SIGMA * px['sigma'][3], 0.5):
            return False, 'rotation vs parallax'
    if fi['skewness'] < SKEW_SETTLED:
        return False, 'skewness'
    return True, ''


def main(files):
    strata, recorded_differs, n = {}, 0, 0
    for f in files:
        for line in open(f):
            r = json.loads(line)
            if 'i' not in r or 'se' not in r['fit']:
                continue
            n += 1
            c, why = confident(r)
            recorded_differs += c != bool(r['fit']['confident'])
            s = strata.setdefault(r['strata']['thickness'], {'n': 0, 'right': 0, 'conf': 0, 'conf_right': 0, 'why': {}})
            s['n'] += 1
            s['right'] += bool(r['ok_spec'])
            s['conf'] += c
            s['conf_right'] += c and bool(r['ok_spec'])
            if not c:
                s['why'][why] = s['why'].get(why, 0) + 1
            if c and not r['ok_spec']:
                print('confident but wrong: case %d %s, dC10 %.2f, dC12 %.2f, dphi12 %.1f, drotation %.2f' % (
                    r['i'], r['specimen'], r['dC10'], r['dC12'], r['dphi12'], r['drotation']))
    print('| stratum | n | right (SPEC 6.1) | confident | right when confident | why not confident |')
    print('|---|---|---|---|---|---|')
    tot = [0, 0, 0, 0]
    for k, s in strata.items():
        why = ', '.join('%s %d' % kv for kv in sorted(s['why'].items()))
        print('| %s | %d | %d | %d | %d / %d | %s |' % (k, s['n'], s['right'], s['conf'], s['conf_right'], s['conf'], why))
        for i, key in enumerate(('n', 'right', 'conf', 'conf_right')):
            tot[i] += s[key]
    print('| all | %d | %d | %d | %d / %d | |' % (tot[0], tot[1], tot[2], tot[3], tot[2]))
    print('records whose recorded verdict differs from this rule: %d of %d' % (recorded_differs, n))


if __name__ == '__main__':
    main(sys.argv[1:])
