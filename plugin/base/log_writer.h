/* The log writer (private to plugin/base): subsystem names and bits, the configured level
 * and subsystem mask, and the line writer. It reads no parameter: log.c configures it from
 * DLPG_DEBUG and DLPG_DEBUG_SUBSYS (read through params.c), and params.c, which must warn
 * about values it cannot parse, warns through the writer only, so the three files call each
 * other in one direction (log.c -> params.c -> log_writer.c). */
#ifndef DLPG_BASE_LOG_WRITER_H_
#define DLPG_BASE_LOG_WRITER_H_

#include <stdarg.h>
#include <stddef.h>

#include "base/log.h"

/* Configure from DLPG_DEBUG's and DLPG_DEBUG_SUBSYS's values (NULL: their defaults). The
 * first call wins; later ones change nothing. */
void dlpg__log_configure(const char *level, const char *subsys);
/* Send the lines to the file pattern names (DLPG_DEBUG_FILE: %h the host, %p the pid, %%
 * a '%') instead of stderr; NULL or "": stderr. Opened at the first line of each process
 * (a forked child opens its own); a file that cannot be opened gives one line on stderr and
 * the lines stay there. The first call wins. */
void dlpg__log_set_file(const char *pattern);
/* 1 when lv is a level DLPG_DEBUG accepts (NONE, WARN, INFO, TRACE, any case) or NULL. */
int dlpg__log_level_known(const char *lv);
/* 1, and the first name of spec (DLPG_DEBUG_SUBSYS) that is neither ALL nor a subsystem
 * registered so far copied into name, else 0. */
int dlpg__log_subsys_unknown(const char *spec, char *name, size_t cap);
/* The names registered so far, "INIT, STORE, COLL, P2P, ...". */
void dlpg__log_subsys_names(char *buf, size_t cap);
/* 1 once configured. */
int dlpg__log_configured(void);
/* Whether a line of level under sub passes the configuration (0 before it is configured). */
int dlpg__log_would(dlpg__log_level_t level, dlpg__log_subsys_t sub);
/* Write one line to the log (stderr or the file; no filtering). */
void dlpg__log_write(dlpg__log_level_t level, dlpg__log_subsys_t sub, int rank, const char *fmt,
                     va_list ap);

#endif
