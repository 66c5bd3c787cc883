/* gpu_bundle_main.c - the main of each executable of the GPU bundle (make
 * gpu-bundle).  Programs that need the same shared libraries are linked into
 * one file, so that the static copies of OpenBLAS, gRPC and the rest are
 * there once and the bundle stays within its size budget.
 * deploy/gpu-bundle.sh renames each program's main to its own symbol and
 * compiles this file with two macros: FL_BUNDLE_DECLS declares those
 * symbols, FL_BUNDLE_ROWS lists {name, symbol}.  `EXE NAME ARGS...` runs
 * program NAME with argv[0] = NAME and returns its status.  A program written as
 * `int main(void)` is called with (argc, argv) too: the x86-64 calling
 * convention ignores the arguments it does not read. */
#include <stdio.h>
#include <string.h>

typedef struct {
  const char *name;
  int (*main)(int, char **);
} bundle_prog;

FL_BUNDLE_DECLS

static const bundle_prog progs[] = {FL_BUNDLE_ROWS};

int main(int argc, char **argv) {
  const size_t n = sizeof progs / sizeof progs[0];
  if (argc >= 2)
    for (size_t i = 0; i < n; i++)
      if (strcmp(argv[1], progs[i].name) == 0) return progs[i].main(argc - 1, argv + 1);
  fprintf(stderr, "usage: %s PROGRAM [ARGS...]: runs one of the programs linked in here:",
          argv[0]);
  for (size_t i = 0; i < n; i++) fprintf(stderr, " %s", progs[i].name);
  fprintf(stderr, "\n");
  return 2;
}
