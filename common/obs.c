/* obs.c - the three-call observability of a daemon (fl_obs.h). */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fl_log.h"
#include "fl_metrics.h"
#include "fl_obs.h"
#include "fl_timeline.h"

/* Throughput is measured over windows of at least this many seconds. */
#define RATE_WINDOW_S 2.0

struct fl_obs {
  fl_metrics_server *srv;
  fl_timeline *tl;
  double win_start;
  int64_t win_samples;
};

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

fl_status fl_obs_start(const char *role, int rank, const char *mode, const char *metrics_addr,
                       const char *timeline_path, fl_obs **out) {
  fl_obs *o = calloc(1, sizeof *o);
  fl_status st;
  if (!o) return FL_ERR(FL_ENOMEM, "observability: out of memory");
  o->win_start = mono_s();
  if ((st = fl_metrics_std_info(role, rank, mode)) != FL_OK) goto fail;
  if (metrics_addr && *metrics_addr) {
    fl_metrics *reg = fl_metrics_default();
    if (!reg) {
      st = FL_ERR(FL_ENOMEM, "observability: no metrics registry");
      goto fail;
    }
    if ((st = fl_metrics_serve(reg, metrics_addr, &o->srv)) != FL_OK) goto fail;
    FL_LOGI("metrics: %s, port %d, path /metrics", metrics_addr, fl_metrics_server_port(o->srv));
  }
  if (timeline_path && *timeline_path) {
    char name[64];
    snprintf(name, sizeof name, "%s %d", role, rank);
    if ((st = fl_timeline_open(timeline_path, rank, name, &o->tl)) != FL_OK) goto fail;
    fl_timeline_thread_name(o->tl, "main");
    fl_timeline_set_default(o->tl);
  }
  *out = o;
  return FL_OK;
fail:
  fl_metrics_server_stop(o->srv);
  free(o);
  return st;
}

void fl_obs_step(fl_obs *o, double loss, double loss_scale, int64_t samples) {
  const fl_std_metrics *m = fl_metrics_std();
  fl_series_add(m->steps, 1);
  fl_series_add(m->samples, (double)samples);
  fl_series_set(m->loss, loss);
  fl_series_set(m->loss_scale, loss_scale);
  fl_timeline_counter(fl_timeline_default(), "loss", loss);
  if (!o) return;
  o->win_samples += samples;
  double now = mono_s();
  if (now - o->win_start >= RATE_WINDOW_S) {
    fl_series_set(m->samples_per_second, (double)o->win_samples / (now - o->win_start));
    o->win_start = now;
    o->win_samples = 0;
  }
}

int fl_obs_metrics_port(const fl_obs *o) { return o ? fl_metrics_server_port(o->srv) : 0; }

fl_status fl_obs_stop(fl_obs *o) {
  if (!o) return FL_OK;
  fl_metrics_server_stop(o->srv);
  fl_timeline_set_default(NULL);
  fl_status st = fl_timeline_close(o->tl);
  free(o);
  return st;
}
