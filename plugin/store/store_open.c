/* dlpg_store_open: parse the store URL and hand over to the implementation.
 *   tcp://HOST:PORT[?serve=1][&token=SECRET]
 *                               HOST may be a name, an IPv4 address or [an IPv6 address];
 *                               with serve=1 the server binds HOST only (* = every interface)
 *   env://                      the launcher's store (launcher.h: DLPG_STORE_URL, MASTER_ADDR
 *                               with DLPG_STORE_PORT or MASTER_PORT + 1, mpirun's or Slurm's);
 *                               rank 0 serves
 *   redis://HOST:PORT[/DB][?token=SECRET]   a Redis server (redis_store.c)
 *   other schemes               registered by their backend (dlpg__store_register_scheme):
 *                               file:///PATH by the Gloo island's FileStore
 * The token (tcp_auth.h) is ?token= or else DLPG_STORE_TOKEN; messages never show it (a
 * URL is quoted with the token's value replaced by ***). Every malformed URL is
 * DLPG_ERR_INVALID_ARGUMENT naming the URL and what is wrong. The launcher's variables are
 * read through base/params.h (never getenv). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/params.h"
#include "base/status.h"
#include "store/launcher.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "store/tcp_auth.h"

static const char dlpg__open_fn[] = "dlpg_store_open";

void dlpg__store_url_redact(const char *url, char *out, size_t cap) {
  size_t o = 0;
  for (const char *p = url; *p && o + 1 < cap;) {
    if ((p == url || p[-1] == '?' || p[-1] == '&') && strncmp(p, "token=", 6) == 0) {
      int w = snprintf(out + o, cap - o, "token=***");
      o += w > 0 && (size_t)w < cap - o ? (size_t)w : cap - o - 1;
      p += 6;
      while (*p && *p != '&') ++p;
      continue;
    }
    out[o++] = *p++;
  }
  out[o] = '\0';
}

static dlpg_status_t dlpg__bad_url(const char *url, const char *what) {
  char shown[512];
  dlpg__store_url_redact(url, shown, sizeof shown);
  return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: url \"%s\": %s", dlpg__open_fn, shown,
                     what);
}

/* The token: ?token= when given, else DLPG_STORE_TOKEN (NULL: none). */
static const char *dlpg__token(const char *from_url) {
  if (from_url && *from_url) return from_url;
  const char *env = dlpg__param_str(DLPG__PARAM_STORE_TOKEN);
  return env && *env ? env : NULL;
}

int dlpg__store_query_next(const char **q, char *name, size_t ncap, char *value, size_t vcap) {
  const char *p = *q;
  while (*p == '&') ++p;
  if (!*p) return 0;
  const char *end = strchr(p, '&');
  if (!end) end = p + strlen(p);
  const char *eq = memchr(p, '=', (size_t)(end - p));
  const char *nend = eq ? eq : end;
  if ((size_t)(nend - p) >= ncap || (eq && (size_t)(end - eq - 1) >= vcap)) return -1;
  memcpy(name, p, (size_t)(nend - p));
  name[nend - p] = '\0';
  size_t vlen = eq ? (size_t)(end - eq - 1) : 0;
  if (eq) memcpy(value, eq + 1, vlen);
  value[vlen] = '\0';
  *q = end;
  return 1;
}

/* Parse a decimal port 0..65535 spanning exactly [p, end). */
static int dlpg__parse_port(const char *p, const char *end, int *port) {
  if (p == end || end - p > 5) return -1;
  long v = 0;
  for (; p < end; ++p) {
    if (*p < '0' || *p > '9') return -1;
    v = v * 10 + (*p - '0');
  }
  if (v > 65535) return -1;
  *port = (int)v;
  return 0;
}

/* The "HOST:PORT" after the scheme of url (ending at '/', '?' or the end): HOST may be a
 * name, an IPv4 address or [an IPv6 address]. Sets host (malloc'ed), port and *rest (what
 * follows the port). form ("tcp://HOST:PORT") is quoted in messages. */
static dlpg_status_t dlpg__parse_hostport(const char *url, size_t scheme_len, const char *form,
                                          char **host, int *port, const char **rest) {
  const char *auth = url + scheme_len;
  const char *aend = auth + strcspn(auth, "/?");
  const char *hb, *he, *colon;
  char what[160];
  if (*auth == '[') {
    hb = auth + 1;
    he = memchr(hb, ']', (size_t)(aend - hb));
    if (!he) return dlpg__bad_url(url, "an IPv6 host opened with '[' has no closing ']'");
    colon = he + 1;
    if (colon >= aend || *colon != ':')
      return dlpg__bad_url(url, "expected ':PORT' after the bracketed host");
  } else {
    hb = auth;
    colon = NULL;
    for (const char *p = auth; p < aend; ++p)
      if (*p == ':') colon = p;
    snprintf(what, sizeof what, "missing ':PORT' (expected %s)", form);
    if (!colon) return dlpg__bad_url(url, what);
    he = colon;
  }
  snprintf(what, sizeof what, "the host is empty (expected %s)", form);
  if (he == hb) return dlpg__bad_url(url, what);
  if (dlpg__parse_port(colon + 1, aend, port) != 0)
    return dlpg__bad_url(url, "the port is not a decimal number in [0, 65535]");
  size_t hlen = (size_t)(he - hb);
  *host = (char *)malloc(hlen + 1);
  if (!*host) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", dlpg__open_fn);
  memcpy(*host, hb, hlen);
  (*host)[hlen] = '\0';
  *rest = aend;
  return DLPG_OK;
}

/* The query of a tcp:// or redis:// URL: token=SECRET, and serve=0|1 where serve is non-NULL.
 * token has room for DLPG__AUTH_TOKEN_MAX + 1 bytes. A refusal names the parameter and the
 * accepted ones. */
static dlpg_status_t dlpg__parse_query(const char *url, const char *rest, int *serve,
                                       char *token) {
  char name[16], value[DLPG__AUTH_TOKEN_MAX + 1];
  const char *q = *rest == '?' ? rest + 1 : "";
  const char *accepted = serve ? "serve=0|1, token=SECRET" : "token=SECRET";
  char what[160];
  dlpg_status_t st = DLPG_OK;
  int r = 0;
  while (st == DLPG_OK &&
         (r = dlpg__store_query_next(&q, name, sizeof name, value, sizeof value)) == 1) {
    int on = !strcmp(value, "1") || !strcmp(value, "true");
    int off = !strcmp(value, "0") || !strcmp(value, "false");
    what[0] = '\0';
    if (serve && strcmp(name, "serve") == 0) {
      if (on || off) *serve = on;
      else
        snprintf(what, sizeof what, "serve=%.16s%s (accepted: serve=0|1, also true|false)", value,
                 strlen(value) > 16 ? "..." : "");
    } else if (strcmp(name, "token") == 0) {
      if (*value) memcpy(token, value, strlen(value) + 1);
      else snprintf(what, sizeof what, "token= is empty (accepted: token=SECRET)");
    } else {
      snprintf(what, sizeof what, "unknown query parameter \"%s\" (accepted: %s)", name,
               accepted);
    }
    if (what[0]) st = dlpg__bad_url(url, what);
  }
  if (st == DLPG_OK && r < 0) {
    snprintf(what, sizeof what, "a query parameter is too long (a name has at most %zu bytes, a "
             "token at most %u; accepted: %s)", sizeof name - 1, DLPG__AUTH_TOKEN_MAX, accepted);
    st = dlpg__bad_url(url, what);
  }
  dlpg__auth_wipe(value, sizeof value);
  return st;
}

/* tcp://HOST:PORT[?serve=0|1][&token=SECRET] */
static dlpg_status_t dlpg__open_tcp(const char *url, double timeout_s, dlpg_store_t **out) {
  char *host = NULL;
  int port = 0;
  const char *rest = NULL;
  DLPG_CHECK(dlpg__parse_hostport(url, 6, "tcp://HOST:PORT", &host, &port, &rest));
  dlpg_status_t st = DLPG_OK;
  if (*rest == '/') st = dlpg__bad_url(url, "the host contains '/' (expected tcp://HOST:PORT)");
  int serve = 0;
  char token[DLPG__AUTH_TOKEN_MAX + 1] = "";
  if (st == DLPG_OK) st = dlpg__parse_query(url, rest, &serve, token);
  if (st == DLPG_OK && port == 0 && !serve)
    st = dlpg__bad_url(url, "port 0 is only valid with ?serve=1 (the server picks a free port)");
  if (st == DLPG_OK) st = dlpg__tcp_store_open(host, port, serve, dlpg__token(token), timeout_s, out);
  dlpg__auth_wipe(token, sizeof token);
  free(host);
  return st;
}

/* redis://HOST:PORT[/DB][?token=SECRET] */
static dlpg_status_t dlpg__open_redis(const char *url, double timeout_s, dlpg_store_t **out) {
  char *host = NULL;
  int port = 0;
  const char *rest = NULL;
  DLPG_CHECK(dlpg__parse_hostport(url, 8, "redis://HOST:PORT[/DB]", &host, &port, &rest));
  long db = 0;
  dlpg_status_t st = DLPG_OK;
  if (*rest == '/') {
    char *end = NULL;
    db = strtol(rest + 1, &end, 10);
    if (end == rest + 1 || (*end && *end != '?') || db < 0 || db > 1000000)
      st = dlpg__bad_url(url, "the database after '/' is not a number (redis://HOST:PORT/DB)");
    rest = end;
  }
  char token[DLPG__AUTH_TOKEN_MAX + 1] = "";
  if (st == DLPG_OK) st = dlpg__parse_query(url, rest, NULL, token);
  if (st == DLPG_OK && port == 0) st = dlpg__bad_url(url, "port 0 is not a redis server's port");
  if (st == DLPG_OK)
    st = dlpg__redis_store_open(host, port, (int)db, dlpg__token(token), timeout_s, out);
  dlpg__auth_wipe(token, sizeof token);
  free(host);
  return st;
}

static dlpg_status_t dlpg__open_url(const char *url, double t, dlpg_store_t **out);

/* env://: the launcher's store (launcher.h says where: DLPG_STORE_URL, MASTER_ADDR, this
 * host, Slurm's first node); its rank 0 serves on the address clients reach (DLPG_STORE_BIND
 * may say another, or * for every interface) and reaches its own server like everyone else. */
static dlpg_status_t dlpg__open_env(const char *url, double timeout_s, dlpg_store_t **out) {
  if (strcmp(url, "env://") != 0)
    return dlpg__bad_url(url, "env:// takes nothing after the scheme");
  dlpg__launch_t l;
  DLPG_CHECK(dlpg__launch_detect_env(1, &l));
  dlpg_status_t st;
  if (l.url[0]) {
    st = dlpg__open_url(l.url, timeout_s, out);
  } else {
    st = dlpg__tcp_store_open_ex(l.host, l.port, l.serve ? l.bind : NULL, dlpg__token(NULL),
                                 timeout_s, l.host, out);
  }
  if (st == DLPG_OK) return DLPG_OK;
  char prefix[1200];
  if (l.url[0]) {
    char shown[420];
    dlpg__store_url_redact(l.url, shown, sizeof shown);
    snprintf(prefix, sizeof prefix, "the store of DLPG_STORE_URL=\"%s\"", shown);
  } else {
    snprintf(prefix, sizeof prefix, "%s [%s]:%d (%s)",
             l.serve ? "serving the launcher's store on" : "the launcher's store at",
             l.serve ? l.bind : l.host, l.port, l.how);
  }
  return dlpg__error_prefix(st, prefix);
}

static dlpg_status_t dlpg__open_url(const char *url, double t, dlpg_store_t **out) {
  if (strncmp(url, "tcp://", 6) == 0) return dlpg__open_tcp(url, t, out);
  if (strncmp(url, "env://", 6) == 0) return dlpg__open_env(url, t, out);
  if (strncmp(url, "redis://", 8) == 0) return dlpg__open_redis(url, t, out);
  char names[256];
  dlpg__store_opener_t open = dlpg__store_find_scheme(url, names, sizeof names);
  if (!open) {
    char what[384];
    snprintf(what, sizeof what,
             "unknown scheme (expected tcp://HOST:PORT[?serve=1], env://, "
             "redis://HOST:PORT[/DB]%s)", names);
    return dlpg__bad_url(url, what);
  }
  return open(url, t, out);
}

dlpg_status_t dlpg_store_open(const char *url, double timeout_s, dlpg_store_t **store) {
  DLPG_ARG_CHECK(url != NULL, "%s: url is NULL", dlpg__open_fn);
  DLPG_ARG_CHECK(store != NULL, "%s: store is NULL (url \"%s\")", dlpg__open_fn, url);
  double t;
  DLPG_CHECK(dlpg__store_resolve_timeout(dlpg__open_fn, timeout_s, 0, &t));
  dlpg_store_t *s = NULL;
  dlpg_status_t st = dlpg__open_url(url, t, &s);
  if (st != DLPG_OK) {
    char prefix[512], shown[420];
    dlpg__store_url_redact(url, shown, sizeof shown);
    snprintf(prefix, sizeof prefix, "%s: url \"%s\"", dlpg__open_fn, shown);
    return dlpg__error_prefix(st, prefix);
  }
  *store = s;
  return DLPG_OK;
}
