/* Status names and the thread-local last error (dlpg.h, "Status and errors"). The names
 * come from DLPG_STATUS_MAP (dlpg.h), the enum's own table, so they cannot drift apart. */
#include "base/status.h"

#include <stdio.h>
#include <string.h>

/* One buffer per thread: dlpg_last_error() returns a pointer into it, valid until the next
 * dlpg call on the same thread overwrites it. */
static _Thread_local char dlpg__err_buf[DLPG__ERROR_MAX];

const char *dlpg_status_name(dlpg_status_t status) {
  switch (status) {
#define DLPG__STATUS_CASE(name, value, meaning) \
  case name:                                    \
    return #name;
    DLPG_STATUS_MAP(DLPG__STATUS_CASE)
#undef DLPG__STATUS_CASE
  }
  return "DLPG_ERR_UNKNOWN";
}

const char *dlpg_last_error(void) { return dlpg__err_buf; }

const char *dlpg__last_error(void) { return dlpg__err_buf; }

void dlpg__clear_error(void) { dlpg__err_buf[0] = '\0'; }

void dlpg__error_save(dlpg__saved_error_t *s) { memcpy(s->msg, dlpg__err_buf, sizeof s->msg); }

dlpg_status_t dlpg__error_restore(const dlpg__saved_error_t *s, dlpg_status_t status) {
  memcpy(dlpg__err_buf, s->msg, sizeof dlpg__err_buf);
  return status;
}

/* Marks a truncated message so a reader knows the tail is missing. */
static void dlpg__mark_truncated(int written) {
  if (written >= DLPG__ERROR_MAX) memcpy(dlpg__err_buf + DLPG__ERROR_MAX - 4, "...", 4);
}

dlpg_status_t dlpg__verror(dlpg_status_t status, const char *fmt, va_list ap) {
  /* The format may name the current message itself (e.g. "%s", dlpg__last_error()), so
   * format into a scratch buffer first. */
  char tmp[DLPG__ERROR_MAX];
  int n = vsnprintf(tmp, sizeof tmp, fmt ? fmt : "", ap);
  if (n < 0) {
    snprintf(dlpg__err_buf, sizeof dlpg__err_buf, "%s", dlpg_status_name(status));
    return status;
  }
  memcpy(dlpg__err_buf, tmp, sizeof tmp);
  dlpg__err_buf[DLPG__ERROR_MAX - 1] = '\0';
  dlpg__mark_truncated(n);
  return status;
}

dlpg_status_t dlpg__error(dlpg_status_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dlpg__verror(status, fmt, ap);
  va_end(ap);
  return status;
}

int dlpg__format_prefixed(char *out, size_t cap, const char *prefix, const char *msg,
                          dlpg_status_t status) {
  if (!msg || !msg[0]) msg = dlpg_status_name(status);
  size_t plen = strlen(prefix);
  /* Do not prefix twice when the lower layer already named the same function. */
  if (strncmp(msg, prefix, plen) == 0 && msg[plen] == ':') return snprintf(out, cap, "%s", msg);
  return snprintf(out, cap, "%s: %s", prefix, msg);
}

dlpg_status_t dlpg__error_prefix(dlpg_status_t status, const char *prefix) {
  if (!prefix || !prefix[0]) return status;
  char tmp[DLPG__ERROR_MAX];
  int n = dlpg__format_prefixed(tmp, sizeof tmp, prefix, dlpg__err_buf, status);
  memcpy(dlpg__err_buf, tmp, sizeof tmp);
  if (n >= 0) dlpg__mark_truncated(n);
  return status;
}
