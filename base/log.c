/* log.c - the one place Flotilla writes diagnostics (see fl_log.h). */
#include <config.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "fl_log.h"

static fl_log_level g_level = FL_LOG_INFO;
static int g_level_set;
static char g_ctx[64];
static pthread_mutex_t g_ctx_lock = PTHREAD_MUTEX_INITIALIZER;

static void level_from_env(void) {
  const char *e = getenv("FLOTILLA_LOG_LEVEL");
  if (!e) return;
  if (!strcasecmp(e, "debug")) g_level = FL_LOG_DEBUG;
  else if (!strcasecmp(e, "info")) g_level = FL_LOG_INFO;
  else if (!strcasecmp(e, "warn")) g_level = FL_LOG_WARN;
  else if (!strcasecmp(e, "error")) g_level = FL_LOG_ERROR;
  else if (!strcasecmp(e, "off")) g_level = FL_LOG_OFF;
}

void fl_log_set_level(fl_log_level level) {
  g_level = level;
  g_level_set = 1;
}

fl_log_level fl_log_get_level(void) {
  if (!g_level_set) {
    level_from_env();
    g_level_set = 1;
  }
  return g_level;
}

void fl_log_set_context(const char *ctx) {
  pthread_mutex_lock(&g_ctx_lock);
  if (ctx) snprintf(g_ctx, sizeof g_ctx, "%s", ctx);
  else g_ctx[0] = '\0';
  pthread_mutex_unlock(&g_ctx_lock);
}

void fl_vlog(fl_log_level level, const char *fmt, va_list ap) {
  static const char tag[] = "DIWE";
  char line[2048];
  struct timespec ts;
  struct tm tm;
  size_t off;
  int n;

  if (level < fl_log_get_level() || level >= FL_LOG_OFF) return;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  off = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
  pthread_mutex_lock(&g_ctx_lock);
  n = snprintf(line + off, sizeof line - off, ".%03ldZ %c %s%s%s", ts.tv_nsec / 1000000L,
               tag[level], g_ctx[0] ? "[" : "", g_ctx, g_ctx[0] ? "] " : "");
  pthread_mutex_unlock(&g_ctx_lock);
  if (n > 0) off += (size_t)n;
  if (off < sizeof line) {
    n = vsnprintf(line + off, sizeof line - off, fmt, ap);
    if (n > 0) off += (size_t)n;
  }
  if (off > sizeof line - 2) off = sizeof line - 2;
  line[off++] = '\n';
  if (write(STDERR_FILENO, line, off) < 0) { /* nowhere left to report it */ }
}

void fl_log(fl_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fl_vlog(level, fmt, ap);
  va_end(ap);
}
