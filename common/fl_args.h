/* fl_args.h - the one command-line parser of flotilla-trainer,
 * flotilla-pserver and flotilla-run, over getopt_long.
 *
 * A program lists its options once (snake_case name, whether it takes a
 * value, an id) and calls fl_args_next until it returns FL_ARGS_END.
 *   - every long option is accepted as --snake_case and --kebab-case, with
 *     its value after '=' or as the next argument; --help shows snake_case;
 *   - the cluster flags (fl_cluster.h: --trainer_id=..., one per FLOTILLA_*
 *     variable) come back as FL_ARGS_CLUSTER when the program takes them;
 *   - no abbreviations: getopt_long's unique-prefix matching is refused, so
 *     an option means the same whatever options are added later;
 *   - an unknown option gets the closest known one: "unknown argument
 *     '--max_step'; did you mean --max_steps? (see flotilla-trainer --help)".
 * Errors are logged (FL_LOGE) and return FL_ARGS_ERROR; the program exits 2.
 * Positional arguments are left, in order, from fl_args_rest() on. */
#ifndef FL_ARGS_H
#define FL_ARGS_H

#include <getopt.h>
#include <stddef.h>

#define FL_ARGS_MAX_OPTS 64

typedef struct fl_arg_opt {
  const char *name; /* snake_case, without dashes; NULL ends a table */
  int value;        /* 1: takes a value */
  int id;           /* > 0: what fl_args_next returns for it */
} fl_arg_opt;

enum { FL_ARGS_END = 0, FL_ARGS_ERROR = -1, FL_ARGS_CLUSTER = -2 };

typedef struct fl_args {
  /* Set before the first fl_args_next (fl_args_init fills the rest). */
  const char *prog;        /* "flotilla-trainer": messages say "see PROG --help" */
  const char *unknown_fmt; /* one %s, the argument as given: "unknown option %s" */
  const fl_arg_opt *opts;  /* the program's options, NULL-terminated */
  int cluster;             /* 1: the cluster flags too (FL_ARGS_CLUSTER) */
  int short_help;          /* an id: -h returns it (0: -h is unknown) */
  /* After each fl_args_next: the option as given ("--max-steps"), its
   * canonical name ("max_steps") and value (NULL when it takes none). */
  const char *given;
  const char *name;
  const char *val;
  /* internal */
  int argc;
  char **argv;
  int started;
  size_t n_names;
  const char *names[FL_ARGS_MAX_OPTS * 2]; /* canonical, by option index */
  int ids[FL_ARGS_MAX_OPTS * 2];
  char kebab[FL_ARGS_MAX_OPTS * 2][48];
  struct option lo[FL_ARGS_MAX_OPTS * 4 + 1];
  char given_buf[96];
} fl_args;

/* argc: how many of argv to parse (flotilla-run stops at "--"). */
void fl_args_init(fl_args *a, int argc, char **argv);

/* The next option's id, FL_ARGS_CLUSTER (name and val set), FL_ARGS_END,
 * or FL_ARGS_ERROR (logged). */
int fl_args_next(fl_args *a);

/* After FL_ARGS_END: the index in argv of the first positional argument
 * (they are moved behind the options, in their order). */
int fl_args_rest(const fl_args *a);

/* Levenshtein distance of two short strings (99 past 64 bytes). */
size_t fl_edit_distance(const char *a, const char *b);

/* The known option closest to `arg` ("--max_step", "--max-steps=3"), as
 * "--name", or NULL when none is close. */
const char *fl_args_suggest(const fl_args *a, const char *arg);

#endif
