#!/usr/bin/env python3
"""Merlin .mib acquisitions split over several files, read by `ssb4d export`, against files
written here from Quantum Detectors' published frame-header layout (the same one
tests/test_framesrc.c writes; fields per ePSIC-DLS mib_props and rosettasciio quantumdetector):
  MQ1,<seq>,<header bytes>,<chips>,<width>,<height>,<U08|U16|U32>,<layout>,<chip select>,
  <time stamp (local, us)>,<shutter s>,<counter>,<colour>,<gain>,<thresholds, DACs...>,
  MQ1A,<UTC time stamp (ns)>,<shutter ns>ns,<counter depth>,
NUL padded to 384 bytes, then big-endian pixels. The time stamps encode a raster: frames one
interval apart within a line, a longer flyback gap between lines; ssb4d must find the line
length from them (2x4 and 3x5 scans), refuse inconsistent files with one line naming the file,
and name the companion files when the .hdr says more frames than those given.

usage: test_merlin.py SSB4D_BIN BUILD_DIR   (exit 77 = skipped)"""
import datetime
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("numpy is not available: skipped")
    sys.exit(77)

BIN = sys.argv[1] if len(sys.argv) > 1 else "ssb4d"  # also imported for its writers (bench)
FAILS = []
DTYPES = {"U08": ">u1", "U16": ">u2", "U32": ">u4"}
T0 = datetime.datetime(2024, 5, 6, 7, 8, 9)


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def run(*args):
    p = subprocess.run([BIN, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def raster_times(rows, cols, interval_ns=1_000_000, flyback_ns=2_500_000, pause_at=None):
    """Frame times (ns after T0) of a raster scan: a flyback gap before each new line."""
    t, now = [], 123_456_789
    for k in range(rows * cols):
        if k and k % cols == 0:
            now += flyback_ns
        if k == pause_at:
            now += 4 * flyback_ns
        t.append(now)
        now += interval_ns
    return t


def stamp(ns, digits):
    d = T0 + datetime.timedelta(microseconds=ns // 1000)
    frac = "%09d" % (d.microsecond * 1000 + ns % 1000)
    return d.strftime("%Y-%m-%d %H:%M:%S") + "." + frac[:digits]


def header(seq, w, h, dtype, depth, t_ns, ext=True, hb=384):
    iso = stamp(t_ns, 9).replace(" ", "T") + "Z"
    fields = ["MQ1", "%06d" % seq, "%05d" % hb, "01", "%04d" % w, "%04d" % h, dtype, "   1x1",
              "01", stamp(t_ns, 6), "0.000800", "0", "0", "0", "1.000000E+1", "5.110000E+2"]
    fields += ["0.000000E+0"] * 6 + ["3RX", "175", "511"] + ["000"] * 6 + ["125", "255", "125"]
    if ext:
        fields += ["MQ1A", iso, "800000ns", str(depth), ""]
    text = ",".join(fields).encode("ascii")
    assert len(text) < hb
    return text + b"\0" * (hb - len(text))


def write_mib(path, frames, first_seq, times, dtype="U16", depth=12, ext=True):
    """frames: (n, h, w) values; times: ns of each frame."""
    n, h, w = frames.shape
    with open(path, "wb") as f:
        for k in range(n):
            f.write(header(first_seq + k, w, h, dtype, depth, times[k], ext))
            f.write(frames[k].astype(DTYPES[dtype]).tobytes())


def values(n, h, w, depth, seed):
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 2 ** depth, size=(n, h, w), dtype=np.int64)
    v[:, 0, 0] = 2 ** depth - 1  # saturated pixel
    return v


def split(d, stem, v, times, sizes, dtype="U16", depth=12, ext=True):
    """Writes v over len(sizes) files STEM1.mib, STEM2.mib ... (frames continue)."""
    paths, at = [], 0
    for i, k in enumerate(sizes):
        p = os.path.join(d, "%s%d.mib" % (stem, i + 1))
        write_mib(p, v[at:at + k], 1 + at, times[at:at + k], dtype, depth, ext)
        paths.append(p)
        at += k
    return paths


def times_from_gaps(gaps, start=905_800_928):
    """Frame times (ns after T0) from the gaps between them."""
    t = [start]
    for g in gaps:
        t.append(t[-1] + g)
    return t


def write_hdr(path, frames, per_trigger, depth, cut_at=None):
    """A Merlin acquisition header as the Merlin software writes it ("Key:<TAB>value" lines
    ending in CR LF, "End" last, padded with blanks to 2048 bytes); cut_at: only the first
    cut_at bytes (a copy cut short)."""
    lines = ["HDR,\t", "Time and Date Stamp (day, mnth, yr, hr, min, s):\t07/05/2021 18:50:41",
             "Chip ID:\tW559_G11, - , - , - ", "Assembly Size (NX1, 2X2):\t   1x1",
             "Chip Mode  (SPM, CSM, CM, CSCM):\tSPM", "Counter Depth (number):\t%d" % depth,
             "Gain:\tSLGM", "Active Counters:\tCounter 0",
             "Acquisition Type (Normal, Th_scan, Config):\tNormal",
             "Frames in Acquisition (Number):\t%d" % frames,
             "Frames per Trigger (Number):\t%d" % per_trigger,
             "Trigger Start (Positive, Negative, Internal):\tRising Edge",
             "Trigger Stop (Positive, Negative, Internal):\tInternal",
             "Readout System:\tMerlin Quad", "Software Version:\t0.76.1.101", "End\t"]
    text = "\r\n".join(lines).encode("ascii").ljust(2048, b" ")
    with open(path, "wb") as f:
        f.write(text if cut_at is None else text[:cut_at])
    return text


def export(d, inputs, *flags):
    out = os.path.join(d, "out.npy")
    if os.path.exists(out):
        os.remove(out)
    rc, so, se = run("export", *inputs, "-o", out, "--json", "-q", *flags)
    if rc != 0:
        return rc, None, None, se
    return rc, np.load(out), json.loads(so), se


def expect_read(d, inputs, v, rows, cols, how, what, *flags):
    rc, arr, js, se = export(d, inputs, *flags)
    check(rc == 0, "%s opens: %s" % (what, se.strip()))
    if rc != 0:
        return None
    n, h, w = v.shape
    check(arr.shape == (rows, cols, h, w), "%s: shape %s, (%d, %d, %d, %d) expected"
          % (what, arr.shape, rows, cols, h, w))
    if arr.shape == (rows, cols, h, w):
        check(np.array_equal(arr.reshape(n, h, w).astype(np.int64), v), what + ": every value")
    check(js["metadata"].get("scan_shape_source") == how, "%s: scan shape from %s, not %s"
          % (what, js["metadata"].get("scan_shape_source"), how))
    return js


def expect_refused(d, inputs, words, *flags):
    out = os.path.join(d, "out.npy")
    if os.path.exists(out):
        os.remove(out)
    rc, so, se = run("export", *inputs, "-o", out, "-q", *flags)
    lines = [l for l in se.splitlines() if l.strip()]
    ok = rc == 2 and len(lines) == 1 and all(w in se for w in words) and not os.path.exists(out)
    check(ok, "refusal of %s: rc %d, stderr %r (wanted %s)"
          % ([os.path.basename(i) for i in inputs], rc, se, words))


def main():
    rc, _, _ = run("export", "--help")
    if rc != 0:
        print("ssb4d export is not available: skipped")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="ssb4d-merlin-") as d:
        # --- 2x4 scan in two files (the case), 12-bit single chip ---
        v = values(8, 16, 16, 12, 1)
        a = split(d, "a", v, raster_times(2, 4), [4, 4])
        js = expect_read(d, a, v, 2, 4, "timestamps", "2x4 in two files")
        if js:
            m = js["metadata"]
            check(js["format"] == "merlin-mib" and js["dtype"] == "uint16", "format, dtype")
            check(m.get("mib_files") == 2 and m.get("mib_frames") == 8, "two files, 8 frames")
            check(m.get("mib_line_length") == 4, "line length 4")
            check(m.get("mib_counter_depth") == 12, "counter depth")
            check(abs(js["calibration"]["dwell_us"] - 800.0) < 1e-9, "dwell 800 us")
        # the user's shape wins over the time stamps
        expect_read(d, a, v, 4, 2, "user", "--scan-shape 4,2", "--scan-shape", "4,2")

        # --- 3x5 scan in three files of uneven length, given out of order ---
        v3 = values(15, 8, 12, 12, 2)
        b = split(d, "b", v3, raster_times(3, 5), [6, 4, 5])
        js = expect_read(d, [b[2], b[0], b[1]], v3, 3, 5, "timestamps", "3x5 in three files")
        if js:
            check(js["metadata"].get("mib_file_order") == "b1.mib, b2.mib, b3.mib",
                  "files put in sequence order")
        # us time stamps only (no MQ1A extension): still enough for 1 ms frames
        c = split(d, "c", v3, raster_times(3, 5), [15], ext=False)
        expect_read(d, c, v3, 3, 5, "timestamps", "3x5 from us time stamps")

        # --- other counter depths: 6-bit (U08) and 24-bit (U32), two files each ---
        v6 = values(8, 16, 16, 6, 3)
        expect_read(d, split(d, "six", v6, raster_times(2, 4), [3, 5], "U08", 6), v6, 2, 4,
                    "timestamps", "6-bit 2x4")
        v24 = values(8, 4, 4, 24, 4)
        js = expect_read(d, split(d, "tf", v24, raster_times(2, 4), [4, 4], "U32", 24), v24, 2, 4,
                         "timestamps", "24-bit 2x4")
        if js:
            check(js["dtype"] == "uint32", "24-bit reads as uint32")

        # --- 16 frames: 2 lines of 8 by their time stamps, not the square 4x4 ---
        v16 = values(16, 4, 4, 12, 5)
        expect_read(d, split(d, "l", v16, raster_times(2, 8), [16]), v16, 2, 8, "timestamps",
                    "2x8 not square")
        # evenly spaced frames say nothing: the square count is the fallback
        expect_read(d, split(d, "q", v16, [k * 1_000_000 for k in range(16)], [16]), v16, 4, 4,
                    "square", "even time stamps")
        # a pause inside a line breaks the pattern: refused, --scan-shape asked for
        expect_refused(d, split(d, "p", v, raster_times(2, 4, pause_at=2), [4, 4]),
                       ["p1.mib", "8 frames", "--scan-shape"])

        # --- the .hdr: more frames than the files given: the companion files are named ---
        h = os.path.join(d, "h")
        os.mkdir(h)
        hv = values(12, 8, 8, 12, 6)
        hp = split(h, "scan", hv, raster_times(3, 4), [4, 4, 4])
        with open(os.path.join(h, "scan.hdr"), "w") as f:
            f.write("HDR,\t\nCounter Depth (number):\t12\nFrames in Acquisition (Number):\t12\n"
                    "Frames per Trigger (Number):\t1\nEnd\t\n")
        expect_refused(h, hp[:1], ["scan1.mib", "scan.hdr", "12 frames", "scan2.mib, scan3.mib",
                                   "list every file"])
        expect_refused(h, hp[:2], ["scan.hdr", "scan3.mib"])
        expect_read(h, hp, hv, 3, 4, "timestamps", "3x4 with its .hdr")
        # a line trigger: the .hdr's frames per trigger give the line
        with open(os.path.join(h, "scan.hdr"), "w") as f:
            f.write("HDR,\t\nFrames in Acquisition (Number):\t12\nFrames per Trigger (Number):\t6\n"
                    "End\t\n")
        expect_read(h, hp, hv, 2, 6, "hdr", "2x6 from the .hdr")

        # --- inconsistent files: exit 2, one line naming the file ---
        e = os.path.join(d, "e")
        os.mkdir(e)
        good = split(e, "g", v, raster_times(2, 4), [4, 4])
        other = os.path.join(e, "other.mib")
        write_mib(other, values(4, 32, 32, 12, 7), 5, raster_times(2, 4)[4:])
        expect_refused(e, [good[0], other], ["other.mib", "frame size", "32x32", "16x16"])
        byte = os.path.join(e, "byte.mib")
        write_mib(byte, values(4, 16, 16, 6, 8), 5, raster_times(2, 4)[4:], "U08", 6)
        expect_refused(e, [good[0], byte], ["byte.mib", "data type"])
        deep = os.path.join(e, "deep.mib")
        write_mib(deep, v[4:], 5, raster_times(2, 4)[4:], "U16", 16)
        expect_refused(e, [good[0], deep], ["deep.mib", "counter depth"])
        # a gap in the sequence numbers (a file left out) and the same file twice
        third = split(e, "m", values(12, 16, 16, 12, 9), raster_times(3, 4), [4, 4, 4])
        expect_refused(e, [third[0], third[2]], ["m3.mib", "missing"])
        expect_refused(e, [good[0], good[0]], ["g1.mib", "twice"])
        # a second file cut inside a frame; a second file that is missing
        cut = os.path.join(e, "cut.mib")
        with open(good[1], "rb") as f:
            data = f.read()
        with open(cut, "wb") as f:
            f.write(data[:-100])
        expect_refused(e, [good[0], cut], ["cut.mib", "whole number"])
        expect_refused(e, [good[0], os.path.join(e, "nowhere.mib")], ["nowhere.mib"])
        # a corrupt header inside the second file: the read names that file and frame
        bad = os.path.join(e, "bad.mib")
        raw = bytearray(data)
        stride = len(raw) // 4
        raw[2 * stride + 4:2 * stride + 10] = b"xxxxxx"
        with open(bad, "wb") as f:
            f.write(raw)
        expect_refused(e, [good[0], bad], ["bad.mib", "frame 2"], "--scan-shape", "2,4")

        # --- issue 39: real layouts (RosettaSciIO's Merlin_navigation4x2_ROI test data) ---
        # 102 ms frames from a 10 ns clock that jitters by a tick or two, and a line flyback
        # that adds only 20.8 us (1.0002x the interval): the 1.5x rule saw nothing there; the
        # jump between the two sets of gaps (20.8 us) is 1000x the jitter (20 ns)
        r = os.path.join(d, "real")
        os.mkdir(r)
        v6 = values(8, 16, 16, 6, 11)
        for name, gaps in (("001_4x2_6bit", [101999990, 102000000, 101999980, 102020820, 102000000,
                                             102000000, 101999990]),
                           ("002_4x2_6bit_roi", [102000000, 101999980, 102000000, 102020810,
                                                 102000000, 101999980, 101999990])):
            p = os.path.join(r, name + ".mib")
            write_mib(p, v6, 1, times_from_gaps(gaps), "U08", 6)
            write_hdr(os.path.join(r, name + ".hdr"), 8, 1, 6)
            js = expect_read(r, [p], v6, 2, 4, "timestamps", name + ": 20.8 us flyback")
            if js:
                check(abs(float(js["metadata"]["mib_line_gap_step"].split()[0]) - 2.08e-5) < 2e-7,
                      name + ": gap step %s" % js["metadata"].get("mib_line_gap_step"))
        # a gap one 10 ns tick longer than the others: rounding or a flyback, nobody can tell
        # (the frames of RosettaSciIO's ..._nav4x2_hot_pixel files without their .hdr)
        tick = [1849990] * 3 + [1850000] + [1849990] * 3
        p = os.path.join(r, "tick.mib")
        write_mib(p, values(8, 8, 8, 12, 12), 1, times_from_gaps(tick))
        expect_refused(r, [p], ["tick.mib", "8 frames", "only 10 ns", "one step of the 10 ns",
                                "--scan-shape"])
        # the same one-tick step in a square count: the square stays the guess
        sq = [2094440, 2094440, 2094450] * 2 + [2094440, 2094440]
        v9 = values(9, 8, 8, 12, 13)
        p = os.path.join(r, "ticksq.mib")
        write_mib(p, v9, 1, times_from_gaps(sq))
        expect_read(r, [p], v9, 3, 3, "square", "one-tick steps, 9 frames")
        # long gaps that are no raster (a line of 3 in 8 frames): refused, saying why
        p = os.path.join(r, "odd.mib")
        write_mib(p, values(8, 8, 8, 12, 14), 1, raster_times(3, 3)[:8])
        expect_refused(r, [p], ["odd.mib", "ambiguous", "do not recur", "--scan-shape"])

        # --- issue 39: a .hdr cut short lost Frames per Trigger (9: one line of 9) ---
        c = os.path.join(d, "cut")
        os.mkdir(c)
        v9 = values(9, 8, 8, 12, 15)
        p = os.path.join(c, "line9.mib")
        write_mib(p, v9, 1, [k * 1_000_000 for k in range(9)])
        full = write_hdr(os.path.join(c, "line9.hdr"), 9, 9, 12)
        expect_read(c, [p], v9, 1, 9, "hdr", "1x9 from the whole .hdr")
        write_hdr(os.path.join(c, "line9.hdr"), 9, 9, 12, cut_at=full.index(b"Frames per Trigger"))
        expect_refused(c, [p], ["line9.hdr", "cut short", "--scan-shape"])  # not a silent 3x3
        expect_read(c, [p], v9, 1, 9, "user", "a cut .hdr with --scan-shape", "--scan-shape", "1,9")

        # --- issue 39: counts above the counter depth (244 in a 6-bit file) ---
        o = os.path.join(d, "over")
        os.mkdir(o)
        vo = values(8, 16, 16, 6, 16)
        vo[5, 3, 7] = 244
        p = os.path.join(o, "over.mib")
        write_mib(p, vo, 1, raster_times(2, 4), "U08", 6)
        expect_refused(o, [p], ["over.mib", "frame 5", "(3, 7)", "244", "6-bit", "63"])
        out = os.path.join(o, "over.qem")
        rc, _, se = run("import", p, "-o", out, "-q")
        check(rc == 2 and len(se.strip().splitlines()) == 1 and "244" in se and not os.path.exists(out),
              "import of a count over the depth: rc %d, %r" % (rc, se))
        # the .hdr's depth counts when the frames have no MQ1A extension
        vo12 = values(8, 8, 8, 12, 17)
        vo12[2, 0, 1] = 5000
        p = os.path.join(o, "noext.mib")
        write_mib(p, vo12, 1, raster_times(2, 4), ext=False)
        write_hdr(os.path.join(o, "noext.hdr"), 8, 1, 12)
        expect_refused(o, [p], ["noext.mib", "5000", "12-bit"])
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("test_merlin: all checks passed")


if __name__ == "__main__":
    main()
