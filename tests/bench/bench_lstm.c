/* bench_lstm.c - one-thread training-step speed of an imported ONNX model
 * (bench_lstm.sh's BiLSTM text classifier, exported by lstm_torch.py):
 * forward, softmax cross-entropy and backward on one batch of random
 * features, as PyTorch's side times them (no optimizer step).  A
 * benchmark, never a pass/fail test.
 *
 * Usage: bench_lstm MODEL.onnx BATCH STEPS REPS
 * Prints `lstm_samples_per_s: V samples/s`: the median over REPS runs of
 * STEPS timed steps (after 3 warm-up steps), wall time; and
 * `lstm_samples_per_cpu_s`, the same per second of this process's CPU
 * time (steadier on a loaded machine). */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fl_graph.h"
#include "fl_log.h"
#include "fl_onnx.h"

static double now(clockid_t which) {
  struct timespec ts;
  clock_gettime(which, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Steps of the model h on x, y; FL_OK or the first failure. */
static fl_status run(void *h, const float *x, const int32_t *y, size_t batch, int steps) {
  fl_model_result res;
  for (int s = 0; s < steps; s++)
    FL_TRY(fl_graph_model_ops.train_step(h, x, y, batch, 1.0f, NULL, NULL, &res));
  return FL_OK;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s MODEL.onnx BATCH STEPS REPS\n", argv[0]);
    return 2;
  }
  const size_t batch = (size_t)atol(argv[2]);
  const int steps = atoi(argv[3]), reps = atoi(argv[4]);
  if (!batch || steps < 1 || reps < 1 || reps > 99) return 2;
  fl_graph *g = NULL;
  void *h = NULL;
  if (fl_onnx_load(argv[1], NULL, FL_GLOSS_SOFTMAX_XENT, &g) != FL_OK) return 1;
  const fl_graph_options opt = {.max_batch = batch, .seed = 1, .device = -1};
  if (fl_graph_model_create(g, &opt, &h) != FL_OK) return 1;
  const size_t in = fl_graph_model_ops.input_size(h);
  float *x = malloc(batch * in * sizeof *x);
  int32_t *y = malloc(batch * sizeof *y);
  if (!x || !y) {
    fprintf(stderr, "bench_lstm: out of memory\n");
    return 1;
  }
  unsigned s = 1;
  for (size_t i = 0; i < batch * in; i++) x[i] = (float)(rand_r(&s) % 2001 - 1000) / 1000.0f;
  for (size_t i = 0; i < batch; i++) y[i] = (int32_t)(i % 4);
  double rates[99], cpu_rates[99];
  int rc = run(h, x, y, batch, 3) != FL_OK;
  for (int r = 0; r < reps && !rc; r++) {
    const double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    rc = run(h, x, y, batch, steps) != FL_OK;
    rates[r] = (double)steps * (double)batch / (now(CLOCK_MONOTONIC) - t0);
    cpu_rates[r] = (double)steps * (double)batch / (now(CLOCK_PROCESS_CPUTIME_ID) - c0);
  }
  if (!rc) {
    qsort(rates, (size_t)reps, sizeof rates[0], cmp_double);
    qsort(cpu_rates, (size_t)reps, sizeof cpu_rates[0], cmp_double);
    printf("lstm_samples_per_s: %.1f samples/s\n", rates[reps / 2]);
    printf("lstm_samples_per_cpu_s: %.1f samples/s\n", cpu_rates[reps / 2]);
  }
  fl_graph_model_ops.destroy(h);
  free(x);
  free(y);
  return rc;
}
