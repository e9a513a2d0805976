/* The one rule for how long a blocking step may take, shared by groups (core/door/group.c) and
 * stores (plugin/store): the caller's timeout when positive, else DLPG_TIMEOUT when positive,
 * else DLPG__DEFAULT_TIMEOUT_S; never more than a year. Rejecting a NaN (or an infinite
 * group option) stays with each caller, whose message names its argument. */
#ifndef DLPG_BASE_TIMEOUT_H_
#define DLPG_BASE_TIMEOUT_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds, an integer, so that it also reads as DLPG_TIMEOUT's default in params.h's table
 * (DLPG__DEFAULT_TIMEOUT_STR, "300"). */
#define DLPG__DEFAULT_TIMEOUT_S 300
#define DLPG__TIMEOUT_STR_(x) #x
#define DLPG__TIMEOUT_STR(x) DLPG__TIMEOUT_STR_(x)
#define DLPG__DEFAULT_TIMEOUT_STR DLPG__TIMEOUT_STR(DLPG__DEFAULT_TIMEOUT_S)
/* A year: deadlines stay finite, and Gloo, which converts a deadline to nanoseconds, does
 * not overflow (and time out at once). */
#define DLPG__MAX_TIMEOUT_S (365.0 * 86400.0)

/* requested_s when > 0, else the default: DLPG_TIMEOUT when positive and finite, else
 * DLPG__DEFAULT_TIMEOUT_S. Clamped to DLPG__MAX_TIMEOUT_S. */
double dlpg__timeout_resolve(double requested_s);
/* requested_s when > 0, else fallback_s (an already resolved timeout, such as a store's).
 * Clamped to DLPG__MAX_TIMEOUT_S. */
double dlpg__timeout_or(double requested_s, double fallback_s);

#ifdef __cplusplus
}
#endif
#endif
