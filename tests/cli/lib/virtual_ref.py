"""An independent float64 numpy computation of `ssb4d virtual`'s images (docs/virtual.md) from the
raw frames and the virtual.json the command wrote beside them (its centre, sampling, angles,
rotation, flip and flagged pixels), and the comparison with the command's .npy files.

usage: virtual_ref.py DATA.npy OUTDIR   (exit 0 when every image agrees, 1 with the reasons)
Tolerances: BF and ADF exactly (float64 sums of counts are exact); for float32 data 1e-12
relative; CoM 1e-9 mrad; iDPC (single-precision FFTW in the library) 2e-5 of its largest value.
"""
import json
import os
import sys

import numpy as np


def reference(data, meta):
    """The five images (dict of float64 arrays) of data (ny, nx, dr, dc) under meta."""
    d = np.asarray(data, dtype=np.float64)
    ny, nx, dr, dc = d.shape
    c0, c1 = meta['centre_px']
    s0, s1 = meta['det_sampling_mrad']
    rr, cc = np.meshgrid(np.arange(dr, dtype=np.float64), np.arange(dc, dtype=np.float64), indexing='ij')
    a, b = (rr - c0) * s0, (cc - c1) * s1
    theta = np.sqrt(a * a + b * b)
    valid = np.ones((dr, dc), bool)
    valid.flat[np.asarray(meta['flagged'], dtype=np.int64)] = False
    bfi, bfo = meta['bf_mrad']
    adi, ado = meta['adf_mrad']
    if meta['bf_default']:
        yr, xc = rr - c0, cc - c1
        sel = meta['selection_radius_px']
        bf_mask = valid & (yr * yr + xc * xc <= sel * sel) & (theta >= bfi)
    else:
        bf_mask = valid & (theta >= bfi) & (theta <= bfo)
    adf_mask = valid & (theta >= adi) & (theta <= ado) & (adi < meta['detector_max_mrad'])
    flat = d.reshape(ny, nx, dr * dc)
    bf = flat @ bf_mask.ravel().astype(np.float64)
    adf = flat @ adf_mask.ravel().astype(np.float64)
    v = valid.ravel().astype(np.float64)
    S0 = flat @ v
    Sr = flat @ (v * rr.ravel())
    Sc = flat @ (v * cc.ravel())
    with np.errstate(invalid='ignore', divide='ignore'):
        d0 = np.where(S0 > 0, (Sr / S0 - c0) * s0, 0.0)
        d1 = np.where(S0 > 0, (Sc / S0 - c1) * s1, 0.0)
    if meta['flip']:
        d0, d1 = d1, d0
    t = np.deg2rad(meta['rotation_deg'])
    kx = np.cos(t) * d0 - np.sin(t) * d1
    ky = np.sin(t) * d0 + np.cos(t) * d1
    lam = meta['idpc_lambda_A']
    sx, sy = meta['idpc_step_A']
    fx = np.fft.fftfreq(ny, sx)[:, None]
    fy = np.fft.fftfreq(nx, sy)[None, :]
    f2 = fx * fx + fy * fy
    f2[0, 0] = 1.0
    spec = -1j * 1e-3 / lam * (fx * np.fft.fft2(kx) + fy * np.fft.fft2(ky)) / f2
    spec[0, 0] = 0
    idpc = np.real(np.fft.ifft2(spec))
    return {'virtual_bf': bf, 'virtual_adf': adf, 'com_x': kx, 'com_y': ky, 'idpc': idpc}


def compare(data, outdir):
    """A list of the disagreements (empty when everything agrees)."""
    with open(os.path.join(outdir, 'virtual.json')) as f:
        meta = json.load(f)
    raw = np.load(data, mmap_mode='r')
    ref = reference(raw, meta)
    is_float = raw.dtype.kind == 'f'
    bad = []
    for name, want in ref.items():
        got = np.load(os.path.join(outdir, name + '.npy'))
        if got.dtype != np.float64 or got.shape != want.shape:
            bad.append('%s: %s %s, want float64 %s' % (name, got.dtype, got.shape, want.shape))
            continue
        if name in ('virtual_bf', 'virtual_adf'):
            ok = np.array_equal(got, want) if not is_float else np.allclose(got, want, rtol=1e-12, atol=0)
        elif name.startswith('com'):
            ok = np.allclose(got, want, rtol=0, atol=1e-9)
        else:
            scale = max(np.abs(want).max(), 1e-30)
            ok = np.abs(got - want).max() <= 2e-5 * scale
        if not ok:
            bad.append('%s: largest difference %.3g (largest value %.3g)' %
                       (name, np.abs(got - want).max(), np.abs(want).max()))
    if not np.any(ref['virtual_adf']) and meta['n_adf_pixels']:
        bad.append('virtual_adf: all zeros with %d ADF pixels' % meta['n_adf_pixels'])
    return bad


if __name__ == '__main__':
    problems = compare(sys.argv[1], sys.argv[2])
    for p in problems:
        print('FAIL: numpy reference: ' + p)
    sys.exit(1 if problems else 0)
