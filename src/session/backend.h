/* backend.h — which backend a session runs on, chosen at run time. A backend is one table,
 * ssb_backend (src/ssb/backend.h): whether it can run here, where the calibration runs and G is
 * built, its device memory, and the passes over the G it built, so the session handle (handle.c)
 * calls the stage functions. Every backend must give the CPU backend's results
 * (tests/test_session.c checks the CPU one against the stage functions; a new backend's tests
 * check it against the CPU one, SPEC §11). */
#ifndef SSB4D_SESSION_BACKEND_H
#define SSB4D_SESSION_BACKEND_H
#include "plan/device_model.h"
#include "ssb/backend.h"

/* What a device backend checks its G against before it takes it (issue 31): the session's passes
 * as the device model replays them (the grid, BF pixels and stored planes are taken from the G
 * built) and the device budget (ssb4d_session_opts.device_memory_bytes; 0: the device's free
 * memory). The ctx of session_device_check. */
typedef struct {
    dev_session_in model;
    size_t budget;
} session_device;

/* ssb_device_check's fn for a session_device: the session's device peak on G against the budget,
 * or the device's free memory when none is given (or when less is free). SSB4D_ENOMEM with one
 * line: the need, G's part, the work buffers' part, the budget and what to do. */
ssb4d_status session_device_check(const ssb_backend *b, const struct ssb4d_G *G, const void *dev, ssb4d_err *err);

/* The backend for a request: AUTO picks CUDA when the build has it and a device is present,
 * else the CPU; a named one that cannot run here is SSB4D_EINVAL with a clear message. */
ssb4d_status session_backend_select(ssb4d_backend_kind kind, const ssb_backend **out, ssb4d_err *err);
#endif
