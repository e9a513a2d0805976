/* A joining rank's side of a segment's creation, one for the group's segment (create.c)
 * and a pair's (pair_create.c): fetch the memfd from the owner's socket, check the header,
 * map it, and say why not in the same words for both. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/status.h"
#include "shm/seg.h"

dlpg_status_t dlpg__shm_join_segment(const dlpg__shm_join_t *j, void **map, size_t *bytes) {
  dlpg__shm_hello_t hello = {j->rank, (int32_t)getpid(), {0}};
  memcpy(hello.token, j->token, sizeof hello.token);
  int fd = -1, why = 0;
  switch (dlpg__shm_sock_fetch(j->sock, &hello, sizeof hello, j->deadline, &fd, &why)) {
    case DLPG__SHM_FETCH_UNREACHABLE:
      return dlpg__error(DLPG_ERR_UNSUPPORTED,
                         "rank %d cannot reach rank %d's socket (%s): not on rank %d's host or network namespace",
                         j->rank, j->owner, strerror(why), j->owner);
    case DLPG__SHM_FETCH_FAILED:
      return dlpg__error(why == ETIMEDOUT ? DLPG_ERR_TIMEOUT : DLPG_ERR_UNSUPPORTED,
                         "rank %d got no %s from rank %d: %s", j->rank, j->noun, j->owner,
                         strerror(why));
    case DLPG__SHM_FETCH_REFUSED:
      return dlpg__error(DLPG_ERR_UNSUPPORTED,
                         "rank %d is in another pid namespace than rank %d (its pid differs as rank %d sees it)",
                         j->rank, j->owner, j->owner);
  }
  uint64_t total = 0;
  void *p = MAP_FAILED;
  if (pread(fd, j->head, j->head_len, 0) == (ssize_t)j->head_len &&
      (total = j->total(j->head, j->arg)) != 0)
    p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd); /* the mapping keeps the memory; no name or fd refers to it any more */
  if (p == MAP_FAILED) {
    if (total == 0)
      return dlpg__error(DLPG_ERR_UNSUPPORTED, "rank %d cannot map rank %d's %s (not a %s of this group)",
                         j->rank, j->owner, j->noun, j->noun);
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "rank %d cannot map rank %d's %s (%s)", j->rank,
                       j->owner, j->noun, strerror(e));
  }
  *map = p;
  *bytes = total;
  return DLPG_OK;
}
