"""``python -m ssb4d._cli ARGS``: runs the ``ssb4d`` command bundled in the package
(ssb4d/_native/ssb4d of the wheel that ``pip install .`` at the repository root builds) with the
same arguments. The wheel's console script ``ssb4d`` is ``ssb4d_cli.main`` (python/ssb4d_cli.py),
the same outside the package, so that it needs no numpy."""
import os
import sys


def main():
    """Replaces this process with the bundled ``ssb4d`` command."""
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), '_native', 'ssb4d')
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        sys.stderr.write('ssb4d: this installation of the Python package carries no ssb4d command (%s): '
                         'install the wheel of `pip install .` at the repository root, or use the installed '
                         'command (cmake --install)\n' % exe)
        return 127
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == '__main__':
    sys.exit(main())
