#!/usr/bin/python3
"""ssb_truth.py — a plain numpy SSB at the true aberrations, against ssb4d (issue 32 item 6).

Independent of ssb4d's code: reads the .npy counts and the simulator's sidecar JSON, builds
G(q,k) = FT over the scan of every BF pixel's image, corrects it with the double-overlap
("trotter") function gamma(q,k) = P(k-q)P*(k) - P*(k+q)P(k) (SPEC 5.4's form; Rodenburg 1993,
Pennycook 2015, Yang 2016), sums over k, inverse FT, phase. SPEC 2/5.1 conventions: axes
(scan_row, scan_col, det_row, det_col); k = (pixel - centre)*dk, a flipped detector's axes swapped,
then rotated by a = -rotation; q = fftfreq(N, step); unnormalised forward DFT.

Every choice where a textbook SSB and ssb4d may differ is an option (see CHOICES), so that one
ingredient at a time can be moved from the plain SSB towards ssb4d's:

  aperture   hard  A = [alpha <= alpha0]                 | soft  SPEC 5.2's one-pixel linear edge
  bf         aperture  every pixel with A(k) > 0          | disk  SPEC 4's rule (mean pattern above
             mean+std, centroid, equal-area radius) | a number: that radius (px) about the centre
  centre     sidecar  the simulator's zero-frequency pixel | disk  the BF disk's centroid (SPEC 4)
  nyquist    own   each bin at its fftfreq q (-q_nyq)     | avg  n averaged over the aliases
             (docs/ssb-math.md) | zero  Nyquist row and column dropped
  estimator  trotter  conj(gamma)/|gamma| where exactly one trotter is open (triple overlap left
             out) | norm  conj(gamma)/|gamma| everywhere (SPEC 5.4) | matched  conj(gamma) |
             wiener  sum G conj(gamma) / (sum |gamma|^2 + eps*N_bf) | flat  norm's sum divided by
             its own transfer, sum G conj(gamma)/|gamma| / (sum |gamma| + eps*N_bf): SPEC's object
             F(q) divided by T(q) = (1/N_bf) sum_k |gamma(q,k)| (regularised); with ssb4d's other
             choices and eps = FLAT_EPS it is ssb4d's --estimator transfer
  weight     nbf  F = sum / N_bf                          | count  F = sum / (pixels used at q)
  phase      arg  arg IDFT[F], F(0) = dc (phase of the mean) | mean  mean over k of arg IDFT[C_k]
             (SPEC's mean phase) | imag  Im IDFT[F] with F(0) = 0

Correlation: Pearson over the whole field (which removes the mean), against the sidecar's
OUT_phase.npy ("full" truth) and OUT_phase_bandlimited.npy ("band" truth); --ramp also removes a
least-squares plane from both first.

Usage:
  /usr/bin/python3 bench/tools/ssb_truth.py DATA.npy [--ssb4d build/ssb4d] [--table]
  /usr/bin/python3 bench/tools/ssb_truth.py DATA.npy --set aperture=soft,nyquist=avg ...
  /usr/bin/python3 bench/tools/ssb_truth.py --study build/ssb4d [--quick]   (simulates cases)
  /usr/bin/python3 bench/tools/ssb_truth.py --eps-study build/ssb4d  (the transfer estimator's eps)
Needs numpy only (/usr/bin/python3 has it).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

# Krivanek coefficients (n, m) in ssb4d's order (src/optics/optics.c)
ABERR = [("C10", 1, 0), ("C12", 1, 2), ("C21", 2, 1), ("C23", 2, 3), ("C30", 3, 0), ("C32", 3, 2),
         ("C34", 3, 4), ("C41", 4, 1), ("C43", 4, 3), ("C45", 4, 5), ("C50", 5, 0), ("C52", 5, 2),
         ("C54", 5, 4), ("C56", 5, 6)]

CHOICES = {
    "aperture": ("hard", "soft"),
    "bf": ("aperture", "disk"),          # or a radius in px
    "centre": ("sidecar", "disk"),
    "nyquist": ("own", "avg", "zero"),
    "estimator": ("trotter", "norm", "matched", "wiener", "flat"),
    "weight": ("nbf", "count"),
    "phase": ("arg", "mean", "imag"),
}
# the plain textbook SSB, and ssb4d's choices (docs/ssb-math.md; SPEC 4, 5)
PLAIN = dict(aperture="hard", bf="aperture", centre="sidecar", nyquist="own", estimator="trotter",
             weight="nbf", phase="arg")
SSB4D = dict(aperture="soft", bf="disk", centre="disk", nyquist="avg", estimator="norm",
             weight="nbf", phase="arg")
WIENER_EPS = 0.05
FLAT_EPS = 0.5  # ssb4d's SSB4D_TRANSFER_EPS (include/ssb4d.h; --eps-study)


def wavelength_A(kv):
    """Relativistic wavelength in Angstrom, CODATA 2018 (SPEC 2)."""
    h, m, e, c = 6.62607015e-34, 9.1093837015e-31, 1.602176634e-19, 299792458.0
    v = kv * 1e3
    return h / np.sqrt(2 * m * e * v * (1 + e * v / (2 * m * c * c))) * 1e10


class Data:
    """The counts, the sidecar's geometry and truth."""

    def __init__(self, path):
        self.path = path
        self.counts = np.load(path, mmap_mode="r")
        side = os.path.splitext(path)[0] + ".json"
        with open(side) as f:
            s = json.load(f)
        self.side = s
        o, sc, d = s["optics"], s["scan"], s["detector"]
        self.kv = float(o["voltage_kV"])
        self.lam = wavelength_A(self.kv)
        self.alpha0 = float(o["semiangle_mrad"]) * 1e-3
        self.step = [float(x) for x in sc["step_A"]]
        self.ang = [float(x) * 1e-3 for x in d["sampling_mrad"]]
        self.centre0 = [float(x) for x in d["zero_frequency_pixel"]]
        self.rotation = float(sc.get("rotation_deg", 0.0))
        self.flip = bool(d.get("flip", False))
        ab = s["aberrations_true"]
        self.C = np.zeros(len(ABERR))
        self.phi = np.zeros(len(ABERR))
        for i, (name, n, m) in enumerate(ABERR):
            self.C[i] = float(ab.get(name + "_nm", 0.0)) * 10.0
            self.phi[i] = np.deg2rad(float(ab.get("phi" + name[1:] + "_deg", 0.0)))
        # a thin specimen: the aberrations at its mid-plane (the value ssb4d reconstruct takes
        # from the sidecar as well)
        if "expected_recovered_C10_nm_at_midplane" in ab:
            self.C[0] = float(ab["expected_recovered_C10_nm_at_midplane"]) * 10.0
        base = os.path.splitext(path)[0]
        self.truth = {"full": np.load(base + "_phase.npy").astype(np.float64),
                      "band": np.load(base + "_phase_bandlimited.npy").astype(np.float64)}
        self.ny, self.nx, self.dr, self.dc = self.counts.shape
        self._mean = None
        self.ssb4d_geom = None  # ssb4d reconstruct's geometry, once it ran

    def mean_pattern(self):
        if self._mean is None:
            c = np.asarray(self.counts).reshape(self.ny * self.nx, self.dr * self.dc)
            self._mean = c.sum(axis=0, dtype=np.int64).reshape(self.dr, self.dc) / float(self.ny * self.nx)
        return self._mean

    def disk(self):
        """ssb4d's BF disk (centre, selection radius px): from its reconstruct --json when that
        ran (self.ssb4d_geom), else SPEC 4's rule with an isodata threshold (Ridler-Calvard,
        from mean + std): pixels of the mean pattern above it, centroid, equal-area radius."""
        if self.ssb4d_geom:
            g = self.ssb4d_geom
            return [g["centre_row_px"], g["centre_col_px"]], g["selection_radius_px"]
        m = self.mean_pattern()
        t = m.mean() + m.std()
        for _ in range(200):
            hi, lo = m[m > t], m[m <= t]
            if not hi.size or not lo.size:
                break
            tn = 0.5 * (hi.mean() + lo.mean())
            if tn == t:
                break
            t = tn
        rr, cc = np.nonzero(m > t)
        return [rr.mean(), cc.mean()], np.sqrt(rr.size / np.pi)


def chi(d, vx, vy):
    """chi(v) in rad, SPEC 2's series; vx along scan rows, vy along scan cols."""
    r = np.hypot(vx, vy)
    alpha = d.lam * r
    ph = np.arctan2(vy, vx)
    s = np.zeros(np.broadcast(vx, vy).shape)
    for i, (name, n, m) in enumerate(ABERR):
        if d.C[i] == 0.0:
            continue
        t = d.C[i] * alpha ** (n + 1) / (n + 1)
        s = s + (t * np.cos(m * (ph - d.phi[i])) if m else t)
    return 2 * np.pi / d.lam * s


def aperture(d, vx, vy, kind):
    r = np.hypot(vx, vy)
    alpha = d.lam * r
    if kind == "hard":
        return (alpha <= d.alpha0).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(r > 0, np.sqrt((vx * d.ang[0]) ** 2 + (vy * d.ang[1]) ** 2) / np.where(r > 0, r, 1), d.ang[0])
    return np.clip((d.alpha0 - alpha) / w + 0.5, 0.0, 1.0)


def probe(d, vx, vy, kind):
    A = aperture(d, vx, vy, kind)
    return A * np.exp(-1j * chi(d, vx, vy)), A


def weights(d, cfg, kx, ky, qx, qy):
    """The multiplier W(q,k) applied to G and the per-k denominator D(q,k) (F = sum W G / sum D)
    for BF pixels at (kx, ky) (shape (c,1,1)) and frequencies qx (rows), qy (cols)."""
    Pk, Ak = probe(d, kx, ky, cfg["aperture"])
    P1, A1 = probe(d, kx - qx, ky - qy, cfg["aperture"])
    P2, A2 = probe(d, kx + qx, ky + qy, cfg["aperture"])
    t1 = P1 * np.conj(Pk)
    t2 = np.conj(P2) * Pk
    g = t1 - t2
    mag = np.abs(g)
    est = cfg["estimator"]
    open1, open2 = (A1 * Ak) > 0, (A2 * Ak) > 0
    if est in ("norm", "trotter", "flat"):
        with np.errstate(invalid="ignore", divide="ignore"):
            W = np.where(mag >= 1e-8, np.conj(g) / np.where(mag > 0, mag, 1), 0)
            # SPEC/ssb4d's degenerate rule (exact cancellation with a trotter open): -i t1's direction
            m1 = np.abs(t1)
            deg = (mag < 1e-8) & (m1 > 0)
            W = np.where(deg, np.conj(-1j * t1) / np.where(m1 > 0, m1, 1), W)
        if est == "trotter":
            W = np.where(open1 ^ open2, W, 0)
        used = (np.abs(W) > 0).astype(np.float64)
    else:
        W = np.conj(g)
        used = (mag > 0).astype(np.float64)
    W = W * (Ak > 0)
    if est == "wiener":
        D = mag ** 2
    elif est == "flat":
        D = mag * (np.abs(W) > 0)
    elif cfg["weight"] == "count":
        D = used
    else:
        D = np.ones(np.broadcast(W, used).shape)
    return W, D


def bf_pixels(d, cfg):
    centre = d.centre0 if cfg["centre"] == "sidecar" else d.disk()[0]
    rr, cc = np.meshgrid(np.arange(d.dr), np.arange(d.dc), indexing="ij")
    dy, dx = rr - centre[0], cc - centre[1]
    dk0, dk1 = d.ang[0] / d.lam, d.ang[1] / d.lam
    kx, ky = dy * dk0, dx * dk1
    if d.flip:
        kx, ky = ky, kx
    a = -np.deg2rad(d.rotation)
    kxr = kx * np.cos(a) + ky * np.sin(a)
    kyr = -kx * np.sin(a) + ky * np.cos(a)
    bf = cfg["bf"]
    if bf == "aperture":
        sel = aperture(d, kxr, kyr, cfg["aperture"]) > 0
    else:
        rad = d.disk()[1] if bf == "disk" else float(bf)
        sel = dy * dy + dx * dx <= rad * rad
    idx = np.flatnonzero(sel.ravel())
    return idx, kxr.ravel()[idx], kyr.ravel()[idx]


def reconstruct(d, cfg, chunk=64, parts=False):
    """The phase image of the numpy SSB with the choices cfg (cfg["eps"], if there, replaces
    FLAT_EPS or WIENER_EPS). parts: (sum of W G, sum of D, N_bf, dc) instead, before the division."""
    idx, kx, ky = bf_pixels(d, cfg)
    nbf = len(idx)
    c = np.asarray(d.counts).reshape(d.ny, d.nx, d.dr * d.dc)
    qx = np.fft.fftfreq(d.ny, d.step[0])[:, None]
    qy = np.fft.fftfreq(d.nx, d.step[1])[None, :]
    nyq_r = d.ny // 2 if d.ny % 2 == 0 else None
    nyq_c = d.nx // 2 if d.nx % 2 == 0 else None
    num = np.zeros((d.ny, d.nx), complex)
    den = np.zeros((d.ny, d.nx))
    phs = np.zeros((d.ny, d.nx))
    kept = []  # the per-pixel spectra, for the mean phase
    dcsum = 0.0
    for s in range(0, nbf, chunk):
        sl = slice(s, min(s + chunk, nbf))
        I = np.moveaxis(c[:, :, idx[sl]].astype(np.float64), 2, 0)
        G = np.fft.fft2(I, axes=(1, 2))
        dcsum += G[:, 0, 0].real.sum()
        k1, k2 = kx[sl][:, None, None], ky[sl][:, None, None]
        W, D = weights(d, cfg, k1, k2, qx, qy)
        if cfg["nyquist"] == "avg":
            # docs/ssb-math.md: a Nyquist row / column bin averages W (and D) at its two aliases
            # +-q_nyq, the corner bin at its four
            W, D = W.copy(), D.copy()
            qxn = None if nyq_r is None else np.array([[-qx[nyq_r, 0]]])
            qyn = None if nyq_c is None else np.array([[-qy[0, nyq_c]]])
            if nyq_r is not None:
                Wr, Dr = weights(d, cfg, k1, k2, qxn, qy)      # row nyq at +q_nyq, every column
            if nyq_c is not None:
                Wc, Dc = weights(d, cfg, k1, k2, qx, qyn)      # column nyq at +q_nyq, every row
            if nyq_r is not None and nyq_c is not None:
                Wb, Db = weights(d, cfg, k1, k2, qxn, qyn)     # the corner at (+, +)
                cw = (W[:, nyq_r, nyq_c] + Wr[:, 0, nyq_c] + Wc[:, nyq_r, 0] + Wb[:, 0, 0]) / 4
                cd = (D[:, nyq_r, nyq_c] + Dr[:, 0, nyq_c] + Dc[:, nyq_r, 0] + Db[:, 0, 0]) / 4
            if nyq_r is not None:
                W[:, nyq_r, :] = (W[:, nyq_r, :] + Wr[:, 0, :]) / 2
                D[:, nyq_r, :] = (D[:, nyq_r, :] + Dr[:, 0, :]) / 2
            if nyq_c is not None:
                W[:, :, nyq_c] = (W[:, :, nyq_c] + Wc[:, :, 0]) / 2
                D[:, :, nyq_c] = (D[:, :, nyq_c] + Dc[:, :, 0]) / 2
            if nyq_r is not None and nyq_c is not None:
                W[:, nyq_r, nyq_c], D[:, nyq_r, nyq_c] = cw, cd
        elif cfg["nyquist"] == "zero":
            W, D = W.copy(), D.copy()
            if nyq_r is not None:
                W[:, nyq_r, :] = 0
                D[:, nyq_r, :] = 0
            if nyq_c is not None:
                W[:, :, nyq_c] = 0
                D[:, :, nyq_c] = 0
        Ck = G * W
        num += Ck.sum(axis=0)
        den += D.sum(axis=0)
        if cfg["phase"] == "mean":
            kept.append(Ck)  # its DC is set below, once dc is known
    dc = dcsum / nbf
    if parts:
        return num, den, nbf, dc
    if cfg["estimator"] == "wiener":
        F = num / (den + cfg.get("eps", WIENER_EPS) * nbf)
    elif cfg["estimator"] == "flat":
        F = num / (den + cfg.get("eps", FLAT_EPS) * nbf)
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            F = np.where(den > 0, num / np.where(den > 0, den, 1), 0)
    if cfg["phase"] == "imag":
        F[0, 0] = 0
        return np.fft.ifft2(F).imag
    F[0, 0] = dc
    if cfg["phase"] == "arg":
        return np.angle(np.fft.ifft2(F))
    for Ck in kept:
        Ck[:, 0, 0] = dc
        phs += np.angle(np.fft.ifft2(Ck, axes=(1, 2))).sum(axis=0)
    return phs / nbf


def deramp(a):
    y, x = np.mgrid[0:a.shape[0], 0:a.shape[1]]
    M = np.stack([np.ones(a.size), y.ravel(), x.ravel()], 1)
    coef, *_ = np.linalg.lstsq(M, a.ravel(), rcond=None)
    return a - (M @ coef).reshape(a.shape)


def pearson(a, b, ramp=False):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if ramp:
        a, b = deramp(a), deramp(b)
    a = a - a.mean()
    b = b - b.mean()
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def run_ssb4d(exe, data, out, extra=()):
    cmd = [exe, "reconstruct", data, "-o", out, "--force", "-q", "--json", "--threads", "2"] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit("ssb4d reconstruct failed: " + r.stderr)
    return np.load(out).astype(np.float64), json.loads(r.stdout)


def corr_row(d, img, ramp):
    return {t: pearson(img, d.truth[t], ramp) for t in ("full", "band")}


def ingredient_table(d, exe, ramp, tmp):
    """Plain SSB, then one ingredient at a time towards ssb4d's choice, then all, then ssb4d."""
    rows = []
    if exe:
        im, js = run_ssb4d(exe, d.path, os.path.join(tmp, "ssb4d.npy"))
        d.ssb4d_geom = js["geometry"]
    img = reconstruct(d, PLAIN)
    rows.append(("plain numpy SSB", corr_row(d, img, ramp)))
    for key in ("aperture", "bf", "centre", "nyquist", "estimator", "weight", "phase"):
        if SSB4D[key] != PLAIN[key]:
            cfg = dict(PLAIN, **{key: SSB4D[key]})
            rows.append(("plain, %s=%s" % (key, SSB4D[key]), corr_row(d, reconstruct(d, cfg), ramp)))
    for key, val in (("estimator", "norm"), ("estimator", "matched"), ("estimator", "wiener"),
                     ("estimator", "flat"), ("weight", "count"), ("phase", "mean")):
        if PLAIN.get(key) != val:
            cfg = dict(PLAIN, **{key: val})
            lab = "plain, %s=%s" % (key, val)
            if not any(r[0] == lab for r in rows):
                rows.append((lab, corr_row(d, reconstruct(d, cfg), ramp)))
    mine = reconstruct(d, SSB4D)
    rows.append(("numpy with all of ssb4d's choices", corr_row(d, mine, ramp)))
    for key, val in (("weight", "count"), ("estimator", "wiener"), ("estimator", "flat")):
        rows.append(("ssb4d's choices, %s=%s" % (key, val), corr_row(d, reconstruct(d, dict(SSB4D, **{key: val})), ramp)))
    if exe:
        rows.append(("ssb4d reconstruct", corr_row(d, im, ramp)))
        rows.append(("  (numpy-as-ssb4d vs ssb4d image)", {"full": pearson(mine, im), "band": float("nan")}))
    return rows


def print_rows(rows, title):
    print(title)
    print("| %-42s | %7s | %7s |" % ("variant", "r full", "r band"))
    print("|%s|%s|%s|" % ("-" * 44, "-" * 9, "-" * 9))
    for lab, r in rows:
        print("| %-42s | %7.4f | %7.4f |" % (lab, r["full"], r["band"]))


def parse_set(s):
    cfg = dict(PLAIN)
    if s:
        for kv in s.split(","):
            k, v = kv.split("=")
            if k not in CHOICES:
                sys.exit("unknown choice " + k)
            if k != "bf" and v not in CHOICES[k]:
                sys.exit("%s must be one of %s" % (k, CHOICES[k]))
            cfg[k] = v
    return cfg


STUDY = [  # (label, ssb4d simulate flags): tiny = 32^2 scan x 48^2 detector, 300 kV, dose 2e4
    ("C21=1", ["--preset", "tiny", "--aberr", "C21=1,phi21=30"]),
    ("C21=3", ["--preset", "tiny", "--aberr", "C21=3,phi21=30"]),
    ("C21=5", ["--preset", "tiny", "--aberr", "C21=5,phi21=30"]),
    ("C21=3, C12=0", ["--preset", "tiny", "--c12", "0", "--aberr", "C21=3,phi21=30"]),
    ("C21=3, dose 2e3", ["--preset", "tiny", "--dose", "2000", "--aberr", "C21=3,phi21=30"]),
    ("C21=3, dose 2e5", ["--preset", "tiny", "--dose", "200000", "--aberr", "C21=3,phi21=30"]),
    ("C21=3, 200 kV", ["--preset", "tiny", "--kv", "200", "--aberr", "C21=3,phi21=30"]),
    ("C21=3, det 64", ["--preset", "tiny", "--detector", "64", "--aberr", "C21=3,phi21=30"]),
    ("C21=3, scan rot 10 (aperiodic)", ["--preset", "tiny", "--scan-rotation", "10", "--aberr", "C21=3,phi21=30"]),
    ("C21=100 (coma that matters)", ["--preset", "tiny", "--aberr", "C21=100,phi21=30"]),
    ("C21=3, 64^2 scan x 64^2 det", ["--preset", "small", "--scan", "64", "--scan-cells", "6", "--aberr", "C21=3,phi21=30"]),
]
QUICK = [0, 1, 4]
# the study's columns: (label, choices); "ssb4d" is the engine itself
STUDY_COLS = [
    ("plain", PLAIN),
    ("ssb4d", None),
    ("soft", dict(PLAIN, aperture="soft")),
    ("disk", dict(PLAIN, bf="disk", centre="disk")),
    ("nyq avg", dict(PLAIN, nyquist="avg")),
    ("norm", dict(PLAIN, estimator="norm")),
    ("count", dict(PLAIN, weight="count")),
    ("wiener", dict(PLAIN, estimator="wiener")),
    ("ssb4d+count", dict(SSB4D, weight="count")),
    ("ssb4d+wiener", dict(SSB4D, estimator="wiener")),
    ("ssb4d/T", dict(SSB4D, estimator="flat")),
    ("ssb4d transfer", "transfer"),   # ssb4d reconstruct --estimator transfer
]


def study(exe, quick, ramp, keep=None):
    cases = [STUDY[i] for i in QUICK] if quick else STUDY
    res = []
    with tempfile.TemporaryDirectory() as tmp:
        work = keep or tmp
        for i, (label, flags) in enumerate(cases):
            tag = "".join(ch if ch.isalnum() else "_" for ch in "_".join(flags))
            data = os.path.join(work, "case_%s.npy" % tag)  # named by its flags: --keep reuses it
            if not os.path.exists(data):
                cmd = [exe, "simulate", "-q", "--force", "--threads", "2", "-o", data] + flags
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode:
                    sys.exit("simulate failed: " + r.stderr)
            d = Data(data)
            im, js = run_ssb4d(exe, data, os.path.join(tmp, "ssb4d.npy"))
            d.ssb4d_geom = js["geometry"]
            imt, _ = run_ssb4d(exe, data, os.path.join(tmp, "ssb4d_t.npy"), ["--estimator", "transfer"])
            row = {}
            for col, cfg in STUDY_COLS:
                img = im if cfg is None else imt if cfg == "transfer" else reconstruct(d, cfg)
                row[col] = corr_row(d, img, ramp)
            check = pearson(reconstruct(d, SSB4D), im)
            res.append((label, row, check))
            print("  %s done (numpy-as-ssb4d vs ssb4d: %.6f)" % (label, check), file=sys.stderr, flush=True)
    for t in ("band", "full"):
        print("\nPearson r against the %s truth%s" % ("band-limited" if t == "band" else "plain",
                                                     ", plane removed" if ramp else ""))
        print("| case | " + " | ".join(c for c, _ in STUDY_COLS) + " |")
        print("|---|" + "---|" * len(STUDY_COLS))
        for label, row, _ in res:
            print("| %s | " % label + " | ".join("%.4f" % row[c][t] for c, _ in STUDY_COLS) + " |")
    return res


# The regulariser of the transfer-corrected estimator (ssb4d --estimator transfer, SSB4D_TRANSFER_EPS):
# r against the band-limited truth for several eps over a family of cases, each at its true
# aberrations (docs/ssb-math.md "Image at the truth").
EPS_VALUES = (0.0, 0.03, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0)
EPS_STUDY = [
    ("300 kV, dose 5e2", ["--preset", "tiny", "--dose", "500", "--aberr", "C21=3,phi21=30"]),
    ("300 kV, dose 2e3", ["--preset", "tiny", "--dose", "2000", "--aberr", "C21=3,phi21=30"]),
    ("300 kV, dose 5e3", ["--preset", "tiny", "--dose", "5000", "--aberr", "C21=3,phi21=30"]),
    ("300 kV, dose 2e4", ["--preset", "tiny", "--aberr", "C21=3,phi21=30"]),
    ("300 kV, dose 2e4, seed 2", ["--preset", "tiny", "--seed", "2", "--aberr", "C21=3,phi21=30"]),
    ("300 kV, dose 2e5", ["--preset", "tiny", "--dose", "200000", "--aberr", "C21=3,phi21=30"]),
    ("200 kV, dose 2e3", ["--preset", "tiny", "--kv", "200", "--dose", "2000", "--aberr", "C21=3,phi21=30"]),
    ("200 kV, dose 2e4", ["--preset", "tiny", "--kv", "200", "--aberr", "C21=3,phi21=30"]),
    ("C21 = 100 nm, dose 2e3", ["--preset", "tiny", "--dose", "2000", "--aberr", "C21=100,phi21=30"]),
    ("C21 = 100 nm, dose 2e4", ["--preset", "tiny", "--aberr", "C21=100,phi21=30"]),
    ("no coma, dose 2e3", ["--preset", "tiny", "--dose", "2000"]),
    ("no coma, dose 2e4", ["--preset", "tiny"]),
    ("15 mrad, dose 2e3", ["--preset", "tiny", "--semiangle", "15", "--dose", "2000", "--aberr", "C21=3,phi21=30"]),
    ("15 mrad, dose 2e4", ["--preset", "tiny", "--semiangle", "15", "--aberr", "C21=3,phi21=30"]),
    ("small preset 128^2 scan, dose 2e3", ["--preset", "small", "--dose", "2000", "--aberr", "C21=3,phi21=30"]),
    ("Au, dose 2e3", ["--preset", "tiny", "--specimen", "au", "--dose", "2000", "--aberr", "C21=3,phi21=30"]),
    ("Au, dose 2e4", ["--preset", "tiny", "--specimen", "au", "--aberr", "C21=3,phi21=30"]),
    ("5 cells thick, dose 2e4", ["--preset", "tiny", "--cells-z", "5", "--aberr", "C21=3,phi21=30"]),
    ("scan rotated 10, dose 2e4", ["--preset", "tiny", "--scan-rotation", "10", "--aberr", "C21=3,phi21=30"]),
]


def simulate_case(exe, work, flags):
    tag = "".join(ch if ch.isalnum() else "_" for ch in "_".join(flags))
    data = os.path.join(work, "case_%s.npy" % tag)  # named by its flags: --keep reuses it
    if not os.path.exists(data):
        cmd = [exe, "simulate", "-q", "--force", "--threads", "2", "-o", data] + flags
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit("simulate failed: " + r.stderr)
    return data


def eps_study(exe, keep=None):
    """r (band truth) of the transfer-corrected estimator for each of EPS_VALUES, beside the plain
    SSB, SPEC's phase of the mean (ssb4d) and ssb4d --estimator transfer itself."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = keep or tmp
        for label, flags in EPS_STUDY:
            data = simulate_case(exe, work, flags)
            d = Data(data)
            im, js = run_ssb4d(exe, data, os.path.join(tmp, "ssb4d.npy"))
            d.ssb4d_geom = js["geometry"]
            imt, _ = run_ssb4d(exe, data, os.path.join(tmp, "ssb4d_t.npy"), ["--estimator", "transfer"])
            num, den, nbf, dc = reconstruct(d, dict(SSB4D, estimator="flat"), parts=True)
            r = {}
            for eps in EPS_VALUES:
                with np.errstate(invalid="ignore", divide="ignore"):
                    F = np.where(den + eps * nbf > 0, num / np.where(den + eps * nbf > 0, den + eps * nbf, 1), 0)
                F[0, 0] = dc
                r[eps] = pearson(np.angle(np.fft.ifft2(F)), d.truth["band"])
            rows.append((label, pearson(reconstruct(d, PLAIN), d.truth["band"]), pearson(im, d.truth["band"]), r,
                         pearson(imt, d.truth["band"])))
            print("  %s done" % label, file=sys.stderr, flush=True)
    print("\nPearson r against the band-limited truth, each case at its true aberrations (tiny preset)")
    print("| case | plain | SPEC (default) | " + " | ".join("eps %g" % e for e in EPS_VALUES) + " | ssb4d transfer |")
    print("|---|---|---|" + "---|" * len(EPS_VALUES) + "---|")
    for label, rp, rs, r, rt in rows:
        print("| %s | %.4f | %.4f | " % (label, rp, rs) + " | ".join("%.4f" % r[e] for e in EPS_VALUES)
              + " | %.4f |" % rt)
    # how far each eps falls below the best eps of each case: mean and worst
    short = {e: [max(r.values()) - r[e] for _, _, _, r, _ in rows] for e in EPS_VALUES}
    print("| below the case's best eps: mean | | | " + " | ".join("%.4f" % np.mean(short[e]) for e in EPS_VALUES) + " | |")
    print("| below the case's best eps: worst | | | " + " | ".join("%.4f" % np.max(short[e]) for e in EPS_VALUES) + " | |")
    gain = [rt - rs for _, _, rs, _, rt in rows]
    print("ssb4d transfer - SPEC: mean %+.4f, min %+.4f, max %+.4f" % (np.mean(gain), np.min(gain), np.max(gain)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?")
    ap.add_argument("--ssb4d", help="the ssb4d executable, to compare its reconstruct")
    ap.add_argument("--set", help="choices for one numpy reconstruction, e.g. aperture=soft,nyquist=avg")
    ap.add_argument("--table", action="store_true", help="the ingredient table")
    ap.add_argument("--ramp", action="store_true", help="remove a least-squares plane before correlating")
    ap.add_argument("--study", metavar="SSB4D", help="simulate the study's cases with this ssb4d and tabulate")
    ap.add_argument("--quick", action="store_true", help="with --study: three cases only")
    ap.add_argument("--keep", help="with --study, --eps-study: keep (and reuse) the simulated cases in this folder")
    ap.add_argument("--eps-study", metavar="SSB4D",
                    help="the transfer-corrected estimator's eps over a family of cases (simulated with this ssb4d)")
    ap.add_argument("--save", help="write the numpy phase image (--set) to this .npy")
    ap.add_argument("--check", action="store_true",
                    help="one JSON line: r of the plain numpy SSB, of ssb4d (--ssb4d) and of the numpy "
                    "SSB with ssb4d's choices against ssb4d's image (tests/cli/ssb_truth.sh)")
    ap.add_argument("--skip-plain", action="store_true", help="with --check: leave the plain SSB out (null)")
    ap.add_argument("--ssb4d-arg", action="append", default=[], metavar="ARG",
                    help="an extra argument for ssb4d reconstruct (repeatable), e.g. --ssb4d-arg=--aberr=C21=-3")
    a = ap.parse_args()
    if a.study:
        study(a.study, a.quick, a.ramp, a.keep)
        return
    if a.eps_study:
        eps_study(a.eps_study, a.keep)
        return
    if not a.data:
        ap.error("DATA.npy needed")
    d = Data(a.data)
    with tempfile.TemporaryDirectory() as tmp:
        if a.check:
            if not a.ssb4d:
                ap.error("--check needs --ssb4d")
            im, js = run_ssb4d(a.ssb4d, a.data, os.path.join(tmp, "ssb4d.npy"), a.ssb4d_arg)
            d.ssb4d_geom = js["geometry"]
            rs = corr_row(d, im, a.ramp)
            # the transfer-corrected estimator: ssb4d's against the numpy one with ssb4d's choices
            imt, _ = run_ssb4d(a.ssb4d, a.data, os.path.join(tmp, "ssb4d_t.npy"), a.ssb4d_arg + ["--estimator", "transfer"])
            rt = corr_row(d, imt, a.ramp)
            rp = {"band": None, "full": None} if a.skip_plain else corr_row(d, reconstruct(d, PLAIN), a.ramp)
            print(json.dumps({"plain_band": rp["band"], "plain_full": rp["full"], "ssb4d_band": rs["band"],
                              "ssb4d_full": rs["full"], "numpy_as_ssb4d_vs_ssb4d": pearson(reconstruct(d, SSB4D), im),
                              "transfer_band": rt["band"], "transfer_full": rt["full"],
                              "numpy_flat_vs_ssb4d_transfer": pearson(reconstruct(d, dict(SSB4D, estimator="flat")), imt),
                              "aberrations": js["aberrations"]}))
            return
        if a.table:
            print_rows(ingredient_table(d, a.ssb4d, a.ramp, tmp), "%s (%s)" % (a.data, "ramp removed" if a.ramp else "Pearson"))
            return
        cfg = parse_set(a.set)
        if a.ssb4d:
            im, js = run_ssb4d(a.ssb4d, a.data, os.path.join(tmp, "ssb4d.npy"), a.ssb4d_arg)
            d.ssb4d_geom = js["geometry"]
        img = reconstruct(d, cfg)
        if a.save:
            np.save(a.save, img.astype(np.float32))
        r = corr_row(d, img, a.ramp)
        print(json.dumps({"choices": cfg, "r_full": r["full"], "r_band": r["band"]}))
        if a.ssb4d:
            r2 = corr_row(d, im, a.ramp)
            print(json.dumps({"ssb4d": True, "r_full": r2["full"], "r_band": r2["band"],
                              "r_numpy_vs_ssb4d": pearson(img, im)}))


if __name__ == "__main__":
    main()
