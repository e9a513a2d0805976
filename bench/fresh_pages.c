/* What it costs to write a collective's output into pages never touched before (a fresh
 * mmap, as glibc's malloc gives for large blocks, and as XLA's CPU client hands out for
 * every new result): a copy of SIZE bytes into a fresh mapping, by 1 and by T threads
 * (each its slice), plain (4 KiB page faults), after madvise(MADV_HUGEPAGE) (2 MiB pages
 * where transparent huge pages are in "madvise" mode), and after madvise(MADV_POPULATE_WRITE)
 * (the kernel fills the pages in one call per slice). A copy into already-touched memory is
 * the baseline. Medians of ITERS, milliseconds.
 *   fresh-pages [SIZE_MIB=16] [THREADS=4] [ITERS=15] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum { PLAIN, HUGE, POPULATE, TOUCHED };
static const char *kNames[] = {"4 KiB faults", "MADV_HUGEPAGE", "MADV_POPULATE_WRITE", "touched before"};

typedef struct {
  char *dst;
  const char *src;
  size_t len;
  int mode;
} slice_t;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *fill(void *p) {
  slice_t *s = p;
  if (s->mode == POPULATE) madvise(s->dst, s->len, MADV_POPULATE_WRITE);
  memcpy(s->dst, s->src, s->len);
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One copy of n bytes into dst by t threads (page-aligned slices). */
static void copy(char *dst, const char *src, size_t n, int t, int mode) {
  pthread_t tid[64];
  slice_t s[64];
  size_t per = (n / (size_t)t + 4095) & ~(size_t)4095;
  for (int i = 0; i < t; i++) {
    size_t lo = per * (size_t)i < n ? per * (size_t)i : n, hi = lo + per < n ? lo + per : n;
    s[i] = (slice_t){dst + lo, src + lo, hi - lo, mode};
    if (i) pthread_create(&tid[i], NULL, fill, &s[i]);
  }
  fill(&s[0]);
  for (int i = 1; i < t; i++) pthread_join(tid[i], NULL);
}

int main(int argc, char **argv) {
  size_t n = (size_t)(argc > 1 ? atoi(argv[1]) : 16) << 20;
  int threads = argc > 2 ? atoi(argv[2]) : 4, iters = argc > 3 ? atoi(argv[3]) : 15;
  if (threads < 1 || threads > 64 || iters < 1) return 2;
  char *src = malloc(n);
  memset(src, 1, n);
  printf("| %zu MiB into | threads | median (ms) | GB/s |\n|---|---:|---:|---:|\n", n >> 20);
  for (int mode = PLAIN; mode <= TOUCHED; mode++)
    for (int t = 1; t <= threads; t = t == threads ? threads + 1 : (t * 2 > threads ? threads : t * 2)) {
      double ms[256];
      char *kept = mode == TOUCHED ? mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : NULL;
      if (kept) memset(kept, 0, n);
      for (int i = 0; i < iters && i < 256; i++) {
        double t0 = now();
        char *dst = kept ? kept : mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (dst == MAP_FAILED) return 1;
        if (mode == HUGE) madvise(dst, n, MADV_HUGEPAGE);
        copy(dst, src, n, t, mode);
        ms[i] = (now() - t0) * 1e3;
        if (!kept) munmap(dst, n);
      }
      if (kept) munmap(kept, n);
      qsort(ms, (size_t)iters, sizeof *ms, cmp);
      double m = ms[iters / 2];
      printf("| %s | %d | %.3f | %.2f |\n", kNames[mode], t, m, (double)n / (m * 1e-3) / 1e9);
    }
  free(src);
  return 0;
}
