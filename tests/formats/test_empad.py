#!/usr/bin/env python3
"""EMPAD (.xml + .raw) read by `ssb4d export`, against files written here with numpy from the
published layout (rosettasciio rsciio/empad, LiberTEM io/dataset/empad.py): float32
little-endian frames of 128 columns x 130 rows in scan order, the last two rows a footer that
must not reach the output; the .xml names the .raw and records the scan (x = columns).

usage: test_empad.py SSB4D_BIN BUILD_DIR   (exit 77 = skipped)"""
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


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def run(*args):
    p = subprocess.run([BIN, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def frames(n, seed):
    """n raw frames (130 x 128 float32): random values with negatives and fractions, and a
    footer of large distinct values."""
    rng = np.random.default_rng(seed)
    raw = (rng.normal(0, 40, size=(n, 130, 128)) + rng.random((n, 130, 128))).astype("<f4")
    raw[:, 5, 7] = -3.25  # a fixed negative non-integer
    for k in range(n):
        raw[k, 128:, :] = 7.0e6 + k * 256 + np.arange(256, dtype=np.float64).reshape(2, 128)
    return raw


def xml_v122(raw_name, rows, cols, search=(64, 64), extra=""):
    """An .xml laid out like EMPAD software 1.2.2's (rosettasciio's test file)."""
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<root name="ssb4d &amp; test"><timestamp timestamp="1774471672.5" '
        'isoformat="2026-03-25T16:47:52.586728"/><software_version>1.2.2  (2021-08-20)'
        '</software_version><reconstructions Sentinel="x"><reconstruction absolute_filename='
        '"/home/empad/r.tif"/></reconstructions>'
        '<raw_file filename="%s"/><exposure_time>1.5</exposure_time>'
        '<post_exposure_time>0</post_exposure_time>'
        '<scan_parameters mode="search"><scan_size>0.8</scan_size>'
        '<scan_resolution_y>%d</scan_resolution_y><scan_resolution_x>%d</scan_resolution_x>'
        '</scan_parameters>'
        '<scan_parameters mode="acquire"><scan_size>0.6</scan_size><scan_center_x>0.5'
        '</scan_center_x><scan_resolution_y>%d</scan_resolution_y>'
        '<scan_resolution_x>%d</scan_resolution_x><scan_center_y>0.5</scan_center_y>'
        '</scan_parameters>'
        '<iom_measurements><scan_rotation>0.0</scan_rotation><full_scan_field_of_view>'
        '<scale_factor>0.72</scale_factor><x>1.27e-06</x><y>1.27e-06</y>'
        '</full_scan_field_of_view><nominal_camera_length>0.369</nominal_camera_length>'
        '<calibrated_diffraction_angle>0.00055</calibrated_diffraction_angle>'
        '<high_voltage>300000.0</high_voltage></iom_measurements>%s</root>\n'
        % (raw_name, search[0], search[1], rows, cols, extra))


def xml_old(raw_name, rows, cols):
    """The older layout: pix_x / pix_y, CRLF lines, a comment, CDATA, a character reference."""
    return ("<root>\r\n  <!-- EMPAD 0.51 -->\r\n  <raw_file filename=\"C:\\data\\%s\"/>\r\n"
            "  <pix_x> %d </pix_x>\r\n  <pix_y>%d</pix_y>\r\n"
            "  <note><![CDATA[a <b> c]]>&#x41;</note>\r\n"
            "  <iom_measurements><source.get_voltage>200000</source.get_voltage>"
            "<optics.get_cameralength>0.115</optics.get_cameralength></iom_measurements>\r\n"
            "</root>\r\n" % (raw_name, cols, rows))


def write(d, name, text_or_array):
    p = os.path.join(d, name)
    if isinstance(text_or_array, str):
        with open(p, "w", newline="") as f:
            f.write(text_or_array)
    else:
        text_or_array.tofile(p)
    return p


def export(inp, d, *flags):
    out = os.path.join(d, "out.npy")
    if os.path.exists(out):
        os.remove(out)
    rc, so, se = run("export", inp, "-o", out, "--json", "-q", *flags)
    if rc != 0:
        return rc, None, None, se
    return rc, np.load(out), json.loads(so), se


def expect_same(raw, rows, cols, arr, what):
    want = raw[:, :128, :].reshape(rows, cols, 128, 128)
    check(arr is not None and arr.dtype == np.float32, what + ": float32 output")
    if arr is None:
        return
    check(arr.shape == (rows, cols, 128, 128), what + ": shape %s" % (arr.shape,))
    check(arr.shape == want.shape and np.array_equal(arr.view(np.uint32), want.view(np.uint32)),
          what + ": every value bit for bit")
    footer = raw[:, 128:, :].ravel()
    check(not np.isin(arr.ravel(), footer).any(), what + ": no footer value in the output")


def expect_refused(d, inp, words, *flags):
    out = os.path.join(d, "out.npy")
    if os.path.exists(out):
        os.remove(out)
    rc, so, se = run("export", inp, "-o", out, "-q", *flags)
    lines = [l for l in se.splitlines() if l.strip()]
    ok = rc == 2 and len(lines) == 1 and all(w in se for w in words) and not os.path.exists(out)
    check(ok, "refusal of %s %s: rc %d, stderr %r (wanted %s)" % (os.path.basename(inp), flags,
                                                                   rc, se, words))


def main():
    rc, _, se = run("export", "--help")
    if rc != 0:
        print("ssb4d export is not available: skipped")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="ssb4d-empad-") as d:
        # --- a 3x4 scan, EMPAD 1.2.2 layout ---
        raw = frames(12, 1)
        write(d, "scan_x4_y3.raw", raw)
        xml = write(d, "acq.xml", xml_v122("scan_x4_y3.raw", 3, 4))
        rc, arr, js, se = export(xml, d)
        check(rc == 0, "3x4 opens: %s" % se)
        if rc == 0:
            expect_same(raw, 3, 4, arr, "3x4")
            check(js["format"] == "empad", "format name")
            check(js["shape"] == [3, 4, 128, 128] and js["dtype"] == "float32", "json shape")
            c = js["calibration"]
            check(abs(c["kv"] - 300.0) < 1e-9, "kv 300 from high_voltage")
            check(abs(c["camera_length_mm"] - 369.0) < 1e-9, "camera length 369 mm")
            check(abs(c["dwell_us"] - 1500.0) < 1e-9, "dwell 1500 us from exposure_time 1.5 ms")
            check(c["det_sampling_mrad"] and all(abs(v - 0.55) < 1e-12 for v in c["det_sampling_mrad"]),
                  "detector sampling 0.55 mrad")
            check(c["scan_step_A"] is None and c["semiangle_mrad"] is None, "no invented step")
            m = js["metadata"]
            check(m.get("scan_shape_source") == "xml", "scan shape from the xml")
            check(m.get("empad_raw_file") == "scan_x4_y3.raw", "raw file recorded")
            check(m.get("empad_xml/iom_measurements/high_voltage") == "300000.0", "xml value kept")
            check(m.get("empad_xml/scan_parameters[2]/scan_size") == "0.6", "acquire scan_size kept")
            check(m.get("empad_xml/scan_parameters[2]@mode") == "acquire", "attribute kept")
            check(m.get("empad_xml@name") == "ssb4d & test", "entity decoded")
            check(m.get("empad_timestamp") == "2026-03-25T16:47:52.586728", "timestamp")
            check(not any(k.startswith("empad_xml/reconstructions") for k in m),
                  "analysis state left out")

        # the same acquisition opened by its .raw (the .xml beside it names it)
        rc, arr, js, se = export(os.path.join(d, "scan_x4_y3.raw"), d, "--format", "empad")
        check(rc == 0, "opened by the .raw: %s" % se)
        if rc == 0:
            expect_same(raw, 3, 4, arr, "by .raw")
            check(js["metadata"].get("empad_xml_file") == "acq.xml", "the sibling xml found")
        # --scan-shape overrides the xml's shape when the count agrees
        rc, arr, js, se = export(xml, d, "--scan-shape", "2,6")
        check(rc == 0 and arr is not None and arr.shape == (2, 6, 128, 128), "--scan-shape 2,6")
        if rc == 0:
            check(js["metadata"].get("scan_shape_source") == "user", "user shape recorded")

        # --- a 5x2 scan, older layout, another directory layout ---
        sub = os.path.join(d, "b")
        os.mkdir(sub)
        raw2 = frames(10, 2)
        write(sub, "scan_x2_y5.raw", raw2)
        xml2 = write(sub, "older.xml", xml_old("scan_x2_y5.raw", 5, 2))
        rc, arr, js, se = export(xml2, d)
        check(rc == 0, "5x2 opens: %s" % se)
        if rc == 0:
            expect_same(raw2, 5, 2, arr, "5x2")
            c = js["calibration"]
            check(abs(c["kv"] - 200.0) < 1e-9 and abs(c["camera_length_mm"] - 115.0) < 1e-9,
                  "older calibration names")
            check(c["dwell_us"] is None, "no exposure: dwell unknown")
            check(js["metadata"].get("empad_xml/note") == "a <b> cA", "CDATA and &#x41;")
            check(js["metadata"].get("empad_scan_from") == "<pix_x>, <pix_y>", "scan from pix_x/y")

        # --- the raw holds the search scan (LiberTEM #1617) ---
        raw3 = frames(6, 3)
        write(d, "s.raw", raw3)
        xml3 = write(d, "search.xml", xml_v122("s.raw", 8, 8, search=(2, 3)))
        rc, arr, js, se = export(xml3, d)
        check(rc == 0, "search-scan fallback: %s" % se)
        if rc == 0:
            expect_same(raw3, 2, 3, arr, "search scan")
            check("empad_scan_note" in js["metadata"], "the fallback is noted")

        # --- a series (no scan in the xml): needs --scan-shape unless square ---
        raw4 = frames(6, 4)
        write(d, "series.raw", raw4)
        xml4 = write(d, "series.xml", '<root><raw_file filename="series.raw"/><type>series</type>'
                     '<count>6</count><scan_parameters mode="acquire"><scan_resolution_x>256'
                     '</scan_resolution_x><scan_resolution_y>256</scan_resolution_y>'
                     '</scan_parameters></root>')
        expect_refused(d, xml4, ["series.raw", "6 frames", "--scan-shape"])
        rc, arr, js, se = export(xml4, d, "--scan-shape", "3,2")
        check(rc == 0, "series with --scan-shape: %s" % se)
        if rc == 0:
            expect_same(raw4, 3, 2, arr, "series 3x2")
        raw5 = frames(4, 5)
        write(d, "plain.raw", raw5)
        xml5 = write(d, "plain.xml", '<root><raw_file filename="plain.raw"/></root>')
        rc, arr, js, se = export(xml5, d)
        check(rc == 0 and js and js["metadata"].get("scan_shape_source") == "square",
              "an xml without a scan: square count")
        if rc == 0:
            expect_same(raw5, 2, 2, arr, "square 2x2")

        # --- refusals: exit 2, one line naming the file, no output ---
        bad = os.path.join(d, "bad")
        os.mkdir(bad)
        write(bad, "t.raw", raw.ravel()[:-100])
        expect_refused(bad, write(bad, "t.xml", xml_v122("t.raw", 3, 4)), ["t.raw", "3x4", "t.xml"])
        write(bad, "u.raw", raw)
        expect_refused(bad, write(bad, "u.xml", xml_v122("u.raw", 3, 5)), ["u.raw", "3x5"])
        expect_refused(bad, write(bad, "v.xml", xml_v122("gone.raw", 3, 4)), ["v.xml", "gone.raw",
                                                                                "missing"])
        write(bad, "lone.raw", raw)
        expect_refused(bad, os.path.join(bad, "lone.raw"), ["lone.raw", ".xml", "--scan-shape"],
                       "--format", "empad")
        rc, arr, js, se = export(os.path.join(bad, "lone.raw"), bad, "--format", "empad",
                                 "--scan-shape", "3,4")
        check(rc == 0, "a lone .raw with --scan-shape: %s" % se)
        if rc == 0:
            expect_same(raw, 3, 4, arr, "lone raw")
        expect_refused(bad, write(bad, "w.xml", '<root><raw_file filename="u.raw"/><pix_x>4'
                                  '</pix_x>'), ["w.xml", "XML line"])
        expect_refused(bad, write(bad, "x.xml", '<!DOCTYPE root [<!ENTITY e "u.raw">]><root>'
                                  '<raw_file filename="&e;"/></root>'), ["x.xml", "DTD"])
        expect_refused(bad, write(bad, "y.xml", '<root><raw_file filename="u.raw"/>'
                                  '<raw_file filename="t.raw"/></root>'), ["y.xml", "raw_file"])
        expect_refused(bad, write(bad, "z.xml", '<root><raw_file filename="u.raw"/><pix_x>4'
                                  '</pix_x></root>'), ["z.xml", "pix_y"])
        expect_refused(bad, write(bad, "n.xml", '<root><nothing/></root>'), ["n.xml", "raw file"])
        nanraw = raw.copy()
        nanraw[7, 100, 3] = np.nan
        write(bad, "nan.raw", nanraw)
        expect_refused(bad, write(bad, "nan.xml", xml_v122("nan.raw", 3, 4)), ["nan.xml", "NaN", "frame 7"])
        # --metadata-only reads no frames but still checks the raw size
        rc, so, se = run("export", xml, "--metadata-only", "--json")
        check(rc == 0 and json.loads(so)["shape"] == [3, 4, 128, 128], "--metadata-only")
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("test_empad: all checks passed")


if __name__ == "__main__":
    main()
