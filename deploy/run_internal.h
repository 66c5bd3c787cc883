/* run_internal.h - flotilla-run's internal interfaces (never installed).
 *
 * flotilla-run is split in three parts so that the parts without processes
 * can be unit-tested:
 *   run_plan.c      options -> the job's layout: every trainer's and
 *                   pserver's endpoint, which of them this node starts, and
 *                   the FLOTILLA_* environment of each;
 *   run_progress.c  rank 0's log lines -> progress (epoch, step/total,
 *                   samples/s, ETA, loss), metrics.csv and curve.png;
 *   run_failure.c   every process's end, in the order reaped -> which one
 *                   failed first, its error line and last lines, and what
 *                   became of the others;
 *   run.c           the command line and the libuv supervisor (spawn, log
 *                   pipes, signals, restarts, shutdown). */
#ifndef FL_RUN_INTERNAL_H
#define FL_RUN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fl_status.h"

#define FL_RUN_MAX_NODES 64
#define FL_RUN_MAX_PROCS 256
#define FL_RUN_EP_MAX 160   /* "host:port", NUL included */
#define FL_RUN_PATH_MAX 1024
#define FL_RUN_MAX_ENV 24   /* FLOTILLA_* variables set per process */

typedef enum fl_run_mode { FL_RUN_COLLECTIVE = 0, FL_RUN_PS = 1 } fl_run_mode;
typedef enum fl_run_role { FL_RUN_TRAINER = 0, FL_RUN_PSERVER = 1 } fl_run_role;

/* What the command line asked for (see flotilla-run --help). */
typedef struct fl_run_opts {
  fl_run_mode mode;
  int mode_given;
  char ips[FL_RUN_MAX_NODES][FL_RUN_EP_MAX]; /* node addresses, in node order */
  int n_ips;
  char node_ip[FL_RUN_EP_MAX];  /* this node, "" = match local interfaces */
  int nproc_per_node;           /* trainers per node, 0 = from --gpus or 1 */
  int gpus[64];                 /* --gpus ids */
  int n_gpus;
  int server_num;               /* pservers per node (ps mode), 0 = unset */
  char servers[FL_RUN_MAX_PROCS][FL_RUN_EP_MAX]; /* --servers */
  int n_servers;
  int port;                     /* base port, 0 = pick (one node) / 6170 */
  char log_dir[FL_RUN_PATH_MAX];
  /* torchrun's spellings (fl_run_torchrun_opts) */
  int ips_given;                /* --ips was given */
  int nnodes;                   /* --nnodes, 0 = not given */
  int node_rank;                /* --node_rank, -1 = not given */
  char master_addr[FL_RUN_EP_MAX]; /* --master_addr, "" = not given */
  int master_port;              /* --master_port, 0 = not given */
  int torchrun;                 /* several nodes known only by number: the
                                 * trainers get torchrun's RANK, WORLD_SIZE,
                                 * LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
                                 * MASTER_ADDR, MASTER_PORT and meet at
                                 * master_addr:master_port */
  int train_threads;            /* the job's train.num_threads (0: all cores) */
  int node_ip_known;            /* torchrun: node_ip is an address given
                                 * (--node_ip, FLOTILLA_NODE_IP), not a
                                 * placeholder; its trainers advertise it */
} fl_run_opts;

/* One process of the job (on any node). */
typedef struct fl_run_proc {
  fl_run_role role;
  int id;           /* trainer rank or pserver id */
  int node;         /* index into ips (-1 for a --servers entry on no node) */
  int local;        /* 1 when this node starts it */
  int local_rank;   /* trainers: index among this node's trainers */
  char endpoint[FL_RUN_EP_MAX];
  int gpu;          /* -1 = none */
  char log_path[FL_RUN_PATH_MAX + 32];
  char *env[FL_RUN_MAX_ENV]; /* "FLOTILLA_X=value", owned by the plan */
  int n_env;
} fl_run_proc;

/* The whole job: every process, and which node this one is. */
typedef struct fl_run_plan {
  fl_run_mode mode;
  int this_node;
  int n_trainers;
  int n_pservers;
  int trainers_per_node;
  fl_run_proc procs[FL_RUN_MAX_PROCS]; /* trainers by rank, then pservers by id */
  int n_procs;
} fl_run_plan;

/* Default options: collective, ips 127.0.0.1, log_dir "log", node_rank -1. */
void fl_run_opts_defaults(fl_run_opts *o);

/* Split a comma list into out[cap][FL_RUN_EP_MAX] (spaces around entries
 * are dropped); FL_EINVAL, logged naming flag, for an empty entry, an entry
 * too long or more than cap entries. */
fl_status fl_run_split_list(const char *flag, const char *s, char (*out)[FL_RUN_EP_MAX], int cap,
                            int *n);

/* This machine's interface addresses (IPv4 and IPv6, numeric) into
 * out[cap]; *n receives the count. */
fl_status fl_run_local_addrs(char (*out)[FL_RUN_EP_MAX], int cap, int *n);

/* Which --ips entry is this node: node_ip when given, the only entry when
 * there is one, else the entry equal to one of local[0..n_local-1].
 * FL_EINVAL (logged) when none or several match. */
fl_status fl_run_find_node(const fl_run_opts *o, char (*local)[FL_RUN_EP_MAX], int n_local,
                           int *node);

/* Reconcile torchrun's spellings with the rest (flotilla-run --help):
 * with --ips, --nnodes must equal their number, --node_rank picks this
 * node (as --node_ip), --master_addr must be the first of --ips and
 * --master_port is the base port; without --ips, --nnodes N > 1 lays out N
 * nodes known only by number (o->torchrun, n_ips = N, ips[0] =
 * --master_addr, required, ips[node_rank] = --node_ip when given), node
 * rank default 0, master port default 29500; ps mode then needs --servers.
 * FL_EINVAL (logged) for a contradiction. */
fl_status fl_run_torchrun_opts(fl_run_opts *o);

/* Lay the job out into *out (caller storage, large: allocate it; free its
 * strings with fl_run_plan_clear).  Ports: --port BASE gives, in collective
 * mode, trainer i of a node BASE + i and, in ps mode (trainers do not
 * listen), pserver j of a node BASE + j; without
 * it, a one-node job takes free ports below the kernel's ephemeral range
 * (so no outgoing connection takes one first) and a multi-node job
 * uses BASE 6170 (every node must compute the same endpoints).  Fills the
 * FLOTILLA_* environment of each process (see flotilla-run --help) and,
 * unless flotilla-run's own environment sets it, OPENBLAS_NUM_THREADS: 1
 * for a pserver, train_threads for a trainer (none when 0); a collective
 * job of one trainer runs it in local mode.
 * FL_EINVAL (logged) for an inconsistent request. */
fl_status fl_run_make_plan(const fl_run_opts *o, int this_node, fl_run_plan *out);

/* Free the strings a plan owns (the struct itself is the caller's). */
void fl_run_plan_clear(fl_run_plan *p);

/* ---- progress ---- */

/* What a parsed trainer log line says. */
typedef enum fl_run_rec_kind {
  FL_RUN_REC_TRAIN = 0, /* "[Epoch e, batch b] loss: ..., acc1: ..." */
  FL_RUN_REC_TEST = 1,  /* "[Epoch e] test loss: ..., acc1: ..." */
  FL_RUN_REC_PLAN = 2,  /* "training mlp: E epochs of S steps (K x B samples, ..." */
  FL_RUN_REC_EPOCH_END = 3, /* "[Epoch e] train: S steps, N samples, ...": e trained in full */
  FL_RUN_REC_VAL = 4        /* "[Epoch e] val loss: ..., acc1: ... (step s)" */
} fl_run_rec_kind;

/* One parsed line of a trainer's log. */
typedef struct fl_run_record {
  fl_run_rec_kind kind;
  int epoch;             /* as printed (0-based); PLAN: number of epochs */
  int64_t batch;         /* TRAIN: micro-batch index in the epoch (0-based);
                            VAL: the optimizer step; PLAN: micro-batches per step */
  int64_t batches;       /* micro-batches per epoch (PLAN: S x K; TRAIN when
                            printed as "batch b/T"), else -1 */
  double loss;           /* NAN when absent */
  double acc;            /* acc1 / acc / accuracy, NAN when absent */
  double auc;            /* auc (binary targets), NAN when absent */
} fl_run_record;

/* Parse one log line (the trainer's log prefix before it is ignored).
 * Training lines: "[Epoch 1, batch 200] loss: 0.41234, acc1: 0.85938, ..."
 * ("batch 200/469" also accepted); evaluation lines:
 * "[Epoch 1] test loss: 0.4567, acc1: 0.8412" or "[Epoch 1, test] loss: ..."
 * (logloss: stands in for a missing loss:);
 * the trainer's start line "training <model>: E epochs of S steps (K x B
 * samples, ...": the epoch length.  Returns 1 and fills *r for such a line,
 * 0 for any other line. */
int fl_run_parse_line(const char *line, fl_run_record *r);

typedef struct fl_run_progress fl_run_progress;

/* A progress tracker.  epochs: from the job (0 = unknown); samples_per_batch:
 * batch_size times the number of trainers, so that rates are global.  The
 * caller owns *out (fl_run_progress_free). */
fl_status fl_run_progress_new(int epochs, double samples_per_batch, fl_run_progress **out);
void fl_run_progress_free(fl_run_progress *p);

/* Feed a record of the streamed trainer seen at time now (seconds, any
 * monotonic origin). */
fl_status fl_run_progress_feed(fl_run_progress *p, const fl_run_record *r, double now);

/* "epoch 2/10  step 120/469 (26%)  5230 samples/s  ETA 3m05s  loss 0.4312  acc 0.851"
 * (unknown parts left out) into out; "" before the first record.  Returns out. */
char *fl_run_progress_line(const fl_run_progress *p, char *out, size_t cap);

/* The last evaluation seen: 1 and its epoch, loss, acc; 0 when none. */
int fl_run_progress_last_test(const fl_run_progress *p, int *epoch, double *loss, double *acc);
/* The last evaluation's auc (binary targets), NAN when none. */
double fl_run_progress_last_auc(const fl_run_progress *p);

/* Number of records fed. */
size_t fl_run_progress_count(const fl_run_progress *p);

/* Write every record as CSV (header: kind,time_s,epoch,batch,global_batch,
 * samples_per_s,loss,acc).  FL_EIO naming the path on failure. */
fl_status fl_run_progress_write_csv(const fl_run_progress *p, const char *path);

/* Write the gnuplot script gp_path that draws csv_path into png_path (loss
 * on the left axis, train/test accuracy on the right, against global batch),
 * then run gnuplot on it.  FL_ENOTFOUND (logged as a warning saying which
 * Debian package to install) when gnuplot is not installed, FL_EIO when it
 * fails. */
fl_status fl_run_plot(const char *csv_path, const char *png_path, const char *gp_path);

/* ---- why the job ended (run_failure.c) ---- */

/* Signals flotilla-run sent a process (fl_run_exit.sent). */
#define FL_RUN_SENT_TERM 1
#define FL_RUN_SENT_KILL 2

/* How one process ended, as the supervisor reaped it. */
typedef struct fl_run_exit {
  fl_run_role role;
  int id;               /* trainer rank or pserver id */
  long pid;
  int attempt;          /* 0 = the first start, k = after the k-th --max_restart */
  int64_t status;       /* exit status (when not killed) */
  int signal;           /* the signal that killed it, 0 = none */
  int sent;             /* FL_RUN_SENT_* sent to it before it ended */
  double t;             /* seconds since the job started */
  const char *log_path; /* its workerlog / serverlog (not copied: the plan's) */
  int64_t log_from;     /* where this start's output begins in the log */
} fl_run_exit;

/* What an end was: finished (exit 0, unasked), stopped (flotilla-run had
 * signalled it: teardown or restart), or failed on its own (non-zero exit,
 * or a signal flotilla-run did not send: SIGKILL by the OOM killer). */
typedef enum fl_run_end { FL_RUN_END_OK = 0, FL_RUN_END_STOPPED = 1, FL_RUN_END_FAILED = 2 } fl_run_end;

fl_run_end fl_run_exit_kind(const fl_run_exit *e);

/* 1 when a log line was logged at error level: "E " after an optional
 * timestamp ("2024-05-01T10:00:00.123Z E [trainer 1] ..."). */
int fl_run_log_is_error(const char *line);

/* The process a log line blames: the first "rank N (" (a trainer) or
 * "pserver N (" in it.  Returns 1 and fills *role, *id; 0 when none. */
int fl_run_log_blames(const char *line, fl_run_role *role, int *id);

/* The first error-level line among the last lines of path's bytes
 * [from, to) (to < 0: the end of the file) into cause[cap]; 1 when found,
 * 0 when none (or the log cannot be read). */
int fl_run_log_cause(const char *path, int64_t from, int64_t to, char *cause, size_t cap);

typedef struct fl_run_report fl_run_report;

/* An empty record of ends; the caller owns *out (fl_run_report_free). */
fl_status fl_run_report_new(fl_run_report **out);
void fl_run_report_free(fl_run_report *r);

/* Append one end, in the order the supervisor reaped them (copied). */
fl_status fl_run_report_add(fl_run_report *r, const fl_run_exit *e);

/* The first failure of attempt a: the first end reaped that failed on its
 * own, or, when its error line blames another process of this node that
 * also ended badly in a and whose own error blames nobody back, that one
 * (a collective peer told of rank 1's abort often exits before rank 1 is
 * reaped).  NULL when nothing failed in a.  The pointer lives as long as
 * r and until the next fl_run_report_add. */
const fl_run_exit *fl_run_report_cause(const fl_run_report *r, int a);

/* Print to out (stderr) the first failure of attempt a (role, rank, pid,
 * exit status or signal), its error line, its last tail_lines lines, and
 * what became of every other process of a: stopped by flotilla-run,
 * failed because of it (its error names the first failure), also failed,
 * finished.  Nothing when nothing failed in a. */
void fl_run_report_print(const fl_run_report *r, int a, int tail_lines, FILE *out);

/* One line per attempt before a that failed (the --max_restart history):
 * which process failed first and its error line. */
void fl_run_report_print_attempts(const fl_run_report *r, int a, FILE *out);

/* ---- elastic membership on etcd (run_elastic.c) ---- */

/* Exit statuses of an elastic flotilla-run (besides 0, 1, 2 and 128+signal). */
#define FL_RUN_EXIT_BELOW_MIN 3  /* fewer than MIN nodes for --rdzv_timeout */
#define FL_RUN_EXIT_LEASE_LOST 4 /* this node's lease on etcd was lost */
#define FL_RUN_RDZV_TIMEOUT_S 600.0

/* --nnodes MIN:MAX --rdzv_backend etcd --rdzv_endpoint --rdzv_id
 * --rdzv_timeout --rdzv_conf key=seconds,... */
typedef struct fl_run_elastic_opts {
  int on;                           /* --rdzv_backend etcd given */
  int min_nodes, max_nodes;         /* --nnodes MIN:MAX (0 = not given) */
  char endpoint[512];               /* --rdzv_endpoint host:port[,host:port...] */
  char id[128];                     /* --rdzv_id */
  double timeout_s;                 /* --rdzv_timeout: below MIN this long -> exit 3 */
  double lease_s, settle_s, poll_s, stop_s; /* --rdzv_conf */
  double in_process;                /* --rdzv_conf: 1 hands a new world to running trainers */
  double chunks;                    /* --rdzv_conf: ps chunks per epoch, 0 = slot shares,
                                     * < 0 = 4 x MAX (the default) */
} fl_run_elastic_opts;

/* What each round's flotilla-run is started with. */
typedef struct fl_run_elastic_child {
  const char *self;                 /* this program */
  const char *job_path;
  char **extra;                     /* trainer arguments after -- */
  int n_extra;
  char node_addr[FL_RUN_EP_MAX];    /* this node's address (--node_ip, else host name) */
  int master_port;                  /* base: round r uses base + r % 64 */
  const char *log_dir;              /* round r logs in <log_dir>/round.<r> */
  double grace_s;
  const char *trainer_bin;
  int nproc_per_node;               /* 0 = flotilla-run's default */
  char gpus[256];                   /* --gpus as given, "" = none */
  const char *start_flag;           /* --resume / --fresh for the first round */
  int max_restart;                  /* rounds this node may see fail */
  int ps;                           /* ps mode (async or geo): trainer slots, no rounds */
  char servers[2048];               /* ps mode: --servers as given */
} fl_run_elastic_child;

/* Defaults: timeout 600 s, lease 6 s, settle 3 s, poll 0.25 s, stop 30 s. */
void fl_run_elastic_defaults(fl_run_elastic_opts *e);
/* "MIN:MAX" (or "N") into e->min_nodes, e->max_nodes; FL_EINVAL logged. */
fl_status fl_run_elastic_nnodes(const char *val, fl_run_elastic_opts *e);
/* "lease_s=10,settle_s=3" into e; FL_EINVAL logged for an unknown key or a
 * value out of range. */
fl_status fl_run_elastic_conf(const char *conf, fl_run_elastic_opts *e);
/* Join the job on etcd and run rounds until it is done; returns the exit
 * status (0 done, 1 failure, 3 below MIN, 4 lease lost, 128+signal). */
int fl_run_elastic(const fl_run_elastic_opts *o, const fl_run_elastic_child *c);

#endif
