"""`ssb4d refine` and Python's ``Session.refine()`` (issue 40, docs/refine.md): on the same small
simulated file with the same values they give the same numbers (equal, not close: --json prints
them exactly), the same arrays (slices.npy and probe.npy against the numpy arrays) and the same calibration file's "refine" section; the result's shapes and
dtypes; a calibration file's fit seeds both doors alike; bad keywords are refused with the
parameter table's words. The tiny preset (32^2 scan, 48^2 detector), a 16x16 region and two
iterations: seconds."""
import json

import numpy as np
import pytest

import ssb4d
from conftest import run_cli

# the --json keys Python's record() gives too
KEYS = ('C10_nm', 'C12_nm', 'phi12_deg', 'phi12_probe_deg', 'phi12_scan_deg', 'rotation_deg', 'flip', 'tilt_mrad',
        'tilt_probe_mrad', 'tilt_scan_mrad', 'thickness_nm', 'tilt_refined', 'thickness_refined', 'slices', 'nll', 'nll_expected', 'nll_history',
        'confident', 'warning', 'region', 'object_shape', 'probe_shape')
REGION = ((4, 20), (6, 22))
ARGS = dict(slices=3, thickness_range_nm=(2, 8), iterations=2, seed=5)
CLI_ARGS = ['--region', '4:20,6:22', '--slices', '3', '--thickness-range', '2:8', '--iterations', '2', '--seed', '5']


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp('refine')
    run_cli('simulate', '--preset', 'tiny', '-o', d / 's.npy', '-q')
    return d


def same(a, b):
    """Equal numbers, NaN equal to NaN (the stub's likelihood), JSON's null for a NaN."""
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if a is None or (isinstance(a, float) and np.isnan(a)):
        return b is None or (isinstance(b, float) and np.isnan(b))
    return a == b


def test_python_equals_cli(data):
    out = data / 'cli'
    rec = json.loads(run_cli('refine', data / 's.npy', *CLI_ARGS, '-o', out, '--json', '-q').stdout)
    with ssb4d.open(data / 's.npy', progress=False) as s:
        r = s.refine(region=REGION, progress=False, **ARGS)
        s.save_calibration(data / 'py.json')
    got = r.record()
    for k in KEYS:
        assert same(got[k], rec[k]), (k, got[k], rec[k])
    # the arrays: the files the command wrote are Python's arrays
    osh = tuple(rec['object_shape'])  # the model's grid: the region and the probe's window
    assert osh[0] >= 16 and osh[1] >= 16
    assert r.slice_phase.dtype == np.float32 and r.slice_phase.shape == (3,) + osh
    assert r.projected_phase.dtype == np.float32 and r.projected_phase.shape == osh
    assert r.probe.dtype == np.complex64 and r.probe.shape == tuple(rec['probe_shape'])
    np.testing.assert_array_equal(np.load(out / 'slices.npy'), r.slice_phase)
    np.testing.assert_array_equal(np.load(out / 'probe.npy'), r.probe)
    # the calibration files' refinement records agree
    a = json.loads((out / 'calibration.json').read_text())
    b = json.loads((data / 'py.json').read_text())
    assert a['refine'] == b['refine']
    assert a['aberrations'] == b['aberrations'] and a['thick'] == b['thick']
    assert b['refine']['slices'] == 3 and b['refine']['region'] == [4, 20, 6, 22]
    assert r.tilt_refined and r.thickness_refined and b['refine']['tilt_refined'] is True


def test_one_slice_says_not_refined(data):
    """One slice has no depth: the tilt and the thickness repeat the start, and every door says so."""
    args = dict(ARGS, slices=1)
    cli_args = [a if a != '3' else '1' for a in CLI_ARGS]
    out = data / 'one'
    rec = json.loads(run_cli('refine', data / 's.npy', *cli_args, '-o', out, '--json', '-q').stdout)
    with ssb4d.open(data / 's.npy', progress=False) as s:
        r = s.refine(region=REGION, progress=False, **args)
        s.save_calibration(data / 'one.json')
    assert rec['slices'] == 1 and rec['tilt_refined'] is False and rec['thickness_refined'] is False
    assert r.slices == 1 and r.tilt_refined is False and r.thickness_refined is False
    assert r.record()['tilt_refined'] is False
    for path in (out / 'calibration.json', data / 'one.json'):
        f = json.loads(path.read_text())['refine']
        assert f['tilt_refined'] is False and f['thickness_refined'] is False, f


def test_seeded_by_a_calibration_files_fit(data):
    fit_dir = data / 'fit'
    run_cli('fit', data / 's.npy', '-o', fit_dir, '-q')
    cal = fit_dir / 'calibration.json'
    rec = json.loads(run_cli('refine', data / 's.npy', '--calibration', cal, *CLI_ARGS, '-o', data / 'seeded',
                             '--json', '-q').stdout)
    assert rec['seeded_by'] == "the calibration file's fit"
    with ssb4d.open(data / 's.npy', calibration=cal, progress=False) as s:
        s.load_calibration(cal, progress=False)
        r = s.refine(region=REGION, progress=False, **ARGS)
    got = r.record()
    for k in ('C10_nm', 'C12_nm', 'phi12_deg', 'phi12_probe_deg', 'rotation_deg', 'flip', 'thickness_nm'):
        assert same(got[k], rec[k]), (k, got[k], rec[k])


def test_refused(data):
    with ssb4d.open(data / 's.npy', progress=False) as s:
        with pytest.raises(ssb4d.InvalidArgument, match='thickness_range_nm'):
            s.refine(thickness_range_nm=(5, 1), progress=False)
        with pytest.raises(ssb4d.InvalidArgument, match='slices'):
            s.refine(slices=-1, progress=False)
        with pytest.raises(ssb4d.InvalidArgument, match='iterations'):
            s.refine(iterations=0, progress=False)
        with pytest.raises(ssb4d.InvalidArgument, match='loss'):
            s.refine(loss='l2', progress=False)
        with pytest.raises(ssb4d.InvalidArgument, match='region'):
            s.refine(region=((8, 8), (0, 4)), progress=False)
        with pytest.raises(ssb4d.SSB4DError, match='outside'):
            s.refine(region=((0, 40), (0, 8)), iterations=2, progress=False)
        with pytest.raises(TypeError):
            s.refine(frobnicate=1, progress=False)
