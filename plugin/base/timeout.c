/* The timeout rule (timeout.h). */
#include "base/timeout.h"

#include "base/params.h"

double dlpg__timeout_or(double requested_s, double fallback_s) {
  double t = requested_s > 0 ? requested_s : fallback_s;
  return t > DLPG__MAX_TIMEOUT_S ? DLPG__MAX_TIMEOUT_S : t;
}

double dlpg__timeout_resolve(double requested_s) {
  double env = 0;
  if (!dlpg__param_double_min(DLPG__PARAM_TIMEOUT, 0, 0, "a number of seconds > 0", &env))
    env = DLPG__DEFAULT_TIMEOUT_S;
  return dlpg__timeout_or(requested_s, env);
}
