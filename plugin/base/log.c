/* Logging's configuration (log.h): DLPG_DEBUG, DLPG_DEBUG_SUBSYS and DLPG_DEBUG_FILE, read through params.c
 * at the first check or line, configure the writer (log_writer.c), which formats and
 * filters. */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "base/log_writer.h"
#include "base/params.h"

static pthread_once_t dlpg__log_once = PTHREAD_ONCE_INIT;

/* A level or subsystem name the writer does not know is warned about once (params.c), after
 * the configuration, so the warning itself is written. Subsystems are checked against those
 * registered by then: core's, the built-in backends' and the modules' the registry names
 * (core/lines/backend.c registers them before any line). */
static void dlpg__log_load(void) {
  const char *level = dlpg__param_str(DLPG__PARAM_DEBUG);
  const char *subsys = dlpg__param_str(DLPG__PARAM_DEBUG_SUBSYS);
  dlpg__log_set_file(dlpg__param_str(DLPG__PARAM_DEBUG_FILE));
  dlpg__log_configure(level, subsys);
  if (!dlpg__log_level_known(level))
    dlpg__param_reject_id(DLPG__PARAM_DEBUG, level, NULL, "NONE, WARN, INFO or TRACE");
  char name[64], names[512], accepted[640];
  if (dlpg__log_subsys_unknown(subsys, name, sizeof name)) {
    dlpg__log_subsys_names(names, sizeof names);
    snprintf(accepted, sizeof accepted, "a comma list of ALL, %s; ^ first excludes them",
             names);
    dlpg__param_reject_id(DLPG__PARAM_DEBUG_SUBSYS, subsys, name, accepted);
  }
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
