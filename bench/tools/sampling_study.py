#!/usr/bin/python3
"""The detector-sampling study of issue 39 (SPEC §4 "Detector sampling"; docs/calibrate.md).

Simulates a balanced family of small acquisitions with `ssb4d simulate` and compares the sampling
`ssb4d calibrate` measures from the BF disk's edge (its --json "measured" object, measured whatever
the sidecar states) with the simulator's true sampling. The mean pattern is what matters, so the
scans are small: 64x64 positions over 16x16 unit cells (16 distinct patterns per cell).

Factors (each level used equally often, combined by a fixed pseudo-random design, not tuned):
  semi-angle 15, 25, 35 mrad; BF disk 35, 60, 85 % of the detector's half-width; C10 -40, 0, +40 nm;
  dose 500, 1e4, 1e5 electrons per position; specimen: SrTiO3 one cell (thin), SrTiO3 5 nm,
  Au 3 nm (crystals, with their diffuse scattering and Bragg disks); detector mirrored or not.

usage: /usr/bin/python3 bench/tools/sampling_study.py [--ssb4d build/ssb4d] [--cases 36] [--jobs 2]
       [--out bench/sampling-study-YYYYMMDD.jsonl] [--only 9,31] [--table RECORD.jsonl] [--seed 39]
--seed: another family of the same design (its shuffle, and the simulator's seeds 100 + case +
1000 (seed - 39)); 39 is the record's.
Prints one line per case and the table per stratum (median and 95th percentile of |relative error|,
median reported relative standard error, and how many errors lie within 2 reported sigma)."""
import argparse, json, os, random, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor
import numpy as np

SEMI = [15, 25, 35]
FRAC = [0.35, 0.60, 0.85]
C10 = [-40, 0, 40]
DOSE = [500, 1e4, 1e5]
SPEC = [('srtio3', None, 'thin SrTiO3 1 cell'), ('srtio3', 5, 'SrTiO3 5 nm'), ('au', 3, 'Au 3 nm')]
FLIP = [0, 1]
WINDOW = 4            # cells: L = 15.6 A (SrTiO3), R = alpha L / lambda
LAMBDA = 0.0196875    # A at 300 kV


def design(n, seed=39):
    """n cases; each factor's levels repeated equally, shuffled independently (a fixed seed)."""
    rng = random.Random(seed)
    cols = []
    for levels in (SEMI, FRAC, C10, DOSE, list(range(len(SPEC))), FLIP):
        col = [levels[i % len(levels)] for i in range(n)]
        rng.shuffle(col)
        cols.append(col)
    return list(zip(*cols))


def run_case(args, i, case, tmp):
    sim_seed = 100 + i + 1000 * (args.seed - 39)
    semi, frac, c10, dose, spec, flip = case
    name, thick, _ = SPEC[spec]
    a = 3.905 if name == 'srtio3' else 4.078
    R = semi * 1e-3 * WINDOW * a / LAMBDA
    det = int(round(2 * R / frac))
    out = os.path.join(tmp, 'c%03d.npy' % i)
    cmd = [args.ssb4d, 'simulate', '-o', out, '--scan', '64', '--scan-cells', '16', '--window-cells', str(WINDOW),
           '--detector', str(det), '--semiangle', str(semi), '--c10', str(c10), '--dose', '%g' % dose,
           '--specimen', name, '--seed', str(sim_seed), '--threads', '1', '-q', '--force']
    if thick:
        cmd += ['--thickness', str(thick)]
    if flip:
        cmd += ['--flip']
    subprocess.run(cmd, check=True)
    side = json.load(open(out[:-4] + '.json'))
    truth = side['detector']['sampling_mrad'][0]
    cal = subprocess.run([args.ssb4d, 'calibrate', out, '--json', '--force', '-o', out[:-4] + '.cal.json',
                          '--threads', '1'], check=True, capture_output=True, text=True)
    m = json.loads(cal.stdout)['measured']
    meas, sig = m['det_sampling_measured_mrad'], m['det_sampling_measured_sigma_mrad']
    for f in os.listdir(tmp):
        if f.startswith('c%03d' % i):
            os.remove(os.path.join(tmp, f))
    return dict(case=i, semiangle_mrad=semi, disk_fraction=frac, C10_nm=c10, dose=dose, specimen=SPEC[spec][2],
                flip=bool(flip), det=det, det_oversample=side['detector']['det_oversample'],
                R_true_px=side['detector']['bf_disk_radius_px_expected'], truth_mrad=truth, measured_mrad=meas,
                sigma_mrad=sig, rel_error=meas / truth - 1, rel_sigma=(sig / truth) if sig is not None else None,
                edge_model=m['edge_model'], edge_blur_px=m['edge_blur_px'],
                threshold_rel_error=(semi / m['edge_radius_threshold_px']) / truth - 1)


def table(rows):
    keys = [('semi-angle (mrad)', 'semiangle_mrad'), ('disk / half-width', 'disk_fraction'), ('C10 (nm)', 'C10_nm'),
            ('dose (e/position)', 'dose'), ('specimen', 'specimen'), ('mirrored detector', 'flip'),
            ('simulator det_oversample', 'det_oversample')]
    lines = ['| stratum | n | median \\|error\\| | 95th pct \\|error\\| | max \\|error\\| | median reported σ | '
             '\\|error\\| ≤ 2σ | ≤ 0.3 % | half-median threshold, median error |', '|---|---|---|---|---|---|---|---|---|']

    def row(label, rs):
        e = np.abs([r['rel_error'] for r in rs]) * 100
        s = np.array([r['rel_sigma'] if r['rel_sigma'] is not None else np.nan for r in rs]) * 100
        w = sum(abs(r['rel_error']) <= 2 * (r['rel_sigma'] or 0) for r in rs)
        t = np.array([r['threshold_rel_error'] for r in rs]) * 100
        lines.append('| %s | %d | %.3f %% | %.3f %% | %.3f %% | %.3f %% | %d/%d | %d/%d | %+.2f %% |' % (
            label, len(rs), np.median(e), np.percentile(e, 95), e.max(), np.nanmedian(s), w, len(rs),
            int(np.sum(e <= 0.3)), len(rs), np.median(t)))

    row('all', rows)
    for title, k in keys:
        for v in sorted(set(r[k] for r in rows), key=lambda x: (str(type(x)), x)):
            label = ('yes' if v else 'no') if k == 'flip' else v
            row('%s = %s' % (title, label), [r for r in rows if r[k] == v])
    return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--ssb4d', default='build/ssb4d')
    ap.add_argument('--cases', type=int, default=36)
    ap.add_argument('--jobs', type=int, default=2)
    ap.add_argument('--out', default=None)
    ap.add_argument('--only', default=None, help='comma-separated case numbers (to look at a few again)')
    ap.add_argument('--table', default=None, help='print the table of a record (.jsonl) and stop')
    ap.add_argument('--seed', type=int, default=39, help='the family: the design\'s shuffle and the simulator\'s seeds')
    args = ap.parse_args()
    if args.table:
        print(table([json.loads(x) for x in open(args.table)]))
        return
    cases = design(args.cases, args.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix='ssb4d-sampling-') as tmp, ThreadPoolExecutor(args.jobs) as ex:
        only = set(int(x) for x in args.only.split(',')) if args.only else None
        futs = [ex.submit(run_case, args, i, c, tmp) for i, c in enumerate(cases) if only is None or i in only]
        for f in futs:
            r = f.result()
            rows.append(r)
            print('case %2d: %4.0f mrad, disk %.2f (det %3d, S %d), C10 %+3.0f, dose %6g, %-18s flip %d: '
                  'error %+.3f %% (sigma %.3f %%, %s, blur %.2f px; half-median %+.2f %%)' % (
                      r['case'], r['semiangle_mrad'], r['disk_fraction'], r['det'], r['det_oversample'], r['C10_nm'],
                      r['dose'], r['specimen'], r['flip'], 100 * r['rel_error'], 100 * (r['rel_sigma'] or float('nan')),
                      r['edge_model'], r['edge_blur_px'], 100 * r['threshold_rel_error']), flush=True)
    if args.out:
        with open(args.out, 'w') as f:
            for r in rows:
                f.write(json.dumps(r) + '\n')
    print(table(rows))


if __name__ == '__main__':
    main()
