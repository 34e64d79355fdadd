"""`pip install .` at the repository root: setuptools runs CMake to build libssb4d and the `ssb4d`
command (Release, no tests), and puts both into the package as ssb4d/_native/libssb4d.so.0 and
ssb4d/_native/ssb4d. The Python package loads that library by its path; the console script
`ssb4d` (ssb4d._cli) runs that command. The metadata is in pyproject.toml.

The build folder is build-wheel/ beside this file (kept between installs, so a second install
only rebuilds what changed), or $SSB4D_WHEEL_BUILD_DIR. CMake honours CMAKE_BUILD_PARALLEL_LEVEL
(default here: every CPU this process may use), CMAKE_GENERATOR, and the -D options in
CMAKE_ARGS (e.g. CMAKE_ARGS="-DSSB4D_CUDA=OFF -DSSB4D_MPI=OFF").
"""
import os
import re
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py
from setuptools.dist import Distribution

try:  # setuptools >= 70.1 carries bdist_wheel itself
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel as _bdist_wheel
    except ImportError:  # no wheel package: `pip install` says what is missing
        _bdist_wheel = None

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get('SSB4D_WHEEL_BUILD_DIR') or os.path.join(ROOT, 'build-wheel'))


def version():
    with open(os.path.join(ROOT, 'CMakeLists.txt'), encoding='utf-8') as f:
        m = re.search(r'project\(\s*ssb4d\s+VERSION\s+([0-9][0-9.]*)', f.read())
    if not m:
        raise RuntimeError('setup.py: no project(ssb4d VERSION x.y.z) in CMakeLists.txt')
    return m.group(1)


def jobs():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class build_py(_build_py):
    """The package's .py files, then libssb4d and the command from CMake into ssb4d/_native/."""

    def run(self):
        super().run()
        if not self.dry_run:
            self.build_native()

    def build_native(self):
        cmake = os.environ.get('CMAKE') or shutil.which('cmake')
        if not cmake:
            raise RuntimeError('ssb4d: building the wheel needs CMake >= 3.18 (apt-get install cmake) and the '
                               'libraries of scripts/install-deps.sh')
        bdir = os.path.join(BUILD, 'cmake')
        configure = [cmake, '-S', ROOT, '-B', bdir, '-DCMAKE_BUILD_TYPE=Release', '-DSSB4D_TESTS=OFF',
                     '-DSSB4D_FUZZ=OFF', '-DSSB4D_SANITIZE=OFF', '-DSSB4D_BENCH_SLOWDOWN=OFF',
                     # the command and the library find each other (and nothing of the build
                     # tree) through $ORIGIN; libraries outside the system's folders (CUDA) by path
                     '-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON', '-DCMAKE_INSTALL_RPATH=$ORIGIN',
                     '-DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON']
        configure += shlex.split(os.environ.get('CMAKE_ARGS', ''))
        self.announce('ssb4d: ' + ' '.join(configure), level=2)
        subprocess.check_call(configure)
        build = [cmake, '--build', bdir, '--target', 'ssb4d', 'ssb4d_shared']
        if not os.environ.get('CMAKE_BUILD_PARALLEL_LEVEL'):
            build += ['--parallel', str(jobs())]
        subprocess.check_call(build)

        native = os.path.join(self.build_lib, 'ssb4d', '_native')
        if os.path.isdir(native):
            shutil.rmtree(native)
        os.makedirs(native)
        # one real file under the SONAME (a wheel holds no symbolic links); the package loads it
        # by this path
        lib = os.path.realpath(os.path.join(bdir, 'libssb4d.so.0'))
        shutil.copyfile(lib, os.path.join(native, 'libssb4d.so.0'))
        exe = os.path.join(native, 'ssb4d')
        shutil.copyfile(os.path.join(bdir, 'ssb4d'), exe)
        os.chmod(exe, 0o755)
        os.chmod(os.path.join(native, 'libssb4d.so.0'), 0o755)


class BinaryDistribution(Distribution):
    """The package carries binaries: installed into platlib, and the wheel is not pure."""

    def has_ext_modules(self):
        return True


cmdclass = {'build_py': build_py}

if _bdist_wheel is not None:
    class bdist_wheel(_bdist_wheel):
        """Platform-tagged (it carries a binary) but for any Python 3: the package is ctypes
        over its own library, with no extension module tied to one CPython."""

        def get_tag(self):
            _, _, plat = super().get_tag()
            return 'py3', 'none', plat

    cmdclass['bdist_wheel'] = bdist_wheel

os.makedirs(BUILD, exist_ok=True)
setup(
    version=version(),
    distclass=BinaryDistribution,
    cmdclass=cmdclass,
    # setuptools' own folders go beside CMake's, not into the project's build/ (a CMake build)
    options={'build': {'build_base': os.path.join(BUILD, 'setuptools')},
             'egg_info': {'egg_base': BUILD}},
)
