#!/usr/bin/python3
"""Import throughput of every format ssb4d reads, beside the read floor (issue 28).

usage: bench/import_formats.py SSB4D_BIN OUT.jsonl [--scan N] [--det D] [--dir TMP]

Writes one acquisition per format (the same Poisson counts, scan N x N, detector D x D uint16;
EMPAD: its fixed 128 x 130 float32 frames) with the independent writers of tests/formats/ (numpy,
h5py, the DM writer built from the published tag-file layout), then for each:
  * the read floor: the file's bytes read with O_DIRECT (dd iflag=direct: the disk, no page
    cache), and read again from the page cache (cat: memory bandwidth of one copy);
  * `ssb4d import IN -o OUT.qem --json` (float data with --gain 1): wall time and MB/s of the
    file's bytes and of the counts as the source holds them (the summary's measure).
One JSON line per format in OUT.jsonl, and a Markdown table on stdout.
"""
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "formats"))


def timed(cmd):
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - t, r


def floor(paths):
    """(O_DIRECT seconds or None, page-cache seconds) to read every byte of paths."""
    direct = 0.0
    for p in paths:
        dt, r = timed(["dd", "if=" + p, "of=/dev/null", "bs=16M", "iflag=direct"])
        if r.returncode:
            direct = None
            break
        direct += dt
    subprocess.run(["cat"] + paths, stdout=subprocess.DEVNULL)  # into the page cache
    dt, _ = timed(["sh", "-c", 'cat "$@" >/dev/null', "x"] + paths)
    return direct, dt


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary, out = args[0], args[1]
    scan, det, tmp = 64, 128, None
    i = 2
    while i < len(args):
        if args[i] == "--scan":
            scan = int(args[i + 1])
        elif args[i] == "--det":
            det = int(args[i + 1])
        elif args[i] == "--dir":
            tmp = args[i + 1]
        i += 2
    import h5py  # noqa: F401  (the Velox and HDF5 writers)
    import test_dm
    import test_empad
    import test_merlin
    import test_mrc
    import test_velox

    rng = np.random.default_rng(2028)
    counts = rng.poisson(1.5, size=(scan, scan, det, det)).astype(np.uint16)
    N = scan * scan
    frames = counts.reshape(N, det, det)
    d = tempfile.mkdtemp(prefix="ssb4d-import-bench-", dir=tmp)
    cases = []  # (name, [paths], import args, source bytes)
    p = os.path.join(d, "a.npy")
    np.save(p, counts)
    cases.append(("npy uint16", [p], [p], counts.nbytes))
    p = os.path.join(d, "a.raw")
    counts.tofile(p)
    cases.append(("raw uint16", [p], [p, "--shape", "%d,%d,%d,%d" % counts.shape, "--dtype", "uint16"],
                  counts.nbytes))
    p = os.path.join(d, "f.npy")
    np.save(p, counts.astype(np.float32))
    cases.append(("npy float32 (--gain 1)", [p], [p, "--gain", "1"], counts.nbytes * 2))
    p = os.path.join(d, "a.h5")
    with h5py.File(p, "w") as f:
        f.create_dataset("/data/cube", data=counts, chunks=(1, 1, det, det))
    cases.append(("HDF5 uint16 (chunk = 1 frame)", [p], [p], counts.nbytes))
    p = os.path.join(d, "a.emd")
    test_velox.write_velox(p, [("0123abcd", test_velox.frames_last(frames),
                                test_velox.velox_md(kv=300, scan=(scan, scan)), (det, det, 16))])
    cases.append(("Velox EMD uint16 (frames last)", [p], [p], counts.nbytes))
    p = os.path.join(d, "a.mrc")
    test_mrc.write_mrc(p, frames, 6)
    cases.append(("MRC mode 6", [p], [p, "--scan-shape", "%d,%d" % (scan, scan)], counts.nbytes))
    p = os.path.join(d, "a.dm4")
    data, _ = test_dm.dm_file(4, True, counts, [test_dm.calib(0, 1, "")] * 4, test_dm.standard_tags())
    with open(p, "wb") as f:
        f.write(data)
    del data
    cases.append(("DM4 uint16", [p], [p], counts.nbytes))
    times = test_merlin.raster_times(scan, scan)
    mibs = test_merlin.split(d, "m", frames, times, [N // 2, N - N // 2], "U16", 12)
    cases.append(("Merlin 12-bit, 2 files", mibs, mibs, counts.nbytes))
    raw = np.zeros((N, 130, 128), dtype=np.float32)
    raw[:, :128, :] = rng.poisson(1.5, size=(N, 128, 128))
    rawp = test_empad.write(d, "e.raw", raw)
    xmlp = test_empad.write(d, "e.xml", test_empad.xml_v122("e.raw", scan, scan))
    cases.append(("EMPAD float32 (--gain 1)", [rawp, xmlp], [xmlp, "--gain", "1"], N * 128 * 128 * 4))
    del raw
    subprocess.run(["sync"])
    rev = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    cpu = ""
    try:
        cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
    except (OSError, IndexError):
        pass
    rows = []
    with open(out, "w") as fo:
        for name, paths, imp, src_bytes in cases:
            file_bytes = sum(os.path.getsize(x) for x in paths)
            direct, cached = floor(paths)
            q = os.path.join(d, "out.qem")
            dt, r = timed([binary, "import"] + imp + ["-o", q, "--force", "--json", "-q"])
            if r.returncode:
                print("%s: import failed: %s" % (name, r.stderr.strip()), file=sys.stderr)
                continue
            rep = json.loads(r.stdout)
            rec = {"schema": "ssb4d.bench.import-formats/1", "date": time.strftime("%Y-%m-%d"),
                   "git": rev, "machine": {"cpu": cpu, "cores": os.cpu_count(), "host": platform.node()},
                   "format": name, "shape": list(counts.shape) if "EMPAD" not in name else [scan, scan, 128, 128],
                   "file_bytes": file_bytes, "source_bytes": src_bytes, "encoded_bytes": rep["encoded_bytes"],
                   "import_s": dt, "import_file_MBps": file_bytes / 1e6 / dt,
                   "import_source_MBps": src_bytes / 1e6 / dt,
                   "floor_direct_s": direct, "floor_direct_MBps": file_bytes / 1e6 / direct if direct else None,
                   "floor_cached_s": cached, "floor_cached_MBps": file_bytes / 1e6 / cached,
                   "passes": 2, "quantisation": rep.get("quantisation")}
            fo.write(json.dumps(rec) + "\n")
            rows.append(rec)
            os.unlink(q)
    print("| format | file MB | import s | MB/s (file) | disk floor MB/s (O_DIRECT) | page-cache floor MB/s | encoded MB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        fd = "%.0f" % r["floor_direct_MBps"] if r["floor_direct_MBps"] else "n/a"
        print("| %s | %.0f | %.2f | %.0f | %s | %.0f | %.1f |" % (
            r["format"], r["file_bytes"] / 1e6, r["import_s"], r["import_file_MBps"], fd,
            r["floor_cached_MBps"], r["encoded_bytes"] / 1e6))
    subprocess.run(["rm", "-rf", d])
    return 0


if __name__ == "__main__":
    sys.exit(main())
