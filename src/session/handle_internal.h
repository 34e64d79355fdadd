/* handle_internal.h — what the replayed session (session.c) reads of a handle beyond the public
 * calls: the G it holds (for its hash) and the encoded bytes it counts. */
#ifndef SSB4D_SESSION_HANDLE_INTERNAL_H
#define SSB4D_SESSION_HANDLE_INTERNAL_H
#include "ssb4d_advanced.h"

const ssb4d_G *session_handle_G(const ssb4d_session *s);
size_t session_handle_encoded(const ssb4d_session *s);
#endif
