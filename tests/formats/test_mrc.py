#!/usr/bin/env python3
"""MRC / MRCS reader (src/formats/fs_mrc.c, mrc.c) against files written here from the published
layout: the MRC2014 header (1024 bytes; Cheng et al. 2015, the CCP-EM format page), the Thermo
Fisher FEI1 / FEI2 extended header records (field list of mrcfile's dtypes.py / the Thermo Fisher
MRC2014 notes), IMOD's stamp and flags, and Direct Electron's NAME_info.txt sidecar. Every value
read back by `ssb4d export` (frames and --json) is checked; corrupt headers must fail with one
line naming the file and the field, and leave no output.

usage: test_mrc.py SSB4D_BIN BUILD_DIR     (exit 77 = skipped: numpy missing)"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is missing")
    sys.exit(77)

SSB4D = sys.argv[1]
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


# ------------------------------------------------------------------------------------------
# The writer (independent of ssb4d: the header built field by field)

MODES = {0: "i1", 1: "i2", 2: "f4", 6: "u2", 12: "f2", 3: "i2", 4: "f4", 101: "u1"}


def header(nx, ny, nz, mode, be=False, nsymbt=0, ispg=0, mx=None, my=None, mz=1,
           cella=(0.0, 0.0, 0.0), exttyp=b"", labels=(), stamp=True, map_=True,
           axes=(1, 2, 3), imod_flags=None, origin=(0.0, 0.0, 0.0)):
    e = ">" if be else "<"
    h = bytearray(1024)
    mx = nx if mx is None else mx
    my = ny if my is None else my
    struct.pack_into(e + "10i", h, 0, nx, ny, nz, mode, 0, 0, 0, mx, my, mz)
    struct.pack_into(e + "3f", h, 40, *cella)
    struct.pack_into(e + "3f", h, 52, 90.0, 90.0, 90.0)
    struct.pack_into(e + "3i", h, 64, *axes)
    struct.pack_into(e + "3f", h, 76, 0.0, 1.0, 0.5)          # dmin, dmax, dmean
    struct.pack_into(e + "2i", h, 88, ispg, nsymbt)
    h[104:108] = exttyp.ljust(4, b"\0")[:4] if exttyp else b"\0\0\0\0"
    struct.pack_into(e + "i", h, 108, 20140)
    if imod_flags is not None:
        struct.pack_into(e + "2i", h, 152, 1146047817, imod_flags)
    struct.pack_into(e + "3f", h, 196, *origin)
    if map_:
        h[208:212] = b"MAP "
    if stamp:
        h[212:216] = bytes([0x11, 0x11, 0, 0]) if be else bytes([0x44, 0x44, 0, 0])
    struct.pack_into(e + "f", h, 216, 0.25)
    struct.pack_into(e + "i", h, 220, len(labels))
    for i, lab in enumerate(labels):
        h[224 + 80 * i:224 + 80 * (i + 1)] = lab.encode().ljust(80)
    return bytes(h)


def write_mrc(path, frames, mode, be=False, ext=b"", **kw):
    """frames: (nz, ny, nx) array of the values; stored in the mode's type and byte order."""
    nz, ny, nx = frames.shape
    dt = np.dtype(MODES[mode]).newbyteorder(">" if be else "<")
    with open(path, "wb") as f:
        f.write(header(nx, ny, nz, mode, be=be, nsymbt=len(ext), **kw))
        f.write(ext)
        f.write(frames.astype(dt).tobytes())


# FEI1 record fields (offset, struct code) as laid out in the Thermo Fisher MRC2014 notes (the
# record is packed: 768 bytes for metadata version 0 / FEI1, 888 for FEI2).
FEI = {"size": (0, "i"), "version": (4, "i"), "microscope": (20, "16s"), "ht": (84, "d"),
       "pixel_x": (156, "d"), "pixel_y": (164, "d"), "camera_length": (301, "d"),
       "convergence": (329, "d"), "camera": (435, "16s"), "dwell": (571, "d"),
       "left": (587, "i"), "top": (591, "i"), "right": (595, "i"), "bottom": (599, "i"),
       "fov_x": (603, "d"), "scan_rotation": (768, "d"), "dp_rotation": (776, "d"),
       "beam_x": (852, "i"), "beam_y": (856, "i")}


def fei_ext(nframes, be=False, fei2=False, **fields):
    e = ">" if be else "<"
    size = 888 if fei2 else 768
    rec = bytearray(size)
    fields = dict(fields, size=size, version=2 if fei2 else 0)
    for k, v in fields.items():
        off, code = FEI[k]
        struct.pack_into(e + code, rec, off, v)
    return bytes(rec) * nframes


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
    """The reader must refuse with exit 2 and one stderr line naming the file and each word."""
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
    ok = a is not None and a.shape == b.shape and np.array_equal(a, b)
    check(ok, f"{what}: values differ (shape {None if a is None else a.shape} vs {b.shape})")


def close(x, want, what, rel=1e-9):
    ok = x is not None and abs(x - want) <= rel * abs(want)
    check(ok, f"{what}: {x} != {want}")


def wavelength_m(kv):
    h, c, e, m = 6.62607015e-34, 299792458.0, 1.602176634e-19, 9.1093837015e-31
    V = kv * 1e3
    return h / (2 * m * e * V * (1 + e * V / (2 * m * c * c))) ** 0.5


def main():
    rng = np.random.default_rng(28)
    tmp = tempfile.mkdtemp(prefix="ssb4d-mrc-")
    p = lambda n: os.path.join(tmp, n)
    try:
        # 1. uint16 (mode 6), little-endian, non-square frames (ny 7 rows, nx 11 columns), scan
        #    shape given with --scan-shape; cell 22 x 14 A over mx, my = 11, 7: 2 A per pixel.
        d = rng.integers(0, 65535, size=(15, 7, 11), dtype=np.uint16)
        write_mrc(p("u16.mrc"), d, 6, cella=(22.0, 14.0, 1.0), mz=1,
                  labels=["ssb4d test: uint16 stack", "second label"])
        a, j = export(p("u16.mrc"), ["--scan-shape", "3,5"])
        same(a, d.reshape(3, 5, 7, 11), "mode 6 little-endian")
        if j:
            check(j["format"] == "mrc", f"format {j['format']}")
            check(j["shape"] == [3, 5, 7, 11], f"shape {j['shape']}")
            check(j["dtype"] == "uint16", f"dtype {j['dtype']}")
            m = j["metadata"]
            check(m.get("mrc_mode") == "6 (uint16)", f"mrc_mode {m.get('mrc_mode')}")
            check(m.get("mrc_pixel_spacing_xy") == "2 2 A", f"pixel spacing {m.get('mrc_pixel_spacing_xy')}")
            check(m.get("mrc_label_0") == "ssb4d test: uint16 stack", f"label {m.get('mrc_label_0')}")
            check(m.get("mrc_label_1") == "second label", f"label 1 {m.get('mrc_label_1')}")
            check(m.get("scan_shape_source") == "user", f"source {m.get('scan_shape_source')}")
            check(m.get("mrc_byte_order", "").startswith("little-endian (machine stamp"), "byte order")
            check(all(v is None for v in j["calibration"].values()), f"calibration {j['calibration']}")
        # the same file without --scan-shape: 15 frames, no record, not square
        refused(p("u16.mrc"), ["15 frames", "--scan-shape"], label="u16 without a scan shape")
        # --scan-shape that does not match the frame count
        refused(p("u16.mrc"), ["15 frames", "4x4"], ["--scan-shape", "4,4"], label="u16 wrong scan shape")
        # import to .qem (integer data) and back through export
        q = p("u16.qem")
        rc, so, se = run(["import", p("u16.mrc"), "-o", q, "--scan-shape", "3,5", "-q",
                          "--hot-pixels", "none"])
        check(rc == 0 and os.path.exists(q), f"import u16.mrc: rc {rc}: {se.strip()}")
        if rc == 0:
            a, _ = export(q, name="back.npy")
            same(a, d.reshape(3, 5, 7, 11), "mode 6 through .qem")

        # 2. int16 (mode 1), big-endian, a stack of volumes (ispg 401, mz 4): scan 3 x 4 from the
        #    header; every value >= 0.
        d = rng.integers(0, 32767, size=(12, 6, 5), dtype=np.int16)
        write_mrc(p("i16be.mrc"), d, 1, be=True, ispg=401, mz=4)
        a, j = export(p("i16be.mrc"))
        same(a, d.reshape(3, 4, 6, 5).astype(np.uint16), "mode 1 big-endian volume stack")
        if j:
            check(j["shape"] == [3, 4, 6, 5], f"volume stack shape {j['shape']}")
            check(j["dtype"] == "uint16", f"int16 exports as {j['dtype']}")
            m = j["metadata"]
            check(m.get("scan_shape_source") == "file", f"source {m.get('scan_shape_source')}")
            check("stack of volumes" in m.get("scan_shape_record", ""), f"record {m.get('scan_shape_record')}")
            check(m.get("mrc_byte_order", "").startswith("big-endian"), f"order {m.get('mrc_byte_order')}")
        # --scan-shape wins over the header
        a, j = export(p("i16be.mrc"), ["--scan-shape", "2,6"])
        same(a, d.reshape(2, 6, 6, 5).astype(np.uint16), "user scan shape over the volume stack")
        # a negative count is refused, naming frame and pixel
        d2 = d.copy()
        d2[7, 2, 3] = -5
        write_mrc(p("neg.mrc"), d2, 1, be=True, ispg=401, mz=4)
        refused(p("neg.mrc"), ["negative count -5", "frame 7", "pixel 2,3"])
        # a volume stack whose mz does not divide nz: no record, and 12 is not square
        write_mrc(p("badmz.mrc"), d, 1, be=True, ispg=401, mz=5)
        refused(p("badmz.mrc"), ["12 frames", "--scan-shape"])

        # 3. int8 (mode 0), little-endian, with a 256-byte extended header of another kind
        #    ("SERI") that is skipped, 9 frames = a 3 x 3 square scan.
        d = rng.integers(0, 127, size=(9, 4, 4), dtype=np.int8)
        ext = bytes(rng.integers(0, 255, size=256, dtype=np.uint8))
        write_mrc(p("i8.mrcs"), d, 0, ext=ext, exttyp=b"SERI")
        a, j = export(p("i8.mrcs"))
        same(a, d.reshape(3, 3, 4, 4).astype(np.uint8), "mode 0 with an extended header")
        if j:
            check(j["dtype"] == "uint8", f"int8 exports as {j['dtype']}")
            m = j["metadata"]
            check(m.get("scan_shape_source") == "square", f"source {m.get('scan_shape_source')}")
            check(m.get("mrc_exttyp") == "SERI", f"exttyp {m.get('mrc_exttyp')}")
            check(m.get("mrc_extended_header_bytes") == 256, "nsymbt")
        # mode 0 values above 127 are negative int8 in MRC2014: refused
        d3 = d.astype(np.int16)
        d3[4, 1, 2] = 200
        write_mrc(p("i8big.mrc"), d3.astype(np.uint8).view(np.int8), 0)
        refused(p("i8big.mrc"), ["negative count -56", "frame 4"])
        # ... but IMOD's files without its "signed" flag hold unsigned bytes
        write_mrc(p("imod.mrc"), d3.astype(np.uint8).view(np.int8), 0, imod_flags=0)
        a, j = export(p("imod.mrc"))
        same(a, d3.astype(np.uint8).reshape(3, 3, 4, 4), "IMOD unsigned bytes")
        # IMOD with the signed flag: signed again
        write_mrc(p("imods.mrc"), d3.astype(np.uint8).view(np.int8), 0, imod_flags=1)
        refused(p("imods.mrc"), ["negative count -56"])

        # 4. float32 (mode 2), big-endian, FEI1 extended header (Velox 4D-STEM): scan 2 x 4 from
        #    "Scan size" (rows = bottom - top, cols = right - left), calibration in SI units.
        d = rng.random(size=(8, 5, 6), dtype=np.float32) * 1000
        ext = fei_ext(8, be=True, ht=300000.0, camera_length=0.1, convergence=0.025, dwell=1e-5,
                      pixel_x=1.0e8, pixel_y=2.0e8, left=10, top=3, right=14, bottom=5,
                      microscope=b"Spectra 300", camera=b"Ceta-F", fov_x=2e-8)
        write_mrc(p("fei.mrc"), d, 2, be=True, ext=ext, exttyp=b"FEI1")
        a, j = export(p("fei.mrc"))
        same(a, d.reshape(2, 4, 5, 6), "mode 2 big-endian FEI1")
        if j:
            check(j["dtype"] == "float32", f"float dtype {j['dtype']}")
            c = j["calibration"]
            close(c["kv"], 300.0, "FEI HT")
            close(c["camera_length_mm"], 100.0, "FEI camera length")
            close(c["semiangle_mrad"], 25.0, "FEI convergence")
            close(c["dwell_us"], 10.0, "FEI dwell")
            lam = wavelength_m(300.0)
            if c["det_sampling_mrad"]:
                close(c["det_sampling_mrad"][0], 2.0e8 * lam * 1e3, "FEI sampling rows (Y)", 1e-6)
                close(c["det_sampling_mrad"][1], 1.0e8 * lam * 1e3, "FEI sampling cols (X)", 1e-6)
            else:
                check(False, "FEI detector sampling missing")
            check(c["scan_step_A"] is None, f"scan step {c['scan_step_A']}")
            m = j["metadata"]
            check(m.get("fei_microscope") == "Spectra 300", f"microscope {m.get('fei_microscope')}")
            check(m.get("fei_camera") == "Ceta-F", f"camera {m.get('fei_camera')}")
            check(m.get("fei_scan_size") == "left 10, top 3, right 14, bottom 5", f"scan size {m.get('fei_scan_size')}")
            check(m.get("fei_pixel_size_x") == "100000000 1/m", f"pixel x {m.get('fei_pixel_size_x')}")
            check(m.get("fei_full_scan_fov_x") == "2e-08 m", f"fov {m.get('fei_full_scan_fov_x')}")
            check("FEI extended header" in m.get("scan_shape_record", ""), "FEI record")
        # the FEI scan size disagreeing with the frame count is refused, unless --scan-shape
        ext = fei_ext(8, ht=300000.0, left=0, top=0, right=3, bottom=3)
        write_mrc(p("feibad.mrc"), d, 2, ext=ext, exttyp=b"FEI1")
        refused(p("feibad.mrc"), ["8 frames", "FEI extended header", "3x3", "--scan-shape"])
        a, j = export(p("feibad.mrc"), ["--scan-shape", "4,2"])
        same(a, d.reshape(4, 2, 5, 6), "FEI mismatch with --scan-shape")

        # 5. FEI2, little-endian uint16: rotations and the beam centre in the metadata
        d = rng.integers(0, 4000, size=(6, 4, 4), dtype=np.uint16)
        ext = fei_ext(6, fei2=True, ht=200000.0, left=0, top=0, right=3, bottom=2,
                      scan_rotation=0.5, dp_rotation=-0.25, beam_x=2, beam_y=1, pixel_x=5e-11, pixel_y=5e-11)
        write_mrc(p("fei2.mrc"), d, 6, ext=ext, exttyp=b"FEI2")
        a, j = export(p("fei2.mrc"))
        same(a, d.reshape(2, 3, 4, 4), "FEI2 uint16")
        if j:
            m, c = j["metadata"], j["calibration"]
            close(c["kv"], 200.0, "FEI2 HT")
            check(c["det_sampling_mrad"] is None, "real-space pixel size must not become sampling")
            check(m.get("fei_scan_rotation") == "0.5 rad", f"scan rotation {m.get('fei_scan_rotation')}")
            check(m.get("fei_diffraction_pattern_rotation") == "-0.25 rad", "dp rotation")
            check(m.get("fei_beam_center_pixel") == "2, 1", f"beam centre {m.get('fei_beam_center_pixel')}")
            check(m.get("fei_pixel_size_x") == "5.0000000000000002e-11 m", f"pixel {m.get('fei_pixel_size_x')}")

        # 6. Direct Electron: NAME_movie.mrc + NAME_info.txt (raster scan 4 x 2, 0.5 nm steps)
        d = rng.integers(0, 60000, size=(8, 3, 5), dtype=np.uint16)
        write_mrc(p("20240101_00007_movie.mrc"), d, 6)
        with open(p("20240101_00007_info.txt"), "w") as f:
            f.write("Camera Model = DE-16\nScan - Enable = Enable\nScan - Type = Raster\n"
                    "Scan - Size X = 4\nScan - Size Y = 2\n"
                    "Specimen Pixel Size X (nanometers) = 0.5\nSpecimen Pixel Size Y (nanometers) = 0.25\n"
                    "Instrument Project Camera Length (centimeters) = 8\nnot a key value line\n")
        a, j = export(p("20240101_00007_movie.mrc"))
        same(a, d.reshape(2, 4, 3, 5), "DE movie with _info.txt")
        if j:
            c, m = j["calibration"], j["metadata"]
            check(c["scan_step_A"] == [2.5, 5.0], f"DE scan step {c['scan_step_A']}")
            close(c["camera_length_mm"], 80.0, "DE camera length")
            check(m.get("de_info/Camera Model") == "DE-16", f"DE model {m.get('de_info/Camera Model')}")
            check("Direct Electron" in m.get("scan_shape_record", ""), "DE record")

        # 6b. Issue 39: DE-Server's _info.txt as it writes it (keys padded to a column, "Allowed
        #     Values" lines beside the values; RosettaSciIO's 20241021_00405 data): the
        #     accelerating voltage (V) and the dwell (us) are read.
        def de_text(kind, sx, sy, enable="Enable"):
            rows = [("Autosave Movie File Format", "MRC"), ("Camera Model", "Celeritas XS"),
                    ("Instrument Accelerating Voltage (V)", "300000"),
                    ("Instrument Accelerating Voltage (V) Allowed Values", "300000,200000,120000,80000,0"),
                    ("Instrument Project Camera Length (centimeters)", "0.1"),
                    ("Scan - Dwell Time (microseconds)", "1464.212499"), ("Scan - Enable", enable),
                    ("Scan - Points", str(sx * sy)), ("Scan - Size X", str(sx)), ("Scan - Size Y", str(sy)),
                    ("Scan - Type", kind), ("Scan - XY File", "D:\\XYFiles\\TimeSeriesTest.xy" if kind == "XY File" else ""),
                    ("Specimen Pixel Size X (nanometers)", "0.1"), ("Specimen Pixel Size Y (nanometers)", "0.2")]
            return "".join("%-64s= %s\r\n" % (k, v) for k, v in rows)

        d = rng.integers(0, 60000, size=(32, 4, 8), dtype=np.uint16)
        write_mrc(p("20241021_00405_movie.mrc"), d, 6)
        with open(p("20241021_00405_info.txt"), "w", newline="") as f:
            f.write(de_text("Raster", 8, 4))
        a, j = export(p("20241021_00405_movie.mrc"))
        same(a, d.reshape(4, 8, 4, 8), "DE-Server raster 4 x 8")
        if j:
            c = j["calibration"]
            close(c["kv"], 300.0, "DE accelerating voltage")
            close(c["dwell_us"], 1464.212499, "DE dwell")
            check(c["scan_step_A"] == [2.0, 1.0], f"DE scan step {c['scan_step_A']}")
            close(c["camera_length_mm"], 1.0, "DE camera length")
        # Random and XY-file scans are no raster whatever their frame count (16 is a square,
        # 30 is what the XY file listed): refused, --scan-shape or not
        for stem, kind, n in (("rand", "Random", 16), ("xy", "XY File", 30), ("rand2", "Random", 12)):
            d = rng.integers(0, 60000, size=(n, 3, 3), dtype=np.uint16)
            write_mrc(p(stem + "_movie.mrc"), d, 6)
            with open(p(stem + "_info.txt"), "w", newline="") as f:
                f.write(de_text(kind, 16, 32))
            refused(p(stem + "_movie.mrc"), [stem + "_info.txt", "Scan - Type = " + kind, "not a raster"])
            refused(p(stem + "_movie.mrc"), ["Scan - Type = " + kind], ["--scan-shape", f"2,{n // 2}"],
                    label=f"{stem} with --scan-shape")
            rc, so, se = run(["import", p(stem + "_movie.mrc"), "-o", p(stem + ".qem"), "-q"])
            check(rc == 2 and "not a raster" in se and not os.path.exists(p(stem + ".qem")),
                  f"import of a {kind} scan: rc {rc} {se.strip()}")
        # scanning disabled (an external scan controller): the type is DE's idle setting, not read
        d = rng.integers(0, 60000, size=(16, 3, 3), dtype=np.uint16)
        write_mrc(p("ext_movie.mrc"), d, 6)
        with open(p("ext_info.txt"), "w", newline="") as f:
            f.write(de_text("Random", 16, 32, enable="Disable"))
        a, j = export(p("ext_movie.mrc"))
        same(a, d.reshape(4, 4, 3, 3), "DE scan disabled: square")
        # a single 2-D image (a sum, a virtual image) is no scan: refused, not a 1x1 scan
        for name, extra in (("sum.mrc", []), ("sum1.mrc", ["--scan-shape", "1,1"])):
            write_mrc(p(name), rng.integers(0, 9, size=(1, 29, 12), dtype=np.uint16), 6)
            refused(p(name), ["single 29x12 image", "nz = 1"], extra, label=f"{name} {extra}")
        write_mrc(p("sum_f32.mrc"), rng.normal(size=(1, 4, 8)).astype(np.float32), 2)
        rc, so, se = run(["import", p("sum_f32.mrc"), "-o", p("sum.qem"), "-q", "--gain", "1"])
        check(rc == 2 and "single 4x8 image" in se and not os.path.exists(p("sum.qem")),
              f"import of a single image: rc {rc} {se.strip()}")

        # 7. A header older than MRC2000 (no "MAP ", no machine stamp), detected by its
        #    consistent sizes, both byte orders.
        for be in (False, True):
            d = rng.integers(0, 1000, size=(4, 3, 3), dtype=np.uint16)
            name = f"old{'be' if be else 'le'}.mrc"
            write_mrc(p(name), d, 6, be=be, stamp=False, map_=False)
            a, j = export(p(name))
            same(a, d.reshape(2, 2, 3, 3), f"old header {name}")
            if j:
                check("inferred" in j["metadata"].get("mrc_byte_order", ""), "inferred order")

        # 8. Corrupt headers: one line naming the file and the field, no output.
        d = rng.integers(0, 1000, size=(4, 3, 3), dtype=np.uint16)
        good = header(3, 3, 4, 6) + d.astype("<u2").tobytes()

        def patched(name, off, fmt, value, data=good):
            b = bytearray(data)
            struct.pack_into(fmt, b, off, *value)
            with open(p(name), "wb") as f:
                f.write(b)
            return p(name)

        refused(patched("nx.mrc", 0, "<i", (-5,)), ["nx", "-5"])
        refused(patched("nz.mrc", 8, "<i", (0,)), ["nz", "0"])
        refused(patched("mode77.mrc", 12, "<i", (77,)), ["mode", "77"])
        refused(patched("mode12.mrc", 12, "<i", (12,)), ["mode 12", "float16"])
        refused(patched("mode3.mrc", 12, "<i", (3,)), ["mode 3", "complex"])
        refused(patched("mode4.mrc", 12, "<i", (4,)), ["mode 4", "complex"])
        refused(patched("mode101.mrc", 12, "<i", (101,)), ["mode 101", "4-bit"])
        refused(patched("nsymbt.mrc", 92, "<i", (100000,)), ["nsymbt", "100000"])
        refused(patched("nsymbtneg.mrc", 92, "<i", (-4,)), ["nsymbt", "-4"])
        refused(patched("nsymbt8.mrc", 92, "<i", (8,)), ["nsymbt", "missing"])
        refused(patched("axes.mrc", 64, "<3i", (2, 1, 3)), ["mapc", "2,1,3"])
        refused(patched("ny.mrc", 4, "<i", (4,)), ["3 x 4 x 4", "missing"])
        with open(p("trunc.mrc"), "wb") as f:
            f.write(good[:-7])
        refused(p("trunc.mrc"), ["7 missing", "truncated"])
        with open(p("extra.mrc"), "wb") as f:
            f.write(good + b"\0" * 6)
        refused(p("extra.mrc"), ["6 too many"])
        with open(p("short.mrc"), "wb") as f:
            f.write(good[:600])
        refused(p("short.mrc"), ["600 bytes", "1024-byte MRC header"])
        # --format mrc on something else
        with open(p("noise.bin"), "wb") as f:
            f.write(bytes(rng.integers(0, 255, size=3000, dtype=np.uint8)))
        refused(p("noise.bin"), ["header field"], ["--format", "mrc", "--scan-shape", "1,1"],
                label="noise as --format mrc")

        # 9. Detection does not claim what is not MRC: random bytes named .mrc, a .npy, raw data
        with open(p("noise.mrc"), "wb") as f:
            f.write(bytes(rng.integers(0, 255, size=5000, dtype=np.uint8)))
        refused(p("noise.mrc"), ["does not have an MRC header"])
        np.save(p("plain.npy"), rng.integers(0, 9, size=(2, 2, 3, 3), dtype=np.uint16))
        a, j = export(p("plain.npy"))
        check(j is not None and j["format"] == "numpy", f"a .npy exported as {j and j['format']}")
        rc, so, se = run(["export", p("noise.bin"), "-o", p("nb.npy"), "-q"])
        check(rc == 2 and "looks like raw binary" in se, f"raw noise: {se.strip()}")
    finally:
        for n in os.listdir(tmp):
            os.remove(os.path.join(tmp, n))
        os.rmdir(tmp)
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        return 1
    print("test_mrc: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
