/* Scoped rendezvous (rendezvous.h). A store may outlive many jobs that use one group name,
 * so keys of an earlier creation (a stale address, a dead rank's entry) must never be read
 * by a later one. Each creation gets a generation N from a counter under <base>/gen, and
 * every key of the creation lives under <base>/g<N>. Rank 0 takes N; the others cannot tell
 * rank 0's counter value of this job from one of an earlier job, so they ask for it:
 *   rank r != 0: sets <base>/hello/<r> = "<nonce> <size>" (a fresh random nonce, re-sent
 *                now and then) and waits for <base>/welcome/<r>/<nonce>, which only this
 *                job's rank 0 can write, holding N (or "!message");
 *   rank 0:      answers every hello it sees until every rank has claimed its place,
 *                then writes <base>/g<N>/go = "ok" (or "!message") for all.
 *   every rank:  adds 1 to <base>/g<N>/claim/<r>: 2 means two processes claim rank r.
 * A stale hello gets an answer nobody reads; a stale welcome has a nonce nobody waits on.
 * What stays on the store per base: the counter, <base>/last (the last generation started
 * and its world size, for naming a second process of one rank or a rank beyond that size)
 * and each rank's latest hello (a reader may be between a hello's counter and its value, so
 * hellos are overwritten, never deleted). */
#include "core/group/rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"

#define RDV_KEY_MAX (DLPG__RDV_SCOPE_MAX + 96)
/* How often a rank re-sends its hello (another process of the same rank may have
 * overwritten it before rank 0 read it). */
#define RDV_RESEND_S 0.5
/* Rank 0 keeps collecting hellos this long after a world-size mismatch, to name more ranks. */
#define RDV_MISMATCH_GRACE_S 0.5
/* Waiting ranks may read rank 0's verdict this long after their deadline, so that a missing
 * rank is named rather than reported as a bare timeout (well under the 1 s allowance). */
#define RDV_VERDICT_GRACE_S 0.5

static int rdv_aborted(const atomic_int *aborted) { return aborted && atomic_load(aborted); }

uint64_t dlpg__rdv_nonce(void) {
  uint64_t n = 0;
  if (getrandom(&n, sizeof n, GRND_NONBLOCK) != (ssize_t)sizeof n) {
    static atomic_uint_fast64_t counter;
    n = ((uint64_t)getpid() << 32) ^ (uint64_t)(dlpg__now() * 1e9) ^
        (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull);
  }
  return n ? n : 1;
}

/* Values are "posted": <key>/v holds the value, then the counter <key> is incremented, and
 * readers probe the counter (add 0, never blocking) before they get the value, which then
 * exists. Neither store_check (torch's PrefixStore lacks it) nor a get or wait that may time
 * out (after one, torch's TCPStore client reads the server's late answer as the reply to its
 * next request) is used on a key that may be absent. */
void dlpg__rdv_post(dlpg_store_t *s, const char *key, const char *value) {
  char vkey[RDV_KEY_MAX + 4];
  snprintf(vkey, sizeof vkey, "%s/v", key);
  if (dlpg_store_set(s, vkey, value, strlen(value)) == DLPG_OK) dlpg_store_add(s, key, 1, NULL);
}

void dlpg__rdv_unpost(dlpg_store_t *s, const char *key) {
  char vkey[RDV_KEY_MAX + 4];
  snprintf(vkey, sizeof vkey, "%s/v", key);
  dlpg_store_delete_key(s, key, NULL);
  dlpg_store_delete_key(s, vkey, NULL);
}

/* Read the value posted under key into buf (NUL-terminated). 1: read; 0: not posted;
 * -1: error. */
int dlpg__rdv_try_get(dlpg_store_t *s, const char *key, char *buf, size_t cap) {
  int64_t n = 0;
  if (dlpg_store_add(s, key, 0, &n) != DLPG_OK) return -1;
  if (n <= 0) return 0;
  char vkey[RDV_KEY_MAX + 4];
  snprintf(vkey, sizeof vkey, "%s/v", key);
  size_t len = 0;
  if (dlpg_store_get(s, vkey, 5.0, buf, cap - 1, &len) != DLPG_OK) return -1;
  buf[len < cap - 1 ? len : cap - 1] = '\0';
  return 1;
}

/* The counter under key (0 when absent; the probe creates it at 0). -1 on error. */
int64_t dlpg__rdv_count(dlpg_store_t *s, const char *key) {
  int64_t v = 0;
  return dlpg_store_add(s, key, 0, &v) == DLPG_OK ? v : -1;
}

/* Poll key until it exists, the deadline passes or the group is aborted. 1: read; 0: the
 * deadline passed; -1: store error or abort (status in *st, message recorded). */
static int rdv_poll_get(dlpg_store_t *s, const char *key, double deadline,
                        const atomic_int *aborted, const char *what, char *buf, size_t cap,
                        void (*resend)(void *), void *resend_arg, dlpg_status_t *st) {
  double sleep_s = 0.0005, next_resend = dlpg__now() + RDV_RESEND_S;
  for (;;) {
    if (rdv_aborted(aborted)) {
      *st = dlpg__error(DLPG_ERR_ABORTED, "%s: the group was aborted", what);
      return -1;
    }
    int r = dlpg__rdv_try_get(s, key, buf, cap);
    if (r < 0) *st = dlpg__error(DLPG_ERR_REMOTE, "%s: the store failed: %s", what, dlpg__last_error());
    if (r != 0) return r;
    double now = dlpg__now();
    if (now >= deadline) return 0;
    if (resend && now >= next_resend) {
      resend(resend_arg);
      next_resend = now + RDV_RESEND_S;
    }
    double left = deadline - now;
    dlpg__sleep(sleep_s < left ? sleep_s : left);
    if (sleep_s < 0.02) sleep_s *= 2;
  }
}

struct rdv_hello {
  dlpg_store_t *store;
  const char *key;
  char value[64];
  int other; /* another process changed or removed this rank's hello while it waited */
};

/* Re-send the hello. Only a live process changes a hello (stale ones never change), and
 * hellos are never deleted: a hello not as this process left it
 * means another process claims the same rank. */
static void rdv_send_hello(void *arg) {
  struct rdv_hello *h = arg;
  char now[64];
  if (dlpg__rdv_try_get(h->store, h->key, now, sizeof now) != 1 || strcmp(now, h->value) != 0)
    h->other = 1;
  dlpg__rdv_post(h->store, h->key, h->value);
}

/* The generation counter under base now (0 when absent or unreadable). */
static long long rdv_generation(dlpg_store_t *s, const char *base) {
  char key[RDV_KEY_MAX];
  int64_t gen = 0;
  snprintf(key, sizeof key, "%s/gen", base);
  if (dlpg_store_add(s, key, 0, &gen) != DLPG_OK) return 0;
  return (long long)gen;
}

/* The last generation rank 0 started (<base>/last = "<gen> <size>", one key per base), or
 * -1; its world size into *size (0 when not recorded). */
static long long rdv_last_started(dlpg_store_t *s, const char *base, int *size) {
  char key[RDV_KEY_MAX], buf[48];
  long long gen = -1;
  *size = 0;
  snprintf(key, sizeof key, "%s/last", base);
  /* An unreadable value leaves gen at -1 (sscanf assigns nothing then). */
  if (dlpg__rdv_try_get(s, key, buf, sizeof buf) == 1) sscanf(buf, "%lld %d", &gen, size);
  return gen;
}

/* Whether generation gen started and its last rank already left (its go verdict, at
 * go_key, is gone while base's last started generation is gen): a process admitted to it
 * that claims its rank only then (a second process of a rank, slower than the first) finds
 * its claim fresh, as the leaving ranks removed the claims, and would wait for a verdict
 * that was given and removed. */
static int rdv_group_went_ahead(dlpg_store_t *s, const char *base, const char *go_key,
                                long long gen) {
  int size = 0;
  char buf[256];
  return rdv_last_started(s, base, &size) == gen && dlpg__rdv_try_get(s, go_key, buf, sizeof buf) == 0;
}

/* Rank r != 0: ask this job's rank 0 for the generation. */
static dlpg_status_t rdv_join(dlpg_store_t *s, const char *base, const char *what, int rank,
                              int size, double deadline, const atomic_int *aborted,
                              long long *gen) {
  const double timeout_s = deadline - dlpg__now();
  char hello_key[RDV_KEY_MAX], welcome_key[RDV_KEY_MAX], buf[1024];
  uint64_t nonce = dlpg__rdv_nonce();
  snprintf(hello_key, sizeof hello_key, "%s/hello/%d", base, rank);
  snprintf(welcome_key, sizeof welcome_key, "%s/welcome/%d/%016" PRIx64, base, rank, nonce);
  const long long gen_at_start = rdv_generation(s, base);
  struct rdv_hello h = {s, hello_key, {0}, 0};
  snprintf(h.value, sizeof h.value, "%016" PRIx64 " %d", nonce, size);
  dlpg_status_t st = dlpg_store_add(s, hello_key, 0, NULL); /* reaches the store? */
  if (st != DLPG_OK) return dlpg__error(st, "%s: rank %d: %s", what, rank, dlpg__last_error());
  dlpg__rdv_post(s, hello_key, h.value);
  int r = rdv_poll_get(s, welcome_key, deadline, aborted, what, buf, sizeof buf, rdv_send_hello,
                       &h, &st);
  if (r < 0) return st;
  int last_size = 0;
  const long long last = r == 0 ? rdv_last_started(s, base, &last_size) : -1;
  /* Rank 0 started a smaller group while this rank waited (it finished before this rank's
   * hello arrived, so never answered it). */
  if (r == 0 && !h.other && last >= gen_at_start && last_size > 0 && rank >= last_size)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: rank %d claims world size %d but rank 0 has world size %d in the "
                       "group it started on this store while this rank waited %.3g s (no rank "
                       "%d; or, if this job's rank 0 never came, an earlier job did)",
                       what, rank, size, last_size, timeout_s, rank);
  /* Rank 0 took a generation while this rank waited but never answered it: it admitted
   * another process as this rank (whose hello overwrote this one's). */
  if (r == 0 && (h.other || rdv_generation(s, base) > gen_at_start || last >= gen_at_start))
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: rank %d of %d: rank 0 started the group without this process "
                       "within %.3g s: another process claims rank %d (or, if this job's rank "
                       "0 never came, an earlier job on this store did)",
                       what, rank, size, timeout_s, rank);
  if (r == 0)
    return dlpg__error(DLPG_ERR_TIMEOUT,
                       "%s: rank %d of %d timed out after %.3g s: rank 0 did not admit this "
                       "rank (rank 0 has not started this group, is stuck, runs it with a "
                       "world size of %d or less, or admitted another process that claims "
                       "rank %d)",
                       what, rank, size, timeout_s, rank, rank);
  dlpg__rdv_unpost(s, welcome_key);
  if (buf[0] == '!') return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s", what, buf + 1);
  *gen = strtoll(buf, NULL, 10);
  return DLPG_OK;
}

/* Rank 0's bookkeeping of the others. */
struct rdv_admit {
  dlpg_store_t *s;
  const char *base;
  int size;
  long long gen;
  uint64_t *answered; /* last nonce answered per rank (0: none) */
  int *claimed_size;  /* world size each claimed rank posted in this generation (0: unread) */
  int mismatch;
  int duplicate; /* a rank claimed by two processes, or -1 */
};

/* Answer rank r's hello if a new one is there (the extra rank r == size gets an error). */
static void rdv_answer(struct rdv_admit *a, int r) {
  char key[RDV_KEY_MAX], val[64], reply[256];
  snprintf(key, sizeof key, "%s/hello/%d", a->base, r);
  if (dlpg__rdv_try_get(a->s, key, val, sizeof val) != 1) return;
  uint64_t nonce = 0;
  int sz = 0;
  if (sscanf(val, "%" SCNx64 " %d", &nonce, &sz) != 2 || nonce == 0) return;
  if (r < a->size && a->answered[r] == nonce) return;
  snprintf(key, sizeof key, "%s/g%lld/claim/%d", a->base, a->gen, r);
  if (r < a->size && dlpg__rdv_count(a->s, key) > 0) {
    /* Rank r stops re-sending its hello once admitted: a new nonce after its claim is
     * another process's. */
    a->duplicate = r;
    snprintf(reply, sizeof reply, "!two processes claim rank %d", r);
  } else if (r < a->size) {
    a->answered[r] = nonce;
    snprintf(reply, sizeof reply, "%lld", a->gen);
  } else {
    /* Possibly a stale hello of an earlier, larger job: the answer is harmless then. */
    snprintf(reply, sizeof reply,
             "!rank %d claims world size %d but rank 0 has world size %d (no rank %d)", r, sz,
             a->size, r);
  }
  snprintf(key, sizeof key, "%s/welcome/%d/%016" PRIx64, a->base, r, nonce);
  dlpg__rdv_post(a->s, key, reply);
}

/* The world size each rank posted under scope before claiming (a hello's size may be an
 * earlier job's: hellos are never deleted). */
static void rdv_read_sizes(struct rdv_admit *a, const char *scope) {
  for (int r = 1; r < a->size; r++) {
    if (a->claimed_size[r]) continue;
    char key[RDV_KEY_MAX], val[32];
    snprintf(key, sizeof key, "%s/size/%d", scope, r);
    if (dlpg__rdv_try_get(a->s, key, val, sizeof val) != 1) continue;
    a->claimed_size[r] = atoi(val);
    if (a->claimed_size[r] != a->size) a->mismatch = 1;
  }
}

/* "world sizes differ: rank 0 has 4; rank 2 has 3; ranks 1, 3 not seen" into msg. */
static void rdv_describe_sizes(const struct rdv_admit *a, char *msg, size_t cap) {
  size_t n = (size_t)snprintf(msg, cap, "world sizes differ: rank 0 has world size %d", a->size);
  for (int r = 1; r < a->size && n < cap; r++)
    if (a->claimed_size[r] && a->claimed_size[r] != a->size)
      n += (size_t)snprintf(msg + n, cap - n, "; rank %d has %d", r, a->claimed_size[r]);
}

/* "ranks 2, 3" of those whose claim key is absent, into msg; returns how many. */
static int rdv_missing(dlpg_store_t *s, const char *scope, int size, char *msg, size_t cap) {
  int missing = 0;
  size_t n = 0;
  msg[0] = '\0';
  for (int r = 1; r < size; r++) {
    char key[RDV_KEY_MAX];
    snprintf(key, sizeof key, "%s/claim/%d", scope, r);
    if (dlpg__rdv_count(s, key) != 0) continue; /* claimed (or the store failed: said later) */
    if (n < cap) n += (size_t)snprintf(msg + n, cap - n, "%s%d", missing ? ", " : "", r);
    missing++;
  }
  return missing;
}

/* Rank 0: admit the others into generation gen under scope, then publish the verdict. */
static dlpg_status_t rdv_lead(dlpg_store_t *s, const char *base, const char *scope,
                              const char *what, int size, long long gen, double deadline,
                              double timeout_s, const atomic_int *aborted) {
  struct rdv_admit a = {s, base, size, gen, calloc((size_t)size, sizeof(uint64_t)),
                        calloc((size_t)size, sizeof(int)), 0, -1};
  char go_key[RDV_KEY_MAX], verdict[1024], missing[512];
  snprintf(go_key, sizeof go_key, "%s/go", scope);
  dlpg_status_t st = DLPG_OK;
  if (!a.answered || !a.claimed_size) {
    st = dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", what);
    goto out;
  }
  double sleep_s = 0.0005, mismatch_until = 0;
  for (;;) {
    if (rdv_aborted(aborted)) {
      st = dlpg__error(DLPG_ERR_ABORTED, "%s: the group was aborted", what);
      snprintf(verdict, sizeof verdict, "!rank 0 aborted the group during its creation");
      break;
    }
    for (int r = 1; r <= size; r++) rdv_answer(&a, r);
    rdv_read_sizes(&a, scope);
    double now = dlpg__now();
    if (a.mismatch && mismatch_until == 0) mismatch_until = now + RDV_MISMATCH_GRACE_S;
    if (a.mismatch && (now >= mismatch_until || now >= deadline)) {
      rdv_describe_sizes(&a, verdict + 1, sizeof verdict - 1);
      verdict[0] = '!';
      st = dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s", what, verdict + 1);
      break;
    }
    int n_missing = rdv_missing(s, scope, size, missing, sizeof missing);
    if (n_missing == 0) rdv_read_sizes(&a, scope); /* of ranks that claimed just now */
    if (n_missing == 0 && a.mismatch) continue;    /* reported after the grace */
    if (n_missing == 0) {
      /* One more round of answers: a second process of a claimed rank shows up there. */
      for (int r = 1; r < size; r++) rdv_answer(&a, r);
      snprintf(verdict, sizeof verdict, "ok");
      break;
    }
    if (now >= deadline) {
      /* What rank 0 knows: the rank did not start this rendezvous (a backend's connection,
       * begun by each rank's first operation on it). Not that it never joined the group, nor
       * whether it called that operation: its caller may say that much (the progress note). */
      snprintf(verdict, sizeof verdict,
               "!timed out after %.3g s: rank%s %s of %d had not started it", timeout_s,
               n_missing > 1 ? "s" : "", missing, size);
      st = dlpg__error(DLPG_ERR_TIMEOUT, "%s: %s", what, verdict + 1);
      break;
    }
    double left = deadline - now;
    dlpg__sleep(sleep_s < left ? sleep_s : left);
    if (sleep_s < 0.01) sleep_s *= 2;
  }
  if (st == DLPG_OK && a.duplicate >= 0) {
    snprintf(verdict, sizeof verdict, "!two processes claim rank %d", a.duplicate);
    st = dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s", what, verdict + 1);
  }
  /* Two processes that both claimed one rank: both counted, one claim key holds 2. */
  for (int r = 1; st == DLPG_OK && r < size; r++) {
    char key[RDV_KEY_MAX];
    int64_t v = 0;
    snprintf(key, sizeof key, "%s/claim/%d", scope, r);
    if (dlpg_store_add(s, key, 0, &v) == DLPG_OK && v > 1) {
      snprintf(verdict, sizeof verdict, "!two processes claim rank %d", r);
      st = dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s", what, verdict + 1);
    }
  }
  dlpg__rdv_post(s, go_key, verdict);
  if (st == DLPG_OK) {
    /* For a process of a rank already admitted that asks later (rdv_join's message). */
    char key[RDV_KEY_MAX], g[48];
    snprintf(key, sizeof key, "%s/last", base);
    snprintf(g, sizeof g, "%lld %d", gen, size);
    dlpg__rdv_post(s, key, g);
  }
out:
  free(a.answered);
  free(a.claimed_size);
  return st;
}

dlpg_status_t dlpg__rendezvous_begin(dlpg_store_t *store, const char *base, const char *what,
                                     int rank, int size, double deadline,
                                     const atomic_int *aborted, char *scope) {
  if (!store || !base || !scope || rank < 0 || rank >= size)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg__rendezvous_begin: bad arguments");
  if (strlen(base) + 32 >= DLPG__RDV_SCOPE_MAX)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: key prefix \"%s\" is too long", what, base);
  const double timeout_s = deadline - dlpg__now();
  long long gen = 0;
  dlpg_status_t st;
  if (rank == 0) {
    char key[RDV_KEY_MAX];
    int64_t v = 0;
    snprintf(key, sizeof key, "%s/gen", base);
    st = dlpg_store_add(store, key, 1, &v);
    if (st != DLPG_OK) return dlpg__error(st, "%s: rank 0: %s", what, dlpg__last_error());
    gen = (long long)v;
  } else {
    st = rdv_join(store, base, what, rank, size, deadline, aborted, &gen);
    if (st != DLPG_OK) return st;
  }
  snprintf(scope, DLPG__RDV_SCOPE_MAX, "%s/g%lld", base, gen);
  DLPG_INFO(STORE, rank, "%s: generation %lld (keys under %s)", what, gen, scope);
  if (size == 1) return DLPG_OK;
  char key[RDV_KEY_MAX], buf[1024];
  int64_t claims = 0;
  if (rank != 0) {
    char sz[16];
    snprintf(key, sizeof key, "%s/size/%d", scope, rank);
    snprintf(sz, sizeof sz, "%d", size);
    dlpg__rdv_post(store, key, sz);
  }
  snprintf(key, sizeof key, "%s/claim/%d", scope, rank);
  st = dlpg_store_add(store, key, 1, &claims);
  if (st != DLPG_OK) return dlpg__error(st, "%s: rank %d: %s", what, rank, dlpg__last_error());
  if (claims > 1)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: two processes claim rank %d of %d (this one came second)", what,
                       rank, size);
  if (rank == 0)
    return rdv_lead(store, base, scope, what, size, gen, deadline, timeout_s, aborted);
  snprintf(key, sizeof key, "%s/go", scope);
  int r = rdv_group_went_ahead(store, base, key, gen)
              ? 0
              : rdv_poll_get(store, key, deadline + RDV_VERDICT_GRACE_S, aborted, what, buf,
                             sizeof buf, NULL, NULL, &st);
  if (r < 0) return st;
  if (r == 0 && rdv_group_went_ahead(store, base, key, gen))
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: rank %d of %d: rank 0 started the group without this process: "
                       "another process claims rank %d (rank 0 admitted both; the other "
                       "joined first and the group went ahead with it)",
                       what, rank, size, rank);
  if (r == 0)
    return dlpg__error(DLPG_ERR_TIMEOUT,
                       "%s: rank %d of %d timed out after %.3g s: rank 0 admitted this rank "
                       "but did not start the group (it stopped or left)",
                       what, rank, size, timeout_s);
  if (buf[0] == '!')
    return dlpg__error(strncmp(buf, "!timed out", 10) == 0 ? DLPG_ERR_TIMEOUT : DLPG_ERR_INVALID_ARGUMENT,
                       "%s: %s", what, buf + 1);
  return DLPG_OK;
}

void dlpg__rendezvous_end(dlpg_store_t *store, const char *scope, int rank, int size,
                          const char *const *keys, size_t nkeys) {
  char key[RDV_KEY_MAX];
  int64_t out = 0;
  (void)rank;
  snprintf(key, sizeof key, "%s/out", scope);
  if (dlpg_store_add(store, key, 1, &out) != DLPG_OK || out != size) return;
  /* The last rank out: nobody reads the scope any more. The verdict goes first: a second
   * process of a rank, admitted too but slower to claim, then either finds the first one's
   * claim (and fails naming the duplicate) or no verdict (rdv_group_went_ahead). */
  snprintf(key, sizeof key, "%s/go", scope);
  dlpg__rdv_unpost(store, key);
  for (int r = 0; r < size; r++) {
    snprintf(key, sizeof key, "%s/claim/%d", scope, r);
    dlpg_store_delete_key(store, key, NULL);
    snprintf(key, sizeof key, "%s/size/%d", scope, r);
    dlpg__rdv_unpost(store, key);
    for (size_t i = 0; i < nkeys; i++) {
      char name[128];
      snprintf(name, sizeof name, keys[i], r);
      snprintf(key, sizeof key, "%s/%s", scope, name);
      dlpg_store_delete_key(store, key, NULL);
    }
  }
  snprintf(key, sizeof key, "%s/out", scope);
  dlpg_store_delete_key(store, key, NULL);
}
