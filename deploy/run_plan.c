/* run_plan.c - flotilla-run's job layout: from the command line to every
 * process's endpoint and FLOTILLA_* environment (run_internal.h).
 *
 * Every node of a multi-node job runs the same computation on the same
 * options, so they all agree on the endpoints without talking to each
 * other: node n of --ips runs trainers n*P .. n*P+P-1 (P per node) and, in
 * PS mode, its pservers; the trainers then meet at rank 0's endpoint. */
#include <config.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fl_log.h"
#include "run_internal.h"

#define DEFAULT_MULTI_NODE_PORT 6170

void fl_run_opts_defaults(fl_run_opts *o) {
  memset(o, 0, sizeof *o);
  o->mode = FL_RUN_COLLECTIVE;
  snprintf(o->ips[0], FL_RUN_EP_MAX, "127.0.0.1");
  o->n_ips = 1;
  snprintf(o->log_dir, sizeof o->log_dir, "log");
  o->node_rank = -1;
}

#define TORCHRUN_DEFAULT_PORT 29500

/* What a mode asks of nodes known only by number (--nnodes N > 1, no
 * --ips): collective trainers meet at trainer 0, so node 0's address is
 * needed; ps trainers contact only the pservers, so their endpoints are. */
typedef struct mode_rule {
  int needs_master;    /* --master_addr */
  int needs_servers;   /* --servers */
  const char *master_why, *servers_why;
} mode_rule;

static const mode_rule k_mode_rules[] = {
    [FL_RUN_COLLECTIVE] = {1, 0, "the address of node rank 0, where the trainers meet", NULL},
    [FL_RUN_PS] = {0, 1, NULL, "the pservers' endpoints: nodes known by number cannot be given "
                               "pservers"},
};

/* The rule's requirements of nodes known by number. */
static fl_status check_mode_rule(const fl_run_opts *o) {
  const mode_rule *r = &k_mode_rules[o->mode];
  const char *name = o->mode == FL_RUN_PS ? "ps" : "collective";
  if (r->needs_master && !o->master_addr[0])
    return FL_ERR(FL_EINVAL, "--mode %s with --nnodes %d and no --ips needs --master_addr (%s)",
                  name, o->nnodes, r->master_why);
  if (r->needs_servers && !o->n_servers)
    return FL_ERR(FL_EINVAL, "--mode %s with --nnodes %d and no --ips needs --servers (%s)", name,
                  o->nnodes, r->servers_why);
  return FL_OK;
}

fl_status fl_run_torchrun_opts(fl_run_opts *o) {
  if (o->ips_given) {
    if (o->nnodes && o->nnodes != o->n_ips)
      return FL_ERR(FL_EINVAL, "--nnodes %d but --ips lists %d nodes", o->nnodes, o->n_ips);
    if (o->node_rank >= 0) {
      if (o->node_rank >= o->n_ips)
        return FL_ERR(FL_EINVAL, "--node_rank %d: --ips lists %d nodes", o->node_rank, o->n_ips);
      if (o->node_ip[0] && strcmp(o->node_ip, o->ips[o->node_rank]))
        return FL_ERR(FL_EINVAL, "--node_rank %d is %s, but --node_ip (or FLOTILLA_NODE_IP) says "
                      "%s", o->node_rank, o->ips[o->node_rank], o->node_ip);
      snprintf(o->node_ip, sizeof o->node_ip, "%s", o->ips[o->node_rank]);
    }
    if (o->master_addr[0] && strcmp(o->master_addr, o->ips[0]))
      return FL_ERR(FL_EINVAL, "--master_addr %s: trainer 0 runs on the first of --ips, %s",
                    o->master_addr, o->ips[0]);
  } else if (o->nnodes > 1) {
    FL_TRY(check_mode_rule(o));
    if (o->nnodes > FL_RUN_MAX_NODES)
      return FL_ERR(FL_EINVAL, "--nnodes %d: at most %d", o->nnodes, FL_RUN_MAX_NODES);
    if (o->node_rank >= o->nnodes)
      return FL_ERR(FL_EINVAL, "--node_rank %d: want 0 .. %d (--nnodes %d)", o->node_rank,
                    o->nnodes - 1, o->nnodes);
    if (o->port && o->master_port && o->port != o->master_port)
      return FL_ERR(FL_EINVAL, "--port %d and --master_port %d disagree", o->port,
                    o->master_port);
    if (!o->master_port) o->master_port = o->port ? o->port : TORCHRUN_DEFAULT_PORT;
    if (o->node_rank < 0) o->node_rank = 0;
    o->torchrun = 1;
    o->n_ips = o->nnodes;
    for (int i = 0; i < o->n_ips; i++) snprintf(o->ips[i], FL_RUN_EP_MAX, "(node %d)", i); /* never a host */
    if (o->master_addr[0]) snprintf(o->ips[0], FL_RUN_EP_MAX, "%s", o->master_addr);
    if (o->node_ip[0]) {
      if (o->node_rank == 0 && o->master_addr[0] && strcmp(o->node_ip, o->master_addr))
        return FL_ERR(FL_EINVAL, "--node_rank 0 runs trainer 0 at --master_addr %s, but "
                      "--node_ip says %s", o->master_addr, o->node_ip);
      snprintf(o->ips[o->node_rank], FL_RUN_EP_MAX, "%s", o->node_ip);
    }
    o->node_ip_known = o->node_ip[0] || (o->node_rank == 0 && o->master_addr[0]);
    snprintf(o->node_ip, sizeof o->node_ip, "%s", o->ips[o->node_rank]);
    return FL_OK;
  } else {
    if (o->node_rank > 0)
      return FL_ERR(FL_EINVAL, "--node_rank %d of a single node (--nnodes 1, no --ips)",
                    o->node_rank);
    if (o->master_addr[0]) snprintf(o->ips[0], FL_RUN_EP_MAX, "%s", o->master_addr);
  }
  if (o->master_port) {
    if (o->mode == FL_RUN_PS)
      return FL_ERR(FL_EINVAL, "--master_port is trainer 0's port: collective mode only (ps "
                    "mode: --port)");
    if (o->port && o->port != o->master_port)
      return FL_ERR(FL_EINVAL, "--port %d and --master_port %d disagree", o->port,
                    o->master_port);
    o->port = o->master_port;
  }
  return FL_OK;
}

fl_status fl_run_split_list(const char *flag, const char *s, char (*out)[FL_RUN_EP_MAX], int cap,
                            int *n) {
  *n = 0;
  const char *p = s;
  for (;;) {
    while (*p == ' ') p++;
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    while (len && p[len - 1] == ' ') len--;
    if (len == 0) return FL_ERR(FL_EINVAL, "%s %s: empty entry", flag, s);
    if (len >= FL_RUN_EP_MAX)
      return FL_ERR(FL_EINVAL, "%s: entry \"%.*s\" is too long", flag, (int)len, p);
    if (*n == cap) return FL_ERR(FL_EINVAL, "%s: more than %d entries", flag, cap);
    memcpy(out[*n], p, len);
    out[*n][len] = '\0';
    (*n)++;
    if (!end) break;
    p = end + 1;
  }
  return FL_OK;
}

fl_status fl_run_local_addrs(char (*out)[FL_RUN_EP_MAX], int cap, int *n) {
  struct ifaddrs *ifa = NULL;
  *n = 0;
  if (getifaddrs(&ifa) != 0)
    return FL_ERR(FL_EIO, "cannot list this machine's addresses: %s", strerror(errno));
  for (struct ifaddrs *i = ifa; i && *n < cap; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    socklen_t len = fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (getnameinfo(i->ifa_addr, len, out[*n], FL_RUN_EP_MAX, NULL, 0, NI_NUMERICHOST) == 0)
      (*n)++;
  }
  freeifaddrs(ifa);
  return FL_OK;
}

fl_status fl_run_find_node(const fl_run_opts *o, char (*local)[FL_RUN_EP_MAX], int n_local,
                           int *node) {
  if (o->node_ip[0]) {
    for (int i = 0; i < o->n_ips; i++)
      if (strcmp(o->ips[i], o->node_ip) == 0) {
        *node = i;
        return FL_OK;
      }
    return FL_ERR(FL_EINVAL, "--node_ip %s is not one of --ips", o->node_ip);
  }
  if (o->n_ips == 1) {
    *node = 0;
    return FL_OK;
  }
  int found = -1;
  for (int i = 0; i < o->n_ips; i++)
    for (int j = 0; j < n_local; j++)
      if (strcmp(o->ips[i], local[j]) == 0) {
        if (found >= 0 && found != i)
          return FL_ERR(FL_EINVAL, "--ips %s and %s are both addresses of this machine: "
                        "say which node this is with --node_ip", o->ips[found], o->ips[i]);
        found = i;
      }
  if (found < 0)
    return FL_ERR(FL_EINVAL, "none of the %d --ips is an address of this machine: "
                  "say which node this is with --node_ip", o->n_ips);
  *node = found;
  return FL_OK;
}

static void format_ep(char *out, const char *host, int port) {
  if (strchr(host, ':'))
    snprintf(out, FL_RUN_EP_MAX, "[%s]:%d", host, port);
  else
    snprintf(out, FL_RUN_EP_MAX, "%s:%d", host, port);
}

/* Host part of "host:port" / "[v6]:port" into host; FL_EINVAL unlogged. */
static fl_status ep_host(const char *ep, char *host) {
  const char *h = ep, *colon;
  size_t len;
  if (ep[0] == '[') {
    const char *close = strchr(ep, ']');
    if (!close || close[1] != ':') return FL_EINVAL;
    h = ep + 1;
    len = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(ep, ':');
    if (!colon) return FL_EINVAL;
    len = (size_t)(colon - ep);
  }
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (len == 0 || len >= FL_RUN_EP_MAX || *end || port < 1 || port > 65535) return FL_EINVAL;
  memcpy(host, h, len);
  host[len] = '\0';
  return FL_OK;
}

/* The kernel's ephemeral port range (ip_local_port_range) into *lo, *hi;
 * Linux's default 32768-60999 when it cannot be read. */
static void ephemeral_range(int *lo, int *hi) {
  *lo = 32768;
  *hi = 60999;
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (!f) return;
  int a, b;
  if (fscanf(f, "%d %d", &a, &b) == 2 && a > 0 && a <= b) {
    *lo = a;
    *hi = b;
  }
  fclose(f);
}

/* Reserve n distinct free ports on host, below the kernel's ephemeral
 * range, then release them for the children.  A port from bind(port 0)
 * is ephemeral: between its release and the child's bind the kernel may
 * hand it to an outgoing connection (a trainer connecting to the pserver
 * started first takes the port of the one not yet listening), and the
 * child fails to bind.  The kernel never picks a port below the range
 * for a connection.  Ports are tried from a random start in
 * [max(1024, lo / 2), lo), each bound without SO_REUSEADDR (a port in
 * TIME_WAIT is skipped), and all n are held until found. */
static fl_status free_ports(const char *host, int n, int *ports) {
  int fds[FL_RUN_MAX_PROCS];
  int opened = 0, lo, hi;
  fl_status st = FL_OK;
  struct addrinfo hints, *ai = NULL;
  ephemeral_range(&lo, &hi);
  const int first = lo / 2 > 1024 ? lo / 2 : 1024, span = lo - first;
  if (span < n)
    return FL_ERR(FL_EINVAL, "no %d ports below the ephemeral range %d-%d: give --port", n, lo,
                  hi);
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  if (getaddrinfo(host, "0", &hints, &ai) != 0)
    return FL_ERR(FL_EINVAL, "--ips %s: not a numeric IP address", host);
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const unsigned start = ((unsigned)getpid() * 2654435761u ^ (unsigned)now.tv_nsec) % (unsigned)span;
  for (int tried = 0; opened < n && tried < span; tried++) {
    const int port = first + (int)((start + (unsigned)tried) % (unsigned)span);
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      st = FL_ERR(FL_EIO, "cannot open a socket on %s: %s", host, strerror(errno));
      break;
    }
    if (ai->ai_family == AF_INET)
      ((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)port);
    else
      ((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons((uint16_t)port);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      close(fd);
      continue;
    }
    fds[opened] = fd;
    ports[opened++] = port;
  }
  if (st == FL_OK && opened < n)
    st = FL_ERR(FL_EIO, "only %d of %d free ports on %s in %d-%d: give --port", opened, n, host,
                first, lo - 1);
  for (int i = 0; i < opened; i++) close(fds[i]);
  freeaddrinfo(ai);
  return st;
}

static fl_status add_env(fl_run_proc *p, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static fl_status add_env(fl_run_proc *p, const char *key, const char *fmt, ...) {
  if (p->n_env == FL_RUN_MAX_ENV) return FL_ERR(FL_EINVAL, "too many variables for %s", key);
  char *val = NULL, *kv = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&val, fmt, ap);
  va_end(ap);
  if (n < 0 || asprintf(&kv, "%s=%s", key, val) < 0) {
    free(val);
    return FL_ERR(FL_ENOMEM, "out of memory for %s", key);
  }
  free(val);
  p->env[p->n_env++] = kv;
  return FL_OK;
}

/* Comma-join the endpoints of the procs of one role. */
static char *join_eps(const fl_run_plan *plan, fl_run_role role) {
  size_t len = 1;
  for (int i = 0; i < plan->n_procs; i++)
    if (plan->procs[i].role == role) len += strlen(plan->procs[i].endpoint) + 1;
  char *s = calloc(1, len);
  if (!s) return NULL;
  for (int i = 0; i < plan->n_procs; i++) {
    if (plan->procs[i].role != role) continue;
    if (*s) strcat(s, ",");
    strcat(s, plan->procs[i].endpoint);
  }
  return s;
}

void fl_run_plan_clear(fl_run_plan *p) {
  for (int i = 0; i < p->n_procs; i++) {
    for (int j = 0; j < p->procs[i].n_env; j++) free(p->procs[i].env[j]);
    p->procs[i].n_env = 0;
  }
}

static fl_status check_opts(const fl_run_opts *o, int *per_node) {
  for (int i = 0; i < o->n_ips; i++)
    for (int j = 0; j < i; j++)
      if (strcmp(o->ips[i], o->ips[j]) == 0)
        return FL_ERR(FL_EINVAL, "--ips lists %s twice", o->ips[i]);
  if (o->nproc_per_node && o->n_gpus && o->nproc_per_node != o->n_gpus)
    return FL_ERR(FL_EINVAL, "--nproc_per_node %d and --gpus with %d ids disagree",
                  o->nproc_per_node, o->n_gpus);
  *per_node = o->nproc_per_node ? o->nproc_per_node : o->n_gpus ? o->n_gpus : 1;
  if (*per_node * o->n_ips > FL_RUN_MAX_PROCS)
    return FL_ERR(FL_EINVAL, "%d trainers: at most %d", *per_node * o->n_ips, FL_RUN_MAX_PROCS);
  if (o->mode == FL_RUN_COLLECTIVE && (o->server_num || o->n_servers))
    return FL_ERR(FL_EINVAL, "--server_num and --servers apply to --mode ps only");
  if (o->server_num && o->n_servers)
    return FL_ERR(FL_EINVAL, "give --server_num or --servers, not both");
  if (o->port && (o->port < 1 || o->port > 65535))
    return FL_ERR(FL_EINVAL, "--port %d: not a port", o->port);
  return FL_OK;
}

/* OPENBLAS_NUM_THREADS for p, unless flotilla-run's environment sets it:
 * OpenBLAS starts its threads when loaded, before the program can say how
 * many it wants.  A pserver's BLAS work is small (1); a trainer's is
 * train.num_threads (the trainer sets the same later; 0: all cores, as
 * OpenBLAS's own default). */
static fl_status blas_threads(fl_run_proc *p, const fl_run_opts *o) {
  if (getenv("OPENBLAS_NUM_THREADS")) return FL_OK;
  if (p->role == FL_RUN_PSERVER) return add_env(p, "OPENBLAS_NUM_THREADS", "1");
  if (o->train_threads > 0) return add_env(p, "OPENBLAS_NUM_THREADS", "%d", o->train_threads);
  return FL_OK;
}

fl_status fl_run_make_plan(const fl_run_opts *o, int this_node, fl_run_plan *out) {
  int per_node;
  memset(out, 0, sizeof *out);
  FL_TRY(check_opts(o, &per_node));
  out->mode = o->mode;
  out->this_node = this_node;
  out->trainers_per_node = per_node;
  out->n_trainers = per_node * o->n_ips;
  int servers_per_node = 0;
  if (o->mode == FL_RUN_PS) {
    servers_per_node = o->n_servers ? 0 : (o->server_num ? o->server_num : 1);
    out->n_pservers = o->n_servers ? o->n_servers : servers_per_node * o->n_ips;
  }
  if (out->n_trainers + out->n_pservers > FL_RUN_MAX_PROCS)
    return FL_ERR(FL_EINVAL, "%d processes: at most %d", out->n_trainers + out->n_pservers,
                  FL_RUN_MAX_PROCS);

  /* Ports of this layout: trainers (collective only need one) and the
   * pservers flotilla-run places itself. */
  int per_node_ports = (o->mode == FL_RUN_COLLECTIVE ? per_node : 0) + servers_per_node;
  int ports[FL_RUN_MAX_PROCS];
  int base = o->port ? o->port : (o->n_ips > 1 ? DEFAULT_MULTI_NODE_PORT : 0);
  if (o->torchrun) {
    /* Trainer 0 listens at the master's port, the others on free ports of
     * their own; pservers come from --servers. */
    per_node_ports = 0;
  } else if (base) {
    if (base + per_node_ports - 1 > 65535)
      return FL_ERR(FL_EINVAL, "--port %d: %d ports from there pass 65535", base, per_node_ports);
    for (int i = 0; i < per_node_ports; i++) ports[i] = base + i;
  } else if (per_node_ports) {
    FL_TRY(free_ports(o->ips[0], per_node_ports, ports));
  }

  for (int r = 0; r < out->n_trainers; r++) {
    fl_run_proc *p = &out->procs[out->n_procs++];
    p->role = FL_RUN_TRAINER;
    p->id = r;
    p->node = r / per_node;
    p->local_rank = r % per_node;
    p->local = p->node == this_node;
    p->gpu = o->n_gpus ? o->gpus[p->local_rank] : -1;
    if (o->torchrun) {
      if (r == 0 && o->master_addr[0])
        snprintf(p->endpoint, FL_RUN_EP_MAX, strchr(o->master_addr, ':') ? "[%.140s]:%d" : "%.140s:%d",
                 o->master_addr, o->master_port);
    } else if (o->mode == FL_RUN_COLLECTIVE) {
      format_ep(p->endpoint, o->ips[p->node], ports[p->local_rank]);
    }
    snprintf(p->log_path, sizeof p->log_path, "%s/workerlog.%d", o->log_dir, r);
  }
  for (int s = 0; s < out->n_pservers; s++) {
    fl_run_proc *p = &out->procs[out->n_procs++];
    p->role = FL_RUN_PSERVER;
    p->id = s;
    p->gpu = -1;
    p->local_rank = -1;
    if (o->n_servers) {
      char host[FL_RUN_EP_MAX];
      if (ep_host(o->servers[s], host) != FL_OK)
        return FL_ERR(FL_EINVAL, "--servers entry %d \"%s\" is not host:port", s, o->servers[s]);
      snprintf(p->endpoint, sizeof p->endpoint, "%s", o->servers[s]);
      p->node = -1;
      for (int i = 0; i < o->n_ips; i++)
        if (strcmp(o->ips[i], host) == 0) p->node = i;
      for (int q = 0; q < s; q++)
        if (strcmp(out->procs[out->n_trainers + q].endpoint, p->endpoint) == 0)
          return FL_ERR(FL_EINVAL, "--servers lists %s twice", p->endpoint);
    } else {
      p->node = s / servers_per_node;
      format_ep(p->endpoint, o->ips[p->node], ports[per_node_ports - servers_per_node +
                                                   s % servers_per_node]);
    }
    p->local = p->node == this_node;
    snprintf(p->log_path, sizeof p->log_path, "%s/serverlog.%d", o->log_dir, s);
  }

  char *trainer_eps = join_eps(out, FL_RUN_TRAINER);
  char *server_eps = join_eps(out, FL_RUN_PSERVER);
  fl_status st = FL_OK;
  if (!trainer_eps || !server_eps) {
    st = FL_ERR(FL_ENOMEM, "out of memory laying out %d processes", out->n_procs);
    goto done;
  }
  /* A lone trainer has nobody to talk to: it runs in local mode. */
  int local_mode = o->mode == FL_RUN_COLLECTIVE && out->n_trainers == 1;
  const char *mode = o->mode == FL_RUN_PS ? "ps" : local_mode ? "local" : "collective";
  for (int i = 0; i < out->n_procs && st == FL_OK; i++) {
    fl_run_proc *p = &out->procs[i];
    if (!p->local) continue;
    if (p->role == FL_RUN_TRAINER && o->torchrun) {
      st = add_env(p, "FLOTILLA_ROLE", "TRAINER");
      if (st == FL_OK) st = add_env(p, "FLOTILLA_MODE", "%s", mode);
      if (st == FL_OK) st = add_env(p, "FLOTILLA_CLUSTER_ENV", "torchrun");
      if (st == FL_OK) st = add_env(p, "RANK", "%d", p->id);
      if (st == FL_OK) st = add_env(p, "WORLD_SIZE", "%d", out->n_trainers);
      if (st == FL_OK) st = add_env(p, "LOCAL_RANK", "%d", p->local_rank);
      if (st == FL_OK) st = add_env(p, "LOCAL_WORLD_SIZE", "%d", per_node);
      if (st == FL_OK) st = add_env(p, "GROUP_RANK", "%d", p->node);
      if (st == FL_OK && o->master_addr[0]) st = add_env(p, "MASTER_ADDR", "%s", o->master_addr);
      if (st == FL_OK && o->master_addr[0]) st = add_env(p, "MASTER_PORT", "%d", o->master_port);
      if (st == FL_OK && o->node_ip_known) st = add_env(p, "FLOTILLA_NODE_IP", "%s", o->node_ip);
      if (st == FL_OK && p->gpu >= 0) st = add_env(p, "FLOTILLA_SELECTED_GPUS", "%d", p->gpu);
    } else if (p->role == FL_RUN_TRAINER) {
      st = add_env(p, "FLOTILLA_ROLE", "TRAINER");
      if (st == FL_OK) st = add_env(p, "FLOTILLA_MODE", "%s", mode);
      if (st == FL_OK) st = add_env(p, "FLOTILLA_TRAINER_ID", "%d", p->id);
      if (st == FL_OK) st = add_env(p, "FLOTILLA_TRAINERS_NUM", "%d", out->n_trainers);
      if (st == FL_OK && o->mode == FL_RUN_COLLECTIVE && !local_mode) {
        st = add_env(p, "FLOTILLA_TRAINER_ENDPOINTS", "%s", trainer_eps);
        if (st == FL_OK) st = add_env(p, "FLOTILLA_CURRENT_ENDPOINT", "%s", p->endpoint);
      }
      if (st == FL_OK) st = add_env(p, "FLOTILLA_LOCAL_RANK", "%d", p->local_rank);
      if (st == FL_OK) st = add_env(p, "FLOTILLA_LOCAL_SIZE", "%d", per_node);
      if (st == FL_OK && p->gpu >= 0) st = add_env(p, "FLOTILLA_SELECTED_GPUS", "%d", p->gpu);
    } else {
      st = add_env(p, "FLOTILLA_ROLE", "PSERVER");
      if (st == FL_OK) st = add_env(p, "FLOTILLA_MODE", "ps");
      if (st == FL_OK) st = add_env(p, "FLOTILLA_PSERVER_ID", "%d", p->id);
      if (st == FL_OK) st = add_env(p, "FLOTILLA_CURRENT_ENDPOINT", "%s", p->endpoint);
      if (st == FL_OK) st = add_env(p, "FLOTILLA_TRAINERS_NUM", "%d", out->n_trainers);
    }
    if (st == FL_OK && o->mode == FL_RUN_PS)
      st = add_env(p, "FLOTILLA_PSERVERS_IP_PORT_LIST", "%s", server_eps);
    if (st == FL_OK) st = blas_threads(p, o);
    if (st == FL_OK) st = add_env(p, "FLOTILLA_LOG_DIR", "%s", o->log_dir);
  }
done:
  free(trainer_eps);
  free(server_eps);
  if (st != FL_OK) fl_run_plan_clear(out);
  return st;
}
