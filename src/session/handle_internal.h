/* handle_internal.h — what the replayed session (session.c) reads of a handle beyond the public
 * calls: the G it holds (for its hash) and the encoded bytes it counts; and the parameters a
 * region's fit runs with (regions.c). */
#ifndef SSB4D_SESSION_HANDLE_INTERNAL_H
#define SSB4D_SESSION_HANDLE_INTERNAL_H
#include "ssb4d_advanced.h"

const ssb4d_G *session_handle_G(const ssb4d_session *s);
size_t session_handle_encoded(const ssb4d_session *s);
/* The device model's input for the field's session (plan_device_session, made with the plan):
 * what a GPU backend checks its G against, and what the device test compares the measured peak
 * with (tests/gpu/test_cuda.c). */
struct dev_session_in;
void session_handle_device_model(const ssb4d_session *s, struct dev_session_in *out);
/* The parameters ssb4d_session_fit_region runs with for p: p's, or (p NULL) the last fit's or the
 * defaults, as ssb4d_session_fit_params fills them (progress NULL). */
void session_region_fit_params(const ssb4d_session *s, const ssb4d_fit_params *p, ssb4d_fit_params *fp);
#endif
