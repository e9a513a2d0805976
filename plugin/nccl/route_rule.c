/* The rule of route.c on the published strings (route_rule.h): pure, so unit tests drive
 * it with made-up hosts and GPUs. */
#include "nccl/route_rule.h"

#include <stdio.h>
#include <string.h>

#include "base/status.h"

/* settings.h's dlpg__cuda_path_t, without its header's needs. */
#define DLPG__RULE_AUTO 0
#define DLPG__RULE_IPC 2

/* Length of the first nfields '|'-separated fields of w. */
static size_t dlpg__prefix(const char *w, int nfields) {
  size_t i = 0;
  for (int f = 0; w[i]; i++)
    if (w[i] == '|' && ++f == nfields) break;
  return i;
}
/* The first nfields fields of a and b are equal. */
static int dlpg__same(const char *a, const char *b, int nfields) {
  size_t la = dlpg__prefix(a, nfields), lb = dlpg__prefix(b, nfields);
  return la == lb && memcmp(a, b, la) == 0;
}

/* The host part of w ("host=..,boot=..,pidns=.."), into buf: what two ranks must share. */
static const char *dlpg__host_of(const char *w, char *buf, size_t cap) {
  snprintf(buf, cap, "%.*s", (int)dlpg__prefix(w, 1), w);
  return buf;
}

/* The field that starts with key= in w, into buf. */
static const char *dlpg__field(const char *w, const char *key, char *buf, size_t cap) {
  size_t kl = strlen(key);
  for (const char *p = w; p && *p; p = strpbrk(p, "|,") ? strpbrk(p, "|,") + 1 : NULL) {
    if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
      size_t l = strcspn(p + kl + 1, "|,");
      snprintf(buf, cap, "%.*s", (int)l, p + kl + 1);
      return buf;
    }
  }
  snprintf(buf, cap, "?");
  return buf;
}

/* One GPU: a GPU's UUID is unique, so whatever else differs (two containers of a host). */
static int dlpg__same_gpu(const char *a, const char *b) {
  char ga[64], gb[64];
  dlpg__field(a, "gpu", ga, sizeof ga);
  dlpg__field(b, "gpu", gb, sizeof gb);
  return strcmp(ga, "?") != 0 && strcmp(ga, gb) == 0;
}

dlpg_status_t dlpg__route_rule(const char *fn, const char *group, int forced, const int *ranks,
                               int nr, const char *const *w, int max_ipc, int *route, char *why,
                               size_t cap) {
  /* far: the first rank on another host than ranks[0]; dup_a, dup_b: the first two sharing
   * a GPU (-1: none). */
  int far = -1, dup_a = -1, dup_b = -1;
  for (int i = 0; i < nr; i++) {
    if (far < 0 && !dlpg__same(w[0], w[i], 1)) far = i;
    for (int j = 0; j < i && dup_a < 0; j++)
      if (dlpg__same_gpu(w[j], w[i])) dup_a = j, dup_b = i;
  }
  char h0[256], hf[256], dh[128], gpu[40], d[8];
  if (forced == DLPG__RULE_AUTO && dup_a < 0) {
    *route = DLPG__ROUTE_NCCL;
    snprintf(why, cap, "every rank has a GPU of its own");
    return DLPG_OK;
  }
  if (far >= 0) {
    /* Here DLPG_CUDA_BACKEND=ipc, or two ranks share a GPU. */
    const char *lead = "DLPG_CUDA_BACKEND=ipc, but the CUDA IPC path serves only ranks of one host";
    if (dup_a >= 0 && forced != DLPG__RULE_IPC)
      return dlpg__error(DLPG_ERR_UNSUPPORTED,
                         "%s: group '%s': ranks %d and %d share GPU %s (cuda:%s of host %s), "
                         "which NCCL cannot serve (it needs a GPU per rank), and the CUDA IPC "
                         "path serves only ranks of one host, but rank %d runs on %s and rank "
                         "%d on %s; give each rank its own GPU or keep the group on one host",
                         fn, group, ranks[dup_a], ranks[dup_b],
                         dlpg__field(w[dup_a], "gpu", gpu, sizeof gpu),
                         dlpg__field(w[dup_a], "dev", d, sizeof d),
                         dlpg__field(w[dup_a], "host", dh, sizeof dh), ranks[0],
                         dlpg__host_of(w[0], h0, sizeof h0), ranks[far],
                         dlpg__host_of(w[far], hf, sizeof hf));
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: group '%s': %s: rank %d runs on %s, rank "
                       "%d on %s", fn, group, lead, ranks[0], dlpg__host_of(w[0], h0, sizeof h0),
                       ranks[far], dlpg__host_of(w[far], hf, sizeof hf));
  }
  if (nr > max_ipc)
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: group '%s' has %d ranks; the CUDA IPC path "
                       "serves at most %d (ranks %d and %d share GPU %s)", fn, group,
                       nr, max_ipc, dup_a >= 0 ? ranks[dup_a] : -1,
                       dup_b >= 0 ? ranks[dup_b] : -1,
                       dup_a >= 0 ? dlpg__field(w[dup_a], "gpu", gpu, sizeof gpu) : "?");
  *route = DLPG__ROUTE_IPC;
  if (dup_a >= 0)
    snprintf(why, cap, "ranks %d and %d share GPU %s on host %s, which NCCL cannot serve",
             ranks[dup_a], ranks[dup_b], dlpg__field(w[dup_a], "gpu", gpu, sizeof gpu),
             dlpg__field(w[0], "host", h0, sizeof h0));
  else
    snprintf(why, cap, "DLPG_CUDA_BACKEND=ipc, all on host %s",
             dlpg__field(w[0], "host", h0, sizeof h0));
  return DLPG_OK;
}
