#!/usr/bin/env python3
"""Dectris Arina master files (src/formats/fs_arina.c) written here with h5py in the NeXus NXmx
layout the DECTRIS software writes (the field list of a real ARINA master, e.g. openNCEM's
ncempy/data/au_145mm_68kx_microprobe_01_master.h5: /entry/instrument/detector with x/y_pixel_size,
count_time, threshold_energy and detectorSpecific/{photon_energy, nimages, ntrigger, pixel_mask,
...}; /entry/data/data_000001 an external link to NAME_data_000001.h5:/entry/data/data). Such a
master may state the beam energy only as detectorSpecific/photon_energy (eV): issue 39 found it
unread ("the accelerating voltage is unknown"). Checked through `ssb4d export --json` and
`ssb4d import` + `ssb4d info --json`:
  * photon_energy 300000 eV alone -> 300 kV, kv_source naming it; threshold_energy is not taken;
  * incident_energy, when present, wins (kv_source says which);
  * an X-ray default (8041 eV) is kept in the metadata but not taken as the beam energy;
  * the frames come back as written.

usage: test_arina.py SSB4D_BIN BUILD_DIR     (exit 77 = skipped: numpy or h5py missing)"""
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
PE = "entry/instrument/detector/detectorSpecific/photon_energy"


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def nx(group, cls):
    group.attrs["NX_class"] = np.bytes_(cls)
    return group


def quantity(group, name, value, units):
    d = group.create_dataset(name, data=np.float64(value))
    d.attrs["units"] = np.bytes_(units)


def write_arina(folder, name, frames, photon_ev=None, incident_ev=None):
    """NAME_master.h5 + NAME_data_000001.h5 (uncompressed: the reader falls back to H5Dread)."""
    data = os.path.join(folder, f"{name}_data_000001.h5")
    with h5py.File(data, "w") as f:
        nx(f.create_group("entry"), "NXentry")
        nx(f.create_group("entry/data"), "NXdata")
        f.create_dataset("entry/data/data", data=frames, chunks=(1,) + frames.shape[1:])
    master = os.path.join(folder, f"{name}_master.h5")
    with h5py.File(master, "w") as f:
        e = nx(f.create_group("entry"), "NXentry")
        e.create_dataset("definition", data=np.bytes_("NXmx")).attrs["version"] = np.bytes_("1.4")
        d = nx(f.create_group("entry/data"), "NXdata")
        d["data_000001"] = h5py.ExternalLink(os.path.basename(data), "/entry/data/data")
        nx(f.create_group("entry/instrument"), "NXinstrument")
        nx(f.create_group("entry/instrument/beam"), "NXbeam")
        det = nx(f.create_group("entry/instrument/detector"), "NXdetector")
        quantity(det, "x_pixel_size", 1e-4, "m")
        quantity(det, "y_pixel_size", 1e-4, "m")
        quantity(det, "count_time", 1.995e-4, "s")
        quantity(det, "frame_time", 1.996e-4, "s")
        quantity(det, "threshold_energy", 17500.0, "eV")       # not the beam energy
        det.create_dataset("description", data=np.bytes_("Dectris ARINA CZT"))
        if incident_ev is not None:
            quantity(det, "incident_energy", incident_ev, "eV")
        ds = nx(det.create_group("detectorSpecific"), "NXcollection")
        if photon_ev is not None:
            quantity(ds, "photon_energy", photon_ev, "eV")
        ds.create_dataset("nimages", data=np.uint64(1))
        ds.create_dataset("ntrigger", data=np.uint64(frames.shape[0]))
        ds.create_dataset("x_pixels_in_detector", data=np.uint64(frames.shape[2]))
        ds.create_dataset("y_pixels_in_detector", data=np.uint64(frames.shape[1]))
        ds.create_dataset("pixel_mask", data=np.zeros(frames.shape[1:], np.uint32))
    return master


def run(args):
    p = subprocess.run([SSB4D] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def export(path, tmp):
    out = os.path.join(tmp, "out.npy")
    if os.path.exists(out):
        os.remove(out)
    rc, so, se = run(["export", path, "-o", out, "--json", "-q", "--scan-shape", "3,4"])
    if rc != 0:
        FAILS.append(f"export {os.path.basename(path)}: rc {rc}: {se.strip()}")
        print("FAIL: export", path, se.strip())
        return None, None
    return np.load(out), json.loads(so)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(39)
        frames = rng.poisson(2.0, (12, 8, 8)).astype(np.uint16)

        # photon_energy alone: the beam energy
        m = write_arina(tmp, "pe", frames, photon_ev=300000.0)
        a, j = export(m, tmp)
        if j:
            check(np.array_equal(a, frames.reshape(3, 4, 8, 8)), "photon_energy file: frames as written")
            check(j["calibration"]["kv"] == 300, f"photon_energy 300000 eV -> 300 kV: {j['calibration']['kv']}")
            check(j["metadata"].get("kv_source") == PE, f"kv_source names photon_energy: {j['metadata'].get('kv_source')}")
            check(PE in j["metadata"], "photon_energy kept in the metadata")
        q = os.path.join(tmp, "pe.qem")
        rc, so, se = run(["import", m, "-o", q, "--scan-shape", "3,4", "-q", "--hot-pixels", "none"])
        check(rc == 0, f"import of the photon_energy master: rc {rc} {se.strip()}")
        rc, so, se = run(["info", q, "--json"])
        if rc == 0:
            info = json.loads(so)
            kv = info.get("calibration", {}).get("kv")
            check(kv == 300, f"info: 300 kV recorded in the .qem: {kv}")

        # incident_energy, when the master has it, wins
        m = write_arina(tmp, "ie", frames, photon_ev=300000.0, incident_ev=200000.0)
        a, j = export(m, tmp)
        if j:
            check(j["calibration"]["kv"] == 200, f"incident_energy wins: {j['calibration']['kv']}")
            check(j["metadata"].get("kv_source") == "entry/instrument/detector/incident_energy",
                  f"kv_source names incident_energy: {j['metadata'].get('kv_source')}")

        # an X-ray default is not a beam energy
        m = write_arina(tmp, "xr", frames, photon_ev=8041.0)
        a, j = export(m, tmp)
        if j:
            check(j["calibration"]["kv"] is None, f"8041 eV not taken as the beam energy: {j['calibration']['kv']}")
            check("photon_energy_note" in j["metadata"] and "kv_source" not in j["metadata"],
                  f"the note says why: {j['metadata'].get('photon_energy_note')}")

        # no energy at all: unknown, as before
        m = write_arina(tmp, "none", frames)
        a, j = export(m, tmp)
        if j:
            check(j["calibration"]["kv"] is None, "no energy: kV unknown")

    if FAILS:
        print(f"{len(FAILS)} failed")
        sys.exit(1)
    print("test_arina: all passed")


main()
