#!/usr/bin/python3
"""refine_corr.py — the correlation of `ssb4d refine`'s projected phase with the simulator's
band-limited truth (issue 40, "Images"; docs/refine.md "Images").

refine's object is on its own grid: the probe (detector) frame, pixel object_pixel_A, with the
region's scan positions placed as src/refine/solver.c places them (position_det and solver_init):
region position (i, j) sits at R_s = (i·step_r, j·step_c) in the scan frame, at
R_det = swap^flip·R(−rotation)ᵀ·R_s in the detector frame, and at object pixel
u = R_det/dx − min over the region's positions (R_det/dx) + grid/2 + 1 (grid: the model grid,
refine --json's probe_shape). The truth (SIM_phase_bandlimited.npy) is the projected phase at the
scan positions, band-limited to |q| <= 2α/λ (the sidecar's ground_truth_phase.bandlimit_inv_A).

So the projected phase (slices.npy summed over the slices) is band-limited to the same |q| on its
own grid and evaluated exactly (its Fourier series) at every position's u, giving an image on the
region's scan grid, which is correlated (Pearson) with the truth's region. Object pixels the
refinement left unconstrained (0: lit under 10 %, docs/refine.md "Outputs") are set to the lit
pixels' mean first, so the field's edge does not ring into it.

  refine_corr.py REFINE_DIR SIM.json [--shift-scan ROWS,COLS]   (prints the correlation)
  refine_corr.py REFINE_DIR SIM.json --search 2                 (the correlation over shifts of
                                                                 the positions, ±2 scan steps)
The study (bench/tools/refine_study.py) calls corr_refine_dir()."""
import argparse
import json
import math
import os
import sys

import numpy as np


def scan_places(rows, cols, step_A, rotation_deg, flip, pixel_A, grid, shift=(0.0, 0.0)):
    """Object pixel coordinates (u0, u1), each rows x cols, of the region's positions, as
    solver.c places them; shift (scan steps, row and col) moves the positions, not the minimum."""
    i, j = np.meshgrid(np.arange(rows, dtype=float), np.arange(cols, dtype=float), indexing="ij")
    a = -math.radians(rotation_deg)
    ca, sa = math.cos(a), math.sin(a)

    def det(r0, r1):
        v0, v1 = ca * r0 - sa * r1, sa * r0 + ca * r1
        return (v1, v0) if flip else (v0, v1)
    x = det(i * step_A[0], j * step_A[1])
    lo = (np.min(x[0] / pixel_A[0]), np.min(x[1] / pixel_A[1]))  # of the unshifted positions
    xs = det((i + shift[0]) * step_A[0], (j + shift[1]) * step_A[1])
    u0 = xs[0] / pixel_A[0] - lo[0] + grid[0] // 2 + 1
    u1 = xs[1] / pixel_A[1] - lo[1] + grid[1] // 2 + 1
    return u0, u1


def bandlimited_at(img, pixel_A, band_inv_A, u0, u1, chunk=1 << 22):
    """The image band-limited to |q| <= band_inv_A (its DFT's components within the disc) and
    evaluated exactly at the pixel coordinates (u0, u1)."""
    n0, n1 = img.shape
    F = np.fft.fft2(img) / img.size
    k0 = np.fft.fftfreq(n0)[:, None]
    k1 = np.fft.fftfreq(n1)[None, :]
    keep = (k0 / pixel_A[0]) ** 2 + (k1 / pixel_A[1]) ** 2 <= band_inv_A ** 2
    kk0 = np.broadcast_to(k0, keep.shape)[keep]
    kk1 = np.broadcast_to(k1, keep.shape)[keep]
    c = F[keep]
    p0, p1 = u0.ravel(), u1.ravel()
    out = np.empty(p0.size)
    step = max(1, chunk // max(1, c.size))
    for s in range(0, p0.size, step):
        ph = 2j * np.pi * (np.outer(p0[s:s + step], kk0) + np.outer(p1[s:s + step], kk1))
        out[s:s + step] = np.real(np.exp(ph) @ c)
    return out.reshape(u0.shape)


def pearson(a, b):
    x, y = a - a.mean(), b - b.mean()
    den = math.sqrt(float(np.sum(x * x) * np.sum(y * y)))
    return float(np.sum(x * y) / den) if den > 0 else None


def projected_phase(rdir):
    """slices.npy summed over the slices, the unconstrained (0) pixels set to the lit mean."""
    sl = np.load(os.path.join(rdir, "slices.npy")).astype(float)
    img = sl.sum(axis=0) if sl.ndim == 3 else sl
    lit = np.any(sl != 0, axis=0) if sl.ndim == 3 else sl != 0
    if lit.any():
        img = np.where(lit, img, img[lit].mean())
    return img


def refine_image(rec, rdir, side, shift=(0.0, 0.0)):
    """refine's projected phase on its region's scan grid, band-limited as the truth is."""
    reg = rec["region"]
    rows, cols = reg[1] - reg[0], reg[3] - reg[2]
    scan = side["scan"]
    step = scan["step_A"]
    band = side["ground_truth_phase"]["bandlimit_inv_A"]
    u0, u1 = scan_places(rows, cols, step, rec["rotation_deg"], bool(rec["flip"]), rec["object_pixel_A"],
                         rec["probe_shape"], shift)
    return bandlimited_at(projected_phase(rdir), rec["object_pixel_A"], band, u0, u1)


def corr_refine_dir(rdir, side, truth, rec=None, shift=(0.0, 0.0)):
    """(correlation or None, a note when None) of refine's output in rdir (its refine.json unless
    rec is given) with the truth (the whole scan's band-limited phase)."""
    try:
        if rec is None:
            rec = json.load(open(os.path.join(rdir, "refine.json")))
        reg = rec.get("region")
        if not (isinstance(reg, list) and len(reg) == 4):
            return None, "no region in refine's record"
        if not os.path.exists(os.path.join(rdir, "slices.npy")):
            return None, "no slices.npy"
        img = refine_image(rec, rdir, side, shift)
    except (OSError, KeyError, ValueError, TypeError) as e:
        return None, f"cannot resample refine's image: {e}"
    want = np.asarray(truth, float)[reg[0]:reg[1], reg[2]:reg[3]]
    r = pearson(img, want)
    return r, None if r is not None else "a flat image"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("refine_dir")
    ap.add_argument("sidecar", help="the simulation's sidecar (SIM.json); the truth is the _phase_bandlimited.npy "
                                    "beside it")
    ap.add_argument("--shift-scan", default="0,0", help="move the positions by ROWS,COLS scan steps (a check)")
    ap.add_argument("--search", type=float, default=0.0, help="also the correlation over shifts of ± this many "
                                                               "scan steps (quarter steps)")
    a = ap.parse_args()
    side = json.load(open(a.sidecar))
    base = a.sidecar[:-5] if a.sidecar.endswith(".json") else a.sidecar
    truth = np.load(base + "_phase_bandlimited.npy")
    sh = tuple(float(v) for v in a.shift_scan.split(","))
    r, note = corr_refine_dir(a.refine_dir, side, truth, shift=sh)
    print(f"corr_refine {r if r is None else round(r, 4)}{'  (' + note + ')' if note else ''}  shift {sh} steps")
    if a.search > 0:
        rec = json.load(open(os.path.join(a.refine_dir, "refine.json")))
        best = None
        steps = np.arange(-a.search, a.search + 1e-9, 0.25)
        for s0 in steps:
            for s1 in steps:
                c, _ = corr_refine_dir(a.refine_dir, side, truth, rec, (s0, s1))
                if c is not None and (best is None or c > best[0]):
                    best = (c, s0, s1)
        print(f"best over shifts of ±{a.search} steps: {best[0]:.4f} at ({best[1]:+.2f}, {best[2]:+.2f}) steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
