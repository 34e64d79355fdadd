"""Session.fit_regions settles the 180 deg branch as `ssb4d fit-regions` does (issue 32, docs/fit.md
"The branch from the thinnest region"; the library's ssb4d_session_settle_branch): the Au wedge of
tests/cli/regions_branch.sh (tiny preset on a 64x64 scan, 0.41 to 2 nm along the columns, scan
rotation 200 deg, no sidecar so the rotation is searched) on a 1x2 grid. The thin half settles it,
the thick half is refit with its rotation and handedness held, the session keeps them, and every
number equals the command line's regions.json on the same file; with rotation_per_region=True each
region keeps its own. A wedge thick all over (1.6 to 2 nm) settles it nowhere: a RuntimeWarning, as
the command line warns. About 2 min on the 2 shared cores (part of the slow `python` test)."""
import json
import math
import pathlib
import re
import warnings

import pytest

import ssb4d
from conftest import run_cli

MICRO = dict(kv=300, semiangle_mrad=25, scan_step_A=0.3823125, threads=2)
M = ('--kv', '300', '--semiangle', '25', '--scan-step', '0.3823125', '--threads', '2')


@pytest.fixture(scope='module')
def wedge(tmp_path_factory):
    d = tmp_path_factory.mktemp('regions_branch')
    npy = d / 'w.npy'
    run_cli('simulate', '--preset', 'tiny', '--specimen', 'au', '--scan', '64', '--scan-cells', '6',
            '--scan-rotation', '200', '--wedge', '0.41:2', '--threads', '2', '-q', '-o', npy)
    (d / 'w.json').unlink()  # the rotation is not given
    run_cli('fit-regions', npy, *M, '--grid', '1x2', '-o', d / 'r', '-q')
    return {'npy': npy, 'cli': json.loads((d / 'r' / 'regions.json').read_text())}


def off(deg, truth=200.0):
    return abs((deg - truth + 180) % 360 - 180)


def test_thin_region_settles_like_the_command_line(wedge):
    with ssb4d.open(wedge['npy'], **MICRO) as s:
        regs = s.fit_regions((1, 2), progress=False)
        assert [r.rotation_set_by for r in regs] == [0, 0]
        thin, thick = regs
        assert thin.cols == (0, 32) and thick.cols == (32, 64)
        assert thin.fit.rotation_source == 'parallax' and thin.fit.confident
        assert thick.fit.rotation_source == 'given' and thick.fit.flip_source == 'given'  # held
        for r in regs:
            assert off(r.fit.rotation_deg) < 1 and r.fit.flip is False
        # the field holds the settled rotation from then on
        assert s.rotation_deg == thin.fit.rotation_deg
    cli = wedge['cli']
    assert cli['branch_region']['index'] == 0
    for r, c in zip(regs, cli['regions']):
        assert c['rotation_set_by'] == r.rotation_set_by
        assert list(c['rect']) == [*r.rows, *r.cols]
        for k, v in (('C10_nm', r.fit.C10_nm), ('C12_nm', r.fit.C12_nm), ('phi12_deg', r.fit.phi12_deg),
                     ('rotation_deg', r.fit.rotation_deg), ('loss', r.fit.loss)):
            assert math.isclose(c[k], v, rel_tol=1e-14), (k, c[k], v)  # cJSON writes 15 digits
        assert c['confident'] == r.fit.confident


def test_rotation_per_region(wedge):
    with ssb4d.open(wedge['npy'], **MICRO) as s:
        s.calibrate(progress=False)
        before = s.rotation_deg
        regs = s.fit_regions((1, 2), rotation_per_region=True, progress=False)
        assert [r.rotation_set_by for r in regs] == [None, None]
        thick = regs[1].fit
        assert thick.rotation_source != 'given'  # its own rotation, not held
        assert not (off(thick.rotation_deg) < 1 and thick.confident)  # on its own: wrong or unsure
        assert s.rotation_deg == before  # nothing held


def test_none_settles_warns(tmp_path):
    npy = tmp_path / 'thick.npy'
    run_cli('simulate', '--preset', 'tiny', '--specimen', 'au', '--scan', '64', '--scan-cells', '6',
            '--scan-rotation', '200', '--wedge', '1.6:2', '--threads', '2', '-q', '-o', npy)
    (tmp_path / 'thick.json').unlink()
    with ssb4d.open(npy, **MICRO) as s:
        with pytest.warns(RuntimeWarning, match='no region settles the 180 deg branch'):
            regs = s.fit_regions((1, 2), progress=False)
        assert [r.rotation_set_by for r in regs] == [None, None]
        assert not any(r.fit.confident for r in regs)
        # nothing to settle, nothing said: the rotation given
        s.set_rotation(200.0)
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            regs = s.fit_regions((1, 2), progress=False)
        assert [r.rotation_set_by for r in regs] == [None, None]


def test_skew_settled_matches_the_header():
    h = (pathlib.Path(__file__).resolve().parents[2] / 'include' / 'ssb4d.h').read_text()
    m = re.search(r'#define SSB4D_FIT_SKEW_SETTLED ([0-9.]+)', h)
    assert m and float(m.group(1)) == ssb4d.session.SKEW_SETTLED
