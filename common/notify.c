/* notify.c - sd_notify wrappers for Type=notify units (fl_notify.h). */
#include <config.h>

#include <stdio.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "fl_log.h"
#include "fl_metrics.h"
#include "fl_notify.h"

/* Send one notification; status lines lose newlines (one line each). */
static fl_status send_state(const char *state, const char *status) {
  char msg[512];
  if (status) {
    char line[400];
    snprintf(line, sizeof line, "%s", status);
    for (char *p = line; *p; p++)
      if (*p == '\n') *p = ' ';
    snprintf(msg, sizeof msg, "%s%sSTATUS=%s", state, *state ? "\n" : "", line);
  } else {
    snprintf(msg, sizeof msg, "%s", state);
  }
  int r = sd_notify(0, msg);
  if (r < 0)
    return FL_ERR(FL_EIO, "sd_notify(%s) to systemd failed: %s", *state ? state : "STATUS",
                  strerror(-r));
  return FL_OK;
}

fl_status fl_notify_ready(const char *status) {
  fl_metrics_set_ready(1); /* /readyz */
  return send_state("READY=1", status);
}

fl_status fl_notify_status(const char *status) { return send_state("", status ? status : ""); }

fl_status fl_notify_stopping(void) { return send_state("STOPPING=1", NULL); }
