/* args.c - the command-line parser of the three programs (fl_args.h). */
#include <config.h>

#include <stdio.h>
#include <string.h>

#include "fl_args.h"
#include "fl_cluster.h"
#include "fl_log.h"

#define ID_BASE 1000 /* getopt values of long options: ID_BASE + index in names */

size_t fl_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b), row[65];
  if (la > 64 || lb > 64) return 99;
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t cur = row[j];
      size_t sub = prev + (a[i - 1] != b[j - 1]);
      size_t best = row[j] + 1 < row[j - 1] + 1 ? row[j] + 1 : row[j - 1] + 1;
      row[j] = sub < best ? sub : best;
      prev = cur;
    }
  }
  return row[lb];
}

static void add(fl_args *a, const char *name, int value, int id) {
  size_t k = a->n_names;
  if (k >= FL_ARGS_MAX_OPTS * 2) return;
  a->names[k] = name;
  a->ids[k] = id;
  snprintf(a->kebab[k], sizeof a->kebab[k], "%s", name);
  for (char *p = a->kebab[k]; *p; p++)
    if (*p == '_') *p = '-';
  size_t n = 0;
  while (a->lo[n].name) n++;
  a->lo[n] = (struct option){name, value ? required_argument : no_argument, NULL,
                             ID_BASE + (int)k};
  if (strcmp(a->kebab[k], name))
    a->lo[n + 1] = (struct option){a->kebab[k], value ? required_argument : no_argument, NULL,
                                   ID_BASE + (int)k};
  a->n_names = k + 1;
}

void fl_args_init(fl_args *a, int argc, char **argv) {
  a->argc = argc;
  a->argv = argv;
  a->started = 0;
  a->n_names = 0;
  memset(a->lo, 0, sizeof a->lo);
  for (const fl_arg_opt *o = a->opts; o && o->name; o++) add(a, o->name, o->value, o->id);
  if (a->cluster) {
    for (size_t i = 0; fl_cluster_flag_name(i); i++)
      add(a, fl_cluster_flag_name(i), 1, FL_ARGS_CLUSTER);
  }
}

/* "--max-steps=3" -> "max_steps" into out. */
static void bare(const char *arg, char *out, size_t cap) {
  size_t n = 0;
  arg += strspn(arg, "-");
  for (; *arg && *arg != '=' && n + 1 < cap; arg++) out[n++] = *arg == '-' ? '_' : *arg;
  out[n] = 0;
}

const char *fl_args_suggest(const fl_args *a, const char *arg) {
  static _Thread_local char buf[64];
  char want[64];
  size_t best = 99, bi = 0;
  bare(arg, want, sizeof want);
  if (!want[0]) return NULL;
  for (size_t k = 0; k < a->n_names; k++) {
    size_t d = fl_edit_distance(want, a->names[k]);
    /* a prefix of a longer name is close too ("--max" -> --max_steps) */
    if (strncmp(a->names[k], want, strlen(want)) == 0 && strlen(want) >= 3) d = 1;
    if (d < best) best = d, bi = k;
  }
  size_t len = strlen(want);
  if (best > (len <= 4 ? 1 : len <= 8 ? 2 : 3)) return NULL;
  snprintf(buf, sizeof buf, "--%s", a->names[bi]);
  return buf;
}

static int unknown(fl_args *a, const char *arg) {
  char msg[160];
  const char *s = strncmp(arg, "--", 2) == 0 ? fl_args_suggest(a, arg) : NULL;
  snprintf(msg, sizeof msg, a->unknown_fmt ? a->unknown_fmt : "unknown argument %s", arg);
  if (s) FL_LOGE("%s; did you mean %s? (see %s --help)", msg, s, a->prog);
  else FL_LOGE("%s (see %s --help)", msg, a->prog);
  return FL_ARGS_ERROR;
}

int fl_args_next(fl_args *a) {
  char optstring[4] = ":";
  int li = -1, ch;
  if (a->short_help) strcat(optstring, "h");
  if (!a->started) {
    optind = 0; /* glibc: start over, whatever parsed before */
    opterr = 0;
    a->started = 1;
  }
  a->given = a->name = a->val = NULL;
  ch = getopt_long(a->argc, a->argv, optstring, a->lo, &li);
  if (ch == -1) return FL_ARGS_END;
  if (ch == 'h') {
    a->given = "-h";
    a->name = "help";
    return a->short_help;
  }
  if (ch == ':') {
    FL_LOGE("%s needs a value (see %s --help)", a->argv[optind - 1], a->prog);
    return FL_ARGS_ERROR;
  }
  if (ch == '?') {
    const char *arg = a->argv[optind - 1];
    if (optopt >= ID_BASE) { /* a known option that takes no value, given one */
      FL_LOGE("%s takes no value (see %s --help)", arg, a->prog);
      return FL_ARGS_ERROR;
    }
    if (optopt && optopt < 128 && strncmp(arg, "--", 2)) {
      snprintf(a->given_buf, sizeof a->given_buf, "-%c", optopt);
      arg = a->given_buf;
    }
    return unknown(a, arg);
  }
  /* A long option: where it stood, and whether it was spelled out in full
   * (getopt_long also takes unique prefixes; we do not). */
  size_t k = (size_t)(ch - ID_BASE);
  const char *arg = a->argv[optind - 1];
  if (optarg && optarg == a->argv[optind - 1] && optind >= 2) arg = a->argv[optind - 2];
  const char *eq = strchr(arg, '=');
  size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
  snprintf(a->given_buf, sizeof a->given_buf, "%.*s", (int)n, arg);
  a->given = a->given_buf;
  if (li < 0 || strcmp(a->given_buf + 2, a->lo[li].name) != 0) return unknown(a, arg);
  a->name = a->names[k];
  a->val = optarg;
  return a->ids[k];
}

int fl_args_rest(const fl_args *a) { return optind < 1 ? 1 : (optind > a->argc ? a->argc : optind); }
