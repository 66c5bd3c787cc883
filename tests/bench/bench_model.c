/* bench_model.c - throughput of the built-in models' train step and their
 * activation memory with and without recompute (a benchmark, never a test).
 *
 * Usage: bench_model [steps_scale]   (default 1; 0.2 for a quick look)
 *
 * Prints `name: value unit` lines: for the default MLP (784-256-128-100-10)
 * and the default CNN (none / bn / gn) at batch 64 on one BLAS thread, the
 * median samples/s of forward+backward alone and of forward+backward plus
 * a momentum step (what a training loop does per batch), and the
 * activation bytes of the plain and the recompute build and their ratio.
 * With a CUDA device, also the MLP's train step on the GPU (device gpu:
 * parameter upload, forward, backward, gradient download) with fp32,
 * fp16 and bf16 GEMMs; without one those lines are not printed.
 * Inputs are random (speed does not depend on the values). */
#include <config.h>

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fl_device.h"
#include "fl_model.h"
#include "fl_optim.h"

#define BATCH 64
#define REPS 7

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static fl_model *build_on(const char *kind, const char *norm, int recompute, int gpu,
                          fl_math math) {
  fl_model_spec s;
  fl_model_spec_defaults(&s);
  snprintf(s.kind, sizeof s.kind, "%s", kind);
  snprintf(s.norm, sizeof s.norm, "%s", norm);
  s.recompute = recompute;
  if (gpu) snprintf(s.device, sizeof s.device, "gpu");
  s.linear_math = s.conv_math = math;
  fl_model *m = NULL;
  if (fl_model_create(&s, BATCH, 1, &m) != FL_OK) {
    fprintf(stderr, "bench_model: cannot build %s %s\n", kind, norm);
    exit(1);
  }
  return m;
}

static fl_model *build(const char *kind, const char *norm, int recompute) {
  return build_on(kind, norm, recompute, 0, FL_MATH_FP32);
}

/* Median samples/s over REPS runs of `steps` train steps (with a momentum
 * step after each when optim is set). */
static double samples_per_s(fl_model *m, int steps, int optim, const float *x,
                            const int32_t *y) {
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_MOMENTUM);
  hp.num_threads = 1;
  fl_optim_tensor t[32];
  size_t nt = 0;
  for (size_t i = 0; i < fl_model_num_params(m) && nt < 32; i++) {
    fl_param *p = fl_model_param(m, i);
    if (!p->grad) continue;
    t[nt] = (fl_optim_tensor){p->name, p->value, p->grad, calloc(p->n, sizeof(float)), NULL,
                              p->n};
    nt++;
  }
  double rate[REPS];
  int64_t step = 1;
  fl_model_train_step(m, x, y, BATCH, 1.0f, NULL, NULL, NULL); /* warm up */
  for (int r = 0; r < REPS; r++) {
    const double t0 = now();
    for (int k = 0; k < steps; k++) {
      if (fl_model_train_step(m, x, y, BATCH, 1.0f, NULL, NULL, NULL) != FL_OK) exit(1);
      if (optim && fl_optim_step(&hp, t, nt, 0.001f, step++) != FL_OK) exit(1);
    }
    rate[r] = (double)steps * BATCH / (now() - t0);
  }
  for (size_t i = 0; i < nt; i++) free(t[i].state1);
  qsort(rate, REPS, sizeof *rate, cmp_double);
  return rate[REPS / 2];
}

/* A random batch for model m (x: BATCH * input floats, y: BATCH labels). */
static void random_batch(const fl_model *m, float **x, int32_t **y) {
  const size_t in = fl_model_input_size(m);
  *x = malloc(BATCH * in * sizeof **x);
  *y = malloc(BATCH * sizeof **y);
  if (!*x || !*y) exit(1);
  uint64_t s = 12345;
  for (size_t i = 0; i < BATCH * in; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    (*x)[i] = (float)(s >> 40) * 0x1p-24f;
  }
  for (int i = 0; i < BATCH; i++) (*y)[i] = i % 10;
}

static void bench(const char *label, const char *kind, const char *norm, int steps) {
  fl_model *plain = build(kind, norm, 0), *rc = build(kind, norm, 1);
  float *x;
  int32_t *y;
  random_batch(plain, &x, &y);
  printf("%s_train_step_samples_per_s: %.0f samples/s\n", label,
         samples_per_s(plain, steps, 0, x, y));
  printf("%s_train_step_optim_samples_per_s: %.0f samples/s\n", label,
         samples_per_s(plain, steps, 1, x, y));
  printf("%s_recompute_train_step_samples_per_s: %.0f samples/s\n", label,
         samples_per_s(rc, steps, 0, x, y));
  const size_t a = fl_model_activation_bytes(plain), b = fl_model_activation_bytes(rc);
  printf("%s_activation_bytes: %zu bytes\n", label, a);
  printf("%s_recompute_activation_bytes: %zu bytes\n", label, b);
  printf("%s_recompute_activation_ratio: %.3f\n", label, (double)b / (double)a);
  fflush(stdout);
  free(x);
  free(y);
  fl_model_destroy(plain);
  fl_model_destroy(rc);
}

/* The default MLP on the GPU, fp32 / fp16 / bf16 GEMMs, side by side. */
static void bench_gpu(int steps) {
  static const char *const names[] = {"fp32", "fp16", "bf16"};
  static const fl_math maths[] = {FL_MATH_FP32, FL_MATH_FP16, FL_MATH_BF16};
  double rate[3];
  for (int k = 0; k < 3; k++) {
    fl_model *m = build_on("mlp", "", 0, 1, maths[k]);
    float *x;
    int32_t *y;
    random_batch(m, &x, &y);
    rate[k] = samples_per_s(m, steps, 0, x, y);
    printf("mlp_gpu_%s_train_step_samples_per_s: %.0f samples/s\n", names[k], rate[k]);
    free(x);
    free(y);
    fl_model_destroy(m);
  }
  printf("mlp_gpu_fp16_vs_fp32: %.2f x\n", rate[1] / rate[0]);
  fflush(stdout);
}

int main(int argc, char **argv) {
  const double scale = argc > 1 ? atof(argv[1]) : 1.0;
  openblas_set_num_threads(1); /* the target is one thread; the loop sets it in training */
  const int mlp_steps = (int)(200 * scale) > 0 ? (int)(200 * scale) : 1;
  const int cnn_steps = (int)(4 * scale) > 0 ? (int)(4 * scale) : 1;
  printf("batch: %d samples\n", BATCH);
  bench("mlp", "mlp", "", mlp_steps);
  bench("cnn", "cnn", "", cnn_steps);
  bench("cnn_bn", "cnn", "bn", cnn_steps);
  bench("cnn_gn", "cnn", "gn", cnn_steps);
  if (fl_cuda_device_count() > 0) bench_gpu(mlp_steps * 5);
  return 0;
}
