/*
 * xla_ffi.h -- internal to plugin/xla: what the XLA FFI handler files share.
 *
 * libdlpg_xla.so holds XLA FFI handlers (one per operation and platform) that JAX registers
 * with jax.ffi.register_ffi_target. It is written against the FFI C API header that jaxlib
 * ships (xla/ffi/api/c_api.h under jax.ffi.include_dir()) and reaches dlpg only through
 * the dlpg_api_t table of a libdlpg.so that the host names (dlpg_xla_load), so that the
 * handlers and the Python shim share one loaded copy of dlpg and its group handles.
 */
#ifndef DLPG_XLA_FFI_H_
#define DLPG_XLA_FFI_H_

#include <stdint.h>

#include <dlpg/dlpg.h>

#include "xla/ffi/api/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The platform a handler was registered for. */
typedef enum dlpg_xla_platform { DLPG_XLA_CPU = 0, DLPG_XLA_CUDA = 1 } dlpg_xla_platform_t;

/* What a handler needs from its call frame (bit flags). */
enum {
  DLPG_XLA_NEEDS_INPUT = 1 << 0,  /* one non-token argument buffer */
  DLPG_XLA_NEEDS_OUTPUT = 1 << 1, /* one non-token result buffer */
  DLPG_XLA_NEEDS_OP = 1 << 2,     /* attribute "op" (dlpg_reduce_op_t) */
  DLPG_XLA_NEEDS_ROOT = 1 << 3,   /* attribute "root" */
  DLPG_XLA_NEEDS_PEER = 1 << 4,   /* attributes "peer" and "tag" */
  DLPG_XLA_NEEDS_SOURCE = 1 << 5, /* attribute "source" (sendrecv: peer is where it sends) */
  DLPG_XLA_NEEDS_COUNTS = 1 << 6  /* int64 array attributes "send_counts", "send_displs",
                                     "recv_counts", "recv_displs" (alltoallv), one entry
                                     per rank of the group */
};

/* The int64 array attributes of DLPG_XLA_NEEDS_COUNTS, in their order there. */
enum { DLPG_XLA_SEND_COUNTS, DLPG_XLA_SEND_DISPLS, DLPG_XLA_RECV_COUNTS, DLPG_XLA_RECV_DISPLS,
       DLPG_XLA_NCOUNTS };

/* One decoded call: the group, the buffers as DLTensors, the attributes and the stream. */
typedef struct dlpg_xla_call {
  const char *op;                /* operation name, for messages ("allreduce") */
  dlpg_xla_platform_t platform;
  const XLA_FFI_Api *xla;
  const dlpg_api_t *dl;
  dlpg_group_t *group;
  DLTensor input, output;
  int64_t reduce_op, root, peer, tag, source;
  const int64_t *counts[DLPG_XLA_NCOUNTS]; /* XLA's attribute storage, group size entries */
  int rank, size;                /* this rank and the group's size (read for every call) */
  void *stream;                  /* CUDA: the stream XLA hands over; CPU: NULL */
} dlpg_xla_call_t;

typedef XLA_FFI_Error *(*dlpg_xla_run_fn)(dlpg_xla_call_t *call);

/* The whole life of one handler call: answers XLA's metadata query, decodes the frame
 * (needs: DLPG_XLA_NEEDS_* flags), runs run and turns any failure into an XLA_FFI_Error. */
XLA_FFI_Error *dlpg_xla__handle(XLA_FFI_CallFrame *frame, const char *op,
                                dlpg_xla_platform_t platform, unsigned needs,
                                dlpg_xla_run_fn run);

/* An XLA_FFI_Error with a formatted message (never NULL unless XLA itself fails). */
XLA_FFI_Error *dlpg_xla__error(const XLA_FFI_Api *xla, XLA_FFI_Error_Code code,
                               const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* NULL for DLPG_OK, else an XLA_FFI_Error carrying dlpg's own message for this call. */
XLA_FFI_Error *dlpg_xla__check(const dlpg_xla_call_t *call, dlpg_status_t status);

/* The loaded dlpg table (NULL before dlpg_xla_load) and the group registered under id. */
const dlpg_api_t *dlpg_xla__api(void);
dlpg_group_t *dlpg_xla__group(int64_t id);

/* ------------------------------------------------------------------ exported for the host */

/* The library is built with -fvisibility=hidden: only these and the handlers are exported. */
#define DLPG_XLA_EXPORT __attribute__((visibility("default")))

/* Bind this library to the libdlpg.so at path (the copy the host already loaded), through
 * dlopen + dlpg_get_api. Idempotent for the same path. */
DLPG_XLA_EXPORT dlpg_status_t dlpg_xla_load(const char *path);

/* Register group for use by handlers; *id (> 0) is what the "group" attribute carries.
 * A compiled computation keeps the id, never a pointer, so a stale id after unregister
 * fails with a message instead of touching a destroyed group. */
DLPG_XLA_EXPORT dlpg_status_t dlpg_xla_group_register(dlpg_group_t *group, int64_t *id);
DLPG_XLA_EXPORT dlpg_status_t dlpg_xla_group_unregister(int64_t id);

/* The message of the calling thread's last failed dlpg_xla_* call ("" if none). */
DLPG_XLA_EXPORT const char *dlpg_xla_last_error(void);

/* "xla ffi api 0.N (header), device ordinal: yes|no" -- what this build was compiled with. */
DLPG_XLA_EXPORT const char *dlpg_xla_build_info(void);

#ifdef __cplusplus
}
#endif

#endif /* DLPG_XLA_FFI_H_ */
