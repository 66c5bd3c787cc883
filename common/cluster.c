/* cluster.c - the FLOTILLA_* environment, its command-line overrides, the
 * checks that make a cluster description coherent, node grouping by host,
 * the shared token, and the "Distributed Envs" table (see fl_cluster.h). */
#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fl_cluster.h"
#include "fl_log.h"

typedef enum kind {
  K_ROLE,
  K_MODE,
  K_TRAINER_ID,
  K_TRAINERS_NUM,
  K_TRAINER_EPS,
  K_CURRENT_EP,
  K_PSERVERS,
  K_PSERVER_ID,
  K_LOCAL_RANK,
  K_LOCAL_SIZE,
  K_GPUS,
  K_TOKEN_FILE,
  K_LOG_DIR,
  K_CKPT_DIR,
  K_COLL_BACKEND
} kind;

typedef struct var {
  kind k;
  const char *flag; /* without the leading "--" */
  const char *env;
  const char *help;
} var;

static const var k_vars[] = {
    {K_ROLE, "role", "FLOTILLA_ROLE", "TRAINER or PSERVER"},
    {K_MODE, "mode", "FLOTILLA_MODE", "local, collective or ps (default: the job's cluster.mode)"},
    {K_TRAINER_ID, "trainer_id", "FLOTILLA_TRAINER_ID", "this trainer's rank, 0..trainers_num-1"},
    {K_TRAINERS_NUM, "trainers_num", "FLOTILLA_TRAINERS_NUM", "number of trainers"},
    {K_TRAINER_EPS, "trainer_endpoints", "FLOTILLA_TRAINER_ENDPOINTS",
     "host:port of every trainer, comma-separated, in rank order"},
    {K_CURRENT_EP, "current_endpoint", "FLOTILLA_CURRENT_ENDPOINT",
     "this process's host:port (must match its entry in the lists)"},
    {K_PSERVERS, "pservers", "FLOTILLA_PSERVERS_IP_PORT_LIST",
     "host:port of every parameter server, comma-separated"},
    {K_PSERVER_ID, "pserver_id", "FLOTILLA_PSERVER_ID", "this pserver's index in that list"},
    {K_LOCAL_RANK, "local_rank", "FLOTILLA_LOCAL_RANK",
     "rank within the node (default: derived from the endpoint hosts)"},
    {K_LOCAL_SIZE, "local_size", "FLOTILLA_LOCAL_SIZE", "ranks on this node (default: derived)"},
    {K_GPUS, "selected_gpus", "FLOTILLA_SELECTED_GPUS", "GPU ids to use, e.g. 0 or 0,1"},
    {K_TOKEN_FILE, "token_file", "FLOTILLA_TOKEN_FILE",
     "file holding the shared token (the token itself: FLOTILLA_TOKEN, never a flag)"},
    {K_LOG_DIR, "log_dir", "FLOTILLA_LOG_DIR", "directory for logs"},
    {K_CKPT_DIR, "checkpoint_dir", "FLOTILLA_CHECKPOINT_DIR", "overrides the job's checkpoint dir"},
    {K_COLL_BACKEND, "collective_backend", "FLOTILLA_COLLECTIVE_BACKEND",
     "collective transport: tcp, shm, nccl or auto (default auto)"},
};
#define N_VARS (sizeof k_vars / sizeof k_vars[0])

const char *fl_role_name(fl_role role) { return role == FL_ROLE_PSERVER ? "PSERVER" : "TRAINER"; }

fl_status fl_role_parse(const char *s, fl_role *out) {
  if (!strcasecmp(s, "TRAINER")) *out = FL_ROLE_TRAINER;
  else if (!strcasecmp(s, "PSERVER")) *out = FL_ROLE_PSERVER;
  else return FL_EINVAL;
  return FL_OK;
}

void fl_cluster_defaults(fl_cluster *c) {
  memset(c, 0, sizeof *c);
  c->role = FL_ROLE_TRAINER;
  c->mode = FL_MODE_LOCAL;
  c->trainer_id = 0;
  c->trainers_num = 1;
  c->pserver_id = -1;
  c->local_rank = -1;
  c->local_size = -1;
  c->node_index = -1;
}

/* ------------------------------------------------------------ endpoints */

static int host_char_ok(int ch) {
  return isalnum(ch) || ch == '.' || ch == '-' || ch == '_';
}

fl_status fl_endpoint_parse(const char *s, fl_endpoint *out) {
  const char *colon, *host = s;
  size_t hlen;
  if (!s) return FL_EINVAL;
  if (s[0] == '[') {
    const char *rb = strchr(s, ']');
    if (!rb || rb[1] != ':') return FL_EINVAL;
    host = s + 1;
    hlen = (size_t)(rb - host);
    colon = rb + 1;
    for (size_t i = 0; i < hlen; i++)
      if (!isxdigit((unsigned char)host[i]) && host[i] != ':' && host[i] != '.') return FL_EINVAL;
    if (!memchr(host, ':', hlen)) return FL_EINVAL;
  } else {
    colon = strrchr(s, ':');
    if (!colon) return FL_EINVAL;
    hlen = (size_t)(colon - s);
    for (size_t i = 0; i < hlen; i++)
      if (!host_char_ok((unsigned char)s[i])) return FL_EINVAL;
  }
  if (hlen == 0 || hlen >= FL_HOST_MAX) return FL_EINVAL;
  const char *p = colon + 1;
  if (!*p || strlen(p) > 5 || strspn(p, "0123456789") != strlen(p)) return FL_EINVAL;
  long port = strtol(p, NULL, 10);
  if (port < 1 || port > 65535) return FL_EINVAL;
  memset(out, 0, sizeof *out);
  memcpy(out->host, host, hlen);
  out->port = (uint16_t)port;
  return FL_OK;
}

char *fl_endpoint_format(const fl_endpoint *e, char *out, size_t cap) {
  if (strchr(e->host, ':')) snprintf(out, cap, "[%s]:%u", e->host, (unsigned)e->port);
  else snprintf(out, cap, "%s:%u", e->host, (unsigned)e->port);
  return out;
}

static int ep_equal(const fl_endpoint *a, const fl_endpoint *b) {
  return a->port == b->port && !strcmp(a->host, b->host);
}

fl_status fl_endpoint_list_parse(const char *s, fl_endpoint *out, int cap, int *n,
                                 int *bad_index) {
  int cnt = 0;
  *n = 0;
  if (bad_index) *bad_index = -1;
  while (isspace((unsigned char)*s)) s++;
  if (!*s) return FL_OK;
  for (;;) {
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    char one[FL_HOST_MAX + 16];
    while (len && isspace((unsigned char)*s)) s++, len--;
    while (len && isspace((unsigned char)s[len - 1])) len--;
    if (bad_index) *bad_index = cnt;
    if (cnt >= cap || len == 0 || len >= sizeof one) return FL_EINVAL;
    memcpy(one, s, len);
    one[len] = '\0';
    if (fl_endpoint_parse(one, &out[cnt]) != FL_OK) return FL_EINVAL;
    cnt++;
    if (!end) break;
    s = end + 1;
  }
  if (bad_index) *bad_index = -1;
  *n = cnt;
  return FL_OK;
}

/* ------------------------------------------------------------ setting fields */

static int parse_int(const char *v, long lo, long hi, int *out) {
  char *end;
  while (isspace((unsigned char)*v)) v++;
  if (!*v) return 0;
  errno = 0;
  long x = strtol(v, &end, 10);
  while (isspace((unsigned char)*end)) end++;
  if (errno || *end || x < lo || x > hi) return 0;
  *out = (int)x;
  return 1;
}

static fl_status set_path(char *dst, size_t cap, const char *v, const char *src) {
  if (strlen(v) >= cap)
    return FL_ERR(FL_EINVAL, "%s: path too long (at most %zu bytes)", src, cap - 1);
  snprintf(dst, cap, "%s", v);
  return FL_OK;
}

/* src names the origin for messages: "FLOTILLA_X=value" or "--x=value". */
static fl_status set_var(fl_cluster *c, const var *vr, const char *v, const char *src) {
  int x, bad;
  if (vr->k == K_TRAINER_ID || vr->k == K_TRAINERS_NUM || vr->k == K_TRAINER_EPS ||
      vr->k == K_PSERVER_ID)
    c->place_set = 1;
  switch (vr->k) {
  case K_ROLE:
    if (fl_role_parse(v, &c->role) != FL_OK)
      return FL_ERR(FL_EINVAL, "%s: must be TRAINER or PSERVER", src);
    return FL_OK;
  case K_MODE:
    if (fl_mode_parse(v, &c->mode) != FL_OK)
      return FL_ERR(FL_EINVAL, "%s: must be local, collective or ps", src);
    c->mode_set = 1;
    return FL_OK;
  case K_TRAINER_ID:
    if (!parse_int(v, 0, FL_CLUSTER_MAX_TRAINERS - 1, &x))
      return FL_ERR(FL_EINVAL, "%s: not an integer in [0, %d]", src, FL_CLUSTER_MAX_TRAINERS - 1);
    c->trainer_id = x;
    return FL_OK;
  case K_TRAINERS_NUM:
    if (!parse_int(v, 1, FL_CLUSTER_MAX_TRAINERS, &x))
      return FL_ERR(FL_EINVAL, "%s: not an integer in [1, %d]", src, FL_CLUSTER_MAX_TRAINERS);
    c->trainers_num = x;
    return FL_OK;
  case K_TRAINER_EPS:
    if (fl_endpoint_list_parse(v, c->trainer_endpoints, FL_CLUSTER_MAX_TRAINERS,
                               &c->n_trainer_endpoints, &bad) != FL_OK) {
      c->n_trainer_endpoints = 0;
      return FL_ERR(FL_EINVAL, "%s: entry %d is not a host:port endpoint (or more than %d)", src,
                    bad, FL_CLUSTER_MAX_TRAINERS);
    }
    return FL_OK;
  case K_PSERVERS:
    if (fl_endpoint_list_parse(v, c->pserver_endpoints, FL_CLUSTER_MAX_PSERVERS, &c->n_pservers,
                               &bad) != FL_OK) {
      c->n_pservers = 0;
      return FL_ERR(FL_EINVAL, "%s: entry %d is not a host:port endpoint (or more than %d)", src,
                    bad, FL_CLUSTER_MAX_PSERVERS);
    }
    return FL_OK;
  case K_CURRENT_EP: {
    char t[FL_HOST_MAX + 16];
    size_t len;
    while (isspace((unsigned char)*v)) v++;
    len = strlen(v);
    while (len && isspace((unsigned char)v[len - 1])) len--;
    if (len >= sizeof t) return FL_ERR(FL_EINVAL, "%s: endpoint too long", src);
    memcpy(t, v, len);
    t[len] = '\0';
    if (fl_endpoint_parse(t, &c->current_endpoint) != FL_OK)
      return FL_ERR(FL_EINVAL, "%s: not a host:port endpoint", src);
    c->has_current_endpoint = 1;
    return FL_OK;
  }
  case K_PSERVER_ID:
    if (!parse_int(v, 0, FL_CLUSTER_MAX_PSERVERS - 1, &x))
      return FL_ERR(FL_EINVAL, "%s: not an integer in [0, %d]", src, FL_CLUSTER_MAX_PSERVERS - 1);
    c->pserver_id = x;
    return FL_OK;
  case K_LOCAL_RANK:
    if (!parse_int(v, 0, FL_CLUSTER_MAX_TRAINERS - 1, &x))
      return FL_ERR(FL_EINVAL, "%s: not an integer in [0, %d]", src, FL_CLUSTER_MAX_TRAINERS - 1);
    c->local_rank = x;
    return FL_OK;
  case K_LOCAL_SIZE:
    if (!parse_int(v, 1, FL_CLUSTER_MAX_TRAINERS, &x))
      return FL_ERR(FL_EINVAL, "%s: not an integer in [1, %d]", src, FL_CLUSTER_MAX_TRAINERS);
    c->local_size = x;
    return FL_OK;
  case K_GPUS: {
    int n = 0;
    const char *p = v;
    while (isspace((unsigned char)*p)) p++;
    while (*p) {
      char *end;
      if (!isdigit((unsigned char)*p) || n >= FL_CLUSTER_MAX_GPUS)
        return FL_ERR(FL_EINVAL, "%s: expected GPU ids like 0,1 (at most %d)", src,
                      FL_CLUSTER_MAX_GPUS);
      long id = strtol(p, &end, 10);
      if (id > 1023) return FL_ERR(FL_EINVAL, "%s: GPU id %ld out of range", src, id);
      for (int i = 0; i < n; i++)
        if (c->selected_gpus[i] == id) return FL_ERR(FL_EINVAL, "%s: GPU %ld twice", src, id);
      c->selected_gpus[n++] = (int)id;
      p = end;
      while (isspace((unsigned char)*p)) p++;
      if (*p == ',') {
        p++;
        while (isspace((unsigned char)*p)) p++;
        if (!*p) return FL_ERR(FL_EINVAL, "%s: trailing comma", src);
      } else if (*p) {
        return FL_ERR(FL_EINVAL, "%s: expected GPU ids like 0,1", src);
      }
    }
    c->n_selected_gpus = n;
    return FL_OK;
  }
  case K_TOKEN_FILE:
    return set_path(c->token_file, sizeof c->token_file, v, src);
  case K_LOG_DIR:
    return set_path(c->log_dir, sizeof c->log_dir, v, src);
  case K_CKPT_DIR:
    return set_path(c->checkpoint_dir, sizeof c->checkpoint_dir, v, src);
  case K_COLL_BACKEND:
    /* the collective engine checks the name against its transports */
    if (!*v || strlen(v) >= sizeof c->collective_backend)
      return FL_ERR(FL_EINVAL, "%s: expected tcp, shm, nccl or auto", src);
    snprintf(c->collective_backend, sizeof c->collective_backend, "%s", v);
    return FL_OK;
  }
  return FL_ERR(FL_EINVAL, "%s: unhandled setting", src);
}

/* Trim s in place; returns the start of the trimmed text. */
static char *trim(char *s) {
  size_t len;
  while (isspace((unsigned char)*s)) s++;
  len = strlen(s);
  while (len && isspace((unsigned char)s[len - 1])) s[--len] = '\0';
  return s;
}

static fl_status check_token(const char *tok, const char *src) {
  if (!*tok) return FL_ERR(FL_EINVAL, "%s: the token is empty", src);
  if (strlen(tok) >= FL_TOKEN_MAX)
    return FL_ERR(FL_EINVAL, "%s: the token is longer than %d bytes", src, FL_TOKEN_MAX - 1);
  for (const char *p = tok; *p; p++)
    if (*p < 0x21 || *p > 0x7e)
      return FL_ERR(FL_EINVAL, "%s: the token must be printable ASCII without spaces", src);
  return FL_OK;
}

fl_status fl_cluster_from_env(fl_cluster *c) {
  fl_cluster_defaults(c);
  for (size_t i = 0; i < N_VARS; i++) {
    const char *v = getenv(k_vars[i].env);
    if (!v) continue;
    char src[96];
    snprintf(src, sizeof src, "%s=%.40s%s", k_vars[i].env, v, strlen(v) > 40 ? "..." : "");
    FL_TRY(set_var(c, &k_vars[i], v, src));
  }
  const char *tok = getenv("FLOTILLA_TOKEN");
  if (!tok) return FL_OK;
  char *copy = strdup(tok);
  if (!copy) return FL_ERR(FL_ENOMEM, "FLOTILLA_TOKEN: out of memory");
  char *t = trim(copy);
  fl_status st = check_token(t, "FLOTILLA_TOKEN");
  if (st == FL_OK) snprintf(c->token, sizeof c->token, "%s", t);
  explicit_bzero(copy, strlen(copy));
  free(copy);
  return st;
}

fl_status fl_cluster_set(fl_cluster *c, const char *key, const char *value) {
  char src[96];
  if (!strcmp(key, "token"))
    return FL_ERR(FL_EINVAL, "--token: the token is never taken from a flag (flags show in ps); "
                  "use FLOTILLA_TOKEN or --token_file");
  for (size_t i = 0; i < N_VARS; i++) {
    if (strcmp(k_vars[i].flag, key)) continue;
    snprintf(src, sizeof src, "--%s=%.40s%s", key, value, strlen(value) > 40 ? "..." : "");
    return set_var(c, &k_vars[i], value, src);
  }
  return FL_ENOTFOUND;
}

fl_status fl_cluster_apply_flag(fl_cluster *c, const char *arg, int *matched) {
  char key[64];
  *matched = 0;
  if (strncmp(arg, "--", 2)) return FL_OK;
  const char *eq = strchr(arg + 2, '=');
  size_t klen = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
  if (klen == 0 || klen >= sizeof key) return FL_OK;
  memcpy(key, arg + 2, klen);
  key[klen] = '\0';
  int known = !strcmp(key, "token");
  for (size_t i = 0; i < N_VARS && !known; i++) known = !strcmp(k_vars[i].flag, key);
  if (!known) return FL_OK;
  *matched = 1;
  if (!eq && strcmp(key, "token"))
    return FL_ERR(FL_EINVAL, "--%s: expected --%s=VALUE", key, key);
  return fl_cluster_set(c, key, eq ? eq + 1 : "");
}

const char *fl_cluster_flag_name(size_t i) {
  if (i < N_VARS) return k_vars[i].flag;
  return i == N_VARS ? "token" : NULL;
}

void fl_cluster_print_flag_help(FILE *out) {
  for (size_t i = 0; i < N_VARS; i++) {
    int pad = 24 - (int)strlen(k_vars[i].flag);
    fprintf(out, "  --%s=VALUE%*s%s\n  %*s(environment: %s)\n", k_vars[i].flag, pad > 1 ? pad : 1,
            "", k_vars[i].help, 32, "", k_vars[i].env);
  }
  fprintf(out, "  FLOTILLA_TOKEN (environment only): the shared token itself\n");
  fprintf(out, "  Without FLOTILLA_TRAINER_ID / _TRAINERS_NUM / _TRAINER_ENDPOINTS / _PSERVER_ID the\n"
               "  place comes from the cluster engine's variables: Slurm (SLURM_PROCID, ...),\n"
               "  torchrun (RANK, WORLD_SIZE, MASTER_ADDR, ...), OpenMPI (OMPI_COMM_WORLD_*) or\n"
               "  Paddle (PADDLE_TRAINER_*); FLOTILLA_CLUSTER_ENV=auto|slurm|torchrun|openmpi|\n"
               "  paddle|none picks one (see deploy/README.md, \"Cluster engines\")\n");
}

/* ------------------------------------------------------------ validation */

fl_status fl_cluster_validate(fl_cluster *c, fl_mode job_mode) {
  char a[FL_HOST_MAX + 16], b[FL_HOST_MAX + 16];
  if (!c->mode_set) c->mode = job_mode;
  if (c->trainers_num < 1 || c->trainers_num > FL_CLUSTER_MAX_TRAINERS)
    return FL_ERR(FL_EINVAL, "FLOTILLA_TRAINERS_NUM / --trainers_num: %d out of range [1, %d]",
                  c->trainers_num, FL_CLUSTER_MAX_TRAINERS);
  if (c->n_trainer_endpoints && c->n_trainer_endpoints != c->trainers_num)
    return FL_ERR(FL_EINVAL, "FLOTILLA_TRAINER_ENDPOINTS lists %d endpoints but "
                  "FLOTILLA_TRAINERS_NUM is %d", c->n_trainer_endpoints, c->trainers_num);
  for (int i = 0; i < c->n_trainer_endpoints; i++)
    for (int j = 0; j < i; j++)
      if (c->trainer_endpoints[i].port && ep_equal(&c->trainer_endpoints[i], &c->trainer_endpoints[j]))
        return FL_ERR(FL_EINVAL, "FLOTILLA_TRAINER_ENDPOINTS: %s appears twice (ranks %d and %d)",
                      fl_endpoint_format(&c->trainer_endpoints[i], a, sizeof a), j, i);
  for (int i = 0; i < c->n_pservers; i++)
    for (int j = 0; j < i; j++)
      if (ep_equal(&c->pserver_endpoints[i], &c->pserver_endpoints[j]))
        return FL_ERR(FL_EINVAL, "FLOTILLA_PSERVERS_IP_PORT_LIST: %s appears twice",
                      fl_endpoint_format(&c->pserver_endpoints[i], a, sizeof a));

  if (c->role == FL_ROLE_TRAINER) {
    if (c->trainer_id < 0 || c->trainer_id >= c->trainers_num)
      return FL_ERR(FL_EINVAL, "FLOTILLA_TRAINER_ID / --trainer_id: %d out of range [0, %d)",
                    c->trainer_id, c->trainers_num);
  } else if (c->mode != FL_MODE_PS) {
    return FL_ERR(FL_EINVAL, "FLOTILLA_ROLE=PSERVER needs mode ps, got %s", fl_mode_name(c->mode));
  }

  switch (c->mode) {
  case FL_MODE_LOCAL:
    if (c->trainers_num != 1)
      return FL_ERR(FL_EINVAL, "mode local runs one trainer, but FLOTILLA_TRAINERS_NUM is %d "
                    "(use mode collective or ps)", c->trainers_num);
    break;
  case FL_MODE_COLLECTIVE:
    if (c->trainers_num > 1 && !c->n_trainer_endpoints)
      return FL_ERR(FL_EINVAL, "mode collective with %d trainers needs FLOTILLA_TRAINER_ENDPOINTS",
                    c->trainers_num);
    break;
  case FL_MODE_PS:
    if (!c->n_pservers)
      return FL_ERR(FL_EINVAL, "mode ps needs FLOTILLA_PSERVERS_IP_PORT_LIST / --pservers");
    break;
  case FL_MODE_COUNT: return FL_ERR(FL_EINVAL, "mode %d: no such mode", (int)c->mode);
  }

  if (c->role == FL_ROLE_TRAINER && c->n_trainer_endpoints) {
    const fl_endpoint *mine = &c->trainer_endpoints[c->trainer_id];
    if (c->has_current_endpoint == 1 && !ep_equal(mine, &c->current_endpoint))
      return FL_ERR(FL_EINVAL, "FLOTILLA_CURRENT_ENDPOINT %s is not trainer %d's endpoint %s",
                    fl_endpoint_format(&c->current_endpoint, a, sizeof a), c->trainer_id,
                    fl_endpoint_format(mine, b, sizeof b));
    if (c->has_current_endpoint != 1) {
      c->current_endpoint = *mine;
      c->has_current_endpoint = 2;
    }
  }
  if (c->role == FL_ROLE_PSERVER) {
    if (c->pserver_id < 0 || c->pserver_id >= c->n_pservers)
      return FL_ERR(FL_EINVAL, "FLOTILLA_PSERVER_ID / --pserver_id: %d out of range [0, %d)",
                    c->pserver_id, c->n_pservers);
    const fl_endpoint *mine = &c->pserver_endpoints[c->pserver_id];
    if (c->has_current_endpoint == 1 && !ep_equal(mine, &c->current_endpoint))
      return FL_ERR(FL_EINVAL, "FLOTILLA_CURRENT_ENDPOINT %s is not pserver %d's endpoint %s",
                    fl_endpoint_format(&c->current_endpoint, a, sizeof a), c->pserver_id,
                    fl_endpoint_format(mine, b, sizeof b));
    if (c->has_current_endpoint != 1) {
      c->current_endpoint = *mine;
      c->has_current_endpoint = 2;
    }
  }

  if ((c->local_rank >= 0) != (c->local_size > 0))
    return FL_ERR(FL_EINVAL, "FLOTILLA_LOCAL_RANK and FLOTILLA_LOCAL_SIZE go together");
  if (c->local_rank >= 0 && c->local_rank >= c->local_size)
    return FL_ERR(FL_EINVAL, "FLOTILLA_LOCAL_RANK %d out of range [0, %d)", c->local_rank,
                  c->local_size);
  return FL_OK;
}

static fl_status copy_path(char *dst, size_t cap, const char *src, const char *what) {
  if (strlen(src) >= cap)
    return FL_ERR(FL_EINVAL, "%s %s: too long for the job (at most %zu bytes)", what, src,
                  cap - 1);
  snprintf(dst, cap, "%s", src);
  return FL_OK;
}

fl_status fl_cluster_apply_to_job(const fl_cluster *c, fl_job *job) {
  job->cluster.mode = c->mode;
  if (c->checkpoint_dir[0]) {
    if (c->role == FL_ROLE_PSERVER)
      FL_TRY(copy_path(job->pserver.checkpoint_dir, sizeof job->pserver.checkpoint_dir,
                       c->checkpoint_dir, "FLOTILLA_CHECKPOINT_DIR"));
    else
      FL_TRY(copy_path(job->train.checkpoint_dir, sizeof job->train.checkpoint_dir,
                       c->checkpoint_dir, "FLOTILLA_CHECKPOINT_DIR"));
  }
  if (c->token_file[0])
    FL_TRY(copy_path(job->cluster.token_file, sizeof job->cluster.token_file, c->token_file,
                     "FLOTILLA_TOKEN_FILE"));
  return FL_OK;
}

/* ------------------------------------------------------------ nodes */

fl_status fl_cluster_nodes(const fl_cluster *c, fl_node_map *out) {
  memset(out, 0, sizeof *out);
  if (c->endpoints_partial)
    return FL_ERR(FL_EINVAL, "node map: %s gave only the rendezvous endpoint; the other ranks' "
                  "hosts are known after the rendezvous", c->source);
  if (!c->n_trainer_endpoints) {
    if (c->trainers_num != 1)
      return FL_ERR(FL_EINVAL, "node map: %d trainers but no FLOTILLA_TRAINER_ENDPOINTS",
                    c->trainers_num);
    out->n_nodes = 1;
    out->node_size[0] = 1;
    return FL_OK;
  }
  for (int r = 0; r < c->n_trainer_endpoints; r++) {
    int node = -1;
    for (int q = 0; q < r; q++)
      if (!strcmp(c->trainer_endpoints[q].host, c->trainer_endpoints[r].host)) {
        node = out->node_of[q];
        break;
      }
    if (node < 0) {
      node = out->n_nodes++;
      out->node_leader[node] = r;
    }
    out->node_of[r] = node;
    out->local_rank[r] = out->node_size[node]++;
  }
  return FL_OK;
}

fl_status fl_cluster_local(const fl_cluster *c, int *node, int *local_rank, int *local_size) {
  if (c->endpoints_partial) {
    if (c->local_rank < 0)
      return FL_ERR(FL_EINVAL, "%s gives no local rank and only the rendezvous endpoint: set "
                    "FLOTILLA_LOCAL_RANK and FLOTILLA_LOCAL_SIZE", c->source);
    *node = c->node_index;
    *local_rank = c->local_rank;
    *local_size = c->local_size;
    return FL_OK;
  }
  fl_node_map *m = malloc(sizeof *m);
  if (!m) return FL_ERR(FL_ENOMEM, "node map: out of memory");
  fl_status st = fl_cluster_nodes(c, m);
  if (st == FL_OK) {
    int r = c->role == FL_ROLE_TRAINER ? c->trainer_id : 0;
    *node = m->node_of[r];
    *local_rank = c->local_rank >= 0 ? c->local_rank : m->local_rank[r];
    *local_size = c->local_size > 0 ? c->local_size : m->node_size[m->node_of[r]];
  }
  free(m);
  return st;
}

fl_status fl_cluster_gpu(const fl_cluster *c, int local_rank, int n_devices, int *device) {
  *device = 0;
  if (n_devices < 1 || local_rank < 0)
    return FL_ERR(FL_EINVAL, "gpu choice: %d devices, local rank %d", n_devices, local_rank);
  if (c->n_selected_gpus > 0) {
    *device = c->selected_gpus[local_rank % c->n_selected_gpus];
    if (*device >= n_devices)
      return FL_ERR(FL_EINVAL, "FLOTILLA_SELECTED_GPUS names GPU %d, but this machine has %d",
                    *device, n_devices);
  } else {
    *device = local_rank % n_devices;
  }
  return FL_OK;
}

/* ------------------------------------------------------------ token */

fl_status fl_token_read_file(const char *path, char *out, size_t cap) {
  char buf[4096];
  struct stat stt;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FL_ERR(FL_EIO, "token file %s: %s", path, strerror(errno));
  if (fstat(fd, &stt) == 0 && (stt.st_mode & (S_IRWXG | S_IRWXO)))
    FL_LOGW("token file %s is accessible by group or others (mode %03o); chmod 600 it", path,
            (unsigned)(stt.st_mode & 0777));
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int e = errno;
  close(fd);
  if (n < 0) return FL_ERR(FL_EIO, "token file %s: %s", path, strerror(e));
  buf[n] = '\0';
  if (strlen(buf) != (size_t)n) return FL_ERR(FL_EINVAL, "token file %s: contains a NUL byte", path);
  char *t = trim(buf);
  char src[FL_CLUSTER_PATH_MAX + 16];
  snprintf(src, sizeof src, "token file %s", path);
  fl_status st = check_token(t, src);
  if (st == FL_OK && strlen(t) >= cap) st = FL_ERR(FL_EINVAL, "%s: token too long", src);
  if (st == FL_OK) snprintf(out, cap, "%s", t);
  explicit_bzero(buf, sizeof buf);
  return st;
}

fl_status fl_cluster_load_token(fl_cluster *c, const char *job_token_file) {
  if (c->token[0]) return FL_OK;
  const char *path = c->token_file[0] ? c->token_file : job_token_file;
  if (!path || !*path) return FL_OK;
  return fl_token_read_file(path, c->token, sizeof c->token);
}

/* ------------------------------------------------------------ table */

#define ENV_INNER 86
#define ENV_KEY 40

static void env_rule(FILE *out, char ch) {
  fputc('+', out);
  for (int i = 0; i < ENV_INNER; i++) fputc(ch, out);
  fputs("+\n", out);
}

static void env_row(FILE *out, const char *key, const char *value) {
  fprintf(out, "|%*.*s    %-*.*s|\n", ENV_KEY, ENV_KEY, key, ENV_INNER - ENV_KEY - 4,
          ENV_INNER - ENV_KEY - 4, value);
}

/* An endpoint list, wrapped over as many rows as it needs. */
static void env_list(FILE *out, const char *key, const fl_endpoint *eps, int n) {
  char line[ENV_INNER + FL_HOST_MAX + 16], one[FL_HOST_MAX + 16];
  size_t width = ENV_INNER - ENV_KEY - 4, len = 0;
  int first = 1;
  line[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (eps[i].port) fl_endpoint_format(&eps[i], one, sizeof one);
    else if (eps[i].host[0]) snprintf(one, sizeof one, "%s:?", eps[i].host); /* port at rendezvous */
    else snprintf(one, sizeof one, "?"); /* learned at the rendezvous */
    size_t add = strlen(one) + (i + 1 < n ? 1 : 0);
    if (len && len + add > width) {
      env_row(out, first ? key : "", line);
      first = 0;
      len = 0;
      line[0] = '\0';
    }
    int w = snprintf(line + len, sizeof line - len, "%s%s", one, i + 1 < n ? "," : "");
    if (w > 0) len = strlen(line);
  }
  env_row(out, first ? key : "", line);
}

void fl_cluster_print_envs(const fl_cluster *c, FILE *out) {
  char v[FL_CLUSTER_PATH_MAX + 16];
  env_rule(out, '=');
  env_row(out, "Distributed Envs", "Value");
  env_rule(out, '-');
  if (c->source[0]) env_row(out, "place from", c->source);
  env_row(out, "FLOTILLA_ROLE", fl_role_name(c->role));
  env_row(out, "FLOTILLA_MODE", fl_mode_name(c->mode));
  if (c->role == FL_ROLE_TRAINER) {
    snprintf(v, sizeof v, "%d", c->trainer_id);
    env_row(out, "FLOTILLA_TRAINER_ID", v);
  }
  snprintf(v, sizeof v, "%d", c->trainers_num);
  env_row(out, "FLOTILLA_TRAINERS_NUM", v);
  if (c->has_current_endpoint)
    env_row(out, "FLOTILLA_CURRENT_ENDPOINT", fl_endpoint_format(&c->current_endpoint, v, sizeof v));
  if (c->n_trainer_endpoints)
    env_list(out, "FLOTILLA_TRAINER_ENDPOINTS", c->trainer_endpoints, c->n_trainer_endpoints);
  if (c->n_pservers)
    env_list(out, "FLOTILLA_PSERVERS_IP_PORT_LIST", c->pserver_endpoints, c->n_pservers);
  if (c->role == FL_ROLE_PSERVER) {
    snprintf(v, sizeof v, "%d", c->pserver_id);
    env_row(out, "FLOTILLA_PSERVER_ID", v);
  }
  if (c->local_rank >= 0) {
    snprintf(v, sizeof v, "%d", c->local_rank);
    env_row(out, "FLOTILLA_LOCAL_RANK", v);
    snprintf(v, sizeof v, "%d", c->local_size);
    env_row(out, "FLOTILLA_LOCAL_SIZE", v);
  }
  if (c->n_selected_gpus) {
    size_t len = 0;
    v[0] = '\0';
    for (int i = 0; i < c->n_selected_gpus && len + 8 < sizeof v; i++) {
      snprintf(v + len, sizeof v - len, "%s%d", i ? "," : "", c->selected_gpus[i]);
      len = strlen(v);
    }
    env_row(out, "FLOTILLA_SELECTED_GPUS", v);
  }
  if (c->token[0]) env_row(out, "FLOTILLA_TOKEN", "<set>");
  if (c->token_file[0]) env_row(out, "FLOTILLA_TOKEN_FILE", c->token_file);
  if (c->log_dir[0]) env_row(out, "FLOTILLA_LOG_DIR", c->log_dir);
  if (c->checkpoint_dir[0]) env_row(out, "FLOTILLA_CHECKPOINT_DIR", c->checkpoint_dir);
  env_rule(out, '=');
  fflush(out);
}
