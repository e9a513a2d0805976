/* Logging (model: NCCL INFO/WARN). The level is checked before formatting, so a disabled
 * TRACE line costs one comparison. Lines: "host:pid:tid [rank] dlpg LEVEL SUBSYS message". */
#ifndef DLPG_BASE_LOG_H_
#define DLPG_BASE_LOG_H_

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DLPG__LOG_NONE = 0, DLPG__LOG_WARN = 1, DLPG__LOG_INFO = 2, DLPG__LOG_TRACE = 3 } dlpg__log_level_t;
typedef enum {
  DLPG__SUB_INIT = 1, DLPG__SUB_STORE = 2, DLPG__SUB_COLL = 4,
  DLPG__SUB_P2P = 8, DLPG__SUB_GLOO = 16
  /* A module's subsystem ("NCCL") is registered by name: dlpg__log_subsys_register. */
} dlpg__log_subsys_t;

extern int dlpg__log_level;  /* -1 until initialised from DLPG_DEBUG */
extern int dlpg__log_mask;
void dlpg__log_init(void);
int dlpg__log_enabled(dlpg__log_level_t level, dlpg__log_subsys_t sub);
/* rank < 0 prints "[-]". */
void dlpg__log(dlpg__log_level_t level, dlpg__log_subsys_t sub, int rank, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

void dlpg__vlog(dlpg__log_level_t level, dlpg__log_subsys_t sub, int rank, const char *fmt,
                va_list ap);

/* A subsystem named by its owner (a backend's table, core/backend.c's host table): the bit
 * of a known name, else a new bit, selected by DLPG_DEBUG_SUBSYS as the fixed ones are; the
 * same bit for the same name. 0 when no bit is left. */
int dlpg__log_subsys_register(const char *name);
#define DLPG_LOG(level, sub, rank, ...)                                         \
  do {                                                                          \
    if (dlpg__log_enabled(DLPG__LOG_##level, DLPG__SUB_##sub))                  \
      dlpg__log(DLPG__LOG_##level, DLPG__SUB_##sub, (rank), __VA_ARGS__);       \
  } while (0)
#define DLPG_WARN(sub, rank, ...) DLPG_LOG(WARN, sub, rank, __VA_ARGS__)
#define DLPG_INFO(sub, rank, ...) DLPG_LOG(INFO, sub, rank, __VA_ARGS__)
#define DLPG_TRACE(sub, rank, ...) DLPG_LOG(TRACE, sub, rank, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
