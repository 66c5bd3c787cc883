/* fl_cluster.h - who this process is in the job: role, ranks, endpoints.
 *
 * Like Paddle's PADDLE_* variables, flotilla-run hands each process its
 * place through FLOTILLA_* environment variables; the daemons read them with
 * fl_cluster_from_env(), then let command-line flags of the same names
 * override them (fl_cluster_set / fl_cluster_apply_flag), then check the
 * whole with fl_cluster_validate().  fl_cluster is a plain struct (fixed
 * arrays, no heap memory, copy with `=`).
 *
 *   variable                        flag                  meaning
 *   FLOTILLA_ROLE                   --role                TRAINER | PSERVER
 *   FLOTILLA_MODE                   --mode                local | collective | ps
 *   FLOTILLA_TRAINER_ID             --trainer_id          rank, 0 .. trainers_num-1
 *   FLOTILLA_TRAINERS_NUM           --trainers_num        number of trainers
 *   FLOTILLA_TRAINER_ENDPOINTS      --trainer_endpoints   host:port,... (rank order)
 *   FLOTILLA_CURRENT_ENDPOINT       --current_endpoint    this process's host:port
 *   FLOTILLA_PSERVERS_IP_PORT_LIST  --pservers            host:port,... (server order)
 *   FLOTILLA_PSERVER_ID             --pserver_id          index in that list
 *   FLOTILLA_LOCAL_RANK             --local_rank          rank within the node
 *   FLOTILLA_LOCAL_SIZE             --local_size          ranks on the node
 *   FLOTILLA_SELECTED_GPUS          --selected_gpus       GPU ids, e.g. 0 or 0,1
 *   FLOTILLA_TOKEN_FILE             --token_file          file holding the token
 *   FLOTILLA_TOKEN                  (none, on purpose)    the shared token itself
 *   FLOTILLA_LOG_DIR                --log_dir             where logs go
 *   FLOTILLA_CHECKPOINT_DIR         --checkpoint_dir      overrides the job's
 *   FLOTILLA_COLLECTIVE_BACKEND     --collective_backend  tcp | shm | nccl | auto
 *
 * When none of FLOTILLA_TRAINER_ID, _TRAINERS_NUM, _TRAINER_ENDPOINTS,
 * _PSERVER_ID (nor their flags) gives the process its place, it is taken
 * from the cluster engine that started it (fl_cluster_from_engines): Slurm,
 * torchrun / Kubernetes, OpenMPI's mpirun or Paddle's launcher; see
 * deploy/README.md "Cluster engines" for the variables and for how each
 * yields the rendezvous endpoint.
 *
 * The token is never a flag: flags show in `ps`.  A node is a host (the
 * host part of an endpoint); ranks on one host form a node for hierarchical
 * allreduce and shared memory, with the lowest rank as its leader. */
#ifndef FL_CLUSTER_H
#define FL_CLUSTER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fl_config.h"
#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FL_CLUSTER_MAX_TRAINERS 256
#define FL_CLUSTER_MAX_PSERVERS 64
#define FL_CLUSTER_MAX_GPUS 64
#define FL_HOST_MAX 128   /* host part of an endpoint, NUL included */
#define FL_TOKEN_MAX 256  /* token bytes, NUL included */
#define FL_CLUSTER_PATH_MAX 512
#define FL_CLUSTER_SOURCE_MAX 16 /* "torchrun" etc., NUL included */

typedef enum fl_role { FL_ROLE_TRAINER = 0, FL_ROLE_PSERVER = 1 } fl_role;

/* "host:port" or "[v6addr]:port"; host is kept without the brackets. */
typedef struct fl_endpoint {
  char host[FL_HOST_MAX];
  uint16_t port; /* 1..65535 */
} fl_endpoint;

typedef struct fl_cluster {
  fl_role role;            /* TRAINER */
  fl_mode mode;            /* local */
  int mode_set;            /* 1 when FLOTILLA_MODE / --mode gave the mode */
  int trainer_id;          /* 0 */
  int trainers_num;        /* 1 */
  fl_endpoint trainer_endpoints[FL_CLUSTER_MAX_TRAINERS];
  int n_trainer_endpoints; /* 0 = not given */
  fl_endpoint current_endpoint;
  int has_current_endpoint; /* 0 no, 1 given, 2 derived by fl_cluster_validate */
  fl_endpoint pserver_endpoints[FL_CLUSTER_MAX_PSERVERS];
  int n_pservers;
  int pserver_id;          /* -1 = not given (required for PSERVER) */
  int local_rank;          /* -1 = derive from the endpoints */
  int local_size;          /* -1 = derive from the endpoints */
  int selected_gpus[FL_CLUSTER_MAX_GPUS];
  int n_selected_gpus;     /* 0 = none (CPU) */
  char token_file[FL_CLUSTER_PATH_MAX];
  char token[FL_TOKEN_MAX]; /* "" = no token; filled by fl_cluster_load_token */
  char log_dir[FL_CLUSTER_PATH_MAX];
  char checkpoint_dir[FL_CLUSTER_PATH_MAX]; /* "" = use the job's */
  char collective_backend[8]; /* "" = auto; the engine checks the name */
  int place_set;           /* FLOTILLA_* / flags gave trainer id, trainers num,
                            * trainer endpoints or pserver id */
  char source[FL_CLUSTER_SOURCE_MAX]; /* engine the place came from: "" (FLOTILLA_*
                            * / flags), "slurm", "torchrun", "openmpi", "paddle" */
  int endpoints_partial;   /* 1: only trainer_endpoints[0] (the rendezvous) and
                            * this rank's entry are known; the others (host "",
                            * port 0) come with rank 0's table at the rendezvous */
  int node_index;          /* the engine's node number, -1 = not given */
} fl_cluster;

/* Where the ranks sit, derived from trainer_endpoints (see fl_cluster_nodes). */
typedef struct fl_node_map {
  int n_nodes;
  int node_of[FL_CLUSTER_MAX_TRAINERS];    /* rank -> node index (first-seen host order) */
  int local_rank[FL_CLUSTER_MAX_TRAINERS]; /* rank -> index among its node's ranks */
  int node_size[FL_CLUSTER_MAX_TRAINERS];  /* node -> number of ranks */
  int node_leader[FL_CLUSTER_MAX_TRAINERS]; /* node -> its lowest rank */
} fl_node_map;

/* Defaults: a lone trainer in local mode, nothing else given. */
void fl_cluster_defaults(fl_cluster *c);

/* Defaults, then every FLOTILLA_* variable that is set (FLOTILLA_TOKEN is
 * copied into c->token).  FL_EINVAL naming the variable for a malformed
 * value ("FLOTILLA_TRAINER_ID=abc: not an integer"). */
fl_status fl_cluster_from_env(fl_cluster *c);

/* Take the place from the cluster engine's environment when the FLOTILLA_*
 * variables and flags did not give it (c->place_set == 0) and the job is
 * not a lone trainer in local mode; call it after
 * fl_cluster_from_env and the flags, before fl_cluster_validate.
 * FLOTILLA_CLUSTER_ENV picks the engine (auto (default), slurm, torchrun,
 * openmpi, paddle, none).  In auto, every engine whose variables are set is
 * read; when two disagree on the rank, the size or the local rank, that is
 * FL_EINVAL naming both and their values.  A trainer gets trainer_id,
 * trainers_num, local_rank/local_size when the engine tells them, and in
 * collective mode (the job's job_mode unless FLOTILLA_MODE gave one) with
 * more than one trainer its endpoints: the full list (Paddle) or the
 * rendezvous as entry 0 and its own address, port 0, as its entry
 * (endpoints_partial).  A pserver gets pserver_id = the engine's rank when
 * the engine's size equals the number of listed pservers.  Logs the source
 * used at INFO; every error is logged, naming the variable. */
fl_status fl_cluster_from_engines(fl_cluster *c, fl_mode job_mode);

/* Host number `index` (0-based) of a Slurm hostlist such as
 * "node[01-04,07],gpu-a[1-2]" (ranges keep the lower bound's zero padding;
 * several bracket groups in one name expand with the last one fastest) into
 * host (cap bytes); *count (may be NULL) gets the number of hosts in the
 * list.  index -1 only counts.  FL_EINVAL (not logged) with a reason in why
 * (whycap bytes) for a malformed list, a range or list of more than
 * FL_SLURM_MAX_HOSTS hosts, a number of more than 9 digits, a host longer
 * than cap - 1, or an index out of range. */
#define FL_SLURM_MAX_HOSTS (1 << 20)
fl_status fl_slurm_hostlist_host(const char *list, int index, char *host, size_t cap, int *count,
                                 char *why, size_t whycap);

/* Tasks on node `node` from a Slurm task count list "2(x3),1" (node 0..2
 * have 2, node 3 has 1).  FL_EINVAL (not logged) with a reason in why for a
 * malformed list or a node out of range. */
fl_status fl_slurm_tasks_on_node(const char *list, int node, int *tasks, char *why,
                                 size_t whycap);

/* Set one field by its flag name without dashes ("trainer_id", "pservers",
 * ... the table above), from a string value.  FL_ENOTFOUND (not logged) when
 * key is not a cluster flag, FL_EINVAL (logged, naming --key) for a bad
 * value or for "token".  The strings are copied. */
fl_status fl_cluster_set(fl_cluster *c, const char *key, const char *value);

/* Apply one command-line argument of the form "--key=value" through
 * fl_cluster_set.  *matched is 1 when arg was a cluster flag (whatever the
 * outcome), 0 when it is someone else's (then FL_OK is returned). */
fl_status fl_cluster_apply_flag(fl_cluster *c, const char *arg, int *matched);

/* The i-th cluster flag's name ("trainer_id"; "token" too, which is always
 * refused), NULL past the last: fl_args.h accepts them. */
const char *fl_cluster_flag_name(size_t i);

/* Print the cluster flags with one line of help each (for --help). */
void fl_cluster_print_flag_help(FILE *out);

/* Take the mode from the job when neither env nor flags gave one, then check
 * everything: trainers_num in [1, MAX], trainer_id in range, endpoint count
 * equal to trainers_num when given (required in collective mode with more
 * than one trainer), the current endpoint equal to this rank's (or this
 * pserver's) entry, pservers present in ps mode, pserver_id in range for a
 * PSERVER, local mode with one trainer, local_rank < local_size.
 * FL_EINVAL with a message naming the variable/flag. */
fl_status fl_cluster_validate(fl_cluster *c, fl_mode job_mode);

/* Make job agree with the validated cluster: job->cluster.mode = c->mode
 * (environment and flags win over the file), FLOTILLA_CHECKPOINT_DIR into
 * train.checkpoint_dir (TRAINER) or pserver.checkpoint_dir (PSERVER), and
 * FLOTILLA_TOKEN_FILE into cluster.token_file.  FL_EINVAL (logged) when a
 * path does not fit. */
fl_status fl_cluster_apply_to_job(const fl_cluster *c, fl_job *job);

/* Load the shared token unless FLOTILLA_TOKEN already gave one: from
 * c->token_file, else from job_token_file (may be NULL or ""); no source at
 * all leaves c->token "" and returns FL_OK.  Whitespace around it is
 * trimmed; an empty token or an unreadable file is FL_EINVAL / FL_EIO naming
 * the file.  Warns when the file is readable by group or others. */
fl_status fl_cluster_load_token(fl_cluster *c, const char *job_token_file);

/* Read a token file into out (cap bytes), trimmed; errors as above. */
fl_status fl_token_read_file(const char *path, char *out, size_t cap);

/* Parse "host:port" / "[v6]:port".  FL_EINVAL (not logged; the caller names
 * the source) for a missing or bad port, an empty or too long host. */
fl_status fl_endpoint_parse(const char *s, fl_endpoint *out);

/* Format as "host:port" ("[host]:port" when host has a ':').  Returns out. */
char *fl_endpoint_format(const fl_endpoint *e, char *out, size_t cap);

/* Split a comma list of endpoints (spaces around entries allowed) into
 * out[0..cap-1]; *n gets the count.  FL_EINVAL (not logged) for a bad entry,
 * an empty entry or more than cap entries; *bad_index gets the entry's
 * index when non-NULL. */
fl_status fl_endpoint_list_parse(const char *s, fl_endpoint *out, int cap, int *n,
                                 int *bad_index);

/* Group the trainer endpoints by host.  FL_EINVAL when no endpoints are
 * known (a lone trainer without endpoints gets one node of one rank). */
fl_status fl_cluster_nodes(const fl_cluster *c, fl_node_map *out);

/* This rank's place: node index, rank within the node and node size,
 * taking FLOTILLA_LOCAL_RANK/SIZE when given, else derived from the hosts.
 * With endpoints_partial: the engine's node number (-1 when it gives none)
 * and its local rank and size (FL_EINVAL when it gave none). */
fl_status fl_cluster_local(const fl_cluster *c, int *node, int *local_rank, int *local_size);

/* This rank's GPU among n_devices (> 0): FLOTILLA_SELECTED_GPUS[local_rank
 * modulo their number] when given, else local_rank modulo n_devices.  The
 * trainer's model and the NCCL backend both use it, so they agree.
 * FL_EINVAL (logged) when the selected id is not below n_devices. */
fl_status fl_cluster_gpu(const fl_cluster *c, int local_rank, int n_devices, int *device);

/* Print the "Distributed Envs" box (variable name and value of every field
 * that is set; the token is shown as "<set>" only). */
void fl_cluster_print_envs(const fl_cluster *c, FILE *out);

/* "TRAINER" / "PSERVER" and back (case-insensitive); FL_EINVAL unlogged. */
const char *fl_role_name(fl_role role);
fl_status fl_role_parse(const char *s, fl_role *out);

#ifdef __cplusplus
}
#endif
#endif
