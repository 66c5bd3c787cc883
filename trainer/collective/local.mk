# Collective engine: backends, hierarchical, buckets, rendezvous, and the
# collective mode of flotilla-trainer (sync_collective.c).
libfltrainer_la_SOURCES += trainer/collective/fl_coll.h trainer/collective/coll_internal.h \
	trainer/collective/coll.c trainer/collective/rendezvous.c trainer/collective/reduce.c \
	trainer/collective/tcp.c trainer/collective/shm.c trainer/collective/hier.c \
	trainer/collective/coll_bucket.h trainer/collective/bucket.c \
	trainer/collective/fl_sync_collective.h trainer/collective/sync_collective.c
if HAVE_NCCL
libfltrainer_la_SOURCES += trainer/collective/nccl.c
endif
