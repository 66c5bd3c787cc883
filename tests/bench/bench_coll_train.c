/* bench_coll_train.c - collective-mode training speed of the MLP
 * (784-256-128-100-10, Fashion-MNIST, batch 64 per rank, momentum, one
 * kernel thread per rank: deploy/examples/mlp_fmnist.yaml) with 2 ranks on
 * this machine, against the same job in one local process.
 *
 * Gradients go in one bucket per layer (fuse_grad_size_in_TFLOPS 1), so a
 * layer's allreduce can run while backward computes the layers below it;
 * FLOTILLA_COLLECTIVE_OVERLAP=0 holds every bucket until backward is done,
 * which is the "overlap off" figure.  Times are the loop's own training
 * time (fl_trainer_report.train_seconds: steps only, no data loading).
 *   coll_train_step_ms_1r_local: 3.1 ms
 *   coll_train_step_ms_2r_shm_overlap_on: 4.0 ms
 *   coll_train_samples_per_s_2r_shm: 30000 samples/s
 * With --sync-bn the job (a model with batch norm, e.g.
 * deploy/examples/cnn_fmnist.yaml) runs instead with 2 ranks over shm,
 * sync_batch_norm off then on, which prices the statistics allreduces:
 *   coll_train_step_ms_2r_shm_syncbn_on: 60.0 ms
 *   ratio_syncbn_on_vs_off: 1.05 x
 * Usage: bench_coll_train [JOB.yaml] [--steps N] [--sync-bn]; JOB defaults
 * to $FL_SRCDIR/deploy/examples/mlp_fmnist.yaml.  Never a pass/fail test. */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/coll_testutil.h"
#include "fl_cluster.h"
#include "fl_config.h"
#include "fl_log.h"
#include "fl_sync_collective.h"
#include "fl_trainer.h"

typedef struct result {
  double seconds;
  int64_t steps, samples;
} result;

typedef struct bench {
  const char *job_path;
  int64_t steps;
  const char *backend;
  int overlap;
  int sync_bn;  /* strategy.sync_batch_norm: -1 as in the job, else 0 / 1 */
  result *out; /* shared, one per rank */
} bench;

static fl_status load_job(const bench *b, int collective, fl_job *job) {
  FL_TRY(fl_job_load_file(b->job_path, job));
  job->train.max_steps = b->steps;
  job->train.eval = 0;
  job->train.log_interval = 1000000;
  job->train.checkpoint_dir[0] = '\0';
  job->strategy.fuse_grad_size_in_TFLOPS = 1;
  job->cluster.mode = collective ? FL_MODE_COLLECTIVE : FL_MODE_LOCAL;
  if (b->sync_bn >= 0) job->strategy.sync_batch_norm = b->sync_bn;
  return FL_OK;
}

static int train(const bench *b, fl_cluster *cl, int collective, int rank) {
  fl_job job;
  if (load_job(b, collective, &job) != FL_OK) return 20;
  fl_sync sync;
  fl_status st = collective ? fl_sync_collective_create(&job, cl, &sync)
                            : fl_sync_local_create(&job, cl, &sync);
  if (st != FL_OK) return 21;
  FILE *devnull = fopen("/dev/null", "w");
  fl_trainer_options opts = {.job = &job, .log = devnull};
  fl_trainer_report rep;
  st = fl_trainer_run(&opts, &sync, &rep);
  if (st == FL_OK) st = sync.ops->finish(sync.self);
  sync.ops->destroy(sync.self);
  if (devnull) fclose(devnull);
  if (st != FL_OK) return 22;
  b->out[rank].seconds = rep.train_seconds;
  b->out[rank].steps = rep.steps;
  b->out[rank].samples = rep.train_samples;
  return 0;
}

static int rank_main(ct_job *j, int r, void *arg) {
  bench *b = arg;
  setenv("FLOTILLA_COLLECTIVE_OVERLAP", b->overlap ? "1" : "0", 1);
  fl_cluster cl;
  fl_cluster_defaults(&cl);
  snprintf(cl.collective_backend, sizeof cl.collective_backend, "%s", b->backend);
  cl.mode = FL_MODE_COLLECTIVE;
  cl.mode_set = 1;
  cl.trainer_id = r;
  cl.trainers_num = j->n;
  for (int q = 0; q < j->n; q++) cl.trainer_endpoints[q] = j->eps[q];
  cl.n_trainer_endpoints = j->n;
  cl.current_endpoint = j->eps[r];
  cl.has_current_endpoint = 1;
  snprintf(cl.token, sizeof cl.token, "bench-token");
  return train(b, &cl, 1, r);
}

/* Prints the figures of one run; returns its step time in ms (0 if failed). */
static double report(const char *name, const bench *b, int n) {
  double worst = 0;
  int64_t samples = 0, steps = 0;
  for (int r = 0; r < n; r++) {
    if (b->out[r].seconds > worst) worst = b->out[r].seconds;
    samples += b->out[r].samples;
    steps = b->out[r].steps;
  }
  if (steps <= 0 || worst <= 0) {
    printf("%s: failed\n", name);
    return 0;
  }
  printf("coll_train_step_ms_%s: %.3f ms\n", name, worst / (double)steps * 1e3);
  printf("coll_train_samples_per_s_%s: %.0f samples/s\n", name, (double)samples / worst);
  fflush(stdout);
  return worst / (double)steps * 1e3;
}

/* One 2-rank run over 127.0.0.1; returns its step time in ms (0 if failed). */
static double run_2r(bench *b, const char *name) {
  const char *hosts[] = {"127.0.0.1", "127.0.0.1"};
  ct_job j;
  if (ct_job_init(&j, 2, hosts) != 0) {
    printf("%s: failed\n", name);
    return 0;
  }
  ct_job_release(&j); /* fl_sync_collective_create binds the endpoints */
  memset(b->out, 0, CT_MAX_RANKS * sizeof(result));
  if (ct_run(&j, rank_main, b, 600.0) != 0) {
    printf("%s: failed\n", name);
    return 0;
  }
  return report(name, b, 2);
}

int main(int argc, char **argv) {
  static char path[1024];
  const char *src = getenv("FL_SRCDIR");
  snprintf(path, sizeof path, "%s/deploy/examples/mlp_fmnist.yaml", src ? src : "..");
  bench b = {path, 300, "shm", 1, -1, NULL};
  int sync_bn = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      b.steps = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--sync-bn"))
      sync_bn = 1;
    else if (argv[i][0] != '-')
      b.job_path = argv[i];
    else {
      fprintf(stderr, "usage: %s [JOB.yaml] [--steps N] [--sync-bn]\n", argv[0]);
      return 2;
    }
  }
  fl_log_set_level(FL_LOG_WARN);
  b.out = ct_shared(CT_MAX_RANKS * sizeof(result));
  if (!b.out) return 1;
  if (sync_bn) {
    double ms[2];
    for (int on = 0; on <= 1; on++) {
      b.sync_bn = on;
      ms[on] = run_2r(&b, on ? "2r_shm_syncbn_on" : "2r_shm_syncbn_off");
    }
    if (ms[0] > 0 && ms[1] > 0) printf("ratio_syncbn_on_vs_off: %.2f x\n", ms[1] / ms[0]);
    return 0;
  }

  /* One local process: the compute-only reference. */
  memset(b.out, 0, CT_MAX_RANKS * sizeof(result));
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) {
    fl_cluster cl;
    fl_cluster_defaults(&cl);
    _exit(train(&b, &cl, 0, 0));
  }
  int ws = 0;
  waitpid(p, &ws, 0);
  report("1r_local", &b, 1);

  static const char *const backends[] = {"shm", "tcp"};
  for (int bi = 0; bi < 2; bi++)
    for (int ov = 1; ov >= 0; ov--) {
      b.backend = backends[bi];
      b.overlap = ov;
      char name[64];
      snprintf(name, sizeof name, "2r_%s_overlap_%s", b.backend, ov ? "on" : "off");
      run_2r(&b, name);
    }
  return 0;
}
