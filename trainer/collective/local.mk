# Collective engine: backends, hierarchical, buckets, rendezvous.
libfltrainer_la_SOURCES += trainer/collective/fl_coll.h trainer/collective/coll_internal.h \
	trainer/collective/coll.c trainer/collective/rendezvous.c trainer/collective/reduce.c \
	trainer/collective/tcp.c trainer/collective/shm.c trainer/collective/hier.c
if HAVE_NCCL
libfltrainer_la_SOURCES += trainer/collective/nccl.c
endif
