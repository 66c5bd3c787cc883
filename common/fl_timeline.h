/* fl_timeline.h - a Chrome-tracing (about://tracing, Perfetto) JSON writer,
 * one file per rank, for --timeline FILE.
 *
 * A trainer records when forward, backward, each fusion bucket's allreduce,
 * each push, pull and wait begin and end.  Loaded side by side (or merged
 * by flotilla-run into one file), the ranks' rows show which one is late:
 * the straggler's backward ends last and everyone else's allreduce waits.
 *
 * Format: {"displayTimeUnit":"ms","traceEvents":[ ...one event per line... ]}
 * with "pid" = rank, "tid" = the kernel thread id, "ts" in microseconds of
 * CLOCK_REALTIME (so that the ranks of one machine share a clock).  Each
 * event is on a line of its own, so files can be merged line by line.
 *
 * Every call accepts a NULL timeline and then does nothing, so code is
 * instrumented unconditionally and costs one branch when tracing is off.
 * Calls are thread-safe (one mutex around the buffered file). */
#ifndef FL_TIMELINE_H
#define FL_TIMELINE_H

#include <stdint.h>

#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_timeline fl_timeline;

/* Create (truncate) path and write the header plus a process_name record
 * ("trainer 0").  The caller owns *out and ends it with fl_timeline_close. */
fl_status fl_timeline_open(const char *path, int rank, const char *process_name,
                           fl_timeline **out);

/* Name the calling thread's row ("main", "comm", "reader"). */
void fl_timeline_thread_name(fl_timeline *tl, const char *name);

/* Microseconds since the epoch (CLOCK_REALTIME), the clock of "ts". */
int64_t fl_timeline_now_us(void);

/* Begin / end a span on the calling thread's row ("B" and "E" events);
 * spans nest.  cat groups events ("compute", "comm", "ps"); name and cat
 * are copied. */
void fl_timeline_begin(fl_timeline *tl, const char *cat, const char *name);
void fl_timeline_end(fl_timeline *tl, const char *cat, const char *name);

/* A finished span from t0_us to t1_us ("X" event) on the calling thread's
 * row - or, for cat "comm", on the "communication" track of its own, so
 * that it never interleaves with the compute spans of the thread that
 * finished it - for work whose start was noted elsewhere (e.g. an
 * allreduce bucket completed on the comm thread).  arg_name, when not
 * NULL, adds one integer argument (e.g. "bytes"). */
void fl_timeline_span(fl_timeline *tl, const char *cat, const char *name, int64_t t0_us,
                      int64_t t1_us, const char *arg_name, int64_t arg_value);

/* A counter sample ("C" event), drawn as a graph (loss, loss scale). */
void fl_timeline_counter(fl_timeline *tl, const char *name, double value);

/* The process's timeline, for modules that are not handed one (the
 * collective buckets, the PS client): main sets it once after
 * fl_timeline_open (--timeline) and clears it (NULL) before closing it.
 * fl_timeline_default() is NULL while tracing is off, which every call
 * above accepts. */
void fl_timeline_set_default(fl_timeline *tl);
fl_timeline *fl_timeline_default(void);

/* Write the footer, close the file and free tl.  FL_EIO when any write
 * failed (logged once, with the path).  NULL is accepted. */
fl_status fl_timeline_close(fl_timeline *tl);

#ifdef __cplusplus
}
#endif
#endif
