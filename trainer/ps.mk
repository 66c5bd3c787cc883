# PServer mode on the trainer: the PS client, the ps-mode fl_sync, and the
# CTR model (sparse embeddings through the pservers).
libfltrainer_la_SOURCES += trainer/fl_ps_client.h trainer/ps_client.c trainer/sync_ps.c \
	trainer/model_ctr.c trainer/model_sparse_graph.c
libfltrainer_la_LIBADD += $(GRPC_LIBS) $(PROTOBUFC_LIBS)
