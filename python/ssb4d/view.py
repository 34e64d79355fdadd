"""``Session.view()``: the browser viewer (``ssb4d view``) on a session's data, as a second process
serving 127.0.0.1, shown in Jupyter as an inline frame."""
import atexit
import os
import select
import signal
import subprocess
import tempfile
import time
import warnings
import weakref

import numpy as np

from . import _lib
from .errors import FileError, InvalidArgument

_LIVE = weakref.WeakSet()


class Viewer:
    """A running ``ssb4d view``: ``url`` (with its token), ``stop()``; Jupyter shows it inline."""

    def __init__(self, proc, url, tmpdir, width, height):
        self.process = proc
        self.url = url
        self._tmp = tmpdir
        self.width = width
        self.height = height
        _LIVE.add(self)

    def _repr_html_(self):
        w = self.width if isinstance(self.width, str) else '%dpx' % self.width
        h = self.height if isinstance(self.height, str) else '%dpx' % self.height
        return '<iframe src="%s" style="width:%s;height:%s;border:0"></iframe>' % (self.url, w, h)

    def iframe(self):
        """An IPython.display.IFrame of the viewer (needs IPython)."""
        from IPython.display import IFrame
        return IFrame(self.url, self.width, self.height)

    @property
    def running(self):
        return self.process.poll() is None

    def stop(self, timeout=10.0):
        """Stops the viewer (SIGINT: it finishes its request and exits) and removes its files."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __repr__(self):
        return '<ssb4d.Viewer %s%s>' % (self.url, '' if self.running else ' (stopped)')


@atexit.register
def _stop_all():
    for v in list(_LIVE):
        try:
            v.stop(timeout=3.0)
        except Exception:
            pass


def start_viewer(session, port=0, width='100%', height=720, fit_on_start=None, timeout=30.0):
    cli = _lib.cli_path()
    if not cli:
        raise FileError('the ssb4d command was not found (set SSB4D_CLI to its path)', 3)
    if not (isinstance(port, int) and 0 <= port <= 65535):
        raise InvalidArgument('port must be 0..65535 (0: any free port)')
    tmp = tempfile.TemporaryDirectory(prefix='ssb4d-view-')
    # The viewer runs in the caller's folder and its Save writes there (--output), not into the
    # temporary folder that stop() removes; relative paths are the caller's.
    try:
        here = os.getcwd()
    except OSError:  # the caller's folder is gone
        here = None
    if here is None or not os.access(here, os.W_OK | os.X_OK):
        warnings.warn('ssb4d view: the current folder is not writable; the viewer saves into %s, which '
                      'stop() removes' % tmp.name, stacklevel=3)
        out = tmp.name
    else:
        out = here
    args = [cli, 'view', '--port', str(port), '-q', '--output', out]
    data = getattr(session, '_path', None)
    if data is None:  # an array: the viewer is another process, it reads a file
        data = os.path.join(tmp.name, 'data.npy')
        np.save(data, session._array)
    data = os.path.abspath(data)
    args.append(data)
    m = session._microscope
    args += ['--kv', repr(m['kv']), '--semiangle', repr(m['semiangle_mrad']),
             '--scan-step', '%r,%r' % tuple(m['scan_step_A'])]
    if m.get('det_sampling_mrad'):
        args += ['--det-sampling', '%r,%r' % tuple(m['det_sampling_mrad'])]
    fitted = session._fit is not None
    if fitted or fit_on_start is False:
        # the session's current parameters (its fit) are the viewer's start: no fit there
        cal = os.path.join(tmp.name, 'calibration.json')
        session.save_calibration(cal, force=True)
        args += ['--calibration', cal, '--no-fit']
    elif m.get('rotation_from'):  # the file, so the viewer holds its handedness too
        args += ['--rotation-from', m['rotation_from']]
    elif m.get('rotation_deg') is not None:
        args += ['--rotation', repr(m['rotation_deg'])]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=None, cwd=out, start_new_session=True)
    url = None
    end = time.monotonic() + timeout
    buf = b''
    while time.monotonic() < end and url is None:
        r, _, _ = select.select([proc.stdout], [], [], 0.2)
        if r:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            for line in buf.decode('utf-8', 'replace').splitlines():
                if line.startswith('ssb4d view: http://'):
                    url = line.split(' ', 2)[2].strip()
        elif proc.poll() is not None:
            break
    if url is None:
        proc.kill()
        proc.wait()
        tmp.cleanup()
        raise FileError('ssb4d view did not start (exit status %s; its error is above)' % proc.returncode, 3)
    return Viewer(proc, url, tmp, width, height)
