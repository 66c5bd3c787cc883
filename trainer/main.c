/* main.c - flotilla-trainer: read the job file and this process's place in
 * the cluster, pick the mode's fl_sync from the table below, and hand over
 * to the training loop (loop.c).  Kept thin on purpose: everything that
 * trains lives behind fl_trainer_run.
 *
 * SIGTERM or SIGINT: the step in progress is finished, the ranks agree on
 * a step to stop at, rank 0 checkpoints there and the trainer exits 0
 * (--resume continues); a second signal exits at once (128 + signal).  A
 * ctr trainer stops after its step without a checkpoint of its own: its
 * model lives on the pservers.
 *
 * Elastic worlds in process (flotilla-run --rdzv_backend etcd sets
 * FLOTILLA_ELASTIC_WORLD for trainers that run with torchrun's variables):
 * when the loop stops for a new world (fl_trainer_options.world_file), the
 * communicator is torn down, the new round's rank, world size and master
 * replace torchrun's variables, and the loop runs again in the new world
 * from the state it kept (loop.c's share_state then gives every rank the
 * newest one).
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

#include "fl_args.h"
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
#include "fl_model_kind.h"

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
          "  --dump_config FILE   write the resolved job as YAML to FILE ('-' = stdout)\n"
          "                       and exit (it loads again as the same job)\n"
          "  --check_model        build the job's model on the CPU as training would (an\n"
          "                       onnx model: import it) and exit: 0 when it builds, 1\n"
          "                       with the importer's error; no data is read\n"
          "  --export_onnx FILE   write the model of the newest checkpoint in the checkpoint\n"
          "                       directory as ONNX to FILE and exit (logreg, mlp, cnn and\n"
          "                       onnx models; nothing is trained)\n"
          "  --max_steps N        stop after optimizer step N (N >= 1); the learning-rate\n"
          "                       schedule still spans the whole job, so a run stopped\n"
          "                       here and resumed equals an uninterrupted one (as\n"
          "                       train.max_steps; an elastic ps job's chunks count the\n"
          "                       job's steps, all trainers', not this one's)\n"
          "  --log_level LEVEL    debug, info (default), warn, error or off\n"
          "  --metrics_addr ADDR  serve Prometheus /metrics on host:port (default: the\n"
          "                       job's cluster.metrics_addr; none: no endpoint)\n"
          "  --timeline FILE      write a Chrome-tracing JSON timeline of this rank\n"
          "                       (forward, backward, allreduce buckets, push, pull, wait)\n"
          "                       (also FLOTILLA_LOG_LEVEL)\n"
          "  --version            the version and the features of this build\n"
          "  --help               this text\n"
          "Options take their value as the next argument or after '='.  Every option\n"
          "and cluster flag is also accepted in kebab-case (--max-steps, --dump-config,\n"
          "--export-onnx, --log-level, --metrics-addr, --trainer-id=...).\n"
          "\n"
          "Cluster flags (--name=value; each overrides its FLOTILLA_* variable):\n");
  fl_cluster_print_flag_help(out);
  fprintf(out,
          "\n"
          "Environment: each cluster flag's FLOTILLA_* variable (above), and\n"
          "  FLOTILLA_TOKEN                 the shared secret (never a flag)\n"
          "  FLOTILLA_LOG_LEVEL             as --log_level\n"
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
  if (!fl_model_kind_has(job->model.kind, FL_KIND_GPU))
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

/* --check_model: build the job's model on the CPU exactly as training
 * would (an onnx model goes through the importer and its refusals), report
 * it on stdout and free it.  Errors are logged where they start. */
static fl_status check_model(const fl_job *job) {
  fl_job *cpu = malloc(sizeof *cpu);
  if (!cpu) return FL_ERR(FL_ENOMEM, "--check-model: out of memory");
  *cpu = *job;
  cpu->train.device = FL_DEVICE_CPU; /* nothing is computed */
  const char *names[FL_TRAINER_SPEC_NAMES];
  fl_model_spec spec;
  fl_model *m = NULL;
  fl_trainer_model_spec(cpu, 0, names, &spec);
  fl_status st = fl_model_create(&spec, cpu->train.batch_size, cpu->train.seed, &m);
  if (st == FL_OK)
    printf("model ok: %s, %zu inputs per sample, %zu parameters and buffers\n", cpu->model.kind,
           fl_model_input_size(m), fl_model_num_params(m));
  fl_model_destroy(m);
  free(cpu);
  return st;
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

/* What the command line says; cluster flags are applied after the
 * environment, which they override. */
typedef struct cli {
  const char *config, *dump, *export_onnx, *metrics_addr, *timeline;
  int resume, fresh, check_model;
  int64_t max_steps;
  size_t n_cluster;
  const char *cluster_name[64], *cluster_val[64];
} cli_opts;

enum { O_HELP = 1, O_VERSION, O_CONFIG, O_DUMP, O_EXPORT, O_MAX_STEPS, O_LOG_LEVEL, O_METRICS,
       O_TIMELINE, O_RESUME, O_FRESH, O_CHECK };

static const fl_arg_opt k_opts[] = {
    {"help", 0, O_HELP},         {"version", 0, O_VERSION},      {"config", 1, O_CONFIG},
    {"dump_config", 1, O_DUMP},  {"export_onnx", 1, O_EXPORT},   {"max_steps", 1, O_MAX_STEPS},
    {"log_level", 1, O_LOG_LEVEL}, {"metrics_addr", 1, O_METRICS}, {"timeline", 1, O_TIMELINE},
    {"resume", 0, O_RESUME},     {"fresh", 0, O_FRESH},          {"check_model", 0, O_CHECK},
    {NULL, 0, 0}};

/* The command line (fl_args.h) into o: -1 to go on, else the exit status
 * (0 after --help / --version). */
static int parse_args(int argc, char **argv, cli_opts *o) {
  fl_args p = {.prog = "flotilla-trainer", .unknown_fmt = "unknown argument '%s'",
               .opts = k_opts, .cluster = 1, .short_help = O_HELP};
  int id;
  memset(o, 0, sizeof *o);
  fl_args_init(&p, argc, argv);
  while ((id = fl_args_next(&p)) != FL_ARGS_END) {
    if (id == FL_ARGS_ERROR) return EXIT_USAGE;
    if (id == O_HELP) {
      usage(stdout);
      return 0;
    }
    if (id == O_VERSION) {
      fl_print_version(stdout, "flotilla-trainer");
      return 0;
    }
    if (p.val && !*p.val && id != O_MAX_STEPS && id != O_LOG_LEVEL && id != FL_ARGS_CLUSTER) {
      FL_LOGE("%s needs a value (see flotilla-trainer --help)", p.given);
      return EXIT_USAGE;
    }
    switch (id) {
    case FL_ARGS_CLUSTER:
      if (o->n_cluster == sizeof o->cluster_name / sizeof o->cluster_name[0]) {
        FL_LOGE("%s: too many cluster flags", p.given);
        return EXIT_USAGE;
      }
      o->cluster_name[o->n_cluster] = p.name;
      o->cluster_val[o->n_cluster++] = p.val;
      break;
    case O_CONFIG: o->config = p.val; break;
    case O_DUMP: o->dump = p.val; break;
    case O_EXPORT: o->export_onnx = p.val; break;
    case O_METRICS: o->metrics_addr = p.val; break;
    case O_TIMELINE: o->timeline = p.val; break;
    case O_RESUME: o->resume = 1; break;
    case O_FRESH: o->fresh = 1; break;
    case O_CHECK: o->check_model = 1; break;
    case O_MAX_STEPS: {
      char *end;
      errno = 0;
      long long v = strtoll(p.val, &end, 10);
      if (errno || end == p.val || *end || v < 1) {
        FL_LOGE("%s %s: want an integer >= 1", p.given, p.val);
        return EXIT_USAGE;
      }
      o->max_steps = v;
      break;
    }
    case O_LOG_LEVEL: {
      fl_log_level lv;
      if (parse_level(p.val, &lv)) {
        FL_LOGE("%s %s: want debug, info, warn, error or off", p.given, p.val);
        return EXIT_USAGE;
      }
      fl_log_set_level(lv);
      break;
    }
    }
  }
  if (fl_args_rest(&p) < argc) {
    FL_LOGE("unknown argument '%s' (see flotilla-trainer --help)", argv[fl_args_rest(&p)]);
    return EXIT_USAGE;
  }
  return -1;
}

/* The cluster from the environment and the command line, checked. */
static fl_status load_cluster(const cli_opts *cli, const fl_job *job, fl_cluster *cl) {
  FL_TRY(fl_cluster_from_env(cl));
  for (size_t i = 0; i < cli->n_cluster; i++)
    FL_TRY(fl_cluster_set(cl, cli->cluster_name[i], cli->cluster_val[i]));
  FL_TRY(fl_cluster_from_engines(cl, job->cluster.mode));
  return fl_cluster_validate(cl, job->cluster.mode);
}

/* Elastic worlds in process: the agent's world file, when this collective
 * trainer runs with torchrun's variables (their rank and master are what a
 * new world changes). */
static void elastic_options(const fl_job *job, fl_trainer_options *o) {
  const char *f = getenv("FLOTILLA_ELASTIC_WORLD"), *env = getenv("FLOTILLA_CLUSTER_ENV");
  const char *r = getenv("FLOTILLA_ELASTIC_ROUND"), *w = getenv("FLOTILLA_ELASTIC_WAIT_S");
  if (!f || !f[0] || !env || strcmp(env, "torchrun") || job->cluster.mode != FL_MODE_COLLECTIVE)
    return;
  o->world_file = f;
  o->world_round = r ? strtoll(r, NULL, 10) : 0;
  o->world_wait_s = w && atof(w) > 0 ? atof(w) : 60;
}

/* Set an environment variable to a number. */
static void setenv_int(const char *name, long long v) {
  char b[24];
  snprintf(b, sizeof b, "%lld", v);
  setenv(name, b, 1);
}

/* The world file's round into *r and the rest; 5 when it holds one. */
static int read_world(const char *path, long long *r, int *nodes, int *node_rank, char *addr,
                      int *port) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int n = fscanf(f, "%lld %d %d %255s %d", r, nodes, node_rank, addr, port);
  fclose(f);
  return n;
}

/* fl_sync_collective_give_up's test while a new world's rendezvous
 * waits: has the agent named a round after the one being joined (a peer
 * of that one died before it came)?  arg: the trainer options. */
static int newer_round(void *arg) {
  const fl_trainer_options *o = arg;
  long long r;
  int nodes, node_rank, port;
  char addr[256]; /* %255s in read_world */
  return read_world(o->world_file, &r, &nodes, &node_rank, addr, &port) == 5 &&
         r > o->world_round;
}

/* Wait for a round after o->world_round in the world file, and set
 * torchrun's variables of this trainer for it (its local rank and node
 * size stay) and the cluster.  The ranks stop when any of them saw the
 * round: this node's agent may write it a moment later (world_wait_s at
 * most). */
static fl_status await_round(const cli_opts *cli, const fl_job *job, fl_trainer_options *o,
                             fl_cluster *cl) {
  long long r = 0;
  int nodes = 0, node_rank = -1, port = 0, n = 0;
  char addr[256], ctx[32]; /* %255s in read_world */
  for (int i = 0; i * 0.05 < o->world_wait_s && !g_stop; i++) {
    n = read_world(o->world_file, &r, &nodes, &node_rank, addr, &port);
    if (n == 5 && r > o->world_round) break;
    usleep(50 * 1000);
  }
  const char *lr = getenv("LOCAL_RANK"), *ls = getenv("LOCAL_WORLD_SIZE");
  if (n != 5 || r <= o->world_round || !lr || !ls || nodes < 1 || node_rank < 0 ||
      node_rank >= nodes)
    return FL_ERR(FL_EPROTO, "elastic: %s: no round after %" PRId64 " within %.0f s (want "
                  "'<round> <nodes> <node rank> <master addr> <master port>', and LOCAL_RANK, "
                  "LOCAL_WORLD_SIZE set); check this node's flotilla-run", o->world_file,
                  o->world_round, o->world_wait_s);
  setenv_int("RANK", (long long)node_rank * atoi(ls) + atoi(lr));
  setenv_int("WORLD_SIZE", (long long)nodes * atoi(ls));
  setenv_int("GROUP_RANK", node_rank);
  setenv_int("MASTER_PORT", port);
  setenv("MASTER_ADDR", addr, 1);
  FL_TRY(load_cluster(cli, job, cl));
  snprintf(ctx, sizeof ctx, "trainer %d", cl->trainer_id);
  fl_log_set_context(ctx);
  o->world_round = r;
  FL_LOGI("elastic: joining round %lld as rank %d of %d (master %s:%d)", r, cl->trainer_id,
          cl->trainers_num, addr, port);
  return FL_OK;
}

/* Join the next round of the world file (first: the round this process
 * was started for, its variables already set): the mode's fl_sync for it
 * in *sync.  A round whose rendezvous cannot finish - it waits on a peer
 * that died before it came (nodes dying a few seconds apart: the round
 * after the first death still names the second), or a peer gave it up -
 * is left as soon as the agent names the next one, which is joined
 * instead; never a collective timeout. */
static fl_status join_world(const cli_opts *cli, const fl_job *job, fl_sync_create_fn create,
                            fl_trainer_options *o, fl_cluster *cl, fl_sync *sync, int first) {
  for (;; first = 0) {
    if (!first) FL_TRY(await_round(cli, job, o, cl));
    fl_status st = create(job, cl, sync);
    if (!o->world_file || (st != FL_EAGAIN && st != FL_ECLOSED && st != FL_ETIMEDOUT)) return st;
    FL_LOGW("elastic: round %" PRId64 " did not form (%s: a peer never came or gave it up): "
            "joining the next round", o->world_round, fl_strerror(st));
  }
}

/* join_world, its rendezvous given up when a newer round is named. */
static fl_status next_world(const cli_opts *cli, const fl_job *job, fl_sync_create_fn create,
                            fl_trainer_options *o, fl_cluster *cl, fl_sync *sync, int first) {
  if (o->world_file) fl_sync_collective_give_up(newer_round, o);
  fl_status st = join_world(cli, job, create, o, cl, sync, first);
  fl_sync_collective_give_up(NULL, NULL);
  return st;
}

/* Run the loop, and again in each new world it stops for (the state it
 * kept handed on); *sync is the last world's (ops NULL when none could be
 * made). */
static fl_status train_worlds(const cli_opts *cli, const fl_job *job, fl_sync_create_fn create,
                              fl_trainer_options *o, fl_cluster *cl, fl_sync *sync,
                              fl_trainer_report *rep) {
  void *kept = NULL;
  fl_status st = fl_trainer_run(o, sync, rep);
  while (st == FL_OK && rep->world_changed) {
    sync->ops->destroy(sync->self);
    memset(sync, 0, sizeof *sync);
    free(kept);
    kept = rep->state;
    o->state = kept;
    o->state_len = rep->state_len;
    o->world_t0 = rep->world_t0;
    if (kept) o->fresh = o->resume = 0; /* else it starts as the last round did */
    memset(rep, 0, sizeof *rep);
    st = next_world(cli, job, create, o, cl, sync, 0);
    if (st == FL_OK) st = fl_trainer_run(o, sync, rep);
  }
  free(kept);
  return st;
}

int main(int argc, char **argv) {
  cli_opts cli;
  const char *config, *dump, *export_onnx;
  int resume, fresh;
  int64_t max_steps;
  fl_cluster cl;
  static fl_job job; /* large; no need for it on the stack */
  fl_sync sync = {0};
  const char *metrics_addr, *timeline;
  fl_obs *obs = NULL;
  fl_status st;

  int rc_args = parse_args(argc, argv, &cli);
  if (rc_args >= 0) return rc_args;
  if (fl_proc_init() != FL_OK) return EXIT_RUN; /* open-file limit, dying with flotilla-run */
  if (fl_cluster_from_env(&cl) != FL_OK) return EXIT_USAGE;
  for (size_t i = 0; i < cli.n_cluster; i++)
    if (fl_cluster_set(&cl, cli.cluster_name[i], cli.cluster_val[i]) != FL_OK) return EXIT_USAGE;
  config = cli.config;
  dump = cli.dump;
  export_onnx = cli.export_onnx;
  metrics_addr = cli.metrics_addr;
  timeline = cli.timeline;
  resume = cli.resume;
  fresh = cli.fresh;
  max_steps = cli.max_steps;
  if (!config) {
    FL_LOGE("--config FILE is required (see flotilla-trainer --help)");
    return EXIT_USAGE;
  }
  if (resume && fresh) {
    FL_LOGE("--resume and --fresh exclude each other");
    return EXIT_USAGE;
  }
  if (fl_job_load_file(config, &job) != FL_OK) return EXIT_USAGE; /* logged with file:line */
  if (cli.check_model) return check_model(&job) == FL_OK ? 0 : EXIT_RUN;
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
  step_obs so = {obs, (int64_t)job.train.batch_size * fl_job_merge_steps(&job)};
  fl_trainer_options opts = {.job = &job, .resume = resume, .fresh = fresh,
                             .identity = &identity, .max_steps = max_steps, .stop = &g_stop,
                             .on_step = on_step, .on_step_ctx = &so, .device = device,
                             .checkpoint_dir = cl.checkpoint_dir[0] ? cl.checkpoint_dir : NULL};
  elastic_options(&job, &opts);
  if (next_world(&cli, &job, create, &opts, &cl, &sync, 1) != FL_OK) {
    fl_obs_stop(obs);
    return EXIT_RUN;
  }
  fl_notify_ready(NULL); /* joined the job: systemd's Type=notify start is done */
  fl_trainer_report rep;
  memset(&rep, 0, sizeof rep);
  catch_stop_signals();
  st = train_worlds(&cli, &job, create, &opts, &cl, &sync, &rep);
  if (st == FL_OK && !rep.stopped) st = sync.ops->finish(sync.self);
  if (sync.ops) sync.ops->destroy(sync.self);
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
