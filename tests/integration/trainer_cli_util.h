/* trainer_cli_util.h - what the tests that run the flotilla-trainer binary
 * share: a scratch directory per test, and a runner that starts the binary
 * with a clean FLOTILLA_* environment and captures its output.
 *
 * Header-only, for test programs: include it once, in one .c file.  The
 * globals below are that program's; cli_setup/cli_teardown go in a Check
 * fixture. */
#ifndef FL_TRAINER_CLI_UTIL_H
#define FL_TRAINER_CLI_UTIL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256];               /* this test's scratch directory */
static char g_bin[512];               /* the flotilla-trainer binary */
static char g_out[1 << 16], g_err[1 << 16]; /* the last run's stdout/stderr */
static unsigned g_run_limit_s = 120;  /* a run is killed (and fails) after this */

/* Make g_dir as /tmp/<tag>.XXXXXX and find the binary through FL_BUILDDIR. */
static void cli_setup_dir(const char *tag) {
  const char *b = getenv("FL_BUILDDIR");
  snprintf(g_bin, sizeof g_bin, "%s/flotilla-trainer", b ? b : ".");
  snprintf(g_dir, sizeof g_dir, "/tmp/%s.XXXXXX", tag);
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void cli_teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* buf (cap bytes) = the start of the file at path, NUL-terminated; empty
 * when there is no such file. */
static void cli_slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  size_t n = 0;
  if (f) {
    n = fread(buf, 1, cap - 1, f);
    fclose(f);
  }
  buf[n] = '\0';
}

/* Run flotilla-trainer with args (NULL-terminated) and no FLOTILLA_* in
 * its environment except FLOTILLA_LOG_LEVEL=info; stdout and stderr land in
 * g_out / g_err.  Returns the exit status (killed after g_run_limit_s:
 * fails). */
static int run(const char *const *args) {
  char op[300], ep[300];
  const char *argv[32];
  int n = 0;
  snprintf(op, sizeof op, "%s/stdout", g_dir);
  snprintf(ep, sizeof ep, "%s/stderr", g_dir);
  argv[n++] = g_bin;
  for (; args[n - 1] && n < 31; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    static const char *const vars[] = {"ROLE", "MODE", "TRAINER_ID", "TRAINERS_NUM",
                                       "TRAINER_ENDPOINTS", "CURRENT_ENDPOINT",
                                       "PSERVERS_IP_PORT_LIST", "PSERVER_ID", "LOCAL_RANK",
                                       "LOCAL_SIZE", "SELECTED_GPUS", "TOKEN", "TOKEN_FILE",
                                       "LOG_DIR", "CHECKPOINT_DIR"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
      char name[64];
      snprintf(name, sizeof name, "FLOTILLA_%s", vars[i]);
      unsetenv(name);
    }
    setenv("FLOTILLA_LOG_LEVEL", "info", 1);
    if (!freopen(op, "w", stdout) || !freopen(ep, "w", stderr)) _exit(126);
    alarm(g_run_limit_s);
    execv(g_bin, (char *const *)argv);
    _exit(127);
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  cli_slurp(op, g_out, sizeof g_out);
  cli_slurp(ep, g_err, sizeof g_err);
  ck_assert_msg(WIFEXITED(status), "flotilla-trainer killed by signal %d; stderr:\n%s",
                WIFSIGNALED(status) ? WTERMSIG(status) : 0, g_err);
  return WEXITSTATUS(status);
}

#endif
