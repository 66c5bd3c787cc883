/* core_commit.c - sync steps applied on every server or on none.
 * A trainer that announces the commit protocol at Register (`commits`)
 * has its pushes of a step held (staged) until it commits the step, which
 * it does only once every server acknowledged all of those pushes; a sync
 * step applies once every counted trainer pushed and committed it
 * (core_modes.c all_counted_pushed, core_rows.c may_apply), so a trainer
 * killed between its pushes and its commits leaves the step applied
 * nowhere, or (killed among its commits) held whole on every server that
 * did not apply it yet: restarted, it finds that out at Register
 * (`trainer_staged`) and commits the step instead of computing it again.
 * Locking: the commit state is atomic (core_internal.h); psc_staged takes
 * each block's and table's lock in turn. */
#include <config.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>

#include "fl_log.h"
#include "core_internal.h"

/* Raise trainer t's committed mark to next; 1 when it rose. */
static int commit_mark(fl_ps_core *c, int t, int64_t next) {
  int64_t cur = atomic_load(&c->committed[t]);
  while (cur < next && !atomic_compare_exchange_weak(&c->committed[t], &cur, next)) {
  }
  return cur < next;
}

int psc_set_commits(fl_ps_core *c, int t, int on, int64_t committed) {
  uint64_t bit = 1ULL << (t % 64);
  if (on) atomic_fetch_or(&c->commits[t / 64], bit);
  else atomic_fetch_and(&c->commits[t / 64], ~bit);
  return c->ops->mode == FL_PS_SYNC && on && commit_mark(c, t, committed);
}

fl_status fl_ps_core_commit(fl_ps_core *c, int32_t t, int64_t next) {
  fl_status st = psc_enter(c, t);
  if (st != FL_OK) return st;
  if (next < 0 || next > FL_PS_MAX_STEP)
    return psc_bad(c, "trainer %d commits the steps below %" PRId64 ": not in [0, %" PRId64
                   "]; a trainer commits one past a step it pushed",
                   t, next, (int64_t)FL_PS_MAX_STEP);
  if (c->ops->mode == FL_PS_SYNC && commit_mark(c, t, next))
    psc_reevaluate(c); /* its held steps may apply now */
  return FL_OK;
}

/* Block b is past step or holds trainer t's push of it.  Takes b->mu. */
static int block_staged(ps_block *b, int t, int64_t step) {
  pthread_mutex_lock(&b->mu);
  int ok = b->step > step || (b->n_pend && b->pend_step == step && b->have[t]);
  pthread_mutex_unlock(&b->mu);
  return ok;
}

int psc_staged(fl_ps_core *c, int t, int64_t step) {
  int ok = 1;
  for (size_t i = 0; ok && i < c->n_my; i++) ok = block_staged(&c->blocks[i], t, step);
  for (size_t i = 0; ok && i < atomic_load(&c->n_tables); i++)
    ok = psc_rows_staged(&c->tables[i], t, step);
  return ok;
}
