/* One rank of the network-namespace test (ci/netns-test.sh): joins a group through the
 * store at argv[3], runs allreduces of 1 Mi float32 (checked against the closed-form sum)
 * until one fails or `seconds` pass, and prints one line:
 *   RESULT rank=R ops=N status=NAME secs=S msg=MESSAGE
 * where secs is the duration of the last (failed) operation. Rank 0 serves the store, and keeps
 * serving it until the other ranks say they are done (or a bound passes): a peer whose deadline
 * expires a little later than rank 0's still reads the failure records, as it would from a
 * launcher's store that outlives the ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlpg/dlpg.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: %s RANK WORLD STORE_URL TIMEOUT_S SECONDS CUT_RANK\n", argv[0]);
    return 2;
  }
  int rank = atoi(argv[1]), world = atoi(argv[2]), cut = atoi(argv[6]);
  double timeout = atof(argv[4]), seconds = atof(argv[5]);
  dlpg_store_t *store = NULL;
  dlpg_status_t st = dlpg_store_open(argv[3], 60.0, &store);
  if (st != DLPG_OK) {
    printf("RESULT rank=%d ops=0 status=%s secs=0 msg=store_open: %s\n", rank,
           dlpg_status_name(st), dlpg_last_error());
    return 1;
  }
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = timeout;
  o.name = "netns";
  dlpg_group_t *g = NULL;
  st = dlpg_group_create(store, rank, world, &o, &g);
  if (st != DLPG_OK) {
    printf("RESULT rank=%d ops=0 status=%s secs=0 msg=group_create: %s\n", rank,
           dlpg_status_name(st), dlpg_last_error());
    return 1;
  }
  const int64_t n = 1 << 20;
  float *v = malloc((size_t)n * sizeof *v);
  int64_t shape[1] = {n};
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = v;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  DLTensor *tp = &t;
  double end = now() + seconds, secs = 0;
  long ops = 0;
  const char *msg = "";
  while (now() < end) {
    for (int64_t i = 0; i < n; i++) v[i] = (float)(rank + (i & 7));
    double t0 = now();
    st = dlpg_allreduce(g, &tp, NULL, 1, DLPG_SUM, NULL, NULL);
    secs = now() - t0;
    if (st != DLPG_OK) {
      msg = dlpg_last_error();
      break;
    }
    for (int64_t i = 0; i < n; i += 4099) {
      float want = (float)(world * (world - 1) / 2 + world * (int)(i & 7));
      if (v[i] != want) {
        printf("RESULT rank=%d ops=%ld status=WRONG secs=0 msg=[%lld] = %g, want %g\n", rank,
               ops, (long long)i, v[i], want);
        return 1;
      }
    }
    ops++;
    if (ops == 1) {
      printf("READY rank=%d\n", rank);
      fflush(stdout);
    }
  }
  printf("RESULT rank=%d ops=%ld status=%s secs=%.3f msg=%s\n", rank, ops, dlpg_status_name(st),
         secs, msg);
  fflush(stdout);
  double t0 = now();
  dlpg_group_destroy(g);
  printf("DESTROY rank=%d secs=%.3f\n", rank, now() - t0);
  fflush(stdout);
  char key[64];
  if (rank != 0 && rank != cut) { /* the cut rank's store calls would wait out their timeout */
    snprintf(key, sizeof key, "netns/done/%d", rank);
    dlpg_store_set(store, key, "1", 1);
  } else if (rank == 0) {
    /* Bounded: a peer's whole deadline and its diagnosis fit in it. */
    double linger_end = now() + timeout + 4;
    char buf[8];
    size_t len = 0;
    for (int r = 1; r < world; r++) {
      double left = linger_end - now();
      if (r == cut) continue;
      if (left < 0.01) break;
      snprintf(key, sizeof key, "netns/done/%d", r);
      dlpg_store_get(store, key, left, buf, sizeof buf, &len);
    }
  }
  dlpg_store_close(store);
  free(v);
  return st == DLPG_OK ? 0 : 1;
}
