"""A stated detector sampling far from the measured one is warned about by every door in the same
words (issue 39, SPEC §4 "Stated beats measured"; the library's ssb4d_calibration_sampling_report):
`ssb4d calibrate`, Python's Session.calibrate() (a RuntimeWarning) and the viewer's /api/state."""
import json
import shutil
import time
import warnings

import pytest

import ssb4d
from conftest import run_cli
from test_three_doors import View

WARN = ('the measured sampling differs from the stated one by more than 3 sigma: check the semi-angle and the '
        'stated sampling (--det-sampling measure uses the measured one)')


@pytest.fixture(scope='module')
def off(tiny, tmp_path_factory):
    """The tiny preset with a sidecar that states a sampling 2 % above the truth, and the truth's."""
    d = tmp_path_factory.mktemp('sampling')
    for name, scale in (('off', 1.02), ('right', 1.0)):
        shutil.copy(tiny['npy'], d / (name + '.npy'))
        side = json.loads((tiny['dir'] / 's.json').read_text())
        side['detector']['sampling_mrad'] = [x * scale for x in side['detector']['sampling_mrad']]
        (d / (name + '.json')).write_text(json.dumps(side))
    return d


def cli_words(path):
    """`ssb4d calibrate`'s sampling line and its warning joined on one line ('' none)."""
    out = run_cli('calibrate', path, '-o', path.with_suffix('.cal.json'), '--force').stdout.splitlines()
    line = next(x for x in out if x.startswith('  sampling    '))[14:]
    i = next((k for k, x in enumerate(out) if x.startswith('  warning     the measured sampling')), None)
    return line, '' if i is None else out[i][14:] + ' ' + out[i + 1].strip()


def python_words(path):
    with ssb4d.open(path, progress=False) as s, warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        c = s.calibrate(progress=False)
    got = [str(x.message) for x in w if 'sampling' in str(x.message) and x.category is RuntimeWarning]
    return c.sampling_report, c.sampling_warning, got


def viewer_words(path):
    v = View(path, path.parent)
    try:
        t0 = time.time()
        while not (st := v.call('GET', '/api/state'))['ready'] and time.time() - t0 < 120:
            time.sleep(0.1)  # the viewer calibrates as it starts
        c = st['calibration']
    finally:
        v.stop()
    return c['sampling'], c['sampling_warning']


def test_off_by_2_percent_is_warned_by_every_door(off):
    line, warn = cli_words(off / 'off.npy')
    assert warn == WARN and '(stated)' in line and '-1.9' in line
    report, warning, got = python_words(off / 'off.npy')
    assert (report, warning) == (line, warn)
    assert got == ['ssb4d calibrate: sampling %s: %s' % (line, WARN)]
    assert viewer_words(off / 'off.npy') == (line, warn)


def test_the_truth_is_not_warned(off):
    line, warn = cli_words(off / 'right.npy')
    assert warn == '' and '(stated)' in line
    report, warning, got = python_words(off / 'right.npy')
    assert (report, warning, got) == (line, '', [])
    assert viewer_words(off / 'right.npy') == (line, '')
