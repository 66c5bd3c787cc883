/* bench_optim_cuda.c - device throughput of the CUDA optimizer step, beside
 * the device-to-device copy bandwidth measured in the same run.
 *
 * 16M fp32 parameters (FL_BENCH_PARAMS overrides) live on the device; each
 * optimizer steps them as one tensor, and Adam also as 256 tensors (the
 * multi-tensor path).  A step's effective bytes are those one fused pass
 * must move: parameter, gradient and every state buffer read, parameter and
 * state written (SGD 12, Momentum/Adagrad/LARS 20, Adam/AdamW/LAMB 28 bytes
 * per parameter; LARS and LAMB really make a second pass for their norms,
 * which this count does not credit).  The copy moves a buffer of the same
 * size with cudaMemcpy device-to-device and counts its read and write.
 * Each figure is the median of 7 repetitions of 20 steps, timed on the host
 * around a device synchronize.  Without a device it prints
 * `cuda: unavailable` and exits 0.  Output: `name: value unit` lines. */
#include <config.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fl_device.h"
#include "fl_optim.h"

#define REPS 7
#define ITERS 20

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* Exit with a message when a device call fails (it logged the cause). */
static void need(fl_status st, const char *what) {
  if (st != FL_OK) {
    fprintf(stderr, "bench_optim_cuda: %s: %s\n", what, fl_strerror(st));
    exit(1);
  }
}

/* Seconds per copy of `bytes` device to device (median). */
static double time_d2d(void *dst, const void *src, size_t bytes) {
  double t[REPS];
  need(fl_cuda_copy_device(dst, src, bytes, NULL), "warm-up copy");
  for (int r = 0; r < REPS; r++) {
    double t0 = now_s();
    for (int i = 0; i < ITERS; i++)
      need(fl_cuda_copy_device_async(dst, src, bytes, NULL), "device copy");
    need(fl_cuda_synchronize(), "synchronize");
    t[r] = (now_s() - t0) / ITERS;
  }
  return median(t, REPS);
}

/* Seconds per step of hp over the tensors (median). */
static double time_step(const fl_optim_hparams *hp, fl_optim_tensor *t, size_t nt) {
  double s[REPS];
  int64_t step = 1;
  need(fl_optim_step_cuda(hp, t, nt, 1e-3f, step++, NULL), "warm-up step");
  for (int r = 0; r < REPS; r++) {
    need(fl_cuda_synchronize(), "synchronize");
    double t0 = now_s();
    for (int i = 0; i < ITERS; i++) need(fl_optim_step_cuda(hp, t, nt, 1e-3f, step++, NULL), "step");
    need(fl_cuda_synchronize(), "synchronize");
    s[r] = (now_s() - t0) / ITERS;
  }
  return median(s, REPS);
}

/* Bytes one fused pass moves per parameter. */
static double bytes_per_param(fl_optim_kind kind) {
  return 4.0 * (3 + 2 * fl_optim_state_count(kind));
}

int main(void) {
  if (fl_cuda_device_count() == 0) {
    printf("cuda: unavailable\n");
    return 0;
  }
  size_t n = (size_t)16 << 20;
  const char *env = getenv("FL_BENCH_PARAMS");
  if (env && strtoull(env, NULL, 10) > 0) n = (size_t)strtoull(env, NULL, 10);
  size_t bytes = n * sizeof(float);

  /* param, grad, state1, state2: four n-float device buffers. */
  float *buf[4];
  for (int i = 0; i < 4; i++) {
    need(fl_cuda_malloc((void **)&buf[i], bytes), "device allocation");
    need(fl_cuda_memset(buf[i], 0, bytes, NULL), "memset");
  }
  /* Gradients 1.0 and parameters 0.5: finite values for every optimizer. */
  {
    float *h = malloc(bytes);
    if (!h) return 1;
    for (size_t i = 0; i < n; i++) h[i] = 1.0f;
    need(fl_cuda_copy_to_device(buf[1], h, bytes, NULL), "copy");
    for (size_t i = 0; i < n; i++) h[i] = 0.5f;
    need(fl_cuda_copy_to_device(buf[0], h, bytes, NULL), "copy");
    free(h);
  }

  double d2d = 2.0 * (double)bytes / time_d2d(buf[3], buf[2], bytes) / 1e9;
  printf("params: %zu\n", n);
  printf("d2d_cuda_gbps: %.1f GB/s\n", d2d);

  static const fl_optim_kind kinds[] = {FL_OPTIM_SGD,     FL_OPTIM_MOMENTUM, FL_OPTIM_ADAM,
                                        FL_OPTIM_ADAMW,   FL_OPTIM_ADAGRAD,  FL_OPTIM_LARS,
                                        FL_OPTIM_LAMB};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    fl_optim_hparams hp = fl_optim_hparams_default(kinds[k]);
    int ns = fl_optim_state_count(kinds[k]);
    fl_optim_tensor t = {"w", buf[0], buf[1], ns >= 1 ? buf[2] : NULL, ns >= 2 ? buf[3] : NULL,
                         n};
    need(fl_cuda_memset(buf[2], 0, bytes, NULL), "memset");
    need(fl_cuda_memset(buf[3], 0, bytes, NULL), "memset");
    double s = time_step(&hp, &t, 1);
    double gbps = bytes_per_param(kinds[k]) * (double)n / s / 1e9;
    const char *name = fl_optim_kind_name(kinds[k]);
    printf("%s_cuda_ms: %.4f ms\n", name, 1e3 * s);
    printf("%s_cuda_gbps: %.1f GB/s\n", name, gbps);
    printf("%s_cuda_of_d2d: %.3f\n", name, gbps / d2d);
  }

  /* Adam over the same parameters cut into 256 tensors. */
  {
    enum { NT = 256 };
    fl_optim_tensor t[NT];
    fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_ADAM);
    size_t off = 0;
    for (int i = 0; i < NT; i++) {
      size_t len = n / NT + (i < (int)(n % NT));
      t[i] = (fl_optim_tensor){"w", buf[0] + off, buf[1] + off, buf[2] + off, buf[3] + off, len};
      off += len;
    }
    need(fl_cuda_memset(buf[2], 0, bytes, NULL), "memset");
    need(fl_cuda_memset(buf[3], 0, bytes, NULL), "memset");
    double s = time_step(&hp, t, NT);
    double gbps = bytes_per_param(FL_OPTIM_ADAM) * (double)n / s / 1e9;
    printf("adam_cuda_256t_ms: %.4f ms\n", 1e3 * s);
    printf("adam_cuda_256t_gbps: %.1f GB/s\n", gbps);
    printf("adam_cuda_256t_of_d2d: %.3f\n", gbps / d2d);
  }

  for (int i = 0; i < 4; i++) need(fl_cuda_free(buf[i]), "free");
  return 0;
}
