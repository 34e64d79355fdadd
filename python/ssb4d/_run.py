"""Long calls: run on one worker thread so that Ctrl-C reaches Python while the C library works,
report progress (a callback, or a tqdm bar when tqdm is installed), and cancel through the
library's cancel token (the session's, or the progress callback's return value).
"""
import concurrent.futures
import sys
import threading
import time

from . import _lib

# One worker thread for every long call of the process: the library's OpenMP team stays with it
# between calls instead of being made again per call. Calls from several Python threads therefore
# run one after another.
_worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix='ssb4d')
_worker_ident = []


def _note_worker():
    _worker_ident.append(threading.get_ident())


_worker.submit(_note_worker).result()


def _tqdm():
    try:
        from tqdm.auto import tqdm
        return tqdm
    except ImportError:
        return None


def _interactive(stream):
    """True where a person watches the stream: a terminal, or a Jupyter kernel's output (which
    draws a carriage return as a line rewritten)."""
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):
        return False
    return type(stream).__module__.startswith('ipykernel')


class TextLine:
    """A progress line rewritten in place with a carriage return, on stderr: the stage, its
    percentage and the seconds so far, at most 10 times a second; a newline at the end. Needs
    nothing beyond the standard library (a terminal, a notebook, a log when asked)."""

    def __init__(self, label, stream=None):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = time.monotonic()
        self.last = 0.0
        self.width = 0
        self.text = None

    def show(self, stage, fraction, force=False):
        now = time.monotonic()
        if not force and now - self.last < 0.1 and stage == self.text:
            return
        self.last, self.text = now, stage
        head = self.label if stage in ('', None, self.label) else '%s: %s' % (self.label, stage)
        line = '%s %3.0f%%  %.1f s' % (head, 100 * min(max(fraction, 0.0), 1.0), now - self.t0)
        self.stream.write('\r' + line.ljust(self.width))
        self.stream.flush()
        self.width = len(line)

    def close(self):
        if self.width:
            self.stream.write('\n')
            self.stream.flush()


class Progress:
    """What one long call reports into: the user's callback ``fn(stage, fraction) -> cancel?``;
    progress=True: a tqdm bar when tqdm is installed, else a text line on stderr when a person
    watches it (a terminal, a notebook), else nothing; progress='text': the text line wherever
    stderr goes (a log); False: nothing.

    The library calls ``sink`` from whichever of its threads polls, never two at once."""

    def __init__(self, progress, label):
        self.fn = progress if callable(progress) else None
        self.bar = None
        self.line = None
        self.stage = None
        if progress is True and self.fn is None:
            tqdm = _tqdm()
            if tqdm is not None:
                self.bar = tqdm(total=1000, desc=label, leave=False,
                                bar_format='{desc}: {percentage:3.0f}%|{bar}| {elapsed}')
            elif _interactive(sys.stderr):
                self.line = TextLine(label)
        elif progress == 'text':
            self.line = TextLine(label)
        elif not (progress is False or progress is None or self.fn is not None):
            from .errors import InvalidArgument
            raise InvalidArgument("progress takes True, False, 'text' or a function fn(stage, fraction), not %r"
                                  % (progress,))
        self.cancel_flag = threading.Event()
        self.error = None

    def sink(self, stage, fraction):
        """Returns True to cancel."""
        if self.cancel_flag.is_set():
            return True
        try:
            if self.line is not None:
                self.line.show(stage, fraction)
            if self.bar is not None:
                if stage != self.stage:
                    self.bar.set_description(stage)
                    self.stage = stage
                self.bar.n = int(1000 * min(max(fraction, 0.0), 1.0))
                self.bar.refresh()
            if self.fn is not None and self.fn(stage, fraction):
                self.cancel_flag.set()
                return True
        except BaseException as e:  # never through the C library: kept, raised after the call
            self.error = e
            self.cancel_flag.set()
            return True
        return False

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.line is not None:
            self.line.close()
            self.line = None


def c_callback(holder):
    """A ctypes progress function that forwards to holder.current (a Progress or None). The
    returned object must be kept alive as long as the library may call it."""
    def cb(_user, stage, fraction):
        p = holder.current
        if p is None:
            return 0
        return 1 if p.sink(stage.decode('utf-8', 'replace') if stage else '', fraction) else 0
    return _lib.PROGRESS(cb)


def call(fn, progress=None, cancel=None):
    """Runs fn() (which calls the library and returns its status) on the worker thread and returns
    its result. KeyboardInterrupt (Ctrl-C) while it runs cancels it (cancel(), or the progress
    flag), waits for the library to stop, and is raised again; an exception raised by a progress
    callback is raised once the call has stopped."""
    if threading.get_ident() in _worker_ident:  # from a progress callback: already on the worker
        return fn()
    fut = _worker.submit(fn)
    try:
        while True:
            try:
                out = fut.result(timeout=0.1)
                break
            except concurrent.futures.TimeoutError:
                continue
    except KeyboardInterrupt:
        if progress is not None:
            progress.cancel_flag.set()
        if cancel is not None:
            cancel()
        concurrent.futures.wait([fut])
        raise
    finally:
        if progress is not None:
            progress.close()
    if progress is not None and progress.error is not None:
        raise progress.error
    return out
