"""Virtual images through Python (docs/virtual.md): Session.virtual_images and
ssb4d.tools.virtual_images against `ssb4d virtual --format npy` bit for bit, and against an
independent float64 numpy computation from the raw counts (tests/cli/lib/virtual_ref.py: BF and
ADF exact, CoM 1e-9 mrad, iDPC 2e-5 of its largest value); bad angles refused."""
import json
import os
import sys

import numpy as np
import pytest

import ssb4d
import ssb4d.tools
from conftest import run_cli

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'cli', 'lib'))
import virtual_ref  # noqa: E402


@pytest.fixture(scope='module')
def cli_virtual(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp('virtual') / 'v'
    run_cli('virtual', tiny['npy'], '-o', out, '--format', 'npy', '-q')
    with open(out / 'virtual.json') as f:
        meta = json.load(f)
    return out, meta


def test_session_matches_the_command_line(tiny, cli_virtual):
    out, meta = cli_virtual
    with ssb4d.open(tiny['npy'], progress=False) as s:
        v = s.virtual_images()
    for name, img in v.as_dict().items():
        want = np.load(out / (name + '.npy'))
        assert img.dtype == np.float64 and img.shape == want.shape
        assert img.tobytes() == want.tobytes(), name
    assert v.idpc_unit == 'rad'
    assert v.bf_default and v.n_bf_pixels == meta['n_bf_pixels']
    assert v.adf_mrad == tuple(meta['adf_mrad'])


def test_against_numpy(tiny, cli_virtual):
    _, meta = cli_virtual
    counts = np.load(tiny['npy'])
    with ssb4d.open(tiny['npy'], progress=False) as s:
        v = s.virtual_images(adf=(20.0, 40.0), bf_outer_mrad=15.0, bf_inner_mrad=2.0)
    meta = dict(meta, bf_default=v.bf_default, bf_mrad=list(v.bf_mrad), adf_mrad=list(v.adf_mrad),
                detector_max_mrad=v.detector_max_mrad)
    ref = virtual_ref.reference(counts, meta)
    got = v.as_dict()
    assert np.array_equal(got['virtual_bf'], ref['virtual_bf'])
    assert np.array_equal(got['virtual_adf'], ref['virtual_adf'])
    assert np.abs(got['com_x'] - ref['com_x']).max() < 1e-9
    assert np.abs(got['com_y'] - ref['com_y']).max() < 1e-9
    assert np.abs(got['idpc'] - ref['idpc']).max() <= 2e-5 * np.abs(ref['idpc']).max()


def test_array_and_float32(small_counts):
    counts = small_counts.counts
    kw = dict(small_counts.microscope, rotation_deg=20, flip=True)
    a = ssb4d.tools.virtual_images(counts, **kw)
    b = ssb4d.tools.virtual_images(counts.astype(np.float32), **kw)
    for name, img in a.as_dict().items():  # integer-valued floats: the counts' bits
        assert img.tobytes() == b.as_dict()[name].tobytes(), name
    assert a.flip and a.rotation_deg == 20
    meta = dict(centre_px=list(a.centre_px), det_sampling_mrad=list(a.det_sampling_mrad), flagged=[],
                bf_default=False, bf_mrad=[0.0, 1e300], adf_mrad=list(a.adf_mrad), detector_max_mrad=a.detector_max_mrad,
                flip=a.flip, rotation_deg=a.rotation_deg, idpc_lambda_A=ssb4d.wavelength_A(kw['kv']),
                idpc_step_A=list(np.broadcast_to(kw['scan_step_A'], 2).astype(float)))
    ref = virtual_ref.reference(counts, meta)
    assert np.array_equal(a.adf, ref['virtual_adf'])
    assert np.abs(a.com_x - ref['com_x']).max() < 1e-9
    assert np.abs(a.idpc - ref['idpc']).max() <= 2e-5 * np.abs(ref['idpc']).max()


@pytest.mark.parametrize('kw', [dict(adf=(30.0, 10.0)), dict(adf=(-1.0, 10.0)), dict(adf=(500.0, 600.0)),
                                dict(bf_outer_mrad=-2.0), dict(adf=5.0)])
def test_bad_angles(tiny, kw):
    with ssb4d.open(tiny['npy'], progress=False) as s:
        with pytest.raises(ssb4d.InvalidArgument):
            s.virtual_images(**kw)
