#!/usr/bin/python3
"""bloch_wave.py — independent dynamical references for `ssb4d simulate`'s multislice
(docs/simulate.md, "Checked against references"; tests/test_sim_reference.c).

A plane wave along [001] of a perfect crystal, computed here in two ways that share no code with
the simulator (numpy only, double precision; the Peng et al. 1996 five-Gaussian f_e of
International Tables C Table 4.3.2.2 typed in again; λ, σ and h²/(2π m0 e) from CODATA 2018):

* Bloch waves (no slices, no FFT, no transmission function). In the forward-scattering
  (high-energy) approximation the beam amplitudes φ_g(z) obey

      dφ_g/dz = i Σ_h A_gh φ_h,   A_gh = −πλ|g + k0|² δ_gh + σ V_{g−h}

  (the standard Bloch-wave eigenvalue method, e.g. Kirkland 2010, ch. 5: 2π s_g =
  −πλ(|g + k0|² − |k0|²) is the excitation error), with k0 = τ/λ the transverse wave vector of
  a beam tilted by τ (rad) and V_g the Fourier coefficients of the potential averaged along the
  beam (the zero-order Laue zone, ZOLZ). A is Hermitian: φ(t) = C exp(iΛt) C† φ(0).
  V_g = (h²/(2π m0 e)) / a³ · Σ_atoms f_e(|g|/2) e^{−2πi g·r_j}.
* A plain multislice of the same layers as the simulator (each atomic layer's transmission,
  then the Fresnel propagator over a/2 with the tilt as |k + k0|²), with numpy's FFTs, on the
  same grid and band as the C test's simulation.

The ZOLZ Bloch waves leave out the crystal's period a along the beam (the higher-order Laue
zones), which the layers keep; `--explain` shows that the averaged potential sliced ever
thinner tends to the Bloch result, so the two differ by that physics, not by numerics.

  /usr/bin/python3 tests/reference/bloch_wave.py > tests/reference/bloch_wave.tsv
  /usr/bin/python3 tests/reference/bloch_wave.py --check tests/reference/bloch_wave.tsv
  /usr/bin/python3 tests/reference/bloch_wave.py --explain

--check recomputes the table and compares it with the committed one (exit 0 when every
intensity agrees within 1e-6, 1 otherwise, 77 without numpy).
"""
import math
import sys

try:
    import numpy as np
except ImportError:  # pragma: no cover
    print("bloch_wave.py: numpy is missing (SKIP)")
    sys.exit(77)

# CODATA 2018
H = 6.62607015e-34
E = 1.602176634e-19
M0 = 9.1093837015e-31
C = 299792458.0

# Peng et al. 1996 (ITC Vol. C, Table 4.3.2.2), neutral atoms: a_i in Å, b_i in Å², s = |g|/2
PENG = {
    8: ([0.0974, 0.2921, 0.6910, 0.6990, 0.2039], [0.2067, 1.3815, 4.6943, 12.7105, 32.4726]),
    14: ([0.2519, 0.6372, 1.3795, 2.5082, 1.0500], [0.3075, 2.0174, 9.6746, 29.3744, 80.4732]),
    22: ([0.3825, 1.2598, 2.0008, 3.0617, 2.0694], [0.3040, 2.4863, 9.2783, 39.0751, 109.4583]),
    38: ([0.6703, 1.4926, 3.3368, 4.4600, 3.1501], [0.3190, 2.2287, 10.3504, 52.3291, 151.2216]),
    79: ([0.9674, 1.8916, 3.3993, 3.0524, 1.2607], [0.2358, 1.4712, 5.6758, 18.7119, 61.5286]),
}

# fractional (x, y) in the [001] projection; z does not enter the zero-order Laue zone
CRYSTALS = {
    "srtio3": (3.905, [(38, 0.0, 0.0), (8, 0.5, 0.5), (22, 0.5, 0.5), (8, 0.5, 0.0), (8, 0.0, 0.5)]),
    "au": (4.078, [(79, 0.0, 0.0), (79, 0.5, 0.5), (79, 0.5, 0.0), (79, 0.0, 0.5)]),
    "si": (5.431, [(14, 0.0, 0.0), (14, 0.5, 0.5), (14, 0.25, 0.25), (14, 0.75, 0.75),
                   (14, 0.5, 0.0), (14, 0.0, 0.5), (14, 0.75, 0.25), (14, 0.25, 0.75)]),
}

# fractional (x, y) of each atomic layer, layer 0 at the entrance: the simulator's slices
LAYERS = {
    "srtio3": [[(38, 0.0, 0.0), (8, 0.5, 0.5)], [(22, 0.5, 0.5), (8, 0.5, 0.0), (8, 0.0, 0.5)]],
    "au": [[(79, 0.0, 0.0), (79, 0.5, 0.5)], [(79, 0.5, 0.0), (79, 0.0, 0.5)]],
    # diamond cubic: 4 layers per cell, a/4 apart
    "si": [[(14, 0.0, 0.0), (14, 0.5, 0.5)], [(14, 0.25, 0.25), (14, 0.75, 0.75)],
           [(14, 0.5, 0.0), (14, 0.0, 0.5)], [(14, 0.75, 0.25), (14, 0.25, 0.75)]],
}

# (name, crystal, kV, tilt (row, col) mrad, cells, hmax, beams). hmax: the beams |g| <= (hmax + ⅓)/a,
# the band of the multislice at a grid of 3·hmax + 1 per cell (the C test's grid; band_r2). The
# Bloch intensities are converged there within 0.002 (SrTiO3, hmax 20 against 28) and 0.0015
# (Au, hmax 28 against 56).
SRTIO3_BEAMS = [(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, -1), (1, -1), (-1, 1), (2, 0), (-2, 0)]
AU_BEAMS = [(0, 0), (2, 0), (-2, 0), (0, 2), (0, -2), (2, 2), (-2, -2), (2, -2), (-2, 2), (4, 0), (-4, 0)]
# Si [001] projects onto the lattice h, k even with h + k ≡ 0 (mod 4): (2, 0) is kinematically
# forbidden and absent from the ZOLZ Bloch waves, but each layer alone has it, so the layered
# multislice excites it (weakly): it is in the table to show that difference
SI_BEAMS = [(0, 0), (2, 2), (-2, -2), (2, -2), (-2, 2), (4, 0), (-4, 0), (0, 4), (0, -4), (2, 0), (-2, 0)]
CASES = [
    ("srtio3_300kV", "srtio3", 300.0, (0.0, 0.0), 51, 20, SRTIO3_BEAMS),
    ("srtio3_300kV_tilt_3_-2", "srtio3", 300.0, (3.0, -2.0), 51, 20, SRTIO3_BEAMS),
    ("au_200kV", "au", 200.0, (0.0, 0.0), 49, 28, AU_BEAMS),
    ("au_300kV_tilt_-2_1", "au", 300.0, (-2.0, 1.0), 49, 28, AU_BEAMS),
    ("si_300kV", "si", 300.0, (0.0, 0.0), 37, 28, SI_BEAMS),
    ("si_200kV_tilt_2_-3", "si", 200.0, (2.0, -3.0), 37, 28, SI_BEAMS),
]


def optics(kv):
    v = kv * 1e3
    lam = H / math.sqrt(2 * M0 * E * v * (1 + E * v / (2 * M0 * C * C)))  # m
    gamma = 1 + E * v / (M0 * C * C)
    sigma = 2 * math.pi * gamma * M0 * E * lam / H**2  # rad/(V·m)
    return lam * 1e10, sigma * 1e-10  # Å, rad/(V·Å)


def band_r2(hmax):
    """The beams (h, k) kept: h² + k² <= (M/3)², the antialias band of a one-cell window on a
    grid of M = 3·hmax + 1 (the C test's grid). The radius hmax + 1/3 puts no beam on the edge,
    where the simulator's and this band could round differently."""
    return ((3 * hmax + 1) / 3.0) ** 2


def proj_coeff(atoms, a, h, k):
    """Fourier coefficient (V·Å) of the projected potential of `atoms` per cell at g = (h, k)/a."""
    vconst = H**2 / (2 * math.pi * M0 * E) * 1e20  # V·Å²
    s2 = (h * h + k * k) / (4 * a * a)
    v = np.zeros(np.shape(h), complex)
    for z, x, y in atoms:
        ai, bi = PENG[z]
        fe = sum(ai[i] * np.exp(-bi[i] * s2) for i in range(5))
        v = v + fe * np.exp(-2j * math.pi * (h * x + k * y))
    return vconst * v / (a * a)


def bloch(crystal, kv, tilt_mrad, cells, hmax, beams):
    """Zero-order-Laue-zone Bloch waves: the beam intensities after 1..cells cells."""
    a, atoms = CRYSTALS[crystal]
    lam, sigma = optics(kv)
    # fcc Au (and diamond-cubic Si) project onto a square lattice of period a/2 (Si: a
    # sublattice of it): only beams with h and k both even couple to the incident beam, so the
    # others are left out (4× fewer beams, same answer)
    step = 2 if crystal in ("au", "si") else 1
    hm = hmax // step * step
    hk = np.array([(h, k) for h in range(-hm, hm + 1, step) for k in range(-hm, hm + 1, step)
                   if h * h + k * k <= band_r2(hmax)])
    g = hk / a
    k0 = np.array(tilt_mrad) * 1e-3 / lam
    # V_g (volts) of the potential averaged along the beam = projected coefficient / a
    A = sigma / a * proj_coeff(atoms, a, hk[:, 0][:, None] - hk[:, 0][None, :],
                               hk[:, 1][:, None] - hk[:, 1][None, :])
    A[np.diag_indices_from(A)] += -math.pi * lam * np.sum((g + k0) ** 2, axis=1)
    lam_e, Cm = np.linalg.eigh(A)
    idx = {tuple(v): i for i, v in enumerate(hk.tolist())}
    alpha = np.conj(Cm[idx[(0, 0)], :])  # C† φ(0), φ(0) = δ_g0
    sel = [idx[b] for b in beams]
    rows = []
    for n in range(1, cells + 1):
        phi = Cm[sel, :] @ (alpha * np.exp(1j * lam_e * n * a))
        rows.append(list(np.abs(phi) ** 2))
    return rows


def multislice(crystal, kv, tilt_mrad, cells, hmax, beams, layers=None, nsub=1):
    """A plain double-precision multislice of the layered crystal (numpy FFTs, written apart
    from the simulator): each layer's transmission e^{iσ v_z} band-limited to |g| <= hmax/a,
    then the Fresnel propagator over the layer spacing with the beam tilt k0 = τ/λ,
    exp(−iπλΔz|k + k0|²) up to a constant phase. With layers=None each of the 2·nsub slices
    per cell holds the beam-averaged potential instead (it tends to the Bloch result)."""
    a, atoms = CRYSTALS[crystal]
    lam, sigma = optics(kv)
    m = 3 * hmax + 1
    f = np.fft.fftfreq(m, a / m)
    kx, ky = np.meshgrid(f, f, indexing="ij")
    h, k = np.rint(kx * a).astype(int), np.rint(ky * a).astype(int)
    band = h * h + k * k <= band_r2(hmax)
    if layers is None:
        vz = [np.fft.ifft2(proj_coeff(atoms, a, h, k) * band).real * m * m / (2 * nsub)] * (2 * nsub)
    else:
        vz = [np.fft.ifft2(proj_coeff(lay, a, h, k) * band).real * m * m for lay in layers]
    trans = [np.fft.ifft2(np.fft.fft2(np.exp(1j * sigma * v)) * band) for v in vz]
    dz = a / len(trans)
    k0 = np.array(tilt_mrad) * 1e-3 / lam
    prop = np.exp(-1j * math.pi * lam * dz * ((kx + k0[0]) ** 2 + (ky + k0[1]) ** 2)) * band
    psi = np.ones((m, m), complex)
    rows = []
    for _ in range(cells):
        for i, t in enumerate(trans):
            spec = np.fft.fft2(psi * t) / (m * m)
            if i == len(trans) - 1:  # the cell's exit: the intensities do not need the last step
                rows.append([abs(spec[hh % m, kk % m]) ** 2 for hh, kk in beams])
            psi = np.fft.ifft2(spec * prop) * (m * m)
    return rows


def table():
    out = ["# bloch_wave.py: beam intensities of a plane wave along [001] after 1..cells cells (Peng 1996 f_e,",
           "# CODATA 2018), for test_sim_reference. 'case' lines: name crystal kV tilt_row tilt_col (mrad,",
           "# beam tilt) cells hmax nbeams; 'beams': (h, k) pairs; then for each cell two lines,",
           "# 'bloch' (zero-order Laue zone Bloch waves) and 'ms' (the numpy multislice of the layers):",
           "# kind cells thickness_A intensities..."]
    for name, crystal, kv, tilt, cells, hmax, beams in CASES:
        out.append(f"case {name} {crystal} {kv:g} {tilt[0]:g} {tilt[1]:g} {cells} {hmax} {len(beams)}")
        out.append("beams " + " ".join(f"{h} {k}" for h, k in beams))
        a = CRYSTALS[crystal][0]
        rb = bloch(crystal, kv, tilt, cells, hmax, beams)
        rm = multislice(crystal, kv, tilt, cells, hmax, beams, LAYERS[crystal])
        for n in range(cells):
            out.append(f"bloch {n + 1} {(n + 1) * a:.3f} " + " ".join(f"{v:.7f}" for v in rb[n]))
            out.append(f"ms {n + 1} {(n + 1) * a:.3f} " + " ".join(f"{v:.7f}" for v in rm[n]))
    return "\n".join(out) + "\n"


def explain():
    """Where the Bloch waves and the layered multislice part: the averaged potential in finer
    slices tends to the Bloch result, the layers (the z-period a along the beam, which the
    zero-order Laue zone leaves out) give the multislice's."""
    for name, crystal, kv, tilt, cells, hmax, beams in CASES:
        rb = np.array(bloch(crystal, kv, tilt, cells, hmax, beams))
        rl = multislice(crystal, kv, tilt, cells, hmax, beams, LAYERS[crystal])
        print(f"{name}: largest |I - I_bloch| over {cells} cells")
        print(f"  layered multislice (the simulator's model) {np.max(np.abs(np.array(rl) - rb)):.4f}")
        for nsub in (1, 2, 4):
            ra = multislice(crystal, kv, tilt, cells, hmax, beams, None, nsub)
            print(f"  averaged potential, {2 * nsub} slices per cell {np.max(np.abs(np.array(ra) - rb)):.4f}")


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--explain":
        explain()
        return 0
    text = table()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2]) as f:
            old = f.read().split("\n")
        new = text.split("\n")
        worst = 0.0
        if len(old) != len(new):
            print(f"bloch_wave.py: {len(new)} lines, the table has {len(old)}")
            return 1
        for lo, ln in zip(old, new):
            a, b = lo.split(), ln.split()
            if len(a) != len(b):
                print(f"bloch_wave.py: line differs: {ln!r} against {lo!r}")
                return 1
            if a and a[0] in ("bloch", "ms"):
                worst = max(worst, max(abs(float(x) - float(y)) for x, y in zip(a[3:], b[3:])))
            elif a != b and a and a[0] != "#":
                print(f"bloch_wave.py: line differs: {ln!r} against {lo!r}")
                return 1
        print(f"bloch_wave.py: largest intensity difference against the table {worst:.2e}")
        return 0 if worst <= 1e-6 else 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
