/* fl_notify.h - tell systemd how a daemon is doing (sd_notify).
 *
 * The units in deploy/systemd are Type=notify: systemd considers a daemon
 * started only once it reports READY=1, i.e. after it has bound its ports
 * and loaded its checkpoint, so that dependent units and `systemctl start`
 * wait for a daemon that can actually serve.  Outside systemd
 * (NOTIFY_SOCKET unset) every call does nothing and returns FL_OK. */
#ifndef FL_NOTIFY_H
#define FL_NOTIFY_H

#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Report READY=1 (call once, when the daemon serves) with an optional
 * one-line status (NULL for none).  FL_EIO when the notification socket
 * exists but the message cannot be sent (logged). */
fl_status fl_notify_ready(const char *status);

/* Report a free-form status line shown by `systemctl status`. */
fl_status fl_notify_status(const char *status);

/* Report STOPPING=1 when an orderly shutdown begins (final checkpoint). */
fl_status fl_notify_stopping(void);

#ifdef __cplusplus
}
#endif
#endif
