/* fl_metrics.h - Prometheus metrics for the daemons: a registry of
 * counters, gauges and histograms with labels, rendered in the Prometheus
 * text exposition format (version 0.0.4) and served over HTTP on
 * --metrics_addr with libmicrohttpd.
 *
 * Why a registry of our own: the daemons are plain C and need a handful of
 * families (steps, throughput, loss, push/pull/allreduce latency, bytes on
 * the wire, loss scale, live trainers, table rows); a small thread-safe
 * registry keeps the hot path to one mutex-protected add per event.
 *
 * Model: a *family* (fl_metric) has a name, help text, a type and a fixed
 * list of label names; a *series* (fl_series) is one combination of label
 * values.  Series pointers are stable until the registry is destroyed, so
 * code looks a series up once and updates it afterwards without searching.
 * Every update function accepts NULL and then does nothing, so code may be
 * instrumented unconditionally.
 *
 * fl_metrics_std() gives the well-known Flotilla families, registered on the
 * process-wide default registry on first use, so any module can update them
 * without plumbing a pointer through. */
#ifndef FL_METRICS_H
#define FL_METRICS_H

#include <stddef.h>

#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_metrics fl_metrics;               /* a registry */
typedef struct fl_metric fl_metric;                 /* a family */
typedef struct fl_series fl_series;                 /* one labelled child */
typedef struct fl_metrics_server fl_metrics_server; /* the HTTP endpoint */

typedef enum fl_metric_type {
  FL_METRIC_COUNTER = 0,
  FL_METRIC_GAUGE = 1,
  FL_METRIC_HISTOGRAM = 2
} fl_metric_type;

/* Most label names a family may have. */
#define FL_METRICS_MAX_LABELS 4
/* Most finite bucket bounds a histogram may have (+Inf is implicit). */
#define FL_METRICS_MAX_BUCKETS 32

/* A new empty registry in *out; the caller owns it (fl_metrics_destroy). */
fl_status fl_metrics_create(fl_metrics **out);

/* Free a registry with all its families and series.  No server may still
 * serve it (stop the server first).  NULL is accepted. */
void fl_metrics_destroy(fl_metrics *reg);

/* The process-wide registry, created on first use and alive until exit;
 * never free it.  Returns NULL only when its creation ran out of memory. */
fl_metrics *fl_metrics_default(void);

/* Register a family.  name must match [a-zA-Z_:][a-zA-Z0-9_:]*; labels is a
 * comma-separated list of label names ("op,peer") or NULL/"" for none.
 * Histograms take their finite upper bounds, strictly increasing (NULL and
 * 0 for the default latency buckets, 100 us .. 10 s).  Registering the same
 * name again with the same type and labels returns the existing family;
 * anything else with that name is FL_EINVAL.  The registry owns *out. */
fl_status fl_metrics_counter(fl_metrics *reg, const char *name, const char *help,
                             const char *labels, fl_metric **out);
fl_status fl_metrics_gauge(fl_metrics *reg, const char *name, const char *help,
                           const char *labels, fl_metric **out);
fl_status fl_metrics_histogram(fl_metrics *reg, const char *name, const char *help,
                               const char *labels, const double *bounds,
                               size_t nbounds, fl_metric **out);

/* The series of a family for the given label values (one per label name,
 * in order; any UTF-8 text, escaped on output), created at zero on first
 * use.  The registry owns *out; the pointer stays valid until
 * fl_metrics_destroy.  FL_EINVAL when m is NULL or a value is NULL. */
fl_status fl_metric_series(fl_metric *m, const char *const *values, fl_series **out);

/* The label-less series of a family without labels; NULL when m is NULL,
 * has labels, or memory ran out. */
fl_series *fl_metric_plain(fl_metric *m);

/* Updates.  All accept NULL and do nothing then.
 * fl_series_add: counters (v >= 0; a negative v is ignored, counters only
 * go up) and gauges (any sign).  fl_series_set: gauges only.
 * fl_series_observe: histograms only.  Calls on the wrong type are ignored. */
void fl_series_add(fl_series *s, double v);
void fl_series_set(fl_series *s, double v);
void fl_series_observe(fl_series *s, double v);

/* Current value of a counter or gauge, or the sum of a histogram's
 * observations; *count (when not NULL) receives a histogram's count.
 * 0 for NULL. */
double fl_series_value(fl_series *s, double *count);

/* Render the whole registry as Prometheus text into a new NUL-terminated
 * buffer *out (length *len without the NUL); the caller frees *out. */
fl_status fl_metrics_render(fl_metrics *reg, char **out, size_t *len);

/* Serve GET /metrics for reg on addr, "host:port" or "[v6addr]:port"
 * (port 0 picks a free port; fl_metrics_server_port tells which).  Binds
 * only that address.  Runs on its own thread.  The caller owns *out and
 * must stop it before destroying reg. */
fl_status fl_metrics_serve(fl_metrics *reg, const char *addr, fl_metrics_server **out);
/* The port the server is bound to. */
int fl_metrics_server_port(const fl_metrics_server *srv);
/* Stop serving and free the server.  NULL is accepted. */
void fl_metrics_server_stop(fl_metrics_server *srv);

/* What /readyz answers (200 once set, 503 before); process-wide.
 * fl_notify_ready sets it. */
void fl_metrics_set_ready(int ready);

/* The well-known Flotilla metrics, registered on fl_metrics_default().
 * Names (all prefixed flotilla_):
 *   info{role,rank,mode}               gauge 1, set by fl_metrics_std_info
 *   steps_total                        optimizer steps done (trainer)
 *   samples_total                      training samples consumed (trainer)
 *   samples_per_second                 last measured throughput (trainer)
 *   loss                               last training loss (trainer)
 *   loss_scale                         current AMP loss scale (trainer)
 *   push_seconds, pull_seconds         PS client call latency (histograms)
 *   allreduce_seconds                  one fusion bucket's allreduce
 *   wait_seconds                       time blocked on peers (barrier,
 *                                      sync-mode pull held by the server)
 *   bytes_sent_total, bytes_received_total   payload bytes on the wire
 *   live_trainers                      trainers with a recent heartbeat
 *                                      (pserver)
 *   table_rows{table}                  rows of each sparse table (pserver)
 *   checkpoints_total                  checkpoints written
 *   pull_wait_share                    last step's time blocked waiting for
 *                                      sparse rows / its time (trainer)
 * The pointers in the struct are NULL when registration ran out of memory
 * (updates then do nothing).  The struct lives until exit. */
typedef struct fl_std_metrics {
  fl_series *steps;
  fl_series *samples;
  fl_series *samples_per_second;
  fl_series *loss;
  fl_series *loss_scale;
  fl_series *push_seconds;
  fl_series *pull_seconds;
  fl_series *allreduce_seconds;
  fl_series *wait_seconds;
  fl_series *bytes_sent;
  fl_series *bytes_received;
  fl_series *live_trainers;
  fl_series *checkpoints;
  fl_series *pull_wait_share;
  fl_metric *table_rows; /* one series per table: fl_metric_series(.., {name}) */
  fl_metric *info;
} fl_std_metrics;

/* The well-known families (see above); never NULL. */
const fl_std_metrics *fl_metrics_std(void);

/* Set flotilla_info{role,rank,mode} = 1 for this process (role "trainer"
 * or "pserver", rank its id, mode "collective", "ps-sync", ...).  From then
 * on the default registry renders only the well-known families of that
 * role (a pserver has no flotilla_steps_total, a trainer no
 * flotilla_live_trainers); the others' and every family made elsewhere
 * still show. */
fl_status fl_metrics_std_info(const char *role, int rank, const char *mode);

#ifdef __cplusplus
}
#endif
#endif
