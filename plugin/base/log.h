/* Logging (model: NCCL INFO/WARN). The level is checked before formatting, so a disabled
 * TRACE line costs one comparison. Lines: "host:pid:tid [rank] dlpg LEVEL SUBSYS message".
 * Core's subsystems are below; a backend registers its own by name
 * (dlpg__log_subsys_register) and logs with the bit it gets, which DLPG_DEBUG_SUBSYS then
 * selects by that name. */
#ifndef DLPG_BASE_LOG_H_
#define DLPG_BASE_LOG_H_

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DLPG__LOG_NONE = 0, DLPG__LOG_WARN = 1, DLPG__LOG_INFO = 2, DLPG__LOG_TRACE = 3 } dlpg__log_level_t;
/* A subsystem is one bit. An int, not an enum, so registered bits pass as well (C++ too). */
typedef int dlpg__log_subsys_t;
enum { DLPG__SUB_INIT = 1, DLPG__SUB_STORE = 2, DLPG__SUB_COLL = 4, DLPG__SUB_P2P = 8 };

/* The bit of subsystem name (letters, digits, '_'; up to 15), registered at the first call
 * and the same at every later one, so a module loaded late registers as well; a
 * DLPG_DEBUG_SUBSYS read before the registration selects it too. 0 when name is invalid or
 * every bit is taken: lines under 0 are filtered by level only. Any thread. */
dlpg__log_subsys_t dlpg__log_subsys_register(const char *name);
/* "INIT", a registered name, or "?". */
const char *dlpg__log_subsys_name(dlpg__log_subsys_t sub);

/* Reads DLPG_DEBUG and DLPG_DEBUG_SUBSYS once (also done by the first check below). */
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

/* DLPG_LOG_SUB(INFO, bit, rank, fmt, ...) logs under a subsystem bit (a registered one);
 * DLPG_LOG(INFO, INIT, ...) under DLPG__SUB_INIT. An owner may define DLPG__SUB_<NAME> as
 * its registered bit to write DLPG_INFO(<NAME>, ...). */
#define DLPG_LOG_SUB(level, sub, rank, ...)                                     \
  do {                                                                          \
    dlpg__log_subsys_t dlpg_sub_ = (sub);                                       \
    if (dlpg__log_enabled(DLPG__LOG_##level, dlpg_sub_))                        \
      dlpg__log(DLPG__LOG_##level, dlpg_sub_, (rank), __VA_ARGS__);             \
  } while (0)
#define DLPG_LOG(level, sub, rank, ...) DLPG_LOG_SUB(level, DLPG__SUB_##sub, rank, __VA_ARGS__)
#define DLPG_WARN(sub, rank, ...) DLPG_LOG(WARN, sub, rank, __VA_ARGS__)
#define DLPG_INFO(sub, rank, ...) DLPG_LOG(INFO, sub, rank, __VA_ARGS__)
#define DLPG_TRACE(sub, rank, ...) DLPG_LOG(TRACE, sub, rank, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
