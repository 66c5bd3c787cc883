/* fuzz_config.c - the job-file parser (fl_job_load_string) on hostile YAML.
 *
 * Input: the YAML text (cut at the first NUL, as a C string would be).
 * Invariants: a rejected file gives FL_EINVAL with a message; an accepted
 * one validates, writes back out (fl_job_write_yaml) as YAML that loads to
 * the same struct byte for byte, and yields hyper-parameters, a learning
 * rate schedule, a loss scaler and a strategy overview without tripping
 * anything. */
#include <config.h>

#include <math.h>
#include <string.h>

#include "fl_config.h"
#include "fuzz.h"

#define FUZZ_MAX_INPUT (256 * 1024)

static fl_job g_job, g_again; /* large: kept off the stack */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_logging();
  return 0;
}

/* The derived views of an accepted job. */
static void use_job(const fl_job *job) {
  const char *ex[FL_JOB_MAX_LIST];
  fl_optim_hparams hp, dense, sparse;
  fl_lr_schedule lr;
  char *text = NULL;
  size_t len = 0;

  FUZZ_CHECK(fl_job_optim_hparams(job, &hp, ex) == FL_OK, "%s", job->source);
  FUZZ_CHECK(fl_job_pserver_hparams(job, &dense, &sparse, ex) == FL_OK, "%s", job->source);
  FUZZ_CHECK(fl_job_merge_steps(job) >= 1, "merge steps %d", fl_job_merge_steps(job));
  fl_loss_scaler ls = fl_job_loss_scaler(job);
  FUZZ_CHECK(fl_loss_scaler_check(&ls) == FL_OK, "loss scaler of an accepted job");
  /* A run long enough for any accepted warmup/decay, and a short one that
   * may be refused with a status. */
  int64_t steps[2] = {INT64_C(1) << 40, 10};
  for (int k = 0; k < 2; k++) {
    if (fl_job_lr_schedule(job, steps[k], &lr) != FL_OK) continue;
    int64_t at[5] = {0, 1, steps[k] / 2, steps[k] - 1, steps[k] + 5};
    for (int i = 0; i < 5; i++) {
      float v = fl_lr_at(&lr, at[i]);
      FUZZ_CHECK(isfinite(v) && v >= 0.0f, "lr at step %lld is %g", (long long)at[i], (double)v);
    }
  }
  FILE *m = open_memstream(&text, &len);
  FUZZ_CHECK(m != NULL, "open_memstream");
  fl_strategy_print_overview(job, m);
  fclose(m);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text, *dump = NULL;
  size_t dlen = 0;

  if (size > FUZZ_MAX_INPUT) return 0;
  text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';

  fl_status st = fl_job_load_string(text, "fuzz.yaml", &g_job);
  if (st != FL_OK) {
    FUZZ_CHECK(st == FL_EINVAL, "status %d", (int)st);
    FUZZ_CHECK(fl_job_last_error()[0] != '\0', "rejected without a message");
    free(text);
    return 0;
  }
  FUZZ_CHECK(fl_job_validate(&g_job) == FL_OK, "%s", fl_job_last_error());

  FILE *m = open_memstream(&dump, &dlen);
  FUZZ_CHECK(m != NULL, "open_memstream");
  FUZZ_CHECK(fl_job_write_yaml(&g_job, m) == FL_OK, "write_yaml");
  fclose(m);
  st = fl_job_load_string(dump, "fuzz.yaml", &g_again);
  FUZZ_CHECK(st == FL_OK, "the written job does not load: %s\n--- written:\n%s",
             fl_job_last_error(), dump);
  FUZZ_CHECK(memcmp(&g_job, &g_again, sizeof g_job) == 0,
             "the written job loads to a different struct\n--- written:\n%s", dump);
  use_job(&g_job);
  free(dump);
  free(text);
  return 0;
}
