/* bench_optim.c - CPU optimizer throughput against STREAM triad.
 *
 * An optimizer step is memory-bound, so its figure of merit is the memory
 * bandwidth it reaches relative to what the machine can stream.  For each
 * optimizer this measures the milliseconds of one fl_optim_step over
 * --params floats (default 16M) and its effective bandwidth: the bytes an
 * ideal single pass must move per parameter (each array read once, each
 * updated array written once: SGD 12, Momentum/Adagrad/LARS 20,
 * Adam/AdamW/LAMB 28) divided by the time.  LARS and LAMB really make a
 * second pass (for their norms), which their ratio pays for.  Beside it, a
 * STREAM triad a[i] = b[i] + s*c[i] over arrays of the same length on the
 * same threads (12 bytes per element, STREAM's count).  Triad and
 * optimizer steps alternate round by round (state re-initialised, untimed,
 * before each step), so machine noise hits both alike; every figure is a
 * median.  Hyper-parameters are the defaults of fl_optim_hparams_default.
 *
 * Output: one `name: value unit` line per figure, e.g. triad_cpu_gbps,
 * adam_cpu_ms, adam_cpu_gbps, adam_cpu_of_triad.  Not a pass/fail test.
 * Usage: bench_optim [--params N] [--threads T] [--iters K] */
#include <config.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#define OMP(...) _Pragma(#__VA_ARGS__)
#else
#define OMP(...)
#endif

#include "fl_optim.h"

#define N_KINDS (FL_OPTIM_LAMB + 1)

static const int bytes_per_param[N_KINDS] = {
    [FL_OPTIM_SGD] = 12,  [FL_OPTIM_MOMENTUM] = 20, [FL_OPTIM_ADAM] = 28, [FL_OPTIM_ADAMW] = 28,
    [FL_OPTIM_ADAGRAD] = 20, [FL_OPTIM_LARS] = 20,  [FL_OPTIM_LAMB] = 28,
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void triad(float *restrict a, const float *restrict b, const float *restrict c, float s,
                  size_t n, int threads) {
  OMP(omp parallel for simd num_threads(threads) schedule(static))
  for (size_t i = 0; i < n; i++)
    a[i] = b[i] + s * c[i];
  (void)threads;
}

/* A buffer from plain malloc, as a caller would get it, first touched by
 * the same threads (and so the same split) that will use it.  The layout
 * matters: on the 2-core EPYC VM this was written on, Adam over arrays that
 * all start at the same offset modulo 8 KiB (aligned_alloc(4096, ...))
 * measured about half the speed it reaches over malloc'd arrays. */
static float *alloc_fill(size_t n, float v0, float dv, int threads) {
  float *p = malloc(n * sizeof(float));
  if (!p) {
    fprintf(stderr, "bench_optim: cannot allocate %zu floats\n", n);
    exit(1);
  }
  OMP(omp parallel for num_threads(threads) schedule(static))
  for (size_t i = 0; i < n; i++)
    p[i] = v0 + dv * (float)(i % 1024);
  (void)threads;
  return p;
}

static int parse_num(const char *s, unsigned long long lo, unsigned long long hi,
                     unsigned long long *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi || s[0] == '-')
    return -1;
  *out = v;
  return 0;
}

static void usage(void) {
  fprintf(stderr, "usage: bench_optim [--params N] [--threads T] [--iters K]\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned long long params = 16ull << 20, iters = 10, threads = 1;
#ifdef _OPENMP
  threads = (unsigned long long)omp_get_max_threads();
#endif
  for (int i = 1; i < argc; i++) {
    unsigned long long *dst = NULL, lo = 1, hi = 1ull << 34;
    if (strcmp(argv[i], "--params") == 0)
      dst = &params, lo = 1024;
    else if (strcmp(argv[i], "--threads") == 0)
      dst = &threads, hi = 1024;
    else if (strcmp(argv[i], "--iters") == 0)
      dst = &iters, hi = 100000;
    if (!dst || i + 1 >= argc || parse_num(argv[++i], lo, hi, dst) != 0)
      usage();
  }
  size_t n = (size_t)params;
  int T = (int)threads, K = (int)iters;

  float *p = alloc_fill(n, -0.5f, 1.0f / 1024, T), *g = alloc_fill(n, -0.01f, 0.02f / 1024, T);
  float *s1 = alloc_fill(n, 0.0f, 0.0f, T), *s2 = alloc_fill(n, 0.0f, 0.0f, T);
  float *a = alloc_fill(n, 0.0f, 0.0f, T), *b = alloc_fill(n, 1.0f, 0.0f, T);
  float *c = alloc_fill(n, 2.0f, 0.0f, T);
  double *t_triad = malloc(sizeof(double) * (size_t)K * N_KINDS);
  double *t_opt = malloc(sizeof(double) * (size_t)K * N_KINDS);
  if (!t_triad || !t_opt)
    return 1;

  fl_optim_hparams hp[N_KINDS];
  fl_optim_tensor t[N_KINDS];
  for (int k = 0; k < N_KINDS; k++) {
    hp[k] = fl_optim_hparams_default((fl_optim_kind)k);
    hp[k].num_threads = T;
    int ns = fl_optim_state_count((fl_optim_kind)k);
    t[k] = (fl_optim_tensor){"layer.w", p, g, ns >= 1 ? s1 : NULL, ns >= 2 ? s2 : NULL, n};
  }

  /* Round 0 warms up (thread pool, code); rounds 1..K are timed. */
  for (int r = 0; r <= K; r++)
    for (int k = 0; k < N_KINDS; k++) {
      fl_status st = fl_optim_init_state(&hp[k], &t[k], 1);
      double t0 = now();
      triad(a, b, c, 3.0f, n, T);
      double t1 = now();
      if (st == FL_OK)
        st = fl_optim_step(&hp[k], &t[k], 1, 1e-3f, r + 1);
      double t2 = now();
      if (st != FL_OK) {
        fprintf(stderr, "bench_optim: %s step failed: %s\n", fl_optim_kind_name((fl_optim_kind)k),
                fl_strerror(st));
        return 1;
      }
      if (r > 0) {
        t_triad[(r - 1) * N_KINDS + k] = t1 - t0;
        t_opt[k * K + r - 1] = t2 - t1;
      }
    }

  double tri = median(t_triad, K * N_KINDS);
  double tri_gbps = 12.0 * (double)n / tri / 1e9;
  printf("params: %zu floats\n", n);
  printf("threads: %d threads\n", T);
  printf("iters: %d steps\n", K);
  printf("triad_cpu_ms: %.2f ms\n", tri * 1e3);
  printf("triad_cpu_gbps: %.2f GB/s\n", tri_gbps);
  for (int k = 0; k < N_KINDS; k++) {
    const char *name = fl_optim_kind_name((fl_optim_kind)k);
    double sec = median(t_opt + (size_t)k * K, K);
    double gbps = (double)bytes_per_param[k] * (double)n / sec / 1e9;
    printf("%s_cpu_ms: %.2f ms\n", name, sec * 1e3);
    printf("%s_cpu_gbps: %.2f GB/s\n", name, gbps);
    printf("%s_cpu_of_triad: %.2f\n", name, gbps / tri_gbps);
  }
  /* Keep the triad's output alive so no compiler can drop the loop. */
  if (a[n / 2] != 7.0f)
    fprintf(stderr, "bench_optim: triad result %g, expected 7\n", (double)a[n / 2]);
  free(p), free(g), free(s1), free(s2), free(a), free(b), free(c);
  free(t_triad), free(t_opt);
  return 0;
}
