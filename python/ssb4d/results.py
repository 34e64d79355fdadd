"""Results as small dataclasses, units in the field names (nm, deg, mrad, A for Å, px, bytes, s)."""
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from . import _lib, _params

ABERRATION_NAMES = tuple(_lib.lib.ssb4d_aberr_name(i).decode() for i in range(_lib.N_ABERR))


def aberrations_dict(ab) -> Dict[str, float]:
    """{'C10_nm': .., 'C12_nm': .., 'phi12_deg': .., ...} from an ssb4d_aberrations."""
    out = {}
    for i, name in enumerate(ABERRATION_NAMES):
        out[name + '_nm'] = ab.C_nm[i]
        if _lib.lib.ssb4d_aberr_m(i):
            out['phi' + name[1:] + '_deg'] = ab.phi_deg[i]
    return out


def aberrations_struct(d, base=None):
    """An ssb4d_aberrations from a dict like aberrations_dict's (missing keys: base's, else 0).
    Unknown keys are refused (TypeError); values out of the parameter table's range too
    (InvalidArgument)."""
    ab = _lib.Aberrations()
    if base is not None:
        ctypes_copy(ab, base)
    rows = _params.TABLE[_params.OP_ABERRATIONS]
    for key, value in d.items():
        if value is None:
            continue
        if key not in rows:
            raise TypeError("unknown aberration %r (use C10_nm .. C56_nm and phi12_deg .. phi56_deg)" % key)
        _params.set_param(_params.OP_ABERRATIONS, ab, key, value)
    return ab


def ctypes_copy(dst, src):
    import ctypes
    ctypes.memmove(ctypes.byref(dst), ctypes.byref(src), ctypes.sizeof(dst))


@dataclass
class Geometry:
    """Microscope and detector geometry of one acquisition."""
    kv: float
    semiangle_mrad: float
    scan_step_A: Tuple[float, float]
    det_sampling_mrad: Tuple[float, float]
    centre_px: Tuple[float, float]
    rotation_deg: float
    flip: bool = False  # the detector is mirrored: its axes swapped before the rotation (SPEC §2)

    @classmethod
    def _from(cls, g):
        return cls(g.kv, g.semiangle_mrad, tuple(g.scan_step_A), tuple(g.det_sampling_mrad), tuple(g.centre_px),
                   g.rotation_deg, bool(g.flip))


@dataclass
class Calibration:
    """What ``Session.calibrate`` found: the BF disk, the sampling, flagged pixels, the rotation."""
    geometry: Geometry
    scan_shape: Tuple[int, int]
    det_shape: Tuple[int, int]
    disk_centre_px: Tuple[float, float]
    disk_radius_px: float
    selection_radius_px: float
    n_bf: int
    n_flagged: int
    rotation_curl_deg: float
    rotation_sigma_deg: float
    rotation_fitted: bool
    det_sampling_fitted: bool
    total_counts: float
    flip_fitted: bool                          # geometry.flip decided by the centre of mass's curl
    mean_pattern: object = field(repr=False)   # float64 (det rows, det cols)
    bf_pixels: object = field(repr=False)      # int32 flat detector indices, ascending
    flagged_pixels: object = field(repr=False)  # int32 flat detector indices
    # the sampling as `ssb4d calibrate` prints it (stated and measured, with the standard error),
    # and its warning ('' when none): the measured one more than 3 sigma from the stated one
    sampling_report: str = ''
    sampling_warning: str = ''
    # the measurement behind the sampling (made whether or not one was stated) and the edge fit's
    # pixel model: 0 point-sampled, 1 3x3, 2 5x5, 3 area-integrated, -1 no fit; stated (the
    # sidecar's det_oversample, a calibration file's) or chosen by the residual
    det_sampling_measured_mrad: float = float('nan')
    edge_model: int = -1
    edge_model_stated: bool = False

    @classmethod
    def _from(cls, c):
        import ctypes
        import numpy as np
        text, warn = ctypes.create_string_buffer(320), ctypes.create_string_buffer(320)
        _lib.lib.ssb4d_calibration_sampling_report(ctypes.byref(c), text, len(text), warn, len(warn))
        nd = c.det_shape[0] * c.det_shape[1]
        mean = np.ctypeslib.as_array(c.mean_pattern, (nd,)).reshape(c.det_shape[0], c.det_shape[1]).copy() \
            if c.mean_pattern else np.zeros((c.det_shape[0], c.det_shape[1]))
        bf = np.ctypeslib.as_array(c.bf_pix, (c.n_bf,)).copy() if c.n_bf else np.zeros(0, np.int32)
        fl = np.ctypeslib.as_array(c.flagged, (c.n_flagged,)).copy() if c.n_flagged else np.zeros(0, np.int32)
        return cls(Geometry._from(c.geom), tuple(c.scan_shape), tuple(c.det_shape), tuple(c.disk_centre_px),
                   c.disk_radius_px, c.selection_radius_px, c.n_bf, c.n_flagged, c.rotation_curl_deg,
                   c.rotation_sigma_deg, bool(c.rotation_fitted), bool(c.det_sampling_fitted), c.total_counts,
                   bool(c.flip_fitted), mean, bf, fl, text.value.decode(),
                   warn.value.decode().replace('\n', ' '), c.det_sampling_measured_mrad, c.edge_model,
                   bool(c.edge_model_stated))


@dataclass
class FitResult:
    """A standard fit (``Session.fit``, ``fit_region``). φ12 is given in the scan frame
    (``phi12_deg``, what ssb4d's χ uses) and the probe (detector) frame."""
    C10_nm: float
    C12_nm: float
    phi12_deg: float
    phi12_probe_deg: float
    rotation_deg: float
    rotation_source: str
    rotation_sigma_deg: float
    flip: bool          # the detector's handedness the fit used (SPEC §2)
    flip_source: str    # 'given', 'objective', 'centre of mass', 'assumed' or 'undetermined'
    loss: float
    objective: float
    confident: bool
    warning: str
    branch_flipped: bool
    loss_contrast: float
    # standard errors {'C10_nm', 'C12_nm', 'phi12_deg' (scan frame), 'rotation_deg'}: the spread of
    # the fits on 8 groups of the fit pixels (docs/fit.md); nan: not fitted; inf: no minimum there
    standard_errors: Dict[str, float]
    n_fit_bf: int
    evaluations: int
    nm_iterations: int
    trace_sha256: str
    seconds: float
    aberrations: Dict[str, float] = field(repr=False)
    geometry: Geometry = field(repr=False)
    trials: object = field(repr=False)  # numpy structured array: stage, number, C10_nm, C12_nm, phi12_deg, loss, cached
    parallax: Optional[Dict[str, float]] = field(default=None, repr=False)
    _raw: object = field(default=None, repr=False, compare=False)  # the C result (for apply)

    @classmethod
    def _from(cls, r):
        import numpy as np
        dt = np.dtype([('stage', 'i4'), ('number', 'u8'), ('C10_nm', 'f8'), ('C12_nm', 'f8'), ('phi12_deg', 'f8'),
                       ('loss', 'f8'), ('cached', 'i4')])
        tr = np.zeros(r.n_trials, dt)
        for i in range(r.n_trials):
            t = r.trials[i]
            tr[i] = (t.stage, t.number, t.C10_nm, t.C12_nm, t.phi12_deg, t.loss, t.cached)
        px = None
        if r.parallax_ok:
            p = r.parallax
            px = {'C10_nm': p.C10_nm, 'C12_nm': p.C12_nm, 'phi12_deg': p.phi12_deg, 'rotation_deg': p.rotation_deg,
                  'residual_A': p.residual_A, 'seconds': p.seconds}
        # keep the parts apply() needs (everything but the trials' pointer)
        raw = _lib.FitResult()
        ctypes_copy(raw, r)
        raw.trials = None
        raw.n_trials = 0
        return cls(r.ab.C_nm[0], r.ab.C_nm[1], r.ab.phi_deg[1], r.phi12_probe_deg, r.geom.rotation_deg,
                   _lib.s(r.rotation_source), r.rotation_sigma_deg, bool(r.geom.flip), _lib.s(r.flip_source),
                   r.loss, r.objective, bool(r.confident),
                   _lib.s(r.warning), bool(r.branch_flipped), r.loss_contrast,
                   {'C10_nm': r.C10_se_nm, 'C12_nm': r.C12_se_nm, 'phi12_deg': r.phi12_se_deg,
                    'rotation_deg': r.rotation_se_deg}, r.n_fit_bf, r.evaluations,
                   r.nm_iterations, _lib.s(r.trace_sha256), r.seconds, aberrations_dict(r.ab),
                   Geometry._from(r.geom), tr, px, raw)


@dataclass
class TiltResult:
    """The thick-sample fit (``Session.fit_tilt``): C10, C12, φ12 at mid-depth, the tilt (scan
    frame) and thickness."""
    C10_nm: float
    C12_nm: float
    phi12_deg: float
    tilt_mrad: Tuple[float, float]
    thickness_nm: float
    gain: float
    thin_kept: bool
    evaluations: int
    trace_sha256: str

    @classmethod
    def _from(cls, t):
        return cls(t.C10_nm, t.C12_nm, t.phi12_deg, tuple(t.thick.tilt_mrad), t.thick.thickness_nm, t.gain,
                   bool(t.thin_kept), t.evaluations, _lib.s(t.trace_sha256))


@dataclass
class RefineResult:
    """A multislice refinement (``Session.refine``, SPEC §13, docs/refine.md): the refined C10, C12,
    φ12 (scan frame, and ``phi12_probe_deg``), the tilt (``tilt_mrad`` in the probe frame as
    ``ssb4d refine --json`` gives it, ``tilt_scan_mrad`` in the scan frame), the total thickness in
    ``slices`` slices, the likelihood per position with what counting noise alone would give and
    its history, the confidence, the scan region refined [r0, r1, c0, c1], and the images:
    ``projected_phase`` (float32 rows x cols, rad: the sum of the slices'), ``slice_phase``
    (float32 slices x rows x cols) and ``probe`` (complex64, at the entrance surface). The numbers
    carry the command line's --json keys (:meth:`record`). ``tilt_refined`` and
    ``thickness_refined`` are False where the value repeats the start: with one slice the model has
    no depth, so neither the tilt nor the thickness is refined."""
    C10_nm: float
    C12_nm: float
    phi12_deg: float
    phi12_probe_deg: float
    rotation_deg: float
    flip: bool
    tilt_mrad: Tuple[float, float]
    tilt_scan_mrad: Tuple[float, float]
    thickness_nm: float
    slices: int
    nll: float
    nll_expected: float
    nll_history: List[float]
    confident: bool
    warning: str
    region: Tuple[int, int, int, int]
    seconds: float
    object_pixel_A: Tuple[float, float]
    projected_phase: object = field(repr=False)
    slice_phase: object = field(repr=False)
    probe: object = field(repr=False)
    aberrations: Dict[str, float] = field(repr=False)
    geometry: Geometry = field(repr=False)
    tilt_refined: bool = True
    thickness_refined: bool = True

    @classmethod
    def _from(cls, r):
        import numpy as np

        def arr(ptr, n):
            return np.ctypeslib.as_array(ptr, (n,)).copy() if ptr and n else np.zeros(n, np.float32)
        rows, cols = r.obj_shape
        n = rows * cols
        pr, pc = r.probe_shape
        probe = arr(r.probe, 2 * pr * pc).view(np.complex64).reshape(pr, pc)
        hist = [r.history[i] for i in range(r.n_history)] if r.history else []
        ab = aberrations_dict(r.ab)
        return cls(ab['C10_nm'], ab['C12_nm'], ab['phi12_deg'], r.phi12_probe_deg, r.geom.rotation_deg,
                   bool(r.geom.flip), tuple(r.tilt_probe_mrad), tuple(r.tilt_mrad), r.thickness_nm, r.slices,
                   r.nll, r.nll_expected, hist, bool(r.confident), '' if r.confident else _lib.s(r.warning),
                   tuple(r.region), r.seconds, tuple(r.obj_pixel_A),
                   arr(r.projected_phase, n).reshape(rows, cols),
                   arr(r.slice_phase, r.slices * n).reshape(r.slices, rows, cols), probe,
                   ab, Geometry._from(r.geom), bool(r.tilt_refined), bool(r.thickness_refined))

    def record(self) -> Dict[str, object]:
        """The numbers under ``ssb4d refine --json``'s keys."""
        return {'C10_nm': self.C10_nm, 'C12_nm': self.C12_nm, 'phi12_deg': self.phi12_deg,
                'phi12_probe_deg': self.phi12_probe_deg, 'phi12_scan_deg': self.phi12_deg,
                'rotation_deg': self.rotation_deg, 'flip': self.flip, 'tilt_mrad': list(self.tilt_mrad),
                'tilt_probe_mrad': list(self.tilt_mrad), 'tilt_scan_mrad': list(self.tilt_scan_mrad),
                'thickness_nm': self.thickness_nm, 'tilt_refined': self.tilt_refined,
                'thickness_refined': self.thickness_refined, 'slices': self.slices, 'nll': self.nll,
                'nll_expected': self.nll_expected, 'nll_history': list(self.nll_history),
                'confident': self.confident, 'warning': self.warning or None, 'region': list(self.region),
                'object_shape': list(self.projected_phase.shape), 'probe_shape': list(self.probe.shape)}


@dataclass
class RegionFit:
    """One region of ``Session.fit_regions``: scan rows [r0, r1) x cols [c0, c1) and its fit.
    ``rotation_set_by``: the index (in the returned list) of the region that settled the 180°
    branch, whose rotation and handedness every other region's fit held (``ssb4d fit-regions``'
    regions.json key of that name); None when no region set it (each kept its own)."""
    rows: Tuple[int, int]
    cols: Tuple[int, int]
    fit: FitResult
    rotation_set_by: Optional[int] = None


@dataclass
class Reconstruction:
    """A phase image (float32, rad), the complex object (complex64) and the exact loss."""
    phase: object
    object: object
    loss: Optional[float]
    upsample: int
    pixel_A: Tuple[float, float]


@dataclass
class Stage:
    """One row of the memory report: tracked bytes (peak during, after) and the process footprint."""
    name: str
    peak_bytes: int
    after_bytes: int
    cache_bytes: int
    rss_peak_bytes: int
    seconds: float
    device_peak_bytes: int = 0  # the GPU backend's device bytes at most during the stage (0 on the CPU)


@dataclass
class MemoryReport:
    """The session's memory, stage by stage (``Session.memory_report``)."""
    limit_bytes: int
    peak_bytes: int
    stages: List[Stage]

    def __str__(self):
        gib = 1 << 30
        lines = ['%-28s %10s %10s %10s %9s' % ('stage', 'peak GiB', 'after GiB', 'RSS GiB', 'seconds')]
        for st in self.stages:
            lines.append('%-28s %10.3f %10.3f %10.3f %9.2f' % (st.name[:28], st.peak_bytes / gib, st.after_bytes / gib,
                                                              st.rss_peak_bytes / gib, st.seconds))
        lines.append('peak %.3f GiB of a %.3f GiB budget' % (self.peak_bytes / gib, self.limit_bytes / gib))
        return '\n'.join(lines)


@dataclass
class PlanStage:
    name: str
    peak_bytes: int
    after_bytes: int
    seconds: float
    tiles: str


@dataclass
class Plan:
    """The memory plan (SPEC §9): whether the session fits the budget, how G is held, per stage."""
    fits: bool
    reason: str
    memory_bytes: int
    min_memory_bytes: int
    resident_memory_bytes: int
    g_bytes: int
    session_peak_bytes: int
    mode: str
    preview_half: bool
    fit_batch: int
    stages: List[PlanStage]

    @classmethod
    def _from(cls, p):
        st = [PlanStage(_lib.s(x.name), x.peak_bytes, x.after_bytes, x.seconds, _lib.s(x.tiles))
              for x in p.stages[:p.n_stages]]
        return cls(bool(p.fits), _lib.s(p.reason), p.memory_bytes, p.min_memory_bytes, p.resident_memory_bytes,
                   p.g_bytes, p.session_peak_bytes, _lib.s(p.mode), bool(p.preview_half), p.fit_batch, st)


@dataclass
class Values:
    """What a file states about its microscope (``ssb4d.values``): its .qem record, the sidecar,
    a calibration file. None = not stated."""
    kv: Optional[float]
    semiangle_mrad: Optional[float]
    scan_step_A: Optional[Tuple[float, float]]
    det_sampling_mrad: Optional[Tuple[float, float]]
    centre_px: Optional[Tuple[float, float]]
    rotation_deg: Optional[float]
    rotation_from: str
    rotation_measured: bool
    flip: Optional[bool]
    flip_from: str
    aberrations: Optional[Dict[str, float]]
    aberrations_from: str
    sidecar: Optional[str]
    source_format: str = ''                   # what the data file is ('numpy', 'empad', 'qem', ...)
    camera_length_mm: Optional[float] = None  # what the data file records
    dwell_us: Optional[float] = None
    _raw: object = field(default=None, repr=False, compare=False)
    pixel_model_S: Optional[int] = None       # the detector's pixel model: S x S samples per pixel (sidecar's
    #                                           det_oversample, a calibration file's edge_model); None not stated

    @classmethod
    def _from(cls, v):
        def one(x):
            return None if math.isnan(x) else x

        def pair(x):
            return None if math.isnan(x[0]) or math.isnan(x[1]) else (x[0], x[1])
        return cls(one(v.kv), one(v.semiangle_mrad), pair(v.scan_step_A), pair(v.det_sampling_mrad),
                   pair(v.centre_px), one(v.rotation_deg), _lib.s(v.rotation_from), bool(v.rotation_measured),
                   None if v.flip < 0 else bool(v.flip), _lib.s(v.flip_from),
                   aberrations_dict(v.ab) if v.has_ab else None, _lib.s(v.ab_from),
                   _lib.s(v.sidecar_path) or None, _lib.s(v.source_format), one(v.camera_length_mm),
                   one(v.dwell_us), v, v.pixel_model_S or None)


@dataclass
class ImportReport:
    """What ``ssb4d.encode`` wrote."""
    shape: Tuple[int, int, int, int]
    source_format: str
    source_dtype_bytes: int
    stored_dtype_bytes: int
    flagged_by_file: int
    flagged_found: int
    input_bytes: int
    encoded_bytes: int
    seconds: float
    source_float: bool = False          # float32 data, quantised at gain electrons per unit
    gain: Optional[float] = None
    gain_source: str = ''
    quantisation_max_error_e: float = 0.0
    quantisation_rms_error_e: float = 0.0
    negative_values_stored_as_zero: int = 0


@dataclass
class SimInfo:
    """A simulation's derived geometry and statistics (``ssb4d.simulate``)."""
    kv: float
    semiangle_mrad: float
    scan_step_A: float
    det_sampling_mrad: float
    bf_radius_px: float
    thickness_nm: float
    wavelength_A: float
    grid: int
    det_oversample: int
    n_clamped: int
    seconds: float
