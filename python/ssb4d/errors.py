"""Exceptions: one per ssb4d_status, each carrying the C library's one-line message.

``SSB4DError`` is the base; the others also derive from the matching built-in exception, so
``except FileNotFoundError``-style code keeps working (an unreadable file is an ``IOError``
subclass, an absurd argument a ``ValueError`` subclass, an over-budget job a ``MemoryError``).
"""


class SSB4DError(Exception):
    """A call into libssb4d failed. ``status`` is the C status code, ``str(e)`` its message."""
    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgument(SSB4DError, ValueError):
    """SSB4D_EINVAL: a bad argument or absurd parameter."""
    status = 1


class OutOfMemory(SSB4DError, MemoryError):
    """SSB4D_ENOMEM: an allocation failed, or the job does not fit the memory budget."""
    status = 2


class FileError(SSB4DError, OSError):
    """SSB4D_EIO: a file could not be read or written."""
    status = 3


class FormatError(SSB4DError, ValueError):
    """SSB4D_EFORMAT: a file is malformed, or of the wrong dtype or shape."""
    status = 4


class NotFound(SSB4DError, LookupError):
    """SSB4D_ENOTFOUND: something expected in the data was not found (the bright-field disk)."""
    status = 5


class InternalError(SSB4DError, RuntimeError):
    """SSB4D_EINTERNAL: a bug in ssb4d; please report it with the message."""
    status = 6


class Cancelled(SSB4DError):
    """SSB4D_ECANCELLED: the call was cancelled (a progress callback returned True, or
    ``Session.cancel``). What it was making is dropped; the session is as before the call."""
    status = 7


_BY_STATUS = {c.status: c for c in (InvalidArgument, OutOfMemory, FileError, FormatError, NotFound,
                                     InternalError, Cancelled)}


def _raise_for(status, message):
    raise _BY_STATUS.get(status, SSB4DError)(message, status)
