"""`pip install .` at the repository root with a Python that lacks what the build needs, and the
wheel's console script without numpy (issue 39): in a fresh virtual environment of Debian's
python3 without its site-packages (pip and setuptools from ensurepip; no wheel, no numpy),

* `pip install --no-build-isolation .` fails before any build with one line that names what is
  missing and the Python it looked in (pip_backend.py), not with setuptools' "invalid command
  'bdist_wheel'" or minutes of CMake and then "no matching distribution for numpy";
* the console script of pyproject.toml, over the package laid out as the wheel installs it (the
  real ssb4d command in ssb4d/_native/), answers --help, while `import ssb4d` there fails on numpy.

A few seconds (the venv); skipped where venv or ensurepip is missing."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import CLI

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope='module')
def bare_venv(tmp_path_factory):
    """A venv without the system's site-packages: pip and setuptools only."""
    py = '/usr/bin/python3' if os.access('/usr/bin/python3', os.X_OK) else sys.executable
    if subprocess.run([py, '-c', 'import venv, ensurepip'], capture_output=True).returncode:
        pytest.skip('%s has no venv/ensurepip (apt-get install python3-venv)' % py)
    d = tmp_path_factory.mktemp('bare') / 'venv'
    p = subprocess.run([py, '-m', 'venv', str(d)], capture_output=True, text=True)
    if p.returncode:
        pytest.skip('python3 -m venv failed: %s' % p.stderr.strip()[-200:])
    vpy = str(d / 'bin' / 'python')
    if subprocess.run([vpy, '-c', 'import numpy'], capture_output=True).returncode == 0:
        pytest.skip('the bare venv has numpy')
    return vpy


def clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(('PYTHON', 'PIP_', 'SSB4D_'))}
    env['PIP_DISABLE_PIP_VERSION_CHECK'] = '1'
    env.pop('LD_PRELOAD', None)  # a sanitized build's runtime is for python3 of the tests only
    return env


def test_pip_install_says_what_is_missing(bare_venv, tmp_path):
    src = tmp_path / 'src'  # only what pip reads before the check: the checkout stays clean
    src.mkdir()
    for f in ('pyproject.toml', 'pip_backend.py', 'setup.py', 'README.md', 'CMakeLists.txt', 'LICENSE'):
        if os.path.exists(os.path.join(ROOT, f)):
            shutil.copy(os.path.join(ROOT, f), src / f)
    p = subprocess.run([bare_venv, '-m', 'pip', 'install', '--no-build-isolation', '--no-index', '--no-deps',
                        str(src)], capture_output=True, text=True, env=clean_env(), timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    lines = [l.strip() for l in out.splitlines() if l.strip().startswith('ssb4d:')]
    assert len(lines) == 1, out
    line = lines[0]
    assert re.search(r'which lacks .*\bnumpy\b', line) and 'wheel' in line, line
    assert bare_venv in line, (bare_venv, line)  # the interpreter it looked in
    assert '%s -m pip install' % bare_venv in line, line  # what to run
    assert '[1 lines of output]' in out, out  # the backend said nothing else
    assert 'bdist_wheel' not in out and 'Traceback' not in out, out
    assert not os.path.exists(src / 'build-wheel'), 'the check came after the build started'


def test_console_script_help_needs_no_numpy(bare_venv, tmp_path):
    # [project.scripts] ssb4d = "MODULE:FUNCTION", run as pip's generated script runs it
    with open(os.path.join(ROOT, 'pyproject.toml'), encoding='utf-8') as f:
        m = re.search(r'^ssb4d\s*=\s*"([\w.]+):(\w+)"', f.read(), re.M)
    assert m, 'pyproject.toml has no ssb4d console script'
    module, func = m.groups()
    # the wheel's layout: the package, the top-level modules of python/, the command in _native/
    site = tmp_path / 'site'
    shutil.copytree(os.path.join(ROOT, 'python', 'ssb4d'), site / 'ssb4d',
                    ignore=shutil.ignore_patterns('__pycache__'))
    for f in os.listdir(os.path.join(ROOT, 'python')):
        if f.endswith('.py'):
            shutil.copy(os.path.join(ROOT, 'python', f), site / f)
    (site / 'ssb4d' / '_native').mkdir()
    shutil.copy(CLI, site / 'ssb4d' / '_native' / 'ssb4d')
    env = dict(clean_env(), PYTHONPATH=str(site))
    script = 'import sys; from %s import %s; sys.exit(%s())' % (module, func, func)
    p = subprocess.run([bare_venv, '-c', script, '--help'], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert 'usage: ssb4d' in p.stdout and ' fit ' in p.stdout, p.stdout[:300]
    # the same venv cannot import the package: the script above did not go through it
    p = subprocess.run([bare_venv, '-c', 'import ssb4d'], capture_output=True, text=True, env=env)
    assert p.returncode != 0 and 'ssb4d needs numpy' in p.stderr, p.stderr[-300:]
