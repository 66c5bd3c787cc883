/* cluster_engine.c - a process's place in the job from the cluster engine
 * that started it, when flotilla-run's FLOTILLA_* variables do not give it:
 * Slurm (srun), torchrun / Kubernetes, OpenMPI's mpirun, Paddle's launcher.
 * Users who outgrow one box already run under one of these; reading their
 * variables lets `srun flotilla-trainer ...` work without a wrapper.
 *
 * Every engine yields a rank, a size and, where it has them, a local rank
 * and size; the rendezvous (trainer 0's endpoint) is derived as written in
 * deploy/README.md "Cluster engines":
 *   paddle    PADDLE_TRAINER_ENDPOINTS lists every trainer: entry 0;
 *   torchrun  MASTER_ADDR:MASTER_PORT (MASTER_PORT + 1 when
 *             TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent holds the
 *             port itself);
 *   openmpi   MASTER_ADDR:MASTER_PORT, exported with `mpirun -x`;
 *   slurm     MASTER_ADDR (else the first host of SLURM_STEP_NODELIST /
 *             SLURM_JOB_NODELIST) : MASTER_PORT (else 20000 + SLURM_JOB_ID
 *             modulo 10000, so that two jobs on one node differ).
 * Other ranks listen on a free port of their own host, which they tell
 * rank 0 at the rendezvous: FLOTILLA_CURRENT_ENDPOINT when given, else the
 * local address of the route to the rendezvous (the rendezvous host itself
 * when that route is local, so ranks on rank 0's node group with it), and
 * under Slurm, when no route is found, the node's name (SLURMD_NODENAME or
 * its entry of the node list). */
#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "fl_cluster.h"
#include "fl_log.h"

/* ------------------------------------------------------------ hostlists */

#define HL_MAX_GROUPS 8 /* bracket groups in one host name */

/* One bracket group: the text between '[' and ']'. */
typedef struct hl_group {
  const char *s;
  size_t len;
  long n; /* values in it */
} hl_group;

/* Parse a decimal number of at most 9 digits at s[*i]; *width gets the
 * digit count.  0 on failure. */
static int hl_number(const char *s, size_t len, size_t *i, long *v, int *width) {
  size_t start = *i;
  long x = 0;
  while (*i < len && isdigit((unsigned char)s[*i])) {
    if (*i - start >= 9) return 0;
    x = x * 10 + (s[*i] - '0');
    (*i)++;
  }
  if (*i == start) return 0;
  *v = x;
  *width = (int)(*i - start);
  return 1;
}

/* Walk a group's ranges: count its values (want < 0) or put value number
 * `want` into *val with its zero-padding width. */
static int hl_group_walk(const hl_group *g, long want, long *n, long *val, int *width,
                         char *why, size_t whycap) {
  size_t i = 0;
  long total = 0;
  int gshow = g->len > 40 ? 40 : (int)g->len; /* echo at most 40 bytes */
  while (i < g->len) {
    long lo, hi;
    int wlo, whi;
    if (!hl_number(g->s, g->len, &i, &lo, &wlo)) {
      snprintf(why, whycap, "\"[%.*s]\": expected a number (at most 9 digits) at \"%.*s\"",
               gshow, g->s, (int)(g->len - i), g->s + i);
      return 0;
    }
    hi = lo;
    whi = wlo;
    if (i < g->len && g->s[i] == '-') {
      i++;
      if (!hl_number(g->s, g->len, &i, &hi, &whi)) {
        snprintf(why, whycap, "\"[%.*s]\": a range needs a number (at most 9 digits) after '-'",
                 gshow, g->s);
        return 0;
      }
      if (hi < lo) {
        snprintf(why, whycap, "\"[%.*s]\": range %ld-%ld runs backwards", gshow, g->s, lo,
                 hi);
        return 0;
      }
    }
    if (i < g->len) {
      if (g->s[i] != ',' || i + 1 == g->len) {
        snprintf(why, whycap, "\"[%.*s]\": expected ',' between ranges", gshow, g->s);
        return 0;
      }
      i++;
    }
    long span = hi - lo + 1;
    if (span > FL_SLURM_MAX_HOSTS || total > FL_SLURM_MAX_HOSTS - span) {
      snprintf(why, whycap, "\"[%.*s]\": more than %d hosts", gshow, g->s,
               FL_SLURM_MAX_HOSTS);
      return 0;
    }
    if (want >= total && want < total + span) {
      *val = lo + (want - total);
      *width = wlo;
    }
    total += span;
  }
  if (total == 0) {
    snprintf(why, whycap, "empty brackets \"[]\"");
    return 0;
  }
  *n = total;
  return 1;
}

/* One comma-separated item of the list (a host name with 0..8 bracket
 * groups): count its hosts, or write host number `want` (< count). */
static int hl_item(const char *s, size_t len, long want, long *count, char *host, size_t cap,
                   char *why, size_t whycap) {
  hl_group g[HL_MAX_GROUPS];
  int ng = 0;
  int show = len > 40 ? 40 : (int)len; /* echo at most 40 bytes */
  long total = 1;
  for (size_t i = 0; i < len; i++) {
    char ch = s[i];
    if (ch == '[') {
      const char *close = memchr(s + i, ']', len - i);
      if (!close) {
        snprintf(why, whycap, "\"%.*s\": '[' without ']'", show, s);
        return 0;
      }
      if (ng == HL_MAX_GROUPS) {
        snprintf(why, whycap, "\"%.*s\": more than %d bracket groups", show, s,
                 HL_MAX_GROUPS);
        return 0;
      }
      g[ng].s = s + i + 1;
      g[ng].len = (size_t)(close - (s + i + 1));
      if (memchr(g[ng].s, '[', g[ng].len)) {
        snprintf(why, whycap, "\"%.*s\": nested '['", show, s);
        return 0;
      }
      long dummy_v;
      int dummy_w;
      if (!hl_group_walk(&g[ng], -1, &g[ng].n, &dummy_v, &dummy_w, why, whycap)) return 0;
      if (total > FL_SLURM_MAX_HOSTS / g[ng].n) {
        snprintf(why, whycap, "\"%.*s\": more than %d hosts", show, s, FL_SLURM_MAX_HOSTS);
        return 0;
      }
      total *= g[ng].n;
      ng++;
      i = (size_t)(close - s);
    } else if (ch == ']') {
      snprintf(why, whycap, "\"%.*s\": ']' without '['", show, s);
      return 0;
    } else if (!isalnum((unsigned char)ch) && ch != '-' && ch != '.' && ch != '_') {
      snprintf(why, whycap, "\"%.*s\": character 0x%02x is not allowed in a host name", show,
               s, (unsigned char)ch);
      return 0;
    }
  }
  if (len == 0) {
    snprintf(why, whycap, "empty host name");
    return 0;
  }
  *count = total;
  if (want < 0) return 1;
  /* Mixed radix, the last group fastest. */
  long digit[HL_MAX_GROUPS];
  long rest = want;
  for (int k = ng - 1; k >= 0; k--) {
    digit[k] = rest % g[k].n;
    rest /= g[k].n;
  }
  size_t o = 0;
  int k = 0;
  for (size_t i = 0; i < len; i++) {
    char piece[24];
    size_t plen;
    if (s[i] == '[') {
      long v = 0;
      int w = 0;
      long n;
      hl_group_walk(&g[k], digit[k], &n, &v, &w, why, whycap);
      plen = (size_t)snprintf(piece, sizeof piece, "%0*ld", w, v);
      i += g[k].len + 1;
      k++;
    } else {
      piece[0] = s[i];
      plen = 1;
    }
    if (o + plen >= cap) {
      snprintf(why, whycap, "\"%.*s\": host name longer than %zu bytes", show, s, cap - 1);
      return 0;
    }
    memcpy(host + o, piece, plen);
    o += plen;
  }
  host[o] = '\0';
  return 1;
}

fl_status fl_slurm_hostlist_host(const char *list, int index, char *host, size_t cap, int *count,
                                 char *why, size_t whycap) {
  long total = 0;
  int found = 0;
  if (why && whycap) why[0] = '\0';
  char dummy_why[8];
  if (!why || !whycap) {
    why = dummy_why;
    whycap = sizeof dummy_why;
  }
  if (count) *count = 0;
  if (!list || !*list) {
    snprintf(why, whycap, "empty host list");
    return FL_EINVAL;
  }
  if (index >= 0 && (!host || cap < 2)) {
    snprintf(why, whycap, "no room for the host name");
    return FL_EINVAL;
  }
  const char *p = list;
  for (;;) {
    /* The item ends at the first ',' outside brackets. */
    const char *q = p;
    int depth = 0;
    while (*q && (depth || *q != ',')) {
      if (*q == '[') depth++;
      else if (*q == ']') depth--;
      if (depth < 0 || depth > 1) break;
      q++;
    }
    if (depth < 0 || depth > 1) {
      snprintf(why, whycap, "unbalanced brackets in \"%.40s\"", p);
      return FL_EINVAL;
    }
    long n = 0;
    long want = (!found && index >= 0) ? (long)index - total : -1;
    if (!hl_item(p, (size_t)(q - p), -1, &n, NULL, 0, why, whycap)) return FL_EINVAL;
    if (want >= 0 && want < n) {
      if (!hl_item(p, (size_t)(q - p), want, &n, host, cap, why, whycap)) return FL_EINVAL;
      found = 1;
    }
    if (total > FL_SLURM_MAX_HOSTS - n) {
      snprintf(why, whycap, "more than %d hosts", FL_SLURM_MAX_HOSTS);
      return FL_EINVAL;
    }
    total += n;
    if (!*q) break;
    p = q + 1;
    if (!*p) {
      snprintf(why, whycap, "trailing ','");
      return FL_EINVAL;
    }
  }
  if (count) *count = (int)total;
  if (index >= 0 && !found) {
    snprintf(why, whycap, "host %d asked, the list has %ld", index, total);
    return FL_EINVAL;
  }
  return FL_OK;
}

fl_status fl_slurm_tasks_on_node(const char *list, int node, int *tasks, char *why,
                                 size_t whycap) {
  const char *p = list;
  long seen = 0;
  int found = 0;
  if (!p || !*p) {
    snprintf(why, whycap, "empty task count list");
    return FL_EINVAL;
  }
  for (;;) {
    size_t i = 0, len = strcspn(p, ",");
    long n, rep = 1;
    int w;
    if (!hl_number(p, len, &i, &n, &w) || n < 1) {
      snprintf(why, whycap, "\"%.*s\": expected a task count", len > 40 ? 40 : (int)len, p);
      return FL_EINVAL;
    }
    if (i < len) {
      if (len - i < 4 || p[i] != '(' || p[i + 1] != 'x' || p[len - 1] != ')') {
        snprintf(why, whycap, "\"%.*s\": expected N or N(xM)", len > 40 ? 40 : (int)len, p);
        return FL_EINVAL;
      }
      i += 2;
      size_t end = len - 1;
      if (!hl_number(p, end, &i, &rep, &w) || i != end || rep < 1) {
        snprintf(why, whycap, "\"%.*s\": expected N(xM)", len > 40 ? 40 : (int)len, p);
        return FL_EINVAL;
      }
    }
    if (node >= seen && node < seen + rep) {
      *tasks = (int)n;
      found = 1;
    }
    if (seen > FL_SLURM_MAX_HOSTS - rep) {
      snprintf(why, whycap, "more than %d nodes", FL_SLURM_MAX_HOSTS);
      return FL_EINVAL;
    }
    seen += rep;
    if (!p[len]) break;
    p += len + 1;
  }
  if (found) return FL_OK;
  snprintf(why, whycap, "node %d asked, the list covers %ld", node, seen);
  return FL_EINVAL;
}

/* ------------------------------------------------------------ engines */

typedef enum eng_id { ENG_PADDLE, ENG_TORCHRUN, ENG_OPENMPI, ENG_SLURM, ENG_N } eng_id;

static const char *const k_eng_name[ENG_N] = {"paddle", "torchrun", "openmpi", "slurm"};

/* What one engine says.  The names are those of its variables, for
 * messages. */
typedef struct eng_place {
  int present;
  int rank, size;
  int local_rank, local_size; /* -1 = not given */
  int node;                   /* -1 = not given */
  const char *rank_var, *size_var, *local_var;
  fl_endpoint rdv;            /* port 0 = not derived */
  char own_host[FL_HOST_MAX]; /* "" = find the route */
  char node_ip[FL_HOST_MAX];  /* torchrun: FLOTILLA_NODE_IP, the address
                               * flotilla-run was told this node has: it
                               * wins over the route ("" = none) */
  fl_endpoint *all;           /* paddle: every trainer's endpoint */
  int n_all;
} eng_place;

/* An integer variable; 0 when unset, 1 when set and valid, -1 (logged)
 * when malformed. */
static int env_int(const char *name, long lo, long hi, int *out) {
  const char *v = getenv(name);
  char *end;
  if (!v) return 0;
  errno = 0;
  long x = strtol(v, &end, 10);
  while (isspace((unsigned char)*end)) end++;
  if (!*v || errno || *end || x < lo || x > hi) {
    FL_LOGE("%s=%.40s: not an integer in [%ld, %ld]", name, v, lo, hi);
    return -1;
  }
  *out = (int)x;
  return 1;
}

/* MASTER_ADDR / MASTER_PORT into e->rdv.  need: error when missing.
 * Returns 0 ok, -1 error (logged). */
static int master_env(eng_place *e, const char *eng, int need, int port_plus) {
  const char *a = getenv("MASTER_ADDR");
  int port = 0;
  int rc = env_int("MASTER_PORT", 1, 65535 - port_plus, &port);
  if (rc < 0) return -1;
  if (!a || !*a || rc == 0) {
    if (!need) return 0;
    FL_LOGE("%s: MASTER_ADDR and MASTER_PORT must both be set to give the rendezvous "
            "(trainer 0's address and a free port)%s",
            eng, strcmp(eng, "openmpi") ? "" : "; export them with mpirun -x");
    return -1;
  }
  char text[FL_HOST_MAX + 16];
  snprintf(text, sizeof text, "%.*s:%d", FL_HOST_MAX, a, port + port_plus);
  if (strchr(a, ':') && a[0] != '[') snprintf(text, sizeof text, "[%.*s]:%d", FL_HOST_MAX, a, port + port_plus);
  if (fl_endpoint_parse(text, &e->rdv) != FL_OK) {
    FL_LOGE("%s: MASTER_ADDR=%.60s is not a host name or address", eng, a);
    return -1;
  }
  return 0;
}

static int read_paddle(eng_place *e) {
  int r1 = env_int("PADDLE_TRAINER_ID", 0, FL_CLUSTER_MAX_TRAINERS - 1, &e->rank);
  if (r1 == 0) return 0;
  int r2 = env_int("PADDLE_TRAINERS_NUM", 1, FL_CLUSTER_MAX_TRAINERS, &e->size);
  if (r1 < 0 || r2 < 0) return -1;
  if (r2 == 0) {
    FL_LOGE("PADDLE_TRAINER_ID is set but PADDLE_TRAINERS_NUM is not");
    return -1;
  }
  e->rank_var = "PADDLE_TRAINER_ID";
  e->size_var = "PADDLE_TRAINERS_NUM";
  const char *eps = getenv("PADDLE_TRAINER_ENDPOINTS");
  if (eps && *eps) {
    int bad = -1;
    e->all = calloc(FL_CLUSTER_MAX_TRAINERS, sizeof *e->all);
    if (!e->all) {
      FL_LOGE("paddle: out of memory");
      return -1;
    }
    if (fl_endpoint_list_parse(eps, e->all, FL_CLUSTER_MAX_TRAINERS, &e->n_all, &bad) != FL_OK) {
      FL_LOGE("PADDLE_TRAINER_ENDPOINTS: entry %d is not a host:port endpoint (or more than %d)",
              bad, FL_CLUSTER_MAX_TRAINERS);
      return -1;
    }
    if (e->n_all != e->size) {
      FL_LOGE("PADDLE_TRAINER_ENDPOINTS lists %d endpoints but PADDLE_TRAINERS_NUM is %d",
              e->n_all, e->size);
      return -1;
    }
    e->rdv = e->all[0];
    const char *cur = getenv("PADDLE_CURRENT_ENDPOINT");
    fl_endpoint ce;
    char a[FL_HOST_MAX + 16], b[FL_HOST_MAX + 16];
    if (cur && *cur && e->rank < e->n_all &&
        (fl_endpoint_parse(cur, &ce) != FL_OK || ce.port != e->all[e->rank].port ||
         strcmp(ce.host, e->all[e->rank].host))) {
      FL_LOGE("PADDLE_CURRENT_ENDPOINT=%.60s is not trainer %d's entry %s of "
              "PADDLE_TRAINER_ENDPOINTS", cur, e->rank,
              fl_endpoint_format(&e->all[e->rank], a, sizeof a));
      (void)b;
      return -1;
    }
  }
  return 1;
}

static int read_torchrun(eng_place *e, int need_rdv) {
  int r1 = env_int("RANK", 0, FL_CLUSTER_MAX_TRAINERS - 1, &e->rank);
  int r2 = env_int("WORLD_SIZE", 1, FL_CLUSTER_MAX_TRAINERS, &e->size);
  if (r1 == 0 && r2 == 0) return 0;
  if (r1 < 0 || r2 < 0) return -1;
  if (r1 == 0 || r2 == 0) {
    FL_LOGE("torchrun: RANK and WORLD_SIZE go together (only %s is set)",
            r1 ? "RANK" : "WORLD_SIZE");
    return -1;
  }
  e->rank_var = "RANK";
  e->size_var = "WORLD_SIZE";
  int l1 = env_int("LOCAL_RANK", 0, FL_CLUSTER_MAX_TRAINERS - 1, &e->local_rank);
  int l2 = env_int("LOCAL_WORLD_SIZE", 1, FL_CLUSTER_MAX_TRAINERS, &e->local_size);
  int g = env_int("GROUP_RANK", 0, FL_CLUSTER_MAX_TRAINERS - 1, &e->node);
  if (l1 < 0 || l2 < 0 || g < 0) return -1;
  if (l1 == 0 || l2 == 0) e->local_rank = e->local_size = -1;
  e->local_var = "LOCAL_RANK";
  const char *ip = getenv("FLOTILLA_NODE_IP");
  if (ip && *ip && strlen(ip) < sizeof e->node_ip) snprintf(e->node_ip, sizeof e->node_ip, "%s", ip);
  const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
  int plus = agent && !strcasecmp(agent, "true") ? 1 : 0;
  if (master_env(e, "torchrun", need_rdv && e->size > 1, plus) < 0) return -1;
  return 1;
}

static int read_openmpi(eng_place *e, int need_rdv) {
  int r1 = env_int("OMPI_COMM_WORLD_RANK", 0, FL_CLUSTER_MAX_TRAINERS - 1, &e->rank);
  if (r1 == 0) return 0;
  int r2 = env_int("OMPI_COMM_WORLD_SIZE", 1, FL_CLUSTER_MAX_TRAINERS, &e->size);
  if (r1 < 0 || r2 < 0) return -1;
  if (r2 == 0) {
    FL_LOGE("OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
    return -1;
  }
  e->rank_var = "OMPI_COMM_WORLD_RANK";
  e->size_var = "OMPI_COMM_WORLD_SIZE";
  e->local_var = "OMPI_COMM_WORLD_LOCAL_RANK";
  int l1 = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, FL_CLUSTER_MAX_TRAINERS - 1, &e->local_rank);
  int l2 = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, FL_CLUSTER_MAX_TRAINERS, &e->local_size);
  if (l1 < 0 || l2 < 0) return -1;
  if (l1 == 0 || l2 == 0) e->local_rank = e->local_size = -1;
  if (master_env(e, "openmpi", need_rdv && e->size > 1, 0) < 0) return -1;
  return 1;
}

static int read_slurm(eng_place *e, int need_rdv) {
  char why[160], host[FL_HOST_MAX];
  int r1 = env_int("SLURM_PROCID", 0, FL_CLUSTER_MAX_TRAINERS - 1, &e->rank);
  if (r1 == 0) return 0;
  int r2 = env_int("SLURM_NTASKS", 1, FL_CLUSTER_MAX_TRAINERS, &e->size);
  if (r1 < 0 || r2 < 0) return -1;
  if (r2 == 0) {
    FL_LOGE("SLURM_PROCID is set but SLURM_NTASKS is not (start the tasks with srun -n N)");
    return -1;
  }
  e->rank_var = "SLURM_PROCID";
  e->size_var = "SLURM_NTASKS";
  e->local_var = "SLURM_LOCALID";
  int l1 = env_int("SLURM_LOCALID", 0, FL_CLUSTER_MAX_TRAINERS - 1, &e->local_rank);
  int n1 = env_int("SLURM_NODEID", 0, FL_SLURM_MAX_HOSTS - 1, &e->node);
  if (l1 < 0 || n1 < 0) return -1;
  const char *tpn = getenv("SLURM_STEP_TASKS_PER_NODE");
  const char *tpn_var = "SLURM_STEP_TASKS_PER_NODE";
  if (!tpn) {
    tpn = getenv("SLURM_TASKS_PER_NODE");
    tpn_var = "SLURM_TASKS_PER_NODE";
  }
  if (l1 == 1 && n1 == 1 && tpn) {
    if (fl_slurm_tasks_on_node(tpn, e->node, &e->local_size, why, sizeof why) != FL_OK) {
      FL_LOGE("%s=%.60s: %s", tpn_var, tpn, why);
      return -1;
    }
    if (e->local_rank >= e->local_size) {
      FL_LOGE("SLURM_LOCALID=%d is not below the %d tasks %s gives node %d", e->local_rank,
              e->local_size, tpn_var, e->node);
      return -1;
    }
  } else {
    e->local_rank = e->local_size = -1;
  }
  const char *list_var = "SLURM_STEP_NODELIST";
  const char *list = getenv(list_var);
  if (!list || !*list) list = getenv(list_var = "SLURM_JOB_NODELIST");
  if (!list || !*list) list = getenv(list_var = "SLURM_NODELIST");
  if (list && *list) {
    if (fl_slurm_hostlist_host(list, 0, host, sizeof host, NULL, why, sizeof why) != FL_OK) {
      FL_LOGE("%s=%.80s: %s", list_var, list, why);
      return -1;
    }
  } else {
    host[0] = '\0';
  }
  const char *me = getenv("SLURMD_NODENAME");
  if (me && *me && strlen(me) < sizeof e->own_host) {
    snprintf(e->own_host, sizeof e->own_host, "%s", me);
  } else if (list && *list && e->node >= 0) {
    if (fl_slurm_hostlist_host(list, e->node, e->own_host, sizeof e->own_host, NULL, why,
                               sizeof why) != FL_OK) {
      FL_LOGE("%s=%.80s with SLURM_NODEID=%d: %s", list_var, list, e->node, why);
      return -1;
    }
  }
  /* MASTER_ADDR / MASTER_PORT win over the derived ones. */
  const char *ma = getenv("MASTER_ADDR");
  int port = 0, job = 0;
  int pr = env_int("MASTER_PORT", 1, 65535, &port);
  int jr = env_int("SLURM_JOB_ID", 0, INT_MAX, &job);
  if (pr < 0 || jr < 0) return -1;
  if (!pr && jr) port = 20000 + job % 10000;
  const char *a = ma && *ma ? ma : host;
  if (!*a || !port) {
    if (!need_rdv || e->size == 1) return 1;
    FL_LOGE("slurm: no rendezvous: %s", !*a ? "no SLURM_STEP_NODELIST / SLURM_JOB_NODELIST and "
            "no MASTER_ADDR" : "no MASTER_PORT and no SLURM_JOB_ID to derive a port from");
    return -1;
  }
  char text[FL_HOST_MAX + 24];
  snprintf(text, sizeof text, strchr(a, ':') ? "[%.*s]:%d" : "%.*s:%d", FL_HOST_MAX, a, port);
  if (fl_endpoint_parse(text, &e->rdv) != FL_OK) {
    FL_LOGE("slurm: rendezvous host \"%.60s\" (%s) is not a host name or address", a,
            ma && *ma ? "MASTER_ADDR" : list_var);
    return -1;
  }
  return 1;
}

/* This host's address as seen on the route to rdv, numeric, into out; the
 * rdv host itself when that route stays on this machine.  Errors are
 * logged only when log is set. */
static fl_status route_host(const fl_endpoint *rdv, char *out, size_t cap, const char *eng,
                            int log) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_DGRAM;
  char port[8];
  snprintf(port, sizeof port, "%u", (unsigned)rdv->port);
  int rc = getaddrinfo(rdv->host, port, &hints, &res);
  if (rc != 0 || !res) {
    if (!log) return FL_EINVAL;
    return FL_ERR(FL_EINVAL, "%s: cannot resolve the rendezvous host %s: %s", eng, rdv->host,
                  gai_strerror(rc));
  }
  int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  fl_status st = FL_OK;
  /* connect() on a datagram socket only picks the route: nothing is sent. */
  if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
    st = !log ? FL_EIO : FL_ERR(FL_EIO, "%s: no route to the rendezvous %s: %s (set FLOTILLA_CURRENT_ENDPOINT "
                "to this process's host:port)", eng, rdv->host, strerror(errno));
  } else {
    char mine[INET6_ADDRSTRLEN] = "", theirs[INET6_ADDRSTRLEN] = "";
    int loop = 0;
    if (ss.ss_family == AF_INET) {
      inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, mine, sizeof mine);
      const struct sockaddr_in *d = (const struct sockaddr_in *)res->ai_addr;
      inet_ntop(AF_INET, &d->sin_addr, theirs, sizeof theirs);
      loop = (ntohl(d->sin_addr.s_addr) >> 24) == 127;
    } else {
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, mine, sizeof mine);
      const struct sockaddr_in6 *d = (const struct sockaddr_in6 *)res->ai_addr;
      inet_ntop(AF_INET6, &d->sin6_addr, theirs, sizeof theirs);
      loop = IN6_IS_ADDR_LOOPBACK(&d->sin6_addr);
    }
    snprintf(out, cap, "%s", loop || !strcmp(mine, theirs) ? rdv->host : mine);
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return st;
}

static fl_status pick_engine(const char *sel, int *only) {
  *only = -1;
  if (!sel || !*sel || !strcasecmp(sel, "auto")) return FL_OK;
  if (!strcasecmp(sel, "none")) {
    *only = ENG_N;
    return FL_OK;
  }
  for (int i = 0; i < ENG_N; i++)
    if (!strcasecmp(sel, k_eng_name[i])) {
      *only = i;
      return FL_OK;
    }
  return FL_ERR(FL_EINVAL, "FLOTILLA_CLUSTER_ENV=%.40s: want auto, slurm, torchrun, openmpi, "
                "paddle or none", sel);
}

/* "RANK=1, WORLD_SIZE=4[, LOCAL_RANK=1]" for messages. */
static void describe(const eng_place *e, int with_local, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s=%d, %s=%d", e->rank_var, e->rank, e->size_var, e->size);
  if (with_local && n > 0 && (size_t)n < cap)
    snprintf(out + n, cap - (size_t)n, ", %s=%d", e->local_var, e->local_rank);
}

/* The variable that marks each engine as present. */
static const char *const k_eng_marker[ENG_N] = {"PADDLE_TRAINER_ID", "RANK",
                                                "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"};

fl_status fl_cluster_from_engines(fl_cluster *c, fl_mode job_mode) {
  eng_place e[ENG_N];
  int only;
  fl_status st = FL_OK;
  FL_TRY(pick_engine(getenv("FLOTILLA_CLUSTER_ENV"), &only));
  if (only == ENG_N) return FL_OK;
  fl_mode mode = c->mode_set ? c->mode : job_mode;
  int trainer = c->role == FL_ROLE_TRAINER;
  if (c->place_set || (trainer && mode == FL_MODE_LOCAL)) {
    /* flotilla-run (or the user) gave the place, or the job runs one
     * trainer alone (say, inside a batch script whose allocation has
     * several tasks): the engine's variables are not asked. */
    for (int i = 0; i < ENG_N; i++)
      if ((only < 0 || only == i) && getenv(k_eng_marker[i])) {
        FL_LOGI("%s; %s's variables are not used",
                c->place_set ? "place from FLOTILLA_* / flags" : "mode local", k_eng_name[i]);
        break;
      }
    return FL_OK;
  }
  memset(e, 0, sizeof e);
  for (int i = 0; i < ENG_N; i++) {
    e[i].local_rank = e[i].local_size = e[i].node = -1;
    if (only >= 0 && only != i) continue;
    int need = trainer && mode == FL_MODE_COLLECTIVE;
    int rc = i == ENG_PADDLE ? read_paddle(&e[i])
             : i == ENG_TORCHRUN ? read_torchrun(&e[i], need)
             : i == ENG_OPENMPI ? read_openmpi(&e[i], need)
                                : read_slurm(&e[i], need);
    if (rc < 0) {
      st = FL_EINVAL;
      goto out;
    }
    e[i].present = rc > 0;
  }
  int used = -1;
  for (int i = 0; i < ENG_N; i++) {
    if (!e[i].present) continue;
    if (used < 0) {
      used = i;
      continue;
    }
    const eng_place *a = &e[used], *b = &e[i];
    int local_differs = a->local_rank >= 0 && b->local_rank >= 0 && a->local_rank != b->local_rank;
    if (a->rank != b->rank || a->size != b->size || local_differs) {
      char da[160], db[160];
      describe(a, local_differs, da, sizeof da);
      describe(b, local_differs, db, sizeof db);
      st = FL_ERR(FL_EINVAL, "%s (%s) and %s (%s) disagree on this process's place; set "
                  "FLOTILLA_CLUSTER_ENV to the one to use (or unset the other's variables)",
                  k_eng_name[used], da, k_eng_name[i], db);
      goto out;
    }
  }
  if (only >= 0 && only < ENG_N && used < 0) {
    st = FL_ERR(FL_EINVAL, "FLOTILLA_CLUSTER_ENV=%s, but its variables (%s) are not set",
                k_eng_name[only], only == ENG_PADDLE     ? "PADDLE_TRAINER_ID"
                                  : only == ENG_TORCHRUN ? "RANK, WORLD_SIZE"
                                  : only == ENG_OPENMPI  ? "OMPI_COMM_WORLD_RANK"
                                                         : "SLURM_PROCID");
    goto out;
  }
  if (used < 0) goto out;
  const eng_place *p = &e[used];
  char a[FL_HOST_MAX + 16];
  snprintf(c->source, sizeof c->source, "%s", k_eng_name[used]);
  if (!trainer) {
    if (c->n_pservers && p->size != c->n_pservers) {
      st = FL_ERR(FL_EINVAL, "%s gives rank %d of %d, but FLOTILLA_PSERVERS_IP_PORT_LIST lists %d "
                  "pservers: set FLOTILLA_PSERVER_ID", k_eng_name[used], p->rank, p->size,
                  c->n_pservers);
      goto out;
    }
    c->pserver_id = p->rank;
    FL_LOGI("place from %s: pserver %d of %d (%s=%d)", k_eng_name[used], p->rank, p->size,
            p->rank_var, p->rank);
    goto out;
  }
  c->trainer_id = p->rank;
  c->trainers_num = p->size;
  if (p->local_rank >= 0 && c->local_rank < 0) {
    c->local_rank = p->local_rank;
    c->local_size = p->local_size;
  }
  c->node_index = p->node;
  if (mode == FL_MODE_COLLECTIVE && p->size > 1) {
    memset(c->trainer_endpoints, 0, sizeof c->trainer_endpoints);
    c->n_trainer_endpoints = p->size;
    if (p->all) {
      memcpy(c->trainer_endpoints, p->all, (size_t)p->n_all * sizeof *p->all);
    } else {
      if (!p->rdv.port) {
        st = FL_ERR(FL_EINVAL, "%s: no rendezvous endpoint derived", k_eng_name[used]);
        goto out;
      }
      c->trainer_endpoints[0] = p->rdv;
      c->endpoints_partial = 1;
      if (p->rank != 0) {
        fl_endpoint *mine = &c->trainer_endpoints[p->rank];
        if (c->has_current_endpoint == 1) {
          *mine = c->current_endpoint;
        } else if (p->node_ip[0]) {
          /* Several nodes on one machine (127.0.0.x) all route through
           * 127.0.0.1: the node's own address tells them apart. */
          snprintf(mine->host, sizeof mine->host, "%s", p->node_ip);
        } else if ((st = route_host(&p->rdv, mine->host, sizeof mine->host, k_eng_name[used],
                                    !p->own_host[0])) != FL_OK) {
          if (!p->own_host[0]) goto out;
          /* No route found here (the name may resolve on the nodes only):
           * the node's own name. */
          st = FL_OK;
          snprintf(mine->host, sizeof mine->host, "%s", p->own_host);
        }
      }
    }
    FL_LOGI("place from %s: trainer %d of %d (%s, %s), local rank %d of %d, rendezvous %s",
            k_eng_name[used], p->rank, p->size, p->rank_var, p->size_var, c->local_rank,
            c->local_size, fl_endpoint_format(&c->trainer_endpoints[0], a, sizeof a));
  } else {
    FL_LOGI("place from %s: trainer %d of %d (%s, %s), local rank %d of %d", k_eng_name[used],
            p->rank, p->size, p->rank_var, p->size_var, c->local_rank, c->local_size);
  }
out:
  for (int i = 0; i < ENG_N; i++) free(e[i].all);
  return st;
}
