/* Status names (from DLPG_STATUS_MAP in dlpg.h), thread-local last error and the check
 * macros (model: NCCL checks.h). Every internal function that fails records its message here with
 * dlpg__error() and returns the status, so the public entry point only propagates it. */
#ifndef DLPG_BASE_STATUS_H_
#define DLPG_BASE_STATUS_H_

#include <stdarg.h>
#include <stddef.h>
#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest message kept; longer ones are truncated with "...". */
#define DLPG__ERROR_MAX 1024

/* Record "fmt..." as the calling thread's last error and return status. */
dlpg_status_t dlpg__error(dlpg_status_t status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
dlpg_status_t dlpg__verror(dlpg_status_t status, const char *fmt, va_list ap);
/* The calling thread's last message (never NULL). */
const char *dlpg__last_error(void);
/* Prefix the current message with "prefix: " (used when a lower layer's error surfaces
 * through a public function). Returns status. */
dlpg_status_t dlpg__error_prefix(dlpg_status_t status, const char *prefix);
/* Write "prefix: msg" into out (msg NULL or "": the status name), or msg alone when it
 * already begins with "prefix:". Returns snprintf's count. */
int dlpg__format_prefixed(char *out, size_t cap, const char *prefix, const char *msg,
                          dlpg_status_t status);
void dlpg__clear_error(void);

/* The calling thread's last error kept across a step that may record its own (closing a
 * store, dropping a work, a store request made on the caller's behalf):
 *   dlpg__saved_error_t se; dlpg__error_save(&se); cleanup(); dlpg__error_restore(&se, st); */
typedef struct dlpg__saved_error {
  char msg[DLPG__ERROR_MAX];
} dlpg__saved_error_t;
void dlpg__error_save(dlpg__saved_error_t *s);
/* Make the saved message the thread's last error again; returns status. */
dlpg_status_t dlpg__error_restore(const dlpg__saved_error_t *s, dlpg_status_t status);

/* Propagate a non-OK status. */
#define DLPG_CHECK(call)                   \
  do {                                     \
    dlpg_status_t dlpg_s_ = (call);        \
    if (dlpg_s_ != DLPG_OK) return dlpg_s_; \
  } while (0)

/* Propagate through a single-exit cleanup label: sets st and jumps. */
#define DLPG_CHECK_GOTO(call, st, label) \
  do {                                   \
    (st) = (call);                       \
    if ((st) != DLPG_OK) goto label;     \
  } while (0)

/* Argument check at the door: fails with INVALID_ARGUMENT and the formatted message. */
#define DLPG_ARG_CHECK(cond, ...)                                   \
  do {                                                              \
    if (!(cond)) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
