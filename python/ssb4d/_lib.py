"""The C library through ctypes: finding libssb4d, the public structs mirrored field by field
(checked against the library's own sizes at import), the functions' prototypes, and the status
codes turned into exceptions.

Nothing here is public API; ``ssb4d`` re-exports what users call.
"""
import ctypes
import ctypes.util
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int,
                    c_int32, c_size_t, c_uint16, c_uint64, c_void_p)

from .errors import _raise_for

N_ABERR = 14
PARALLAX_ALT = 3
PLAN_MAX_STAGES = 16


def _candidates():
    """Where libssb4d may be, first match wins."""
    env = os.environ.get('SSB4D_LIBRARY')
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    # the wheel of `pip install .` at the repository root carries its own library (setup.py)
    bundled = os.path.join(here, '_native', 'libssb4d.so.0')
    if os.path.exists(bundled):
        yield bundled
        return
    try:  # written by CMake into the build tree's copy of the package (build/python/ssb4d/)
        from . import _paths
        yield _paths.LIBRARY
    except ImportError:
        pass
    # the source tree (python/ssb4d/) beside a build folder made by the README's set-up
    yield os.path.join(here, '..', '..', 'build', 'libssb4d.so.0')
    yield os.path.join(here, 'libssb4d.so.0')
    # an installed library (ldconfig's cache, LD_LIBRARY_PATH)
    yield 'libssb4d.so.0'
    found = ctypes.util.find_library('ssb4d')
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + ' (not there)')
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append('%s (%s)' % (path, e))
    raise ImportError('ssb4d: cannot load libssb4d (build it with the README\'s set-up, or install it, '
                      'or set SSB4D_LIBRARY to its path); tried: ' + '; '.join(tried))


def cli_path():
    """The ``ssb4d`` command beside the library (the viewer runs it)."""
    env = os.environ.get('SSB4D_CLI')
    if env:
        return env
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), '_native', 'ssb4d')
    if os.path.isfile(bundled) and os.access(bundled, os.X_OK):  # the wheel's own command
        return bundled
    try:
        from . import _paths
        if os.path.exists(_paths.CLI):
            return _paths.CLI
    except ImportError:
        pass
    d = os.path.dirname(os.path.realpath(LIBRARY_PATH))
    for c in (os.path.join(d, 'ssb4d'), os.path.join(d, '..', 'bin', 'ssb4d')):
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    import shutil
    return shutil.which('ssb4d')


lib, LIBRARY_PATH = _load()

PROGRESS = CFUNCTYPE(c_int, c_void_p, c_char_p, c_double)


class Err(Structure):
    _fields_ = [('code', c_int), ('msg', c_char * 512)]


class StageRecord(Structure):
    _fields_ = [('name', c_char * 48), ('peak_bytes', c_size_t), ('after_bytes', c_size_t),
                ('live_after', c_size_t), ('cache_bytes', c_size_t), ('rss_peak_bytes', c_size_t),
                ('rss_after_bytes', c_size_t), ('seconds', c_double), ('device_peak_bytes', c_size_t)]


class Aberrations(Structure):
    _fields_ = [('C_nm', c_double * N_ABERR), ('phi_deg', c_double * N_ABERR)]


class Thick(Structure):
    _fields_ = [('tilt_mrad', c_double * 2), ('thickness_nm', c_double)]


class Geometry(Structure):
    _fields_ = [('kv', c_double), ('semiangle_mrad', c_double), ('scan_step_A', c_double * 2),
                ('det_sampling_mrad', c_double * 2), ('centre_px', c_double * 2), ('rotation_deg', c_double),
                ('flip', c_int)]


class CalibParams(Structure):
    _fields_ = [('kv', c_double), ('semiangle_mrad', c_double), ('scan_step_A', c_double * 2),
                ('det_sampling_mrad', c_double * 2), ('rotation_deg', c_double), ('flip', c_int), ('bf_radius_px', c_double),
                ('centre_px', c_double * 2), ('hot_pixels', c_int), ('threads', c_int), ('mem', c_void_p),
                ('block_bytes', c_size_t), ('edge_pixel_S', c_int)]


class Calibration(Structure):
    _fields_ = [('geom', Geometry), ('det_shape', c_size_t * 2), ('scan_shape', c_size_t * 2),
                ('disk_centre_px', c_double * 2), ('disk_radius_px', c_double), ('disk_threshold', c_double),
                ('disk_threshold_two_class', c_int), ('disk_threshold_half_median', c_int),
                ('edge_radius_px', c_double), ('selection_radius_px', c_double), ('rotation_curl_deg', c_double),
                ('curl_ratio', c_double), ('rotation_sigma_deg', c_double), ('det_sampling_fitted', c_int),
                ('rotation_fitted', c_int), ('centre_fitted', c_int), ('flip_fitted', c_int),
                ('curl_ratio_other', c_double), ('mean_pattern', POINTER(c_double)),
                ('bf_pix', POINTER(c_int32)), ('n_bf', c_size_t), ('flagged', POINTER(c_int32)),
                ('n_flagged', c_size_t), ('total_counts', c_double), ('det_sampling_measured_mrad', c_double),
                ('det_sampling_measured_sigma_mrad', c_double), ('edge_radius_sigma_px', c_double),
                ('edge_blur_px', c_double), ('edge_model', c_int), ('edge_radius_threshold_px', c_double),
                ('edge_model_stated', c_int)]


class Values(Structure):
    _fields_ = [('kv', c_double), ('semiangle_mrad', c_double), ('scan_step_A', c_double * 2),
                ('det_sampling_mrad', c_double * 2), ('centre_px', c_double * 2), ('rotation_deg', c_double),
                ('bf_radius_px', c_double), ('rotation_from', c_char * 32), ('flip', c_int), ('flip_from', c_char * 32),
                ('rotation_measured', c_int),
                ('rotation_sigma_deg', c_double), ('has_ab', c_int), ('ab_from_truth', c_int),
                ('ab', Aberrations), ('ab_from', c_char * 64), ('has_thick', c_int), ('thick', Thick),
                ('sidecar_path', c_char * 4096), ('calibration_identity', c_char * 96),
                ('source_format', c_char * 32), ('camera_length_mm', c_double), ('dwell_us', c_double),
                ('pixel_model_S', c_int)]


class Parallax(Structure):
    _fields_ = [('B', c_double * 4), ('J', c_double), ('n_alt', c_size_t),
                ('alt_B', (c_double * 4) * PARALLAX_ALT), ('alt_J', c_double * PARALLAX_ALT),
                ('C10_nm', c_double), ('C12_nm', c_double), ('phi12_deg', c_double), ('rotation_deg', c_double),
                ('est', c_double * 4), ('sigma', c_double * 4), ('flip', c_int), ('est_other', c_double * 4),
                ('sigma_other', c_double * 4), ('residual_A', c_double),
                ('n_offsets', c_size_t), ('n_bins', c_size_t), ('n_pixels', c_size_t), ('seconds', c_double)]


class FitTrial(Structure):
    _fields_ = [('stage', c_int), ('number', c_size_t), ('C10_nm', c_double), ('C12_nm', c_double),
                ('phi12_deg', c_double), ('loss', c_double), ('cached', c_int)]


class FitParams(Structure):
    _fields_ = [('lo', c_double * 3), ('hi', c_double * 3), ('start', c_double * 3), ('start_given', c_int),
                ('locked', c_int * 3), ('trials', c_size_t), ('batch', c_size_t), ('seed', c_uint64),
                ('fit_radius', c_double), ('coarse_bf', c_size_t), ('objective', c_int),
                ('band_lo_inv_A', c_double), ('band_hi_inv_A', c_double), ('use_parallax', c_int),
                ('rotation_given', c_int), ('rotation_sigma_deg', c_double), ('flip_given', c_int),
                ('flip_measured', c_int), ('branch_check', c_int),
                ('base', Aberrations), ('threads', c_int), ('progress', PROGRESS), ('progress_user', c_void_p)]


class FitResult(Structure):
    _fields_ = [('ab', Aberrations), ('phi12_probe_deg', c_double), ('geom', Geometry),
                ('rotation_source', c_char * 24), ('rotation_sigma_deg', c_double), ('flip_source', c_char * 24),
                ('flip_objective', c_double * 2), ('loss', c_double),
                ('objective', c_double), ('branch_flipped', c_int), ('skewness', c_double),
                ('skewness_other', c_double), ('parallax', Parallax), ('parallax_ok', c_int),
                ('loss_contrast', c_double), ('C10_se_nm', c_double), ('C12_se_nm', c_double),
                ('phi12_se_deg', c_double), ('rotation_se_deg', c_double), ('disk_split', c_double * 4),
                ('confident', c_int), ('warning', c_char * 256),
                ('n_fit_bf', c_size_t), ('n_coarse_bf', c_size_t), ('evaluations', c_size_t),
                ('nm_iterations', c_int), ('trace_sha256', c_char * 65), ('trials', POINTER(FitTrial)),
                ('n_trials', c_size_t), ('seconds', c_double)]


class SessionScript(Structure):
    _fields_ = [('upsample', c_int), ('fft', c_int), ('drags', c_size_t), ('releases', c_size_t),
                ('region', c_int), ('region_rect', c_size_t * 4), ('save', c_int)]


class PlanStage(Structure):
    _fields_ = [('name', c_char * 48), ('peak_bytes', c_size_t), ('after_bytes', c_size_t),
                ('cache_bytes', c_size_t), ('seconds', c_double), ('time_class', c_char * 24),
                ('tiles', c_char * 200)]


class Plan(Structure):
    _fields_ = [('fits', c_int), ('reason', c_char * 256), ('memory_bytes', c_size_t),
                ('min_memory_bytes', c_size_t), ('resident_memory_bytes', c_size_t), ('encoded_bytes', c_size_t),
                ('g_bytes', c_size_t), ('g_half_bytes', c_size_t), ('resident_bytes', c_size_t),
                ('session_peak_bytes', c_size_t), ('mode', c_char * 16), ('preview_half', c_int),
                ('fit_resident_bytes', c_size_t), ('preview_resident_bytes', c_size_t), ('block_bytes', c_size_t),
                ('group_bytes', c_size_t), ('fit_batch', c_size_t), ('calib_block_bytes', c_size_t),
                ('region_frees_g', c_int), ('region_resident_bytes', c_size_t),
                ('stages', PlanStage * PLAN_MAX_STAGES), ('n_stages', c_size_t), ('profile_source', c_char * 96)]


class MachineProfile(Structure):
    _fields_ = [('source', c_char * 96), ('threads', c_int), ('calibrate_ns', c_double), ('gbuild_ns', c_double),
                ('loss_ns', c_double), ('band_ns', c_double), ('object_ns', c_double)]


class PlanInput(Structure):
    _fields_ = [('scan', c_size_t * 2), ('det', c_size_t * 2), ('n_bf', c_size_t), ('n_stored', c_size_t),
                ('n_fit_bf', c_size_t), ('n_coarse_bf', c_size_t), ('encoded_bytes', c_size_t),
                ('rotation_fitted', c_int), ('threads', c_int), ('upsample', c_int), ('region', c_size_t * 2),
                ('memory_bytes', c_size_t), ('preview', c_int), ('fit_batch', c_size_t),
                ('script', POINTER(SessionScript)), ('fit', POINTER(FitParams)), ('no_fit', c_int),
                ('geometry', POINTER(Geometry)), ('profile', POINTER(MachineProfile))]


class SessionOpts(Structure):
    _fields_ = [('calib', CalibParams), ('memory_bytes', c_size_t), ('threads', c_int), ('backend', c_int),
                ('progress', PROGRESS), ('progress_user', c_void_p), ('script', POINTER(SessionScript)),
                ('fit', POINTER(FitParams)), ('no_fit', c_int), ('held_bytes', c_size_t),
                ('held_image_floats', c_size_t), ('rotation_measured', c_int), ('rotation_sigma_deg', c_double),
                ('region', c_size_t * 4), ('block_bytes', c_size_t), ('ssb_path', c_int), ('preview', c_int), ('dist', c_void_p),
                ('device_memory_bytes', c_size_t), ('rotation_from', c_char * 32)]


class TiltResult(Structure):
    _fields_ = [('C10_nm', c_double), ('C12_nm', c_double), ('phi12_deg', c_double), ('thick', Thick),
                ('gain', c_double), ('thin_kept', c_int), ('evaluations', c_size_t), ('trace_sha256', c_char * 65)]


class PreviewReq(Structure):
    _fields_ = [('ab', POINTER(Aberrations)), ('thick', POINTER(Thick)), ('rotation_deg', c_double),
                ('upsample', c_int), ('subset', c_size_t), ('estimator', c_int), ('want_loss', c_int)]


class ImportParams(Structure):
    _fields_ = [('format', c_char_p), ('dataset', c_char_p), ('shape', c_size_t * 4), ('dtype_bytes', c_int),
                ('big_endian', c_int), ('offset', c_size_t), ('hot', c_int), ('kv', c_double),
                ('semiangle_mrad', c_double), ('scan_step_A', c_double * 2), ('det_sampling_mrad', c_double * 2),
                ('evidence', c_char_p * 4), ('chunk_scans', c_size_t), ('threads', c_int), ('force', c_int),
                ('mem', c_void_p), ('progress', PROGRESS), ('progress_user', c_void_p), ('gain', c_double),
                ('dtype_float', c_int), ('more_paths', c_void_p), ('n_more_paths', c_size_t),
                ('camera_length_mm', c_double), ('dwell_us', c_double), ('flip', c_int)]


class ImportReport(Structure):
    _fields_ = [('shape', c_size_t * 4), ('source_dtype_bytes', c_int), ('stored_dtype_bytes', c_int),
                ('source_format', c_char_p), ('flagged_file', c_size_t), ('flagged_found', c_size_t),
                ('input_bytes', c_size_t), ('encoded_bytes', c_size_t), ('seconds', c_double), ('source_float', c_int),
                ('gain', c_double), ('gain_how', c_char * 96), ('quant_max_e', c_double), ('quant_rms_e', c_double),
                ('quant_clipped', c_size_t)]


class SimParams(Structure):
    _fields_ = [('specimen', c_int), ('cells_z', c_int), ('window_cells', c_int), ('kv', c_double),
                ('semiangle_mrad', c_double), ('ab', Aberrations), ('tilt_mrad', c_double * 2),
                ('scan_rotation_deg', c_double), ('scan_n', c_int), ('scan_cells', c_int), ('det', c_int),
                ('grid', c_int), ('det_oversample', c_int), ('dose', c_double), ('seed', c_uint64),
                ('threads', c_int), ('reuse_bytes', c_size_t), ('block_bytes', c_size_t),
                ('progress', PROGRESS), ('progress_user', c_void_p), ('det_flip', c_int),
                ('wedge_nm', c_double * 2)]


class SimInfo(Structure):
    _fields_ = [('grid', c_int), ('wavelength_A', c_double), ('sigma', c_double), ('lattice_A', c_double),
                ('window_A', c_double), ('det_oversample', c_int), ('sim_window_A', c_double),
                ('probe_footprint_A', c_double), ('real_sampling_A', c_double), ('scan_step_A', c_double),
                ('det_sampling_mrad', c_double), ('bf_radius_px', c_double), ('antialias_inv_A', c_double),
                ('thickness_nm', c_double), ('n_slices', c_int), ('mean_sum_full', c_double),
                ('min_sum_full', c_double), ('max_sum_full', c_double), ('mean_sum_detector', c_double),
                ('n_clamped', c_size_t), ('n_patterns', c_size_t), ('max_count', c_uint16), ('seconds', c_double)]


class VirtualParams(Structure):
    _fields_ = [('bf_inner_mrad', c_double), ('bf_outer_mrad', c_double), ('adf_inner_mrad', c_double),
                ('adf_outer_mrad', c_double), ('threads', c_int), ('block_bytes', c_size_t), ('mem', c_void_p),
                ('progress', c_void_p), ('progress_user', c_void_p)]


class VirtualImages(Structure):
    _fields_ = [('scan_shape', c_size_t * 2), ('bf', POINTER(c_double)), ('adf', POINTER(c_double)),
                ('com_x', POINTER(c_double)), ('com_y', POINTER(c_double)), ('idpc', POINTER(c_double)),
                ('bf_inner_mrad', c_double), ('bf_outer_mrad', c_double), ('adf_inner_mrad', c_double),
                ('adf_outer_mrad', c_double), ('detector_max_mrad', c_double), ('n_bf_pixels', c_size_t),
                ('n_adf_pixels', c_size_t), ('n_com_pixels', c_size_t), ('bf_default', c_int),
                ('centre_px', c_double * 2), ('det_sampling_mrad', c_double * 2), ('rotation_deg', c_double),
                ('flip', c_int), ('idpc_lambda_A', c_double), ('idpc_step_A', c_double * 2),
                ('idpc_unit', c_char * 16), ('seconds', c_double)]


class Param(Structure):  # one row of the parameter table (ssb4d_params)
    _fields_ = [('name', c_char_p), ('option', c_char_p), ('type', c_int), ('unit', c_char_p), ('min', c_double),
                ('max', c_double), ('default', c_double), ('choices', c_char_p), ('help', c_char_p),
                ('offset', c_size_t), ('flags', ctypes.c_uint)]

MIRRORS = {
    'ssb4d_err': Err, 'ssb4d_stage_record': StageRecord, 'ssb4d_aberrations': Aberrations,
    'ssb4d_thick': Thick, 'ssb4d_geometry': Geometry, 'ssb4d_calib_params': CalibParams,
    'ssb4d_calibration': Calibration, 'ssb4d_values': Values, 'ssb4d_parallax': Parallax,
    'ssb4d_fit_trial': FitTrial, 'ssb4d_fit_params': FitParams, 'ssb4d_fit_result': FitResult,
    'ssb4d_session_script': SessionScript, 'ssb4d_plan_stage': PlanStage, 'ssb4d_plan': Plan,
    'ssb4d_plan_input': PlanInput, 'ssb4d_session_opts': SessionOpts, 'ssb4d_tilt_result': TiltResult,
    'ssb4d_preview_req': PreviewReq, 'ssb4d_import_params': ImportParams, 'ssb4d_import_report': ImportReport,
    'ssb4d_sim_params': SimParams, 'ssb4d_sim_info': SimInfo, 'ssb4d_machine_profile': MachineProfile,
}

P = POINTER
VP = c_void_p
_PROTOS = {
    # name: (restype, argtypes); restype c_int = ssb4d_status
    'ssb4d_version': (c_char_p, []),
    'ssb4d_abi_sizeof': (c_size_t, [c_char_p]),
    'ssb4d_status_name': (c_char_p, [c_int]),
    'ssb4d_aberr_name': (c_char_p, [c_int]),
    'ssb4d_aberr_index': (c_int, [c_char_p]),
    'ssb4d_aberr_m': (c_int, [c_int]),
    'ssb4d_wavelength_A': (c_double, [c_double]),
    'ssb4d_upsample_auto': (c_int, [P(Geometry)]),
    'ssb4d_parse_size': (c_int, [c_char_p, P(c_size_t)]),
    'ssb4d_rss_now': (c_size_t, []),
    'ssb4d_rss_peak': (c_size_t, []),
    'ssb4d_mem_available': (c_size_t, []),
    'ssb4d_mem_stage_count': (c_size_t, [VP]),
    'ssb4d_mem_stage': (P(StageRecord), [VP, c_size_t]),
    'ssb4d_mem_peak': (c_size_t, [VP]),
    'ssb4d_mem_limit': (c_size_t, [VP]),
    'ssb4d_values_read': (c_int, [c_char_p, c_char_p, c_char_p, P(Values), P(Err)]),
    'ssb4d_values_rotation_from': (c_int, [c_char_p, P(Values), P(Err)]),
    'ssb4d_values_unset': (None, [P(Values)]),
    'ssb4d_calib_params_default': (None, [P(CalibParams)]),
    'ssb4d_fit_params_default': (None, [P(FitParams)]),
    'ssb4d_fit_result_free': (None, [P(FitResult)]),
    'ssb4d_session_script_default': (None, [P(SessionScript)]),
    'ssb4d_plan_input_default': (None, [P(PlanInput)]),
    'ssb4d_plan_make': (c_int, [P(PlanInput), P(Plan), P(Err)]),
    'ssb4d_session_opts_default': (None, [P(SessionOpts)]),
    'ssb4d_session_open': (c_int, [c_char_p, P(SessionOpts), P(VP), P(Err)]),
    'ssb4d_session_open_memory': (c_int, [VP, c_int, P(c_size_t), P(SessionOpts), P(VP), P(Err)]),
    'ssb4d_session_close': (None, [VP]),
    'ssb4d_session_cancel': (None, [VP]),
    'ssb4d_session_calibrate': (c_int, [VP, P(Err)]),
    'ssb4d_session_calibration': (P(Calibration), [VP]),
    'ssb4d_calibration_sampling_report': (c_int, [P(Calibration), c_char_p, c_size_t, c_char_p, c_size_t]),
    'ssb4d_session_plan': (P(Plan), [VP]),
    'ssb4d_session_shape': (None, [VP, P(c_size_t)]),
    'ssb4d_session_fit': (c_int, [VP, P(FitParams), P(FitResult), P(Err)]),
    'ssb4d_session_fit_params': (None, [VP, P(FitParams), P(FitParams)]),
    'ssb4d_session_fit_tilt': (c_int, [VP, P(TiltResult), P(Err)]),
    'ssb4d_session_get': (None, [VP, P(Aberrations), P(Thick), P(Geometry)]),
    'ssb4d_session_set': (None, [VP, P(Aberrations), P(Thick)]),
    'ssb4d_session_set_rotation': (c_int, [VP, c_double, P(Err)]),
    'ssb4d_session_set_flip': (c_int, [VP, c_int, P(Err)]),
    'ssb4d_session_apply': (None, [VP, P(FitResult)]),
    'ssb4d_preview_req_default': (None, [P(PreviewReq)]),
    'ssb4d_session_image_shape': (c_int, [VP, c_int, P(c_size_t), P(c_size_t), P(Err)]),
    'ssb4d_session_preview': (c_int, [VP, P(PreviewReq), VP, P(c_double), P(Err)]),
    'ssb4d_session_object': (c_int, [VP, c_int, VP, VP, P(Err)]),
    'ssb4d_session_release': (c_int, [VP, VP, VP, P(c_double), P(Err)]),
    'ssb4d_session_loss': (c_int, [VP, P(c_double), P(Err)]),
    'ssb4d_session_build': (c_int, [VP, P(Err)]),
    'ssb4d_session_G_info': (None, [VP, P(c_size_t), P(c_size_t), P(c_size_t), P(c_size_t)]),
    'ssb4d_session_check_region': (c_int, [VP, P(c_size_t), P(Err)]),
    'ssb4d_session_fit_region': (c_int, [VP, P(c_size_t), P(FitParams), P(FitResult), P(Err)]),
    'ssb4d_session_fit_regions': (c_int, [VP, c_size_t, c_size_t, P(FitParams), c_int, P(FitResult), P(c_size_t),
                                          P(c_size_t), P(Err)]),
    'ssb4d_session_branch_to_settle': (c_int, [VP, P(FitParams), c_size_t]),
    'ssb4d_session_settle_branch': (c_int, [VP, P(c_size_t), c_size_t, P(FitParams), P(FitResult), P(c_size_t),
                                            P(Err)]),
    'ssb4d_session_save_calibration': (c_int, [VP, c_char_p, c_int, P(Err)]),
    'ssb4d_session_load_calibration': (c_int, [VP, c_char_p, P(Err)]),
    'ssb4d_session_load_fit': (c_int, [VP, c_char_p, P(Err)]),
    'ssb4d_session_last_fit': (c_int, [VP, P(FitResult)]),
    'ssb4d_data_check': (c_int, [c_char_p, P(Err)]),
    'ssb4d_session_stage_begin': (None, [VP, c_char_p]),
    'ssb4d_session_stage_end': (None, [VP]),
    'ssb4d_session_mem': (VP, [VP]),
    'ssb4d_session_backend': (c_char_p, [VP]),
    'ssb4d_image_save': (c_int, [c_char_p, VP, c_size_t, c_size_t, P(c_double), c_char_p, P(Err)]),
    'ssb4d_import_params_default': (None, [P(ImportParams)]),
    'ssb4d_import': (c_int, [c_char_p, c_char_p, P(ImportParams), P(ImportReport), P(Err)]),
    'ssb4d_sim_params_preset': (c_int, [P(SimParams), c_char_p, P(Err)]),
    'ssb4d_sim_describe': (c_int, [P(SimParams), P(SimInfo), P(Err)]),
    'ssb4d_simulate_to_memory': (c_int, [P(SimParams), VP, VP, VP, VP, P(SimInfo), P(Err)]),
    'ssb4d_simulate': (c_int, [P(SimParams), c_char_p, c_int, c_char_p, P(SimInfo), P(Err)]),
    'ssb4d_virtual_params_default': (None, [P(VirtualParams)]),
    'ssb4d_virtual_free': (None, [P(VirtualImages)]),
    'ssb4d_virtual_workspace_bytes': (c_size_t, [P(c_size_t), c_size_t, P(c_size_t)]),
    'ssb4d_session_virtual': (c_int, [VP, P(VirtualParams), P(VirtualImages), P(Err)]),
    'ssb4d_params': (P(Param), [c_int, P(c_size_t)]),
    'ssb4d_param_describe': (c_char_p, [P(Param), c_char_p, c_size_t]),
    'ssb4d_param_set': (c_int, [P(Param), VP, P(c_double), P(Err)]),
}


def _bind():
    for name, (res, args) in _PROTOS.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    bad = []
    for cname, cls in MIRRORS.items():
        n = lib.ssb4d_abi_sizeof(cname.encode())
        if n != ctypes.sizeof(cls):
            bad.append('%s: library %d bytes, binding %d' % (cname, n, ctypes.sizeof(cls)))
    if bad:
        raise ImportError('ssb4d: the library at %s does not match this binding (%s); rebuild or reinstall '
                          'both from one version' % (LIBRARY_PATH, '; '.join(bad)))


# The virtual-image structs are checked where the library states their sizes (a library whose
# ssb4d_abi_sizeof does not know them yet answers 0: nothing to compare).
VIRTUAL_MIRRORS = {'ssb4d_virtual_params': VirtualParams, 'ssb4d_virtual_images': VirtualImages}


def _bind_virtual():
    for cname, cls in VIRTUAL_MIRRORS.items():
        n = lib.ssb4d_abi_sizeof(cname.encode())
        if n and n != ctypes.sizeof(cls):
            raise ImportError('ssb4d: the library at %s does not match this binding (%s: library %d bytes, binding '
                              '%d); rebuild or reinstall both from one version' % (LIBRARY_PATH, cname, n,
                                                                                 ctypes.sizeof(cls)))


def _with_tail(name, cname, fields):
    """A mirror of a struct whose later fields this binding does not read (the refinement's: the
    engine may add fields at their end, docs/refine.md): the known fields, then bytes up to the
    library's size, so that the library never writes past the binding's buffer."""
    known = type(name + 'Head', (Structure,), {'_fields_': fields})
    n = lib.ssb4d_abi_sizeof(cname.encode())
    if n and n < ctypes.sizeof(known):
        raise ImportError('ssb4d: the library at %s does not match this binding (%s: library %d bytes, binding %d); '
                          'rebuild or reinstall both from one version' % (LIBRARY_PATH, cname, n,
                                                                            ctypes.sizeof(known)))
    tail = max(0, n - ctypes.sizeof(known))
    return type(name, (Structure,), {'_fields_': fields + [('_tail', c_char * tail)]})


def _bind_refine():
    global RefineParams, RefineResult
    RefineParams = _with_tail('RefineParams', 'ssb4d_refine_params', [
        ('slices', c_int), ('thickness_nm', c_double), ('thickness_range_nm', c_double * 2), ('iterations', c_int),
        ('batch', c_size_t), ('loss', c_int), ('refine_aberrations', c_int), ('refine_tilt', c_int),
        ('refine_thickness', c_int), ('refine_probe', c_int), ('modes', c_int), ('bin', c_int), ('seed', c_uint64),
        ('threads', c_int), ('mem', c_void_p)])
    RefineResult = _with_tail('RefineResult', 'ssb4d_refine_result', [
        ('ab', Aberrations), ('phi12_probe_deg', c_double), ('tilt_mrad', c_double * 2),
        ('tilt_probe_mrad', c_double * 2), ('thickness_nm', c_double), ('slices', c_int), ('geom', Geometry),
        ('nll', c_double), ('nll_expected', c_double), ('history', POINTER(c_double)), ('n_history', c_size_t),
        ('confident', c_int), ('warning', c_char * 256), ('obj_shape', c_size_t * 2), ('obj_pixel_A', c_double * 2),
        ('slice_phase', POINTER(c_float)), ('projected_phase', POINTER(c_float)), ('probe_shape', c_size_t * 2),
        ('probe', POINTER(c_float)), ('region', c_size_t * 4), ('seconds', c_double),
        ('C10_entrance_nm', c_double), ('bin', c_int), ('seconds_per_iteration', c_double), ('grad', c_double * 6),
        ('curvature', c_double * 6), ('thickness_check_nm', c_double), ('tilt_refined', c_int),
        ('thickness_refined', c_int)])
    for name, res, args in (('ssb4d_refine_params_default', None, [P(RefineParams)]),
                            ('ssb4d_refine_result_free', None, [P(RefineResult)]),
                            ('ssb4d_session_refine', c_int, [VP, P(c_size_t), P(RefineParams), P(RefineResult),
                                                             P(Err)]),
                            ('ssb4d_session_last_refine', c_int, [VP, P(RefineResult)])):
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args


_bind()
_bind_virtual()
_bind_refine()
VERSION = lib.ssb4d_version().decode()


def check(status, err):
    """Raises the exception of a non-zero ssb4d_status, with the library's message."""
    if status:
        _raise_for(status, err.msg.decode('utf-8', 'replace'))


def s(b):
    """A C char array as str."""
    return b.decode('utf-8', 'replace') if isinstance(b, bytes) else b


def enc(p):
    """A path or str for a const char * argument (None stays NULL)."""
    if p is None:
        return None
    return os.fsencode(p)


__all__ = [n for n in dir() if not n.startswith('__')]
_unused = (c_float,)
