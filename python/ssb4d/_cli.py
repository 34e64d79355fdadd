"""The console script ``ssb4d`` of the wheel (``pip install .`` at the repository root): it runs the
``ssb4d`` command bundled in the package (ssb4d/_native/ssb4d) with the same arguments."""
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
