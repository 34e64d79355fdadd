#!/usr/bin/env python3
"""EMD and py4DSTEM HDF5 calibration (src/formats/fs_hdf5.c) against files written here with h5py
in the published layouts (issue 39: the scan step and the EMD dim vectors were not read):
  * emdfile / py4DSTEM >= 0.14 (github.com/py4dstem/emdfile: Node.to_h5, Array.to_h5,
    Metadata.to_h5): file attrs emd_group_type "file", version 1.0; a root group (emd_group_type
    "root") holding metadatabundle/calibration (emd_group_type "metadata", python_class
    "Calibration") whose every value is a dataset, text too (R_pixel_units = "A", a
    variable-length string), and the datacube (emd_group_type "array", python_class "DataCube")
    with data and dim0..dim3, a linear axis stored compressed as its first two values, each with
    "name" and "units" attributes;
  * py4DSTEM 0.13 (v13_emd_classes): the same tree with fixed-length byte strings;
  * Berkeley EMD v0.2 (openNCEM ncempy/io/emd.py, fileEMD.put_emdgroup / write_dim): file attrs
    version_major 0, version_minor 2; /data/NAME with emd_group_type 1, data and full dim1..dimN
    vectors with byte-string "name" and "units" (ncempy spells nanometres "n_m").
Read back with `ssb4d export --json` (the frames, the calibration, the metadata and where each
value came from) and `ssb4d import` + `ssb4d info --json`.

usage: test_emd.py SSB4D_BIN BUILD_DIR     (exit 77 = skipped: numpy or h5py missing)"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
except ImportError:
    print("SKIP: numpy or h5py is missing")
    sys.exit(77)

SSB4D = sys.argv[1]
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def close(x, want, what, rel=1e-9, i=None):
    if i is not None:
        x = x[i] if x is not None else None
    ok = x is not None and abs(x - want) <= rel * abs(want)
    check(ok, f"{what}: {x}, want {want}")


# ------------------------------------------------------------------------------------------
# The writers

def emdfile_write(path, cube, r=None, r_units=None, q=None, q_units=None, dims=None,
                  fixed_strings=False, semiangle=None):
    """py4DSTEM's save(): dims = [(vector, units)] * 4 (None: no dim vectors)."""
    text = (lambda s: np.bytes_(s)) if fixed_strings else (lambda s: s)
    with h5py.File(path, "w") as f:
        f.attrs["emd_group_type"] = "file"
        f.attrs["version_major"] = 1
        f.attrs["version_minor"] = 0
        root = f.create_group("experiment")
        root.attrs["emd_group_type"] = "root"
        root.attrs["python_class"] = "Root"
        if r is not None or q is not None:
            mb = root.create_group("metadatabundle")
            mb.attrs["emd_group_type"] = "metadatabundle"
            cal = mb.create_group("calibration")
            cal.attrs["emd_group_type"] = "metadata"
            cal.attrs["python_class"] = "Calibration"

            def put(k, v):
                d = cal.create_dataset(k, data=v)
                d.attrs["type"] = np.bytes_("string" if isinstance(v, (str, bytes)) else "number")
            put("Q_pixel_size", float(q if q is not None else 1.0))
            put("R_pixel_size", float(r if r is not None else 1.0))
            put("Q_pixel_units", text(q_units or "pixels"))
            put("R_pixel_units", text(r_units or "pixels"))
            cal.create_dataset("QR_flip", data=False).attrs["type"] = np.bytes_("bool")
            if semiangle is not None:
                put("convergence_semiangle_mrad", float(semiangle))
        dc = root.create_group("datacube")
        dc.attrs["emd_group_type"] = "array"
        dc.attrs["python_class"] = "DataCube"
        dc.create_dataset("data", data=cube).attrs["units"] = text("intensity")
        for n, (vec, units) in enumerate(dims or []):
            d = dc.create_dataset(f"dim{n}", data=np.asarray(vec, dtype=np.float64))
            d.attrs["name"] = text(["Rx", "Ry", "Qx", "Qy"][n] if cube.ndim == 4 else f"dim{n}")
            d.attrs["units"] = text(units)


def emd02_write(path, data, dims):
    """ncempy's emdWriter / put_emdgroup: full dim vectors, byte-string attributes."""
    with h5py.File(path, "w") as f:
        f.attrs["version_major"] = 0
        f.attrs["version_minor"] = 2
        for g in ("data", "microscope", "sample", "user", "comments"):
            f.create_group(g)
        grp = f["data"].create_group("converted")
        grp.attrs["emd_group_type"] = 1
        grp.create_dataset("data", data=data)
        for i, (vec, units) in enumerate(dims):
            d = grp.create_dataset(f"dim{i + 1}", data=np.asarray(vec))
            d.attrs["name"] = np.bytes_(f"dim{i + 1}")
            d.attrs["units"] = np.bytes_(units)


def wavelength_A(kv):
    """Relativistic electron wavelength (CODATA 2018)."""
    h, c, e, m = 6.62607015e-34, 299792458.0, 1.602176634e-19, 9.1093837015e-31
    E = kv * 1e3 * e
    return h * c / np.sqrt(E * (E + 2 * m * c * c)) * 1e10


def lin(n, step, start=0.0):
    return start + np.arange(n) * step


# ------------------------------------------------------------------------------------------
# Reading back

def run(args):
    p = subprocess.run([SSB4D] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def export(path, tmp, extra=()):
    out = os.path.join(tmp, "out.npy")
    if os.path.exists(out):
        os.remove(out)
    rc, so, se = run(["export", path, "-o", out, "--json", "-q"] + list(extra))
    if rc != 0:
        check(False, f"export {os.path.basename(path)}: rc {rc}: {se.strip()}")
        return None, None
    return np.load(out), json.loads(so)


def main():
    rng = np.random.default_rng(39)
    cube = rng.poisson(2.0, (3, 5, 8, 6)).astype(np.uint16)
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda n: os.path.join(tmp, n)

        # 1. py4DSTEM >= 0.14: the calibration's R_pixel_units is a (variable-length) dataset
        dims = [([0, 2.5], "A"), ([0, 2.5], "A"), ([-3.2, -2.4], "mrad"), ([-2.4, -1.6], "mrad")]
        emdfile_write(p("p14.h5"), cube, r=2.5, r_units="A", q=0.8, q_units="mrad", dims=dims,
                      semiangle=21.4)
        a, j = export(p("p14.h5"), tmp)
        if j:
            check(np.array_equal(a, cube), "py4DSTEM 0.14: frames as written")
            c, m = j["calibration"], j["metadata"]
            check(c["scan_step_A"] == [2.5, 2.5], f"py4DSTEM 0.14: scan step 2.5 A: {c['scan_step_A']}")
            check(c["det_sampling_mrad"] == [0.8, 0.8], f"py4DSTEM 0.14: sampling 0.8 mrad: {c['det_sampling_mrad']}")
            close(c["semiangle_mrad"], 21.4, "py4DSTEM 0.14: semi-angle")
            check(m.get("scan_step_source") == "experiment/metadatabundle/calibration/R_pixel_size",
                  f"py4DSTEM 0.14: scan_step_source: {m.get('scan_step_source')}")
            check(m.get("det_sampling_source") == "experiment/metadatabundle/calibration/Q_pixel_size",
                  f"py4DSTEM 0.14: det_sampling_source: {m.get('det_sampling_source')}")
            check(m.get("emd/calibration/R_pixel_size") == "2.5 A", f"metadata R_pixel_size: {m.get('emd/calibration/R_pixel_size')}")
        rc, so, se = run(["import", p("p14.h5"), "-o", p("p14.qem"), "-q", "--hot-pixels", "none"])
        check(rc == 0, f"import p14.h5: {se.strip()}")
        if rc == 0:
            rc, so, se = run(["info", p("p14.qem"), "--json"])
            cal = json.loads(so).get("calibration", {}) if rc == 0 else {}
            check(cal.get("scan_step_A") == [2.5, 2.5], f"info: the .qem records the scan step: {cal}")

        # 2. py4DSTEM 0.13: fixed-length byte strings, nanometres
        emdfile_write(p("p13.h5"), cube, r=0.31, r_units="nm", q=0.012, q_units="A^-1",
                      fixed_strings=True)
        a, j = export(p("p13.h5"), tmp)
        if j:
            c, m = j["calibration"], j["metadata"]
            close(c["scan_step_A"], 3.1, "py4DSTEM 0.13: 0.31 nm = 3.1 A (row)", i=0)
            close(c["scan_step_A"], 3.1, "py4DSTEM 0.13: 0.31 nm = 3.1 A (column)", i=1)
            # a spatial frequency without a beam energy: kept, not guessed
            check(c["det_sampling_mrad"] is None, f"A^-1 without kV: sampling unknown: {c['det_sampling_mrad']}")
            check(m.get("det_sampling_inv_A") == "0.012 0.012 1/A", f"A^-1 kept: {m.get('det_sampling_inv_A')}")

        # ... and with the beam energy stated at import, the spatial frequency becomes an angle
        rc, so, se = run(["import", p("p13.h5"), "-o", p("p13.qem"), "-q", "--hot-pixels", "none",
                          "--kv", "300"])
        check(rc == 0, f"import p13.h5 --kv 300: {se.strip()}")
        if rc == 0:
            rc, so, se = run(["info", p("p13.qem"), "--json"])
            cal = json.loads(so).get("calibration", {}) if rc == 0 else {}
            want = 1e3 * wavelength_A(300) * 0.012
            close(cal.get("det_sampling"), want, "import --kv 300: 0.012 1/A = lambda q mrad", rel=1e-6, i=0)

        # 3. emdfile dims alone (no calibration group): picometres, anisotropic, rad
        dims = [([0, 150.0], "pm"), ([0, 175.0], "pm"), ([0, 0.0009], "rad"), ([0, 0.0011], "rad")]
        emdfile_write(p("dims.h5"), cube, dims=dims)
        a, j = export(p("dims.h5"), tmp)
        if j:
            c, m = j["calibration"], j["metadata"]
            close(c["scan_step_A"], 1.5, "dims: 150 pm = 1.5 A (row)", i=0)
            close(c["scan_step_A"], 1.75, "dims: 175 pm = 1.75 A (column)", i=1)
            close(c["det_sampling_mrad"], 0.9, "dims: 0.0009 rad = 0.9 mrad (row)", i=0)
            close(c["det_sampling_mrad"], 1.1, "dims: 0.0011 rad = 1.1 mrad (column)", i=1)
            check(m.get("scan_step_source") == "experiment/datacube/dim0", f"dims: scan_step_source: {m.get('scan_step_source')}")
            check(m.get("det_sampling_source") == "experiment/datacube/dim2", f"dims: det_sampling_source: {m.get('det_sampling_source')}")

        # 4. Berkeley EMD v0.2 (ncempy): full vectors dim1..dim4, "n_m"
        dims = [(lin(3, 0.05), "n_m"), (lin(5, 0.05), "n_m"), (lin(8, 1.2, -4.8), "mrad"), (lin(6, 1.2, -3.6), "mrad")]
        emd02_write(p("e02.emd"), cube, dims)
        a, j = export(p("e02.emd"), tmp)
        if j:
            c, m = j["calibration"], j["metadata"]
            check(np.array_equal(a, cube), "EMD v0.2: frames as written")
            close(c["scan_step_A"], 0.5, "EMD v0.2: 0.05 n_m = 0.5 A", i=0)
            close(c["det_sampling_mrad"], 1.2, "EMD v0.2: 1.2 mrad", i=1)
            check(m.get("scan_step_source") == "data/converted/dim1", f"EMD v0.2: scan_step_source: {m.get('scan_step_source')}")

        # 5. EMD v0.2 stack (frames, rows, cols): the detector from dim2, dim3; the scan given
        stack = cube.reshape(15, 8, 6)
        emd02_write(p("stack.emd"), stack, [(lin(15, 1.0), "frame"), (lin(8, 0.7), "mrad"), (lin(6, 0.7), "mrad")])
        a, j = export(p("stack.emd"), tmp, ["--scan-shape", "3,5", "--dataset", "/data/converted/data"])
        if j:
            c = j["calibration"]
            check(np.array_equal(a, cube), "EMD v0.2 stack: frames as written")
            close(c["det_sampling_mrad"], 0.7, "EMD v0.2 stack: 0.7 mrad", i=0)
            check(c["scan_step_A"] is None, f"EMD v0.2 stack: no scan step: {c['scan_step_A']}")

        # 6. uncalibrated axes (pixels, ncempy's default "unit1"): nothing taken
        emd02_write(p("pix.emd"), cube, [(lin(3, 1.0), "unit1"), (lin(5, 1.0), "unit2"),
                                         (lin(8, 1.0), "pixels"), (lin(6, 1.0), "pixels")])
        a, j = export(p("pix.emd"), tmp)
        if j:
            c = j["calibration"]
            check(c["scan_step_A"] is None and c["det_sampling_mrad"] is None,
                  f"uncalibrated dims: nothing taken: {c['scan_step_A']} {c['det_sampling_mrad']}")

    if FAILS:
        print(f"{len(FAILS)} failed")
        sys.exit(1)
    print("test_emd: all passed")


main()
