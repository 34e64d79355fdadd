"""The build backend of `pip install .` at the repository root (pyproject.toml names it): it checks
that the Python running pip has what the build needs, then hands every hook to setuptools, which
runs setup.py (CMake builds libssb4d and the ssb4d command into the wheel).

Without this check a Python that lacks setuptools or wheel fails with a traceback from deep in pip
or setuptools ("invalid command 'bdist_wheel'"), and one without numpy builds for minutes before
pip fails to find numpy offline. Here it is one line naming what to install and the Python it
was looked for in. Nothing is imported from setuptools until the check has passed.
"""
import importlib
import os
import site
import sys
import sysconfig

SETUPTOOLS_MIN = 61


def _version(mod):
    """(major, minor) of a module's __version__, (0, 0) when unreadable."""
    parts = (str(getattr(mod, '__version__', '0')).split('.') + ['0'])[:2]
    try:
        return tuple(int(''.join(c for c in p if c.isdigit()) or 0) for p in parts)
    except ValueError:
        return (0, 0)


def _isolated():
    """True in pip's isolated build environment (the default without --no-build-isolation): pip
    leaves the interpreter's own site-packages (site.getsitepackages()) off sys.path there, and
    installs numpy, a runtime dependency, after the build, so only setuptools and wheel, the
    build's requirements, must be importable."""
    sites = site.getsitepackages() if hasattr(site, 'getsitepackages') else [sysconfig.get_paths()['purelib']]
    on_path = {os.path.normcase(os.path.realpath(p)) for p in sys.path if p}
    return not any(os.path.normcase(os.path.realpath(p)) in on_path for p in sites)


def _missing(need_numpy):
    missing = []
    try:
        setuptools = importlib.import_module('setuptools')
        if _version(setuptools) < (SETUPTOOLS_MIN, 0):
            missing.append('setuptools>=%d' % SETUPTOOLS_MIN)
    except ImportError:
        setuptools = None
        missing.append('setuptools>=%d' % SETUPTOOLS_MIN)
    # setuptools >= 70.1 carries bdist_wheel itself; before that it comes from wheel
    if not (setuptools is not None and _version(setuptools) >= (70, 1)):
        try:
            importlib.import_module('wheel')
        except ImportError:
            missing.append('wheel')
    if need_numpy and not _isolated():
        try:
            importlib.import_module('numpy')
        except ImportError:
            missing.append('numpy')
    return missing


def _check(need_numpy=True):
    missing = _missing(need_numpy)
    if not missing:
        return
    py = sys.executable or 'python3'
    debian = ' '.join('python3-' + m.split('>')[0] for m in missing)
    raise SystemExit('ssb4d: `pip install .` needs setuptools>=%d, wheel and numpy in the Python that runs it, %s, '
                     'which lacks %s: install them with `%s -m pip install %s` (for Debian\'s /usr/bin/python3: '
                     'apt-get install %s), then run `%s -m pip install --no-build-isolation .` again'
                     % (SETUPTOOLS_MIN, py, ', '.join(missing), py, ' '.join("'%s'" % m if '>' in m else m
                                                                              for m in missing), debian, py))


def _backend():
    return importlib.import_module('setuptools.build_meta')


# The PEP 517 / 660 hooks: each checks, then calls setuptools' own.
def get_requires_for_build_wheel(config_settings=None):
    _check()
    return _backend().get_requires_for_build_wheel(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _check()
    return _backend().prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _check()
    return _backend().build_wheel(wheel_directory, config_settings, metadata_directory)


def get_requires_for_build_sdist(config_settings=None):
    _check(need_numpy=False)
    return _backend().get_requires_for_build_sdist(config_settings)


def build_sdist(sdist_directory, config_settings=None):
    _check(need_numpy=False)
    return _backend().build_sdist(sdist_directory, config_settings)


def _editable(hook):
    fn = getattr(_backend(), hook, None)
    if fn is None:
        raise SystemExit('ssb4d: `pip install -e .` needs setuptools>=64 in %s' % (sys.executable or 'python3'))
    return fn


def get_requires_for_build_editable(config_settings=None):
    _check()
    return _editable('get_requires_for_build_editable')(config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    _check()
    return _editable('prepare_metadata_for_build_editable')(metadata_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _check()
    return _editable('build_editable')(wheel_directory, config_settings, metadata_directory)
