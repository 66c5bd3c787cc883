/* fl_obs.h - a daemon's observability in three calls: the /metrics
 * endpoint (--metrics_addr), the Chrome-tracing timeline (--timeline) and
 * the per-step figures of the well-known metrics (fl_metrics.h), so that a
 * main() needs one call at start, one per step and one at the end.
 *
 * fl_obs_start sets flotilla_info{role,rank,mode}, serves the default
 * registry on metrics_addr when one is given, and opens the timeline and
 * makes it the process default (fl_timeline_default) when a path is given;
 * modules without a handle (collective buckets, PS client, model) trace
 * through that default. */
#ifndef FL_OBS_H
#define FL_OBS_H

#include <stdint.h>

#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_obs fl_obs;

/* Start what was asked for: metrics_addr "host:port" (NULL or "" = no
 * endpoint), timeline_path (NULL or "" = no timeline; the file's process
 * row is named "<role> <rank>").  The caller owns *out and ends it with
 * fl_obs_stop.  FL_EINVAL / FL_EIO (logged) when the address cannot be
 * served or the file created. */
fl_status fl_obs_start(const char *role, int rank, const char *mode, const char *metrics_addr,
                       const char *timeline_path, fl_obs **out);

/* One optimizer step done: steps_total += 1, samples_total += samples,
 * loss and loss_scale set, samples_per_second measured over the last few
 * seconds.  NULL o is accepted (figures still go to the registry). */
void fl_obs_step(fl_obs *o, double loss, double loss_scale, int64_t samples);

/* The port /metrics is served on (useful with port 0), 0 when none. */
int fl_obs_metrics_port(const fl_obs *o);

/* Stop serving, clear the default timeline and close it.  Returns the
 * timeline's close status (FL_EIO when writing it failed).  NULL accepted. */
fl_status fl_obs_stop(fl_obs *o);

#ifdef __cplusplus
}
#endif
#endif
