/* metrics.c - the Prometheus registry and its text rendering (fl_metrics.h).
 *
 * Families and series are singly linked lists kept in creation order, so
 * /metrics lists them in a stable order.  The registry's mutex guards the
 * list of families, a family's mutex its list of series, and each series has
 * its own mutex so that a histogram's buckets, sum and count always change
 * together.  Lookups are linear: a daemon has a few dozen series at most
 * and looks each one up once.  The HTTP side lives in metrics_http.c. */
#include <config.h>

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "fl_metrics.h"

struct fl_series {
  fl_metric *family;
  char *values[FL_METRICS_MAX_LABELS];
  pthread_mutex_t mu;
  double value;                            /* counter, gauge, histogram sum */
  uint64_t count;                          /* histogram observations */
  uint64_t buckets[FL_METRICS_MAX_BUCKETS]; /* per bucket, not cumulative */
  fl_series *next;
};

struct fl_metric {
  fl_metric_type type;
  char *name;
  char *help;
  int nlabels;
  char *labels[FL_METRICS_MAX_LABELS];
  double bounds[FL_METRICS_MAX_BUCKETS];
  size_t nbounds;
  pthread_mutex_t mu;
  fl_series *series, *series_tail;
  fl_metric *next;
  unsigned roles; /* well-known families: ROLE_* bits of the roles that have it; 0 = all */
};

struct fl_metrics {
  pthread_mutex_t mu;
  fl_metric *head, *tail;
  unsigned role; /* the process's ROLE_* (fl_metrics_std_info); 0 = show every family */
};

enum { ROLE_TRAINER = 1, ROLE_PSERVER = 2 };

static const double default_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                        0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                        1.0,    2.5,     5.0,    10.0};

fl_status fl_metrics_create(fl_metrics **out) {
  fl_metrics *reg = calloc(1, sizeof *reg);
  if (!reg) return FL_ERR(FL_ENOMEM, "metrics: cannot allocate a registry");
  pthread_mutex_init(&reg->mu, NULL);
  *out = reg;
  return FL_OK;
}

static void series_free(fl_series *s, int nlabels) {
  for (int i = 0; i < nlabels; i++) free(s->values[i]);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

static void family_free(fl_metric *m) {
  fl_series *s = m->series;
  while (s) {
    fl_series *next = s->next;
    series_free(s, m->nlabels);
    s = next;
  }
  for (int i = 0; i < m->nlabels; i++) free(m->labels[i]);
  free(m->name);
  free(m->help);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

void fl_metrics_destroy(fl_metrics *reg) {
  if (!reg) return;
  fl_metric *m = reg->head;
  while (m) {
    fl_metric *next = m->next;
    family_free(m);
    m = next;
  }
  pthread_mutex_destroy(&reg->mu);
  free(reg);
}

static fl_metrics *default_reg;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void default_init(void) {
  if (fl_metrics_create(&default_reg) != FL_OK) default_reg = NULL;
}

fl_metrics *fl_metrics_default(void) {
  pthread_once(&default_once, default_init);
  return default_reg;
}

static int valid_name(const char *s, int allow_colon) {
  if (!s || !*s) return 0;
  for (const char *p = s; *p; p++) {
    char c = *p;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
             (allow_colon && c == ':') || (p != s && c >= '0' && c <= '9');
    if (!ok) return 0;
  }
  return 1;
}

/* Split "a,b" into fresh strings in out[]; *n receives the count. */
static fl_status split_labels(const char *name, const char *labels, fl_metric_type type,
                              char **out, int *n) {
  *n = 0;
  if (!labels || !*labels) return FL_OK;
  const char *p = labels;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (*n == FL_METRICS_MAX_LABELS)
      return FL_ERR(FL_EINVAL, "metrics %s: more than %d labels in \"%s\"", name,
                    FL_METRICS_MAX_LABELS, labels);
    char *l = strndup(p, len);
    if (!l) return FL_ERR(FL_ENOMEM, "metrics %s: out of memory", name);
    out[(*n)++] = l;
    if (!valid_name(l, 0) || strncmp(l, "__", 2) == 0 ||
        (type == FL_METRIC_HISTOGRAM && strcmp(l, "le") == 0))
      return FL_ERR(FL_EINVAL, "metrics %s: invalid label name \"%s\"", name, l);
    for (int i = 0; i < *n - 1; i++)
      if (strcmp(out[i], l) == 0)
        return FL_ERR(FL_EINVAL, "metrics %s: label \"%s\" given twice", name, l);
    if (!comma) break;
    p = comma + 1;
  }
  return FL_OK;
}

static int same_shape(const fl_metric *a, const fl_metric *b) {
  if (a->type != b->type || a->nlabels != b->nlabels || a->nbounds != b->nbounds) return 0;
  for (int i = 0; i < a->nlabels; i++)
    if (strcmp(a->labels[i], b->labels[i]) != 0) return 0;
  for (size_t i = 0; i < a->nbounds; i++)
    if (a->bounds[i] != b->bounds[i]) return 0;
  return 1;
}

static fl_status add_family(fl_metrics *reg, fl_metric_type type, const char *name,
                            const char *help, const char *labels, const double *bounds,
                            size_t nbounds, fl_metric **out) {
  if (!reg) return FL_ERR(FL_EINVAL, "metrics %s: no registry", name ? name : "?");
  if (!valid_name(name, 1))
    return FL_ERR(FL_EINVAL, "metrics: invalid metric name \"%s\"", name ? name : "(null)");
  fl_metric *m = calloc(1, sizeof *m);
  if (!m) return FL_ERR(FL_ENOMEM, "metrics %s: out of memory", name);
  pthread_mutex_init(&m->mu, NULL);
  m->type = type;
  fl_status st = split_labels(name, labels, type, m->labels, &m->nlabels);
  if (st != FL_OK) goto fail;
  if (type == FL_METRIC_HISTOGRAM) {
    if (!bounds || nbounds == 0) {
      bounds = default_bounds;
      nbounds = sizeof default_bounds / sizeof default_bounds[0];
    }
    if (nbounds > FL_METRICS_MAX_BUCKETS) {
      st = FL_ERR(FL_EINVAL, "metrics %s: %zu buckets, at most %d", name, nbounds,
                  FL_METRICS_MAX_BUCKETS);
      goto fail;
    }
    for (size_t i = 0; i < nbounds; i++) {
      if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) {
        st = FL_ERR(FL_EINVAL, "metrics %s: bucket bounds must be finite and increasing "
                    "(bound %zu is %g)", name, i, bounds[i]);
        goto fail;
      }
      m->bounds[i] = bounds[i];
    }
    m->nbounds = nbounds;
  }
  m->name = strdup(name);
  m->help = strdup(help ? help : "");
  if (!m->name || !m->help) {
    st = FL_ERR(FL_ENOMEM, "metrics %s: out of memory", name);
    goto fail;
  }

  pthread_mutex_lock(&reg->mu);
  for (fl_metric *e = reg->head; e; e = e->next) {
    if (strcmp(e->name, name) != 0) continue;
    int same = same_shape(e, m);
    pthread_mutex_unlock(&reg->mu);
    if (!same) {
      st = FL_ERR(FL_EINVAL, "metrics %s: registered before with another type, labels "
                  "or buckets", name);
      goto fail;
    }
    family_free(m);
    *out = e;
    return FL_OK;
  }
  if (reg->tail)
    reg->tail->next = m;
  else
    reg->head = m;
  reg->tail = m;
  pthread_mutex_unlock(&reg->mu);
  *out = m;
  return FL_OK;
fail:
  family_free(m);
  return st;
}

fl_status fl_metrics_counter(fl_metrics *reg, const char *name, const char *help,
                             const char *labels, fl_metric **out) {
  return add_family(reg, FL_METRIC_COUNTER, name, help, labels, NULL, 0, out);
}

fl_status fl_metrics_gauge(fl_metrics *reg, const char *name, const char *help,
                           const char *labels, fl_metric **out) {
  return add_family(reg, FL_METRIC_GAUGE, name, help, labels, NULL, 0, out);
}

fl_status fl_metrics_histogram(fl_metrics *reg, const char *name, const char *help,
                               const char *labels, const double *bounds, size_t nbounds,
                               fl_metric **out) {
  return add_family(reg, FL_METRIC_HISTOGRAM, name, help, labels, bounds, nbounds, out);
}

static int series_matches(const fl_series *s, int n, const char *const *values) {
  for (int i = 0; i < n; i++)
    if (strcmp(s->values[i], values[i]) != 0) return 0;
  return 1;
}

fl_status fl_metric_series(fl_metric *m, const char *const *values, fl_series **out) {
  if (!m) return FL_ERR(FL_EINVAL, "metrics: series of a NULL family");
  for (int i = 0; i < m->nlabels; i++)
    if (!values || !values[i])
      return FL_ERR(FL_EINVAL, "metrics %s: no value for label \"%s\"", m->name,
                    m->labels[i]);
  pthread_mutex_lock(&m->mu);
  for (fl_series *s = m->series; s; s = s->next) {
    if (series_matches(s, m->nlabels, values)) {
      pthread_mutex_unlock(&m->mu);
      *out = s;
      return FL_OK;
    }
  }
  fl_series *s = calloc(1, sizeof *s);
  if (!s) goto oom;
  pthread_mutex_init(&s->mu, NULL);
  s->family = m;
  for (int i = 0; i < m->nlabels; i++) {
    s->values[i] = strdup(values[i]);
    if (!s->values[i]) {
      series_free(s, i);
      goto oom;
    }
  }
  if (m->series_tail)
    m->series_tail->next = s;
  else
    m->series = s;
  m->series_tail = s;
  pthread_mutex_unlock(&m->mu);
  *out = s;
  return FL_OK;
oom:
  pthread_mutex_unlock(&m->mu);
  return FL_ERR(FL_ENOMEM, "metrics %s: out of memory for a series", m->name);
}

fl_series *fl_metric_plain(fl_metric *m) {
  fl_series *s = NULL;
  if (!m || m->nlabels != 0) return NULL;
  if (fl_metric_series(m, NULL, &s) != FL_OK) return NULL;
  return s;
}

void fl_series_add(fl_series *s, double v) {
  if (!s) return;
  fl_metric_type t = s->family->type;
  if (t == FL_METRIC_HISTOGRAM || (t == FL_METRIC_COUNTER && !(v >= 0))) return;
  pthread_mutex_lock(&s->mu);
  s->value += v;
  pthread_mutex_unlock(&s->mu);
}

void fl_series_set(fl_series *s, double v) {
  if (!s || s->family->type != FL_METRIC_GAUGE) return;
  pthread_mutex_lock(&s->mu);
  s->value = v;
  pthread_mutex_unlock(&s->mu);
}

void fl_series_observe(fl_series *s, double v) {
  if (!s || s->family->type != FL_METRIC_HISTOGRAM) return;
  const fl_metric *m = s->family;
  size_t b = 0;
  while (b < m->nbounds && !(v <= m->bounds[b])) b++;
  pthread_mutex_lock(&s->mu);
  if (b < m->nbounds) s->buckets[b]++;
  s->count++;
  s->value += v;
  pthread_mutex_unlock(&s->mu);
}

double fl_series_value(fl_series *s, double *count) {
  if (count) *count = 0;
  if (!s) return 0;
  pthread_mutex_lock(&s->mu);
  double v = s->value;
  if (count) *count = (double)s->count;
  pthread_mutex_unlock(&s->mu);
  return v;
}

/* ---- text rendering ---- */

typedef struct buf {
  char *p;
  size_t len, cap;
  int oom;
} buf;

static void buf_put(buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void buf_str(buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(buf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A sample value as Prometheus reads it: NaN, +Inf, -Inf, or the shorter
 * of %.15g / %.17g that reads back as the same double. */
static void fmt_num(char *out, size_t n, double v) {
  if (isnan(v))
    snprintf(out, n, "NaN");
  else if (isinf(v))
    snprintf(out, n, "%s", v > 0 ? "+Inf" : "-Inf");
  else {
    snprintf(out, n, "%.15g", v);
    if (strtod(out, NULL) != v) snprintf(out, n, "%.17g", v);
  }
}

static void buf_num(buf *b, double v) {
  char tmp[40];
  fmt_num(tmp, sizeof tmp, v);
  buf_str(b, tmp);
}

/* HELP text escapes \ and newline; label values also escape ". */
static void buf_escaped(buf *b, const char *s, int quote) {
  for (; *s; s++) {
    if (*s == '\\')
      buf_str(b, "\\\\");
    else if (*s == '\n')
      buf_str(b, "\\n");
    else if (quote && *s == '"')
      buf_str(b, "\\\"");
    else
      buf_put(b, s, 1);
  }
}

/* name{l1="v1",l2="v2"[,le="x"]} */
static void buf_sample_name(buf *b, const fl_metric *m, const char *suffix,
                            const fl_series *s, const char *le) {
  buf_str(b, m->name);
  buf_str(b, suffix);
  if (m->nlabels == 0 && !le) return;
  buf_str(b, "{");
  for (int i = 0; i < m->nlabels; i++) {
    if (i) buf_str(b, ",");
    buf_str(b, m->labels[i]);
    buf_str(b, "=\"");
    buf_escaped(b, s->values[i], 1);
    buf_str(b, "\"");
  }
  if (le) {
    if (m->nlabels) buf_str(b, ",");
    buf_printf(b, "le=\"%s\"", le);
  }
  buf_str(b, "}");
}

static void render_series(buf *b, const fl_metric *m, fl_series *s) {
  fl_series snap;
  pthread_mutex_lock(&s->mu);
  snap.value = s->value;
  snap.count = s->count;
  memcpy(snap.buckets, s->buckets, sizeof snap.buckets);
  pthread_mutex_unlock(&s->mu);

  if (m->type != FL_METRIC_HISTOGRAM) {
    buf_sample_name(b, m, "", s, NULL);
    buf_str(b, " ");
    buf_num(b, snap.value);
    buf_str(b, "\n");
    return;
  }
  uint64_t cum = 0;
  char le[40];
  for (size_t i = 0; i < m->nbounds; i++) {
    cum += snap.buckets[i];
    fmt_num(le, sizeof le, m->bounds[i]);
    buf_sample_name(b, m, "_bucket", s, le);
    buf_printf(b, " %llu\n", (unsigned long long)cum);
  }
  buf_sample_name(b, m, "_bucket", s, "+Inf");
  buf_printf(b, " %llu\n", (unsigned long long)snap.count);
  buf_sample_name(b, m, "_sum", s, NULL);
  buf_str(b, " ");
  buf_num(b, snap.value);
  buf_str(b, "\n");
  buf_sample_name(b, m, "_count", s, NULL);
  buf_printf(b, " %llu\n", (unsigned long long)snap.count);
}

fl_status fl_metrics_render(fl_metrics *reg, char **out, size_t *len) {
  static const char *type_names[] = {"counter", "gauge", "histogram"};
  if (!reg) return FL_ERR(FL_EINVAL, "metrics: render of a NULL registry");
  buf b = {0};
  buf_put(&b, "", 0);
  pthread_mutex_lock(&reg->mu);
  for (fl_metric *m = reg->head; m; m = m->next) {
    if (reg->role && m->roles && !(m->roles & reg->role)) continue; /* another role's */
    buf_printf(&b, "# HELP %s ", m->name);
    buf_escaped(&b, m->help, 0);
    buf_printf(&b, "\n# TYPE %s %s\n", m->name, type_names[m->type]);
    pthread_mutex_lock(&m->mu);
    for (fl_series *s = m->series; s; s = s->next) render_series(&b, m, s);
    pthread_mutex_unlock(&m->mu);
  }
  pthread_mutex_unlock(&reg->mu);
  if (b.oom) {
    free(b.p);
    return FL_ERR(FL_ENOMEM, "metrics: out of memory rendering %zu bytes", b.cap * 2);
  }
  *out = b.p;
  *len = b.len;
  return FL_OK;
}

/* ---- the well-known families ---- */

static fl_std_metrics std_metrics;
static pthread_once_t std_once = PTHREAD_ONCE_INIT;

static fl_series *std_plain(fl_metrics *reg, fl_metric_type type, const char *name,
                            const char *help, unsigned roles) {
  fl_metric *m = NULL;
  fl_status st = type == FL_METRIC_COUNTER ? fl_metrics_counter(reg, name, help, NULL, &m)
                 : type == FL_METRIC_GAUGE ? fl_metrics_gauge(reg, name, help, NULL, &m)
                       : fl_metrics_histogram(reg, name, help, NULL, NULL, 0, &m);
  if (st != FL_OK) return NULL;
  m->roles = roles;
  return fl_metric_plain(m);
}

static void std_init(void) {
  fl_metrics *reg = fl_metrics_default();
  if (!reg) return;
  fl_std_metrics *s = &std_metrics;
  if (fl_metrics_gauge(reg, "flotilla_info", "Role, rank and mode of this process (always 1).",
                       "role,rank,mode", &s->info) != FL_OK)
    s->info = NULL;
  s->steps = std_plain(reg, FL_METRIC_COUNTER, "flotilla_steps_total",
                       "Optimizer steps done by this trainer.", ROLE_TRAINER);
  s->samples = std_plain(reg, FL_METRIC_COUNTER, "flotilla_samples_total",
                         "Training samples consumed by this trainer.", ROLE_TRAINER);
  s->samples_per_second = std_plain(reg, FL_METRIC_GAUGE, "flotilla_samples_per_second",
                                    "Training throughput over the last logging interval.",
                                    ROLE_TRAINER);
  s->loss = std_plain(reg, FL_METRIC_GAUGE, "flotilla_loss", "Last training loss.", ROLE_TRAINER);
  s->loss_scale = std_plain(reg, FL_METRIC_GAUGE, "flotilla_loss_scale",
                            "Current AMP dynamic loss scale.", ROLE_TRAINER);
  s->push_seconds = std_plain(reg, FL_METRIC_HISTOGRAM, "flotilla_push_seconds",
                              "Latency of one push to the parameter servers.", ROLE_TRAINER);
  s->pull_seconds = std_plain(reg, FL_METRIC_HISTOGRAM, "flotilla_pull_seconds",
                              "Latency of one pull from the parameter servers.", ROLE_TRAINER);
  s->allreduce_seconds = std_plain(reg, FL_METRIC_HISTOGRAM, "flotilla_allreduce_seconds",
                                   "Latency of one fusion bucket's allreduce.", ROLE_TRAINER);
  s->wait_seconds = std_plain(reg, FL_METRIC_HISTOGRAM, "flotilla_wait_seconds",
                              "Time spent blocked on other ranks (barriers, held pulls).",
                              ROLE_TRAINER);
  s->bytes_sent = std_plain(reg, FL_METRIC_COUNTER, "flotilla_bytes_sent_total",
                            "Payload bytes sent on the wire (gRPC and collective).", 0);
  s->bytes_received = std_plain(reg, FL_METRIC_COUNTER, "flotilla_bytes_received_total",
                                "Payload bytes received from the wire.", 0);
  s->live_trainers = std_plain(reg, FL_METRIC_GAUGE, "flotilla_live_trainers",
                               "Trainers with a recent heartbeat (pserver).", ROLE_PSERVER);
  s->checkpoints = std_plain(reg, FL_METRIC_COUNTER, "flotilla_checkpoints_total",
                             "Checkpoints written by this process.", 0);
  s->pull_wait_share = std_plain(reg, FL_METRIC_GAUGE, "flotilla_pull_wait_share",
                                 "Share of the last step spent waiting for sparse rows.",
                                 ROLE_TRAINER);
  if (fl_metrics_gauge(reg, "flotilla_table_rows", "Rows held in each sparse table (pserver).",
                       "table", &s->table_rows) != FL_OK)
    s->table_rows = NULL;
  else
    s->table_rows->roles = ROLE_PSERVER;
}

const fl_std_metrics *fl_metrics_std(void) {
  pthread_once(&std_once, std_init);
  return &std_metrics;
}

fl_status fl_metrics_std_info(const char *role, int rank, const char *mode) {
  const fl_std_metrics *s = fl_metrics_std();
  char r[16];
  snprintf(r, sizeof r, "%d", rank);
  const char *values[] = {role ? role : "", r, mode ? mode : ""};
  fl_series *ser = NULL;
  FL_TRY(fl_metric_series(s->info, values, &ser));
  fl_series_set(ser, 1);
  /* from now on /metrics shows this role's families only */
  fl_metrics *reg = fl_metrics_default();
  pthread_mutex_lock(&reg->mu);
  reg->role = role && !strcmp(role, "pserver") ? ROLE_PSERVER : ROLE_TRAINER;
  pthread_mutex_unlock(&reg->mu);
  return FL_OK;
}
