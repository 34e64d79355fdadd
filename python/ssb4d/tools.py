"""What needs no session: the values a file states, encoding into .qem, the simulator, the planner."""
import ctypes
import os
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import numpy as np

from . import _lib, _run
from .errors import InvalidArgument
from .results import ImportReport, Plan, SimInfo, Values, aberrations_struct

lib = _lib.lib
_NAN = float('nan')


def values(path, *, sidecar=None, calibration=None) -> Values:
    """What a file states about its microscope, layered as ``ssb4d fit`` does: a .qem's record,
    the simulator sidecar (``sidecar=``, else found beside the file), a calibration file."""
    v = _lib.Values()
    err = _lib.Err()
    _lib.check(lib.ssb4d_values_read(_lib.enc(None if path is None else os.fspath(path)),
                                     _lib.enc(None if sidecar is None else os.fspath(sidecar)),
                                     _lib.enc(None if calibration is None else os.fspath(calibration)),
                                     ctypes.byref(v), ctypes.byref(err)), err)
    return Values._from(v)


class _Holder:
    current = None


def _long_call(fn_taking_callback, progress, label):
    holder = _Holder()
    p = _run.Progress(progress, label)
    holder.current = p
    cb = _run.c_callback(holder)
    return _run.call(lambda: fn_taking_callback(cb), p)


_HOT = {'median': 0, 'zero': 1, 'none': 2}


def encode(src, out, *, format=None, dataset=None, shape=None, dtype=None, big_endian=False, offset=0,
           scan_shape=None, hot_pixels='median', kv=None, semiangle_mrad=None, scan_step_A=None,
           det_sampling_mrad=None, force=False, threads=0, gain=None, flip=None, more=(),
           progress=True) -> ImportReport:
    """Imports an acquisition (.npy, raw, HDF5 / EMD / py4DSTEM, Dectris Arina, Merlin .mib) into
    the encoded .qem form (``ssb4d import``): every count kept exactly except those of flagged
    pixels (``hot_pixels``: 'median', 'zero' or 'none'), written atomically. Microscope values
    given here, or found in a simulator sidecar beside ``src``, are recorded in the file.
    raw: ``shape`` (4 sizes), ``dtype`` ('uint8', 'uint16', 'uint32'), ``big_endian``, ``offset``;
    a frame stack: ``scan_shape``. Float data (EMPAD, gain-normalised counts) need ``gain``:
    electrons per unit (a number) or 'auto'; the quantisation error is in the report. ``flip``
    records the detector's handedness; ``more``: further .mib files of one Merlin acquisition."""
    p = _lib.ImportParams()
    lib.ssb4d_import_params_default(ctypes.byref(p))
    keep = []
    if format is not None:
        p.format = format.encode()
    if dataset is not None:
        p.dataset = dataset.encode()
    if shape is not None and scan_shape is not None:
        raise InvalidArgument('give shape (raw) or scan_shape, not both')
    if shape is not None:
        if len(shape) != 4:
            raise InvalidArgument('shape takes 4 sizes (scan rows, scan cols, det rows, det cols)')
        p.shape[:] = [int(x) for x in shape]
    if scan_shape is not None:
        p.shape[0], p.shape[1] = (int(x) for x in scan_shape)
    if dtype is not None:
        sizes = {'uint8': 1, 'u1': 1, 'uint16': 2, 'u2': 2, 'uint32': 4, 'u4': 4, 'float32': 4}
        if str(np.dtype(dtype)) not in sizes:
            raise InvalidArgument('dtype must be uint8, uint16, uint32 or float32, not %r' % (dtype,))
        p.dtype_bytes = sizes[str(np.dtype(dtype))]
        p.dtype_float = 1 if str(np.dtype(dtype)) == 'float32' else 0
    if gain is not None:
        if isinstance(gain, str) and gain == 'auto':
            p.gain = _NAN
        elif isinstance(gain, (int, float)) and gain > 0:
            p.gain = float(gain)
        else:
            raise InvalidArgument("gain must be a positive number of electrons per unit or 'auto', not %r" % (gain,))
    if flip is not None:
        p.flip = 1 if flip else 0
    more = [os.fspath(m).encode() for m in more]
    if more:
        arr = (ctypes.c_char_p * len(more))(*more)
        keep.append(arr)
        p.more_paths = ctypes.cast(arr, ctypes.c_void_p)
        p.n_more_paths = len(more)
    p.big_endian = 1 if big_endian else 0
    p.offset = int(offset)
    if hot_pixels not in _HOT:
        raise InvalidArgument("hot_pixels must be 'median', 'zero' or 'none', not %r" % (hot_pixels,))
    p.hot = _HOT[hot_pixels]
    side = values(None, sidecar=_sidecar_of(src)) if _sidecar_of(src) else None
    ev = 'sidecar ' + os.path.basename(side.sidecar) if side is not None else None

    def pick(given, from_side, i):
        if given is not None:
            return given
        if from_side is not None:
            p.evidence[i] = ev.encode()
            return from_side
        return None
    k = pick(kv, side.kv if side else None, 0)
    p.kv = _NAN if k is None else float(k)
    a = pick(semiangle_mrad, side.semiangle_mrad if side else None, 1)
    p.semiangle_mrad = _NAN if a is None else float(a)
    st = pick(scan_step_A, side.scan_step_A if side else None, 2)
    p.scan_step_A[0], p.scan_step_A[1] = (_NAN, _NAN) if st is None else _two(st)
    ds = pick(det_sampling_mrad, side.det_sampling_mrad if side else None, 3)
    p.det_sampling_mrad[0], p.det_sampling_mrad[1] = (_NAN, _NAN) if ds is None else _two(ds)
    p.force = 1 if force else 0
    p.threads = int(threads)
    r = _lib.ImportReport()
    err = _lib.Err()

    def run(cb):
        p.progress = cb
        return lib.ssb4d_import(_lib.enc(os.fspath(src)), _lib.enc(os.fspath(out)), ctypes.byref(p), ctypes.byref(r),
                                ctypes.byref(err))
    _lib.check(_long_call(run, progress, 'import'), err)
    del keep
    return ImportReport(tuple(r.shape), _lib.s(r.source_format or b''), r.source_dtype_bytes, r.stored_dtype_bytes,
                        r.flagged_file, r.flagged_found, r.input_bytes, r.encoded_bytes, r.seconds,
                        bool(r.source_float), r.gain if r.source_float else None, _lib.s(r.gain_how),
                        r.quant_max_e, r.quant_rms_e, r.quant_clipped)


def _two(v):
    if isinstance(v, (int, float)):
        return float(v), float(v)
    a, b = v
    return float(a), float(b)


def _sidecar_of(path):
    v = _lib.Values()
    err = _lib.Err()
    # the library's rule (DATA.json, DATA's stem + .json, without "_counts"): read with no .qem
    if lib.ssb4d_values_read(_lib.enc(os.fspath(path)), None, None, ctypes.byref(v), ctypes.byref(err)):
        return None
    return _lib.s(v.sidecar_path) or None


_SPECIMENS = {'SrTiO3': 0, 'Au': 1, 'Si': 2}


def _sim_params(preset, kw):
    p = _lib.SimParams()
    err = _lib.Err()
    _lib.check(lib.ssb4d_sim_params_preset(ctypes.byref(p), _lib.enc(preset), ctypes.byref(err)), err)
    ab = {}
    for k in list(kw):
        if k.startswith('C') or k.startswith('phi'):
            ab[k] = kw.pop(k)
    if ab:
        p.ab = aberrations_struct(ab, p.ab)
    simple = ('cells_z', 'window_cells', 'scan_n', 'scan_cells', 'det', 'grid', 'det_oversample', 'threads')
    for k in simple:
        if k in kw:
            setattr(p, k, int(kw.pop(k)))
    for k in ('kv', 'semiangle_mrad', 'dose', 'scan_rotation_deg'):
        if k in kw:
            setattr(p, k, float(kw.pop(k)))
    if 'seed' in kw:
        p.seed = int(kw.pop('seed'))
    if 'tilt_mrad' in kw:
        p.tilt_mrad[0], p.tilt_mrad[1] = _two(kw.pop('tilt_mrad'))
    if 'wedge_nm' in kw:  # (t0, t1): thickness rising along the scan columns (checked by the library)
        p.wedge_nm[0], p.wedge_nm[1] = _two(kw.pop('wedge_nm'))
    if 'specimen' in kw:
        sp = kw.pop('specimen')
        if sp not in _SPECIMENS:
            raise InvalidArgument("specimen must be 'SrTiO3', 'Au' or 'Si', not %r" % (sp,))
        p.specimen = _SPECIMENS[sp]
    if kw:
        raise TypeError('simulate: unknown parameter(s) %s' % ', '.join(sorted(kw)))
    info = _lib.SimInfo()
    _lib.check(lib.ssb4d_sim_describe(ctypes.byref(p), ctypes.byref(info), ctypes.byref(err)), err)
    return p, info


def _sim_info(p, i):
    return SimInfo(p.kv, p.semiangle_mrad, i.scan_step_A, i.det_sampling_mrad, i.bf_radius_px, i.thickness_nm,
                   i.wavelength_A, i.grid, i.det_oversample, i.n_clamped, i.seconds)


@dataclass
class Simulation:
    """A simulation in memory (``ssb4d.simulate_array``): the counts (uint16, 4-D), the projected
    phase at the scan positions, band-limited to the SSB passband (float32), its derived values,
    and ``microscope``: the keywords :func:`ssb4d.open_array` needs."""
    counts: object = field(repr=False)
    phase_bandlimited: object = field(repr=False)
    info: SimInfo
    microscope: Dict[str, object]
    truth: Dict[str, float]


def simulate_array(preset: str = 'small', *, progress=True, **params) -> Simulation:
    """Simulates a 4D-STEM acquisition (multislice through SrTiO3 or Au; docs/simulate.md) into
    memory. ``preset``: 'tiny', 'small', 'medium', 'reference'; keywords change it: C10_nm,
    C12_nm, phi12_deg (any aberration), kv, semiangle_mrad, dose, seed, scan_n, det, cells_z,
    window_cells, scan_cells, tilt_mrad, scan_rotation_deg, specimen, threads, wedge_nm ((t0, t1):
    a wedge whose thickness rises along the scan columns, as ``ssb4d simulate --wedge T0:T1``)."""
    p, info = _sim_params(preset, dict(params))
    n, d = p.scan_n, p.det
    counts = np.empty((n, n, d, d), np.uint16)
    phase = np.empty((n, n), np.float32)
    err = _lib.Err()

    def run(cb):
        p.progress = cb
        return lib.ssb4d_simulate_to_memory(ctypes.byref(p), counts.ctypes.data_as(ctypes.c_void_p), None, None,
                                            phase.ctypes.data_as(ctypes.c_void_p), ctypes.byref(info),
                                            ctypes.byref(err))
    _lib.check(_long_call(run, progress, 'simulate'), err)
    micro = dict(kv=p.kv, semiangle_mrad=p.semiangle_mrad, scan_step_A=(info.scan_step_A, info.scan_step_A),
                 det_sampling_mrad=(info.det_sampling_mrad, info.det_sampling_mrad),
                 rotation_deg=p.scan_rotation_deg)
    truth = {'C10_nm': p.ab.C_nm[0] + 0.5 * (info.thickness_nm - info.thickness_nm / info.n_slices),
             'C12_nm': p.ab.C_nm[1], 'phi12_deg': p.ab.phi_deg[1]}
    return Simulation(counts, phase, _sim_info(p, info), micro, truth)


def simulate(path, preset: str = 'small', *, force: bool = False, progress=True, **params) -> SimInfo:
    """Simulates into ``path`` (.npy, uint16 counts) with the sidecar ``STEM.json`` layout beside it
    (``ssb4d simulate``): :func:`ssb4d.open` then reads its microscope values. Parameters as
    :func:`simulate_array`; an existing output is refused unless force."""
    p, info = _sim_params(preset, dict(params))
    err = _lib.Err()

    def run(cb):
        p.progress = cb
        return lib.ssb4d_simulate(ctypes.byref(p), _lib.enc(os.fspath(path)), 1 if force else 0,
                                  b'ssb4d.simulate (Python)', ctypes.byref(info), ctypes.byref(err))
    _lib.check(_long_call(run, progress, 'simulate'), err)
    return _sim_info(p, info)


# The built-in dataset of `ssb4d fit` / `ssb4d demo` (src/cli/cli_session.h): the small preset
# with these aberrations at the entrance surface and this seed.
BUILTIN = {'C10_nm': 12.0, 'C12_nm': 3.0, 'phi12_deg': 35.0, 'seed': 7}


def builtin(*, progress=True, **open_kw):
    """The built-in dataset of ``ssb4d fit`` (no arguments) as a session: the ``small`` simulation
    (128² scan, 64² detector, SrTiO3, 300 kV) with C10 12 nm, C12 3 nm, φ12 35°; its fit has the
    same trace as ``ssb4d fit``'s. ``session.truth`` holds C10 at the slab's mean depth."""
    from .session import open_array
    params = dict(BUILTIN)
    sim = simulate_array('small', progress=progress, C10_nm=params['C10_nm'], C12_nm=params['C12_nm'],
                         phi12_deg=params['phi12_deg'], seed=params['seed'], **({'threads': open_kw['threads']}
                                                                                 if 'threads' in open_kw else {}))
    s = open_array(sim.counts, **sim.microscope, **open_kw)
    s._truth = sim.truth
    return s


def plan(shape: Tuple[int, int, int, int], n_bf: int, *, memory=None, upsample: int = 0, threads: int = 0,
         encoded_bytes: int = 0, region: Optional[Tuple[int, int]] = None, fit: bool = True) -> Plan:
    """The memory plan of a session (``ssb4d plan``): from the shape, the number of BF pixels and a
    budget (None: the available RAM), how G is held and each stage's predicted bytes; ``fits``
    False with the reason and ``min_memory_bytes`` when the budget is too small."""
    from .session import _size
    if len(shape) != 4:
        raise InvalidArgument('shape takes 4 sizes (scan rows, scan cols, det rows, det cols)')
    i = _lib.PlanInput()
    lib.ssb4d_plan_input_default(ctypes.byref(i))
    i.scan[0], i.scan[1], i.det[0], i.det[1] = (int(x) for x in shape)
    i.n_bf = int(n_bf)
    i.memory_bytes = _size(memory)
    i.upsample = int(upsample)
    i.threads = int(threads)
    i.encoded_bytes = int(encoded_bytes)
    if region is not None:
        i.region[0], i.region[1] = (int(x) for x in region)
    i.no_fit = 0 if fit else 1
    out = _lib.Plan()
    err = _lib.Err()
    _lib.check(lib.ssb4d_plan_make(ctypes.byref(i), ctypes.byref(out), ctypes.byref(err)), err)
    return Plan._from(out)


def virtual_images(data, *, bf_outer_mrad=None, bf_inner_mrad=None, adf=None, progress=False, **open_kw):
    """The virtual BF, ADF, centre-of-mass and iDPC images (docs/virtual.md) of an acquisition
    file or a 4-D numpy array: opens it (:func:`ssb4d.open` or :func:`ssb4d.open_array` with
    open_kw), calibrates and returns :class:`ssb4d.session.VirtualImages` (float64 arrays bf, adf,
    com_x, com_y, idpc and the angles used). The same numbers as ``ssb4d virtual DATA``."""
    from .session import open as open_file, open_array
    s = open_array(data, **open_kw) if isinstance(data, np.ndarray) else open_file(data, progress=progress, **open_kw)
    with s:
        return s.virtual_images(bf_outer_mrad=bf_outer_mrad, bf_inner_mrad=bf_inner_mrad, adf=adf, progress=progress)
