/* fl_chunks.h - the data of an elastic PServer job (async or geo) shared by
 * whichever trainers are live: each epoch is cut into chunks that trainers
 * claim one at a time on etcd (trainer/elastic_chunks.c).
 *
 * flotilla-run's elastic agent (deploy/run_elastic.c) sets
 * FLOTILLA_ELASTIC_CHUNKS="<chunks per epoch> <lease_s> <etcd endpoints>
 * <key prefix>"; without it there is no chunk mode and the loop shards by
 * rank as before.  The epoch is the loader's permutation of every sample
 * (a world of one), or a stream's files in order; chunk c of C is steps
 * [c*S/C, (c+1)*S/C) of its S steps, i.e. the samples at those positions,
 * in the loader's order (a stream: that range of its lines, sought,
 * fl_stream_range).  The
 * order in which a trainer tries the chunks is shuffled per epoch from the
 * job's seed.
 *
 * Keys, under the prefix: e<epoch>/c<chunk> = the claimer, created only
 * while neither it nor e<epoch>/c<chunk>/done exists, under the trainer's
 * own lease; e<epoch>/c<chunk>/done = the trainer that finished it, no
 * lease.  A trainer that dies loses its claims with its lease (after
 * lease_s) and another trainer trains that chunk again from its start: the
 * steps the dead one pushed of it count twice (the at-least-once window).
 * A trainer stopped by a signal leaves instead (fl_chunks_leave): its
 * chunk's e<epoch>/c<chunk>/at = the steps of it trained, no lease, put
 * while its claim still holds, so the next claimer goes on at that step.
 * Every other sample is trained once per epoch.  An epoch ends when every
 * chunk is done: a trainer with nothing left to claim waits for that (and
 * takes a chunk freed meanwhile).
 *
 * train.max_steps (fl_chunks_limit) bounds the job, not a trainer: its
 * steps are counted in the epochs' order, epoch e's step s being step
 * e * steps + s of the job, and the steps from max_steps on are in no
 * chunk (a chunk across the bound ends there; later chunks and epochs
 * count as done), so the job trains max_steps steps between whichever
 * trainers are live, as a world of one would, and every trainer stops
 * when they are done. */
#ifndef FL_CHUNKS_H
#define FL_CHUNKS_H

#include <stdint.h>

#include "fl_status.h"

typedef struct fl_chunks fl_chunks;

/* Chunk mode from the environment: *out NULL when FLOTILLA_ELASTIC_CHUNKS is
 * unset.  steps: steps per epoch of the whole data (a world of one);
 * step_samples: samples per step; seed: the job's.  Grants the trainer's
 * lease and starts its keeper.  The caller owns *out (fl_chunks_close). */
fl_status fl_chunks_open(int64_t steps, int64_t step_samples, uint64_t seed, fl_chunks **out);

/* Bound the job to its first max_steps steps (0: every epoch whole);
 * logged once.  Before the first fl_chunks_first_epoch. */
void fl_chunks_limit(fl_chunks *c, int64_t max_steps);

/* The epochs the job trains of `epochs`: fewer when max_steps ends it
 * earlier (its last one then partly). */
int64_t fl_chunks_epochs(const fl_chunks *c, int64_t epochs);

/* The first epoch in [from, epochs) whose chunks are not all done, or
 * epochs when every one is (a late joiner starts there). */
fl_status fl_chunks_first_epoch(fl_chunks *c, int64_t from, int64_t epochs, int64_t *epoch);

/* Before each training step of epoch: *more 1 when there is a step to
 * train, 0 when every chunk of the epoch is done.  When the step begins a
 * newly claimed chunk, *first_sample gets the chunk's first position in the
 * epoch's permutation (the loader restarts there), else -1.  Marks the
 * previous chunk done when its steps are over.  Waits (polling etcd) while
 * other trainers hold the epoch's last chunks. */
fl_status fl_chunks_next_step(fl_chunks *c, int64_t epoch, int64_t *first_sample, int *more);

/* Steps of the claimed chunk not yet begun (0 when none is claimed): 0
 * before fl_chunks_next_step means that call may mark the chunk done, so a
 * caller with pushes in flight waits for them first. */
int64_t fl_chunks_left(const fl_chunks *c);

/* A trainer stopping between steps (a signal): the chunk being trained
 * marked done when its steps are over, else its at mark put (its steps
 * begun are trained: a caller with pushes in flight waits for them
 * first), so that the next claimer goes on at the next step.  Then
 * fl_chunks_close frees the claim. */
fl_status fl_chunks_leave(fl_chunks *c);

/* Stop the keeper and revoke the lease (claims not done are freed). */
void fl_chunks_close(fl_chunks *c);

#endif
