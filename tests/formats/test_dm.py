#!/usr/bin/env python3
"""test_dm.py — the Gatan DM3 / DM4 reader (src/formats/fs_dm.c) against an independent writer.

The writer below follows the community descriptions of the tag-file layout (Greg Jefferis' DM3
notes, Chris Boothroyd's DM3/DM4 pages): a big-endian header (version, root length, byte-order
flag), nested tag groups of named or unnamed entries, data tags "%%%%" + type words + value, all
structural words big-endian (4 bytes in DM3, 8 in DM4, where every entry also carries its byte
length) and values in the flag's byte order. Each file holds a thumbnail first (a small RGBA
image named by Thumbnails/0/ImageIndex), the 4-D dataset with Dimensions fastest first
(det_col, det_row, scan_col, scan_row), calibrations and ImageTags of every value type (scalars
of each simple type, UTF-16 text, a type-18 string, structs, arrays of structs, arrays of text,
64-bit integers, a nested group), and often a further 2-D image.

What is checked: `ssb4d export --json` gives back every value (DM3 and DM4; little- and
big-endian; uint8, int8, uint16, int16, uint32, int32, float32; two shapes), the calibration
(kV, scan step with nm / µm units, detector sampling in mrad / rad, camera length, dwell,
convergence semi-angle) and the tags in the metadata under their paths; 3-D frame stacks with
--scan-shape or the file's Scan shape tags; --dataset; `ssb4d import` of integer data. Corrupt
files (truncated at several points, version, byte order, a tag count, a dimension, the data type,
the data size, the type words, the "%%%%" mark, nesting) and unsupported data types each give
exit status 2 with one line naming the file, and no output file.

argv[1] = the ssb4d binary, argv[2] = the build directory. `--write-seeds DIR` writes small
files for the fuzz corpus instead. Exit 77 = skipped (no numpy).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # the first python3 on PATH may lack numpy; CMake runs /usr/bin/python3
    print("numpy not available: skipped")
    sys.exit(77)

# ------------------------------------------------------------------------------------------
# The writer

SHORT, LONG, USHORT, ULONG, FLOAT, DOUBLE, BOOL, CHAR, OCTET, LLONG, ULLONG = 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12
STRUCT, STRING, ARRAY = 15, 18, 20
FMT = {SHORT: "h", LONG: "i", USHORT: "H", ULONG: "I", FLOAT: "f", DOUBLE: "d", BOOL: "B",
       CHAR: "b", OCTET: "B", LLONG: "q", ULLONG: "Q"}
NP = {SHORT: "i2", LONG: "i4", USHORT: "u2", ULONG: "u4", FLOAT: "f4", DOUBLE: "f8", BOOL: "u1",
      CHAR: "i1", OCTET: "u1", LLONG: "i8", ULLONG: "u8"}


class Scalar:
    def __init__(self, code, value):
        self.code, self.value = code, value

    def info(self):
        return [self.code]

    def data(self, e):
        return struct.pack(e + FMT[self.code], self.value)


class Text:  # the usual DM text: an array of uint16 (UTF-16 code units)
    def __init__(self, s):
        self.s = s

    def info(self):
        return [ARRAY, USHORT, len(self.s.encode("utf-16-le")) // 2]

    def data(self, e):
        return self.s.encode("utf-16-le" if e == "<" else "utf-16-be")


class String18:  # type 18: bytes
    def __init__(self, b):
        self.b = b

    def info(self):
        return [STRING, len(self.b)]

    def data(self, e):
        return self.b


class Struct:
    def __init__(self, fields):  # [(code, value)]
        self.fields = fields

    def info(self):
        out = [STRUCT, 0, len(self.fields)]
        for code, _ in self.fields:
            out += [0, code]
        return out

    def data(self, e):
        return b"".join(struct.pack(e + FMT[c], v) for c, v in self.fields)


class Array:
    def __init__(self, code, values):
        self.code, self.values = code, np.asarray(values)

    def info(self):
        return [ARRAY, self.code, self.values.size]

    def data(self, e):
        return np.ascontiguousarray(self.values, dtype=np.dtype(NP[self.code]).newbyteorder(e)).tobytes()


class StructArray:
    def __init__(self, codes, rows):
        self.codes, self.rows = codes, rows

    def info(self):
        out = [ARRAY, STRUCT, 0, len(self.codes)]
        for c in self.codes:
            out += [0, c]
        return out + [len(self.rows)]

    def data(self, e):
        return b"".join(struct.pack(e + FMT[c], v) for r in self.rows for c, v in zip(self.codes, r))


class TextArray:  # an array of arrays of uint16: [20, 20, 4, length, count]
    def __init__(self, strings):
        n = max(len(s) for s in strings)
        self.strings = [s.ljust(n, "\0") for s in strings]

    def info(self):
        return [ARRAY, ARRAY, USHORT, len(self.strings[0]), len(self.strings)]

    def data(self, e):
        return b"".join(s.encode("utf-16-le" if e == "<" else "utf-16-be") for s in self.strings)


class Writer:
    """Serialises a tree: a group is a list of (name, value) pairs ("" = unnamed), a value is
    a group (list) or one of the value classes. Records where things went (offsets) by path."""

    def __init__(self, version, little):
        self.v, self.e = version, "<" if little else ">"
        self.w = 4 if version == 3 else 8
        self.little = little
        self.at = {}

    def word(self, x):
        return struct.pack(">I" if self.w == 4 else ">Q", x)

    def group(self, entries, base, path):
        out = bytearray(b"\x01\x00")
        self.at[path + "#count"] = base + len(out)
        out += self.word(len(entries))
        for k, (name, value) in enumerate(entries):
            sub = (path + "/" if path else "") + (name if name else str(k))
            nb = name.encode("latin-1")
            head = bytes([20 if isinstance(value, list) else 21]) + struct.pack(">H", len(nb)) + nb
            self.at[sub + "#entry"] = base + len(out)
            start = base + len(out) + len(head) + (8 if self.v == 4 else 0)
            body = self.group(value, start, sub) if isinstance(value, list) else self.tag(value, start, sub)
            out += head
            if self.v == 4:
                out += struct.pack(">Q", len(body))
            out += body
        return bytes(out)

    def tag(self, value, base, path):
        info = value.info()
        out = b"%%%%" + self.word(len(info)) + b"".join(self.word(i) for i in info)
        self.at[path + "#info"] = base + 4 + self.w
        self.at[path + "#value"] = base + len(out)
        return out + value.data(self.e)

    def file(self, root):
        hb = 12 if self.v == 3 else 16
        body = self.group(root, hb, "")
        head = struct.pack(">I", self.v) + self.word(len(body) + 8) + struct.pack(">I", 1 if self.little else 0)
        return head + body + b"\0" * 8


DTYPES = {  # numpy dtype: (DM DataType, element code of the Data array)
    "u1": (6, OCTET), "i1": (9, CHAR), "u2": (10, USHORT), "i2": (1, SHORT),
    "u4": (11, ULONG), "i4": (7, LONG), "f4": (2, FLOAT),
}


def calib(origin, scale, units):
    return [("Origin", Scalar(FLOAT, origin)), ("Scale", Scalar(FLOAT, scale)), ("Units", Text(units))]


def image_entry(arr, dm_type, cal_dims, tags, name="4D-STEM", pad=0):
    """An ImageList entry holding arr (C order); Dimensions are written fastest first. pad
    values more (or fewer, when negative) go into the Data array than the dimensions need."""
    dims = list(arr.shape[::-1])
    elem = DTYPES[arr.dtype.str[1:]][1] if dm_type is None else dm_type[1]
    code = DTYPES[arr.dtype.str[1:]][0] if dm_type is None else dm_type[0]
    return [
        ("ImageData", [
            ("Calibrations", [
                ("Brightness", calib(0.0, 1.0, "counts")),
                ("Dimension", [("", c) for c in cal_dims]),
                ("DisplayCalibratedUnits", Scalar(BOOL, 1)),
            ]),
            ("Data", Array(elem, np.resize(arr.ravel(), arr.size + pad))),
            ("DataType", Scalar(LONG, code)),
            ("Dimensions", [("", Scalar(ULONG, d)) for d in dims]),
            ("PixelDepth", Scalar(ULONG, arr.dtype.itemsize)),
        ]),
        ("ImageTags", tags),
        ("Name", Text(name)),
        ("UniqueID", Struct([(ULONG, 11), (ULONG, 22), (ULONG, 33), (ULONG, 44)])),
    ]


def thumbnail():
    rgba = np.arange(8 * 8, dtype="<u4").reshape(8, 8) * 0x01010101
    return image_entry(rgba, (23, ULONG), [calib(0, 1, ""), calib(0, 1, "")], [], name="thumbnail")


def standard_tags(dm3_units=False):
    """ImageTags of every kind; the calibration values the reader should find."""
    mi = [("Voltage", Scalar(DOUBLE, 200000.0)),
          ("Indicated Magnification", Scalar(FLOAT, 8000000.0)),
          ("Microscope", Text("Test TEM µ")),
          ("Illumination Mode", Text("STEM"))]
    mi.append(("Camera Length", Scalar(FLOAT, 91.0)) if dm3_units else ("STEM Camera Length", Scalar(FLOAT, 115.0)))
    return [
        ("Acquisition", [
            ("Parameters", [("High Level", [("Binning", Struct([(LONG, 2), (LONG, 2)])),
                                            ("Exposure (s)", Scalar(DOUBLE, 0.001))])]),
            ("Frame", [("Area", Array(LONG, [0, 0, 512, 512])),
                       ("Sequence", [("Count", Scalar(LLONG, -5)), ("Big", Scalar(ULLONG, 2 ** 40))])]),
        ]),
        ("DigiScan", [("Sample Time", Scalar(DOUBLE, 12.5)), ("Flyback", Scalar(SHORT, -3)),
                      ("Rotation", Scalar(FLOAT, 1.25)), ("Enabled", Scalar(BOOL, 1)),
                      ("Channel", Scalar(CHAR, -7)), ("Flags", Scalar(OCTET, 200)),
                      ("Lines", Scalar(USHORT, 60000))]),
        ("EELS", [("Experimental Conditions", [("Convergence semi-angle (mrad)", Scalar(FLOAT, 21.5))])]),
        ("Microscope Info", mi),
        ("Session Info", [("Operator", String18(b"operator 7")), ("Items", TextArray(["ab", "cde"]))]),
        ("Markers", StructArray([FLOAT, FLOAT, LONG], [(1.5, 2.5, 3), (4.5, 5.5, 6)])),
        ("", Scalar(LONG, 42)),
    ]


def dm_file(version, little, arr, cal_dims, tags, extra_image=None, dm_type=None, extra_root=None, pad=0):
    images = [("", thumbnail()), ("", image_entry(arr, dm_type, cal_dims, tags, pad=pad))]
    if extra_image is not None:
        images.append(("", image_entry(extra_image, None, [calib(0, 2, "nm")] * extra_image.ndim, [], "HAADF")))
    root = [
        ("ApplicationBounds", Array(LONG, [0, 0, 1024, 768])),
        ("DocumentObjectList", [("", [("AnnotationType", Scalar(LONG, 20))])]),
        ("ImageList", images),
        ("Image Behavior", [("ViewDisplayID", Scalar(ULONG, 8))]),
        ("Thumbnails", [("", [("ImageIndex", Scalar(ULONG, 0)),
                              ("SourceSize_Pixels", Array(LONG, [8, 8]))])]),
    ]
    if extra_root:
        root += extra_root
    w = Writer(version, little)
    return w.file(root), w.at


def values(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        a = rng.normal(3.0, 2.0, shape).astype(np.float32)
        a.flat[0] = -1.5
        return a
    hi = {1: 255, 2: 65535, 4: 2 ** 31 - 1}[dt.itemsize] if dt.kind == "u" else np.iinfo(dt).max
    a = rng.integers(0, min(hi, 1000) + 1, shape).astype(dt)
    a.flat[-1] = hi  # the top of the range
    if dt.itemsize == 4:
        a.flat[1] = 70000 + seed
    return a


# ------------------------------------------------------------------------------------------
# Running ssb4d

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def run(args):
    return subprocess.run([SSB4D] + args, capture_output=True, text=True)


def export(path, extra=()):
    out = path + ".npy"
    if os.path.exists(out):
        os.remove(out)
    r = run(["export", path, "-o", out, "--json", "-q"] + list(extra))
    if r.returncode != 0:
        return r, None, None
    return r, json.loads(r.stdout), np.load(out)


def close(a, b):
    return a is not None and b is not None and abs(a - b) <= 1e-6 * max(1.0, abs(b))


def expect_refusal(path, label, extra=(), needle=None, cmd="export"):
    out = path + (".npy" if cmd == "export" else ".qem")
    if os.path.exists(out):
        os.remove(out)
    r = run([cmd, path, "-o", out, "-q"] + list(extra))
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == 2, "%s: exit %d, 2 expected (%s)" % (label, r.returncode, r.stderr.strip()))
    check(len(lines) == 1, "%s: %d error lines: %r" % (label, len(lines), r.stderr))
    check(os.path.basename(path) in r.stderr, "%s: the error does not name the file: %r" % (label, r.stderr))
    check(not os.path.exists(out), "%s: an output was left behind" % label)
    if needle:
        check(needle in r.stderr, "%s: %r not in %r" % (label, needle, r.stderr.strip()))
    return r.stderr.strip()


# ------------------------------------------------------------------------------------------
# The cases

def good_cases(tmp):
    cases = [  # version, little, scan, det, dtype, scan units, det units
        (4, True, (3, 4), (5, 6), "u2", "nm", "mrad"),
        (3, True, (4, 2), (8, 8), "i2", "µm", "rad"),
        (4, False, (3, 4), (5, 6), "u1", "nm", "mrad"),
        (3, False, (4, 2), (8, 8), "f4", "nm", "mrad"),
        (4, True, (4, 2), (8, 8), "f4", "Å", "mrad"),
        (4, False, (3, 4), (5, 6), "i2", "nm", "mrad"),
        (3, True, (3, 4), (5, 6), "u4", "nm", "mrad"),
        (4, True, (4, 2), (8, 8), "i4", "nm", "mrad"),
        (3, False, (3, 4), (5, 6), "i1", "nm", "mrad"),
        (3, True, (4, 2), (8, 8), "u2", "nm", "mrad"),
    ]
    for i, (ver, little, scan, det, dt, su, du) in enumerate(cases):
        arr = values(scan + det, dt, i)
        # Dimension k is DM axis k: det_col, det_row, scan_col, scan_row (fastest first)
        cal = [calib(-2.0, 0.25 + i, du), calib(-3.0, 0.5 + i, du), calib(0, 0.125 * (i + 1), su),
               calib(0, 0.0625 * (i + 2), su)]
        extra = values((6, 7), "f4", 99) if i % 2 == 0 else None
        data, _ = dm_file(ver, little, arr, cal, standard_tags(dm3_units=(ver == 3)), extra_image=extra)
        name = "case%d.dm%d" % (i, ver)
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        label = "%s (DM%d %s-endian %s %s x %s)" % (name, ver, "little" if little else "big", dt, scan, det)
        r, js, got = export(path)
        if js is None:
            check(False, "%s: export failed: %s" % (label, r.stderr.strip()))
            continue
        want_dtype = {"u1": "uint8", "i1": "uint8", "u2": "uint16", "i2": "uint16", "u4": "uint32",
                      "i4": "uint32", "f4": "float32"}[dt]
        check(js["format"] == "gatan-dm", "%s: format %s" % (label, js["format"]))
        check(js["shape"] == list(scan + det), "%s: shape %s" % (label, js["shape"]))
        check(js["dtype"] == want_dtype, "%s: dtype %s" % (label, js["dtype"]))
        check(got.shape == scan + det, "%s: npy shape %s" % (label, got.shape))
        if dt == "f4":
            check(got.dtype == np.float32 and np.array_equal(got, arr), "%s: float values differ" % label)
        else:
            check(np.array_equal(got.astype(np.int64), arr.astype(np.int64)), "%s: values differ" % label)
        c = js["calibration"]
        check(close(c["kv"], 200.0), "%s: kv %s" % (label, c["kv"]))
        sf = {"nm": 10.0, "µm": 1e4, "Å": 1.0}[su]
        af = {"mrad": 1.0, "rad": 1e3}[du]
        ss, ds = c["scan_step_A"], c["det_sampling_mrad"]
        check(ss is not None and close(ss[0], 0.0625 * (i + 2) * sf) and close(ss[1], 0.125 * (i + 1) * sf),
              "%s: scan step %s" % (label, ss))
        check(ds is not None and close(ds[0], (0.5 + i) * af) and close(ds[1], (0.25 + i) * af),
              "%s: det sampling %s" % (label, ds))
        check(close(c["camera_length_mm"], 91.0 if ver == 3 else 115.0), "%s: camera length %s" % (label, c["camera_length_mm"]))
        check(close(c["dwell_us"], 12.5), "%s: dwell %s" % (label, c["dwell_us"]))
        check(close(c["semiangle_mrad"], 21.5), "%s: semi-angle %s" % (label, c["semiangle_mrad"]))
        md = js["metadata"]
        p = "ImageList/1/"
        want = {
            p + "ImageTags/Microscope Info/Voltage": 200000.0,
            p + "ImageTags/Microscope Info/Indicated Magnification": 8000000.0,
            p + "ImageTags/Microscope Info/Microscope": "Test TEM µ",
            p + "ImageTags/DigiScan/Sample Time": 12.5,
            p + "ImageTags/DigiScan/Flyback": -3,
            p + "ImageTags/DigiScan/Enabled": 1,
            p + "ImageTags/DigiScan/Channel": -7,
            p + "ImageTags/DigiScan/Flags": 200,
            p + "ImageTags/DigiScan/Lines": 60000,
            p + "ImageTags/DigiScan/Rotation": 1.25,
            p + "ImageTags/Acquisition/Frame/Sequence/Count": -5,
            p + "ImageTags/Acquisition/Frame/Sequence/Big": float(2 ** 40),
            p + "ImageTags/Acquisition/Frame/Area": "[0, 0, 512, 512]",
            p + "ImageTags/Acquisition/Parameters/High Level/Binning": "[2, 2]",
            p + "ImageTags/Session Info/Operator": "operator 7",
            p + "ImageTags/6": 42,
            p + "ImageData/Calibrations/Dimension/2/Units": su,
            p + "ImageData/Calibrations/Dimension/0/Origin": -2.0,
            p + "ImageData/DataType": DTYPES[dt][0],
            p + "ImageData/Dimensions/0": det[1],
            p + "ImageData/Dimensions/3": scan[0],
            p + "Name": "4D-STEM",
            p + "UniqueID": "[11, 22, 33, 44]",
            "dm_version": ver,
            "dm_byte_order": "little-endian" if little else "big-endian",
            "dm_image_index": 1,
            "kv_source": p + "ImageTags/Microscope Info/Voltage",
            "dwell_source": p + "ImageTags/DigiScan/Sample Time",
        }
        for k, v in want.items():
            got_v = md.get(k)
            ok = close(got_v, v) if isinstance(v, (int, float)) and isinstance(got_v, (int, float)) else got_v == v
            check(ok, "%s: metadata %r = %r, %r expected" % (label, k, got_v, v))
        check(not any(k.startswith("ImageList/0/") or k.startswith("ImageList/2/") for k in md),
              "%s: tags of other images in the metadata" % label)
        check(not any(k.endswith("ImageData/Data") for k in md), "%s: the data in the metadata" % label)
        # signed data with a negative value: refused at read, naming the frame
        if dt in ("i1", "i2", "i4"):
            neg = arr.copy()
            neg[1, 1, 2, 3] = -4
            data, _ = dm_file(ver, little, neg, cal, [])
            npath = os.path.join(tmp, "neg%d.dm%d" % (i, ver))
            with open(npath, "wb") as f:
                f.write(data)
            expect_refusal(npath, "negative %s" % label, needle="negative")
        # --dataset: 1 is the dataset, 0 the thumbnail (2-D), 5 does not exist
        if i == 0:
            r, js1, got1 = export(path, ["--dataset", "1"])
            check(js1 is not None and np.array_equal(got1, arr), "--dataset 1: %s" % r.stderr.strip())
            expect_refusal(path, "--dataset 0 (thumbnail)", ["--dataset", "0"], "2 dimensions")
            expect_refusal(path, "--dataset 5", ["--dataset", "5"], "ImageList has 3 entries")
            expect_refusal(path, "--dataset x", ["--dataset", "x"], "ImageList entry")
            expect_refusal(path, "--scan-shape 4,3", ["--scan-shape", "4,3"], "3x4 scan")
            # import works for integer data
            qem = os.path.join(tmp, "case0.qem")
            r = run(["import", path, "-o", qem, "-q", "--hot-pixels", "none"])
            check(r.returncode == 0 and os.path.exists(qem), "import %s: %s" % (name, r.stderr.strip()))
            r = run(["export", qem, "-o", qem + ".npy", "-q"])
            check(r.returncode == 0 and np.array_equal(np.load(qem + ".npy"), arr), "the .qem of %s differs" % name)
        if dt == "f4" and i == 3:
            expect_refusal(path, "import of float data without --gain", needle="float", cmd="import")
    return cases


def stack_cases(tmp):
    """3-D stacks (frame, det_row, det_col): the scan shape from the user or the file."""
    arr = values((12, 5, 6), "u2", 7)
    cal = [calib(0, 0.5, "mrad"), calib(0, 0.75, "mrad"), calib(0, 1, "")]
    data, _ = dm_file(4, True, arr, cal, [("Microscope Info", [("Voltage", Scalar(FLOAT, 300000.0))])])
    path = os.path.join(tmp, "stack.dm4")
    with open(path, "wb") as f:
        f.write(data)
    r, js, got = export(path, ["--scan-shape", "3,4"])
    check(js is not None and got.shape == (3, 4, 5, 6) and np.array_equal(got.reshape(12, 5, 6), arr),
          "stack --scan-shape 3,4: %s" % r.stderr.strip())
    if js:
        check(js["metadata"].get("scan_shape_source") == "user", "stack: scan_shape_source %s" % js["metadata"].get("scan_shape_source"))
        check(close(js["calibration"]["kv"], 300.0), "stack: kv")
        check(js["calibration"]["scan_step_A"] is None, "stack: a scan step from a frame axis")
        check(close(js["calibration"]["det_sampling_mrad"][0], 0.75), "stack: det sampling")
    expect_refusal(path, "stack without a scan shape", needle="--scan-shape")
    tags = [("4D STEM Tags", [("Scan shape X", Scalar(ULONG, 4)), ("Scan shape Y", Scalar(ULONG, 3))])]
    data, _ = dm_file(3, False, arr, cal, tags)
    path = os.path.join(tmp, "stack_tags.dm3")
    with open(path, "wb") as f:
        f.write(data)
    r, js, got = export(path)
    check(js is not None and got.shape == (3, 4, 5, 6) and np.array_equal(got.reshape(12, 5, 6), arr),
          "stack with Scan shape tags: %s" % r.stderr.strip())
    if js:
        check(js["metadata"].get("scan_shape_source") == "file", "stack tags: scan_shape_source")


def corrupt_cases(tmp):
    arr = values((3, 4, 5, 6), "u2", 3)
    cal = [calib(0, 1, "mrad")] * 2 + [calib(0, 1, "nm")] * 2
    for ver in (3, 4):
        data, at = dm_file(ver, True, arr, cal, standard_tags())
        w = 4 if ver == 3 else 8
        p = "ImageList/1/ImageData/"
        n = 0

        def bad(label, blob, extra=(), needle=None, suffix=None):
            nonlocal n
            n += 1
            path = os.path.join(tmp, "bad%d_%d%s" % (ver, n, suffix or ".dm%d" % ver))
            with open(path, "wb") as f:
                f.write(blob)
            return expect_refusal(path, "DM%d %s" % (ver, label), extra, needle)

        def patch(off, raw):
            b = bytearray(data)
            b[off:off + len(raw)] = raw
            return bytes(b)

        word = (lambda x: struct.pack(">I", x)) if ver == 3 else (lambda x: struct.pack(">Q", x))
        data_at = at[p + "Data#value"]
        end_tags = len(data) - 8
        for cut in sorted({3, 10, 14, 40, 200, data_at - 3, data_at + 1, data_at + arr.nbytes // 2,
                           data_at + arr.nbytes + 5, (data_at + arr.nbytes + end_tags) // 2, end_tags - 1}):
            bad("truncated at %d" % cut, data[:cut])
        bad("empty", b"")
        bad("version 5", patch(0, struct.pack(">I", 5)), needle="DM3")
        bad("version 5 (--format dm)", patch(0, struct.pack(">I", 5)), ["--format", "dm"], "DM version 5")
        bad("byte order 2 (--format dm)", patch(4 + w, struct.pack(">I", 2)), ["--format", "dm"], "byte-order")
        bad("ImageList count", patch(at["ImageList#count"], word(99999)), needle="claims 99999 entries")
        bad("root count", patch(at["#count"], word(2 ** 31)), needle="entries")
        bad("Dimensions/0 = 7", patch(at[p + "Dimensions/0#value"], struct.pack("<I", 7)), needle="need")
        bad("Dimensions/2 = 0", patch(at[p + "Dimensions/2#value"], struct.pack("<I", 0)), needle="Dimensions/2")
        bad("Dimensions count 5", patch(at[p + "Dimensions#count"], word(5)))
        for code, name in ((12, "float64"), (3, "complex64"), (13, "complex128"), (8, "RGB"), (23, "RGBA"),
                           (14, "bool"), (5, "packed complex"), (27, "packed complex64"), (0, "null"), (77, "unknown")):
            bad("DataType %d" % code, patch(at[p + "DataType#value"], struct.pack("<i", code)),
                needle="DM data type %d (%s" % (code, name))
        bad("DataType uint32 over uint16 values", patch(at[p + "DataType#value"], struct.pack("<i", 11)),
            needle="not of the 4-byte values")
        bad("PixelDepth 4", patch(at[p + "PixelDepth#value"], struct.pack("<I", 4)), needle="PixelDepth")
        info = at[p + "Data#info"]
        bad("Data count + 1", patch(info + 2 * w, word(arr.size + 1)))
        bad("Data count - 6", patch(info + 2 * w, word(arr.size - 6)))
        for pad in (1, -1, -30):
            blob, _ = dm_file(ver, True, arr, cal, [], pad=pad)
            bad("%+d values in Data" % pad, blob, needle="Data holds %d values" % (arr.size + pad))
        bad("Data count huge", patch(info + 2 * w, word(2 ** 31 - 1)), needle="bytes left")
        bad("Data element float64", patch(info + w, word(DOUBLE)))
        bad("unknown type code", patch(info + w, word(13)), needle="bad type")
        bad("type words", patch(info - w, word(2 ** 30)), needle="type words")
        bad("%%%% mark", patch(info - 4 - w, b"%%#%"), needle="%%%%")
        bad("entry kind", patch(at[p + "DataType#entry"], b"\x07"), needle="kind 7")
        bad("name length", patch(at[p + "DataType#entry"] + 1, b"\xff\xff"), needle="name")
        if ver == 4:
            bad("DM4 tag length", patch(at[p + "DataType#entry"] + 3 + 8, struct.pack(">Q", 2 ** 62)), needle="bytes")
        # nesting beyond 64 groups
        deep = ("leaf", Scalar(LONG, 1))
        for _ in range(70):
            deep = ("g", [deep])
        blob, _ = dm_file(ver, True, arr, cal, [], extra_root=[deep])
        bad("nesting", blob, needle="nested")
        # no 3-D / 4-D data at all
        w2 = Writer(ver, True)
        blob = w2.file([("ImageList", [("", thumbnail()), ("", image_entry(values((6, 7), "f4", 1), None,
                                                                           [calib(0, 1, "nm")] * 2, []))])])
        bad("no 4-D dataset", blob, needle="no 4-D dataset")
        bad("no ImageList", Writer(ver, True).file([("Other", Scalar(LONG, 1))]), needle="ImageList")
        bad("not a DM file", b"hello, world" + bytes(100), needle="does not start like")


def issue39_cases(tmp):
    """Issue 39: a tag valued inf (GMS writes 'Exposure Live Time' = inf) must not fail the
    import; spectrum images (EELS / CL / EDS: a spectrum per scan position, the layout of
    RosettaSciIO's EELS_SI.dm4) are refused by name, with or without --scan-shape."""
    arr = values((3, 4, 5, 6), "u2", 21)
    cal = [calib(0, 1, "mrad")] * 2 + [calib(0, 1, "nm")] * 2
    tags = standard_tags() + [("Acquisition2", [
        ("Exposure Live Time", Scalar(DOUBLE, float("inf"))),
        ("Exposure Dead Time", Scalar(FLOAT, float("-inf"))),
        ("Unset", Scalar(DOUBLE, float("nan"))),
        ("Range", Array(DOUBLE, [1.0, float("inf")]))]),
        ("Meta Data", [("Signal", Text("Diffraction")), ("Format", Text("Diffraction image"))])]
    for ver in (3, 4):
        data, _ = dm_file(ver, ver == 4, arr, cal, tags)
        path = os.path.join(tmp, "inf.dm%d" % ver)
        with open(path, "wb") as f:
            f.write(data)
        qem = path + ".qem"
        r = run(["import", path, "-o", qem, "-q", "--hot-pixels", "none"])
        check(r.returncode == 0 and os.path.exists(qem), "import of DM%d with an inf tag: rc %d %s"
              % (ver, r.returncode, r.stderr.strip()))
        if r.returncode == 0:
            r = run(["export", qem, "-o", qem + ".npy", "-q"])
            check(r.returncode == 0 and np.array_equal(np.load(qem + ".npy"), arr),
                  "DM%d inf tag: the .qem's counts differ" % ver)
        r, js, got = export(path)
        check(js is not None, "export of DM%d with an inf tag: %s" % (ver, r.stderr.strip()))
        if js:
            md, p = js["metadata"], "ImageList/1/ImageTags/Acquisition2/"
            for k, v in (("Exposure Live Time", "inf"), ("Exposure Dead Time", "-inf"), ("Unset", "nan"),
                         ("Range", "[1, inf]")):
                check(md.get(p + k) == v, "DM%d: %s = %r, %r expected" % (ver, k, md.get(p + k), v))
    # spectrum images: the energy axis as "frames" (3-D, 2048 channels would be 2048 frames) or
    # a 4-D one; GMS's Meta Data, Orsay's spim group, a Monarc CL spectrometer group
    si = values((6, 4, 4), "f4", 22)  # energy, y, x: DM dims x, y, E (E slowest)
    si_cal = [calib(0, 0.002, "µm"), calib(0, 0.002, "µm"), calib(-300, 1, "eV")]
    kinds = [
        ("eels", [("Meta Data", [("Signal", Text("EELS")), ("Format", Text("Spectrum image"))])],
         "an EELS spectrum image"),
        ("cl", [("Meta Data", [("Signal", Text("CL")), ("Format", Text("Spectrum image"))])],
         "a CL spectrum image"),
        ("eds", [("Meta Data", [("Signal", Text("X-ray"))])], "an EDS spectrum image"),
        ("format", [("Meta Data", [("Format", Text("Spectrum image"))])], "a spectrum image"),
        ("orsay", [("spim", [("eels", [("Dispersion", Scalar(FLOAT, 0.5))])])], "spim"),
        ("monarc", [("Acquisition", [("Monarc Spectrometer", [("Grating", Scalar(LONG, 2))])])],
         "a CL spectrum image"),
    ]
    for name, t, words in kinds:
        data, _ = dm_file(4, True, si, si_cal, t)
        path = os.path.join(tmp, "si_%s.dm4" % name)
        with open(path, "wb") as f:
            f.write(data)
        expect_refusal(path, "spectrum image %s" % name, needle=words)
        expect_refusal(path, "spectrum image %s --scan-shape 2,3" % name, ["--scan-shape", "2,3"], words)
        expect_refusal(path, "spectrum image %s import" % name, ["--scan-shape", "2,3"], "spectrum image",
                       cmd="import")
    data, _ = dm_file(3, False, arr, cal, [("Meta Data", [("Signal", Text("EELS")),
                                                          ("Format", Text("Spectrum image"))])])
    path = os.path.join(tmp, "si_4d.dm3")
    with open(path, "wb") as f:
        f.write(data)
    expect_refusal(path, "4-D EELS spectrum image", needle="EELS spectrum image")


def write_seeds(folder):
    os.makedirs(folder, exist_ok=True)
    arr = values((2, 2, 3, 3), "u2", 1)
    cal = [calib(0, 1, "mrad")] * 2 + [calib(0, 1, "nm")] * 2
    for ver in (3, 4):
        for little in (True, False):
            data, _ = dm_file(ver, little, arr, cal, standard_tags(), extra_image=values((2, 3), "f4", 2))
            with open(os.path.join(folder, "dm%d-%s-u2-4d" % (ver, "le" if little else "be")), "wb") as f:
                f.write(data)
        data, _ = dm_file(ver, True, values((4, 3, 2), "f4", 3), cal[:3], [])
        with open(os.path.join(folder, "dm%d-f4-stack" % ver), "wb") as f:
            f.write(data)
        data, _ = dm_file(ver, True, values((2, 1, 2, 2), "i1", 4), cal, [], dm_type=(12, DOUBLE))
        with open(os.path.join(folder, "dm%d-float64-refused" % ver), "wb") as f:
            f.write(data)
        # issue 39: non-finite tag values, and an EELS spectrum image (refused by the reader)
        data, _ = dm_file(ver, True, arr, cal, [("Exposure Live Time", Scalar(DOUBLE, float("inf"))),
                                                ("Dead", Scalar(FLOAT, float("nan")))])
        with open(os.path.join(folder, "dm%d-inf-tag" % ver), "wb") as f:
            f.write(data)
        data, _ = dm_file(ver, False, values((4, 2, 2), "f4", 5), [calib(0, 1, "µm")] * 2 + [calib(0, 1, "eV")],
                          [("Meta Data", [("Signal", Text("EELS")), ("Format", Text("Spectrum image"))])])
        with open(os.path.join(folder, "dm%d-eels-si" % ver), "wb") as f:
            f.write(data)


def main():
    global SSB4D
    if len(sys.argv) >= 3 and sys.argv[1] == "--write-seeds":
        write_seeds(sys.argv[2])
        return 0
    if len(sys.argv) < 2:
        print("usage: test_dm.py SSB4D [BUILD_DIR] | --write-seeds DIR")
        return 2
    SSB4D = sys.argv[1]
    if run(["export", "--help"]).returncode != 0:
        print("ssb4d export is not available: skipped")
        return 77
    with tempfile.TemporaryDirectory(prefix="ssb4d-dm-") as tmp:
        good_cases(tmp)
        stack_cases(tmp)
        corrupt_cases(tmp)
        issue39_cases(tmp)
    if FAILS:
        print("%d checks failed" % len(FAILS))
        return 1
    print("all DM checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
