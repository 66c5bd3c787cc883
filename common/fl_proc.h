/* fl_proc.h - process set-up shared by flotilla-trainer and
 * flotilla-pserver, done first thing in main:
 *   - the soft RLIMIT_NOFILE is raised to the hard limit (a pserver with
 *     many trainers holds a descriptor per connection; out of descriptors,
 *     accept fails with EMFILE inside gRPC) and the limit is logged;
 *   - a child of flotilla-run dies with it: flotilla-run puts its pid in
 *     FLOTILLA_LAUNCHER_PID, and the child asks the kernel for SIGKILL when
 *     its parent exits (PR_SET_PDEATHSIG), then checks that the parent is
 *     still that pid (it may have died before the request).
 * Also the --version text of the three programs. */
#ifndef FL_PROC_H
#define FL_PROC_H

#include <stddef.h>
#include <stdio.h>

#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Both of the above.  FL_ECLOSED (logged) when the launcher is already
 * gone: the caller exits.  FL_EINVAL (logged) for a malformed
 * FLOTILLA_LAUNCHER_PID. */
fl_status fl_proc_init(void);

/* The soft limit on open files after fl_proc_init (0 before). */
size_t fl_proc_max_files(void);

/* --version: "<program> <version>" and the features this build has (CUDA,
 * NCCL, TLS), onto out. */
void fl_print_version(FILE *out, const char *program);

#ifdef __cplusplus
}
#endif
#endif
