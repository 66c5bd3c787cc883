# Data readers, the training loop, checkpoints, flotilla-trainer main.
libfltrainer_la_SOURCES += trainer/fl_data.h trainer/data_internal.h trainer/data.c \
	trainer/data_idx.c trainer/data_libsvm.c trainer/data_synth.c trainer/data_npy.c trainer/data_inputs.c \
	trainer/data_augment.c \
	trainer/fl_metrics_auc.h trainer/metrics_auc.c trainer/data_criteo.c trainer/data_stream.c \
	trainer/fl_trainer.h trainer/loop.c trainer/sync_local.c \
	trainer/loop_internal.h trainer/loop_sparse.c trainer/fl_sparse_model.h \
	trainer/loop_valid.c
# elastic ps: the epoch claimed chunk by chunk on etcd
libfltrainer_la_SOURCES += trainer/fl_chunks.h trainer/elastic_chunks.c

bin_PROGRAMS += flotilla-trainer
flotilla_trainer_SOURCES = trainer/main.c
flotilla_trainer_CFLAGS = $(FL_TRAINER_CFLAGS)
flotilla_trainer_LDADD = libfltrainer.la $(FL_LIBS)
