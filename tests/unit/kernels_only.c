/* kernels_only.c - a program that uses only the plain C ABI of the kernels
 * (fl_optim.h, fl_status.h, fl_log.h) and links only libflkernels.  That it
 * links at all shows libflkernels needs nothing from libflotilla;
 * test_libflkernels.sh runs it and checks that neither it nor the library
 * pulls in gRPC, protobuf-c, libuv, libyaml, libmicrohttpd or libsystemd.
 *
 * It takes one SGD step and one Adam step on a small tensor and compares
 * them with the formulas of docs/DESIGN.md section 5, evaluated here in
 * double.  Exit 0 on success, 1 on a mismatch (printed). */
#include <math.h>
#include <stdio.h>

#include "fl_log.h"
#include "fl_optim.h"
#include "fl_status.h"

#define N 5

static int close_to(const char *what, size_t i, float got, double want) {
  if (fabs((double)got - want) <= 1e-6 * (1.0 + fabs(want))) return 1;
  fprintf(stderr, "%s[%zu] = %.9g, expected %.9g\n", what, i, (double)got, want);
  return 0;
}

int main(void) {
  int ok = 1;
  float p[N], g[N], m[N] = {0}, v[N] = {0};
  const float lr = 0.1f, wd = 0.01f;

  /* SGD: p -= lr*(g + wd*p) */
  for (int i = 0; i < N; i++) {
    p[i] = 1.0f + 0.25f * (float)i;
    g[i] = 0.5f - 0.3f * (float)i;
  }
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_SGD);
  hp.weight_decay = wd;
  hp.num_threads = 1;
  fl_optim_tensor t = {.name = "w", .param = p, .grad = g, .n = N};
  int st = fl_optim_step(&hp, &t, 1, lr, 1);
  if (st != FL_OK) {
    fprintf(stderr, "sgd step: %s\n", fl_strerror(st));
    return 1;
  }
  for (int i = 0; i < N; i++) {
    double p0 = 1.0 + 0.25 * i, g0 = (double)(0.5f - 0.3f * (float)i);
    ok &= close_to("sgd p", (size_t)i, p[i], p0 - (double)lr * (g0 + (double)wd * p0));
  }

  /* Adam, first step: m_hat = g, v_hat = g*g, so p -= lr*g/(|g| + eps). */
  for (int i = 0; i < N; i++) p[i] = 1.0f + 0.25f * (float)i;
  hp = fl_optim_hparams_default(FL_OPTIM_ADAM);
  hp.num_threads = 1;
  t = (fl_optim_tensor){.name = "w", .param = p, .grad = g, .state1 = m, .state2 = v, .n = N};
  st = fl_optim_step(&hp, &t, 1, lr, 1);
  if (st != FL_OK) {
    fprintf(stderr, "adam step: %s\n", fl_strerror(st));
    return 1;
  }
  for (int i = 0; i < N; i++) {
    double p0 = 1.0 + 0.25 * i, g0 = (double)(0.5f - 0.3f * (float)i);
    ok &= close_to("adam p", (size_t)i, p[i], p0 - (double)lr * g0 / (fabs(g0) + hp.epsilon));
  }

  fl_optim_kind k;
  if (fl_optim_kind_parse("adamw", &k) != FL_OK || k != FL_OPTIM_ADAMW) {
    fprintf(stderr, "fl_optim_kind_parse(\"adamw\") failed\n");
    ok = 0;
  }
  fl_log(FL_LOG_INFO, "kernels_only: %s", ok ? "all values as expected" : "mismatch");
  return ok ? 0 : 1;
}
