"""The console script ``ssb4d`` of the wheel (``pip install .`` at the repository root): it runs the
``ssb4d`` command bundled in the package (ssb4d/_native/ssb4d) with the same arguments.

A module of its own, outside the ``ssb4d`` package: importing anything inside the package runs
its ``__init__``, which needs numpy, and the command needs no numpy (``ssb4d --help`` works in
an environment without it). The package's folder is found without importing it."""
import importlib.util
import os
import sys


def main():
    """Replaces this process with the bundled ``ssb4d`` command."""
    spec = importlib.util.find_spec('ssb4d')  # finds the package; runs none of it
    folders = list(spec.submodule_search_locations or []) if spec else []
    exe = os.path.join(folders[0], '_native', 'ssb4d') if folders else '(no ssb4d package)'
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        sys.stderr.write('ssb4d: this installation of the Python package carries no ssb4d command (%s): '
                         'install the wheel of `pip install .` at the repository root, or use the installed '
                         'command (cmake --install)\n' % exe)
        return 127
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == '__main__':
    sys.exit(main())
