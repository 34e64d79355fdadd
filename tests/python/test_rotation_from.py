"""rotation_from= (issue 32, docs/fit.md "A rotation for crystals"): the rotation and handedness
of another acquisition's calibration file, held as rotation_deg= would be, with the command
line's --rotation-from checks (the library's ssb4d_values_rotation_from)."""
import shutil

import numpy as np
import pytest

import ssb4d
from conftest import run_cli

M = ('--kv', '300', '--semiangle', '25', '--scan-step', '0.36609375')


@pytest.fixture(scope='module')
def files(tiny, tmp_path_factory):
    """a.json: a stated rotation of 25 deg; com.json: a centre-of-mass rotation; a200.json: 25 deg
    at 200 kV; broken.json; and b.npy, the data without its sidecar."""
    d = tmp_path_factory.mktemp('rotation_from')
    run_cli('calibrate', tiny['npy'], *M, '--rotation', '25', '-o', d / 'a.json', '-q')
    shutil.copy(tiny['npy'], d / 'b.npy')
    # without the sidecar, which states the rotation (and stated beats measured, issue 39)
    run_cli('calibrate', d / 'b.npy', *M, '-o', d / 'com.json', '-q')
    run_cli('calibrate', tiny['npy'], '--kv', '200', '--semiangle', '25', '--scan-step', '0.36609375',
            '--rotation', '25', '-o', d / 'a200.json', '-q')
    (d / 'broken.json').write_text('{"schema": "ssb4d-calibration/1", "kv": ')
    return d


MICRO = dict(kv=300, semiangle_mrad=25, scan_step_A=0.36609375)


def test_held_like_rotation_deg(files):
    with ssb4d.open(files / 'b.npy', rotation_from=files / 'a.json', **MICRO) as s:
        s.calibrate(progress=False)
        assert s.rotation_deg == 25
        held = s.reconstruct(progress=False).phase
        f = s.fit(progress=False, trials=16)
        assert f.rotation_deg == 25 and f.rotation_source == 'given'
    with ssb4d.open(files / 'b.npy', rotation_deg=25, **MICRO) as s:
        assert np.array_equal(s.reconstruct(progress=False).phase, held)


def test_a_fits_rotation_and_handedness(tiny, files):
    cal = tiny['fit_dir'] / 'calibration.json'
    stated = ssb4d.values(None, calibration=cal)
    data = np.load(files / 'b.npy', mmap_mode='r')
    with ssb4d.open_array(np.ascontiguousarray(data), rotation_from=cal, **MICRO) as s:
        assert stated.flip is False and s._microscope['flip'] is False
        s.calibrate(progress=False)
        assert s.rotation_deg == stated.rotation_deg


def test_refusals(files):
    with pytest.raises(ssb4d.SSB4DError, match='rotation_from: .*nothere.json'):
        ssb4d.open(files / 'b.npy', rotation_from=files / 'nothere.json', **MICRO)
    with pytest.raises(ssb4d.SSB4DError, match='rotation_from: .*broken.json'):
        ssb4d.open(files / 'b.npy', rotation_from=files / 'broken.json', **MICRO)
    with pytest.raises(ssb4d.InvalidArgument, match='rotation_from: .*com.json holds no settled rotation'):
        ssb4d.open(files / 'b.npy', rotation_from=files / 'com.json', **MICRO)
    with pytest.raises(ssb4d.InvalidArgument, match='rotation_deg or rotation_from, not both'):
        ssb4d.open(files / 'b.npy', rotation_deg=10, rotation_from=files / 'a.json', **MICRO)
    with pytest.raises(ssb4d.InvalidArgument, match='path of a calibration file'):
        ssb4d.open(files / 'b.npy', rotation_from=25, **MICRO)


def test_another_kv_warns_and_is_used(files):
    with pytest.warns(RuntimeWarning, match='a200.json was calibrated at kV 200, this data at 300'):
        s = ssb4d.open(files / 'b.npy', rotation_from=files / 'a200.json', **MICRO)
    with s:
        assert s._microscope['rotation_deg'] == 25
