/* coll_testutil.h - helpers for the collective engine's tests: make one
 * listening socket per rank on 127.0.0.x (port 0, so parallel test runs
 * never collide), fork one process per rank, collect exit codes with a
 * deadline, and share small result records through an anonymous shared
 * mapping.  Children report through their exit code only (a Check
 * assertion in a grandchild would be lost); the parent asserts. */
#ifndef COLL_TESTUTIL_H
#define COLL_TESTUTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fl_coll.h"

#define CT_MAX_RANKS 16

typedef struct ct_job {
  int n;
  fl_endpoint eps[CT_MAX_RANKS];
  int fds[CT_MAX_RANKS];
  pid_t pids[CT_MAX_RANKS];
  int status[CT_MAX_RANKS]; /* exit code, 128+signal, or -1 (still running at the deadline) */
  double elapsed[CT_MAX_RANKS];
} ct_job;

static inline double ct_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bind and listen one socket per rank; hosts[r] is rank r's address. */
static inline int ct_job_init(ct_job *j, int n, const char *const *hosts) {
  memset(j, 0, sizeof(*j));
  j->n = n;
  for (int r = 0; r < n; r++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    inet_pton(AF_INET, hosts[r], &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 128) != 0) {
      close(fd);
      return -1;
    }
    socklen_t len = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    snprintf(j->eps[r].host, sizeof(j->eps[r].host), "%s", hosts[r]);
    j->eps[r].port = ntohs(a.sin_port);
    j->fds[r] = fd;
  }
  return 0;
}

/* Close the parent's sockets, for ranks that bind their endpoints
 * themselves (the ports stay known; another process could take one in
 * between, which a benchmark accepts). */
static inline void ct_job_release(ct_job *j) {
  for (int r = 0; r < j->n; r++) {
    if (j->fds[r] >= 0) close(j->fds[r]);
    j->fds[r] = -1;
  }
}

/* Options for rank r of the job (listen_fd is rank r's socket). */
static inline fl_coll_options ct_opts(ct_job *j, int r, const char *backend, double timeout_s) {
  fl_coll_options o = fl_coll_options_default();
  o.rank = r;
  o.world_size = j->n;
  o.endpoints = j->eps;
  o.listen_fd = j->fds[r];
  o.token = "test-token";
  o.backend = backend;
  o.timeout_s = timeout_s;
  return o;
}

typedef int (*ct_rank_fn)(ct_job *j, int rank, void *arg);

/* Fork rank r (skipped when start[r] == 0, if start is given); stderr of
 * rank r goes to logs[r] when logs is given. */
static inline void ct_spawn(ct_job *j, ct_rank_fn fn, void *arg, const int *start,
                            char (*logs)[256]) {
  fflush(NULL); /* children exit(): buffered output must not be written twice */
  for (int r = 0; r < j->n; r++) {
    if (start && !start[r]) {
      j->pids[r] = 0;
      continue;
    }
    pid_t p = fork();
    if (p == 0) {
      for (int q = 0; q < j->n; q++)
        if (q != r && j->fds[q] >= 0) close(j->fds[q]);
      if (logs) {
        int lf = open(logs[r], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (lf >= 0) {
          dup2(lf, 2);
          close(lf);
        }
      }
      int rc = fn(j, r, arg);
      fflush(NULL);
      exit(rc);
    }
    j->pids[r] = p;
  }
  for (int r = 0; r < j->n; r++) {
    if (j->fds[r] >= 0) close(j->fds[r]);
    j->fds[r] = -1;
  }
}

/* Wait for every spawned rank until deadline_s from now; kill the rest.
 * victim >= 0: once every other rank has ended, kill it too (a hung or
 * idle rank that the test made misbehave). */
static inline void ct_wait_victim(ct_job *j, double deadline_s, int victim) {
  double t0 = ct_now();
  int left = 0;
  for (int r = 0; r < j->n; r++) {
    j->status[r] = -1;
    if (j->pids[r] > 0) left++;
  }
  while (left > 0) {
    for (int r = 0; r < j->n; r++) {
      if (j->pids[r] <= 0) continue;
      int ws;
      pid_t p = waitpid(j->pids[r], &ws, WNOHANG);
      if (p == j->pids[r]) {
        j->status[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        j->elapsed[r] = ct_now() - t0;
        j->pids[r] = 0;
        left--;
      }
    }
    if (left == 0) break;
    if (victim >= 0 && left == 1 && j->pids[victim] > 0) {
      kill(j->pids[victim], SIGKILL);
      continue;
    }
    if (ct_now() - t0 > deadline_s) {
      for (int r = 0; r < j->n; r++)
        if (j->pids[r] > 0) {
          kill(j->pids[r], SIGKILL);
          waitpid(j->pids[r], NULL, 0);
          j->pids[r] = 0;
        }
      break;
    }
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
}

static inline void ct_wait(ct_job *j, double deadline_s) {
  ct_wait_victim(j, deadline_s, -1);
}

static inline int ct_run(ct_job *j, ct_rank_fn fn, void *arg, double deadline_s) {
  ct_spawn(j, fn, arg, NULL, NULL);
  ct_wait(j, deadline_s);
  int bad = 0;
  for (int r = 0; r < j->n; r++)
    if (j->status[r] != 0) {
      fprintf(stderr, "rank %d ended with status %d\n", r, j->status[r]);
      bad++;
    }
  return bad;
}

static inline void *ct_shared(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static inline uint64_t ct_hash(const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* 1 when the file at path contains needle. */
static inline int ct_file_has(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, needle) != NULL;
}

#endif
