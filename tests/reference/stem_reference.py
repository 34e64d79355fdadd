#!/usr/bin/python3
"""stem_reference.py — an independent float64 STEM multislice for the conventions an outside code
may differ in (docs/refine-conventions.md, "Conventions"; tests/test_sim_conventions.c).

Written from the textbook (Kirkland 2010, ch. 5–6), numpy only, sharing no code with the
simulator (the Peng 1996 f_e, λ and σ are bloch_wave.py's, typed in from the tables):

* the probe    ψ0(r) = Σ_k A(k) e^{−iχ(k)} e^{−2πi k·R} e^{2πi k·r},  χ = πλk²(C10 + C12 cos 2(φ − φ12)),
  φ = atan2(k_col, k_row) (Krivanek; C10 = −Δf, so C10 < 0 is underfocus: the crossover lies
  at depth z = −C10 below the entrance), A the aperture α0 with a one-pixel linear edge
  (SPEC §5.2), Σ|A|² = 1; R the probe position (row, col) Å;
* each atomic layer: ψ ← t·ψ, t = e^{iσ v_z} (v_z the layer's projected potential from its
  Fourier series, band-limited), then the Fresnel propagator over Δz = a/2,
  p(k) = exp(−iπλΔz|k|² − 2πiΔz k·τ) = exp(−iπλΔz|k + τ/λ|²) up to a constant (τ the beam
  tilt in rad: the incident wave e^{2πi (τ/λ)·r});
* the detector: |FT[ψ_exit]|² (forward DFT e^{−2πi k·r}), pixel (d, e) at k = ((d − D/2),
  (e − D/2))/L, row before column, the 2/3 antialias band of the grid (|k| <= M/(3L)).

For each case the table holds the reference pattern and, beside it, the pattern an outside code
with ONE convention changed would compute (χ's sign, the probe position's sign, the tilt's sign,
the propagator conjugated, the potential's sign, row/column swapped): the C test asserts that
`ssb4d`'s sim_pattern_at matches the reference and is far from every variant.

  /usr/bin/python3 tests/reference/stem_reference.py > tests/reference/stem_reference.tsv
  /usr/bin/python3 tests/reference/stem_reference.py --check tests/reference/stem_reference.tsv
  /usr/bin/python3 tests/reference/stem_reference.py --explain

--explain prints the physics behind the conventions (the focus depth of C10 in vacuum and the
channelling of a probe on a column vs depth). --check exits 0 when the table is reproduced
within 1e-9 of the peak.
"""
import math
import os
import sys

try:
    import numpy as np
except ImportError:  # pragma: no cover
    print("stem_reference.py: numpy is missing (SKIP)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bloch_wave import PENG, LAYERS, CRYSTALS, optics  # noqa: E402  (typed-in tables, CODATA)

VPROJ = 6.62607015e-34**2 / (2 * math.pi * 9.1093837015e-31 * 1.602176634e-19) * 1e20  # V·Å²


def layer_potential(layer, a, W, M):
    """v_z (V·Å) of one atomic layer of a W×W-cell window on an M×M grid, from its Fourier
    series over the reciprocal-lattice vectors inside the band |G| <= M/(3·W·a)."""
    f = np.fft.fftfreq(M, 1.0 / M)  # integer frequency index n: k = n/L
    n_r, n_c = np.meshgrid(f, f, indexing="ij")
    L = W * a
    kmax2 = (M / (3.0 * L)) ** 2
    lattice = (np.rint(n_r) % W == 0) & (np.rint(n_c) % W == 0)
    k2 = (n_r / L) ** 2 + (n_c / L) ** 2
    keep = lattice & (k2 <= kmax2)
    h, k = n_r / W, n_c / W  # Miller indices of the cell
    s2 = k2 / 4.0
    coeff = np.zeros((M, M), complex)
    for z, x, y in layer:
        ai, bi = PENG[z]
        fe = sum(ai[i] * np.exp(-bi[i] * s2) for i in range(5))
        coeff += VPROJ * fe * np.exp(-2j * math.pi * (h * x + k * y))
    coeff = coeff * keep / (a * a)
    return np.fft.ifft2(coeff).real * M * M, k2 <= kmax2


def pattern(c, chi_sign=1.0, pos_sign=1.0, tilt_sign=1.0, prop_sign=1.0, v_sign=1.0,
            swap=False, layers_reversed=False, depth_probe=None):
    """The D×D far-field intensity of case c (a dict); the keyword arguments switch ONE
    convention to the alternative an outside code might use. swap exchanges row and column in
    the probe position, the tilt and the aberration angle (not in the crystal); layers_reversed
    stacks the cell's atomic layers from the exit instead of the entrance."""
    a = CRYSTALS[c["crystal"]][0]
    lam, sigma = optics(c["kv"])
    W, M, D = c["W"], c["M"], c["D"]
    L = W * a
    kf = np.fft.fftfreq(M, L / M)
    kr, kc = np.meshgrid(kf, kf, indexing="ij")
    k2 = kr**2 + kc**2
    band = k2 <= (M / (3.0 * L)) ** 2
    pos = np.array(c["pos"][::-1] if swap else c["pos"]) * pos_sign
    tilt = np.array(c["tilt"][::-1] if swap else c["tilt"]) * 1e-3 * tilt_sign
    phi12 = math.radians(90.0 - c["phi12"] if swap else c["phi12"])
    # probe: the aperture's one-pixel edge (angular pixel λ/L), then χ in Å
    alpha = lam * np.sqrt(k2)
    A = np.clip((c["semiangle"] * 1e-3 - alpha) / (lam / L) + 0.5, 0.0, 1.0) * band
    A[0, 0] = 1.0
    phi = np.arctan2(kc, kr)
    chi = math.pi * lam * k2 * (c["C10"] * 10 + c["C12"] * 10 * np.cos(2 * (phi - phi12)))
    P = A * np.exp(-1j * chi_sign * chi) / math.sqrt(np.sum(A**2))
    psi = np.fft.ifft2(P * np.exp(-2j * math.pi * (kr * pos[0] + kc * pos[1]))) * M * M
    # the layers' transmission functions, band-limited
    trans = []
    layers = LAYERS[c["crystal"]]
    for layer in (layers[::-1] if layers_reversed else layers):
        v, _ = layer_potential(layer, a, W, M)
        t = np.exp(1j * v_sign * sigma * v)
        trans.append(np.fft.ifft2(np.fft.fft2(t) * band))
    dz = a / len(trans)
    prop = np.exp(prop_sign * (-1j * math.pi * lam * dz * k2
                               - 2j * math.pi * dz * (kr * tilt[0] + kc * tilt[1]))) * band
    ns = c["cells"] * len(trans)
    for s in range(ns):
        if depth_probe is not None:
            depth_probe(s * dz, psi)
        psi = psi * trans[s % len(trans)]
        spec = np.fft.fft2(psi) / (M * M)
        if s + 1 == ns:
            break
        psi = np.fft.ifft2(spec * prop) * (M * M)
    inten = np.abs(spec) ** 2 * band
    idx = (np.arange(D) - D // 2) % M
    return inten[np.ix_(idx, idx)]


# Each case isolates one convention: (name, parameters, variants). W = 2 cells on M = 64 (M/W =
# 32: the cell grid of the simulator is the same function), D = 24 (the BF disk ~10 px), 300 kV,
# 25 mrad, det-oversample 1 (the probe wraps in the window: both codes alike).
BASE = dict(crystal="srtio3", kv=300.0, semiangle=25.0, C10=0.0, C12=0.0, phi12=0.0,
            tilt=(0.0, 0.0), cells=10, W=2, M=64, D=24, pos=(0.0, 0.0))
CASES = [
    # a. χ's sign: C10 = −2 nm focuses 2 nm inside a 3.9 nm SrTiO3 on a Sr column; +2 nm
    #    focuses 2 nm above the entrance
    ("defocus_sign", dict(C10=-2.0), [("chi_flip", dict(chi_sign=-1.0))]),
    # a'. C12 and φ12's direction (measured from the row axis towards the column axis)
    ("astigmatism", dict(C10=-1.0, C12=2.0, phi12=20.0, pos=(0.8, 0.3)),
     [("chi_flip", dict(chi_sign=-1.0)), ("swap", dict(swap=True))]),
    # b. the probe position's sign and axis order, off every symmetry element
    ("position_sign", dict(C10=-1.0, pos=(1.17, 0.59)),
     [("pos_flip", dict(pos_sign=-1.0)), ("swap", dict(swap=True))]),
    # c. the tilt's sign and axis order in STEM (the plane-wave case is test_sim_reference's
    #    thickness series)
    ("tilt_sign", dict(C10=-1.0, tilt=(3.0, -2.0), cells=20, pos=(0.0, 0.0)),
     [("tilt_flip", dict(tilt_sign=-1.0)), ("swap", dict(swap=True))]),
    # d. the propagator's sign (the Fresnel phase −πλΔz k² and the tilt term together
    #    conjugated), with the probe focused at depth 2 nm
    ("propagator_sign", dict(C10=-2.0, cells=10, pos=(0.4, 0.2)),
     [("prop_conj", dict(prop_sign=-1.0))]),
    # e. the potential's sign: the electron is attracted by the nuclei (t = e^{+iσv})
    ("potential_sign", dict(crystal="au", kv=200.0, C10=-1.0, cells=3, pos=(0.5, 0.3)),
     [("v_flip", dict(v_sign=-1.0))]),
    # e'. Si's four atomic layers per cell, stacked from the entrance (z = 0, ¼, ½, ¾), against
    #    the stack reversed; M/W = 50 keeps every lattice vector off the band's edge
    ("si_layers", dict(crystal="si", C10=-2.0, cells=8, M=100, D=32, pos=(0.7, 0.4)),
     [("layers_reversed", dict(layers_reversed=True)), ("pos_flip", dict(pos_sign=-1.0))]),
]


def case_dict(over):
    c = dict(BASE)
    c.update(over)
    return c


def table():
    out = ["# stem_reference.py: STEM patterns of an independent float64 multislice (Kirkland 2010),",
           "# for test_sim_conventions. 'case' lines: name crystal kV semiangle_mrad C10_nm C12_nm",
           "# phi12_deg tilt_row tilt_col (mrad) cells window_cells grid det pos_row pos_col (A);",
           "# then 'pattern KIND' lines of det*det intensities (row-major, det_row first), KIND",
           "# 'ref' (the textbook conventions) or a variant with one convention changed."]
    for name, over, variants in CASES:
        c = case_dict(over)
        out.append(f"case {name} {c['crystal']} {c['kv']:g} {c['semiangle']:g} {c['C10']:g} "
                   f"{c['C12']:g} {c['phi12']:g} {c['tilt'][0]:g} {c['tilt'][1]:g} {c['cells']} "
                   f"{c['W']} {c['M']} {c['D']} {c['pos'][0]:.6f} {c['pos'][1]:.6f}")
        for kind, kw in [("ref", {})] + variants:
            p = pattern(c, **kw)
            out.append(f"pattern {kind} " + " ".join(f"{v:.9e}" for v in p.ravel()))
    return "\n".join(out) + "\n"


def explain():
    """The physics the conventions encode, computed with this reference alone."""
    lam, _ = optics(300.0)
    # d. in vacuum, the probe with C10 = −z is focused at depth z: its peak intensity after
    # propagating Δ is largest at Δ = z (the propagator exp(−iπλΔk²) adds +Δ to C10)
    M, L = 256, 40.0
    kf = np.fft.fftfreq(M, L / M)
    kr, kc = np.meshgrid(kf, kf, indexing="ij")
    k2 = kr**2 + kc**2
    A = (lam * np.sqrt(k2) <= 25e-3).astype(float)
    for c10_nm in (-5.0, 5.0):
        peaks = []
        for dz_nm in np.arange(-10.0, 10.5, 1.0):
            psi = np.fft.ifft2(A * np.exp(-1j * math.pi * lam * k2 * (c10_nm + dz_nm) * 10))
            peaks.append((float(np.max(np.abs(psi) ** 2)), dz_nm))
        print(f"vacuum, C10 = {c10_nm:+.0f} nm: the probe is sharpest after propagating "
              f"{max(peaks)[1]:+.0f} nm (focus at depth -C10)")
    # a. channelling: a probe on a Sr column of SrTiO3 (W = 6 cells), the intensity within
    # 0.4 Å of the column vs depth, for C10 = −4 nm (focus 4 nm inside) and +4 nm
    a = CRYSTALS["srtio3"][0]
    for c10 in (-4.0, 4.0):
        c = case_dict(dict(C10=c10, cells=26, W=6, M=192, D=24, pos=(0.0, 0.0)))
        Lw = c["W"] * a
        x = np.arange(c["M"]) * Lw / c["M"]
        d = np.minimum(x, Lw - x)
        near = (d[:, None] ** 2 + d[None, :] ** 2) <= 0.4**2
        prof = []
        pattern(c, depth_probe=lambda z, psi: prof.append(
            (z, float(np.sum(np.abs(psi[near]) ** 2) / np.sum(np.abs(psi) ** 2)))))
        best = max(prof, key=lambda t: t[1])
        line = " ".join(f"{z / 10:.1f}:{f:.3f}" for z, f in prof[::4])
        print(f"SrTiO3 Sr column, C10 = {c10:+.0f} nm: fraction within 0.4 A of the column by "
              f"depth (nm:fraction) {line}; largest {best[1]:.3f} at {best[0] / 10:.2f} nm")


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--explain":
        explain()
        return 0
    text = table()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2]) as f:
            old = f.read().split("\n")
        new = text.split("\n")
        if len(old) != len(new):
            print(f"stem_reference.py: {len(new)} lines, the table has {len(old)}")
            return 1
        worst = 0.0
        for lo, ln in zip(old, new):
            a, b = lo.split(), ln.split()
            if a[:1] == ["pattern"] and a[:2] == b[:2] and len(a) == len(b):
                x, y = np.array(a[2:], float), np.array(b[2:], float)
                worst = max(worst, float(np.max(np.abs(x - y)) / np.max(np.abs(x))))
            elif a != b:
                print(f"stem_reference.py: line differs: {ln[:80]!r} against {lo[:80]!r}")
                return 1
        print(f"stem_reference.py: largest difference against the table {worst:.2e} of the peak")
        return 0 if worst <= 1e-9 else 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
