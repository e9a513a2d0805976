/* Logging's configuration (log.h): DLPG_DEBUG, DLPG_DEBUG_SUBSYS and DLPG_DEBUG_FILE, read through params.c
 * at the first check or line, configure the writer (log_writer.c), which formats and
 * filters. */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>

#include "base/log_writer.h"
#include "base/params.h"

static pthread_once_t dlpg__log_once = PTHREAD_ONCE_INIT;

static void dlpg__log_load(void) {
  dlpg__log_set_file(dlpg__param_str(DLPG__PARAM_DEBUG_FILE));
  dlpg__log_configure(dlpg__param_str(DLPG__PARAM_DEBUG),
                      dlpg__param_str(DLPG__PARAM_DEBUG_SUBSYS));
}

void dlpg__log_init(void) { pthread_once(&dlpg__log_once, dlpg__log_load); }

int dlpg__log_enabled(dlpg__log_level_t level, dlpg__log_subsys_t sub) {
  if (!dlpg__log_configured()) dlpg__log_init();
  return dlpg__log_would(level, sub);
}

void dlpg__vlog(dlpg__log_level_t level, dlpg__log_subsys_t sub, int rank, const char *fmt,
                va_list ap) {
  dlpg__log_init();
  dlpg__log_write(level, sub, rank, fmt, ap);
}

void dlpg__log(dlpg__log_level_t level, dlpg__log_subsys_t sub, int rank, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dlpg__vlog(level, sub, rank, fmt, ap);
  va_end(ap);
}
