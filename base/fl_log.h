/* fl_log.h - leveled logging for the daemons and tools.
 *
 * Lines go to stderr as "2026-11-21T15:52:50.123Z E [trainer 1] message".
 * The bracketed context (role and rank) is set once per process with
 * fl_log_set_context().  The FL_ERR* macros log where an error starts and
 * yield its code, so callers propagate the code without logging again. */
#ifndef FL_LOG_H
#define FL_LOG_H

#include <stdarg.h>
#include "fl_status.h"

typedef enum fl_log_level {
  FL_LOG_DEBUG = 0,
  FL_LOG_INFO = 1,
  FL_LOG_WARN = 2,
  FL_LOG_ERROR = 3,
  FL_LOG_OFF = 4
} fl_log_level;

/* Set the minimum level printed (default INFO, or FLOTILLA_LOG_LEVEL=debug|
 * info|warn|error|off read on first use). */
void fl_log_set_level(fl_log_level level);
fl_log_level fl_log_get_level(void);

/* Set the context printed in brackets on every line, e.g. "pserver 0".
 * The string is copied (at most 63 bytes). NULL clears it. */
void fl_log_set_context(const char *ctx);

/* printf-style log line. Thread-safe: each line is written with one write(2). */
void fl_log(fl_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void fl_vlog(fl_log_level level, const char *fmt, va_list ap);

#define FL_LOGD(...) fl_log(FL_LOG_DEBUG, __VA_ARGS__)
#define FL_LOGI(...) fl_log(FL_LOG_INFO, __VA_ARGS__)
#define FL_LOGW(...) fl_log(FL_LOG_WARN, __VA_ARGS__)
#define FL_LOGE(...) fl_log(FL_LOG_ERROR, __VA_ARGS__)

/* Log an error once, where it starts, and evaluate to the status code:
 *   return FL_ERR(FL_EINVAL, "param %s: length %zu != %zu", name, a, b);  */
#define FL_ERR(code, ...) (fl_log(FL_LOG_ERROR, __VA_ARGS__), (code))

/* Propagate a non-OK status without logging again (it was logged at source). */
#define FL_TRY(expr)                                                         \
  do {                                                                       \
    int fl_try_st_ = (expr);                                                 \
    if (fl_try_st_ != FL_OK) return fl_try_st_;                              \
  } while (0)

#endif
