/* The TCP store server's limits from the DLPG_STORE_* parameters (base/params.h holds each
 * one's default and description). Defaults are far above what a 1 024-rank job uses; a
 * value that is not a positive number is ignored with a warning (the default stays). */
#include <math.h>

#include "base/log.h"
#include "base/params.h"
#include "store/tcp_server_internal.h"

static size_t dlpg__limit_size(dlpg__param_id_t id, const char *name, size_t dflt, size_t most) {
  long v = 0;
  if (!dlpg__param_long(id, &v)) return dflt;
  if (v <= 0) {
    DLPG_WARN(STORE, -1, "store server: %s=%ld is not positive; using %zu", name, v, dflt);
    return dflt;
  }
  return (size_t)v < most ? (size_t)v : most;
}

static double dlpg__limit_seconds(dlpg__param_id_t id, const char *name, double dflt) {
  double v = 0;
  if (!dlpg__param_double(id, &v)) return dflt;
  if (!(v > 0) || !isfinite(v)) {
    DLPG_WARN(STORE, -1, "store server: %s=%g is not positive; using %g s", name, v, dflt);
    return dflt;
  }
  return v;
}

/* A parameter and its name, for the warning. */
#define DLPG__LIM(id) DLPG__PARAM_##id, "DLPG_" #id

void dlpg__store_limits_load(dlpg__store_limits_t *l) {
  const size_t big = (size_t)1 << 50;
  l->max_conns = dlpg__limit_size(DLPG__LIM(STORE_MAX_CONNS), 16384, big);
  l->max_conns_per_peer = dlpg__limit_size(DLPG__LIM(STORE_MAX_CONNS_PER_PEER), 4096, big);
  l->max_reply_bytes = dlpg__limit_size(DLPG__LIM(STORE_MAX_REPLY_BYTES), 1u << 20, big);
  l->max_queued_bytes = dlpg__limit_size(DLPG__LIM(STORE_MAX_QUEUED_BYTES), 256u << 20, big);
  l->max_bytes = dlpg__limit_size(DLPG__LIM(STORE_MAX_BYTES), 512u << 20, big);
  l->max_keys = dlpg__limit_size(DLPG__LIM(STORE_MAX_KEYS), 1u << 20, big);
  l->max_key_bytes = dlpg__limit_size(DLPG__LIM(STORE_MAX_KEY_BYTES), DLPG_STORE_MAX_KEY_LEN,
                                      DLPG_STORE_MAX_KEY_LEN);
  l->max_value_bytes = dlpg__limit_size(DLPG__LIM(STORE_MAX_VALUE_BYTES), DLPG_STORE_MAX_VALUE_LEN,
                                        DLPG_STORE_MAX_VALUE_LEN);
  l->max_wait_keys =
      dlpg__limit_size(DLPG__LIM(STORE_MAX_WAIT_KEYS), 16384, DLPG__PROTO_MAX_FIELDS - 1);
  l->max_wait_s = dlpg__limit_seconds(DLPG__LIM(STORE_MAX_WAIT_S), 3600);
  l->frame_timeout_s = dlpg__limit_seconds(DLPG__LIM(STORE_FRAME_TIMEOUT_S), 30);
  l->idle_timeout_s = dlpg__limit_seconds(DLPG__LIM(STORE_IDLE_TIMEOUT_S), 3600);
  l->first_frame_timeout_s = dlpg__limit_seconds(DLPG__LIM(STORE_FIRST_FRAME_TIMEOUT_S), 10);
  l->max_pending_bytes = dlpg__limit_size(DLPG__LIM(STORE_MAX_PENDING_BYTES), 256u << 20, big);
}
