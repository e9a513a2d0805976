/* dlpg-store: run the dlpg TCP store server on its own, for jobs whose ranks should not
 * host it (multi-host jobs, a launcher that outlives the ranks). Ranks then open
 * "tcp://HOST:PORT". Runs until SIGINT or SIGTERM.
 *
 *   dlpg-store [--host HOST] [--port PORT]     (defaults: every interface, port 29700)
 *
 * The default port is clear of torchrun's: its MASTER_PORT defaults to 29500, and env://
 * serves on MASTER_PORT + 1, so a dlpg-store on the master's host of such a job would
 * otherwise take the port the job's own store needs.
 *
 * DLPG_STORE_TOKEN, when set, is required of every client (the same variable on the ranks,
 * or ?token= in their URL); the DLPG_STORE_* limits apply (docs/security.md). The banner
 * prints the address actually bound.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/params.h"
#include "base/status.h"
#include "store/store.h"

#define DLPG__STORE_DEFAULT_PORT 29700

static void dlpg__usage(FILE *f) {
  fprintf(f,
          "usage: dlpg-store [--host HOST] [--port PORT]\n"
          "  Serve the dlpg TCP store until SIGINT/SIGTERM. Ranks open tcp://HOST:PORT.\n"
          "  --host HOST  address to bind, only that one (default: every interface)\n"
          "  --port PORT  TCP port, 0 picks a free one (default: 29700)\n"
          "  DLPG_STORE_TOKEN=SECRET in the environment: clients must hold the same secret\n");
}

static int dlpg__parse_port(const char *s, int *port) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < 0 || v > 65535) return -1;
  *port = (int)v;
  return 0;
}

int main(int argc, char **argv) {
  const char *host = "";
  int port = DLPG__STORE_DEFAULT_PORT;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      dlpg__usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--host") == 0 && i + 1 < argc) {
      host = argv[++i];
    } else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
      if (dlpg__parse_port(argv[++i], &port) != 0) {
        fprintf(stderr, "dlpg-store: --port %s is not a number in [0, 65535]\n", argv[i]);
        return 2;
      }
    } else {
      fprintf(stderr, "dlpg-store: unknown or incomplete argument '%s'\n", argv[i]);
      dlpg__usage(stderr);
      return 2;
    }
  }
  /* Block the stop signals before the server thread starts, so they stay pending for
   * sigwait here instead of interrupting any thread. */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);

  /* A standalone server may hold many connections: use the whole descriptor allowance. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  const char *token = dlpg__param_str(DLPG__PARAM_STORE_TOKEN);
  dlpg__tcp_server_t *srv = NULL;
  if (dlpg__tcp_server_start(host, port, token, &srv) != DLPG_OK) {
    fprintf(stderr, "dlpg-store: %s\n", dlpg__last_error());
    fprintf(stderr, "dlpg-store: --port PORT serves on another port (--port 0: a free one, "
            "printed when listening)%s\n", *host ? ", --host HOST on another address" : "");
    return 1;
  }
  printf("dlpg-store listening on %s (%s)\n", dlpg__tcp_server_address(srv),
         token && *token ? "DLPG_STORE_TOKEN required"
                         : "no token: anyone who reaches this address may read and write it");
  fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  fprintf(stderr, "dlpg-store: %s received, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  dlpg__tcp_server_stop(srv);
  return 0;
}
