/* Helpers shared by the store's own files (not part of store.h's interface to others). */
#ifndef DLPG_STORE_STORE_INTERNAL_H_
#define DLPG_STORE_STORE_INTERNAL_H_

#include "dlpg/dlpg.h"
#include "store/store.h"

/* NaN is INVALID_ARGUMENT naming fn; else timeout_s when > 0, else dflt when > 0 (the
 * store's own timeout), else the default (dflt 0: opening a store); the rule and its clamp
 * are base/timeout.h's. */
dlpg_status_t dlpg__store_resolve_timeout(const char *fn, double timeout_s, double dflt,
                                          double *out);
/* NULL, empty or over-long key -> INVALID_ARGUMENT "fn: arg ...". */
dlpg_status_t dlpg__store_check_key(const char *fn, const char *arg, const char *key);

/* Copy url to out with every token=VALUE of its query shown as token=*** (messages never
 * carry the secret). */
void dlpg__store_url_redact(const char *url, char *out, size_t cap);
/* The next NAME[=VALUE] of a URL query (*q advances past it). 1: one read; 0: none left;
 * -1: a name or value longer than its buffer. */
int dlpg__store_query_next(const char **q, char *name, size_t ncap, char *value, size_t vcap);

/* The registered opener for url's scheme, or NULL; names gets ", NAME://..." for each
 * registered scheme (for the unknown-scheme message). */
dlpg__store_opener_t dlpg__store_find_scheme(const char *url, char *names, size_t cap);

#endif
