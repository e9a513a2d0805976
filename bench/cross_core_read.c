/* cross-core-read: how fast one core copies bytes that another core has just written, the
 * bound of any shared-memory collective built on copies (at 2 ranks an allreduce must bring
 * S bytes per rank across cores: half of the peer's input to reduce, half of its result).
 * Two processes on two CPUs share one mapping: the writer fills a buffer (memcpy from its
 * own memory), flags it; the reader copies it into its own memory and flags back. Beside it
 * the same copy when the reader itself wrote the buffer (local, cache-hot) and a memcpy of
 * the size between two private buffers. Medians of the per-copy times.
 *
 *   cross-core-read [--cpus A,B] [--sizes 64K,256K,1M,4M,16M,64M] [--budget-mib N]
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZES 16
#define MAX_ITERS 512

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s) {
  char *end = NULL;
  size_t v = strtoull(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  if (*end == 'M' || *end == 'm') v <<= 20;
  if (*end == 'G' || *end == 'g') v <<= 30;
  return v;
}

static int pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The flag both processes turn: odd = the buffer is written, even = it was read. */
struct ctl {
  _Atomic uint64_t seq;
  double read_s[MAX_ITERS];
};

static void wait_for(struct ctl *c, uint64_t v) {
  while (atomic_load_explicit(&c->seq, memory_order_acquire) != v) {
  }
}

int main(int argc, char **argv) {
  int cpu_w = 0, cpu_r = 1;
  size_t sizes[MAX_SIZES];
  int nsizes = 0;
  size_t budget = (size_t)256 << 20;
  const char *list = "64K,256K,1M,4M,16M,64M";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--cpus") && i + 1 < argc) {
      if (sscanf(argv[++i], "%d,%d", &cpu_w, &cpu_r) != 2) return fprintf(stderr, "--cpus A,B\n"), 2;
    } else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
      list = argv[++i];
    } else if (!strcmp(argv[i], "--budget-mib") && i + 1 < argc) {
      budget = (size_t)atol(argv[++i]) << 20;
    } else {
      fprintf(stderr, "usage: %s [--cpus A,B] [--sizes 64K,1M,...] [--budget-mib N]\n", argv[0]);
      return 2;
    }
  }
  char *copy = strdup(list);
  for (char *t = strtok(copy, ","); t && nsizes < MAX_SIZES; t = strtok(NULL, ","))
    if ((sizes[nsizes] = parse_size(t)) > 0) nsizes++;
  free(copy);
  size_t max = 0;
  for (int i = 0; i < nsizes; i++) max = sizes[i] > max ? sizes[i] : max;
  if (!max) return fprintf(stderr, "no sizes\n"), 2;

  struct ctl *c = mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  uint8_t *shared = mmap(NULL, max, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  uint8_t *src = malloc(max), *dst = malloc(max), *dst2 = malloc(max);
  if (c == MAP_FAILED || shared == MAP_FAILED || !src || !dst || !dst2)
    return fprintf(stderr, "out of memory for %zu bytes\n", max), 1;
  memset(src, 0x5a, max);
  memset(dst, 0, max);
  memset(dst2, 0, max);
  memset(shared, 0, max);

  printf("| size | cross-core copy (GB/s) | local copy of own writes (GB/s) | private memcpy (GB/s) | cross / memcpy |\n");
  printf("|---:|---:|---:|---:|---:|\n");
  for (int si = 0; si < nsizes; si++) {
    size_t n = sizes[si];
    int iters = (int)(budget / n);
    iters = iters < 5 ? 5 : iters > MAX_ITERS ? MAX_ITERS : iters;
    atomic_store(&c->seq, 0);
    pid_t pid = fork();
    if (pid < 0) return perror("fork"), 1;
    if (pid == 0) { /* the writer */
      if (pin(cpu_w) != 0) perror("sched_setaffinity (writer)");
      for (int k = 0; k <= iters; k++) {
        wait_for(c, 2 * (uint64_t)k);
        src[0] = (uint8_t)k;
        memcpy(shared, src, n);
        atomic_store_explicit(&c->seq, 2 * (uint64_t)k + 1, memory_order_release);
      }
      _exit(0);
    }
    if (pin(cpu_r) != 0) perror("sched_setaffinity (reader)");
    for (int k = 0; k <= iters; k++) { /* k = 0 warms up */
      wait_for(c, 2 * (uint64_t)k + 1);
      double t0 = now_s();
      memcpy(dst, shared, n);
      double t1 = now_s();
      if (k) c->read_s[k - 1] = t1 - t0;
      atomic_store_explicit(&c->seq, 2 * (uint64_t)k + 2, memory_order_release);
    }
    waitpid(pid, NULL, 0);
    if (dst[0] != (uint8_t)iters) fprintf(stderr, "size %zu: the reader saw a stale buffer\n", n);
    double cross = median(c->read_s, iters);
    /* The reader's own writes, then its copy of them; then private to private. */
    double local[MAX_ITERS], priv[MAX_ITERS];
    for (int k = 0; k < iters; k++) {
      memcpy(shared, src, n);
      double t0 = now_s();
      memcpy(dst, shared, n);
      double t1 = now_s();
      memcpy(dst2, src, n);
      double t2 = now_s();
      local[k] = t1 - t0;
      priv[k] = t2 - t1;
    }
    double loc = median(local, iters), pm = median(priv, iters);
    char label[32];
    if (n >= (1u << 20)) snprintf(label, sizeof label, "%zu MiB", n >> 20);
    else snprintf(label, sizeof label, "%zu KiB", n >> 10);
    printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", label, n / cross / 1e9, n / loc / 1e9,
           n / pm / 1e9, pm / cross);
    fflush(stdout);
  }
  return 0;
}
