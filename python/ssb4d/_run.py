"""Long calls: run on one worker thread so that Ctrl-C reaches Python while the C library works,
report progress (a callback, or a tqdm bar when tqdm is installed), and cancel through the
library's cancel token (the session's, or the progress callback's return value).
"""
import concurrent.futures
import threading

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


class Progress:
    """What one long call reports into: the user's callback ``fn(stage, fraction) -> cancel?``,
    a tqdm bar (progress=True and tqdm installed), or nothing (False, or no tqdm).

    The library calls ``sink`` from whichever of its threads polls, never two at once."""

    def __init__(self, progress, label):
        self.fn = progress if callable(progress) else None
        self.bar = None
        self.stage = None
        if progress is True and self.fn is None:
            tqdm = _tqdm()
            if tqdm is not None:
                self.bar = tqdm(total=1000, desc=label, leave=False,
                                bar_format='{desc}: {percentage:3.0f}%|{bar}| {elapsed}')
        self.cancel_flag = threading.Event()
        self.error = None

    def sink(self, stage, fraction):
        """Returns True to cancel."""
        if self.cancel_flag.is_set():
            return True
        try:
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
