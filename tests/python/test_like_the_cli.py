"""Python behaves like the command line (issue 39): the data file is checked first and named; a
keyword contradicting the file warns as a flag does; float64 arrays are read when nothing is lost
(else refused with the conversion to make); s.view() after s.fit() shows that fit; long calls show
progress on a terminal without tqdm."""
import errno
import json
import os
import pty
import subprocess
import sys
import textwrap
import time
import urllib.request
import warnings

import numpy as np
import pytest

import ssb4d
from conftest import run_cli


# ---- the data file first ---------------------------------------------------------------------

def cli_error(path):
    p = run_cli('fit', path, '-o', os.path.join(os.path.dirname(str(path)) or '.', 'never'), check=False)
    assert p.returncode == 2
    return p.stderr.strip().splitlines()[-1]


def test_a_folder_a_missing_file_and_a_text_file_are_named_first(tmp_path):
    """As `ssb4d fit` says it, before anything about the microscope values: the same line."""
    (tmp_path / 'notes.npy').write_text('not an array\n')
    cases = [(tmp_path, ssb4d.FileError, errno.EISDIR), (tmp_path / 'missing.npy', ssb4d.FileError, errno.ENOENT),
             (tmp_path / 'notes.npy', ssb4d.FormatError, None)]
    for path, exc, code in cases:
        with pytest.raises(exc) as e:
            ssb4d.open(path)
        assert str(path) in str(e.value) and 'voltage' not in str(e.value)
        assert 'ssb4d fit: ' + str(e.value) == cli_error(path)
        if code is not None:
            assert e.value.errno == code and isinstance(e.value, OSError)


# ---- a keyword against the file --------------------------------------------------------------

def test_a_keyword_contradicting_the_file_warns_as_the_cli_does(tiny, monkeypatch):
    monkeypatch.chdir(tiny['dir'])
    cli = run_cli('fit', 's.npy', '--kv', '30', '--scan-step', '0.4,0.5', '--semiangle', '25.1', '-o', 'kv30', '-q',
                  check=False).stderr
    want = [line.split('warning: ', 1)[1].replace('--kv ', 'kv=').replace('--scan-step ', 'scan_step_A=')
            for line in cli.splitlines() if ' differs from ' in line]
    assert len(want) == 2  # the kV and the scan step; 25.1 mrad is within 1 % of 25
    with pytest.warns(RuntimeWarning) as got:
        ssb4d.open('s.npy', kv=30, scan_step_A=(0.4, 0.5), semiangle_mrad=25.1).close()
    assert [str(w.message) for w in got if ' differs from ' in str(w.message)] == want
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        ssb4d.open('s.npy', kv=300).close()  # the file's own value: silent


# ---- float64 arrays --------------------------------------------------------------------------

def test_float64_arrays(tiny):
    a = np.load(tiny['npy'])
    v = ssb4d.values(tiny['npy'])
    micro = dict(kv=v.kv, semiangle_mrad=v.semiangle_mrad, scan_step_A=v.scan_step_A,
                 det_sampling_mrad=v.det_sampling_mrad, rotation_deg=v.rotation_deg, flip=v.flip)
    with ssb4d.open_array(a.astype(np.float64), **micro) as s:  # whole counts: the counts' fit
        assert s._array.dtype == np.float32
        assert s.fit(progress=False).trace_sha256 == tiny['fit']['trace_sha256']
    half = a.astype(np.float64) * 0.5  # every value a float32: read exactly, as those float32
    with ssb4d.open_array(half, **micro) as s, ssb4d.open_array(half.astype(np.float32), **micro) as t:
        assert s.fit(progress=False).trace_sha256 == t.fit(progress=False).trace_sha256
    big = a.astype(np.float64) + 2.0 ** 25  # whole counts float32 cannot hold: uint32
    with ssb4d.open_array(big, **micro) as s:
        assert s._array.dtype == np.uint32 and np.array_equal(s._array, big)
    third = a.astype(np.float64) / 3
    with pytest.raises(ssb4d.InvalidArgument, match=r'a\.astype\(np\.float32\)') as e:
        ssb4d.open_array(third, **micro)
    assert 'float64' in str(e.value)
    third[0, 0, 0, 0] = np.nan
    with pytest.raises(ssb4d.InvalidArgument, match='NaN'):
        ssb4d.open_array(third, **micro)


# ---- the viewer after a fit ------------------------------------------------------------------

def state(viewer):
    base, token = viewer.url.split('/?')[0], viewer.url.split('token=')[1]
    for _ in range(600):
        req = urllib.request.Request(base + '/api/state', headers={'X-SSB4D-Token': token})
        st = json.loads(urllib.request.urlopen(req, timeout=30).read())
        if st['ready'] and not st['job']['busy']:
            return st, base, token
        time.sleep(0.1)
    raise AssertionError('the viewer never got ready')


def test_view_after_fit_shows_that_fit(tiny, tmp_path, monkeypatch):
    """The result panel (/api/state's fit) is the session's fit, not "no fit yet"; the viewer's
    Save writes the very file the session saves."""
    monkeypatch.chdir(tmp_path)
    with ssb4d.open(tiny['npy'], progress=False) as s:
        f = s.fit(progress=False)
        s.save_calibration('mine.json')
        v = s.view()
        try:
            st, base, token = state(v)
            req = urllib.request.Request(base + '/api/save', data=json.dumps({'name': 'viewer.json'}).encode(),
                                         headers={'X-SSB4D-Token': token}, method='POST')
            urllib.request.urlopen(req, timeout=60).read()
        finally:
            v.stop()
    fit = st['fit']
    assert fit['done'], 'the viewer shows no fit after s.fit()'
    r = fit['result']
    assert (r['C10_nm'], r['C12_nm'], r['phi12_deg'], r['rotation_deg'], fit['loss'], fit['flip']) == \
        (f.C10_nm, f.C12_nm, f.phi12_deg, f.geometry.rotation_deg, f.loss, f.flip)
    assert fit['phi12_probe_deg'] == f.phi12_probe_deg and fit['confident'] == f.confident
    assert fit['standard_errors']['C10_nm'] == f.standard_errors['C10_nm']
    assert (tmp_path / 'viewer.json').read_bytes() == (tmp_path / 'mine.json').read_bytes()


# ---- progress without tqdm -------------------------------------------------------------------

CHILD = textwrap.dedent('''
    import sys
    sys.modules['tqdm'] = None  # as where tqdm is not installed
    import ssb4d
    with ssb4d.open(sys.argv[1]) as s:
        s.fit(progress=sys.argv[2] == 'text' and 'text' or True)
    print('done', flush=True)
''')


def child_env():
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(p for p in sys.path if p)
    return env


def test_progress_on_a_terminal_without_tqdm(tiny):
    """A terminal (a pty) on stderr: a carriage-return line with the stage and its percentage."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, '-c', CHILD, str(tiny['npy']), 'default'], stderr=slave,
                         stdout=subprocess.PIPE, env=child_env())
    os.close(slave)
    out = b''
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=300) == 0 and p.stdout.read() == b'done\n'
    p.stdout.close()
    text = out.decode()
    assert '\r' in text and 'fit' in text and '%' in text and text.endswith('\n'), repr(text[-300:])
    assert 'G build' in text


def test_no_progress_into_a_pipe_unless_asked(tiny):
    env = child_env()
    quiet = subprocess.run([sys.executable, '-c', CHILD, str(tiny['npy']), 'default'], capture_output=True,
                           env=env, timeout=300)
    assert quiet.returncode == 0 and b'%' not in quiet.stderr
    asked = subprocess.run([sys.executable, '-c', CHILD, str(tiny['npy']), 'text'], capture_output=True,
                           env=env, timeout=300)
    assert asked.returncode == 0 and b'\rfit' in asked.stderr and b'%' in asked.stderr
    with pytest.raises(ssb4d.InvalidArgument, match='progress takes'):
        with ssb4d.open(tiny['npy'], progress=False) as s:
            s.fit(progress='bar')
