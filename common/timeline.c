/* timeline.c - the Chrome-tracing JSON writer (fl_timeline.h).
 *
 * Events go through one stdio buffer under a mutex; the first event line
 * starts without a comma and every later one with ",", so the file is valid
 * JSON as soon as the footer is written.  Names are JSON-escaped.
 * Communication spans (cat "comm") go on a track of their own, named
 * "communication": finished on the thread that also runs backward, they
 * overlapped its B/E spans on one row, which Chrome's viewer mis-nests. */
#include <config.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fl_log.h"
#include "fl_timeline.h"

struct fl_timeline {
  pthread_mutex_t mu;
  FILE *f;
  char *path;
  int rank;
  int nevents;
  int failed; /* a write failed; reported once at close */
  int comm_named; /* the communication track's name was written */
};

#define COMM_TID 1000000000L /* the communication track (no real thread id) */

int64_t fl_timeline_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long thread_id(void) { return (long)syscall(SYS_gettid); }

/* Write s as a JSON string body (without quotes). */
static void put_escaped(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\r': fputs("\\r", f); break;
    case '\t': fputs("\\t", f); break;
    default:
      if (*p < 0x20)
        fprintf(f, "\\u%04x", *p);
      else
        fputc(*p, f);
    }
  }
}

/* Start one event line: separator, then {"ph":..,"pid":..,"tid":..,"ts":..
 * The caller holds the mutex and finishes the object with "}\n". */
static void event_head_tid(fl_timeline *tl, char ph, long tid, int64_t ts) {
  fputs(tl->nevents++ ? "," : " ", tl->f);
  fprintf(tl->f, "{\"ph\":\"%c\",\"pid\":%d,\"tid\":%ld,\"ts\":%lld", ph, tl->rank, tid,
          (long long)ts);
}

static void event_head(fl_timeline *tl, char ph, int64_t ts) {
  event_head_tid(tl, ph, thread_id(), ts);
}

static void put_field(FILE *f, const char *key, const char *value) {
  fprintf(f, ",\"%s\":\"", key);
  put_escaped(f, value ? value : "");
  fputc('"', f);
}

static void event_end(fl_timeline *tl) {
  fputs("}\n", tl->f);
  if (ferror(tl->f)) tl->failed = 1;
}

fl_status fl_timeline_open(const char *path, int rank, const char *process_name,
                           fl_timeline **out) {
  fl_timeline *tl = calloc(1, sizeof *tl);
  if (!tl) return FL_ERR(FL_ENOMEM, "timeline %s: out of memory", path);
  tl->path = strdup(path);
  if (!tl->path) {
    free(tl);
    return FL_ERR(FL_ENOMEM, "timeline %s: out of memory", path);
  }
  tl->f = fopen(path, "w");
  if (!tl->f) {
    int e = errno;
    free(tl->path);
    free(tl);
    return FL_ERR(FL_EIO, "timeline: cannot create %s: %s", path, strerror(e));
  }
  pthread_mutex_init(&tl->mu, NULL);
  tl->rank = rank;
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", tl->f);
  event_head(tl, 'M', 0);
  put_field(tl->f, "name", "process_name");
  fputs(",\"args\":{", tl->f);
  fputs("\"name\":\"", tl->f);
  put_escaped(tl->f, process_name ? process_name : "");
  fputs("\"}", tl->f);
  event_end(tl);
  event_head(tl, 'M', 0);
  put_field(tl->f, "name", "process_sort_index");
  fprintf(tl->f, ",\"args\":{\"sort_index\":%d}", rank);
  event_end(tl);
  *out = tl;
  return FL_OK;
}

void fl_timeline_thread_name(fl_timeline *tl, const char *name) {
  if (!tl) return;
  pthread_mutex_lock(&tl->mu);
  event_head(tl, 'M', 0);
  put_field(tl->f, "name", "thread_name");
  fputs(",\"args\":{\"name\":\"", tl->f);
  put_escaped(tl->f, name ? name : "");
  fputs("\"}", tl->f);
  event_end(tl);
  pthread_mutex_unlock(&tl->mu);
}

static void begin_end(fl_timeline *tl, char ph, const char *cat, const char *name) {
  if (!tl) return;
  int64_t now = fl_timeline_now_us();
  pthread_mutex_lock(&tl->mu);
  event_head(tl, ph, now);
  put_field(tl->f, "cat", cat);
  put_field(tl->f, "name", name);
  event_end(tl);
  pthread_mutex_unlock(&tl->mu);
}

void fl_timeline_begin(fl_timeline *tl, const char *cat, const char *name) {
  begin_end(tl, 'B', cat, name);
}

void fl_timeline_end(fl_timeline *tl, const char *cat, const char *name) {
  begin_end(tl, 'E', cat, name);
}

void fl_timeline_span(fl_timeline *tl, const char *cat, const char *name, int64_t t0_us,
                      int64_t t1_us, const char *arg_name, int64_t arg_value) {
  if (!tl) return;
  int comm = cat && strcmp(cat, "comm") == 0;
  pthread_mutex_lock(&tl->mu);
  if (comm && !tl->comm_named) {
    event_head_tid(tl, 'M', COMM_TID, 0);
    put_field(tl->f, "name", "thread_name");
    fputs(",\"args\":{\"name\":\"communication\"}", tl->f);
    event_end(tl);
    tl->comm_named = 1;
  }
  event_head_tid(tl, 'X', comm ? COMM_TID : thread_id(), t0_us);
  fprintf(tl->f, ",\"dur\":%lld", (long long)(t1_us > t0_us ? t1_us - t0_us : 0));
  put_field(tl->f, "cat", cat);
  put_field(tl->f, "name", name);
  if (arg_name) {
    fputs(",\"args\":{\"", tl->f);
    put_escaped(tl->f, arg_name);
    fprintf(tl->f, "\":%lld}", (long long)arg_value);
  }
  event_end(tl);
  pthread_mutex_unlock(&tl->mu);
}

void fl_timeline_counter(fl_timeline *tl, const char *name, double value) {
  if (!tl) return;
  int64_t now = fl_timeline_now_us();
  pthread_mutex_lock(&tl->mu);
  event_head(tl, 'C', now);
  put_field(tl->f, "name", name);
  /* JSON has no NaN/Inf: such samples are written as null. */
  fputs(",\"args\":{\"value\":", tl->f);
  if (isfinite(value))
    fprintf(tl->f, "%.9g}", value);
  else
    fputs("null}", tl->f);
  event_end(tl);
  pthread_mutex_unlock(&tl->mu);
}

static fl_timeline *_Atomic default_tl;

void fl_timeline_set_default(fl_timeline *tl) { atomic_store(&default_tl, tl); }

fl_timeline *fl_timeline_default(void) { return atomic_load(&default_tl); }

fl_status fl_timeline_close(fl_timeline *tl) {
  if (!tl) return FL_OK;
  fputs("]}\n", tl->f);
  int failed = tl->failed || ferror(tl->f);
  int e = errno;
  if (fclose(tl->f) != 0) {
    failed = 1;
    e = errno;
  }
  fl_status st = FL_OK;
  if (failed) st = FL_ERR(FL_EIO, "timeline: writing %s failed: %s", tl->path, strerror(e));
  pthread_mutex_destroy(&tl->mu);
  free(tl->path);
  free(tl);
  return st;
}
