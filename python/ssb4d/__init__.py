"""ssb4d: single-side-band (SSB) direct ptychography of 4D-STEM data, from Python.

The C library (libssb4d) does the work; this package calls it through ctypes and returns numpy
arrays and small dataclasses whose field names carry their units (``C10_nm``, ``phi12_deg``,
``scan_step_A``). Errors from the library raise :class:`SSB4DError` subclasses carrying its
one-line message. Long calls show progress (a tqdm bar when tqdm is installed, or your callback)
and stop on Ctrl-C, leaving the session usable.

>>> import ssb4d
>>> with ssb4d.open('scan.qem') as s:          # or ssb4d.open_array(counts, kv=300, ...)
...     fit = s.fit()
...     s.save_phase('phase.tiff')
>>> fit.C10_nm, fit.C12_nm, fit.phi12_deg

See docs/python.md.
"""
try:
    import numpy as _numpy  # noqa: F401  (every array in and out is one)
except ImportError as _e:  # before anything else, so that this is the error a user sees
    import sys as _sys
    raise ImportError('ssb4d needs numpy, which this Python (%s) cannot import (%s): install it into this '
                      'environment with `%s -m pip install numpy` (or `conda install numpy`; for Debian\'s '
                      '/usr/bin/python3, `apt-get install python3-numpy`)' % (_sys.executable, _e, _sys.executable),
                      name='numpy') from _e
from . import _lib
from .errors import (Cancelled, FileError, FormatError, InternalError, InvalidArgument, NotFound, OutOfMemory,
                     SSB4DError)
from .results import (Calibration, FitResult, Geometry, ImportReport, MemoryReport, Plan, Reconstruction,
                      RefineResult, RegionFit, SimInfo, TiltResult, Values)
from .session import Session, VirtualImages, open, open_array
from .tools import Simulation, builtin, encode, plan, simulate, simulate_array, values, virtual_images
from .view import Viewer

__version__ = _lib.VERSION
library_path = _lib.LIBRARY_PATH


def wavelength_A(kv: float) -> float:
    """Relativistic electron wavelength in Å at an accelerating voltage in kV."""
    return _lib.lib.ssb4d_wavelength_A(float(kv))


__all__ = ['Session', 'open', 'open_array', 'builtin', 'encode', 'plan', 'simulate', 'simulate_array', 'values',
           'wavelength_A', 'Viewer', 'Simulation', 'Calibration', 'FitResult', 'Geometry', 'ImportReport',
           'MemoryReport', 'Plan', 'Reconstruction', 'RefineResult', 'RegionFit', 'SimInfo', 'TiltResult', 'Values', 'SSB4DError',
           'Cancelled', 'FileError', 'FormatError', 'InternalError', 'InvalidArgument', 'NotFound', 'OutOfMemory']
