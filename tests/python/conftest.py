"""Fixtures of the Python package's tests (run by ctest as `python`, docs/python.md): a real
libssb4d, the real `ssb4d` command beside it, data simulated here."""
import json
import os
import subprocess

import numpy as np
import pytest

import ssb4d

CLI = os.environ.get('SSB4D_BIN') or ssb4d._lib.cli_path()


def run_cli(*args, check=True):
    """Runs the ssb4d command; returns the CompletedProcess (text)."""
    p = subprocess.run([CLI] + [str(a) for a in args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError('ssb4d %s: exit %d\n%s' % (' '.join(map(str, args)), p.returncode, p.stderr))
    return p


@pytest.fixture(scope='session')
def tiny(tmp_path_factory):
    """The tiny preset (32² scan, 48² detector) as s.npy with its sidecar s.json, made by the
    command line; and the command line's fit of it (its --json and its output folder)."""
    d = tmp_path_factory.mktemp('tiny')
    npy = d / 's.npy'
    run_cli('simulate', '--preset', 'tiny', '-o', npy, '-q')
    out = d / 'fit'
    p = run_cli('fit', npy, '-o', out, '--json', '-q')
    return {'dir': d, 'npy': npy, 'fit_dir': out, 'fit': json.loads(p.stdout)}


@pytest.fixture(scope='session')
def small_counts():
    """A small array for loops (24² scan, 32² detector)."""
    return ssb4d.simulate_array('tiny', progress=False, scan_n=24, det=32, scan_cells=3)
