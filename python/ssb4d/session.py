"""The session: one live acquisition (a file or a numpy array) that you calibrate, fit, preview,
reconstruct and save, over the C library's session handle (include/ssb4d.h)."""
import ctypes
import math
import os
import tempfile
import warnings
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib, _params, _run
from .errors import InvalidArgument
from .results import (Calibration, FitResult, MemoryReport, Plan, Reconstruction, RefineResult, RegionFit, Stage,
                      TiltResult,
                      aberrations_dict, aberrations_struct)

lib = _lib.lib
_BACKENDS = {'auto': 0, 'cpu': 1, 'cuda': 2}
_NAN = float('nan')
SKEW_SETTLED = 1.5  # SSB4D_FIT_SKEW_SETTLED (include/ssb4d.h): the |skewness| that settles the 180 deg branch


def _size(memory, name='memory'):
    """A budget: None (the available RAM), bytes as an int, or a string like '16G'."""
    if memory is None:
        return 0
    if isinstance(memory, str):
        out = ctypes.c_size_t()
        if lib.ssb4d_parse_size(memory.encode(), ctypes.byref(out)):
            raise InvalidArgument("%s=%r is not a size like '16G', '512M' or a number of bytes" % (name, memory))
        return out.value
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 0:
        raise InvalidArgument('%s must be a size string or a non-negative number of bytes, not %r' % (name, memory))
    return memory


def _pair(name, v):
    if v is None:
        return None
    if isinstance(v, (int, float)):
        return (float(v), float(v))
    v = tuple(float(x) for x in v)
    if len(v) != 2:
        raise InvalidArgument('%s takes one number or a (row, col) pair, not %r' % (name, v))
    return v


@dataclass
class VirtualImages:
    """The virtual detector images of a session (docs/virtual.md), float64 arrays of the scan's
    shape: bf and adf (counts, or the data's units), com_x and com_y (mrad, scan frame: x along the
    scan rows, y along the scan columns), idpc (rad, mean 0; ``idpc_unit`` says 'mrad px' when
    kV or the scan step is unknown); and what was used: the angles (mrad), the pixel counts, the
    centre (px), sampling (mrad/px), rotation (deg) and flip."""
    bf: np.ndarray
    adf: np.ndarray
    com_x: np.ndarray
    com_y: np.ndarray
    idpc: np.ndarray
    bf_mrad: Tuple[float, float]
    adf_mrad: Tuple[float, float]
    bf_default: bool
    detector_max_mrad: float
    n_bf_pixels: int
    n_adf_pixels: int
    n_com_pixels: int
    centre_px: Tuple[float, float]
    det_sampling_mrad: Tuple[float, float]
    rotation_deg: float
    flip: bool
    idpc_unit: str
    seconds: float

    def as_dict(self) -> Dict[str, np.ndarray]:
        """The five images by the names ``ssb4d virtual`` writes them under."""
        return {'virtual_bf': self.bf, 'virtual_adf': self.adf, 'com_x': self.com_x, 'com_y': self.com_y,
                'idpc': self.idpc}


def _virtual_params(bf_outer_mrad, bf_inner_mrad, adf):
    p = _lib.VirtualParams()
    lib.ssb4d_virtual_params_default(ctypes.byref(p))
    if bf_outer_mrad is not None:
        p.bf_outer_mrad = float(bf_outer_mrad)
    if bf_inner_mrad is not None:
        p.bf_inner_mrad = float(bf_inner_mrad)
    if adf is not None:
        try:
            inner, outer = adf
        except (TypeError, ValueError):
            raise InvalidArgument('adf takes (inner, outer) in mrad, not %r' % (adf,)) from None
        p.adf_inner_mrad = _NAN if inner is None else float(inner)
        p.adf_outer_mrad = _NAN if outer is None else float(outer)
    return p


def _virtual_result(v):
    ny, nx = v.scan_shape[0], v.scan_shape[1]

    def arr(ptr):
        return np.ctypeslib.as_array(ptr, shape=(ny, nx)).copy()

    return VirtualImages(bf=arr(v.bf), adf=arr(v.adf), com_x=arr(v.com_x), com_y=arr(v.com_y), idpc=arr(v.idpc),
                         bf_mrad=(v.bf_inner_mrad, v.bf_outer_mrad), adf_mrad=(v.adf_inner_mrad, v.adf_outer_mrad),
                         bf_default=bool(v.bf_default), detector_max_mrad=v.detector_max_mrad,
                         n_bf_pixels=v.n_bf_pixels, n_adf_pixels=v.n_adf_pixels, n_com_pixels=v.n_com_pixels,
                         centre_px=tuple(v.centre_px), det_sampling_mrad=tuple(v.det_sampling_mrad),
                         rotation_deg=v.rotation_deg, flip=bool(v.flip), idpc_unit=_lib.s(v.idpc_unit),
                         seconds=v.seconds)


class _Holder:
    current = None


class Session:
    """One acquisition, live: calibrate → fit → previews, the object, regions → save.

    Make one with :func:`ssb4d.open` (a file) or :func:`ssb4d.open_array` (a numpy array); close
    it with :meth:`close` or a ``with`` block. Long calls take ``progress`` (True: a tqdm bar when
    tqdm is installed; a callable ``fn(stage, fraction)`` that returns True to cancel; False) and
    stop on Ctrl-C (KeyboardInterrupt), leaving the session as it was before the call.
    A session is used by one thread at a time; :meth:`cancel` may be called from any thread.
    """

    def __init__(self, _handle, *, source, values, array=None, microscope=None):
        self._s = _handle
        self._source = source            # the path, or None for an array
        self._array = array              # kept alive: the library reads it until close
        self._values = values            # ssb4d.Values the session started from
        self._microscope = microscope or {}
        self._fit = None

    # -- plumbing -------------------------------------------------------------------------
    @staticmethod
    def _opts(micro, memory, threads, backend, hot_pixels, region, holder, device_memory=None):
        o = _lib.SessionOpts()
        lib.ssb4d_session_opts_default(ctypes.byref(o))
        c = o.calib
        c.kv = micro['kv']
        c.semiangle_mrad = micro['semiangle_mrad']
        c.scan_step_A[0], c.scan_step_A[1] = micro['scan_step_A']
        ds = micro.get('det_sampling_mrad') or (0.0, 0.0)
        c.det_sampling_mrad[0], c.det_sampling_mrad[1] = ds
        cp = micro.get('centre_px') or (_NAN, _NAN)
        c.centre_px[0], c.centre_px[1] = cp
        rot = micro.get('rotation_deg')
        c.rotation_deg = _NAN if rot is None else rot
        flip = micro.get('flip')
        c.flip = -1 if flip is None else (1 if flip else 0)
        c.bf_radius_px = micro.get('bf_radius_px') or 0.0
        c.edge_pixel_S = micro.get('pixel_model_S') or 0  # the detector's pixel model, stated (SPEC §4)
        c.hot_pixels = 1 if hot_pixels else 0
        c.threads = threads
        o.rotation_measured = 1 if (micro.get('rotation_measured') and rot is not None) else 0
        o.rotation_from = (micro.get('rotation_given_by') or '').encode()[:31]  # recorded by a save
        sigma = micro.get('rotation_sigma_deg')
        o.rotation_sigma_deg = _NAN if sigma is None or not o.rotation_measured else sigma
        o.memory_bytes = _size(memory)
        o.threads = threads
        if backend not in _BACKENDS:
            raise InvalidArgument("backend must be 'auto', 'cpu' or 'cuda', not %r" % (backend,))
        o.backend = _BACKENDS[backend]
        o.device_memory_bytes = _size(device_memory, 'device_memory')
        cb = _run.c_callback(holder)
        o.progress = cb
        if region is not None:
            (r0, r1), (c0, c1) = region
            o.region[:] = [r0, r1, c0, c1]
        return o, cb

    def _handle(self):
        if not self._s:
            raise InvalidArgument('the session is closed')
        return self._s

    def _call(self, fn, progress, label):
        h = self._handle()
        p = _run.Progress(progress, label)
        self._holder.current = p
        try:
            return _run.call(fn, p, cancel=lambda: lib.ssb4d_session_cancel(h))
        finally:
            self._holder.current = None

    def _status(self, cfn, *args, progress=False, label=''):
        err = _lib.Err()
        st = self._call(lambda: cfn(*args, ctypes.byref(err)), progress, label)
        _lib.check(st, err)

    # -- life -------------------------------------------------------------------------------
    def close(self):
        """Frees everything the session holds (G, the data mapping). Safe to call twice."""
        if getattr(self, '_s', None):
            lib.ssb4d_session_close(self._s)
            self._s = None
            self._array = None
        tmp = getattr(self, '_tmpdir', None)
        if tmp is not None:  # the .qem an import made for this session
            tmp.cleanup()
            self._tmpdir = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def cancel(self):
        """Ends the running call with :class:`ssb4d.Cancelled` (any thread)."""
        if self._s:
            lib.ssb4d_session_cancel(self._s)

    def __repr__(self):
        if not self._s:
            return '<ssb4d.Session closed>'
        return '<ssb4d.Session %s shape=%s backend=%s>' % (self._source or 'array', self.shape, self.backend)

    # -- what it is -------------------------------------------------------------------------
    @property
    def shape(self) -> Tuple[int, int, int, int]:
        """(scan rows, scan cols, detector rows, detector cols)."""
        sh = (ctypes.c_size_t * 4)()
        lib.ssb4d_session_shape(self._handle(), sh)
        return tuple(sh)

    @property
    def backend(self) -> str:
        """Where the heavy passes run: 'cpu' or 'cuda'."""
        return lib.ssb4d_session_backend(self._handle()).decode()

    @property
    def values(self):
        """What the file (its .qem record, sidecar, calibration file) stated, before keywords."""
        return self._values

    @property
    def truth(self) -> Optional[Dict[str, float]]:
        """A simulation's true aberrations (from its sidecar), else None."""
        if getattr(self, '_truth', None):
            return dict(self._truth)
        v = self._values
        return v.aberrations if v is not None and v.aberrations_from.startswith('simulator truth') else None

    # -- calibration --------------------------------------------------------------------------
    def calibrate(self, progress=True) -> Calibration:
        """Finds the BF disk, detector sampling, hot pixels and (unless given) the rotation, and
        plans memory (SPEC §4, §9). Other calls do this when needed. Warns (RuntimeWarning, the
        command line's words) when the measured sampling is more than 3 sigma from the stated one."""
        self._status(lib.ssb4d_session_calibrate, self._handle(), progress=progress, label='calibrate')
        c = self.calibration
        if c.sampling_warning:
            warnings.warn('ssb4d calibrate: sampling %s: %s' % (c.sampling_report, c.sampling_warning), RuntimeWarning,
                          stacklevel=2)
        return c

    @property
    def calibration(self) -> Optional[Calibration]:
        """The calibration, or None before :meth:`calibrate`."""
        c = lib.ssb4d_session_calibration(self._handle())
        return Calibration._from(c.contents) if c else None

    @property
    def plan(self) -> Optional[Plan]:
        """The memory plan made at calibration (None before)."""
        p = lib.ssb4d_session_plan(self._handle())
        return Plan._from(p.contents) if p else None

    def build(self, progress=True):
        """Builds G now (other calls build it on first need)."""
        self._status(lib.ssb4d_session_build, self._handle(), progress=progress, label='G build')

    def G_info(self) -> Dict[str, int]:
        """How G is held: bytes, BF pixels, planes stored and resident (0 before it is built)."""
        v = [ctypes.c_size_t() for _ in range(4)]
        lib.ssb4d_session_G_info(self._handle(), *[ctypes.byref(x) for x in v])
        return dict(zip(('bytes', 'n_bf', 'n_stored', 'n_resident'), (x.value for x in v)))

    # -- the current parameters ---------------------------------------------------------------
    @property
    def aberrations(self) -> Dict[str, float]:
        """The current aberrations: {'C10_nm': .., 'C12_nm': .., 'phi12_deg': .., ...}."""
        ab = _lib.Aberrations()
        lib.ssb4d_session_get(self._handle(), ctypes.byref(ab), None, None)
        return aberrations_dict(ab)

    def set_aberrations(self, values: Optional[Dict[str, float]] = None, *, tilt_mrad=None, thickness_nm=None,
                        **kw):
        """Sets the current aberrations: those named (``C10_nm=-10, phi12_deg=30``, or a dict) change,
        the others keep their values. ``tilt_mrad`` and ``thickness_nm`` set the thick model."""
        cur = _lib.Aberrations()
        th = _lib.Thick()
        lib.ssb4d_session_get(self._handle(), ctypes.byref(cur), ctypes.byref(th), None)
        d = dict(values or {})
        d.update(kw)
        ab = aberrations_struct(d, cur)
        for name, value in (('tilt_mrad', tilt_mrad), ('thickness_nm', thickness_nm)):
            if value is not None:
                _params.set_param(_params.OP_THICK, th, name, value)
        lib.ssb4d_session_set(self._handle(), ctypes.byref(ab), ctypes.byref(th))

    @property
    def rotation_deg(self) -> float:
        """The scan–detector rotation in use (degrees)."""
        g = _lib.Geometry()
        lib.ssb4d_session_get(self._handle(), None, None, ctypes.byref(g))
        return g.rotation_deg

    def set_rotation(self, deg: float):
        """Holds the rotation at ``deg`` (later fits keep it, as if given). Calibrates first."""
        self._status(lib.ssb4d_session_set_rotation, self._handle(), ctypes.c_double(deg), label='calibrate')

    # -- fits -----------------------------------------------------------------------------------
    def _fit_params(self, start=None, lock=(), box=None, **table):
        p = _lib.FitParams()
        lib.ssb4d_fit_params_default(ctypes.byref(p))
        for name, value in table.items():  # objective, trials, batch, seed, fit_radius, ...
            if name not in _params.TABLE[_params.OP_FIT]:
                raise TypeError('fit() got an unexpected keyword argument %r' % (name,))
            if value is not None:
                _params.set_param(_params.OP_FIT, p, name, value)
        names = ('C10_nm', 'C12_nm', 'phi12_deg')
        if box is not None:
            for j, n in enumerate(names):
                if n in box:
                    p.lo[j], p.hi[j] = box[n]
        if start is not None:
            st = start if isinstance(start, dict) else dict(zip(names, start))
            for j, n in enumerate(names):
                if n in st:
                    p.start[j] = float(st[n])
            p.start_given = 1
        for n in lock:
            if n not in names:
                raise InvalidArgument('lock takes C10_nm, C12_nm, phi12_deg, not %r' % (n,))
            p.locked[names.index(n)] = 1
            p.start_given = 1
        for j, n in enumerate(names):
            if p.start_given and not (p.lo[j] <= p.start[j] <= p.hi[j]):
                raise InvalidArgument('start %s = %g is outside the box [%g, %g]' % (n, p.start[j], p.lo[j], p.hi[j]))
        return p

    def fit(self, *, progress=True, **params) -> FitResult:
        """The standard fit of C10, C12 and φ12 (docs/fit.md) over the whole field; the session's
        parameters become the fit's. The same bits as ``ssb4d fit`` with the same values
        (trace_sha256). Keywords: start (C10_nm, C12_nm, phi12_deg), lock (names held at start),
        box ({'C10_nm': (lo, hi), ...}) and, from the library's parameter table:
{table}
        """
        p = self._fit_params(**params)
        r = _lib.FitResult()
        err = _lib.Err()
        st = self._call(lambda: lib.ssb4d_session_fit(self._handle(), ctypes.byref(p), ctypes.byref(r),
                                                      ctypes.byref(err)), progress, 'fit')
        try:
            _lib.check(st, err)
            self._fit = FitResult._from(r)
        finally:
            lib.ssb4d_fit_result_free(ctypes.byref(r))
        return self._fit

    def fit_tilt(self, *, progress=True) -> TiltResult:
        """The thick-sample (tilt) fit from the last standard fit (SPEC §6.2); the session's
        parameters become its result."""
        t = _lib.TiltResult()
        self._status(lib.ssb4d_session_fit_tilt, self._handle(), ctypes.byref(t), progress=progress,
                     label='tilt fit')
        return TiltResult._from(t)

    def fit_region(self, rows: Tuple[int, int], cols: Tuple[int, int], *, progress=True, **params) -> FitResult:
        """Refits scan rows [r0, r1) x cols [c0, c1) (at least 32x32) with the full field's
        calibration. The session's parameters are unchanged (:meth:`apply` makes them current)."""
        rect = (ctypes.c_size_t * 4)(rows[0], rows[1], cols[0], cols[1])
        p = self._fit_params(**params)
        r = _lib.FitResult()
        err = _lib.Err()
        st = self._call(lambda: lib.ssb4d_session_fit_region(self._handle(), rect, ctypes.byref(p), ctypes.byref(r),
                                                             ctypes.byref(err)), progress, 'region fit')
        try:
            _lib.check(st, err)
            return FitResult._from(r)
        finally:
            lib.ssb4d_fit_result_free(ctypes.byref(r))

    def fit_regions(self, grid: Tuple[int, int] = (4, 4), *, rotation_per_region: bool = False, progress=True,
                    **params):
        """Refits a grid of rows x cols equal regions (the last row and column take the remainder):
        a list of :class:`RegionFit`, row-major. The aberration map.

        As ``ssb4d fit-regions`` (docs/fit.md "The branch from the thinnest region"): when the
        rotation is not given, the region that settles the 180° branch most clearly (the largest
        |skewness| among the confident fits) sets the rotation and handedness, every other region
        is refit with them held, and the session holds them from then on (for the field too, as
        :meth:`set_rotation` would). Each :class:`RegionFit`'s ``rotation_set_by`` is that
        region's index, None when no region settles it (a RuntimeWarning; each region's
        ``confident`` and ``warning`` say why) or there is nothing to settle (the rotation given, one
        region, branch_check off).
        ``rotation_per_region=True``: each region keeps the rotation its own fit found."""
        rows, cols = grid
        n = rows * cols
        if not (rows >= 1 and cols >= 1 and n <= 4096):
            raise InvalidArgument('grid must be (rows, cols) with 1..4096 regions, not %r' % (grid,))
        p = self._fit_params(**params)
        res = (_lib.FitResult * n)()
        rects = (ctypes.c_size_t * (4 * n))()
        branch = ctypes.c_size_t(n)
        err = _lib.Err()
        st = self._call(lambda: lib.ssb4d_session_fit_regions(self._handle(), rows, cols, ctypes.byref(p),
                                                              1 if rotation_per_region else 0, res, rects,
                                                              ctypes.byref(branch), ctypes.byref(err)),
                        progress, 'regions')
        try:
            _lib.check(st, err)
            b = branch.value if branch.value < n else None
            if b is None and not rotation_per_region and lib.ssb4d_session_branch_to_settle(self._handle(),
                                                                                            ctypes.byref(p), n):
                warnings.warn('no region settles the 180 deg branch (|skewness| >= %.1f on none): each keeps '
                              'the rotation its own fit found; give the rotation (set_rotation, or '
                              'rotation_from a thin area\'s fit)' % SKEW_SETTLED, RuntimeWarning, stacklevel=2)
            return [RegionFit((rects[4 * i], rects[4 * i + 1]), (rects[4 * i + 2], rects[4 * i + 3]),
                              FitResult._from(res[i]), b) for i in range(n)]
        finally:
            if not st:
                for i in range(n):
                    lib.ssb4d_fit_result_free(ctypes.byref(res[i]))

    def refine(self, region=None, slices: int = 0, thickness_nm: Optional[float] = None,
               thickness_range_nm: Tuple[float, float] = (1, 30), iterations: int = 30, *, batch: int = 0,
               loss: str = 'poisson', aberrations: bool = True, tilt: bool = True, bin: int = 0, seed: int = 1,
               progress=True, **table) -> RefineResult:
        """Multislice refinement (SPEC §13, docs/refine.md), seeded by the session's parameters: the
        last fit, a loaded calibration file's fit or aberrations, or (with neither) the standard fit,
        run first. region: ((r0, r1), (c0, c1)) or (r0, r1, c0, c1) scan rows/cols, half-open (None:
        the session's region, or the whole scan); slices 0: about one per 1.5 nm (at most 64); thickness_nm None:
        the middle of thickness_range_nm (lo == hi holds it). On success the session's aberrations,
        tilt and thickness become the refined ones, and :meth:`save_calibration` records the
        refinement ("refine" section). The same numbers as ``ssb4d refine --json`` on the same data
        and values (:meth:`RefineResult.record`). Further keywords from the parameter table:
{table}
        """
        p = _lib.RefineParams()
        lib.ssb4d_refine_params_default(ctypes.byref(p))
        given = dict(table, iterations=iterations, batch=batch or None, loss=loss, refine_aberrations=aberrations,
                     refine_tilt=tilt, bin=bin or None, seed=seed, slices=slices or None, thickness_nm=thickness_nm)
        for name, value in given.items():
            if name not in _params.TABLE[_params.OP_REFINE]:
                raise TypeError('refine() got an unexpected keyword argument %r' % (name,))
            if value is not None:
                _params.set_param(_params.OP_REFINE, p, name, value)
        try:
            lo, hi = (float(v) for v in thickness_range_nm)
        except (TypeError, ValueError):
            raise InvalidArgument('thickness_range_nm must be (lo, hi) in nm, not %r' % (thickness_range_nm,))
        if not (0 < lo <= hi <= 1e4):
            raise InvalidArgument('thickness_range_nm must be (lo, hi) with 0 < lo <= hi <= 10000 nm, not %r'
                                  % (thickness_range_nm,))
        p.thickness_range_nm[0], p.thickness_range_nm[1] = lo, hi
        p.refine_thickness = int(p.refine_thickness and lo < hi)
        if thickness_nm is not None and not (lo <= p.thickness_nm <= hi):
            raise InvalidArgument('thickness_nm %g lies outside thickness_range_nm %r' % (p.thickness_nm,
                                                                                        (lo, hi)))
        rect = None
        if region is not None:
            flat = [int(v) for pair in region for v in (pair if isinstance(pair, (tuple, list)) else (pair,))]
            if len(flat) != 4 or min(flat) < 0 or not (flat[0] < flat[1] and flat[2] < flat[3]):
                raise InvalidArgument('region must be ((r0, r1), (c0, c1)) with r0 < r1 and c0 < c1, not %r'
                                      % (region,))
            rect = (ctypes.c_size_t * 4)(*flat)
        r = _lib.RefineResult()
        err = _lib.Err()
        st = self._call(lambda: lib.ssb4d_session_refine(self._handle(), rect, ctypes.byref(p), ctypes.byref(r),
                                                         ctypes.byref(err)), progress, 'refine')
        try:
            _lib.check(st, err)
            return RefineResult._from(r)
        finally:
            lib.ssb4d_refine_result_free(ctypes.byref(r))

    def apply(self, result: FitResult):
        """Makes a fit's result (of the field or a region) the current parameters."""
        if not isinstance(result, FitResult) or result._raw is None:
            raise InvalidArgument('apply takes a FitResult of this package')
        lib.ssb4d_session_apply(self._handle(), ctypes.byref(result._raw))

    # -- images ---------------------------------------------------------------------------------
    def virtual_images(self, *, bf_outer_mrad=None, bf_inner_mrad=None, adf=None, progress=False) -> VirtualImages:
        """The virtual BF, ADF, centre-of-mass and iDPC images of the session's field from one pass
        over its frames (docs/virtual.md), under its calibration (calibrating first) with its
        current rotation and flip: what ``ssb4d virtual`` writes, bit for bit. bf_outer_mrad None:
        the calibration's BF disk; adf=(inner, outer) in mrad, None (or None in either place): the
        defaults (1.5x the BF angle, the detector's farthest pixel)."""
        p = _virtual_params(bf_outer_mrad, bf_inner_mrad, adf)
        v = _lib.VirtualImages()
        self._status(lib.ssb4d_session_virtual, self._handle(), ctypes.byref(p), ctypes.byref(v), progress=progress,
                     label='virtual images')
        try:
            return _virtual_result(v)
        finally:
            lib.ssb4d_virtual_free(ctypes.byref(v))

    def image_shape(self, upsample: int = 1) -> Tuple[int, int]:
        """The phase image's shape at an upsampling (0: automatic). Calibrates first."""
        ny, nx = ctypes.c_size_t(), ctypes.c_size_t()
        self._status(lib.ssb4d_session_image_shape, self._handle(), int(upsample), ctypes.byref(ny),
                     ctypes.byref(nx), label='calibrate')
        return ny.value, nx.value

    def preview(self, *, upsample: int = 1, subset: int = 0, estimator: str = 'object', rotation_deg=None,
                loss: bool = False, progress=False, **aberrations):
        """One preview (what a viewer draws while a slider moves): the phase (float32, rad) at the
        current parameters, or at those given (``C10_nm=...``; the others current). subset n: every
        ⌊N_bf/n⌋-th BF pixel. loss=True returns (phase, loss) (want_loss below). From the library's
        parameter table:
{table}
        """
        q = _lib.PreviewReq()
        lib.ssb4d_preview_req_default(ctypes.byref(q))
        for name, value in (('estimator', estimator), ('upsample', upsample), ('subset', subset),
                            ('rotation_deg', rotation_deg), ('want_loss', loss)):
            if value is not None:
                _params.set_param(_params.OP_PREVIEW, q, name, value)
        ab = None
        if aberrations:
            cur = _lib.Aberrations()
            lib.ssb4d_session_get(self._handle(), ctypes.byref(cur), None, None)
            ab = aberrations_struct(aberrations, cur)
            q.ab = ctypes.pointer(ab)
        ny, nx = self.image_shape(upsample)
        out = np.empty((ny, nx), np.float32)
        lv = ctypes.c_double(_NAN)
        self._status(lib.ssb4d_session_preview, self._handle(), ctypes.byref(q), out.ctypes.data_as(ctypes.c_void_p),
                     ctypes.byref(lv), progress=progress, label='preview')
        return (out, lv.value) if loss else out

    def reconstruct(self, upsample: int = 1, *, progress=True) -> Reconstruction:
        """The complex object (complex64), its phase (float32, rad) and the exact loss at the current
        parameters: exactly what ``ssb4d fit`` writes as object.npy and phase.tiff. upsample 0:
        automatic."""
        ny, nx = self.image_shape(upsample)
        obj = np.empty((ny, nx), np.complex64)
        ph = np.empty((ny, nx), np.float32)
        lv = ctypes.c_double(_NAN)
        h = self._handle()
        vp = ctypes.c_void_p
        if upsample == 1:  # one pass: the object and the loss (ssb4d_session_release)
            self._status(lib.ssb4d_session_release, h, obj.ctypes.data_as(vp), ph.ctypes.data_as(vp),
                         ctypes.byref(lv), progress=progress, label='reconstruct')
        else:
            self._status(lib.ssb4d_session_object, h, int(upsample), obj.ctypes.data_as(vp), ph.ctypes.data_as(vp),
                         progress=progress, label='reconstruct')
            self._status(lib.ssb4d_session_loss, h, ctypes.byref(lv), progress=progress, label='loss')
        up = ny // (self._region_rows() or 1)
        g = _lib.Geometry()
        lib.ssb4d_session_get(h, None, None, ctypes.byref(g))
        return Reconstruction(ph, obj, lv.value, up, (g.scan_step_A[0] / up, g.scan_step_A[1] / up))

    def _region_rows(self):
        return self._rows if getattr(self, '_rows', None) else self.shape[0]

    def object(self, upsample: int = 1, *, progress=True):
        """The complex object (complex64) at the current parameters."""
        ny, nx = self.image_shape(upsample)
        obj = np.empty((ny, nx), np.complex64)
        self._status(lib.ssb4d_session_object, self._handle(), int(upsample), obj.ctypes.data_as(ctypes.c_void_p),
                     None, progress=progress, label='object')
        return obj

    def phase(self, upsample: int = 1, *, progress=True):
        """The phase image (float32, rad) at the current parameters (the object's argument)."""
        ny, nx = self.image_shape(upsample)
        ph = np.empty((ny, nx), np.float32)
        self._status(lib.ssb4d_session_object, self._handle(), int(upsample), None,
                     ph.ctypes.data_as(ctypes.c_void_p), progress=progress, label='phase')
        return ph

    def loss(self, *, progress=True) -> float:
        """The exact loss (SPEC §5.4) over all BF pixels at the current parameters."""
        lv = ctypes.c_double()
        self._status(lib.ssb4d_session_loss, self._handle(), ctypes.byref(lv), progress=progress, label='loss')
        return lv.value

    def save_phase(self, path: Union[str, os.PathLike], upsample: int = 1, *, image=None, progress=True):
        """Writes the phase image as .tiff (float32 with its sampling), .png (with a scale bar and a
        colour bar in rad) or .npy, atomically; ``image`` (a float32 array) instead of the current
        phase. The same bytes as ``ssb4d fit``'s phase.tiff / phase.png."""
        if image is None:
            image = self.phase(upsample, progress=progress)
            rows = self._region_rows()
            up = image.shape[0] // rows if rows else 1
        else:
            image = np.asarray(image)
            if image.ndim != 2 or image.dtype != np.float32:
                raise InvalidArgument('image must be a 2-D float32 array, not %s %s' % (image.ndim, image.dtype))
            up = max(1, image.shape[0] // self._region_rows())
        image = np.ascontiguousarray(image)
        g = _lib.Geometry()
        lib.ssb4d_session_get(self._handle(), None, None, ctypes.byref(g))
        pix = (ctypes.c_double * 2)(g.scan_step_A[0] / up, g.scan_step_A[1] / up)
        err = _lib.Err()
        _lib.check(lib.ssb4d_image_save(_lib.enc(os.fspath(path)), image.ctypes.data_as(ctypes.c_void_p),
                                        image.shape[0], image.shape[1], pix, b'rad', ctypes.byref(err)), err)

    def _repr_png_(self):
        """Jupyter shows a session as its phase image at the current parameters."""
        if not self._s:
            return None
        with tempfile.TemporaryDirectory(prefix='ssb4d-') as d:
            path = os.path.join(d, 'phase.png')
            self.save_phase(path, progress=False)
            with builtins_open(path, 'rb') as f:
                return f.read()

    # -- calibration files, memory ----------------------------------------------------------------
    def save_calibration(self, path: Union[str, os.PathLike], force: bool = False):
        """Writes the calibration and current parameters as a calibration file (docs/calibration-file.md)
        that ``ssb4d reconstruct --calibration`` reads; refuses an existing path unless force."""
        self._status(lib.ssb4d_session_save_calibration, self._handle(), _lib.enc(os.fspath(path)),
                     1 if force else 0, label='save')

    def load_calibration(self, path: Union[str, os.PathLike], *, progress=True):
        """Reads a calibration file: its microscope, geometry, rotation and aberrations become the
        session's (it recalibrates)."""
        self._status(lib.ssb4d_session_load_calibration, self._handle(), _lib.enc(os.fspath(path)),
                     progress=progress, label='calibrate')

    def memory_report(self) -> MemoryReport:
        """The memory, stage by stage: tracked peak and after, and the process footprint."""
        m = lib.ssb4d_session_mem(self._handle())
        stages = []
        for i in range(lib.ssb4d_mem_stage_count(m)):
            r = lib.ssb4d_mem_stage(m, i).contents
            stages.append(Stage(_lib.s(r.name), r.peak_bytes, r.after_bytes, r.cache_bytes, r.rss_peak_bytes,
                                r.seconds, r.device_peak_bytes))
        return MemoryReport(lib.ssb4d_mem_limit(m), lib.ssb4d_mem_peak(m), stages)

    # -- the viewer ---------------------------------------------------------------------------------
    def view(self, port: int = 0, *, width='100%', height=720, fit_on_start=None):
        """Starts ``ssb4d view`` on this session's data at its current parameters (a second process on
        127.0.0.1; an array is written to a temporary .npy first) and returns a :class:`Viewer`, which
        Jupyter shows as an inline frame. ``Viewer.stop()`` ends it."""
        from .view import start_viewer
        return start_viewer(self, port=port, width=width, height=height, fit_on_start=fit_on_start)


def _microscope(values, kw):
    """The layered values: the file's, then the keywords given."""
    m = {}
    if values is not None:
        m.update(kv=values.kv, semiangle_mrad=values.semiangle_mrad, scan_step_A=values.scan_step_A,
                 det_sampling_mrad=values.det_sampling_mrad, centre_px=values.centre_px,
                 rotation_deg=values.rotation_deg, rotation_measured=values.rotation_measured,
                 rotation_sigma_deg=values._raw.rotation_sigma_deg if values._raw is not None else None,
                 rotation_given_by=values.rotation_from)
        if values._raw is not None and values._raw.pixel_model_S > 0:  # the sidecar's det_oversample
            m['pixel_model_S'] = values._raw.pixel_model_S
        if values._raw is not None and not math.isnan(values._raw.bf_radius_px):  # a calibration file's
            m['bf_radius_px'] = values._raw.bf_radius_px
        if values.flip is not None:
            m['flip'] = values.flip
    for k in ('kv', 'semiangle_mrad', 'bf_radius_px'):
        if kw.get(k) is not None:
            m[k] = float(kw[k])
    measure = isinstance(kw.get('det_sampling_mrad'), str) and kw['det_sampling_mrad'] == 'measure'
    if measure:  # SPEC §4: the measured sampling, whatever the files state (the CLI's --det-sampling measure)
        m['det_sampling_mrad'] = None
    for k in ('scan_step_A', 'det_sampling_mrad', 'centre_px'):
        if kw.get(k) is not None and not (k == 'det_sampling_mrad' and measure):
            m[k] = _pair(k, kw[k])
    if kw.get('rotation_deg') is not None:
        m['rotation_deg'] = float(kw['rotation_deg'])
        m['rotation_measured'] = False
        m['rotation_given_by'] = 'rotation_deg'
    if kw.get('flip') is not None:
        m['flip'] = bool(kw['flip'])
    if kw.get('rotation_from') is not None:
        _rotation_from(kw['rotation_from'], m, kw)
    need = (('kv', 'the accelerating voltage is unknown: give kv= (kV)'),
            ('semiangle_mrad', 'the convergence semi-angle is unknown: give semiangle_mrad= (mrad)'),
            ('scan_step_A', 'the scan step is unknown: give scan_step_A= (Angstrom)'))
    for k, msg in need:
        if m.get(k) is None:
            raise InvalidArgument(msg)
    return m


def _warn_overrides(data, values, calibration, kw):
    """A keyword wins, but not silently over what a file records (as the command line warns,
    cli_warn_overrides): kv, semiangle_mrad, scan_step_A or det_sampling_mrad more than 1 % off
    the file's value gives a RuntimeWarning naming who states it (the calibration file, else the
    sidecar, else the data file) and the value used."""
    rows = (('kv', 'kV', 'kv'), ('semiangle_mrad', 'mrad', 'semiangle_mrad'), ('scan_step_A', 'A', 'scan_step_A'),
            ('det_sampling_mrad', 'mrad/pixel', 'det_sampling_mrad'))

    def stated(path, as_calibration):
        if not path:
            return None
        out = _lib.Values()
        err = _lib.Err()
        args = (None, None, _lib.enc(os.fspath(path))) if as_calibration else (None, _lib.enc(os.fspath(path)), None)
        return out if lib.ssb4d_values_read(*args, ctypes.byref(out), ctypes.byref(err)) == 0 else None

    side = cal = None
    for key, unit, field_ in rows:
        given, recorded = kw.get(key), getattr(values, field_)
        if given is None or recorded is None or (isinstance(given, str) and given == 'measure'):
            continue  # 'measure' states nothing: the measurement replaces the file's value knowingly
        g = _pair(key, given) if isinstance(recorded, tuple) else (float(given),)
        r = recorded if isinstance(recorded, tuple) else (recorded,)
        if not any(0 < a <= 5000 and abs(a - b) > 0.01 * abs(b) for a, b in zip(g, r)):
            continue
        if side is None:
            side = stated(values.sidecar, False) or False
            cal = stated(calibration, True) or False
        def known(vals):
            x = getattr(vals, field_) if vals else _NAN
            return not math.isnan(x if isinstance(x, float) else x[0])
        who = calibration if known(cal) else values.sidecar if known(side) else data

        def text(t):
            return '%g,%g' % t if len(t) == 2 and t[0] != t[1] else '%g' % t[0]
        warnings.warn("%s=%s differs from %s's %s %s; using %s %s" % (key, text(g), os.fspath(who), text(r), unit,
                                                                       text(g), unit), RuntimeWarning, stacklevel=3)


def _rotation_from(path, m, kw):
    """rotation_from=: the rotation and, where it states it, the handedness of another
    acquisition's calibration file (a thin area's fit, docs/fit.md), held as rotation_deg= would
    be. The library's checks (ssb4d_values_rotation_from, the command line's --rotation-from): a
    missing or broken file, one without a settled rotation (a centre-of-mass measurement) are
    refused; so is rotation_deg= with it. A file made at another kV, semi-angle or detector
    sampling than these values warns (RuntimeWarning) and is used."""
    if kw.get('rotation_deg') is not None:
        raise InvalidArgument('give rotation_deg or rotation_from, not both')
    try:
        path = os.fspath(path)
    except TypeError:
        raise InvalidArgument('rotation_from takes the path of a calibration file, not %r' % (path,)) from None
    v = _lib.Values()
    err = _lib.Err()
    st = lib.ssb4d_values_rotation_from(_lib.enc(path), ctypes.byref(v), ctypes.byref(err))
    if st:
        from .errors import _raise_for
        _raise_for(st, 'rotation_from: ' + err.msg.decode('utf-8', 'replace'))
    names = (('kv', 'kV', v.kv, m.get('kv')), ('semiangle_mrad', 'semi-angle (mrad)', v.semiangle_mrad,
                                              m.get('semiangle_mrad')))
    ds = m.get('det_sampling_mrad') or (None, None)
    names += tuple(('det_sampling_mrad', 'detector sampling (mrad)', v.det_sampling_mrad[i], ds[i]) for i in range(2))
    for _, what, theirs, ours in names:
        if ours is not None and not math.isnan(theirs) and abs(theirs - ours) > 1e-6 * max(abs(theirs), abs(ours)):
            warnings.warn('rotation_from %s was calibrated at %s %g, this data at %g: check that the rotation '
                          'still holds' % (path, what, theirs, ours), RuntimeWarning, stacklevel=4)
            break
    m['rotation_deg'] = v.rotation_deg
    m['rotation_measured'] = False
    m['rotation_sigma_deg'] = None
    m['rotation_from'] = os.path.abspath(path)
    m['rotation_given_by'] = 'rotation_from'
    if v.flip >= 0 and kw.get('flip') is None:
        m['flip'] = bool(v.flip)


_MICRO_KEYS = ('kv', 'semiangle_mrad', 'scan_step_A', 'det_sampling_mrad', 'centre_px', 'rotation_deg',
               'bf_radius_px')


def _new(open_fn, values, micro, memory, threads, backend, hot_pixels, region, source, array, device_memory=None):
    holder = _Holder()
    o, cb = Session._opts(micro, memory, threads, backend, hot_pixels, region, holder, device_memory)
    out = ctypes.c_void_p()
    err = _lib.Err()
    _lib.check(open_fn(ctypes.byref(o), ctypes.byref(out), ctypes.byref(err)), err)
    s = Session(out.value, source=source, values=values, array=array, microscope=micro)
    s._holder = holder
    s._cb = cb  # the C callback object lives as long as the session
    s._rows = (region[0][1] - region[0][0]) if region is not None else None
    return s


def open(path, *, kv=None, semiangle_mrad=None, scan_step_A=None, det_sampling_mrad=None, centre_px=None,
         rotation_deg=None, flip=None, bf_radius_px=None, sidecar=None, calibration=None, memory=None, threads=0,
         backend='auto', hot_pixels=True, region=None, qem=None, format=None, dataset=None, gain=None,
         progress=True, device_memory=None, rotation_from=None) -> Session:
    """Opens an acquisition file as a :class:`Session`.

    Every format ``ssb4d import`` reads whose file states its whole shape (.qem, .npy, HDF5 /
    EMD / py4DSTEM, Dectris Arina, Merlin .mib, EMPAD, Gatan DM3/DM4, Velox EMD, MRC) is read in
    place, counts or float32 values alike (float data are never quantised). ``qem=`` (or
    ``format``/``dataset``, which need the importer's options) imports it once into a ``.qem``
    instead (``qem=`` names where to keep it, else a temporary file removed at close; float data
    then need ``gain=``, electrons per unit, or 'auto', as :func:`ssb4d.encode`). ``flip``: the
    detector is mirrored (True) or not (False); None: as the file or calibration states, else
    the fit tests both.

    The microscope values start from what the file states (a .qem's record, the simulator
    sidecar beside it or ``sidecar=``, a calibration file ``calibration=``); keywords win:
    kv (kV), semiangle_mrad, scan_step_A, det_sampling_mrad, centre_px, rotation_deg (given:
    held by fits), bf_radius_px. Stated values are used (SPEC §4): :meth:`Session.calibrate` measures
    the sampling all the same (``Calibration``); ``det_sampling_mrad='measure'`` uses the measurement. rotation_from: a calibration file of another acquisition at the
    same settings (a thin area's ``ssb4d fit``), whose rotation and handedness are held as
    rotation_deg would be (for crystals, whose 180° branch the data cannot settle; docs/fit.md);
    a missing or broken file, a centre-of-mass rotation (its branch open) and rotation_deg with it
    are refused (InvalidArgument, FileError or FormatError, naming rotation_from). memory: the budget ('16G', bytes; None: the available RAM);
    backend: 'auto', 'cpu' or 'cuda'; device_memory: the GPU memory the CUDA backend may hold
    ('8G', bytes; None: the device's free memory; a session that needs more fails at the G build
    naming what it needs); region: ((r0, r1), (c0, c1)) to fit and image only that part of the
    scan.
    """
    from .tools import encode, values as read_values
    path = os.fspath(path)
    # a missing file, a folder, a file that is no data is named before any missing microscope value
    _check_readable(path, content=qem is None and format is None and dataset is None)
    kw = dict(kv=kv, semiangle_mrad=semiangle_mrad, scan_step_A=scan_step_A, det_sampling_mrad=det_sampling_mrad,
              centre_px=centre_px, rotation_deg=rotation_deg, bf_radius_px=bf_radius_px, flip=flip,
              rotation_from=rotation_from)
    tmpdir = None
    data = path
    if _needs_import(path) and (qem is not None or format is not None or dataset is not None):
        if qem is None:
            tmpdir = tempfile.TemporaryDirectory(prefix='ssb4d-')
            qem = os.path.join(tmpdir.name, os.path.basename(path) + '.qem')
        sp = _pair('scan_step_A', scan_step_A)
        ds = None if det_sampling_mrad == 'measure' else _pair('det_sampling_mrad', det_sampling_mrad)
        encode(path, qem, format=format, dataset=dataset, kv=kv, semiangle_mrad=semiangle_mrad, scan_step_A=sp,
               det_sampling_mrad=ds, force=tmpdir is not None, gain=gain, progress=progress)
        data = os.fspath(qem)
    v = read_values(data, sidecar=sidecar, calibration=calibration)
    _warn_overrides(data, v, calibration, kw)
    micro = _microscope(v, kw)
    s = _new(lambda o, out, err: lib.ssb4d_session_open(_lib.enc(data), o, out, err), v, micro, memory, threads,
             backend, hot_pixels, region, data, None, device_memory)
    s._tmpdir = tmpdir
    s._path = os.path.abspath(data)  # the viewer (another process, another folder) reads it too
    v_raw = v._raw
    if v_raw.has_ab and not v_raw.ab_from_truth:  # a calibration file's aberrations are the start
        th = v_raw.thick if v_raw.has_thick else None
        lib.ssb4d_session_set(s._s, ctypes.byref(v_raw.ab), ctypes.byref(th) if th is not None else None)
    return s


def _check_readable(path, content=True):
    """The data file, checked as the command line and ssb4d_session_open check it, before anything
    about the microscope values (ssb4d_data_check): a missing or unreadable file, a folder
    (FileError, an OSError with its errno), a file of no format ssb4d reads or a .npy without
    its magic (FormatError), each naming the file. content=False (a file to import with the
    importer's options): the first two only."""
    where = '' if os.path.isabs(path) else ' (relative to %s)' % os.path.abspath(os.curdir)
    errno_ = None
    try:
        with builtins_open(path, 'rb'):
            pass
    except OSError as e:
        errno_ = e.errno
    if not content and errno_ is None:
        return
    err = _lib.Err()
    st = lib.ssb4d_data_check(_lib.enc(path), ctypes.byref(err))
    if st:
        from .errors import _BY_STATUS, SSB4DError
        e = _BY_STATUS.get(st, SSB4DError)(err.msg.decode('utf-8', 'replace') + where, st)
        if errno_ is not None:
            e.errno = errno_
        raise e from None


def _needs_import(path):
    """A readable file that is neither a .qem nor a .npy (the library reads those in place; any
    other failure is left to it, for its own message)."""
    try:
        with builtins_open(path, 'rb') as f:
            head = f.read(8)
    except OSError:
        return False
    return os.path.isfile(path) and not (head.startswith(b'QEMDATA1') or head.startswith(b'\x93NUMPY'))


# The keywords the parameter table states, in the docstrings (the same rows the library checks).
Session.fit.__doc__ = Session.fit.__doc__.replace('{table}', _params.doc(_params.OP_FIT, _params.TABLE[_params.OP_FIT]))
Session.refine.__doc__ = Session.refine.__doc__.replace('{table}', _params.doc(
    _params.OP_REFINE, ('refine_thickness', 'refine_probe', 'modes', 'threads')))
Session.preview.__doc__ = Session.preview.__doc__.replace('{table}', _params.doc(
    _params.OP_PREVIEW, ('upsample', 'subset', 'estimator', 'rotation_deg', 'want_loss')))

import builtins  # noqa: E402  (open is shadowed above)
builtins_open = builtins.open


def open_array(data, *, kv, semiangle_mrad, scan_step_A, det_sampling_mrad=None, centre_px=None, rotation_deg=None,
               flip=None, bf_radius_px=None, memory=None, threads=0, backend='auto', hot_pixels=True,
               region=None, device_memory=None, rotation_from=None) -> Session:
    """Opens a 4-D numpy array (scan rows, scan cols, detector rows, detector cols) of counts or
    intensities as a :class:`Session`.

    uint8, uint16, uint32 and float32 arrays in C order are used without a copy (keep them
    unchanged while the session is open; the session holds a reference). float32 values are used
    as they are (gain-normalised or analogue data; negative values allowed, never quantised;
    integer-valued floats give the same bits as the same counts); NaN or infinite values,
    signed or big-endian dtypes, other ranks and non-C-contiguous strides are refused. float64
    arrays are converted (a copy) when nothing is lost: to float32 when every value is one, to
    uint32 when they are whole counts; others are refused with the conversion to make.
    The microscope values are required here (kv, semiangle_mrad, scan_step_A); the others
    (rotation_from too) as in :func:`ssb4d.open`.
    """
    a = _check_array(data)
    kw = dict(kv=kv, semiangle_mrad=semiangle_mrad, scan_step_A=scan_step_A, det_sampling_mrad=det_sampling_mrad,
              centre_px=centre_px, rotation_deg=rotation_deg, bf_radius_px=bf_radius_px, flip=flip,
              rotation_from=rotation_from)
    micro = _microscope(None, kw)
    dt = 0x104 if a.dtype == np.float32 else {1: 1, 2: 2, 4: 4}[a.dtype.itemsize]
    shape = (ctypes.c_size_t * 4)(*a.shape)
    ptr = a.ctypes.data_as(ctypes.c_void_p)
    s = _new(lambda o, out, err: lib.ssb4d_session_open_memory(ptr, dt, shape, o, out, err), None, micro, memory,
             threads, backend, hot_pixels, region, None, a, device_memory)
    return s


def _from_float64(data):
    """float64 data, converted only when nothing is lost (a copy the session keeps): to float32
    when every value is one (whole counts below 2**24 among them: the same bits as the counts),
    else to uint32 when every value is a whole count below 2**32; else refused, with the
    conversion to make."""
    if data.size and not np.isfinite(data).all():
        raise InvalidArgument('float64 data hold NaN or infinite values')
    f32 = data.astype(np.float32)
    if np.array_equal(f32, data):
        return f32
    if data.size and data.min() >= 0 and data.max() <= 4294967295 and np.array_equal(np.floor(data), data):
        return data.astype(np.uint32)
    bad = np.unravel_index(np.argmax(f32 != data), data.shape)
    raise InvalidArgument('dtype float64: a%s = %r is not a float32 value (nor are the data whole counts), so '
                          'reading them would round them: pass a.astype(np.float32) to use them rounded to float32 '
                          '(a relative error below 6e-8), or whole counts as a.astype(np.uint32)'
                          % (list(int(i) for i in bad), float(data[bad])))


def _check_array(data):
    if not isinstance(data, np.ndarray):
        raise InvalidArgument('open_array takes a numpy array, not %s' % type(data).__name__)
    if data.ndim != 4:
        raise InvalidArgument('expected a 4-D array (scan_row, scan_col, det_row, det_col), got %d-D with shape %s'
                              % (data.ndim, data.shape))
    if not data.flags.c_contiguous:
        raise InvalidArgument('the array is not C-contiguous (strides %s): pass np.ascontiguousarray(a) (a copy)'
                              % (data.strides,))
    dt = data.dtype
    if dt.byteorder == '>' or (dt.byteorder == '=' and not np.little_endian):
        raise InvalidArgument('dtype %s is big-endian: pass a.astype(a.dtype.newbyteorder("<"))' % dt)
    if dt in (np.uint8, np.uint16, np.uint32):
        return data
    if dt == np.float32:
        if data.size and not np.isfinite(data).all():
            raise InvalidArgument('float32 data hold NaN or infinite values')
        return data
    if dt == np.float64:
        return _from_float64(data)
    raise InvalidArgument('dtype %s is not supported: counts must be uint8, uint16 or uint32, intensities '
                          'float32 (or float64 that float32 holds exactly)' % dt)
