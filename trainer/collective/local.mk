# Collective engine: backends, hierarchical, buckets, rendezvous; and the
# collective mode of flotilla-trainer that drives it, which lives in
# trainer/ (sync_collective.c) beside the other modes, so that the engine
# knows nothing of models or of the trainer (tests/unit/test_layering.sh).
libfltrainer_la_SOURCES += trainer/collective/fl_coll.h trainer/collective/coll_internal.h \
	trainer/collective/coll.c trainer/collective/rendezvous.c trainer/collective/reduce.c \
	trainer/collective/algo.c trainer/collective/tune.c \
	trainer/collective/tcp.c trainer/collective/shm.c trainer/collective/shm_xport.c \
	trainer/collective/hier.c \
	trainer/collective/coll_bucket.h trainer/collective/bucket.c \
	trainer/fl_sync_collective.h trainer/sync_collective.c
if HAVE_NCCL
libfltrainer_la_SOURCES += trainer/collective/nccl.c
endif
