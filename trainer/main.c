/* main.c - flotilla-trainer: read the job file and this process's place in
 * the cluster, pick the mode's fl_sync from the table below, and hand over
 * to the training loop (loop.c).  Kept thin on purpose: everything that
 * trains lives behind fl_trainer_run.
 *
 * SIGTERM or SIGINT: the step in progress is finished, the ranks agree on
 * a step to stop at, rank 0 checkpoints there and the trainer exits 0
 * (--resume continues); a second signal exits at once (128 + signal).
 *
 * Exit status: 0 the run finished, or was stopped by a signal and
 * checkpointed; 1 it failed while running (data files, checkpoints, model,
 * peers); 2 the command line, the job file or the FLOTILLA_* environment is
 * wrong (nothing was trained). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "fl_cluster.h"
#include "fl_config.h"
#include "fl_device.h"
#include "fl_log.h"
#include "fl_notify.h"
#include "fl_obs.h"
#include "fl_proc.h"
#include "fl_ps_client.h"
#include "fl_sync_collective.h"
#include "fl_trainer.h"

#define EXIT_RUN 1
#define EXIT_USAGE 2

/* Mode -> constructor.  A mode that is not listed here is not built in. */
static const struct {
  fl_mode mode;
  fl_sync_create_fn create;
} g_modes[] = {
    {FL_MODE_LOCAL, fl_sync_local_create},
    {FL_MODE_PS, fl_sync_ps_create},
    {FL_MODE_COLLECTIVE, fl_sync_collective_create},
};

static void usage(FILE *out) {
  fprintf(out,
          "Usage: flotilla-trainer --config FILE [options] [cluster flags]\n"
          "\n"
          "Trains the model of a Flotilla job file (see the README) in the mode the job\n"
          "or FLOTILLA_MODE names: local (one trainer), collective or ps.\n"
          "\n"
          "Options:\n"
          "  --config FILE        the YAML job file (required)\n"
          "  --resume             continue from the newest checkpoint in the checkpoint\n"
          "                       directory (train.checkpoint_dir, FLOTILLA_CHECKPOINT_DIR\n"
          "                       or --checkpoint_dir), even one of another run; none\n"
          "                       there: start from scratch.  Without it, this run's own\n"
          "                       checkpoints are resumed and another run's refused\n"
          "  --fresh              move another run's checkpoints aside (into\n"
          "                       <dir>/old-<time>/) and start from scratch\n"
          "  --dump-config FILE   write the resolved job as YAML to FILE ('-' = stdout)\n"
          "                       and exit (it loads again as the same job)\n"
          "  --export-onnx FILE   write the model of the newest checkpoint in the checkpoint\n"
          "                       directory as ONNX to FILE and exit (logreg, mlp, cnn and\n"
          "                       onnx models; nothing is trained)\n"
          "  --max-steps N        stop after optimizer step N (N >= 1); the learning-rate\n"
          "                       schedule still spans the whole job, so a run stopped\n"
          "                       here and resumed equals an uninterrupted one\n"
          "  --log-level LEVEL    debug, info (default), warn, error or off\n"
          "  --metrics_addr ADDR  serve Prometheus /metrics on host:port (default: the\n"
          "                       job's cluster.metrics_addr; none: no endpoint)\n"
          "  --timeline FILE      write a Chrome-tracing JSON timeline of this rank\n"
          "                       (forward, backward, allreduce buckets, push, pull, wait)\n"
          "                       (also FLOTILLA_LOG_LEVEL)\n"
          "  --version            the version and the features of this build\n"
          "  --help               this text\n"
          "Options take their value as the next argument or after '='.\n"
          "\n"
          "Cluster flags (--name=value; each overrides its FLOTILLA_* variable):\n");
  fl_cluster_print_flag_help(out);
  fprintf(out,
          "\n"
          "Environment: each cluster flag's FLOTILLA_* variable (above), and\n"
          "  FLOTILLA_TOKEN                 the shared secret (never a flag)\n"
          "  FLOTILLA_LOG_LEVEL             as --log-level\n"
          "  FLOTILLA_RUN_ID                this run's id, recorded in its checkpoints\n"
          "                                 (flotilla-run sets it; default: random in local\n"
          "                                 mode, else derived from the job and cluster)\n"
          "\n"
          "Exit status: 0 done; 1 failed while running (data, checkpoint, peers);\n"
          "2 bad command line, job file or environment.\n");
}

/* train.device gpu: this trainer's GPU is fl_cluster_gpu's choice: the
 * one FLOTILLA_SELECTED_GPUS names (flotilla-run --gpus gives each trainer
 * one; with several, the local rank picks among them), else its local rank
 * modulo the GPUs of the node; the NCCL backend uses the same GPU.  Checked before joining the
 * job, so that a trainer that cannot run fails alone and at once. */
static fl_status pick_device(const fl_job *job, const fl_cluster *cl, int *device) {
  *device = 0;
  if (job->train.device != FL_DEVICE_GPU) return FL_OK;
  if (strcmp(job->model.kind, "ctr") == 0 || strcmp(job->model.kind, "plugin") == 0)
    return FL_ERR(FL_ENOTSUP, "%s: train.device: gpu: model.kind %s computes on the CPU only",
                  job->source, job->model.kind);
#ifndef FL_HAVE_CUDA
  (void)cl;
  return FL_ERR(FL_ENOTSUP, "%s: train.device: gpu, but this flotilla-trainer was built "
                "without CUDA (configure --with-cuda)", job->source);
#else
  const int n = fl_cuda_device_count();
  if (n == 0)
    return FL_ERR(FL_ENOTSUP, "%s: train.device: gpu, but there is no CUDA device on this "
                  "machine", job->source);
  int node, local_rank, local_size;
  FL_TRY(fl_cluster_local(cl, &node, &local_rank, &local_size));
  FL_TRY(fl_cluster_gpu(cl, local_rank, n, device));
  FL_LOGI("train.device gpu: local rank %d of %d uses GPU %d of %d", local_rank, local_size,
          *device, n);
  return FL_OK;
#endif
}

/* SIGTERM / SIGINT: the first asks the loop to stop (fl_trainer_options.stop),
 * a second one ends the process at once. */
static volatile sig_atomic_t g_stop;

static void on_stop_signal(int sig) {
  static const char first[] = "flotilla-trainer: stop requested: finishing the step, then a "
                              "checkpoint (a second signal exits at once)\n";
  if (g_stop) _exit(128 + sig);
  g_stop = sig;
  ssize_t n = write(STDERR_FILENO, first, sizeof first - 1);
  (void)n;
}

static void catch_stop_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

/* Per-step figures for /metrics and the timeline (fl_obs.h). */
typedef struct step_obs {
  fl_obs *obs;
  int64_t samples; /* per optimizer step on this rank */
} step_obs;

static void on_step(void *ctx, const fl_step_report *r) {
  const step_obs *so = ctx;
  fl_obs_step(so->obs, r->loss, r->loss_scale, so->samples);
}

static int parse_level(const char *s, fl_log_level *out) {
  static const char *const names[] = {"debug", "info", "warn", "error", "off"};
  for (int i = 0; i < 5; i++)
    if (!strcasecmp(s, names[i])) {
      *out = (fl_log_level)i;
      return 0;
    }
  return -1;
}

/* "--name value" or "--name=value": *val gets the value, *i advances. */
static int take_value(int argc, char **argv, int *i, const char *name, const char **val) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return 0;
  if (a[n] == '=') {
    *val = a + n + 1;
    return 1;
  }
  if (a[n] != '\0') return 0;
  if (*i + 1 >= argc) {
    *val = NULL;
    return 1;
  }
  *val = argv[++*i];
  return 1;
}

int main(int argc, char **argv) {
  const char *config = NULL, *dump = NULL, *export_onnx = NULL, *val;
  int resume = 0, fresh = 0;
  int64_t max_steps = 0;
  fl_cluster cl;
  static fl_job job; /* large; no need for it on the stack */
  fl_sync sync = {0};
  const char *metrics_addr = NULL, *timeline = NULL;
  fl_obs *obs = NULL;
  fl_status st;

  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--version")) {
      fl_print_version(stdout, "flotilla-trainer");
      return 0;
    }
  if (fl_proc_init() != FL_OK) return EXIT_RUN; /* open-file limit, dying with flotilla-run */
  if (fl_cluster_from_env(&cl) != FL_OK) return EXIT_USAGE;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (take_value(argc, argv, &i, "--config", &val)) {
      if (!val || !*val) goto missing;
      config = val;
    } else if (take_value(argc, argv, &i, "--dump-config", &val)) {
      if (!val || !*val) goto missing;
      dump = val;
    } else if (take_value(argc, argv, &i, "--export-onnx", &val)) {
      if (!val || !*val) goto missing;
      export_onnx = val;
    } else if (take_value(argc, argv, &i, "--max-steps", &val)) {
      char *end;
      if (!val) goto missing;
      errno = 0;
      long long v = strtoll(val, &end, 10);
      if (errno || end == val || *end || v < 1) {
        FL_LOGE("--max-steps %s: want an integer >= 1", val);
        return EXIT_USAGE;
      }
      max_steps = v;
    } else if (take_value(argc, argv, &i, "--log-level", &val)) {
      fl_log_level lv;
      if (!val) goto missing;
      if (parse_level(val, &lv)) {
        FL_LOGE("--log-level %s: want debug, info, warn, error or off", val);
        return EXIT_USAGE;
      }
      fl_log_set_level(lv);
    } else if (take_value(argc, argv, &i, "--metrics_addr", &val)) {
      if (!val || !*val) goto missing;
      metrics_addr = val;
    } else if (take_value(argc, argv, &i, "--timeline", &val)) {
      if (!val || !*val) goto missing;
      timeline = val;
    } else if (!strcmp(a, "--resume")) {
      resume = 1;
    } else if (!strcmp(a, "--fresh")) {
      fresh = 1;
    } else {
      int matched = 0;
      if (!strncmp(a, "--", 2) && strchr(a, '=')) {
        if (fl_cluster_apply_flag(&cl, a, &matched) != FL_OK) return EXIT_USAGE;
      }
      if (!matched) {
        FL_LOGE("unknown argument '%s' (see flotilla-trainer --help)", a);
        return EXIT_USAGE;
      }
    }
    continue;
  missing:
    FL_LOGE("%s needs a value (see flotilla-trainer --help)", a);
    return EXIT_USAGE;
  }
  if (!config) {
    FL_LOGE("--config FILE is required (see flotilla-trainer --help)");
    return EXIT_USAGE;
  }
  if (resume && fresh) {
    FL_LOGE("--resume and --fresh exclude each other");
    return EXIT_USAGE;
  }
  if (fl_job_load_file(config, &job) != FL_OK) return EXIT_USAGE; /* logged with file:line */
  if (export_onnx) /* no cluster: read the checkpoint, write the model, done */
    return fl_trainer_export_checkpoint(&job, cl.checkpoint_dir[0] ? cl.checkpoint_dir : NULL,
                                        export_onnx) == FL_OK ? 0 : EXIT_RUN;
  if (cl.role != FL_ROLE_TRAINER) {
    FL_LOGE("FLOTILLA_ROLE is %s: flotilla-trainer runs trainers only", fl_role_name(cl.role));
    return EXIT_USAGE;
  }
  if (fl_cluster_from_engines(&cl, job.cluster.mode) != FL_OK) return EXIT_USAGE;
  if (fl_cluster_validate(&cl, job.cluster.mode) != FL_OK) return EXIT_USAGE;
  char ctx[32];
  snprintf(ctx, sizeof ctx, "trainer %d", cl.trainer_id);
  fl_log_set_context(ctx);

  if (dump) {
    /* Dump and exit: nothing else on stdout, so the dump loads again. */
    FILE *f = strcmp(dump, "-") ? fopen(dump, "w") : stdout;
    if (!f) {
      FL_LOGE("--dump-config %s: %s", dump, strerror(errno));
      return EXIT_USAGE;
    }
    st = fl_job_write_yaml(&job, f);
    if (f != stdout && fclose(f) != 0 && st == FL_OK)
      st = FL_ERR(FL_EIO, "--dump-config %s: %s", dump, strerror(errno));
    return st == FL_OK ? 0 : EXIT_USAGE;
  }
  fl_cluster_print_envs(&cl, stdout);
  fl_strategy_print_overview(&job, stdout);
  fflush(stdout);

  fl_run_identity identity;
  if (fl_run_identity_resolve(&job, &cl, &identity) != FL_OK) return EXIT_USAGE;
  {
    char ids[160];
    FL_LOGI("%s%s", fl_run_identity_str(&identity, ids, sizeof ids),
            !identity.derived         ? ""
            : cl.mode == FL_MODE_LOCAL ? " (no FLOTILLA_RUN_ID: a random run id)"
                                       : " (no FLOTILLA_RUN_ID: the run id is derived from the "
                                         "job and cluster)");
  }

  int device;
  if (pick_device(&job, &cl, &device) != FL_OK) return EXIT_RUN;

  fl_sync_create_fn create = NULL;
  for (size_t i = 0; i < sizeof g_modes / sizeof g_modes[0]; i++)
    if (g_modes[i].mode == cl.mode) create = g_modes[i].create;
  if (!create) {
    FL_LOGE("mode %s is not available in this build of flotilla-trainer", fl_mode_name(cl.mode));
    return EXIT_USAGE;
  }
  if (fl_obs_start("trainer", cl.trainer_id, fl_mode_name(cl.mode),
                   metrics_addr ? metrics_addr : job.cluster.metrics_addr, timeline,
                   &obs) != FL_OK)
    return EXIT_USAGE;
  if (create(&job, &cl, &sync) != FL_OK) {
    fl_obs_stop(obs);
    return EXIT_RUN;
  }
  fl_notify_ready(NULL); /* joined the job: systemd's Type=notify start is done */
  step_obs so = {obs, (int64_t)job.train.batch_size * fl_job_merge_steps(&job)};

  fl_trainer_options opts = {.job = &job, .resume = resume, .fresh = fresh,
                             .identity = &identity, .max_steps = max_steps, .stop = &g_stop,
                             .on_step = on_step, .on_step_ctx = &so, .device = device,
                             .checkpoint_dir = cl.checkpoint_dir[0] ? cl.checkpoint_dir : NULL};
  fl_trainer_report rep;
  memset(&rep, 0, sizeof rep);
  if (strcmp(job.model.kind, "ctr")) catch_stop_signals(); /* fl_ctr_run does not stop early */
  st = strcmp(job.model.kind, "ctr") ? fl_trainer_run(&opts, &sync, &rep) : fl_ctr_run(&opts, &sync, &rep);
  if (st == FL_OK && !rep.stopped) st = sync.ops->finish(sync.self);
  sync.ops->destroy(sync.self);
  fl_status obs_st = fl_obs_stop(obs);
  if (st == FL_OK) st = obs_st;
  if (st != FL_OK) return EXIT_RUN; /* logged where it happened */
  if (rep.stopped) {
    FL_LOGI("stopped by %s after %" PRId64 " steps", strsignal((int)g_stop), rep.steps);
    return 0;
  }
  FL_LOGI("done: %" PRId64 " steps, %" PRId64 " epochs", rep.steps, rep.epochs_done);
  return 0;
}
