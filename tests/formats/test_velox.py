#!/usr/bin/env python3
"""Thermo Fisher Velox EMD reader (src/formats/fs_velox.c) against files written here with h5py
in the layout the public readers describe (rosettasciio rsciio/emd/_emd_velox.py, ncempy
io/emdVelox.py): /Version (JSON text, "format": "Velox"), /Data/Image/<uuid>/Data with the frame
axis last (rows, cols, frames) and /Data/Image/<uuid>/Metadata, uint8 JSON text with one column
per frame (zero padded); Velox writes its numbers as text. Every value read back by
`ssb4d export` (frames and --json) is checked, and the refusals: one line naming the file, no
output.

usage: test_velox.py SSB4D_BIN BUILD_DIR     (exit 77 = skipped: numpy or h5py missing)"""
import json
import os
import subprocess
import sys
import tempfile
import uuid

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


# ------------------------------------------------------------------------------------------
# The writer

def metadata_columns(md, nframes, pad=64):
    """uint8 (L, nframes): the JSON text of each frame in its column, NUL padded."""
    text = json.dumps(md).encode()
    col = np.zeros(len(text) + pad, dtype=np.uint8)
    col[:len(text)] = np.frombuffer(text, dtype=np.uint8)
    return np.repeat(col[:, None], nframes, axis=1)


def velox_md(kv=None, camera_length=None, convergence=None, dwell=None, scan=None, pixel=None,
             unit="1/m", detector="Ceta"):
    md = {"Acquisition": {"AcquisitionStartDatetime": {"DateTime": "1700000000"}},
          "Instrument": {"InstrumentModel": "Spectra 300", "Manufacturer": "Thermo Fisher"},
          "Optics": {"ProbeMode": "1"}, "Scan": {},
          "BinaryResult": {"Detector": detector, "DetectorIndex": "0", "Encoding": "uint16"},
          "Detectors": {"Detector-0": {"DetectorName": detector, "DetectorType": "ImagingDetector"},
                        "Detector-1": {"DetectorName": "HAADF"}},
          "CustomProperties": {"ignored": {"type": "string", "value": "x"}}}
    if kv is not None:
        md["Optics"]["AccelerationVoltage"] = str(kv * 1000)
    if camera_length is not None:
        md["Optics"]["CameraLength"] = str(camera_length)
    if convergence is not None:
        md["Optics"]["BeamConvergence"] = str(convergence)
    if dwell is not None:
        md["Scan"]["DwellTime"] = str(dwell)
    if scan is not None:
        md["Scan"]["ScanSize"] = {"width": str(scan[1]), "height": str(scan[0])}
    if pixel is not None:
        md["BinaryResult"]["PixelSize"] = {"width": str(pixel[1]), "height": str(pixel[0])}
        md["BinaryResult"]["PixelUnitX"] = unit
        md["BinaryResult"]["PixelUnitY"] = unit
    return md


def write_velox(path, stacks, version=True, fmt="Velox"):
    """stacks: list of (name, the Data array as stored, metadata dict or None, chunks or None)."""
    with h5py.File(path, "w") as f:
        if version:
            v = json.dumps({"format": fmt, "version": "11"}).encode()
            f.create_dataset("Version", data=np.array([v]))
        f.create_group("Data")
        img = f.create_group("Data/Image")
        for name, arr, md, chunks in stacks:
            g = img.create_group(name)
            g.create_dataset("Data", data=arr, chunks=chunks)
            if md is not None:
                n = arr.shape[-1] if arr.ndim >= 3 else 1
                g.create_dataset("Metadata", data=metadata_columns(md, n))


def frames_last(frames):
    """(N, rows, cols) -> (rows, cols, N): how Velox stores a stack."""
    return np.ascontiguousarray(np.moveaxis(frames, 0, -1))


# ------------------------------------------------------------------------------------------
# Running ssb4d

def run(args):
    p = subprocess.run([SSB4D] + args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def export(path, extra=(), name="out.npy"):
    out = os.path.join(os.path.dirname(path), name)
    if os.path.exists(out):
        os.remove(out)
    rc, so, se = run(["export", path, "-o", out, "--json", "-q"] + list(extra))
    if rc != 0:
        FAILS.append(f"export {os.path.basename(path)} {list(extra)}: rc {rc}: {se.strip()}")
        print("FAIL:", FAILS[-1])
        return None, None
    return np.load(out), json.loads(so)


def refused(path, words, extra=(), label=None):
    label = label or os.path.basename(path)
    out = os.path.join(os.path.dirname(path), "refused.npy")
    if os.path.exists(out):
        os.remove(out)
    rc, so, se = run(["export", path, "-o", out, "-q"] + list(extra))
    lines = [l for l in se.strip().splitlines() if l.strip()]
    check(rc == 2, f"{label}: exit {rc}, expected 2 ({se.strip()})")
    check(len(lines) == 1, f"{label}: {len(lines)} lines on stderr: {se!r}")
    check(os.path.basename(path) in se, f"{label}: the message does not name the file: {se.strip()}")
    for w in words:
        check(w in se, f"{label}: the message lacks {w!r}: {se.strip()}")
    check(not os.path.exists(out), f"{label}: an output was left behind")


def same(a, b, what):
    ok = a is not None and a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
    check(ok, f"{what}: values differ (got {None if a is None else (a.shape, a.dtype)}, want {(b.shape, b.dtype)})")


def close(x, want, what, rel=1e-9):
    ok = x is not None and abs(x - want) <= rel * abs(want)
    check(ok, f"{what}: {x} != {want}")


def wavelength_m(kv):
    h, c, e, m = 6.62607015e-34, 299792458.0, 1.602176634e-19, 9.1093837015e-31
    V = kv * 1e3
    return h / (2 * m * e * V * (1 + e * V / (2 * m * c * c))) ** 0.5


def main():
    rng = np.random.default_rng(2828)
    tmp = tempfile.mkdtemp(prefix="ssb4d-velox-")
    p = lambda n: os.path.join(tmp, n)
    u = lambda: "{" + str(uuid.UUID(int=int(rng.integers(0, 2**62)))) + "}"
    try:
        # 1. uint16, non-square frames (6 rows, 7 cols), 12 frames = the 3 x 4 scan the metadata
        #    records; diffraction pixel size in 1/m -> mrad with the wavelength at 200 kV.
        fr = rng.integers(0, 65535, size=(12, 6, 7), dtype=np.uint16)
        md = velox_md(kv=200, camera_length=0.2, convergence=0.0215, dwell=2e-6, scan=(3, 4),
                      pixel=(4e8, 5e8), unit="1/m")
        name = u()
        write_velox(p("u16.emd"), [(name, frames_last(fr), md, None)])
        a, j = export(p("u16.emd"))
        same(a, fr.reshape(3, 4, 6, 7), "uint16 frames-last stack")
        if j:
            check(j["format"] == "thermo-velox-emd", f"format {j['format']}")
            check(j["shape"] == [3, 4, 6, 7], f"shape {j['shape']}")
            c, m = j["calibration"], j["metadata"]
            close(c["kv"], 200.0, "kV")
            close(c["camera_length_mm"], 200.0, "camera length")
            close(c["semiangle_mrad"], 21.5, "convergence")
            close(c["dwell_us"], 2.0, "dwell")
            lam = wavelength_m(200.0)
            if c["det_sampling_mrad"]:
                close(c["det_sampling_mrad"][0], 4e8 * lam * 1e3, "sampling rows", 1e-9)
                close(c["det_sampling_mrad"][1], 5e8 * lam * 1e3, "sampling cols", 1e-9)
            else:
                check(False, "detector sampling missing")
            check(c["scan_step_A"] is None, f"scan step {c['scan_step_A']}")
            check(m.get("velox_dataset") == f"/Data/Image/{name}/Data", f"dataset {m.get('velox_dataset')}")
            check(m.get("velox_file_version") == "11", f"version {m.get('velox_file_version')}")
            check(m.get("scan_shape_source") == "file", f"source {m.get('scan_shape_source')}")
            check(m.get("velox/Optics/AccelerationVoltage") == "200000", "Optics in metadata")
            check(m.get("velox/Instrument/InstrumentModel") == "Spectra 300", "Instrument in metadata")
            check(m.get("velox/Scan/ScanSize/width") == "4", "Scan in metadata")
            check(m.get("velox/Detectors/Detector-0/DetectorName") == "Ceta", "the detector's record")
            check(not any(k.startswith("velox/Detectors/Detector-1") for k in m), "other detectors kept")
            check(not any("CustomProperties" in k for k in m), "CustomProperties kept")
        # --scan-shape wins; one that does not fit is refused
        a, j = export(p("u16.emd"), ["--scan-shape", "2,6"])
        same(a, fr.reshape(2, 6, 6, 7), "uint16 with --scan-shape")
        if j:
            check(j["metadata"].get("scan_shape_source") == "user", "user scan shape")
        refused(p("u16.emd"), ["12 frames", "5x5"], ["--scan-shape", "5,5"])
        # --dataset as the group or as the dataset
        for ds in (f"/Data/Image/{name}", f"/Data/Image/{name}/Data"):
            a, j = export(p("u16.emd"), ["--dataset", ds])
            same(a, fr.reshape(3, 4, 6, 7), f"--dataset {ds}")
        refused(p("u16.emd"), ["/Data/Image/nope"], ["--dataset", "/Data/Image/nope"])
        # the generic HDF5 reader pointed at the frames-last stack: refused, never misread
        refused(p("u16.emd"), ["Velox", "frames last", "--format velox"],
                ["--format", "hdf5", "--dataset", f"/Data/Image/{name}/Data"], label="generic reader on Velox")
        # import into .qem (integer data) and back
        q = p("u16.qem")
        rc, so, se = run(["import", p("u16.emd"), "-o", q, "-q", "--hot-pixels", "none"])
        check(rc == 0 and os.path.exists(q), f"import u16.emd: rc {rc}: {se.strip()}")
        if rc == 0:
            a, _ = export(q, name="back.npy")
            same(a, fr.reshape(3, 4, 6, 7), "Velox through .qem")

        # 2. float32, chunked (rows, cols, 5 frames), 25 frames without a scan size = a 5 x 5
        #    square; a single HAADF image beside it is not a stack; real-space pixel size in m
        #    becomes the scan step.
        fr = (rng.random(size=(25, 8, 8), dtype=np.float32) * 100).astype(np.float32)
        md = velox_md(kv=300, pixel=(2e-10, 1.5e-10), unit="m")
        haadf = rng.integers(0, 255, size=(5, 5, 1), dtype=np.uint16)
        write_velox(p("f32.emd"), [(u(), frames_last(fr), md, (8, 8, 5)),
                                   (u(), haadf, velox_md(scan=(5, 5)), None)])
        a, j = export(p("f32.emd"))
        same(a, fr.reshape(5, 5, 8, 8), "float32 chunked stack")
        if j:
            check(j["dtype"] == "float32", f"dtype {j['dtype']}")
            check(j["metadata"].get("scan_shape_source") == "square", "square scan")
            st = j["calibration"]["scan_step_A"]
            check(st is not None and abs(st[0] - 2.0) < 1e-9 and abs(st[1] - 1.5) < 1e-9, f"scan step {st}")
            check(j["calibration"]["det_sampling_mrad"] is None, "sampling from a real-space pixel")

        # 3. int16 (values >= 0), 64 x 64 frames, 1200 of them in odd chunks (16, 16, 7): reads
        #    span several blocks and chunk layers; scan 30 x 40 from the metadata.
        fr = rng.integers(0, 30000, size=(1200, 64, 64), dtype=np.int16)
        write_velox(p("i16.emd"), [(u(), frames_last(fr), velox_md(scan=(30, 40)), (16, 16, 7))])
        a, j = export(p("i16.emd"))
        same(a, fr.reshape(30, 40, 64, 64).astype(np.uint16), "int16 multi-block stack")
        if j:
            check(j["dtype"] == "uint16", f"int16 exports as {j['dtype']}")
        fr2 = fr[:12].copy()
        fr2[9, 5, 60] = -3
        write_velox(p("neg.emd"), [(u(), frames_last(fr2), velox_md(scan=(3, 4)), None)])
        refused(p("neg.emd"), ["negative count -3", "frame 9", "pixel 5,60"])

        # 4. uint8 and uint32 (contiguous), int8 and int32 (signed, >= 0)
        for dt in (np.uint8, np.uint32, np.int8, np.int32):
            hi = min(np.iinfo(dt).max, 1 << 20)
            fr = rng.integers(0, hi, size=(6, 3, 5), dtype=dt)
            nm = f"{np.dtype(dt).name}.emd"
            write_velox(p(nm), [(u(), frames_last(fr), velox_md(scan=(2, 3)), None)])
            a, j = export(p(nm))
            want = fr.astype({1: np.uint8, 4: np.uint32}[np.dtype(dt).itemsize]).reshape(2, 3, 3, 5)
            same(a, want, f"{nm}")

        # 5. Two stacks: refused naming both unless --dataset, or unless exactly one of them
        #    matches its own Scan.ScanSize.
        f1 = rng.integers(0, 100, size=(4, 4, 4), dtype=np.uint16)
        f2 = rng.integers(0, 100, size=(9, 4, 4), dtype=np.uint16)
        n1, n2 = u(), u()
        write_velox(p("two.emd"), [(n1, frames_last(f1), velox_md(), None),
                                   (n2, frames_last(f2), velox_md(), None)])
        refused(p("two.emd"), ["several stacks", n1, n2, "--dataset"])
        a, j = export(p("two.emd"), ["--dataset", f"/Data/Image/{n2}"])
        same(a, f2.reshape(3, 3, 4, 4), "two stacks, --dataset")
        write_velox(p("two_match.emd"), [(n1, frames_last(f1), velox_md(scan=(3, 3)), None),
                                         (n2, frames_last(f2), velox_md(scan=(3, 3)), None)])
        a, j = export(p("two_match.emd"))
        same(a, f2.reshape(3, 3, 4, 4), "two stacks, one matching its scan size")
        if j:
            check("matches" in j["metadata"].get("velox_dataset_choice", ""), "choice recorded")

        # 6. Refusals by name
        fr = rng.integers(0, 100, size=(10, 4, 4), dtype=np.uint16)
        write_velox(p("mismatch.emd"), [(u(), frames_last(fr), velox_md(scan=(3, 4)), None)])
        refused(p("mismatch.emd"), ["10 frames", "Scan.ScanSize", "3x4", "--scan-shape"])
        write_velox(p("images.emd"), [(u(), haadf, velox_md(), None),
                                      (u(), rng.integers(0, 9, size=(6, 6), dtype=np.uint16), None, None)])
        refused(p("images.emd"), ["no stack of frames", "5x5x1", "6x6"])
        with h5py.File(p("spectra.emd"), "w") as f:
            f.create_dataset("Version", data=np.array([json.dumps({"format": "Velox", "version": "11"}).encode()]))
            f.create_dataset("Data/Spectrum/abc/Data", data=np.zeros((4096, 1), dtype=np.uint32))
        refused(p("spectra.emd"), ["/Data/Image"])
        write_velox(p("f64.emd"), [(u(), frames_last(fr.astype(np.float64)), velox_md(), None)])
        refused(p("f64.emd"), ["8-byte floating point", "float32"], ["--scan-shape", "2,5"])
        cplx = np.zeros((4, 4, 3), dtype=[("realFloat", "<f4"), ("imagFloat", "<f4")])
        write_velox(p("dpc.emd"), [(u(), cplx, velox_md(), None)])
        refused(p("dpc.emd"), ["complex", "DPC"], ["--scan-shape", "1,3"])
        n4 = u()
        write_velox(p("rank4.emd"), [(n4, rng.integers(0, 9, size=(2, 3, 4, 4), dtype=np.uint16), None, None)])
        refused(p("rank4.emd"), ["rank 4", "--format hdf5"], ["--dataset", f"/Data/Image/{n4}"])
        refused(p("rank4.emd"), ["no stack of frames", "2x3x4x4"])
        # no metadata at all: read, and said so
        write_velox(p("nomd.emd"), [(u(), frames_last(fr), None, None)])
        a, j = export(p("nomd.emd"), ["--scan-shape", "2,5"])
        same(a, fr.reshape(2, 5, 4, 4), "stack without metadata")
        if j:
            check(j["metadata"].get("velox_metadata") == "absent or not JSON", "no metadata noted")
        # a truncated file
        with open(p("u16.emd"), "rb") as f:
            whole = f.read()
        with open(p("cut.emd"), "wb") as f:
            f.write(whole[:len(whole) // 2])
        refused(p("cut.emd"), ["cut.emd"], ["--format", "velox"])

        # 7. Detection: generic HDF5 / EMD files and other /Version formats stay with the HDF5
        #    reader; --format velox on them is refused.
        d4 = rng.integers(0, 100, size=(2, 3, 4, 5), dtype=np.uint16)
        with h5py.File(p("generic.h5"), "w") as f:
            f.create_dataset("data", data=d4)
        a, j = export(p("generic.h5"))
        check(j is not None and j["format"] == "hdf5", f"generic HDF5 read as {j and j['format']}")
        same(a, d4, "generic HDF5")
        with h5py.File(p("emd.emd"), "w") as f:
            g = f.create_group("Data")       # an NCEM EMD with a /Data group
            g.attrs["emd_group_type"] = 1
            g.create_dataset("data", data=d4)
            f.create_dataset("Version", data=np.array([json.dumps({"format": "Other"}).encode()]))
        a, j = export(p("emd.emd"))
        check(j is not None and j["format"] == "hdf5", f"EMD with /Version of another format read as {j and j['format']}")
        write_velox(p("noversion.emd"), [(u(), frames_last(fr), velox_md(), None)], version=False)
        rc, so, se = run(["export", p("noversion.emd"), "--metadata-only", "--json", "-q"])
        check(rc != 0 or json.loads(so)["format"] != "thermo-velox-emd", "a file without /Version claimed")
        a, j = export(p("noversion.emd"), ["--format", "velox", "--scan-shape", "2,5"])
        same(a, fr.reshape(2, 5, 4, 4), "--format velox without /Version")
        write_velox(p("devkit.emd"), [(u(), frames_last(fr), velox_md(), None)], fmt="DevelopersKit")
        a, j = export(p("devkit.emd"), ["--scan-shape", "2,5"])
        check(j is not None and j["format"] == "thermo-velox-emd", "DevelopersKit files are Velox")
        refused(p("generic.h5"), ["/Data"], ["--format", "velox"])
    finally:
        for n in os.listdir(tmp):
            os.remove(os.path.join(tmp, n))
        os.rmdir(tmp)
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        return 1
    print("test_velox: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
