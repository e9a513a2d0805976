/* The host identity a rank publishes at group creation without waiting for anyone. Two
 * ranks may use the engine only if they share a kernel (boot id), a network namespace
 * (the abstract rendezvous socket is per network namespace) and a pid namespace (peer
 * liveness is checked by pid). The hostname is there for people reading logs; the
 * namespace inodes are what tells two containers on one machine apart. Equal strings are
 * a hint the creation still confirms by passing and mapping the segment: an identity that
 * can be wrong must never be the only proof. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "shm/shm.h"

static void dlpg__shm_read_line(const char *path, char *out, size_t cap) {
  out[0] = '\0';
  FILE *f = fopen(path, "re");
  if (!f) return;
  if (fgets(out, (int)cap, f)) out[strcspn(out, "\r\n")] = '\0';
  fclose(f);
}

/* The inode of a namespace link (/proc/self/ns/net): unique per namespace while it lives. */
static unsigned long long dlpg__shm_ns_inode(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  return (unsigned long long)st.st_ino;
}

dlpg_status_t dlpg__shm_host_id(char *out, size_t cap) {
  DLPG_ARG_CHECK(out && cap > 0, "dlpg__shm_host_id: out is NULL or cap is 0");
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
  host[sizeof host - 1] = '\0';
  char boot[64];
  dlpg__shm_read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
  unsigned long long net = dlpg__shm_ns_inode("/proc/self/ns/net");
  unsigned long long pid = dlpg__shm_ns_inode("/proc/self/ns/pid");
  /* Without a boot id or the namespaces nothing proves a shared kernel: say so in the
   * string, so the ranks never agree by accident on an empty identity. */
  if (boot[0] == '\0' || net == 0 || pid == 0)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "dlpg__shm_host_id: cannot read /proc/sys/kernel/random/boot_id or "
                       "/proc/self/ns/{net,pid} (no /proc?)");
  int n = snprintf(out, cap, "%s/%s/net:%llu/pid:%llu", host, boot, net, pid);
  if (n < 0 || (size_t)n >= cap)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "dlpg__shm_host_id: %zu bytes are too few (need %d)", cap, n + 1);
  return DLPG_OK;
}
