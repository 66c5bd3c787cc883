/* run_progress.c - what flotilla-run tells a person about a running job:
 * rank 0's "[Epoch e, batch b/T] loss: ..." lines become a progress line
 * (epoch, step/total, samples/s, ETA, loss, accuracy or auc, the last
 * test's and validation's), and at the end a CSV
 * of every record and a PNG curve drawn by gnuplot (run_internal.h).
 *
 * Throughput is measured here, from the time each line reaches
 * flotilla-run and the number of batches between two lines, times the
 * global batch (batch_size x trainers), so it is the whole job's rate
 * whatever the trainer prints.  It is smoothed with an exponential moving
 * average, measured over at least half a second (lines that arrive in one
 * burst say nothing about speed), and not across an evaluation. */
#include <config.h>

#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "fl_log.h"
#include "run_internal.h"

extern char **environ;

/* Shortest time over which a throughput is measured, in seconds. */
#define MIN_RATE_INTERVAL 0.5

typedef struct row {
  int test; /* an evaluation: test or (val) validation */
  int val;
  double t;
  int epoch;
  int64_t batch, global;
  double sps, loss, acc, auc;
} row;

struct fl_run_progress {
  int epochs;
  double samples_per_batch;
  row *rows;
  size_t n, cap;
  double t0;
  int64_t batches_per_epoch; /* printed T, or learned from finished epochs, -1 */
  int64_t done_before;       /* batches of the epochs before cur_epoch */
  int cur_epoch;
  int64_t cur_max;           /* highest batch index seen in cur_epoch */
  double ref_t;              /* last training record, for the rate */
  int64_t ref_global;
  int have_ref;
  double rate;               /* smoothed samples/s, 0 = unknown */
  int have_test, have_val;
  row last_test, last_val;
  int ended; /* epoch + 1 of the last "[Epoch e] train:" line, 0 = none */
  int64_t k; /* micro-batches per optimizer step (the plan's), 1 before it */
};

/* ---- parsing ---- */

static int is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The number after "key:" or "key=" (key a whole word) in s, or NAN. */
static double find_num(const char *s, const char *key) {
  size_t kl = strlen(key);
  for (const char *p = strstr(s, key); p; p = strstr(p + 1, key)) {
    if (p > s && is_word(p[-1])) continue;
    const char *q = p + kl;
    if (*q != ':' && *q != '=') continue;
    q++;
    char *end;
    double v = strtod(q, &end);
    if (end != q) return v;
  }
  return NAN;
}

static const char *skip_sp(const char *p) {
  while (*p == ' ') p++;
  return p;
}

static int starts_test(const char *p) {
  return strncmp(p, "test", 4) == 0 || strncmp(p, "eval", 4) == 0;
}

static int starts_val(const char *p) { return strncmp(p, "val ", 4) == 0; }

/* "training <model>: E epochs of S steps (K x B samples" */
static int parse_plan(const char *line, fl_run_record *r) {
  const char *p = strstr(line, "training ");
  if (!p) return 0;
  p = strstr(p, ": ");
  if (!p) return 0;
  long long e, s, k;
  int used = 0;
  if (sscanf(p, ": %lld epochs of %lld steps (%lld x%n", &e, &s, &k, &used) != 3 || used == 0 ||
      e < 0 || s < 0 || k < 1)
    return 0;
  *r = (fl_run_record){.kind = FL_RUN_REC_PLAN, .epoch = (int)e, .batch = k,
                       .batches = s * k, .loss = NAN, .acc = NAN, .auc = NAN};
  return 1;
}

int fl_run_parse_line(const char *line, fl_run_record *r) {
  const char *p = strstr(line, "[Epoch ");
  if (!p) return parse_plan(line, r);
  p += 7;
  char *end;
  long epoch = strtol(p, &end, 10);
  if (end == p || epoch < 0) return 0;
  p = end;
  fl_run_record rec = {.kind = FL_RUN_REC_TRAIN, .epoch = (int)epoch, .batch = -1,
                       .batches = -1, .loss = NAN, .acc = NAN, .auc = NAN};
  if (*p == ',') {
    p = skip_sp(p + 1);
    if (starts_test(p)) {
      rec.kind = FL_RUN_REC_TEST;
      p = strchr(p, ']');
      if (!p) return 0;
    } else {
      if (strncmp(p, "batch ", 6) == 0)
        p += 6;
      else if (strncmp(p, "step ", 5) == 0)
        p += 5;
      else
        return 0;
      long long b = strtoll(p, &end, 10);
      if (end == p || b < 0) return 0;
      rec.batch = b;
      p = end;
      if (*p == '/') {
        long long t = strtoll(p + 1, &end, 10);
        if (end == p + 1 || t <= 0) return 0;
        rec.batches = t;
        p = end;
      }
      if (*p != ']') return 0;
    }
  } else if (*p == ']') {
    if (strncmp(skip_sp(p + 1), "train:", 6) == 0) { /* the epoch's training is over */
      rec.kind = FL_RUN_REC_EPOCH_END;
      *r = rec;
      return 1;
    }
    if (starts_val(skip_sp(p + 1)))
      rec.kind = FL_RUN_REC_VAL;
    else if (!starts_test(skip_sp(p + 1)))
      return 0;
    else
      rec.kind = FL_RUN_REC_TEST;
  } else {
    return 0;
  }
  p++;
  rec.loss = find_num(p, "loss");
  if (isnan(rec.loss)) rec.loss = find_num(p, "logloss");
  rec.acc = find_num(p, "acc1");
  if (isnan(rec.acc)) rec.acc = find_num(p, "acc");
  if (isnan(rec.acc)) rec.acc = find_num(p, "accuracy");
  rec.auc = find_num(p, "auc");
  if (rec.kind == FL_RUN_REC_VAL) { /* "... (step s)": its optimizer step */
    const char *s = strstr(p, "(step ");
    rec.batch = s ? strtoll(s + 6, NULL, 10) : -1;
  }
  if (isnan(rec.loss) && isnan(rec.acc) && isnan(rec.auc)) return 0;
  *r = rec;
  return 1;
}

/* ---- tracking ---- */

fl_status fl_run_progress_new(int epochs, double samples_per_batch, fl_run_progress **out) {
  fl_run_progress *p = calloc(1, sizeof *p);
  if (!p) return FL_ERR(FL_ENOMEM, "progress: out of memory");
  p->epochs = epochs;
  p->samples_per_batch = samples_per_batch;
  p->batches_per_epoch = -1;
  p->k = 1;
  *out = p;
  return FL_OK;
}

void fl_run_progress_free(fl_run_progress *p) {
  if (!p) return;
  free(p->rows);
  free(p);
}

fl_status fl_run_progress_feed(fl_run_progress *p, const fl_run_record *r, double now) {
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 256;
    row *rows = realloc(p->rows, cap * sizeof *rows);
    if (!rows) return FL_ERR(FL_ENOMEM, "progress: out of memory for %zu records", cap);
    p->rows = rows;
    p->cap = cap;
  }
  if (r->batches > 0) p->batches_per_epoch = r->batches;
  if (r->kind == FL_RUN_REC_PLAN) {
    if (r->epoch > 0) p->epochs = r->epoch;
    if (r->batch > 0) p->k = r->batch;
    return FL_OK;
  }
  if (r->kind == FL_RUN_REC_EPOCH_END) {
    p->ended = r->epoch + 1; /* the progress line shows the epoch whole */
    return FL_OK;
  }
  if (p->n == 0) p->t0 = now;
  if (r->epoch > p->cur_epoch) {
    /* A new epoch: the previous ones count in full. */
    int64_t per = p->batches_per_epoch > 0 ? p->batches_per_epoch : p->cur_max + 1;
    if (p->batches_per_epoch <= 0) p->batches_per_epoch = per;
    p->done_before = (int64_t)r->epoch * per;
    p->cur_epoch = r->epoch;
    p->cur_max = -1;
  }
  row w = {.test = r->kind == FL_RUN_REC_TEST || r->kind == FL_RUN_REC_VAL,
           .val = r->kind == FL_RUN_REC_VAL, .t = now - p->t0, .epoch = r->epoch,
           .batch = r->batch, .sps = NAN, .loss = r->loss, .acc = r->acc, .auc = r->auc};
  if (w.val) { /* at its optimizer step, in micro-batches */
    w.global = r->batch >= 0 ? r->batch * p->k : p->done_before + p->cur_max + 1;
    p->have_val = 1;
    p->last_val = w;
    p->have_ref = 0;
  } else if (w.test) {
    int64_t per = p->batches_per_epoch > 0 ? p->batches_per_epoch : p->cur_max + 1;
    w.global = (int64_t)(r->epoch + 1) * per;
    p->have_test = 1;
    p->last_test = w;
    p->have_ref = 0; /* evaluation time is not training throughput */
  } else {
    if (r->batch > p->cur_max) p->cur_max = r->batch;
    w.global = p->done_before + r->batch + 1;
    /* Lines that arrive together (a burst from a buffered pipe) say
     * nothing about speed: measure over at least MIN_RATE_INTERVAL. */
    if (!p->have_ref) {
      p->ref_t = now;
      p->ref_global = w.global;
      p->have_ref = 1;
    } else if (now - p->ref_t >= MIN_RATE_INTERVAL && w.global > p->ref_global) {
      double inst = (double)(w.global - p->ref_global) * p->samples_per_batch / (now - p->ref_t);
      p->rate = p->rate > 0 ? 0.7 * p->rate + 0.3 * inst : inst;
      w.sps = p->rate;
      p->ref_t = now;
      p->ref_global = w.global;
    }
  }
  p->rows[p->n++] = w;
  return FL_OK;
}

size_t fl_run_progress_count(const fl_run_progress *p) { return p->n; }

int fl_run_progress_last_test(const fl_run_progress *p, int *epoch, double *loss, double *acc) {
  if (!p->have_test) return 0;
  *epoch = p->last_test.epoch;
  *loss = p->last_test.loss;
  *acc = p->last_test.acc;
  return 1;
}

double fl_run_progress_last_auc(const fl_run_progress *p) {
  return p->have_test ? p->last_test.auc : NAN;
}

static void fmt_duration(char *out, size_t cap, double s) {
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(out, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else if (t >= 60)
    snprintf(out, cap, "%ldm%02lds", t / 60, t % 60);
  else
    snprintf(out, cap, "%lds", t);
}

/* Append to out[cap] at *len. */
static void put(char *out, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *out, size_t cap, size_t *len, const char *fmt, ...) {
  if (*len >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len += (size_t)n;
  if (*len >= cap) *len = cap - 1;
}

/* An evaluation's figure: "  test acc A (epoch e)", auc for binary
 * targets, the loss when it has neither. */
static void put_eval(char *out, size_t cap, size_t *len, const char *what, const row *w) {
  if (!isnan(w->acc))
    put(out, cap, len, "  %s acc %.4f (epoch %d)", what, w->acc, w->epoch + 1);
  else if (!isnan(w->auc))
    put(out, cap, len, "  %s auc %.4f (epoch %d)", what, w->auc, w->epoch + 1);
  else if (w->val && !isnan(w->loss))
    put(out, cap, len, "  %s loss %.4f (epoch %d)", what, w->loss, w->epoch + 1);
}

char *fl_run_progress_line(const fl_run_progress *p, char *out, size_t cap) {
  size_t len = 0;
  out[0] = '\0';
  const row *last = NULL; /* last training record */
  for (size_t i = p->n; i-- > 0;)
    if (!p->rows[i].test) {
      last = &p->rows[i];
      break;
    }
  if (!last && !p->have_test) return out;
  int epoch = last ? last->epoch : p->last_test.epoch;
  if (p->epochs > 0)
    put(out, cap, &len, "epoch %d/%d", epoch + 1, p->epochs);
  else
    put(out, cap, &len, "epoch %d", epoch + 1);
  if (last) {
    int64_t per = p->batches_per_epoch;
    /* lines come every log_interval batches: the epoch's end says it is whole */
    int whole = per > 0 && p->ended == last->epoch + 1;
    int64_t shown = whole ? per : last->batch + 1;
    int64_t global = whole ? (int64_t)(last->epoch + 1) * per : last->global;
    if (per > 0)
      put(out, cap, &len, "  step %lld/%lld (%d%%)", (long long)shown, (long long)per,
          (int)(100 * shown / per));
    else
      put(out, cap, &len, "  step %lld", (long long)shown);
    if (p->rate > 0) {
      put(out, cap, &len, "  %.0f samples/s", p->rate);
      if (per > 0 && p->epochs > 0) {
        int64_t left = (int64_t)p->epochs * per - global;
        char eta[32];
        fmt_duration(eta, sizeof eta, left > 0 ? (double)left * p->samples_per_batch / p->rate : 0);
        put(out, cap, &len, "  ETA %s", eta);
      }
    }
    if (!isnan(last->loss)) put(out, cap, &len, "  loss %.4f", last->loss);
    if (!isnan(last->acc)) put(out, cap, &len, "  acc %.4f", last->acc);
  }
  if (p->have_val) put_eval(out, cap, &len, "val", &p->last_val);
  if (p->have_test) put_eval(out, cap, &len, "test", &p->last_test);
  return out;
}

/* ---- outputs ---- */

static void put_num(FILE *f, double v) {
  if (!isnan(v)) fprintf(f, "%.6g", v);
}

fl_status fl_run_progress_write_csv(const fl_run_progress *p, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return FL_ERR(FL_EIO, "cannot create %s: %s", path, strerror(errno));
  fputs("kind,time_s,epoch,batch,global_batch,samples_per_s,loss,acc,auc,val_loss,val_acc,"
        "val_auc\n", f);
  for (size_t i = 0; i < p->n; i++) {
    const row *w = &p->rows[i];
    fprintf(f, "%s,%.3f,%d,", w->val ? "val" : w->test ? "test" : "train", w->t, w->epoch);
    if (!w->test) fprintf(f, "%lld", (long long)w->batch);
    fprintf(f, ",%lld,", (long long)w->global);
    put_num(f, w->sps);
    fputs(w->val ? ",,,," : ",", f); /* a validation's figures go in the val_ columns */
    put_num(f, w->loss);
    fputc(',', f);
    put_num(f, w->acc);
    fputc(',', f);
    put_num(f, w->auc);
    fputs(w->val ? "\n" : ",,,\n", f);
  }
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) return FL_ERR(FL_EIO, "writing %s failed: %s", path, strerror(errno));
  return FL_OK;
}

/* CSV columns. */
#define CSV_FIELDS 12
#define CSV_VAL_LOSS 9

/* Copy the CSV's rows of one kind into a gnuplot datablock (x, loss, acc:
 * the val_ columns for validations). */
static int datablock(FILE *gp, FILE *csv, const char *name, const char *kind) {
  char line[512];
  int rows = 0;
  rewind(csv);
  fprintf(gp, "$%s << EOD\n", name);
  while (fgets(line, sizeof line, csv)) {
    char *f[CSV_FIELDS];
    int n = 0;
    /* strtok would merge empty fields: split by hand. */
    for (char *s = line; n < CSV_FIELDS;) {
      f[n++] = s;
      s = strpbrk(s, ",\n");
      if (!s) break;
      char c = *s;
      *s++ = '\0';
      if (c == '\n') break;
    }
    if (n < CSV_FIELDS || strcmp(f[0], kind) != 0) continue;
    const int c = strcmp(kind, "val") ? 6 : CSV_VAL_LOSS;
    fprintf(gp, "%s %s %s\n", f[4], *f[c] ? f[c] : "NaN", *f[c + 1] ? f[c + 1] : "NaN");
    rows++;
  }
  fputs("EOD\n", gp);
  return rows;
}

fl_status fl_run_plot(const char *csv_path, const char *png_path, const char *gp_path) {
  FILE *csv = fopen(csv_path, "r");
  if (!csv) return FL_ERR(FL_EIO, "cannot read %s: %s", csv_path, strerror(errno));
  FILE *gp = fopen(gp_path, "w");
  if (!gp) {
    int e = errno;
    fclose(csv);
    return FL_ERR(FL_EIO, "cannot create %s: %s", gp_path, strerror(e));
  }
  fputs("# Written by flotilla-run: the curve of the run, from metrics.csv.\n"
        "# Redraw with: gnuplot curve.gp\n", gp);
  int ntrain = datablock(gp, csv, "train", "train");
  int ntest = datablock(gp, csv, "test", "test");
  int nval = datablock(gp, csv, "val", "val");
  fclose(csv);
  fprintf(gp,
          "set terminal png size 960,540\n"
          "set output '%s'\n"
          "set title 'Flotilla: loss and accuracy'\n"
          "set xlabel 'step (global batches)'\n"
          "set ylabel 'loss'\n"
          "set y2label 'accuracy'\n"
          "set ytics nomirror\n"
          "set y2tics\n"
          "set y2range [0:1]\n"
          "set grid\n"
          "set key below horizontal\n",
          png_path);
  const char *sep = "plot ";
  if (ntrain) {
    fprintf(gp, "%s$train using 1:2 with lines lw 2 title 'train loss', "
                "$train using 1:3 axes x1y2 with lines title 'train acc'", sep);
    sep = ", ";
  }
  if (ntest) {
    fprintf(gp, "%s$test using 1:2 with linespoints pt 7 title 'test loss', "
                "$test using 1:3 axes x1y2 with linespoints pt 7 lw 2 title 'test acc'", sep);
    sep = ", ";
  }
  if (nval)
    fprintf(gp, "%s$val using 1:2 with linespoints pt 5 title 'val loss', "
                "$val using 1:3 axes x1y2 with linespoints pt 5 title 'val acc'", sep);
  if (!ntrain && !ntest && !nval) fputs("set label 'no training records' at graph 0.4,0.5\nplot NaN notitle", gp);
  fputc('\n', gp);
  int bad = ferror(gp);
  if (fclose(gp) != 0 || bad) return FL_ERR(FL_EIO, "writing %s failed", gp_path);

  pid_t pid;
  char *argv[] = {"gnuplot", (char *)gp_path, NULL};
  int rc = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
  if (rc == ENOENT) {
    FL_LOGW("gnuplot is missing, so no %s (apt-get install gnuplot-nox); the data is in %s",
            png_path, csv_path);
    return FL_ENOTFOUND;
  }
  if (rc != 0) return FL_ERR(FL_EIO, "cannot run gnuplot: %s", strerror(rc));
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return FL_ERR(FL_EIO, "waiting for gnuplot: %s", strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return FL_ERR(FL_EIO, "gnuplot %s failed (status %d)", gp_path, status);
  return FL_OK;
}
