/* proc.c - process set-up of the daemons: open-file limit and dying with
 * flotilla-run (see fl_proc.h). */
#include <config.h>

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fl_log.h"
#include "fl_proc.h"

static size_t g_max_files;

size_t fl_proc_max_files(void) { return g_max_files; }

void fl_print_version(FILE *out, const char *program) {
  fprintf(out, "%s %s\n", program, PACKAGE_VERSION);
#ifdef FL_HAVE_CUDA
  fputs("  CUDA: yes (train.device: gpu)\n", out);
#else
  fputs("  CUDA: no (configured --without-cuda or no nvcc)\n", out);
#endif
#ifdef FL_HAVE_NCCL
  fputs("  NCCL: yes (FLOTILLA_COLLECTIVE_BACKEND=nccl)\n", out);
#else
  fputs("  NCCL: no\n", out);
#endif
  /* gRPC's SSL credentials are always built in (libgrpc) */
  fputs("  TLS: yes (cluster.tls, PServer mode)\n", out);
}

static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    FL_LOGW("getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
    return;
  }
  rlim_t was = rl.rlim_cur;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      FL_LOGW("cannot raise the open-file limit from %llu to %llu: %s",
              (unsigned long long)was, (unsigned long long)rl.rlim_max, strerror(errno));
      rl.rlim_cur = was;
    }
  }
  g_max_files = rl.rlim_cur == RLIM_INFINITY ? (size_t)-1 : (size_t)rl.rlim_cur;
  if (rl.rlim_cur != was)
    FL_LOGI("open files: limit raised from %llu to %llu (the hard limit)", (unsigned long long)was,
            (unsigned long long)rl.rlim_cur);
  else
    FL_LOGI("open files: limit %llu (the hard limit)", (unsigned long long)rl.rlim_cur);
}

fl_status fl_proc_init(void) {
  raise_nofile();
  const char *e = getenv("FLOTILLA_LAUNCHER_PID");
  if (!e || !*e) return FL_OK;
  char *end;
  errno = 0;
  long pid = strtol(e, &end, 10);
  if (errno || *end || pid <= 1)
    return FL_ERR(FL_EINVAL, "FLOTILLA_LAUNCHER_PID=%s: not a process id", e);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
    return FL_ERR(FL_EIO, "prctl(PR_SET_PDEATHSIG): %s", strerror(errno));
  /* The launcher may have died between our fork and the request. */
  if ((long)getppid() != pid)
    return FL_ERR(FL_ECLOSED, "flotilla-run (pid %ld) is gone: exiting", pid);
  return FL_OK;
}
