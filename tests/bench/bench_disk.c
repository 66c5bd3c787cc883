/* bench_disk.c - the bound the machine's disk puts on the disk tier: random
 * 4 KiB reads of a file much larger than the memory the tier is given,
 * at queue depths 1, 8 and 32 (that many threads, each a pread after
 * another), then the ceiling those rates put on the tier's pull+push
 * against a table in memory:
 *   bench_disk direct|buffered FILE SIZE SECONDS MEMORY_ROWS_PER_S [NAME:MISS:BLOCKS ...]
 * direct opens FILE with O_DIRECT (the page cache serves nothing),
 * buffered without (run it in a memory cgroup to see what the page cache
 * left under the limit adds: bench_disk.sh).  FILE is written first (SIZE
 * bytes of incompressible data, synced) unless it already holds SIZE
 * bytes: a file never written reads as zeros without touching the disk.
 * Each depth reads for SECONDS.  Prints per depth reads/s, MB/s and the
 * mean latency, then for each NAME:MISS:BLOCKS (bench_tier's
 * pull_push_miss_fraction and pull_push_lookup_blocks_per_miss of a run)
 * and each depth tier_disk_bound_vs_memory = min(1, reads/s / (MISS *
 * BLOCKS) / MEMORY_ROWS_PER_S): the rate pull+push could reach if each
 * miss cost only its block reads, as a share of the table in memory
 * (bench_tier memory's pull_push_rows_per_s).  Not a pass/fail test. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fl_names.h"

#define BLOCK 4096
#define CHUNK (1 << 20)
#define MAX_DEPTH 32

static const int depths[] = {1, 8, 32};

/* How the file is opened, by the first argument's name. */
static const struct open_mode {
  const char *name;
  int flags;
} open_modes[] = {
    {"direct", O_DIRECT},
    {"buffered", 0},
};

/* One reader thread: its own descriptor and aligned buffer, random
 * block-aligned offsets until the deadline; counts its reads. */
typedef struct {
  const char *path;
  int flags;
  uint64_t blocks, seed, reads;
  double deadline;
  int err;
} reader;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Thread body; the buffer is its own, freed before it returns. */
static void *read_loop(void *arg) {
  reader *r = arg;
  void *buf = NULL;
  int fd = open(r->path, O_RDONLY | r->flags);
  if (fd < 0 || posix_memalign(&buf, BLOCK, BLOCK) != 0) {
    r->err = fd < 0 ? errno : ENOMEM;
    if (fd >= 0) close(fd);
    return NULL;
  }
  while (now() < r->deadline) {
    for (int i = 0; i < 16; i++) {
      off_t off = (off_t)(next(&r->seed) % r->blocks) * BLOCK;
      if (pread(fd, buf, BLOCK, off) != BLOCK) {
        r->err = errno ? errno : EIO;
        goto out;
      }
      r->reads++;
    }
  }
out:
  free(buf);
  close(fd);
  return NULL;
}

/* Writes SIZE bytes of random data to PATH unless it already has them;
 * on a failed write, PATH is removed. */
static int prepare(const char *path, uint64_t size) {
  struct stat st;
  uint64_t s = 12345;
  char *buf;
  int fd;
  if (stat(path, &st) == 0 && (uint64_t)st.st_size >= size) return 0;
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  buf = malloc(CHUNK);
  if (fd < 0 || !buf) {
    fprintf(stderr, "bench_disk: cannot create %s: %s\n", path, strerror(errno));
    free(buf);
    if (fd >= 0) close(fd);
    return -1;
  }
  for (uint64_t off = 0; off < size; off += CHUNK) {
    for (size_t i = 0; i < CHUNK / 8; i++) ((uint64_t *)buf)[i] = next(&s);
    if (pwrite(fd, buf, CHUNK, (off_t)off) != CHUNK) {
      fprintf(stderr, "bench_disk: writing %s at %llu: %s (the partial file is removed)\n",
              path, (unsigned long long)off, strerror(errno));
      free(buf);
      close(fd);
      unlink(path); /* a full disk is not left fuller */
      return -1;
    }
  }
  free(buf);
  if (fsync(fd) != 0 || close(fd) != 0) {
    fprintf(stderr, "bench_disk: syncing %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* A run's NAME:MISS:BLOCKS into name (64 bytes, the caller's) and the two
 * figures; 0 when it is not one. */
static int parse_run(const char *arg, char *name, double *miss, double *blocks) {
  return sscanf(arg, "%63[^:]:%lf:%lf", name, miss, blocks) == 3 && *miss > 0 && *blocks > 0;
}

int main(int argc, char **argv) {
  static reader rs[MAX_DEPTH];
  pthread_t th[MAX_DEPTH];
  double rate[sizeof depths / sizeof *depths], secs, mem_rows;
  uint64_t size;
  int flags;

  const int om = argc >= 2 ? FL_ROWS_FIND(open_modes, argv[1]) : -1;
  if (argc < 6 || om < 0) {
    fprintf(stderr, "usage: bench_disk direct|buffered FILE SIZE SECONDS MEMORY_ROWS_PER_S "
                    "[NAME:MISS:BLOCKS ...]\n");
    return 2;
  }
  flags = open_modes[om].flags;
  size = strtoull(argv[3], NULL, 10) / BLOCK * BLOCK;
  secs = strtod(argv[4], NULL);
  mem_rows = strtod(argv[5], NULL);
  if (size < BLOCK || secs <= 0 || mem_rows <= 0) {
    fprintf(stderr, "bench_disk: SIZE, SECONDS and MEMORY_ROWS_PER_S must be positive\n");
    return 2;
  }
  for (int a = 6; a < argc; a++) {
    char name[64];
    double miss, blocks;
    if (!parse_run(argv[a], name, &miss, &blocks)) {
      fprintf(stderr, "bench_disk: %s is not NAME:MISS:BLOCKS\n", argv[a]);
      return 2;
    }
  }
  if (prepare(argv[2], size) != 0) return 1;
  if (!flags) { /* the pages its writing left in the cache would serve reads for free */
    int fd = open(argv[2], O_RDONLY);
    if (fd < 0 || fdatasync(fd) != 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) {
      fprintf(stderr, "bench_disk: cannot drop %s from the page cache: %s\n", argv[2],
              strerror(errno));
      if (fd >= 0) close(fd);
      return 1;
    }
    close(fd);
  }

  for (size_t d = 0; d < sizeof depths / sizeof *depths; d++) {
    int n = depths[d];
    double t0 = now(), el;
    uint64_t reads = 0;
    for (int i = 0; i < n; i++) {
      rs[i] = (reader){.path = argv[2], .flags = flags, .blocks = size / BLOCK,
                       .seed = (uint64_t)(d * MAX_DEPTH + i + 1) * 7919, .deadline = t0 + secs};
      if (pthread_create(&th[i], NULL, read_loop, &rs[i]) != 0) {
        fprintf(stderr, "bench_disk: cannot start reader %d of %d\n", i, n);
        return 1;
      }
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    el = now() - t0;
    for (int i = 0; i < n; i++) {
      if (rs[i].err) {
        fprintf(stderr, "bench_disk: reading %s (%s): %s\n", argv[2], argv[1],
                strerror(rs[i].err));
        return 1;
      }
      reads += rs[i].reads;
    }
    rate[d] = (double)reads / el;
    printf("disk_randread_4k_qd%d: %.0f reads/s (%.1f MB/s, mean latency %.0f us; %s, %.1f GB "
           "file)\n",
           n, rate[d], rate[d] * BLOCK / 1e6, 1e6 * n / rate[d], argv[1], (double)size / 1e9);
  }

  for (int a = 6; a < argc; a++) {
    char name[64];
    double miss, blocks;
    parse_run(argv[a], name, &miss, &blocks);
    for (size_t d = 0; d < sizeof depths / sizeof *depths; d++) {
      double rows = rate[d] / (miss * blocks), bound = rows / mem_rows;
      printf("tier_disk_bound_vs_memory: %.4f ratio (%s, qd%d: miss %.3f x %.2f blocks, at most "
             "%.0f rows/s vs %.0f in memory)\n",
             bound < 1 ? bound : 1, name, depths[d], miss, blocks, rows, mem_rows);
    }
  }
  return 0;
}
