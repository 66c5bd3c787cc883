/* run_failure.c - why a job failed, as flotilla-run tells it
 * (run_internal.h).  The supervisor records every process's end in the
 * order it reaped them; at the end this names the first process that
 * failed on its own (a non-zero exit, or a signal flotilla-run did not
 * send), the first error line of its last output, its last lines, and
 * what became of the others: stopped by flotilla-run's teardown, failed
 * because of it (their error line names it), also failed, or finished.
 *
 * The first end reaped is not always the cause: when rank 1 aborts, rank 0
 * is told at once and may exit while rank 1 is still closing down.  Its
 * error line then names rank 1 ("rank 1 (host:port) aborted: ..."), and
 * rank 1, which ended badly too and blames nobody back, is named instead. */
#include <config.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_log.h"
#include "run_internal.h"

/* Bytes of a log read from its end, and the lines searched for the cause. */
#define SCAN_BYTES 65536
#define CAUSE_LINES 40
#define CAUSE_MAX 512

struct fl_run_report {
  fl_run_exit *ex;
  size_t n, cap;
};

/* What a log line may name, and as which role. */
static const struct {
  const char *word;
  fl_run_role role;
} k_blame_words[] = {{"rank ", FL_RUN_TRAINER}, {"pserver ", FL_RUN_PSERVER}};

fl_run_end fl_run_exit_kind(const fl_run_exit *e) {
  int ours = (e->signal == SIGTERM && (e->sent & FL_RUN_SENT_TERM)) ||
             (e->signal == SIGKILL && (e->sent & FL_RUN_SENT_KILL));
  if (e->signal && !ours) return FL_RUN_END_FAILED;
  if (e->sent) return FL_RUN_END_STOPPED;
  return e->status == 0 && !e->signal ? FL_RUN_END_OK : FL_RUN_END_FAILED;
}

int fl_run_log_is_error(const char *line) {
  const char *p = line;
  if (*p >= '0' && *p <= '9') { /* a timestamp first */
    p = strchr(p, ' ');
    if (!p || p[-1] != 'Z') return 0;
    p++;
  }
  return p[0] == 'E' && p[1] == ' ';
}

static int is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The first "WORD N (" in line as a whole word: its place, N in *id. */
static const char *find_named(const char *line, const char *word, int *id) {
  size_t wl = strlen(word);
  for (const char *p = strstr(line, word); p; p = strstr(p + 1, word)) {
    if (p > line && is_word(p[-1])) continue;
    char *end;
    long v = strtol(p + wl, &end, 10);
    if (end == p + wl || p[wl] < '0' || p[wl] > '9' || strncmp(end, " (", 2) || v > 1 << 20)
      continue;
    *id = (int)v;
    return p;
  }
  return NULL;
}

int fl_run_log_blames(const char *line, fl_run_role *role, int *id) {
  const char *best = NULL;
  for (size_t i = 0; i < sizeof k_blame_words / sizeof k_blame_words[0]; i++) {
    int v;
    const char *p = find_named(line, k_blame_words[i].word, &v);
    if (p && (!best || p < best)) {
      best = p;
      *role = k_blame_words[i].role;
      *id = v;
    }
  }
  return best != NULL;
}

/* The last bytes of path's [from, to), NUL-terminated, in a malloc'd
 * buffer (*len bytes); NULL when unreadable or empty. */
static char *read_segment(const char *path, int64_t from, int64_t to, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  off_t size = lseek(fd, 0, SEEK_END);
  if (to < 0 || to > (int64_t)size) to = (int64_t)size;
  if (from < to - SCAN_BYTES) from = to - SCAN_BYTES;
  char *buf = from < to ? malloc((size_t)(to - from) + 1) : NULL;
  ssize_t n = buf ? pread(fd, buf, (size_t)(to - from), (off_t)from) : -1;
  close(fd);
  if (n <= 0) {
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = (size_t)n;
  return buf;
}

/* Where the last k lines of buf[0..len) start. */
static const char *last_lines(const char *buf, size_t len, int k) {
  const char *p = buf + len;
  if (p > buf && p[-1] == '\n') p--;
  int lines = 0;
  while (p > buf) {
    if (p[-1] == '\n' && ++lines == k) break;
    p--;
  }
  return p;
}

int fl_run_log_cause(const char *path, int64_t from, int64_t to, char *cause, size_t cap) {
  size_t len;
  char *buf = read_segment(path, from, to, &len);
  if (!buf) return 0;
  int found = 0;
  for (char *p = (char *)last_lines(buf, len, CAUSE_LINES); *p && !found;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = '\0';
    if (fl_run_log_is_error(p)) {
      snprintf(cause, cap, "%s", p);
      found = 1;
    }
    p = nl ? nl + 1 : p + strlen(p);
  }
  free(buf);
  return found;
}

/* ---- the record ---- */

fl_status fl_run_report_new(fl_run_report **out) {
  *out = calloc(1, sizeof **out);
  return *out ? FL_OK : FL_ERR(FL_ENOMEM, "flotilla-run: out of memory for the exit record");
}

void fl_run_report_free(fl_run_report *r) {
  if (!r) return;
  free(r->ex);
  free(r);
}

fl_status fl_run_report_add(fl_run_report *r, const fl_run_exit *e) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 64;
    fl_run_exit *ex = realloc(r->ex, cap * sizeof *ex);
    if (!ex) return FL_ERR(FL_ENOMEM, "flotilla-run: out of memory recording %zu exits", cap);
    r->ex = ex;
    r->cap = cap;
  }
  r->ex[r->n++] = *e;
  return FL_OK;
}

static int same_proc(const fl_run_exit *a, const fl_run_exit *b) {
  return a->role == b->role && a->id == b->id;
}

/* The error line of one end (from its start's output only), and whom it
 * blames (-1: nobody, or itself). */
typedef struct end_info {
  int has_cause;
  char cause[CAUSE_MAX];
  fl_run_role blamed_role;
  int blamed_id;
} end_info;

static void analyse(const fl_run_report *r, const fl_run_exit *e, end_info *out) {
  int64_t to = -1; /* up to the next start of the same process */
  for (size_t i = 0; i < r->n; i++)
    if (same_proc(&r->ex[i], e) && r->ex[i].log_from > e->log_from &&
        (to < 0 || r->ex[i].log_from < to))
      to = r->ex[i].log_from;
  out->has_cause = fl_run_log_cause(e->log_path, e->log_from, to, out->cause, sizeof out->cause);
  out->blamed_id = -1;
  if (out->has_cause && fl_run_log_blames(out->cause, &out->blamed_role, &out->blamed_id) &&
      out->blamed_role == e->role && out->blamed_id == e->id)
    out->blamed_id = -1;
}

static int blames(const end_info *in, const fl_run_exit *who) {
  return in->blamed_id >= 0 && in->blamed_role == who->role && in->blamed_id == who->id;
}

/* The end of role/id in attempt a, or NULL. */
static const fl_run_exit *find_end(const fl_run_report *r, int a, fl_run_role role, int id) {
  for (size_t i = 0; i < r->n; i++)
    if (r->ex[i].attempt == a && r->ex[i].role == role && r->ex[i].id == id) return &r->ex[i];
  return NULL;
}

const fl_run_exit *fl_run_report_cause(const fl_run_report *r, int a) {
  const fl_run_exit *cur = NULL;
  for (size_t i = 0; i < r->n && !cur; i++)
    if (r->ex[i].attempt == a && fl_run_exit_kind(&r->ex[i]) == FL_RUN_END_FAILED) cur = &r->ex[i];
  /* Follow the blame while it leads to an end that went wrong and does
   * not point back; a chain is at most as long as the record. */
  for (size_t hops = 0; cur && hops < r->n; hops++) {
    end_info in, next_in;
    analyse(r, cur, &in);
    if (in.blamed_id < 0) break;
    const fl_run_exit *next = find_end(r, a, in.blamed_role, in.blamed_id);
    if (!next || (next->status == 0 && !next->signal)) break;
    analyse(r, next, &next_in);
    if (next_in.blamed_id >= 0) break;
    cur = next;
  }
  return cur;
}

/* ---- printing ---- */

static const char *role_word(fl_run_role role) {
  return role == FL_RUN_TRAINER ? "trainer" : "pserver";
}

/* "exited with status 3" / "was killed by signal 9 (Killed), not sent by flotilla-run" */
static void describe(const fl_run_exit *e, char *out, size_t cap) {
  if (!e->signal) {
    snprintf(out, cap, "exited with status %lld", (long long)e->status);
    return;
  }
  int ours = fl_run_exit_kind(e) != FL_RUN_END_FAILED;
  snprintf(out, cap, "was killed by signal %d (%s)%s", e->signal, strsignal(e->signal),
           ours ? ""
           : e->signal == SIGKILL ? ", not sent by flotilla-run (the OOM killer? see dmesg)"
                                  : ", not sent by flotilla-run");
}

static void print_tail(const fl_run_exit *e, int tail_lines, FILE *out) {
  size_t len;
  char *buf = read_segment(e->log_path, e->log_from, -1, &len);
  if (!buf) return;
  fprintf(out, "----- last lines of %s -----\n%s", e->log_path, last_lines(buf, len, tail_lines));
  if (buf[len - 1] != '\n') fputc('\n', out);
  fprintf(out, "----- end of %s -----\n", e->log_path);
  free(buf);
}

/* One line about another process of the attempt whose cause is c. */
static void print_other(const fl_run_report *r, const fl_run_exit *e, const fl_run_exit *c,
                        FILE *out) {
  end_info in;
  char how[160];
  describe(e, how, sizeof how);
  analyse(r, e, &in);
  fl_run_end kind = fl_run_exit_kind(e);
  const char *what = kind == FL_RUN_END_OK ? "finished"
                     : kind == FL_RUN_END_STOPPED
                         ? (e->sent & FL_RUN_SENT_KILL ? "stopped by flotilla-run (SIGTERM, then "
                                                         "SIGKILL after --grace)"
                                                       : "stopped by flotilla-run (SIGTERM)")
                     : blames(&in, c) ? "failed because of it"
                                      : "also failed";
  int cause = kind == FL_RUN_END_FAILED && in.has_cause;
  fprintf(out, "flotilla-run:   %s %d (pid %ld): %s; ended at +%.3f s, %s%s%s\n",
          role_word(e->role), e->id, e->pid, what, e->t, how, cause ? ": " : "",
          cause ? in.cause : "");
}

/* The first failure's own lines: who, how, its error, and a note when an
 * end reaped before it pointed at it. */
static void print_cause(const fl_run_report *r, const fl_run_exit *c, int tail_lines, FILE *out) {
  end_info in;
  char how[160];
  describe(c, how, sizeof how);
  analyse(r, c, &in);
  fprintf(out, "flotilla-run: first failure: %s %d (pid %ld) %s at +%.3f s", role_word(c->role),
          c->id, c->pid, how, c->t);
  if (c->attempt) fprintf(out, " (after restart %d)", c->attempt);
  fputc('\n', out);
  if (in.has_cause)
    fprintf(out, "flotilla-run: its error: %s\n", in.cause);
  else
    fprintf(out, "flotilla-run: no error line in its last %d lines: see them below\n",
            CAUSE_LINES);
  if (in.blamed_id >= 0 && !find_end(r, c->attempt, in.blamed_role, in.blamed_id))
    fprintf(out, "flotilla-run: it names %s %d, which is not on this node: see that node's "
            "flotilla-run and log\n", role_word(in.blamed_role), in.blamed_id);
  print_tail(c, tail_lines, out);
}

void fl_run_report_print(const fl_run_report *r, int a, int tail_lines, FILE *out) {
  const fl_run_exit *c = fl_run_report_cause(r, a);
  if (!c) return;
  print_cause(r, c, tail_lines, out);
  int header = 0;
  for (size_t i = 0; i < r->n; i++) {
    const fl_run_exit *e = &r->ex[i];
    if (e->attempt != a || e == c) continue;
    if (!header++)
      fprintf(out, "flotilla-run: the others, in the order they ended (%s %d first failed):\n",
              role_word(c->role), c->id);
    print_other(r, e, c, out);
  }
}

void fl_run_report_print_attempts(const fl_run_report *r, int a, FILE *out) {
  for (int k = 0; k < a; k++) {
    const fl_run_exit *c = fl_run_report_cause(r, k);
    if (!c) continue;
    end_info in;
    char how[160];
    describe(c, how, sizeof how);
    analyse(r, c, &in);
    char when[32] = "first start";
    if (k) snprintf(when, sizeof when, "after restart %d", k);
    fprintf(out, "flotilla-run: %s: %s %d (pid %ld) %s at +%.3f s%s%s; restarted\n", when,
            role_word(c->role), c->id, c->pid, how, c->t, in.has_cause ? ": " : "",
            in.has_cause ? in.cause : "");
  }
}
